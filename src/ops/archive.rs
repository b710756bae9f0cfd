//! The archive use case.
