//! Backup sets on their devices: writing every stripe (headers, commit all or remove
//! all) and reading them back (headers validated, manifest from any stripe).

pub mod read;
pub mod rekey;
pub mod write;
