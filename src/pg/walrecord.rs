//! WAL records and the blocks they touch (PostgreSQL's xlogrecord.h and
//! xlogreader.c's DecodeXLogRecord), the first step of change tracking (issue 21):
//! which (tablespace, database, relation, fork, block) each record of a segment
//! references. Records that cross pages are reassembled; one that continues into the
//! next segment is returned as unfinished, with its bytes so far (a carry) that the
//! next segment's walk completes it with.

/// A relation file's identity: tablespace, database and relation file number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelFile {
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
}

/// One block a record references.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockRef {
    pub file: RelFile,
    /// 0 main, 1 free space map, 2 visibility map, 3 init.
    pub fork: u8,
    pub block: u32,
    /// The record carries a full image of the page.
    pub image: bool,
}

/// A decoded record: where it starts, its resource manager and info bits, its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub lsn: u64,
    pub rmid: u8,
    pub info: u8,
    pub xid: u32,
    pub blocks: Vec<BlockRef>,
}

/// What one segment holds.
#[derive(Debug, Default)]
pub struct Decoded {
    pub records: Vec<Record>,
    /// The last record starts here but continues into the next segment.
    pub unfinished_at: Option<u64>,
}

/// One record as [`walk_segment`] shows it: borrowed, valid during the call.
#[derive(Debug)]
pub struct RecordView<'a> {
    pub lsn: u64,
    pub rmid: u8,
    pub info: u8,
    pub xid: u32,
    pub blocks: &'a [BlockRef],
    /// The record's main data (XLogRecGetData), after the block data.
    pub main_data: &'a [u8],
}

/// The first bytes of a record that continues into the next segment: what the next
/// segment's walk needs to decode it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carry {
    pub lsn: u64,
    /// xl_tot_len of the record.
    pub total: u32,
    pub bytes: Vec<u8>,
}

/// How a segment's first bytes were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// The segment starts with a record.
    Record,
    /// It starts with the rest of a record: the carry given completed it (or grew).
    Continued,
    /// It starts with the rest of a record no carry was given for (or whose carry does not
    /// fit): the bytes up to the first record boundary were skipped.
    Skipped,
    /// A carry was given, but this segment does not continue that record (PostgreSQL
    /// abandoned it after a crash: XLP_FIRST_IS_OVERWRITE_CONTRECORD).
    Abandoned,
}

/// What [`walk_segment`] saw besides the records.
#[derive(Debug)]
pub struct Walk {
    pub head: Head,
    /// LSN of the first record that starts in the segment, if any.
    pub first_record: Option<u64>,
    /// The last record starts here but continues past the segment.
    pub unfinished_at: Option<u64>,
    /// Its bytes so far, when they fit in `carry_max`.
    pub carry: Option<Carry>,
}

use super::walpage::{get_u16, get_u32, get_u64, LONG_PHD, SHORT_PHD, XLP_LONG_HEADER};

const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
const RECORD_HEADER: usize = 24;
const MAX_BLOCK_ID: u8 = 32;
const BLOCK_ID_DATA_SHORT: u8 = 255;
const BLOCK_ID_DATA_LONG: u8 = 254;
const BLOCK_ID_ORIGIN: u8 = 253;
const BLOCK_ID_TOPLEVEL_XID: u8 = 252;
const BKPBLOCK_FORK_MASK: u8 = 0x0F;
const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
const BKPBLOCK_SAME_REL: u8 = 0x80;
const BKPIMAGE_HAS_HOLE: u8 = 0x01;
/// PGLZ, LZ4 and ZSTD compression bits of bimg_info (PostgreSQL 15+).
const BKPIMAGE_COMPRESSED: u8 = 0x04 | 0x08 | 0x10;
/// BKPIMAGE_IS_COMPRESSED before 15 (0x04 was BKPIMAGE_APPLY then).
const BKPIMAGE_COMPRESSED_14: u8 = 0x02;

/// The bimg_info bits that say a block image is compressed, in the WAL of the version
/// whose pages carry `magic`.
fn compressed_bits(magic: u16) -> u8 {
    match super::version_of_wal_magic(magic) {
        Some(v) if v.major < 15 => BKPIMAGE_COMPRESSED_14,
        _ => BKPIMAGE_COMPRESSED,
    }
}
/// A record longer than this is damage, not WAL (PostgreSQL's XLogRecordMaxSize is 1 GiB).
const MAX_RECORD: usize = 1 << 30;

fn maxalign(n: u64) -> u64 {
    (n + 7) & !7
}

/// Decodes every record that starts in `seg` (a whole segment of `blcksz`-byte pages,
/// its first page carrying the long header). A record that began in the previous
/// segment is skipped, as pg_waldump does. Errors name the LSN and what is wrong.
pub fn decode_segment(seg: &[u8], blcksz: usize) -> Result<Decoded, String> {
    let mut out = Decoded::default();
    let w = walk_segment(seg, blcksz, None, 0, |r| {
        out.records.push(Record {
            lsn: r.lsn,
            rmid: r.rmid,
            info: r.info,
            xid: r.xid,
            blocks: r.blocks.to_vec(),
        })
    })?;
    out.unfinished_at = w.unfinished_at;
    Ok(out)
}

fn whole_pages(seg: &[u8], blcksz: usize) -> Result<(), String> {
    match seg.len() < LONG_PHD || blcksz < LONG_PHD || !seg.len().is_multiple_of(blcksz) {
        true => Err("not a whole segment of WAL pages".into()),
        false => Ok(()),
    }
}

/// Completes `c` with the `rem` bytes that continue it at the start of `seg` and passes
/// the record to `f`; returns where it ends, or None when it runs on past the segment
/// (`buf` then holds its bytes so far).
#[allow(clippy::too_many_arguments)]
fn complete(
    seg: &[u8],
    blcksz: usize,
    c: &Carry,
    rem: u64,
    compressed: u8,
    blocks: &mut Vec<BlockRef>,
    buf: &mut Vec<u8>,
    f: &mut impl FnMut(&RecordView),
) -> Result<Option<u64>, String> {
    buf.clear();
    buf.extend_from_slice(&c.bytes);
    let Some(next) = gather(seg, blcksz, LONG_PHD as u64, rem, buf) else {
        return Ok(None);
    };
    let (view, main) = decode_record(buf, c.lsn, compressed, blocks)
        .map_err(|m| format!("the record at {}: {m}", super::format_lsn(c.lsn)))?;
    f(&view.with(blocks, &buf[main]));
    Ok(Some(next))
}

/// Only the record `carry` (the previous segment's unfinished one) continued at the start
/// of `seg`, passed to `f`, as [`walk_segment`] with that carry sees it first: true when
/// `seg` continues that record and it ends in `seg`, false when it does not continue it
/// or the record runs on past `seg`.
pub fn continued_record(
    seg: &[u8],
    blcksz: usize,
    carry: &Carry,
    mut f: impl FnMut(&RecordView),
) -> Result<bool, String> {
    whole_pages(seg, blcksz)?;
    let info = get_u16(seg, 2);
    let rem = get_u32(seg, 16) as u64;
    if info & XLP_LONG_HEADER == 0
        || info & XLP_FIRST_IS_CONTRECORD == 0
        || carry.total as u64 != carry.bytes.len() as u64 + rem
    {
        return Ok(false);
    }
    let compressed = compressed_bits(get_u16(seg, 0));
    let (mut blocks, mut buf) = (Vec::new(), Vec::new());
    let done = complete(
        seg,
        blcksz,
        carry,
        rem,
        compressed,
        &mut blocks,
        &mut buf,
        &mut f,
    )?;
    Ok(done.is_some())
}

/// Calls `f` for every record that ends in `seg`: with `carry` (the previous segment's
/// unfinished record), also the one continued at its start. The record still unfinished at
/// the end is returned as a carry when its bytes so far are at most `carry_max`. Errors
/// name the LSN and what is wrong.
pub fn walk_segment(
    seg: &[u8],
    blcksz: usize,
    carry: Option<&Carry>,
    carry_max: usize,
    mut f: impl FnMut(&RecordView),
) -> Result<Walk, String> {
    whole_pages(seg, blcksz)?;
    let info = get_u16(seg, 2);
    if info & XLP_LONG_HEADER == 0 {
        return Err("the first page has no long header".into());
    }
    let seg_start = get_u64(seg, 8);
    let compressed = compressed_bits(get_u16(seg, 0));
    let mut walk = Walk {
        head: Head::Record,
        first_record: None,
        unfinished_at: None,
        carry: None,
    };
    let mut blocks: Vec<BlockRef> = Vec::with_capacity(MAX_BLOCK_ID as usize + 1);
    let mut buf = Vec::new();
    // Offset of the first record: after the long header and any continued record.
    let mut pos = LONG_PHD as u64;
    if info & XLP_FIRST_IS_CONTRECORD != 0 {
        let rem = get_u32(seg, 16) as u64;
        let fits = carry.filter(|c| c.total as u64 == c.bytes.len() as u64 + rem);
        match fits {
            Some(c) => {
                walk.head = Head::Continued;
                match complete(
                    seg,
                    blcksz,
                    c,
                    rem,
                    compressed,
                    &mut blocks,
                    &mut buf,
                    &mut f,
                )? {
                    Some(next) => pos = maxalign(next),
                    None => {
                        // The record runs on past this segment too.
                        walk.unfinished_at = Some(c.lsn);
                        if buf.len() <= carry_max {
                            walk.carry = Some(Carry {
                                lsn: c.lsn,
                                total: c.total,
                                bytes: buf,
                            });
                        }
                        return Ok(walk);
                    }
                }
            }
            None => {
                walk.head = Head::Skipped;
                match skip_data(seg, blcksz, pos, rem) {
                    Some(p) => pos = maxalign(p),
                    None => return Ok(walk),
                }
            }
        }
    } else if carry.is_some() {
        walk.head = Head::Abandoned;
    }
    loop {
        pos = to_data(pos, blcksz);
        if pos >= seg.len() as u64 {
            return Ok(walk);
        }
        let lsn = seg_start + pos;
        let tot = match peek_len(seg, pos) {
            None => {
                walk.unfinished_at = Some(lsn);
                return Ok(walk);
            }
            Some(0) => return Ok(walk),
            Some(n) if (n as usize) < RECORD_HEADER || n as usize > MAX_RECORD => {
                return Err(format!(
                    "the record at {} claims {n} bytes",
                    super::format_lsn(lsn)
                ))
            }
            Some(n) => n as u64,
        };
        walk.first_record.get_or_insert(lsn);
        let in_page = blcksz as u64 - pos % blcksz as u64;
        // Most records lie within one page: decoded in place, not copied.
        let (rec, next): (&[u8], u64) = if tot <= in_page {
            (&seg[pos as usize..(pos + tot) as usize], pos + tot)
        } else {
            buf.clear();
            match gather(seg, blcksz, pos, tot, &mut buf) {
                Some(next) => (&buf[..], next),
                None => {
                    walk.unfinished_at = Some(lsn);
                    if buf.len() <= carry_max {
                        walk.carry = Some(Carry {
                            lsn,
                            total: tot as u32,
                            bytes: std::mem::take(&mut buf),
                        });
                    }
                    return Ok(walk);
                }
            }
        };
        let (view, main) = decode_record(rec, lsn, compressed, &mut blocks)
            .map_err(|m| format!("the record at {}: {m}", super::format_lsn(lsn)))?;
        // A switch record ends the segment's WAL (XLOG_SWITCH of the XLOG resource manager).
        let switch = view.rmid == 0 && view.info & 0xF0 == 0x40;
        f(&view.with(&blocks, &rec[main]));
        if switch {
            return Ok(walk);
        }
        pos = maxalign(next);
    }
}

/// A decoded record header, before its blocks and main data are lent out.
struct Header {
    lsn: u64,
    rmid: u8,
    info: u8,
    xid: u32,
}

impl Header {
    fn with<'a>(&self, blocks: &'a [BlockRef], main_data: &'a [u8]) -> RecordView<'a> {
        RecordView {
            lsn: self.lsn,
            rmid: self.rmid,
            info: self.info,
            xid: self.xid,
            blocks,
            main_data,
        }
    }
}

/// Moves a position at a page start past that page's header.
fn to_data(pos: u64, blcksz: usize) -> u64 {
    let b = blcksz as u64;
    if pos.is_multiple_of(b) {
        pos + if pos == 0 { LONG_PHD } else { SHORT_PHD } as u64
    } else {
        pos
    }
}

/// Skips `len` bytes of record data from `pos`, stepping over page headers.
fn skip_data(seg: &[u8], blcksz: usize, mut pos: u64, mut len: u64) -> Option<u64> {
    while len > 0 {
        pos = to_data(pos, blcksz);
        let room = blcksz as u64 - pos % blcksz as u64;
        let k = room.min(len);
        pos += k;
        len -= k;
        if pos > seg.len() as u64 {
            return None;
        }
    }
    Some(pos)
}

/// The xl_tot_len of the record at `pos` (its first 4 bytes never cross a page: records
/// are 8-byte aligned), or None at the end of the segment.
fn peek_len(seg: &[u8], pos: u64) -> Option<u32> {
    let p = pos as usize;
    (p + 4 <= seg.len()).then(|| get_u32(seg, p))
}

/// Copies `len` bytes of a record from `pos` into `out`, stepping over page headers;
/// returns where the record ends, or None when it continues past the segment.
fn gather(seg: &[u8], blcksz: usize, mut pos: u64, len: u64, out: &mut Vec<u8>) -> Option<u64> {
    let mut left = len;
    while left > 0 {
        pos = to_data(pos, blcksz);
        if pos >= seg.len() as u64 {
            return None;
        }
        let room = blcksz as u64 - pos % blcksz as u64;
        let k = room.min(left) as usize;
        out.extend_from_slice(&seg[pos as usize..pos as usize + k]);
        pos += k as u64;
        left -= k as u64;
    }
    Some(pos)
}

/// Decodes one whole record's header and block references (into `blocks`); returns the
/// header and where its main data lies in `r`.
fn decode_record(
    r: &[u8],
    lsn: u64,
    compressed: u8,
    blocks: &mut Vec<BlockRef>,
) -> Result<(Header, std::ops::Range<usize>), String> {
    let tot = get_u32(r, 0) as usize;
    if tot != r.len() {
        return Err(format!("{} bytes gathered of {tot}", r.len()));
    }
    let crc = get_u32(r, 20);
    let mut c = crc32c::crc32c(&r[RECORD_HEADER..]);
    c = crc32c::crc32c_append(c, &r[..20]);
    if c != crc {
        return Err(format!(
            "its CRC32C is {c:#010x}, its header says {crc:#010x}"
        ));
    }
    let head = Header {
        lsn,
        xid: get_u32(r, 4),
        info: r[16],
        rmid: r[17],
    };
    blocks.clear();
    let mut p = RECORD_HEADER;
    let mut data_total = 0usize;
    let mut main_len = 0usize;
    let mut last: Option<RelFile> = None;
    let need = |p: usize, n: usize| -> Result<(), String> {
        (p + n <= tot)
            .then_some(())
            .ok_or_else(|| "its block headers run past its end".to_string())
    };
    while p < tot - data_total {
        let id = r[p];
        p += 1;
        match id {
            BLOCK_ID_DATA_SHORT => {
                need(p, 1)?;
                main_len = r[p] as usize;
                data_total += main_len;
                p += 1;
                break;
            }
            BLOCK_ID_DATA_LONG => {
                need(p, 4)?;
                main_len = get_u32(r, p) as usize;
                data_total += main_len;
                p += 4;
                break;
            }
            BLOCK_ID_ORIGIN => p += 2,
            BLOCK_ID_TOPLEVEL_XID => p += 4,
            id if id <= MAX_BLOCK_ID => {
                need(p, 3)?;
                let flags = r[p];
                data_total += get_u16(r, p + 1) as usize;
                p += 3;
                let mut image = false;
                if flags & BKPBLOCK_HAS_IMAGE != 0 {
                    need(p, 5)?;
                    let bimg_len = get_u16(r, p) as usize;
                    let bimg_info = r[p + 4];
                    p += 5;
                    if bimg_info & BKPIMAGE_HAS_HOLE != 0 && bimg_info & compressed != 0 {
                        p += 2;
                    }
                    data_total += bimg_len;
                    image = true;
                }
                let file = if flags & BKPBLOCK_SAME_REL != 0 {
                    last.ok_or("a block says 'same relation' before any relation")?
                } else {
                    need(p, 12)?;
                    let f = RelFile {
                        spc: get_u32(r, p),
                        db: get_u32(r, p + 4),
                        rel: get_u32(r, p + 8),
                    };
                    p += 12;
                    f
                };
                last = Some(file);
                need(p, 4)?;
                blocks.push(BlockRef {
                    file,
                    fork: flags & BKPBLOCK_FORK_MASK,
                    block: get_u32(r, p),
                    image,
                });
                p += 4;
            }
            other => return Err(format!("block id {other} is not one PostgreSQL writes")),
        }
    }
    if p + data_total != tot {
        return Err(format!(
            "its headers ({p} bytes) and data ({data_total}) do not add up to its length {tot}"
        ));
    }
    // Main data comes last, after every block's image and data.
    Ok((head, tot - main_len..tot))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `rmid` with one block reference and `data` main data, CRC'd.
    fn record(block: u32, data: usize) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_HEADER];
        r.push(0); // block 0
        r.push(0); // main fork, no image, new relation
        r.extend_from_slice(&0u16.to_le_bytes());
        for v in [1663u32, 5, 16384, block] {
            r.extend_from_slice(&v.to_le_bytes());
        }
        if data < 256 {
            r.push(BLOCK_ID_DATA_SHORT);
            r.push(data as u8);
        } else {
            r.push(BLOCK_ID_DATA_LONG);
            r.extend_from_slice(&(data as u32).to_le_bytes());
        }
        r.extend(std::iter::repeat_n(7u8, data));
        let tot = r.len() as u32;
        r[0..4].copy_from_slice(&tot.to_le_bytes());
        r[17] = 10; // heap
        let mut c = crc32c::crc32c(&r[RECORD_HEADER..]);
        c = crc32c::crc32c_append(c, &r[..20]);
        r[20..24].copy_from_slice(&c.to_le_bytes());
        r
    }

    /// Lays records out in pages of 256 bytes as PostgreSQL does: aligned, crossing
    /// page headers.
    fn segment(records: &[Vec<u8>], blcksz: usize, pages: usize) -> Vec<u8> {
        let mut seg = vec![0u8; blcksz * pages];
        let mut stream = vec![];
        for r in records {
            stream.extend_from_slice(r);
            while stream.len() % 8 != 0 {
                stream.push(0);
            }
        }
        let mut pos = 0usize;
        let mut i = 0usize;
        while i < stream.len() && pos < seg.len() {
            if pos.is_multiple_of(blcksz) {
                let long = pos == 0;
                seg[pos..pos + 2].copy_from_slice(&0xD110u16.to_le_bytes());
                let info: u16 = if long { XLP_LONG_HEADER } else { 0 };
                seg[pos + 2..pos + 4].copy_from_slice(&info.to_le_bytes());
                seg[pos + 8..pos + 16].copy_from_slice(&(0x100_0000u64 + pos as u64).to_le_bytes());
                pos += if long { LONG_PHD } else { SHORT_PHD };
            }
            seg[pos] = stream[i];
            pos += 1;
            i += 1;
        }
        seg
    }

    #[test]
    fn image_compression_bits_follow_the_version() {
        assert_eq!(compressed_bits(0xD10D), 0x02, "14: BKPIMAGE_IS_COMPRESSED");
        assert_eq!(compressed_bits(0xD110), 0x1C, "15: PGLZ, LZ4, ZSTD");
        assert_eq!(compressed_bits(0xD118), 0x1C);
    }

    #[test]
    fn records_across_pages_and_an_unfinished_one() {
        let recs: Vec<Vec<u8>> = (0..20)
            .map(|i| record(i, (i * 13 % 200) as usize))
            .collect();
        let seg = segment(&recs, 256, 64);
        let d = decode_segment(&seg, 256).unwrap();
        assert_eq!(d.records.len(), 20);
        assert!(d.unfinished_at.is_none());
        for (i, r) in d.records.iter().enumerate() {
            assert_eq!(r.blocks.len(), 1);
            assert_eq!(r.blocks[0].block, i as u32);
            assert_eq!(
                r.blocks[0].file,
                RelFile {
                    spc: 1663,
                    db: 5,
                    rel: 16384
                }
            );
            assert_eq!(r.rmid, 10);
        }
        // Cut the segment short: the record crossing the end is unfinished.
        let short = &seg[..256 * 8];
        let d = decode_segment(short, 256).unwrap();
        assert!(d.records.len() < 20 && d.unfinished_at.is_some(), "{d:?}");
        // One flipped byte inside a record: its CRC says so, with its LSN.
        let mut bad = seg.clone();
        bad[LONG_PHD + 30] ^= 1;
        let e = decode_segment(&bad, 256).unwrap_err();
        assert!(e.contains("CRC32C") && e.contains("0/1000028"), "{e}");
    }

    /// Lays records out over consecutive segments of `pages` pages each, with the
    /// continuation flag and remaining length PostgreSQL writes on continued pages.
    fn segments(records: &[Vec<u8>], blcksz: usize, pages: usize, n: usize) -> Vec<Vec<u8>> {
        let mut stream = vec![];
        let mut bounds = vec![]; // (start, end) of each record in the stream
        for r in records {
            bounds.push((stream.len(), stream.len() + r.len()));
            stream.extend_from_slice(r);
            while stream.len() % 8 != 0 {
                stream.push(0);
            }
        }
        let seg_len = blcksz * pages;
        let mut all = vec![0u8; seg_len * n];
        let (mut pos, mut i) = (0usize, 0usize);
        while pos < all.len() {
            let long = pos.is_multiple_of(seg_len);
            let hdr = if long { LONG_PHD } else { SHORT_PHD };
            let inside = bounds.iter().find(|(a, e)| *a < i && i < *e);
            let mut info: u16 = if long { XLP_LONG_HEADER } else { 0 };
            let rem = inside.map_or(0, |(_, e)| (e - i) as u32);
            if inside.is_some() {
                info |= XLP_FIRST_IS_CONTRECORD;
            }
            let h = &mut all[pos..];
            h[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
            h[2..4].copy_from_slice(&info.to_le_bytes());
            h[8..16].copy_from_slice(&(0x100_0000u64 + pos as u64).to_le_bytes());
            h[16..20].copy_from_slice(&rem.to_le_bytes());
            let k = (blcksz - hdr).min(stream.len().saturating_sub(i));
            all[pos + hdr..pos + hdr + k].copy_from_slice(&stream[i..i + k]);
            i += k;
            pos += blcksz;
        }
        all.chunks(seg_len).map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn a_record_continued_in_the_next_segments_is_decoded_with_the_carry() {
        // Record 5 is 9000 bytes: it starts in segment 0 and ends in segment 2.
        let recs: Vec<Vec<u8>> = (0..12)
            .map(|i| record(i, if i == 5 { 9000 } else { 100 + i as usize * 30 }))
            .collect();
        let segs = segments(&recs, 256, 16, 4);
        let mut seen = vec![];
        let mut carry: Option<Carry> = None;
        let mut heads = vec![];
        for seg in &segs {
            let w = walk_segment(seg, 256, carry.as_ref(), 1 << 20, |r| {
                seen.push(r.blocks[0].block);
                assert_eq!(
                    r.main_data.len(),
                    if r.blocks[0].block == 5 {
                        9000
                    } else {
                        100 + r.blocks[0].block as usize * 30
                    }
                );
                assert!(r.main_data.iter().all(|&b| b == 7));
            })
            .unwrap();
            heads.push(w.head);
            carry = w.carry;
        }
        assert_eq!(seen, (0..12).collect::<Vec<u32>>());
        assert_eq!(heads[0], Head::Record);
        assert_eq!(heads[1..3], [Head::Continued, Head::Continued]);
        // Without the carry the continued record is skipped, and said to be.
        let mut alone = vec![];
        let w = walk_segment(&segs[2], 256, None, 1 << 20, |r| {
            alone.push(r.blocks[0].block)
        })
        .unwrap();
        assert_eq!(w.head, Head::Skipped);
        assert!(!alone.contains(&5) && !alone.is_empty(), "{alone:?}");
        assert!(w.first_record.unwrap() > 0x100_0000 + 2 * 4096);
        // A carry too large to keep is not kept, but the record is still unfinished.
        let w = walk_segment(&segs[0], 256, None, 100, |_| {}).unwrap();
        assert!(w.carry.is_none() && w.unfinished_at.is_some());
        // A carry the next segment does not continue (an abandoned record).
        let w = walk_segment(&segs[0], 256, None, 1 << 20, |_| {}).unwrap();
        let fresh = segment(&recs[..1], 256, 16);
        let w2 = walk_segment(&fresh, 256, w.carry.as_ref(), 1 << 20, |_| {}).unwrap();
        assert_eq!(w2.head, Head::Abandoned);
    }
}
