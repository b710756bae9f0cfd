//! The restore use case.
