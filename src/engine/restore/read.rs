//! The read stage: one thread per stripe reads its frames in order.

use super::{partial, Item, Shared, StripeIn};
use crate::engine::pool;
use crate::engine::stats::{Lane, Progress};
use crate::format::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::pad_to;
use crate::format::Codec;
use anyhow::{anyhow, bail, Result};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// Reads one stripe's frames in order, reading each payload together with the
/// next frame's header (one read per frame).
pub(super) fn read_stripe(
    sh: &Shared,
    si: usize,
    lane: &Lane,
    progress: &Progress,
    tx: &crossbeam_channel::Sender<Item>,
) -> Result<()> {
    let (st, pool, abort, read_st) = (&sh.stripes[si], &sh.pool, sh.abort, &sh.read_st);
    let block = sh.p.block_size as u64;
    let mut at = st.body_start;
    let mut hdr = [0u8; FRAME_HEADER_LEN];
    let io_err = |e: io::Error, off: u64| {
        let m = format!("stripe '{}': read at offset {off} failed: {e}", st.name);
        match crate::fault::io_is_transient(&e) {
            true => crate::fault::like_io(&e, m),
            false => anyhow!("{m} (the stripe is truncated or unreadable)"),
        }
    };
    // With the frame index, a frame stepped over is not read at all.
    let index = match sh.p.use_index {
        true => load_index(st)?,
        false => None,
    };
    let entry = |i: u64| {
        let ix = index.as_deref()?;
        let at = i as usize * FRAME_HEADER_LEN;
        ix.get(at..at + FRAME_HEADER_LEN)
    };
    st.source.reading_from(at);
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
    let mut ahead = index.as_deref().map(|ix| Ahead::new(ix, at));
    // Frames stepped over between frames read close by are read through into this.
    let mut through = Vec::new();
    let sealed = sh.p.seal.is_some();
    // Found once a frame that could carry page checks has none: the set was written
    // before them, and its frames are read whole.
    let mut no_checks = false;
    for i in 0..st.frames {
        // With the index, the frame is placed by its entry; the header as the stripe
        // holds it (`hdr`, when read) is checked against it.
        let header = FrameHeader::decode_in(entry(i).unwrap_or(&hdr), at, sealed)
            .map_err(|e| anyhow!("stripe '{}': {e}", st.name))?;
        let mut damaged = against_index(st, entry(i), &hdr, i, at, sealed)?;
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
        let (step, read_through) = match &mut ahead {
            Some(a) => a.next(sh, st, i)?,
            // Without the index a frame is read whole or stepped over.
            None => (
                decide(sh, &header, 0).map(|s| s.filter(|s| *s != Step::Partial)),
                false,
            ),
        };
        let step = step.map_err(|e| anyhow!("stripe '{}', frame at offset {at}: {e}", st.name))?;
        // A frame read through, or of a stripe without page checks, is read whole.
        let step = step.filter(|s| *s != Step::Partial || !(read_through || no_checks));
        if let (None, Some(why)) = (step, &damaged) {
            bail!("stripe '{}': {why}", st.name);
        }
        if step.is_some() && read_through {
            // Its bytes are not needed, but reading them keeps the reads in order: the
            // kernel reads ahead of a sequential reader, not of one that skips.
            through.resize(through.len().max(total as usize), 0);
            let t0 = Instant::now();
            let r = st.source.read_exact_at(&mut through[..total as usize], at);
            let took = t0.elapsed();
            read_st.busy(took);
            read_st.op(total);
            lane.op(total, took);
            // Not needed, so not a failure of this restore; but damage read is told.
            let bytes = &through[..total as usize];
            if r.is_ok() && damaged.is_none() {
                damaged = against_index(st, entry(i), &bytes[..FRAME_HEADER_LEN], i, at, sealed)?;
            }
            damaged = damaged.or_else(|| through_damage(sh, &header, r, bytes));
        }
        if let (Some(_), Some(why)) = (step, damaged) {
            sh.unneeded_damage
                .add(format!("stripe '{}', frame at offset {at}: {why}", st.name));
        }
        let not_read = if read_through {
            0
        } else {
            header.stored_len as u64
        };
        if step == Some(Step::Proven) {
            // Stepped over: the target holds its bytes; its digest is the file's.
            if more {
                next_header(st, entry(i + 1), &mut hdr, next).map_err(|e| io_err(e, next))?;
            }
            sh.proven_total.fetch_add(not_read, Relaxed);
            progress.done.fetch_add(total, Relaxed);
            let fi = sh.index.get(header.file_id).expect("a file proven");
            super::check::record_digest(sh, fi, &header, header.raw_hash)
                .map_err(|e| anyhow!("stripe '{}', frame at offset {at}: {e}", st.name))??;
            at = next;
            continue;
        }
        if step == Some(Step::LeftOut) {
            // Stepped over: only the next frame's header is read (or the index's).
            if more {
                next_header(st, entry(i + 1), &mut hdr, next).map_err(|e| io_err(e, next))?;
            }
            sh.left_out_total.fetch_add(not_read, Relaxed);
            progress.done.fetch_add(total, Relaxed);
            at = next;
            continue;
        }
        let Some((mut buf, waited)) = pool.get(abort) else {
            return Ok(());
        };
        read_st.wait_in(waited);
        if step == Some(Step::Partial) {
            let t0 = Instant::now();
            let part = match partial::wanted(sh, &header, total) {
                Ok(Some(r)) => partial::read(st, &header, at, r, sh.p.page_size, &mut buf),
                Ok(None) => Ok(partial::Read::NoChecks),
                Err(e) => Err(e),
            };
            let took = t0.elapsed();
            read_st.busy(took);
            match part.map_err(|e| io_err(e, at))? {
                partial::Read::Part(part) => {
                    let n = part.read;
                    read_st.op(n);
                    lane.op(n, took);
                    progress.done.fetch_add(total, Relaxed);
                    sh.partial_frames.fetch_add(1, Relaxed);
                    sh.proven_total.fetch_add(
                        header.stored_len as u64 - n.min(header.stored_len as u64),
                        Relaxed,
                    );
                    if more {
                        next_header(st, entry(i + 1), &mut hdr, next)
                            .map_err(|e| io_err(e, next))?;
                    }
                    buf.len = header.stored_len as usize;
                    let item = Item {
                        header,
                        stripe: si,
                        at,
                        buf,
                        partial: Some(part),
                    };
                    match pool::send(tx, item, abort) {
                        Some(w) => read_st.wait_out(w),
                        None => return Ok(()),
                    }
                    at = next;
                    continue;
                }
                partial::Read::NoChecks => no_checks = true,
                partial::Read::Damaged(why) => sh.unneeded_damage.add(format!(
                    "stripe '{}', frame at offset {at}: {why}; the frame was read whole",
                    st.name
                )),
            }
        }
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
                partial: None,
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

/// What is wrong with the stored bytes of a frame read through (`bytes`: it whole,
/// header first), if anything: checked as far as they can be without decompressing,
/// which a frame not needed is not.
fn through_damage(
    sh: &Shared,
    h: &FrameHeader,
    read: io::Result<()>,
    bytes: &[u8],
) -> Option<String> {
    if let Err(e) = read {
        return Some(format!("cannot be read: {e}"));
    }
    let stored = &bytes[FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.stored_len as usize];
    super::check::crc_damage(sh.p, h, stored).or_else(|| {
        // A plain set's uncompressed frame: its stored bytes are the raw ones the
        // header's digest is of.
        let plain = sh.p.seal.is_none() && sh.p.sign.is_none() && h.codec == Codec::None;
        let digested = plain && h.kind != FrameKind::Zero;
        (digested && sh.p.hash.digest(stored) != h.raw_hash)
            .then(|| super::check::digest_damage(sh.p.hash))
    })
}

/// Why a frame is stepped over unread.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The target holds its bytes (`--delta wal`).
    Proven,
    /// Its file is left out (`--db-include`).
    LeftOut,
    /// Only the pages the target lacks are read (`--delta wal`, `partial`).
    Partial,
}

/// Frame `h`'s step (`total`: its bytes in the stripe, padded).
fn decide(sh: &Shared, h: &FrameHeader, total: u64) -> Result<Option<Step>> {
    if proven(sh, h)? {
        return Ok(Some(Step::Proven));
    }
    if sh.p.left_out.contains(&h.file_id) {
        return Ok(Some(Step::LeftOut));
    }
    Ok(partial::wanted(sh, h, total)?.map(|_| Step::Partial))
}

/// Frames decided ahead of the reader, by index, at most this many or this many bytes
/// to read; the frames stepped over between two it reads less than `AHEAD_GAP` apart are
/// read through, so that the reads stay in order and the kernel reads ahead of them
/// (better than ranges asked ahead with WILLNEED: bench/README). Refilled at half.
const AHEAD_FRAMES: usize = 256;
const AHEAD_BYTES: u64 = 32 << 20;
/// `READ_THROUGH_GAP` of the tests' `forge` mirrors it.
const AHEAD_GAP: u64 = 256 << 10;

/// With the frame index: each frame's step decided once, up to `AHEAD_*` frames ahead.
struct Ahead<'a> {
    index: &'a [u8],
    /// Decisions for frames `j - decided.len()..j`, what each to read spans, and whether
    /// one stepped over is read through.
    decided: std::collections::VecDeque<(Result<Option<Step>>, u64, bool)>,
    j: u64,
    at_j: u64,
    bytes: u64,
    /// Where the last frame to read ends, and the first frame stepped over since (frame
    /// numbers): kept from one refill to the next, so that reading through goes on.
    read_end: Option<u64>,
    gap_from: Option<u64>,
}

impl<'a> Ahead<'a> {
    fn new(index: &'a [u8], body_start: u64) -> Ahead<'a> {
        Ahead {
            index,
            decided: Default::default(),
            j: 0,
            at_j: body_start,
            bytes: 0,
            read_end: None,
            gap_from: None,
        }
    }

    /// Frame `i`'s step (frames before it taken already), and whether it is read through.
    fn next(&mut self, sh: &Shared, st: &StripeIn, i: u64) -> Result<(Result<Option<Step>>, bool)> {
        if self.decided.len() <= AHEAD_FRAMES / 2 && self.bytes <= AHEAD_BYTES / 2 {
            self.fill(sh, st)?;
        }
        let (step, read, through) = (self.decided.pop_front())
            .unwrap_or_else(|| (Err(anyhow!("frame {i} is past the frame index")), 0, false));
        self.bytes -= read;
        Ok((step, through))
    }

    fn fill(&mut self, sh: &Shared, st: &StripeIn) -> Result<()> {
        let block = sh.p.block_size as u64;
        while self.j < st.frames
            && self.decided.len() < AHEAD_FRAMES
            && (self.bytes < AHEAD_BYTES || self.decided.is_empty())
        {
            let e = self.j as usize * FRAME_HEADER_LEN;
            let h = FrameHeader::decode_in(
                &self.index[e..e + FRAME_HEADER_LEN],
                self.at_j,
                sh.p.seal.is_some(),
            )
            .map_err(|e| anyhow!("stripe '{}', frame index: {e}", st.name))?;
            let total = pad_to((FRAME_HEADER_LEN as u64) + h.stored_len as u64, block);
            let step = decide(sh, &h, total);
            let (at, end) = (self.at_j, self.at_j + total);
            let read = match step {
                Ok(None) if end <= st.body_end => {
                    // Close to the last frame read (in this refill or the one before).
                    let close = self.read_end.is_some_and(|e| at <= e + AHEAD_GAP);
                    // The frames stepped over since the last one read (those the reader
                    // has not taken yet) are read through when the gap is small.
                    let first = self.j - self.decided.len() as u64;
                    if let Some(g) = self.gap_from.filter(|_| close) {
                        let from = g.max(first) - first;
                        (self.decided.range_mut(from as usize..)).for_each(|d| d.2 = true);
                    }
                    (self.read_end, self.gap_from) = (Some(end), None);
                    total
                }
                // Bounded as a frame read is: a gap holding a frame larger than a pool
                // buffer (a forged length) is not read through.
                _ if total > sh.pool.buf_size as u64 => {
                    (self.read_end, self.gap_from) = (None, None);
                    0
                }
                _ => {
                    self.gap_from = self.gap_from.or(Some(self.j));
                    0
                }
            };
            self.bytes += read;
            self.decided.push_back((step, read, false));
            self.j += 1;
            self.at_j = end;
        }
        Ok(())
    }
}

/// Stripe `st`'s frame index (every frame's header in order), its CRC checked (None: it
/// has none).
pub fn load_index(st: &StripeIn) -> Result<Option<Vec<u8>>> {
    let Some(ix) = st.index else {
        return Ok(None);
    };
    let mut b = vec![0u8; ix.len as usize];
    st.source.read_exact_at(&mut b, ix.offset).map_err(|e| {
        anyhow!(
            "stripe '{}': cannot read its frame index at offset {}: {e}",
            st.name,
            ix.offset
        )
    })?;
    let crc = crc32c::crc32c(&b);
    if crc != ix.crc {
        bail!(
            "stripe '{}': its frame index at offset {} is damaged (CRC32C {crc:08x}, expected {:08x}); {INDEX_HINT}",
            st.name,
            ix.offset,
            ix.crc
        );
    }
    Ok(Some(b))
}

const INDEX_HINT: &str = "the set is damaged: run verify, and restore without --delta wal or --db-include, which step over frames by the index";

/// The next frame's header: the index's entry, else read at `at`.
fn next_header(st: &StripeIn, entry: Option<&[u8]>, hdr: &mut [u8], at: u64) -> io::Result<()> {
    match entry {
        Some(e) => {
            hdr.copy_from_slice(e);
            Ok(())
        }
        None => st.source.read_exact_at(hdr, at),
    }
}

/// Frame `i`'s header as the stripe holds it (`read`) against its index entry: None
/// when they agree (or there is no index); why, when the header fails its own checks
/// (that frame's damage); an error when it is whole and differs (the index or the
/// stripe forged).
fn against_index(
    st: &StripeIn,
    entry: Option<&[u8]>,
    read: &[u8],
    i: u64,
    at: u64,
    sealed: bool,
) -> Result<Option<String>> {
    match entry {
        Some(e) if e != read => match FrameHeader::decode_in(read, at, sealed) {
            Err(e) => Ok(Some(e.to_string())),
            Ok(_) => bail!(
                "stripe '{}': frame {i} at offset {at} differs from its frame index entry; {INDEX_HINT}",
                st.name
            ),
        },
        _ => Ok(None),
    }
}

/// Whether the sink holds a plain set's frame's bytes already (`FrameSink::proven`): its
/// header digest is of the raw bytes, so it stands for them in the file's checksum.
fn proven(sh: &Shared, h: &FrameHeader) -> Result<bool> {
    let Some(sink) = sh
        .sink
        .filter(|_| sh.p.seal.is_none() && sh.p.sign.is_none())
    else {
        return Ok(false);
    };
    let Some(fi) = sh.index.get(h.file_id) else {
        return Ok(false);
    };
    let (size, t) = (sh.files[fi].size, sh.p.transfer_size as u64);
    if !h.offset.is_multiple_of(t) || h.offset >= size {
        return Ok(false);
    }
    let len = (size - h.offset).min(t) as usize;
    Ok(sink.proven(h.file_id, h.offset, len)?)
}
