//! The write side: a checked frame's bytes written at their place in the target, one
//! thread per file at a time.

use super::{FrameSink, Kept, Shared};
use crate::engine::digests::ChunkDigests;
use crate::engine::pool::Buf;
use crate::format::frame::{bitmap_len, FrameHeader, FrameKind};
use anyhow::{anyhow, Result};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// One writer thread: writes what the checkers hand over until they are done.
pub(super) fn writer(sh: &Shared, rx: &crossbeam_channel::Receiver<(usize, FrameWrite)>) {
    while let Some(((fi, w), waited)) = crate::engine::pool::recv(rx, sh.abort) {
        sh.write_st.wait_in(waited);
        if let Err(e) = write(sh, fi, w) {
            return sh.abort.fail(e);
        }
    }
    // Aborted: what is still queued goes back to the pool.
    for (_, w) in rx.try_iter() {
        sh.pool.put(w.buf);
    }
}

/// Writes `w` (file index `fi`) unless another thread is writing that file, which then
/// writes it next; a verify (no sink) only returns the buffer.
pub(super) fn write(sh: &Shared, fi: usize, w: FrameWrite) -> Result<()> {
    let Some(sink) = sh.sink else {
        sh.pool.put(w.buf);
        return Ok(());
    };
    // Asked once: a file becomes parallel when it is made, after its first frame.
    let parallel = sink.parallel(w.file);
    let mut next = match parallel {
        true => Some(w),
        false => sh.state.begin(fi, w),
    };
    while let Some(mut w) = next {
        let t1 = Instant::now();
        w.put(sink, sh.p.page_size).map_err(|e| {
            anyhow!(
                "write of file {} at offset {} failed: {e}",
                w.file,
                w.offset
            )
        })?;
        let took = t1.elapsed();
        sh.write_st.busy(took);
        sh.write_st.op(w.raw_len);
        sh.target_lane.op(w.raw_len, took);
        sh.pool.put(w.buf);
        next = match parallel {
            true => None,
            false => sh.state.next(fi),
        };
    }
    Ok(())
}

/// Every file of one run, flat: a byte of flags a file. A file's digests are held only
/// while some of its chunks are checked and others are not (a sparse file's until the
/// end), its frames queued only while another thread writes it. One thread writes a
/// file at a time: a second would spin on the file's inode lock in the kernel (7% of
/// an uncompressed restore's CPU), so it queues its frame for the first.
pub(super) struct Files {
    flags: Vec<AtomicU8>,
    /// File index modulo their count: what a file holds while it is in flight.
    locks: Box<[Mutex<InFlight>]>,
}

#[derive(Default)]
struct InFlight {
    digests: HashMap<usize, ChunkDigests>,
    queues: HashMap<usize, VecDeque<FrameWrite>>,
}

/// Every chunk's digest recorded (and given to the checksum): any more is a repeat.
const DONE: u8 = 1;
/// A thread is writing the file.
const BUSY: u8 = 2;
const LOCKS: usize = 256;

/// A chunk of a file recorded a second time.
pub(super) struct Twice;

impl Files {
    pub(super) fn new(n: usize) -> Files {
        Files {
            flags: (0..n).map(|_| AtomicU8::new(0)).collect(),
            locks: (0..LOCKS.min(n.max(1))).map(|_| Mutex::default()).collect(),
        }
    }

    fn lock(&self, fi: usize) -> MutexGuard<'_, InFlight> {
        self.locks[fi % self.locks.len()].lock().unwrap()
    }

    /// Records the digest of chunk `chunk` of file `fi`, which has `chunks` chunks (None:
    /// a sparse file, whole only at the end). Returns the file's digests once every
    /// chunk has one.
    pub(super) fn record(
        &self,
        fi: usize,
        chunk: u64,
        d: [u8; 32],
        chunks: Option<u64>,
    ) -> Result<Option<ChunkDigests>, Twice> {
        let mut one = ChunkDigests::default();
        if chunks == Some(1) {
            // Most files: whole with their first frame, no lock.
            if self.flags[fi].fetch_or(DONE, Relaxed) & DONE != 0 || !one.insert(chunk, d) {
                return Err(Twice);
            }
            return Ok(Some(one));
        }
        let mut held = self.lock(fi);
        if self.flags[fi].load(Relaxed) & DONE != 0 {
            return Err(Twice);
        }
        let digests = held.digests.entry(fi).or_default();
        if !digests.insert(chunk, d) {
            return Err(Twice);
        }
        if chunks.is_some_and(|c| digests.len() as u64 >= c) {
            self.flags[fi].fetch_or(DONE, Relaxed);
            return Ok(held.digests.remove(&fi));
        }
        Ok(None)
    }

    /// The digests of file `fi` if it is not whole (its checksum not yet made).
    pub(super) fn rest(&self, fi: usize) -> Option<ChunkDigests> {
        if self.flags[fi].load(Relaxed) & DONE != 0 {
            return None;
        }
        Some(self.lock(fi).digests.remove(&fi).unwrap_or_default())
    }

    /// The write to do now: `w`, unless another thread writes file `fi` (it then
    /// writes `w` next).
    fn begin(&self, fi: usize, w: FrameWrite) -> Option<FrameWrite> {
        let mut held = self.lock(fi);
        if self.flags[fi].load(Relaxed) & BUSY != 0 {
            held.queues.entry(fi).or_default().push_back(w);
            return None;
        }
        self.flags[fi].fetch_or(BUSY, Relaxed);
        Some(w)
    }

    /// The next write queued for file `fi`, or None: nobody writes it any more.
    fn next(&self, fi: usize) -> Option<FrameWrite> {
        let mut held = self.lock(fi);
        let next = held.queues.get_mut(&fi).and_then(VecDeque::pop_front);
        if held.queues.get(&fi).is_some_and(VecDeque::is_empty) {
            held.queues.remove(&fi);
        }
        if next.is_none() {
            self.flags[fi].fetch_and(!BUSY, Relaxed);
        }
        next
    }
}

/// A verified frame to write: its raw bytes are `buf`'s payload (none for a Zero frame).
pub(super) struct FrameWrite {
    pub(super) kind: FrameKind,
    pub(super) file: u32,
    pub(super) offset: u64,
    /// The file range the frame covers.
    pub(super) expect: u64,
    pub(super) raw_len: u64,
    pub(super) buf: Buf,
    /// The target already holds these bytes (a delta restore): nothing to write.
    pub(super) held: bool,
    /// `buf` holds the frame's stored bytes, which the sink keeps as they are.
    pub(super) kept: Option<Kept>,
    /// Read in part: only these byte ranges of the chunk are in `buf`, and written.
    pub(super) ranges: Option<Vec<(u32, u32)>>,
}

impl FrameWrite {
    /// Frame `h`'s bytes in `buf`, covering `expect` bytes of its file, to write whole.
    pub(super) fn of(h: &FrameHeader, expect: u64, buf: Buf) -> FrameWrite {
        FrameWrite {
            kind: h.kind,
            file: h.file_id,
            offset: h.offset,
            expect,
            raw_len: h.raw_len as u64,
            buf,
            held: false,
            kept: None,
            ranges: None,
        }
    }

    fn put(&mut self, sink: &dyn FrameSink, page: usize) -> io::Result<()> {
        if self.held {
            return Ok(());
        }
        if let Some(r) = &self.ranges {
            let raw = self.buf.payload();
            for &(s, e) in r {
                sink.write(
                    self.file,
                    self.offset + s as u64,
                    &raw[s as usize..e as usize],
                )?;
            }
            return Ok(());
        }
        match self.kind {
            FrameKind::Pages => {
                let raw = self.buf.payload();
                write_pages(sink, self.file, self.offset, self.expect, page, raw)?
            }
            FrameKind::Zero => sink.write_zeros(self.file, self.offset, self.raw_len as usize)?,
            FrameKind::Data => match &self.kept {
                Some(k) => sink.write_stored(k, &mut self.buf)?,
                None => {
                    if !sink.write_buf(self.file, self.offset, &mut self.buf)? {
                        sink.write(self.file, self.offset, self.buf.payload())?
                    }
                }
            },
        }
        // See FrameSink::written: never for a Pages frame.
        if self.kind != FrameKind::Pages {
            sink.written(self.file, self.offset, self.expect);
        }
        Ok(())
    }
}

/// Writes the pages a Pages frame holds (bitmap, then the pages) at their offsets.
fn write_pages(
    sink: &dyn FrameSink,
    file: u32,
    offset: u64,
    chunk_len: u64,
    page: usize,
    raw: &[u8],
) -> io::Result<()> {
    let bm = bitmap_len(chunk_len, page as u64);
    let bad = || io::Error::other("page frame does not match its bitmap");
    let (bits, mut data) = raw.split_at_checked(bm).ok_or_else(bad)?;
    for i in 0..chunk_len.div_ceil(page as u64) as usize {
        if bits[i / 8] >> (i % 8) & 1 == 1 {
            let len = (chunk_len as usize - i * page).min(page);
            let (pg, rest) = data.split_at_checked(len).ok_or_else(bad)?;
            sink.write(file, offset + (i * page) as u64, pg)?;
            data = rest;
        }
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(bad())
    }
}
