//! The use cases, one file each (rustic_core's `commands/` is the model): each takes
//! an options struct and the progress counters and returns a report struct, which is
//! what `--json` serialises. They decide; `cmd/` parses and prints; the engine moves
//! bytes.

pub mod archive;
pub mod backup;
pub mod estimate;
pub mod expire;
pub mod restore;
pub mod tune;
pub mod verify;
