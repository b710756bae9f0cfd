//! Reads in part (`--delta wal`): of a plain set's uncompressed Data frame whose chunk the
//! target holds in part, only the pages it lacks are read, with the frame's page checks
//! (docs/FORMAT.md); its digest stands for the chunk in the file's checksum, as a frame
//! stepped over does.

use super::{Shared, StripeIn};
use crate::engine::pool::Buf;
use crate::format::frame::{FrameHeader, FrameKind, FRAME_HEADER_LEN};
use crate::format::{page_checks, Codec};
use std::io;

/// The pages of a frame read, by byte range of its chunk, and its page checks.
pub(super) struct Partial {
    pub(super) ranges: Vec<(u32, u32)>,
    pub(super) checks: Vec<u32>,
    /// Bytes of the stripe read for it.
    pub(super) read: u64,
}

/// Ranges of a frame closer than this are read as one (a read costs about as much as
/// this many bytes read in order).
const MERGE_GAP: u32 = 64 << 10;

/// The byte ranges of frame `h` (padded to `total` bytes in its stripe) to read, when it
/// can be read in part and that reads at most half of it; None: read it whole.
pub(super) fn wanted(
    sh: &Shared,
    h: &FrameHeader,
    total: u64,
) -> std::io::Result<Option<Vec<(u32, u32)>>> {
    let (p, page) = (sh.p, sh.p.page_size as u64);
    let plain = p.seal.is_none() && p.sign.is_none();
    let (Some(sink), true) = (
        sh.sink,
        plain && h.kind == FrameKind::Data && h.codec == Codec::None,
    ) else {
        return Ok(None);
    };
    let Some(fi) = sh.index.get(h.file_id) else {
        return Ok(None);
    };
    let (size, t, raw) = (sh.files[fi].size, p.transfer_size as u64, h.raw_len as u64);
    let pad = total.saturating_sub(FRAME_HEADER_LEN as u64 + raw);
    let fits = h.offset.is_multiple_of(t) && h.offset < size && raw == (size - h.offset).min(t);
    if !fits || h.stored_len != h.raw_len || raw <= page || !h.offset.is_multiple_of(page) {
        return Ok(None);
    }
    if (pad as usize) < page_checks::len(raw as usize, page as usize) {
        return Ok(None);
    }
    let Some(r) = sink.differs(h.file_id, h.offset, raw as usize)? else {
        return Ok(None);
    };
    let aligned = r
        .iter()
        .all(|&(s, e)| (s as u64).is_multiple_of(page) && s < e && e as u64 <= raw);
    let bytes: u64 = r.iter().map(|&(s, e)| (e - s) as u64).sum();
    Ok((aligned && !r.is_empty() && bytes <= raw / 2).then_some(r))
}

/// What reading a frame in part gave.
pub(super) enum Read {
    /// Its pages in `ranges` (at their places in the buffer) and page checks.
    Part(Partial),
    /// It has no page checks (a set written before them): read it whole.
    NoChecks,
    /// Its page checks are damaged (why): read it whole.
    Damaged(String),
}

/// Reads `ranges` of the frame at `at` (header `h`) and its page checks into `buf`, each
/// byte of the chunk at its own offset in the buffer.
pub(super) fn read(
    st: &StripeIn,
    h: &FrameHeader,
    at: u64,
    ranges: Vec<(u32, u32)>,
    page: usize,
    buf: &mut Buf,
) -> io::Result<Read> {
    let raw = h.raw_len as usize;
    let tlen = page_checks::len(raw, page) as u32;
    let table = (raw as u32, raw as u32 + tlen);
    let mut spans: Vec<(u32, u32)> = Vec::with_capacity(ranges.len() + 1);
    for &(s, e) in ranges.iter().chain(std::iter::once(&table)) {
        match spans.last_mut() {
            Some(last) if s <= last.1 + MERGE_GAP => last.1 = last.1.max(e),
            _ => spans.push((s, e)),
        }
    }
    let base = at + FRAME_HEADER_LEN as u64;
    let mut n = 0u64;
    let space = buf.space();
    if table.1 as usize > space.len() {
        return Ok(Read::NoChecks);
    }
    for &(s, e) in &spans {
        st.source
            .read_exact_at(&mut space[s as usize..e as usize], base + s as u64)?;
        n += (e - s) as u64;
    }
    let mut hb = [0u8; FRAME_HEADER_LEN];
    h.encode(&mut hb);
    Ok(
        match page_checks::read(&hb, raw, page, &space[table.0 as usize..table.1 as usize]) {
            Ok(Some(checks)) => Read::Part(Partial {
                ranges,
                checks,
                read: n,
            }),
            Ok(None) => Read::NoChecks,
            Err(why) => Read::Damaged(why),
        },
    )
}
