//! Backup pipeline: readers (per volume) -> pool buffers -> compressors -> one
//! writer per stripe. Frames go to whichever stripe writer is free first.

use super::adapt::Adapt;
use super::codec::{CodecSpec, Compressor};
use super::pool::{self, Buf, Pool};
use super::stats::{summarize, Progress, WaitStats};
use super::Abort;
use crate::device::StripeSink;
use crate::format::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::manifest::file_checksum;
use crate::format::{pad_to, Codec, ContentHash, FORMAT_VERSION};
use crate::sys;
use anyhow::{anyhow, Context, Result};
use crossbeam_channel::bounded;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSliceMut};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A file to read, as the source planned it.
pub struct ReadFile {
    /// The file's id in the manifest, carried by its frames.
    pub id: u32,
    pub path: PathBuf,
    pub size: u64,
    /// Index of the volume (device) holding the file.
    pub volume: usize,
    /// The source tolerates the file vanishing during the backup (dropped tables).
    pub missing_ok: bool,
}

/// Inspects each chunk read (page checksums, for example) before it is stored.
pub trait ChunkFilter: Sync {
    /// `Err` fails the backup with that message.
    fn check(&self, file: &ReadFile, offset: u64, data: &[u8]) -> Result<(), String>;
    /// Problems tolerated so far (they mark the set damaged).
    fn problems(&self) -> Vec<String> {
        vec![]
    }
    /// For a differential: which pages of the chunk to store (bit i = page i), or None
    /// to store the whole chunk.
    fn select(&self, _file: &ReadFile, _offset: u64, _data: &[u8]) -> Option<PageSet> {
        None
    }
}

/// Pages of one chunk: up to 2048 (16 MiB of 8 KiB pages).
pub type PageSet = [u64; 32];

#[derive(Debug, Clone)]
pub struct Params {
    pub buffer_count: usize,
    pub transfer_size: usize,
    pub block_size: usize,
    pub readers_per_volume: usize,
    /// Reads in flight per reader.
    pub read_depth: usize,
    pub threads: usize,
    pub codec: CodecSpec,
    pub direct_io: bool,
    /// Page size, for differential page selection.
    pub page_size: usize,
    /// Adaptive readers: up to 4x the reads in flight when reads get small or slow.
    pub adaptive: bool,
}

impl Params {
    /// Reads in flight per volume: (base, most).
    pub fn in_flight(&self) -> (usize, usize) {
        let base = self.readers_per_volume * self.read_depth;
        let max = if self.adaptive {
            (base * 4).clamp(base, 64.max(base))
        } else {
            base
        };
        (base, max)
    }
}

impl Params {
    /// Bytes of one pool buffer: a compressed frame plus padding must fit.
    pub fn buffer_size(&self) -> usize {
        CodecSpec::bound(self.transfer_size) + self.block_size + pool::ALIGN
    }
}

pub struct FileResult {
    pub checksum: String,
    pub vanished: bool,
    /// The file was shorter when read than when planned: the rest reads as zeros.
    pub shrank: bool,
}

pub struct StripeResult {
    pub frames: u64,
    pub body_end: u64,
    pub sink: Box<dyn StripeSink>,
}

pub struct Outcome {
    pub files: Vec<FileResult>,
    pub stripes: Vec<StripeResult>,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub zero_frames: u64,
    pub wall: Duration,
    pub waits: WaitStats,
    pub pool_bytes: u64,
    /// Adaptive readers: times a volume got more reads in flight, and the most any had.
    pub adaptive_raises: u64,
    pub peak_in_flight: usize,
}

/// A stripe writer's sink, frames written and offset reached.
type WriterEnd = (Box<dyn StripeSink>, u64, u64);

struct FileState {
    digests: Mutex<Vec<Option<[u8; 32]>>>,
    vanished: AtomicBool,
    shrank: AtomicBool,
}

struct Item {
    file: u32,
    offset: u64,
    buf: Buf,
    /// Bytes of the frame on media (header + stored + padding), set by the compressor.
    frame_len: usize,
}

/// Hands out the chunks of one volume's files in order, opening each file once.
struct Cursor {
    files: Vec<u32>,
    next_file: usize,
    current: Option<(u32, Arc<File>, u64)>,
}

struct Chunk {
    file: u32,
    handle: Arc<File>,
    offset: u64,
    len: usize,
}

fn open_for_read(path: &PathBuf, direct: bool) -> io::Result<File> {
    if direct {
        if let Ok(f) = OpenOptions::new()
            .read(true)
            .custom_flags(sys::O_DIRECT)
            .open(path)
        {
            return Ok(f);
        }
    }
    let f = File::open(path)?;
    sys::fadvise(&f, 0, 0, sys::Advice::Sequential);
    Ok(f)
}

impl Cursor {
    /// Hands `add` up to `n` chunks of `file` from `end` on, if that is where the file
    /// being read stands (called per read: nothing allocated).
    fn more_of(
        &mut self,
        file: u32,
        end: u64,
        plan: &[ReadFile],
        transfer: usize,
        n: usize,
        mut add: impl FnMut(Chunk),
    ) {
        let Some((id, handle, offset)) = &mut self.current else {
            return;
        };
        if *id != file || *offset != end {
            return;
        }
        let size = plan[*id as usize].size;
        for _ in 0..n {
            if *offset >= size {
                break;
            }
            let len = (size - *offset).min(transfer as u64) as usize;
            add(Chunk {
                file: *id,
                handle: handle.clone(),
                offset: *offset,
                len,
            });
            *offset += len as u64;
        }
    }

    fn next(
        &mut self,
        plan: &[ReadFile],
        state: &[FileState],
        transfer: usize,
        direct: bool,
    ) -> Result<Option<Chunk>> {
        loop {
            if let Some((id, handle, offset)) = &mut self.current {
                let size = plan[*id as usize].size;
                if *offset < size {
                    let len = (size - *offset).min(transfer as u64) as usize;
                    let c = Chunk {
                        file: *id,
                        handle: handle.clone(),
                        offset: *offset,
                        len,
                    };
                    *offset += len as u64;
                    return Ok(Some(c));
                }
                self.current = None;
            }
            let Some(&id) = self.files.get(self.next_file) else {
                return Ok(None);
            };
            self.next_file += 1;
            let f = &plan[id as usize];
            if f.size == 0 {
                continue;
            }
            match open_for_read(&f.path, direct) {
                Ok(h) => self.current = Some((id, Arc::new(h), 0)),
                Err(e) if e.kind() == io::ErrorKind::NotFound && f.missing_ok => {
                    state[id as usize].vanished.store(true, Relaxed);
                }
                Err(e) => {
                    return Err(anyhow!(e))
                        .with_context(|| format!("cannot open '{}'", f.path.display()))
                }
            }
        }
    }
}

/// Reads `len` bytes at `offset`; a short file reads as zeros past its end.
/// Returns whether the file ended early.
fn read_chunk(c: &Chunk, buf: &mut Buf) -> io::Result<bool> {
    let space = buf.space();
    // O_DIRECT wants whole sectors: ask for a rounded length, keep `len`.
    let want = c.len.next_multiple_of(pool::ALIGN).min(space.len());
    let mut got = 0;
    while got < c.len {
        match c
            .handle
            .read_at(&mut space[got..want], c.offset + got as u64)
        {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let short = got < c.len;
    if short {
        space[got..c.len].fill(0);
    }
    buf.len = c.len;
    Ok(short)
}

/// Writes the bitmap of `sel` and the selected pages of `chunk` into `out`; returns
/// the length written.
fn pack_pages(chunk: &[u8], sel: &PageSet, page: usize, out: &mut [u8]) -> usize {
    let npages = chunk.len().div_ceil(page);
    let bm = crate::format::frame::bitmap_len(chunk.len() as u64, page as u64);
    out[..bm].fill(0);
    let mut at = bm;
    for i in 0..npages {
        if sel[i / 64] >> (i % 64) & 1 == 1 {
            out[i / 8] |= 1 << (i % 8);
            let src = &chunk[i * page..((i + 1) * page).min(chunk.len())];
            out[at..at + src.len()].copy_from_slice(src);
            at += src.len();
        }
    }
    at
}

fn is_zero(b: &[u8]) -> bool {
    let (head, body, tail) = unsafe { b.align_to::<u128>() };
    head.iter().all(|&x| x == 0) && body.iter().all(|&x| x == 0) && tail.iter().all(|&x| x == 0)
}

/// Runs a backup of `plan` into `sinks` (one per stripe), each of which gets its
/// `headers[i]` block first. On error every sink is aborted.
pub fn run(
    plan: &[ReadFile],
    volumes: usize,
    sinks: Vec<Box<dyn StripeSink>>,
    headers: Vec<Vec<u8>>,
    p: &Params,
    filter: Option<&dyn ChunkFilter>,
    progress: &Progress,
) -> Result<Outcome> {
    let started = Instant::now();
    let t = p.transfer_size;
    let state: Vec<FileState> = plan
        .iter()
        .map(|f| FileState {
            digests: Mutex::new(vec![None; f.size.div_ceil(t as u64) as usize]),
            vanished: AtomicBool::new(false),
            shrank: AtomicBool::new(false),
        })
        .collect();
    progress
        .total
        .store(plan.iter().map(|f| f.size).sum(), Relaxed);

    let mut cursors: Vec<Mutex<Cursor>> = (0..volumes)
        .map(|_| {
            Mutex::new(Cursor {
                files: vec![],
                next_file: 0,
                current: None,
            })
        })
        .collect();
    for (i, f) in plan.iter().enumerate() {
        cursors[f.volume].get_mut().unwrap().files.push(i as u32);
    }

    let live = &progress.live;
    let pool = Pool::new(p.buffer_count, p.buffer_size()).counted(live.pool_in_use.clone());
    live.pool_size.store(p.buffer_count as u64, Relaxed);
    let (read_lanes, write_lanes) = (live.read_lanes(volumes), live.write_lanes(sinks.len()));
    let abort = Abort::default();
    let _signals = crate::interrupt::catch();
    let (read_st, comp_st, write_st) = (
        live.stage("read"),
        live.stage("compress"),
        live.stage("write"),
    );
    let (ctx, crx) = bounded::<Item>(p.buffer_count);
    let (wtx, wrx) = bounded::<Item>(p.buffer_count);
    let seq = AtomicU64::new(0);
    let stored_total = AtomicU64::new(0);
    let zero_frames = AtomicU64::new(0);
    let adapts: Vec<Adapt> = (0..volumes)
        .map(|_| {
            let (base, max) = p.in_flight();
            Adapt::new(base, max)
        })
        .collect();
    let readers = volumes * p.readers_per_volume * p.read_depth;
    // Transfers under 1 MiB are merged up to 1 MiB per read when adaptive.
    let merge = if p.adaptive {
        ((1usize << 20) / t).clamp(1, MAX_MERGE)
    } else {
        1
    };

    let stripe_results: Vec<Option<WriterEnd>> = std::thread::scope(|s| {
        for ((vol, lane), adapt) in cursors.iter().zip(&read_lanes).zip(&adapts) {
            lane.in_flight.store(adapt.base as u64, Relaxed);
            for k in 0..adapt.threads() {
                let ctx = ctx.clone();
                let (pool, abort, state, read_st) = (&pool, &abort, &state, &read_st);
                s.spawn(move || {
                    // Reused for every read: no allocation per read.
                    let mut run: Vec<(Chunk, Buf)> = Vec::with_capacity(merge);
                    let mut extra: Vec<Buf> = Vec::with_capacity(merge);
                    while !abort.aborted() {
                        if !adapt.admit(k, abort) {
                            break;
                        }
                        let next = vol.lock().unwrap().next(plan, state, t, p.direct_io);
                        let chunk = match next {
                            Ok(Some(c)) => c,
                            Ok(None) => {
                                adapt.finish();
                                break;
                            }
                            Err(e) => return abort.fail(e),
                        };
                        let Some((buf, waited)) = pool.get(abort) else {
                            break;
                        };
                        read_st.wait_in(waited);
                        // Adjacent ranges of the file, while buffers are free: one
                        // vectored read instead of several small ones.
                        run.push((chunk, buf));
                        if merge > 1 && run[0].0.len == t {
                            while extra.len() + 1 < merge {
                                match pool.try_get() {
                                    Some(b) => extra.push(b),
                                    None => break,
                                }
                            }
                            if !extra.is_empty() {
                                let (file, end) = (run[0].0.file, run[0].0.offset + t as u64);
                                vol.lock()
                                    .unwrap()
                                    .more_of(file, end, plan, t, extra.len(), |c| {
                                        run.push((c, extra.pop().unwrap()))
                                    });
                                extra.drain(..).for_each(|b| pool.put(b));
                            }
                        }
                        let t0 = Instant::now();
                        let bytes: usize = run.iter().map(|(c, _)| c.len).sum();
                        let read = if run.len() > 1 {
                            read_run(plan, &mut run)
                        } else {
                            let (c, b) = &mut run[0];
                            read_one(plan, c, b).map(u32::from)
                        };
                        match read {
                            Ok(shorts) => {
                                for (i, (c, _)) in run.iter().enumerate() {
                                    if shorts & (1 << i) != 0 {
                                        state[c.file as usize].shrank.store(true, Relaxed);
                                    }
                                }
                            }
                            Err(e) => {
                                let c = &run[0].0;
                                let f = &plan[c.file as usize];
                                return abort.fail(anyhow!(
                                    "read of '{}' at offset {} failed: {e}",
                                    f.path.display(),
                                    c.offset
                                ));
                            }
                        }
                        let took = t0.elapsed();
                        read_st.busy(took);
                        lane.op(bytes as u64, took);
                        adapt.tick(
                            lane,
                            t,
                            (live.pool_in_use.load(Relaxed) as usize) + 2 < p.buffer_count,
                        );
                        progress.done.fetch_add(bytes as u64, Relaxed);
                        let mut stopped = false;
                        for (c, buf) in run.drain(..) {
                            read_st.op(c.len as u64);
                            let item = Item {
                                file: c.file,
                                offset: c.offset,
                                buf,
                                frame_len: 0,
                            };
                            match pool::send(&ctx, item, abort) {
                                Some(w) => read_st.wait_out(w),
                                None => {
                                    stopped = true;
                                    break;
                                }
                            }
                        }
                        if stopped {
                            break;
                        }
                    }
                });
            }
        }
        drop(ctx);

        for _ in 0..p.threads {
            let (crx, wtx) = (crx.clone(), wtx.clone());
            let (pool, abort, state, comp_st, seq) = (&pool, &abort, &state, &comp_st, &seq);
            let (stored_total, zero_frames) = (&stored_total, &zero_frames);
            s.spawn(move || {
                let mut comp = match p.codec.codec {
                    Codec::None => None,
                    _ => match Compressor::new(p.codec) {
                        Ok(c) => Some(c),
                        Err(e) => return abort.fail(e.into()),
                    },
                };
                let mut scratch = pool.extra();
                while let Some((mut item, waited)) = pool::recv(&crx, abort) {
                    comp_st.wait_in(waited);
                    let t0 = Instant::now();
                    let raw = item.buf.payload();
                    let mut pages = None;
                    if let Some(f) = filter {
                        let file = &plan[item.file as usize];
                        if let Err(e) = f.check(file, item.offset, raw) {
                            return abort.fail(anyhow!(e));
                        }
                        pages = f.select(file, item.offset, raw);
                    }
                    if let Some(sel) = pages {
                        // Keep the chosen pages only, behind their bitmap, in the scratch
                        // buffer; the raw buffer then serves as scratch.
                        let n = pack_pages(item.buf.payload(), &sel, p.page_size, scratch.space());
                        scratch.len = n;
                        std::mem::swap(&mut scratch, &mut item.buf);
                    }
                    let raw_len = item.buf.len;
                    let raw = item.buf.payload();
                    let digest = ContentHash::of_version(FORMAT_VERSION).digest(raw);
                    let zero = pages.is_none() && is_zero(raw);
                    {
                        let fs = &state[item.file as usize];
                        fs.digests.lock().unwrap()[(item.offset / t as u64) as usize] =
                            Some(digest);
                    }
                    let data_kind = if pages.is_some() {
                        FrameKind::Pages
                    } else {
                        FrameKind::Data
                    };
                    let (kind, codec) = if zero {
                        item.buf.len = 0;
                        zero_frames.fetch_add(1, Relaxed);
                        (FrameKind::Zero, Codec::None)
                    } else if let Some(c) = comp.as_mut() {
                        match c.compress(item.buf.payload(), scratch.space()) {
                            Ok(n) if n < raw_len => {
                                scratch.len = n;
                                std::mem::swap(&mut scratch, &mut item.buf);
                                (data_kind, p.codec.codec)
                            }
                            Ok(_) => (data_kind, Codec::None),
                            Err(e) => return abort.fail(anyhow!("compression failed: {e}")),
                        }
                    } else {
                        (data_kind, Codec::None)
                    };
                    let stored_len = item.buf.len;
                    let stored_crc = crc32c::crc32c(item.buf.payload());
                    let total = pad_to((FRAME_HEADER_LEN + stored_len) as u64, p.block_size as u64)
                        as usize;
                    item.buf.space()[stored_len..total - FRAME_HEADER_LEN].fill(0);
                    FrameHeader {
                        kind,
                        codec,
                        file_id: plan[item.file as usize].id,
                        offset: item.offset,
                        raw_len: raw_len as u32,
                        stored_len: stored_len as u32,
                        stored_crc,
                        raw_hash: digest,
                        seq: seq.fetch_add(1, Relaxed),
                    }
                    .encode(item.buf.header_mut());
                    item.frame_len = total;
                    stored_total.fetch_add(stored_len as u64, Relaxed);
                    comp_st.busy(t0.elapsed());
                    comp_st.op(raw_len as u64);
                    match pool::send(&wtx, item, abort) {
                        Some(w) => comp_st.wait_out(w),
                        None => break,
                    }
                }
            });
        }
        drop((crx, wtx));

        let handles: Vec<_> = sinks
            .into_iter()
            .zip(headers)
            .enumerate()
            .map(|(i, (mut sink, header))| {
                let wrx = wrx.clone();
                let (pool, abort, write_st, lane) = (&pool, &abort, &write_st, &write_lanes[i]);
                s.spawn(move || {
                    let mut written = header.len() as u64;
                    let mut frames = 0u64;
                    let t0 = Instant::now();
                    if let Err(e) = sink.write_all(&header) {
                        abort.fail(anyhow!("stripe {}: write failed: {e}", i + 1));
                        return (sink, 0, 0);
                    }
                    if !header.is_empty() {
                        lane.op(header.len() as u64, t0.elapsed());
                    }
                    while let Some((item, waited)) = pool::recv(&wrx, abort) {
                        write_st.wait_in(waited);
                        let t0 = Instant::now();
                        if let Err(e) = sink.write_all(item.buf.frame(item.frame_len)) {
                            abort.fail(anyhow!(
                                "stripe {}: write at offset {written} failed: {e}",
                                i + 1
                            ));
                            break;
                        }
                        let took = t0.elapsed();
                        write_st.busy(took);
                        write_st.op(item.frame_len as u64);
                        lane.op(item.frame_len as u64, took);
                        written += item.frame_len as u64;
                        frames += 1;
                        pool.put(item.buf);
                    }
                    (sink, frames, written)
                })
            })
            .collect();
        drop(wrx);
        handles.into_iter().map(|h| h.join().ok()).collect()
    });

    let failed = abort.take().or_else(|| {
        stripe_results
            .iter()
            .any(Option::is_none)
            .then(|| anyhow!("a stripe writer panicked"))
    });
    if let Some(e) = failed {
        for (sink, _, _) in stripe_results.into_iter().flatten() {
            sink.abort();
        }
        return Err(e);
    }
    let wall = started.elapsed();
    let files = plan
        .iter()
        .zip(state)
        .map(|(f, st)| {
            let digests = st.digests.into_inner().unwrap();
            let vanished = st.vanished.load(Relaxed);
            let checksum = if vanished {
                String::new()
            } else {
                let all: Option<Vec<[u8; 32]>> = digests.into_iter().collect();
                let all = all.expect("every chunk of a present file was read");
                file_checksum(f.size, all.iter())
            };
            FileResult {
                checksum,
                vanished,
                shrank: st.shrank.load(Relaxed),
            }
        })
        .collect();
    let nstripes = stripe_results.len();
    let waits = summarize(
        &[
            (
                "read",
                &read_st,
                readers,
                "a free buffer",
                "the compressors",
            ),
            (
                "compress",
                &comp_st,
                p.threads,
                "a filled buffer",
                "the writers",
            ),
            (
                "write",
                &write_st,
                nstripes,
                "a finished frame",
                "the device",
            ),
        ],
        wall,
    );
    Ok(Outcome {
        files,
        stripes: stripe_results
            .into_iter()
            .flatten()
            .map(|(sink, frames, body_end)| StripeResult {
                frames,
                body_end,
                sink,
            })
            .collect(),
        raw_bytes: read_st.bytes.load(Relaxed),
        stored_bytes: stored_total.load(Relaxed),
        zero_frames: zero_frames.load(Relaxed),
        wall,
        waits,
        pool_bytes: pool.bytes() + (p.threads * pool.buf_size) as u64,
        adaptive_raises: adapts.iter().map(|a| a.raised.load(Relaxed)).sum(),
        peak_in_flight: adapts
            .iter()
            .map(|a| a.peak.load(Relaxed))
            .max()
            .unwrap_or(0),
    })
}

/// Reads one chunk; retries without O_DIRECT where a filesystem refuses it late.
fn read_one(plan: &[ReadFile], c: &Chunk, buf: &mut Buf) -> io::Result<bool> {
    read_chunk(c, buf).or_else(|e| {
        if sys::is_einval(&e) {
            let f = &plan[c.file as usize];
            let h = Arc::new(open_for_read(&f.path, false)?);
            read_chunk(
                &Chunk {
                    handle: h,
                    ..chunk_clone(c)
                },
                buf,
            )
        } else {
            Err(e)
        }
    })
}

/// Most chunks one merged read takes.
const MAX_MERGE: usize = 16;

/// Reads adjacent chunks of one file with one preadv; a chunk the call did not fill
/// (end of file, a short read, a refusal) is read on its own. Bit i of the result:
/// chunk i was short.
fn read_run(plan: &[ReadFile], run: &mut [(Chunk, Buf)]) -> io::Result<u32> {
    let handle = run[0].0.handle.clone();
    let offset = run[0].0.offset;
    let last = run.len() - 1;
    let mut iov: [IoSliceMut; MAX_MERGE] = std::array::from_fn(|_| IoSliceMut::new(&mut []));
    for (i, (c, b)) in run.iter_mut().enumerate() {
        let space = b.space();
        // O_DIRECT wants whole sectors; only the last chunk can be short.
        let len = if i == last {
            c.len.next_multiple_of(pool::ALIGN).min(space.len())
        } else {
            c.len
        };
        iov[i] = IoSliceMut::new(&mut space[..len]);
    }
    // A failed call reads nothing: each chunk is then read on its own.
    let n = sys::preadv(&*handle, &mut iov[..=last], offset).unwrap_or(0);
    let mut got = n;
    let mut shorts = 0u32;
    for (i, (c, b)) in run.iter_mut().enumerate() {
        let filled = got.min(c.len);
        got -= filled;
        if filled == c.len {
            b.len = c.len;
        } else if read_one(plan, c, b)? {
            shorts |= 1 << i;
        }
    }
    Ok(shorts)
}

fn chunk_clone(c: &Chunk) -> Chunk {
    Chunk {
        file: c.file,
        handle: c.handle.clone(),
        offset: c.offset,
        len: c.len,
    }
}

#[cfg(test)]
mod tests {
    use super::is_zero;

    #[test]
    fn zero_detection() {
        let mut v = vec![0u8; 10_001];
        assert!(is_zero(&v[1..]));
        v[10_000] = 1;
        assert!(!is_zero(&v[1..]));
        v[10_000] = 0;
        v[3] = 1;
        assert!(!is_zero(&v));
    }
}
