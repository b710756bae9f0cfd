//! WAL records and the blocks they touch (PostgreSQL's xlogrecord.h and
//! xlogreader.c's DecodeXLogRecord), the first step of change tracking (issue 21):
//! which (tablespace, database, relation, fork, block) each record of a segment
//! references. Records that cross pages are reassembled; one that continues into the
//! next segment is returned as unfinished.

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
/// A record longer than this is damage, not WAL (PostgreSQL's XLogRecordMaxSize is 1 GiB).
const MAX_RECORD: usize = 1 << 30;

fn maxalign(n: u64) -> u64 {
    (n + 7) & !7
}

/// Decodes every record that starts in `seg` (a whole segment of `blcksz`-byte pages,
/// its first page carrying the long header). A record that began in the previous
/// segment is skipped, as pg_waldump does. Errors name the LSN and what is wrong.
pub fn decode_segment(seg: &[u8], blcksz: usize) -> Result<Decoded, String> {
    if seg.len() < LONG_PHD || blcksz < LONG_PHD || !seg.len().is_multiple_of(blcksz) {
        return Err("not a whole segment of WAL pages".into());
    }
    let info = get_u16(seg, 2);
    if info & XLP_LONG_HEADER == 0 {
        return Err("the first page has no long header".into());
    }
    let seg_start = get_u64(seg, 8);
    let mut out = Decoded::default();
    // Offset of the first record: after the long header and any continued record.
    let mut pos = LONG_PHD as u64;
    if info & XLP_FIRST_IS_CONTRECORD != 0 {
        let rem = get_u32(seg, 16) as u64;
        pos =
            skip_data(seg, blcksz, pos, rem).ok_or("the continued record runs past the segment")?;
        pos = maxalign(pos);
    }
    let mut buf = Vec::new();
    loop {
        pos = to_data(pos, blcksz);
        if pos >= seg.len() as u64 {
            return Ok(out);
        }
        let lsn = seg_start + pos;
        let tot = match peek_len(seg, pos) {
            None => {
                out.unfinished_at = Some(lsn);
                return Ok(out);
            }
            Some(0) => return Ok(out),
            Some(n) if (n as usize) < RECORD_HEADER || n as usize > MAX_RECORD => {
                return Err(format!(
                    "the record at {} claims {n} bytes",
                    super::format_lsn(lsn)
                ))
            }
            Some(n) => n as u64,
        };
        buf.clear();
        let Some(next) = gather(seg, blcksz, pos, tot, &mut buf) else {
            out.unfinished_at = Some(lsn);
            return Ok(out);
        };
        let rec = decode_record(&buf, lsn)
            .map_err(|m| format!("the record at {}: {m}", super::format_lsn(lsn)))?;
        // A switch record ends the segment's WAL (XLOG_SWITCH of the XLOG resource manager).
        let switch = rec.rmid == 0 && rec.info & 0xF0 == 0x40;
        out.records.push(rec);
        if switch {
            return Ok(out);
        }
        pos = maxalign(next);
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

/// Decodes one whole record's header and block references.
fn decode_record(r: &[u8], lsn: u64) -> Result<Record, String> {
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
    let mut rec = Record {
        lsn,
        xid: get_u32(r, 4),
        info: r[16],
        rmid: r[17],
        blocks: vec![],
    };
    let mut p = RECORD_HEADER;
    let mut data_total = 0usize;
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
                data_total += r[p] as usize;
                p += 1;
                break;
            }
            BLOCK_ID_DATA_LONG => {
                need(p, 4)?;
                data_total += get_u32(r, p) as usize;
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
                    if bimg_info & BKPIMAGE_HAS_HOLE != 0 && bimg_info & BKPIMAGE_COMPRESSED != 0 {
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
                rec.blocks.push(BlockRef {
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
    Ok(rec)
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
        r.push(BLOCK_ID_DATA_SHORT);
        r.push(data as u8);
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
}
