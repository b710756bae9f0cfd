//! Writing a set's stripes.
