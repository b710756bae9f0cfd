//! The write side: a checked frame's bytes written at their place in the target, one
//! thread per file at a time.

use super::{FrameSink, Kept, Shared};
use crate::engine::pool::Buf;
use crate::format::frame::{bitmap_len, FrameKind};
use anyhow::{anyhow, Result};
use std::collections::VecDeque;
use std::io;
use std::time::Instant;

/// Writes `w` (file index `fi`) unless another thread is writing that file, which then
/// writes it next; a verify (no sink) only returns the buffer.
pub(super) fn write(sh: &Shared, fi: usize, w: FrameWrite) -> Result<()> {
    let Some(sink) = sh.sink else {
        sh.pool.put(w.buf);
        return Ok(());
    };
    {
        let mut f = sh.state[fi].lock().unwrap();
        if f.busy {
            f.queue.get_or_insert_default().push_back(w);
            return Ok(());
        }
        f.busy = true;
    }
    let mut next = Some(w);
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
        let mut f = sh.state[fi].lock().unwrap();
        next = f.queue.as_mut().and_then(|q| q.pop_front());
        f.busy = next.is_some();
    }
    Ok(())
}

/// Chunk number -> digest, sorted: most files have one chunk, kept inline; frames come
/// mostly in order, so a vector grows at its end.
#[derive(Default)]
pub(super) enum Digests {
    #[default]
    None,
    One(u64, [u8; 32]),
    Many(Vec<(u64, [u8; 32])>),
}

impl Digests {
    /// Records a chunk's digest; false when the chunk has one already.
    pub(super) fn insert(&mut self, chunk: u64, d: [u8; 32]) -> bool {
        match self {
            Digests::None => {
                *self = Digests::One(chunk, d);
                return true;
            }
            Digests::One(k, _) if *k == chunk => return false,
            Digests::One(k, e) => *self = Digests::Many(vec![(*k, *e)]),
            Digests::Many(_) => {}
        }
        let Digests::Many(v) = self else {
            unreachable!("made a vector above")
        };
        let at = match v.last() {
            Some(&(k, _)) if k < chunk => v.len(),
            None => 0,
            _ => match v.binary_search_by_key(&chunk, |e| e.0) {
                Ok(_) => return false,
                Err(at) => at,
            },
        };
        v.insert(at, (chunk, d));
        true
    }

    fn entries(&self) -> Box<dyn Iterator<Item = (u64, &[u8; 32])> + '_> {
        match self {
            Digests::None => Box::new(std::iter::empty()),
            Digests::One(k, d) => Box::new(std::iter::once((*k, d))),
            Digests::Many(v) => Box::new(v.iter().map(|(k, d)| (*k, d))),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Digests::None => 0,
            Digests::One(..) => 1,
            Digests::Many(v) => v.len(),
        }
    }

    pub(super) fn chunks(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries().map(|e| e.0)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.entries().map(|e| e.1)
    }
}

/// One file of the restore: the digests of its frames checked so far, and its writer.
/// One thread writes a file at a time: a second would spin on the file's inode lock in
/// the kernel (7% of an uncompressed restore's CPU), so it queues its frame for the first.
#[derive(Default)]
pub(super) struct FileState {
    /// Chunk number -> digest: memory grows with the frames read, never with a size
    /// the manifest claims.
    pub(super) digests: Digests,
    busy: bool,
    /// Frames waiting while another thread writes the file (rare: made when needed).
    #[allow(clippy::box_collection)]
    queue: Option<Box<VecDeque<FrameWrite>>>,
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
}

impl FrameWrite {
    fn put(&mut self, sink: &dyn FrameSink, page: usize) -> io::Result<()> {
        if self.held {
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
