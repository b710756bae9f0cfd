//! Devices: where stripes go. A device knows nothing of pages or frames: it takes
//! bytes in order when writing and serves byte ranges when reading.

pub mod disk;
pub mod nul;
pub mod object;
mod staged;

use anyhow::Result;
use std::io;

/// One destination named on the command line.
pub trait Device: Send + Sync {
    /// How the device is shown to users (never with credentials).
    fn describe(&self) -> String;
    /// True for NUL: the backup is a benchmark and records nothing.
    fn is_discard(&self) -> bool {
        false
    }
    /// Starts writing a stripe; nothing is visible as a stripe before `commit`.
    fn create(&self, hint: &CreateHint) -> Result<Box<dyn StripeSink>>;
    /// Opens a finished stripe for reading.
    fn open(&self) -> Result<Box<dyn StripeSource>>;
    /// Opens version `version` of a finished stripe (the one its backup wrote, as a
    /// versioned store named it), and says what became of the stripe's name since.
    fn open_version(&self, version: &str) -> Result<(Box<dyn StripeSource>, Since)> {
        anyhow::bail!(
            "stripe '{}' is pinned to version '{}', but this device keeps no versions",
            self.describe(),
            version.escape_default()
        )
    }
    /// Memory the device itself buffers while writing a stripe (upload parts in flight).
    fn write_memory(&self, _hint: &CreateHint) -> u64 {
        0
    }
    /// Removes a committed stripe (a set that failed after some stripes committed).
    fn remove(&self) -> Result<()>;
}

/// What a device may want to know before a stripe is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateHint {
    /// The bytes the stripe is expected to hold (it may end up larger).
    pub expected_bytes: u64,
    /// MAXTRANSFERSIZE: the smallest unit worth sending at once.
    pub transfer_size: usize,
    /// Write a disk file with O_DIRECT where its file system allows it.
    pub direct: bool,
}

pub trait StripeSink: Send {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes the stripe durable and visible under its name; returns the version id a
    /// versioned store gave it (S3 `x-amz-version-id`, Azure `x-ms-version-id`).
    fn commit(self: Box<Self>) -> Result<Option<String>>;
    /// Removes whatever was written.
    fn abort(self: Box<Self>);
}

/// What became of a pinned stripe's name after its backup wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Since {
    /// Its newest version is still the pinned one.
    Same,
    /// Another version was put over it (its id, shown escaped).
    Replaced(String),
    /// It was deleted (in a versioned store: hidden behind a delete marker).
    Removed,
}

pub trait StripeSource: Send + Sync {
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The reader goes through the stripe in order from `offset` on: a source that
    /// reads ahead starts there, its first read included.
    fn reading_from(&self, _offset: u64) {}
}

/// Parses a DEVICE argument: `NUL`, `nul:`, `s3://BUCKET/KEY`, `azure://CONTAINER/BLOB`, `gs://BUCKET/KEY`,
/// or a file path.
pub fn parse(spec: &str, o: &object::StoreOptions) -> Result<Box<dyn Device>> {
    if spec.eq_ignore_ascii_case("nul") || spec.eq_ignore_ascii_case("nul:") {
        return Ok(Box::new(nul::Nul));
    }
    if let Some(loc) = object::parse(spec, o)? {
        return Ok(Box::new(object::ObjectDevice::new(loc)));
    }
    if let Some((scheme, _)) = spec.split_once("://") {
        anyhow::bail!(
            "device '{spec}': the {scheme}:// scheme is not supported; use a file path, NUL, s3://BUCKET/KEY, azure://CONTAINER/BLOB or gs://BUCKET/KEY"
        );
    }
    Ok(Box::new(disk::Disk::new(spec)))
}
