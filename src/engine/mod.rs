//! The pipeline: buffer pool, readers, compressors, stripe writers and their
//! statistics. It knows frames and buffers, not databases or stores.

pub mod adapt;
pub mod backup;
pub mod codec;
pub mod digests;
pub mod pool;
pub mod restore;
pub mod stats;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Compression and decompression threads by default: one per core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// An encrypted set's data key and its set id (part of every frame's associated data).
#[derive(Clone, Debug)]
pub struct Seal {
    pub dek: crate::crypt::DataKey,
    pub set_id: [u8; 16],
    /// Frames carry a CRC32C of their stored bytes besides the tag (method 1); new
    /// sets' frames do not (method 2: the tag detects damage as it detects forgery).
    pub crc: bool,
}

/// First error wins; every stage polls `aborted` and stops.
#[derive(Default)]
pub struct Abort {
    flag: AtomicBool,
    first: Mutex<Option<anyhow::Error>>,
}

impl Abort {
    pub fn aborted(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || crate::interrupt::received().is_some()
    }
    pub fn fail(&self, e: anyhow::Error) {
        let mut first = self.first.lock().unwrap();
        if first.is_none() {
            *first = Some(e);
        }
        self.flag.store(true, Ordering::Relaxed);
    }
    /// The first error; a signal counts as one, so a stopped run never looks finished.
    pub fn take(&self) -> Option<anyhow::Error> {
        let first = self.first.lock().unwrap().take();
        first.or_else(|| crate::interrupt::received().map(crate::interrupt::error))
    }
}
