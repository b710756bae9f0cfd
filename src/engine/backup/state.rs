//! Every file of a backup run, flat: a byte of flags and a checksum slot a file. A
//! file's chunk digests are held only while some of its chunks are digested and others
//! are not (a sparse file's until the end of the run).

use super::ReadFile;
use crate::engine::digests::ChunkDigests;
use crate::format::manifest::{file_checksum, Checksum};
use anyhow::{anyhow, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

const VANISHED: u8 = 1;
const SHRANK: u8 = 2;
/// Every chunk digested: the checksum is in its slot.
const WHOLE: u8 = 4;
const LOCKS: usize = 256;

/// What a run did to each file of its plan, by plan index.
pub struct FileResults {
    flags: Vec<AtomicU8>,
    sums: Vec<[AtomicU64; 4]>,
    /// File index modulo their count: the digests of files not yet whole.
    in_flight: Box<[Mutex<HashMap<usize, ChunkDigests>>]>,
}

/// One file's result.
pub struct FileResult {
    pub checksum: Option<Checksum>,
    pub vanished: bool,
    /// The file was shorter when read than when planned: the rest reads as zeros.
    pub shrank: bool,
}

impl FileResults {
    pub(super) fn new(n: usize) -> FileResults {
        FileResults {
            flags: (0..n).map(|_| AtomicU8::new(0)).collect(),
            sums: (0..n).map(|_| Default::default()).collect(),
            in_flight: (0..LOCKS.min(n.max(1))).map(|_| Mutex::default()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.flags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    pub(super) fn set_vanished(&self, i: usize) {
        self.flags[i].fetch_or(VANISHED, Relaxed);
    }

    pub(super) fn set_shrank(&self, i: usize) {
        self.flags[i].fetch_or(SHRANK, Relaxed);
    }

    #[cfg(test)]
    pub(super) fn vanished(&self, i: usize) -> bool {
        self.flags[i].load(Relaxed) & VANISHED != 0
    }

    fn put(&self, i: usize, c: Checksum) {
        for (slot, part) in self.sums[i].iter().zip(c.0.chunks_exact(8)) {
            slot.store(u64::from_le_bytes(part.try_into().unwrap()), Relaxed);
        }
        self.flags[i].fetch_or(WHOLE, Relaxed);
    }

    /// Records the digest of chunk `chunk` of plan file `i`; a file read whole (not
    /// sparse) gets its checksum once every chunk has a digest.
    pub(super) fn record(&self, i: usize, f: &ReadFile, chunk: u64, d: [u8; 32], t: u64) {
        let chunks = f.pages.is_none().then(|| f.size.div_ceil(t));
        if chunks == Some(1) && chunk == 0 {
            // Most files: whole with their one chunk, no lock.
            return self.put(i, file_checksum(f.size, std::iter::once(&d)));
        }
        let mut held = self.in_flight[i % self.in_flight.len()].lock().unwrap();
        let digests = held.entry(i).or_default();
        // A chunk is read once: a second digest of it would be a bug, and is ignored.
        digests.insert(chunk, d);
        if chunks.is_some_and(|c| digests.len() as u64 >= c) {
            let whole = held.remove(&i).unwrap_or_default();
            drop(held);
            self.put(i, file_checksum(f.size, whole.values()));
        }
    }

    /// Ends the run: the checksum of every file not yet whole (a sparse one's over the
    /// chunks it has frames of); a file read whole that misses a chunk is an error.
    pub(super) fn finish(&mut self, plan: &[ReadFile], t: u64) -> Result<()> {
        let mut rest = HashMap::new();
        for m in self.in_flight.iter_mut() {
            rest.extend(m.get_mut().unwrap().drain());
        }
        for (i, f) in plan.iter().enumerate() {
            let flags = self.flags[i].load(Relaxed);
            if flags & (WHOLE | VANISHED) != 0 {
                continue;
            }
            let digests = rest.remove(&i).unwrap_or_default();
            if f.pages.is_none() {
                // A feed that missed a chunk is a bug, never a silent hole.
                if let Some(c) = digests.first_missing(f.size.div_ceil(t)) {
                    return Err(anyhow!(
                        "'{}': no chunk at offset {} was stored",
                        f.path,
                        c * t
                    ));
                }
            }
            self.put(i, file_checksum(f.size, digests.values()));
        }
        self.in_flight = Box::new([]);
        Ok(())
    }

    /// The result of plan file `i` (after `finish`).
    pub fn get(&self, i: usize) -> FileResult {
        let flags = self.flags[i].load(Relaxed);
        let mut c = [0u8; 32];
        for (part, slot) in c.chunks_exact_mut(8).zip(&self.sums[i]) {
            part.copy_from_slice(&slot.load(Relaxed).to_le_bytes());
        }
        FileResult {
            checksum: (flags & VANISHED == 0 && flags & WHOLE != 0).then_some(Checksum(c)),
            vanished: flags & VANISHED != 0,
            shrank: flags & SHRANK != 0,
        }
    }

    /// Another run's results after these (the late files').
    pub fn append(&mut self, mut other: FileResults) {
        self.flags.append(&mut other.flags);
        self.sums.append(&mut other.sums);
    }
}

impl Default for FileResults {
    fn default() -> Self {
        FileResults::new(0)
    }
}
