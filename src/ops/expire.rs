//! The expire use case.
