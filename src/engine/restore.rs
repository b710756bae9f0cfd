//! Restore pipeline: one reader per stripe -> pool buffers -> decompressors that
//! check every frame and write it in place. Verify is the same run without writes.

use super::codec::{CodecSpec, Decompressor};
use super::pool::{self, Buf, Pool};
use super::stats::{summarize, Lane, Progress, Stage, WaitStats};
use super::Abort;
use crate::device::StripeSource;
use crate::format::frame::{bitmap_len, FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::manifest::file_checksum;
use crate::format::{pad_to, Codec, ContentHash};
use anyhow::{anyhow, bail, Result};
use crossbeam_channel::bounded;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where verified frames go.
pub trait FrameSink: Sync {
    fn write(&self, file: u32, offset: u64, data: &[u8]) -> io::Result<()>;
    /// An all-zero range. Fresh pre-sized files already read as zeros there.
    fn write_zeros(&self, _file: u32, _offset: u64, _len: usize) -> io::Result<()> {
        Ok(())
    }
    /// A frame's range of `file` is written (by one write, or page by page).
    fn written(&self, _file: u32, _offset: u64, _len: u64) {}
}

pub struct StripeIn {
    pub name: String,
    pub source: Box<dyn StripeSource>,
    pub body_start: u64,
    pub body_end: u64,
    pub frames: u64,
}

pub struct Params {
    pub transfer_size: usize,
    pub page_size: usize,
    pub block_size: usize,
    pub buffer_count: usize,
    pub threads: usize,
    /// How the set digests frames (its format version).
    pub hash: ContentHash,
}

pub struct Outcome {
    /// The checksum recomputed from the frames read, per file, or what is missing.
    pub checksums: Vec<Result<String, String>>,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub frames: u64,
    pub wall: Duration,
    pub waits: WaitStats,
    pub pool_bytes: u64,
}

struct Item {
    header: FrameHeader,
    stripe: usize,
    at: u64,
    buf: Buf,
}

/// Restores (or with `sink` None, verifies) the frames of `stripes`. `files` holds the
/// manifest id and size of every regular file; results come back in that order.
pub fn run(
    stripes: &[StripeIn],
    files: &[(u32, u64)],
    p: &Params,
    sink: Option<&dyn FrameSink>,
    progress: &Progress,
) -> Result<Outcome> {
    let started = Instant::now();
    let t = p.transfer_size as u64;
    let buf_size = CodecSpec::bound(p.transfer_size) + p.block_size + pool::ALIGN;
    let live = &progress.live;
    let pool = Pool::new(p.buffer_count, buf_size).counted(live.pool_in_use.clone());
    live.pool_size.store(p.buffer_count as u64, Relaxed);
    let read_lanes = live.read_lanes(stripes.len());
    // One write lane: the target directory.
    let target_lane = &live.write_lanes(1)[0];
    let abort = Abort::default();
    let _signals = crate::interrupt::catch();
    let (read_st, dec_st) = (live.stage("read"), live.stage("decompress"));
    let write_st = live.stage("write");
    let index: HashMap<u32, usize> = files.iter().enumerate().map(|(i, f)| (f.0, i)).collect();
    let state: Vec<Mutex<FileState>> = files
        .iter()
        .map(|f| {
            Mutex::new(FileState {
                digests: vec![None; f.1.div_ceil(t) as usize],
                ..FileState::default()
            })
        })
        .collect();
    let stored_total = AtomicU64::new(0);
    progress.total.store(
        stripes.iter().map(|s| s.body_end - s.body_start).sum(),
        Relaxed,
    );
    let (tx, rx) = bounded::<Item>(p.buffer_count);

    std::thread::scope(|s| {
        for (si, st) in stripes.iter().enumerate() {
            let tx = tx.clone();
            let (pool, abort, read_st, lane) = (&pool, &abort, &read_st, &read_lanes[si]);
            s.spawn(move || {
                let block = p.block_size as u64;
                let (stage, lane) = (&**read_st, &**lane);
                if let Err(e) = read_stripe(si, st, block, pool, abort, stage, lane, progress, &tx)
                {
                    abort.fail(e);
                }
            });
        }
        drop(tx);
        for _ in 0..p.threads {
            let rx = rx.clone();
            let (pool, abort, dec_st, write_st) = (&pool, &abort, &dec_st, &write_st);
            let (state, stored_total, index) = (&state, &stored_total, &index);
            s.spawn(move || {
                let mut dec = match Decompressor::new() {
                    Ok(d) => d,
                    Err(e) => return abort.fail(e.into()),
                };
                let mut scratch = pool.extra();
                let zeros = vec![0u8; p.transfer_size];
                while let Some((item, waited)) = pool::recv(&rx, abort) {
                    dec_st.wait_in(waited);
                    let t0 = Instant::now();
                    let h = &item.header;
                    let at = item.at;
                    let name = &stripes[item.stripe].name;
                    let fail =
                        |msg: String| anyhow!("stripe '{name}', frame at offset {at}: {msg}");
                    let stored = item.buf.payload();
                    // Uncompressed, the stored bytes are the raw bytes: the content digest below checks them.
                    let crc = match h.codec {
                        Codec::None => h.stored_crc,
                        _ => crc32c::crc32c(stored),
                    };
                    if crc != h.stored_crc {
                        return abort.fail(fail(format!(
                            "stored bytes are damaged (CRC32C {crc:08x}, expected {:08x})",
                            h.stored_crc
                        )));
                    }
                    let (fi, size) = match index.get(&h.file_id) {
                        Some(&fi) => (fi, files[fi].1),
                        None => {
                            return abort.fail(fail(format!(
                                "names file {} that the manifest does not list as a regular file",
                                h.file_id
                            )))
                        }
                    };
                    let expect = size.saturating_sub(h.offset).min(t);
                    let fits = match h.kind {
                        FrameKind::Pages => {
                            (h.raw_len as u64)
                                <= expect + bitmap_len(expect, p.page_size as u64) as u64
                        }
                        _ => h.raw_len as u64 == expect,
                    };
                    if h.offset % t != 0 || h.offset >= size || !fits {
                        return abort.fail(fail(format!(
                            "range {}+{} does not fit file {} of {size} bytes",
                            h.offset, h.raw_len, h.file_id
                        )));
                    }
                    let raw: &[u8] = match (h.kind, h.codec) {
                        (FrameKind::Zero, _) => &zeros[..h.raw_len as usize],
                        (_, Codec::None) => stored,
                        (_, codec) => match dec.decompress(codec, stored, scratch.space()) {
                            Ok(n) if n == h.raw_len as usize => &scratch.space()[..n],
                            Ok(n) => {
                                return abort.fail(fail(format!(
                                    "decompressed to {n} bytes, expected {}",
                                    h.raw_len
                                )))
                            }
                            Err(e) => return abort.fail(fail(format!("cannot decompress: {e}"))),
                        },
                    };
                    let digest = p.hash.digest(raw);
                    if digest != h.raw_hash {
                        let name = p.hash.name();
                        return abort.fail(fail(match h.codec {
                            Codec::None => {
                                format!(
                                    "stored bytes are damaged (their {name} digest does not match)"
                                )
                            }
                            _ => format!("restored content does not match its {name} digest"),
                        }));
                    }
                    dec_st.busy(t0.elapsed());
                    dec_st.op(h.raw_len as u64);
                    stored_total.fetch_add(h.stored_len as u64, Relaxed);
                    let mut buf = item.buf;
                    if sink.is_some() && h.codec != Codec::None && h.kind != FrameKind::Zero {
                        // The decompressed bytes go to the write; the input buffer becomes scratch.
                        scratch.len = h.raw_len as usize;
                        std::mem::swap(&mut scratch, &mut buf);
                    }
                    let w = FrameWrite {
                        kind: h.kind,
                        file: h.file_id,
                        offset: h.offset,
                        expect,
                        raw_len: h.raw_len as u64,
                        buf,
                    };
                    {
                        let mut f = state[fi].lock().unwrap();
                        let slot = &mut f.digests[(h.offset / t) as usize];
                        if slot.is_some() {
                            return abort.fail(fail(format!(
                                "file {} offset {} is stored twice",
                                h.file_id, h.offset
                            )));
                        }
                        *slot = Some(digest);
                        if sink.is_some() && f.busy {
                            f.queue.push_back(w);
                            continue;
                        }
                        f.busy = sink.is_some();
                    }
                    let Some(sink) = sink else {
                        pool.put(w.buf);
                        continue;
                    };
                    let mut next = Some(w);
                    while let Some(w) = next {
                        let t1 = Instant::now();
                        if let Err(e) = w.put(sink, p.page_size) {
                            return abort.fail(anyhow!(
                                "write of file {} at offset {} failed: {e}",
                                w.file,
                                w.offset
                            ));
                        }
                        let took = t1.elapsed();
                        write_st.busy(took);
                        write_st.op(w.raw_len);
                        target_lane.op(w.raw_len, took);
                        pool.put(w.buf);
                        let mut f = state[fi].lock().unwrap();
                        next = f.queue.pop_front();
                        f.busy = next.is_some();
                    }
                }
            });
        }
    });
    if let Some(e) = abort.take() {
        return Err(e);
    }
    let wall = started.elapsed();
    let checksums = files
        .iter()
        .zip(state)
        .map(|(&(_, size), f)| {
            let d = f.into_inner().unwrap().digests;
            match d.iter().position(Option::is_none) {
                Some(missing) => Err(format!("no frame holds offset {}", missing as u64 * t)),
                None => Ok(file_checksum(size, d.iter().map(|x| x.as_ref().unwrap()))),
            }
        })
        .collect();
    let mut stages = vec![
        (
            "read",
            &*read_st,
            stripes.len(),
            "a free buffer",
            "the decompressors",
        ),
        ("decompress", &*dec_st, p.threads, "a frame", "the writes"),
    ];
    if sink.is_some() {
        stages.push((
            "write",
            &*write_st,
            p.threads,
            "a checked frame",
            "the target",
        ));
    }
    let waits = summarize(&stages, wall);
    Ok(Outcome {
        checksums,
        raw_bytes: dec_st.bytes.load(Relaxed),
        stored_bytes: stored_total.load(Relaxed),
        frames: read_st.ops.load(Relaxed),
        wall,
        waits,
        pool_bytes: pool.bytes() + (p.threads * pool.buf_size) as u64,
    })
}

/// One file of the restore: the digests of its frames checked so far, and its writer.
/// One thread writes a file at a time: a second would spin on the file's inode lock in
/// the kernel (7% of an uncompressed restore's CPU), so it queues its frame for the first.
#[derive(Default)]
struct FileState {
    digests: Vec<Option<[u8; 32]>>,
    busy: bool,
    queue: VecDeque<FrameWrite>,
}

/// A verified frame to write: its raw bytes are `buf`'s payload (none for a Zero frame).
struct FrameWrite {
    kind: FrameKind,
    file: u32,
    offset: u64,
    /// The file range the frame covers.
    expect: u64,
    raw_len: u64,
    buf: Buf,
}

impl FrameWrite {
    fn put(&self, sink: &dyn FrameSink, page: usize) -> io::Result<()> {
        let raw = self.buf.payload();
        match self.kind {
            FrameKind::Pages => write_pages(sink, self.file, self.offset, self.expect, page, raw)?,
            FrameKind::Zero => sink.write_zeros(self.file, self.offset, self.raw_len as usize)?,
            FrameKind::Data => sink.write(self.file, self.offset, raw)?,
        }
        sink.written(self.file, self.offset, self.expect);
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

/// Reads one stripe's frames in order, reading each payload together with the
/// next frame's header (one read per frame).
#[allow(clippy::too_many_arguments)]
fn read_stripe(
    si: usize,
    st: &StripeIn,
    block: u64,
    pool: &Pool,
    abort: &Abort,
    read_st: &Stage,
    lane: &Lane,
    progress: &Progress,
    tx: &crossbeam_channel::Sender<Item>,
) -> Result<()> {
    let mut at = st.body_start;
    let mut hdr = [0u8; FRAME_HEADER_LEN];
    let io_err = |e: io::Error, off: u64| {
        anyhow!(
            "stripe '{}': read at offset {off} failed: {e} (the stripe is truncated or unreadable)",
            st.name
        )
    };
    if st.frames > 0 {
        if at + FRAME_HEADER_LEN as u64 > st.body_end {
            bail!(
                "stripe '{}': body ends at {} before its first frame",
                st.name,
                st.body_end
            );
        }
        st.source
            .read_exact_at(&mut hdr, at)
            .map_err(|e| io_err(e, at))?;
    }
    for i in 0..st.frames {
        let header =
            FrameHeader::decode(&hdr, at).map_err(|e| anyhow!("stripe '{}': {e}", st.name))?;
        let total = pad_to((FRAME_HEADER_LEN as u64) + header.stored_len as u64, block);
        let more = i + 1 < st.frames;
        let next = at + total;
        let need_end = next + if more { FRAME_HEADER_LEN as u64 } else { 0 };
        if need_end > st.body_end {
            bail!(
                "stripe '{}', frame at offset {at}: {} stored bytes run past the end of the body at {}",
                st.name, header.stored_len, st.body_end
            );
        }
        let Some((mut buf, waited)) = pool.get(abort) else {
            return Ok(());
        };
        read_st.wait_in(waited);
        let want = (need_end - at - FRAME_HEADER_LEN as u64) as usize;
        if want > buf.capacity() {
            bail!("stripe '{}', frame at offset {at}: stored length {} is larger than any frame of this set", st.name, header.stored_len);
        }
        let t0 = Instant::now();
        st.source
            .read_exact_at(&mut buf.space()[..want], at + FRAME_HEADER_LEN as u64)
            .map_err(|e| io_err(e, at))?;
        let took = t0.elapsed();
        read_st.busy(took);
        read_st.op(total);
        lane.op(total, took);
        progress.done.fetch_add(total, Relaxed);
        if more {
            let s = (total as usize) - FRAME_HEADER_LEN;
            hdr.copy_from_slice(&buf.space()[s..s + FRAME_HEADER_LEN]);
        }
        buf.len = header.stored_len as usize;
        match pool::send(
            tx,
            Item {
                header,
                stripe: si,
                at,
                buf,
            },
            abort,
        ) {
            Some(w) => read_st.wait_out(w),
            None => return Ok(()),
        }
        at = next;
    }
    if at != st.body_end {
        bail!(
            "stripe '{}': frames end at offset {at} but the body ends at {}: the stripe holds data its tail does not count",
            st.name, st.body_end
        );
    }
    Ok(())
}
