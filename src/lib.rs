//! pagevault: throughput-first backup and restore for page-based databases.
//!
//! The library holds everything; `main.rs` only parses the command line and calls
//! one command of [`cmd`]. The floors and what each may import are in
//! docs/ARCHITECTURE.md.

pub mod cmd;
pub mod crypt;
pub mod device;
pub mod engine;
pub mod fault;
pub mod format;
pub mod interrupt;
pub mod ops;
pub mod par;
pub mod pg;
pub mod private_dir;
pub mod repo;
pub mod report;
pub mod set;
pub mod source;
pub mod sys;
pub mod target;
pub mod units;
