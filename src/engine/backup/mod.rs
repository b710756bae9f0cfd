//! Backup pipeline: readers (per volume) -> pool buffers -> compressors -> one
//! writer per stripe. Frames go to whichever stripe writer is free first.

pub mod direct;
mod frame;
mod path;
mod read;
mod state;
mod write;

pub use path::{Dirs, FilePath};
pub use state::{FileResult, FileResults};

use super::adapt::Adapt;
use super::codec::CodecSpec;
use super::pool::{self, Buf, Pool};
use super::stats::{summarize, Progress, Stage, WaitStats};
use super::Abort;
use crate::device::StripeSink;
use crate::engine::restore::Kept;
use crate::format::{Codec, ContentHash, FORMAT_VERSION};
use anyhow::{anyhow, Result};
use crossbeam_channel::bounded;
use roaring::RoaringBitmap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A file to read, as the source planned it.
pub struct ReadFile {
    /// The file's id in the manifest, carried by its frames.
    pub id: u32,
    pub path: FilePath,
    pub size: u64,
    /// Index of the volume (device) holding the file.
    pub volume: usize,
    /// The source tolerates the file vanishing during the backup (dropped tables).
    pub missing_ok: bool,
    /// Pages (of `Params::page_size`, numbered from the file's start) to read; None
    /// reads the whole file. Chunks with none are skipped: they get no frame.
    pub pages: Option<Arc<RoaringBitmap>>,
    /// Read with O_DIRECT (where the file system allows it), and found (almost) whole in the
    /// page cache when planned: see `direct::choose`.
    pub direct: bool,
    pub cached: bool,
}

impl ReadFile {
    /// A whole file that must not vanish, read through the page cache until
    /// `direct::choose` says otherwise.
    pub fn new(id: u32, path: impl Into<FilePath>, size: u64, volume: usize) -> ReadFile {
        ReadFile {
            id,
            path: path.into(),
            size,
            volume,
            missing_ok: false,
            pages: None,
            direct: false,
            cached: false,
        }
    }
}

/// Inspects each chunk read (page checksums, for example) before it is stored.
pub trait ChunkFilter: Sync {
    /// `Err` fails the backup with that message. With `sel` (a sparse chunk), only the
    /// selected pages were read: the others hold stale bytes and are not looked at.
    fn check(
        &self,
        file: &ReadFile,
        offset: u64,
        data: &[u8],
        sel: Option<&PageSet>,
    ) -> Result<(), String>;
    /// Problems tolerated so far (they mark the set damaged).
    fn problems(&self) -> Vec<String> {
        vec![]
    }
    /// Observations worth a warning that do not damage the set.
    fn notes(&self) -> Vec<String> {
        vec![]
    }
    /// For a differential: which pages of the chunk to store (bit i = page i), or None
    /// to store the whole chunk.
    fn select(&self, _file: &ReadFile, _offset: u64, _data: &[u8]) -> Option<PageSet> {
        None
    }
    /// Whether `select` may choose pages of `file` (its chunks are then digested after
    /// the choice, not as they are read).
    fn selects(&self, _file: &ReadFile) -> bool {
        false
    }
}

/// Chunks that come from elsewhere than the plan's files: a merge builds them from a
/// chain's frames. `feed` runs in place of the readers and sends every chunk of every
/// planned file, each once, whole (the transfer size, or the file's rest).
pub trait Feed: Sync {
    fn feed(&self, out: &Feeder) -> Result<()>;
}

/// A feed's way into the pipeline: the pool's buffers and the compressors' queue.
pub struct Feeder<'a> {
    sh: &'a Shared<'a>,
    ctx: crossbeam_channel::Sender<Item>,
    /// Manifest id -> index in the plan.
    index: std::collections::HashMap<u32, usize>,
}

impl crate::engine::restore::merge::ChunkOut for Feeder<'_> {
    fn buffer(&self) -> std::io::Result<Buf> {
        let (buf, waited) = self
            .sh
            .pool
            .get(self.sh.abort)
            .ok_or_else(|| std::io::Error::other("stopped: the new set's pipeline failed"))?;
        self.sh.read_st.wait_in(waited);
        Ok(buf)
    }

    fn send(&self, file: u32, offset: u64, buf: Buf) -> std::io::Result<()> {
        let len = buf.len;
        self.feed(file, offset, len, buf, None)
    }

    fn takes_stored(&self, file: u32, k: &Kept, raw: &[u8]) -> std::io::Result<bool> {
        let p = self.sh.p;
        if k.codec != p.codec.codec || k.hash != ContentHash::of_version(FORMAT_VERSION) {
            return Ok(false);
        }
        // The raw bytes pass the source's checks as a chunk sent whole would.
        if let (Some(f), Some(&i)) = (self.sh.filter, self.index.get(&file)) {
            f.check(&self.sh.plan[i], k.offset, raw, None)
                .map_err(std::io::Error::other)?;
        }
        Ok(true)
    }

    fn send_stored(&self, file: u32, k: &Kept, buf: Buf) -> std::io::Result<()> {
        if k.codec != self.sh.p.codec.codec {
            return Err(std::io::Error::other(format!(
                "chunk of file {file} at offset {}: stored with another codec than the new set's",
                k.offset
            )));
        }
        let stored = Stored {
            codec: k.codec,
            raw_len: k.raw_len,
            digest: k.digest,
        };
        self.feed(file, k.offset, k.raw_len, buf, Some(stored))
    }
}

impl Feeder<'_> {
    /// Sends a chunk of `len` raw bytes, in `buf` as they are or (`stored`) compressed.
    fn feed(
        &self,
        file: u32,
        offset: u64,
        len: usize,
        buf: Buf,
        stored: Option<Stored>,
    ) -> std::io::Result<()> {
        let t = self.sh.p.transfer_size as u64;
        let fits = |i: &&usize| {
            let size = self.sh.plan[**i].size;
            offset.is_multiple_of(t) && offset < size && len as u64 == (size - offset).min(t)
        };
        let Some(&i) = self.index.get(&file).filter(fits) else {
            return Err(std::io::Error::other(format!(
                "chunk of file {file} at offset {offset} ({len} bytes) is not one of the new set's"
            )));
        };
        self.sh.read_st.op(len as u64);
        self.sh.progress.done.fetch_add(len as u64, Relaxed);
        let item = Item {
            file: i as u32,
            offset,
            sel: None,
            buf,
            digest: None,
            frame_len: 0,
            stored,
        };
        match pool::send(&self.ctx, item, self.sh.abort) {
            Some(w) => {
                self.sh.read_st.wait_out(w);
                Ok(())
            }
            None => Err(std::io::Error::other(
                "stopped: the new set's pipeline failed",
            )),
        }
    }
}

/// Pages of one chunk: up to 2048 (16 MiB of 8 KiB pages).
pub type PageSet = [u64; 32];

/// Whether page `i` of a chunk is to be looked at: every page without a selection.
pub fn page_selected(sel: Option<&PageSet>, i: usize) -> bool {
    sel.is_none_or(|s| s[i / 64] >> (i % 64) & 1 == 1)
}

#[derive(Debug, Clone)]
pub struct Params {
    pub buffer_count: usize,
    pub transfer_size: usize,
    pub block_size: usize,
    pub readers_per_volume: usize,
    /// Reads in flight per reader.
    pub read_depth: usize,
    /// ... on a volume read mostly with O_DIRECT.
    pub direct_read_depth: usize,
    /// ... on a volume found mostly in the page cache, held there (its reads are
    /// copies: more than the cores can make only cost buffers). None: as any volume.
    pub cached_read_depth: Option<usize>,
    /// Pool buffers on huge pages (see `direct::huge_pages`).
    pub huge_pages: bool,
    pub threads: usize,
    pub codec: CodecSpec,
    /// Page size, for differential page selection.
    pub page_size: usize,
    /// Adaptive readers: the reads in flight probe upward to `adapt::CAP` per volume.
    pub adaptive: bool,
    /// An encrypted set's data key: every frame is sealed with it.
    pub seal: Option<super::Seal>,
    /// A signed set's MAC keys: every frame is tagged with them.
    pub sign: Option<crate::crypt::SetMac>,
    /// The first frame's sequence number: a second run into the same set (the WAL a
    /// backup's end adds) goes on from the first's, so no nonce repeats.
    pub first_seq: u64,
    /// The most bytes read from the source per second (`--max-rate`); None: no limit.
    pub max_rate: Option<u64>,
}

impl Params {
    /// Reads in flight per volume, by how it is read: (base, most).
    pub fn in_flight(&self, how: direct::Mostly) -> (usize, usize) {
        let depth = match (how, self.cached_read_depth) {
            (direct::Mostly::Direct, _) => self.direct_read_depth,
            (direct::Mostly::Cached, Some(n)) => return (n, n),
            _ => self.read_depth,
        };
        let base = self.readers_per_volume * depth;
        let max = if self.adaptive {
            super::adapt::CAP.max(base)
        } else {
            base
        };
        (base, max)
    }
}

impl Params {
    /// Bytes of one pool buffer: a compressed frame plus padding must fit.
    pub fn buffer_size(&self) -> usize {
        CodecSpec::bound(self.transfer_size) + crate::crypt::TAG_LEN + self.block_size + pool::ALIGN
    }

    /// Memory one pool buffer takes.
    pub fn buffer_footprint(&self) -> usize {
        pool::footprint(self.buffer_size(), self.huge_pages)
    }
}

pub struct StripeResult {
    pub frames: u64,
    pub body_end: u64,
    pub sink: Box<dyn StripeSink>,
    /// Every frame's header in stripe order (the frame index), or nothing past
    /// `INDEX_MAX`.
    pub index: Vec<u8>,
}

pub struct Outcome {
    pub files: FileResults,
    pub stripes: Vec<StripeResult>,
    /// Bytes read from the source.
    pub read_bytes: u64,
    /// Bytes the frames hold before compression (selected pages and their bitmaps).
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub zero_frames: u64,
    /// Chunks that came compressed (`Item::stored`) and were stored as they came.
    pub kept_frames: u64,
    pub wall: Duration,
    pub waits: WaitStats,
    pub pool_bytes: u64,
    /// Adaptive readers: times a volume got more reads in flight, and the most any had.
    pub adaptive_raises: u64,
    pub peak_in_flight: usize,
    /// Steps up taken back, the level the busiest volume ended at, and why it went
    /// no higher.
    pub adaptive_undone: u64,
    pub settled_in_flight: usize,
    /// Reads in flight that volume started at.
    pub base_in_flight: usize,
    /// Bytes one read of that volume ended at asking for (transfers merged), and the
    /// span steps kept.
    pub settled_read_bytes: usize,
    pub span_raises: u64,
    pub held: Option<super::adapt::Held>,
}

/// A stripe writer's sink, frames written, offset reached and frame index.
type WriterEnd = (Box<dyn StripeSink>, u64, u64, Vec<u8>);

/// What every stage of one run shares.
struct Shared<'a> {
    plan: &'a [ReadFile],
    p: &'a Params,
    filter: Option<&'a dyn ChunkFilter>,
    state: FileResults,
    pool: Pool,
    abort: &'a Abort,
    progress: &'a Progress,
    read_st: Arc<Stage>,
    comp_st: Arc<Stage>,
    write_st: Arc<Stage>,
    /// Frame sequence numbers, bytes stored and all-zero frames so far.
    seq: AtomicU64,
    stored_total: AtomicU64,
    zero_frames: AtomicU64,
    kept_frames: AtomicU64,
    /// `--max-rate`: bytes read since `started`, against which the readers pace.
    paced: AtomicU64,
    started: Instant,
}

struct Item {
    file: u32,
    offset: u64,
    /// The pages read of a sparse chunk (the rest of the buffer is zeros).
    sel: Option<PageSet>,
    buf: Buf,
    /// The whole chunk's content digest, taken by the reader right after the read
    /// while its bytes are still in the core's cache (None: the frame stage takes it).
    digest: Option<[u8; 32]>,
    /// Bytes of the frame on media (header + stored + padding), set by the compressor.
    frame_len: usize,
    /// `buf` holds the chunk already compressed (a merge keeps a full's frame).
    stored: Option<Stored>,
}

/// A chunk's stored bytes as they came: their codec, raw length and raw digest.
#[derive(Clone, Copy)]
struct Stored {
    codec: Codec,
    raw_len: usize,
    digest: [u8; 32],
}

/// Runs a backup of `plan` into `stripes` (each a sink and the header block it gets
/// first), its chunks read from the files or sent by `feed`. On error every sink is
/// aborted; `abort` stops the run from outside (a source that fails while it is read).
#[allow(clippy::too_many_arguments)]
pub fn run(
    plan: &[ReadFile],
    volumes: usize,
    stripes: Vec<(Box<dyn StripeSink>, Vec<u8>)>,
    p: &Params,
    filter: Option<&dyn ChunkFilter>,
    feed: Option<&dyn Feed>,
    progress: &Progress,
    abort: &Abort,
) -> Result<Outcome> {
    let started = Instant::now();
    let t = p.transfer_size as u64;
    let live = &progress.live;
    let sh = Shared {
        plan,
        p,
        filter,
        state: FileResults::new(plan.len()),
        pool: Pool::new(p.buffer_count, p.buffer_size())
            .on_huge_pages(p.huge_pages)
            .counted(live.pool_in_use.clone()),
        abort,
        progress,
        read_st: live.stage("read"),
        comp_st: live.stage("compress"),
        write_st: live.stage("write"),
        seq: AtomicU64::new(p.first_seq),
        stored_total: AtomicU64::new(0),
        zero_frames: AtomicU64::new(0),
        kept_frames: AtomicU64::new(0),
        paced: AtomicU64::new(0),
        started,
    };
    progress
        .total
        .store(plan.iter().map(|f| f.size).sum(), Relaxed);
    live.pool_size.store(p.buffer_count as u64, Relaxed);
    let cursors = read::cursors(plan, volumes);
    let (read_lanes, write_lanes) = (live.read_lanes(volumes), live.write_lanes(stripes.len()));
    let _signals = crate::interrupt::catch();
    // Chunks read wait for a compressor in a short queue: when the compressors fall
    // behind (a warm source read faster than they frame it), the readers wait instead
    // of filling every buffer, and the few buffers in use stay in cache.
    let (ctx, crx) = bounded::<Item>(compress_queue(p.threads, p.buffer_count));
    let (wtx, wrx) = bounded::<Item>(p.buffer_count);
    let adapts: Vec<Adapt> = (0..volumes)
        .map(|v| {
            let (base, max) = p.in_flight(direct::mostly(plan, v));
            let max = if small_files(plan, v, p.transfer_size) {
                base
            } else {
                max
            };
            let (span, max_span) = read::spans(p.transfer_size, p.adaptive);
            // A volume held where it starts (found in the page cache) keeps its span too.
            let max_span = if base < max { max_span } else { span };
            Adapt::new(base, max).spans(span, max_span)
        })
        .collect();
    let nstripes = stripes.len();

    let stripe_results: Vec<Option<WriterEnd>> = std::thread::scope(|s| {
        if let Some(feed) = feed {
            let feeder = Feeder {
                sh: &sh,
                ctx: ctx.clone(),
                index: plan.iter().enumerate().map(|(i, f)| (f.id, i)).collect(),
            };
            s.spawn(move || {
                if let Err(e) = feed.feed(&feeder) {
                    feeder.sh.abort.fail(e);
                }
            });
        }
        let readers = cursors.iter().zip(&read_lanes).zip(&adapts);
        for ((vol, lane), adapt) in readers.filter(|_| feed.is_none()) {
            lane.in_flight.store(adapt.base as u64, Relaxed);
            for k in 0..adapt.threads() {
                let (ctx, sh) = (ctx.clone(), &sh);
                s.spawn(move || read::reader(sh, vol, lane, adapt, k, &ctx));
            }
        }
        drop(ctx);
        for _ in 0..p.threads {
            let (crx, wtx, sh) = (crx.clone(), wtx.clone(), &sh);
            s.spawn(move || frame::compressor(sh, &crx, &wtx));
        }
        drop((crx, wtx));
        let handles: Vec<_> = stripes
            .into_iter()
            .enumerate()
            .map(|(i, (sink, header))| {
                let (wrx, sh, lane) = (wrx.clone(), &sh, &write_lanes[i]);
                s.spawn(move || write::writer(sh, i, sink, &header, &wrx, lane))
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
    let mut files = sh.state;
    let failed = failed.or_else(|| files.finish(plan, t).err());
    if let Some(e) = failed {
        for (sink, _, _, _) in stripe_results.into_iter().flatten() {
            sink.abort();
        }
        return Err(e);
    }
    let wall = started.elapsed();
    let readers = adapts.iter().map(|a| a.base).sum();
    let waits = summarize(
        &[
            (
                "read",
                &sh.read_st,
                readers,
                "a free buffer",
                "the compressors",
            ),
            (
                "compress",
                &sh.comp_st,
                p.threads,
                "a filled buffer",
                "the writers",
            ),
            (
                "write",
                &sh.write_st,
                nstripes,
                "a finished frame",
                "the device",
            ),
        ],
        wall,
    );
    Ok(Outcome {
        stripes: stripe_results
            .into_iter()
            .flatten()
            .map(|(sink, frames, body_end, index)| StripeResult {
                frames,
                body_end,
                sink,
                index,
            })
            .collect(),
        read_bytes: sh.read_st.bytes.load(Relaxed),
        raw_bytes: sh.comp_st.bytes.load(Relaxed),
        stored_bytes: sh.stored_total.load(Relaxed),
        zero_frames: sh.zero_frames.load(Relaxed),
        kept_frames: sh.kept_frames.load(Relaxed),
        wall,
        waits,
        pool_bytes: sh.pool.bytes() + (p.threads * p.buffer_footprint()) as u64,
        adaptive_raises: adapts.iter().map(|a| a.raised.load(Relaxed)).sum(),
        adaptive_undone: adapts.iter().map(|a| a.undone.load(Relaxed)).sum(),
        settled_in_flight: adapts.iter().map(|a| a.level()).max().unwrap_or(0),
        base_in_flight: adapts
            .iter()
            .max_by_key(|a| a.level())
            .map_or(0, |a| a.base),
        settled_read_bytes: adapts
            .iter()
            .max_by_key(|a| a.level())
            .map_or(p.transfer_size, |a| a.settled_span() * p.transfer_size),
        span_raises: adapts.iter().map(|a| a.span_raised.load(Relaxed)).sum(),
        held: adapts.iter().max_by_key(|a| a.level()).map(|a| a.held()),
        peak_in_flight: adapts
            .iter()
            .map(|a| a.peak.load(Relaxed))
            .max()
            .unwrap_or(0),
        files,
    })
}

/// Whether volume `v` holds small files (on average under an eighth of a transfer):
/// its reads in flight stay where they start. Each read holds a whole buffer for a few
/// KiB, and depth steps judged on 100 ms windows of such reads grew the pool with no
/// gain over the run (bench/README.md, many files).
fn small_files(plan: &[ReadFile], v: usize, transfer: usize) -> bool {
    let (n, bytes) =
        (plan.iter().filter(|f| f.volume == v)).fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
    n > 0 && bytes / n < (transfer / 8) as u64
}

/// Chunks waiting for the compressors at most: two for each.
fn compress_queue(threads: usize, buffers: usize) -> usize {
    (2 * threads).clamp(1, buffers.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_volume_of_small_files_is_held_where_it_starts() {
        let plan: Vec<ReadFile> = (0..10)
            .map(|i| ReadFile::new(i, PathBuf::from("x"), 4096, (i % 2) as usize))
            .chain([ReadFile::new(10, PathBuf::from("y"), 8 << 20, 1)])
            .collect();
        let t = 1 << 20;
        assert!(small_files(&plan, 0, t), "five 4 KiB files");
        assert!(!small_files(&plan, 1, t), "an 8 MiB file among them");
        assert!(!small_files(&plan, 2, t), "no files");
    }
}
