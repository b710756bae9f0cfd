//! Reading a set's stripes.
