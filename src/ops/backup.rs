//! The backup use case.
