//! The verify use case.
