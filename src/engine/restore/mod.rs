//! Restore pipeline: one reader per stripe -> pool buffers -> decompressors that
//! check every frame and write it in place. Verify is the same run without writes.

mod check;
pub mod layers;
pub mod merge;
mod partial;
mod read;
pub use read::load_index;
mod write;

use super::codec::CodecSpec;
use super::pool::{self, Buf, Pool};
use super::stats::{summarize, Lane, Progress, Stage, WaitStats};
use super::Abort;
use crate::device::StripeSource;
use crate::engine::digests::ChunkDigests;
use crate::format::frame::FrameHeader;
use crate::format::manifest::{file_checksum, Checksum, IdIndex};
use crate::format::{Codec, ContentHash};
use anyhow::Result;
use crossbeam_channel::bounded;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where verified frames go.
pub trait FrameSink: Sync {
    fn write(&self, file: u32, offset: u64, data: &[u8]) -> io::Result<()>;
    /// A Data frame's whole chunk in `buf`: true if the sink took it (it may swap in
    /// another buffer of the same capacity), false to have `write` called instead.
    fn write_buf(&self, _file: u32, _offset: u64, _buf: &mut Buf) -> io::Result<bool> {
        Ok(false)
    }
    /// An all-zero range. Fresh pre-sized files already read as zeros there.
    fn write_zeros(&self, _file: u32, _offset: u64, _len: usize) -> io::Result<()> {
        Ok(())
    }
    /// A Data or Zero frame's whole range of `file` is written: its writeback may start.
    /// Not called for a Pages frame: its scattered pages wait for the range around them
    /// (an older set's frame in a chain), else each would reach the disk on its own.
    fn written(&self, _file: u32, _offset: u64, _len: u64) {}
    /// Every byte of `file` is written: nothing more will be.
    fn whole(&self, _file: u32) {}
    /// Whether writes into `file` may run several at once (else one thread writes a
    /// file at a time, the others queueing their frames for it).
    fn parallel(&self, _file: u32) -> bool {
        false
    }
    /// A delta restore's question before a Data or Zero frame is decompressed: does
    /// `file` already hold, at `offset..offset + len`, bytes whose `hash` is `digest`
    /// (the frame's checked header digest)? True: the frame is neither decompressed nor
    /// written, and its digest counts for the file's checksum as a written frame's
    /// would. `scratch` has room for `len` bytes.
    fn holds(&self, _q: Held, _scratch: &mut [u8]) -> io::Result<bool> {
        Ok(false)
    }
    /// A delta restore's question before a frame of a plain set is read: does `file`
    /// hold the set's bytes at `offset..offset + len` (the frame's chunk), proven
    /// without reading them (`--delta wal`)? True: only the frame's header is read, and
    /// its digest counts for the file's checksum as a checked frame's would.
    fn proven(&self, _file: u32, _offset: u64, _len: usize) -> io::Result<bool> {
        Ok(false)
    }
    /// `--delta wal`: of a chunk the target holds in part, the byte ranges from `offset`
    /// (in order, apart) that a write of it puts; the rest it keeps. None: not known
    /// (the whole chunk is read).
    fn differs(
        &self,
        _file: u32,
        _offset: u64,
        _len: usize,
    ) -> io::Result<Option<Vec<(u32, u32)>>> {
        Ok(None)
    }
    /// A merge's question once a Data frame is checked (`raw`: its bytes): take its
    /// stored bytes as they are (compressed, decrypted)? True: `write_stored` gets them.
    fn keeps(&self, _k: &Kept, _raw: &[u8]) -> io::Result<bool> {
        Ok(false)
    }
    /// A checked Data frame's stored bytes, `keeps` having said yes.
    fn write_stored(&self, k: &Kept, _buf: &mut Buf) -> io::Result<()> {
        Err(io::Error::other(format!(
            "file {} offset {}: this sink takes no stored frames",
            k.file, k.offset
        )))
    }
}

/// A checked Data frame whose stored bytes may be kept as they are (a merge).
#[derive(Clone, Copy, Debug)]
pub struct Kept {
    pub file: u32,
    pub offset: u64,
    pub raw_len: usize,
    /// How the stored bytes are compressed.
    pub codec: Codec,
    /// The raw bytes' digest, checked, and its kind.
    pub hash: ContentHash,
    pub digest: [u8; 32],
}

/// A chunk a delta restore may find already in place (`FrameSink::holds`).
#[derive(Clone, Copy, Debug)]
pub struct Held<'a> {
    pub file: u32,
    pub offset: u64,
    pub len: usize,
    pub hash: ContentHash,
    pub digest: &'a [u8; 32],
}

pub struct StripeIn {
    pub name: String,
    pub source: Box<dyn StripeSource>,
    pub body_start: u64,
    pub body_end: u64,
    pub frames: u64,
    /// Where its frame index is, when it has one.
    pub index: Option<IndexAt>,
}

/// A stripe's frame index: every frame's header in stripe order, `len` bytes at
/// `offset`, with their CRC32C.
#[derive(Clone, Copy, Debug)]
pub struct IndexAt {
    pub offset: u64,
    pub len: u64,
    pub crc: u32,
}

/// A regular file of a set, as its manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIn {
    pub id: u32,
    pub size: u64,
    /// Only the changed chunks have frames (a diff's or incr's): a chunk without one is
    /// not missing, and the checksum is over the frames present.
    pub sparse: bool,
}

pub struct Params {
    pub transfer_size: usize,
    pub page_size: usize,
    pub block_size: usize,
    pub buffer_count: usize,
    pub threads: usize,
    /// Writer threads fed by the decompressors (0: each decompressor writes its own
    /// frames).
    pub write_depth: usize,
    /// How the set digests frames (its format version).
    pub hash: ContentHash,
    /// An encrypted set's data key and id: every frame is opened with it.
    pub seal: Option<super::Seal>,
    /// A signed set's MAC keys: every frame's tag is checked with them.
    pub sign: Option<crate::crypt::SetMac>,
    /// Files left out (their manifest ids): only their frames' headers are read, to
    /// step over them; nothing of them is checked or written.
    pub left_out: Arc<HashSet<u32>>,
    /// Read each stripe's frame index, when it has one: frames stepped over are then
    /// not read at all, and every header read is checked against it.
    pub use_index: bool,
}

/// Told each file's checksum recomputed from the frames read (or what is missing), by
/// its index in the run's files: as soon as every chunk of it is checked, from any
/// thread, else at the end in file order. An error stops the run.
pub type Done<'a> = dyn Fn(usize, Result<Checksum, String>) -> Result<()> + Sync + 'a;

pub struct Outcome {
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub frames: u64,
    pub wall: Duration,
    pub waits: WaitStats,
    pub pool_bytes: u64,
    /// Stored bytes (frame payloads, as `stored_bytes` counts them) of the files left
    /// out, stepped over unread.
    pub left_out_bytes: u64,
    /// Stored bytes of frames whose bytes the target was proven to hold, stepped over
    /// (and of frames read in part, the bytes not read).
    pub proven_bytes: u64,
    /// Frames of which only the pages the target lacks were read (`partial`).
    pub partial_frames: u64,
    /// Damage found in frames read through but not needed (the restore did not use
    /// them): at most `UNNEEDED_TOLD` told, then how many more.
    pub unneeded_damage: Vec<String>,
}

/// Damage told of frames read but not needed, at most this many, then a count.
const UNNEEDED_TOLD: usize = 8;

/// Damage found in frames not needed: a few told, the rest counted.
#[derive(Default)]
struct Unneeded {
    told: std::sync::Mutex<Vec<String>>,
    more: AtomicU64,
}

impl Unneeded {
    fn add(&self, m: String) {
        let mut t = self.told.lock().unwrap_or_else(|e| e.into_inner());
        match t.len() < UNNEEDED_TOLD {
            true => t.push(m),
            false => _ = self.more.fetch_add(1, Relaxed),
        }
    }

    fn take(self) -> Vec<String> {
        let mut t = self.told.into_inner().unwrap_or_else(|e| e.into_inner());
        let more = self.more.into_inner();
        if more > 0 {
            t.push(format!("{more} more frame(s) read through are damaged too"));
        }
        t
    }
}

/// What every stage of one run shares.
struct Shared<'a> {
    stripes: &'a [StripeIn],
    files: &'a [FileIn],
    p: &'a Params,
    sink: Option<&'a dyn FrameSink>,
    /// Manifest id -> index in `files`.
    index: IdIndex,
    state: write::Files,
    done: &'a Done<'a>,
    pool: Pool,
    abort: &'a Abort,
    read_st: Arc<Stage>,
    dec_st: Arc<Stage>,
    write_st: Arc<Stage>,
    target_lane: Arc<Lane>,
    stored_total: AtomicU64,
    left_out_total: AtomicU64,
    /// Stored bytes of frames stepped over because the target holds them (`proven`).
    proven_total: AtomicU64,
    partial_frames: AtomicU64,
    unneeded_damage: Unneeded,
}

struct Item {
    header: FrameHeader,
    stripe: usize,
    at: u64,
    buf: Buf,
    /// Read in part: only these pages of the chunk are in `buf`.
    partial: Option<partial::Partial>,
}

/// A file's checksum from the digests of its chunks (chunk number -> digest, each
/// below the file's chunk count), or the first offset no frame holds.
fn file_result(f: &FileIn, d: &ChunkDigests, t: u64) -> Result<Checksum, String> {
    match d.first_missing(f.size.div_ceil(t)).filter(|_| !f.sparse) {
        Some(missing) => Err(format!("no frame holds offset {}", missing * t)),
        None => Ok(file_checksum(f.size, d.values())),
    }
}

/// Restores (or with `sink` None, verifies) the frames of `stripes`. `files` holds
/// every regular file of the set; each one's checksum goes to `done`.
pub fn run(
    stripes: &[StripeIn],
    files: &[FileIn],
    p: &Params,
    sink: Option<&dyn FrameSink>,
    progress: &Progress,
    done: &Done,
) -> Result<Outcome> {
    let started = Instant::now();
    let t = p.transfer_size as u64;
    let buf_size =
        CodecSpec::bound(p.transfer_size) + crate::crypt::TAG_LEN + p.block_size + pool::ALIGN;
    let live = &progress.live;
    let abort = Abort::default();
    let sh = Shared {
        stripes,
        files,
        p,
        sink,
        index: IdIndex::new(files.iter().map(|f| f.id)),
        state: write::Files::new(files.len()),
        done,
        pool: Pool::new(p.buffer_count, buf_size).counted(live.pool_in_use.clone()),
        abort: &abort,
        read_st: live.stage("read"),
        dec_st: live.stage("decompress"),
        write_st: live.stage("write"),
        // One write lane: the target directory.
        target_lane: live.write_lanes(1)[0].clone(),
        stored_total: AtomicU64::new(0),
        left_out_total: AtomicU64::new(0),
        proven_total: AtomicU64::new(0),
        partial_frames: AtomicU64::new(0),
        unneeded_damage: Unneeded::default(),
    };
    live.pool_size.store(p.buffer_count as u64, Relaxed);
    let read_lanes = live.read_lanes(stripes.len());
    let _signals = crate::interrupt::catch();
    progress.total.store(
        stripes.iter().map(|s| s.body_end - s.body_start).sum(),
        Relaxed,
    );
    let (tx, rx) = bounded::<Item>(p.buffer_count);

    std::thread::scope(|s| {
        for (si, lane) in read_lanes.iter().enumerate() {
            let (tx, sh) = (tx.clone(), &sh);
            s.spawn(move || {
                if let Err(e) = read::read_stripe(sh, si, lane, progress, &tx) {
                    sh.abort.fail(e);
                }
            });
        }
        drop(tx);
        let writers = (sh.sink.is_some() && p.write_depth > 0).then(|| bounded(p.write_depth));
        for _ in 0..p.threads {
            let (rx, sh, wtx) = (rx.clone(), &sh, writers.as_ref().map(|w| w.0.clone()));
            s.spawn(move || check::checker(sh, &rx, wtx.as_ref()));
        }
        if let Some((wtx, wrx)) = writers {
            drop(wtx);
            for _ in 0..p.write_depth {
                let (wrx, sh) = (wrx.clone(), &sh);
                s.spawn(move || write::writer(sh, &wrx));
            }
        }
    });
    if let Some(e) = abort.take() {
        return Err(e);
    }
    let wall = started.elapsed();
    for (fi, f) in files.iter().enumerate() {
        if let Some(d) = sh.state.rest(fi) {
            done(fi, file_result(f, &d, t))?;
        }
    }
    let mut stages = vec![
        (
            "read",
            &*sh.read_st,
            stripes.len(),
            "a free buffer",
            "the decompressors",
        ),
        (
            "decompress",
            &*sh.dec_st,
            p.threads,
            "a frame",
            "the writes",
        ),
    ];
    if sink.is_some() {
        stages.push((
            "write",
            &*sh.write_st,
            if p.write_depth > 0 {
                p.write_depth
            } else {
                p.threads
            },
            "a checked frame",
            "the target",
        ));
    }
    let waits = summarize(&stages, wall);
    Ok(Outcome {
        raw_bytes: sh.dec_st.bytes.load(Relaxed),
        stored_bytes: sh.stored_total.load(Relaxed),
        frames: sh.read_st.ops.load(Relaxed),
        wall,
        waits,
        pool_bytes: sh.pool.bytes() + (p.threads * sh.pool.buf_size) as u64,
        left_out_bytes: sh.left_out_total.load(Relaxed),
        proven_bytes: sh.proven_total.load(Relaxed),
        partial_frames: sh.partial_frames.load(Relaxed),
        unneeded_damage: sh.unneeded_damage.take(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_in_frames_not_needed_is_told_a_few_times_then_counted() {
        let u = Unneeded::default();
        for i in 0..UNNEEDED_TOLD + 3 {
            u.add(format!("frame {i}"));
        }
        let told = u.take();
        assert_eq!(told.len(), UNNEEDED_TOLD + 1);
        assert_eq!(told[0], "frame 0");
        assert_eq!(
            told[UNNEEDED_TOLD - 1],
            format!("frame {}", UNNEEDED_TOLD - 1)
        );
        assert!(told[UNNEEDED_TOLD].starts_with("3 more"), "{told:?}");
        assert!(Unneeded::default().take().is_empty());
    }

    #[test]
    fn a_file_is_whole_once_every_chunk_is_recorded_and_never_twice() {
        let files = write::Files::new(3);
        // File 0: one chunk, whole at once; a second frame of it is a repeat.
        let d = files.record(0, 0, [1; 32], Some(1)).ok().unwrap().unwrap();
        assert_eq!(d.len(), 1);
        assert!(files.record(0, 0, [1; 32], Some(1)).is_err());
        // File 1: three chunks, out of order; whole with the third.
        assert!(files.record(1, 2, [2; 32], Some(3)).ok().unwrap().is_none());
        assert!(files.record(1, 2, [2; 32], Some(3)).is_err());
        assert!(files.record(1, 0, [0; 32], Some(3)).ok().unwrap().is_none());
        let d = files.record(1, 1, [1; 32], Some(3)).ok().unwrap().unwrap();
        assert_eq!(d.values().map(|v| v[0]).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(files.record(1, 1, [1; 32], Some(3)).is_err());
        // File 2: sparse, whole only at the end; files already told are not told again.
        assert!(files.record(2, 5, [5; 32], None).ok().unwrap().is_none());
        assert!(files.rest(0).is_none() && files.rest(1).is_none());
        assert_eq!(files.rest(2).unwrap().len(), 1);
    }

    #[test]
    fn a_missing_chunk_is_named_by_its_offset() {
        let f = |size, sparse| FileIn {
            id: 1,
            size,
            sparse,
        };
        let d = |chunks: &[u64]| {
            let mut d = ChunkDigests::default();
            // Out of order, as frames of several stripes come.
            for &c in chunks.iter().rev() {
                assert!(d.insert(c, [c as u8; 32]));
            }
            assert!(chunks.is_empty() || !d.insert(chunks[0], [9; 32]));
            d
        };
        let all = file_result(&f(300, false), &d(&[0, 1, 2]), 100).unwrap();
        assert_eq!(all, file_checksum(300, [[0; 32], [1; 32], [2; 32]].iter()));
        for (have, missing) in [(&[1, 2][..], 0), (&[0, 2], 100), (&[0, 1], 200), (&[], 0)] {
            let e = file_result(&f(300, false), &d(have), 100).unwrap_err();
            assert_eq!(e, format!("no frame holds offset {missing}"), "{have:?}");
        }
        // A sparse file's checksum is over the chunks present.
        let some = file_result(&f(300, true), &d(&[1]), 100).unwrap();
        assert_eq!(some, file_checksum(300, [[1; 32]].iter()));
    }
}
