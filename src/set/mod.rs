//! Backup sets on their devices: writing every stripe (headers, commit all or remove
//! all) and reading them back (headers validated, manifest from any stripe), and
//! copying them into another repository as they are read and checked (copy.rs).

pub mod copy;
pub mod read;
pub mod rekey;
pub mod write;
