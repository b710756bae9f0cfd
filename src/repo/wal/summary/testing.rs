//! Synthetic WAL with real records, for unit tests.

use crate::pg::walrecord::RelFile;

pub const SEG: usize = 16 << 20;
pub const BLK: usize = 8192;

/// A record of `rmid`/`info` referencing `blocks` (main fork unless given), with
/// `main` as its main data, CRC'd as PostgreSQL does.
pub fn record(rmid: u8, info: u8, blocks: &[(RelFile, u8, u32)], main: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; 24];
    for (i, (f, fork, b)) in blocks.iter().enumerate() {
        r.push(i as u8);
        r.push(*fork);
        r.extend_from_slice(&0u16.to_le_bytes());
        for v in [f.spc, f.db, f.rel, *b] {
            r.extend_from_slice(&v.to_le_bytes());
        }
    }
    if !main.is_empty() {
        if main.len() < 256 {
            r.push(255);
            r.push(main.len() as u8);
        } else {
            r.push(254);
            r.extend_from_slice(&(main.len() as u32).to_le_bytes());
        }
        r.extend_from_slice(main);
    }
    let tot = r.len() as u32;
    r[0..4].copy_from_slice(&tot.to_le_bytes());
    r[16] = info;
    r[17] = rmid;
    let mut c = crc32c::crc32c(&r[24..]);
    c = crc32c::crc32c_append(c, &r[..20]);
    r[20..24].copy_from_slice(&c.to_le_bytes());
    r
}

/// Lays `records` out as PostgreSQL 17 does over `n` 16 MiB segments of cluster 5
/// from segment `first` of timeline 1: page headers, continuation flags, alignment;
/// pages after the last record are zero.
pub fn segments(records: &[Vec<u8>], first: u64, n: usize) -> Vec<Vec<u8>> {
    let mut stream = vec![];
    let mut bounds = vec![];
    for r in records {
        bounds.push((stream.len(), stream.len() + r.len()));
        stream.extend_from_slice(r);
        while stream.len() % 8 != 0 {
            stream.push(0);
        }
    }
    let mut all = vec![0u8; SEG * n];
    let (mut pos, mut i) = (0usize, 0usize);
    while pos < all.len() && i < stream.len() {
        let long = pos % SEG == 0;
        let hdr = if long { 40 } else { 24 };
        let inside = bounds.iter().find(|(a, e)| *a < i && i < *e);
        let mut info: u16 = if long { 2 } else { 0 };
        if inside.is_some() {
            info |= 1;
        }
        let h = &mut all[pos..];
        h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
        h[2..4].copy_from_slice(&info.to_le_bytes());
        h[4..8].copy_from_slice(&1u32.to_le_bytes());
        h[8..16].copy_from_slice(&((first as usize * SEG + pos) as u64).to_le_bytes());
        let rem = inside.map_or(0, |(_, e)| (e - i) as u32);
        h[16..20].copy_from_slice(&rem.to_le_bytes());
        if long {
            h[24..32].copy_from_slice(&5u64.to_le_bytes());
            h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
            h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
        }
        let k = (BLK - hdr).min(stream.len() - i);
        all[pos + hdr..pos + hdr + k].copy_from_slice(&stream[i..i + k]);
        i += k;
        pos += BLK;
    }
    // Segments the stream did not reach still get their first page's long header.
    for s in 0..n {
        let h = &mut all[s * SEG..];
        if h[0] == 0 {
            h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
            h[2..4].copy_from_slice(&2u16.to_le_bytes());
            h[4..8].copy_from_slice(&1u32.to_le_bytes());
            h[8..16].copy_from_slice(&(((first as usize + s) * SEG) as u64).to_le_bytes());
            h[24..32].copy_from_slice(&5u64.to_le_bytes());
            h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
            h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
        }
    }
    all.chunks(SEG).map(<[u8]>::to_vec).collect()
}

pub fn rel(n: u32) -> RelFile {
    RelFile {
        spc: 1663,
        db: 5,
        rel: n,
    }
}

/// A heap record touching blocks `b` of relation `n`.
pub fn heap(n: u32, b: &[u32]) -> Vec<u8> {
    let blocks: Vec<_> = b.iter().map(|&b| (rel(n), 0u8, b)).collect();
    record(10, 0, &blocks, &[1, 2, 3])
}

/// smgr truncate of relation `n` to `len` blocks (main fork and VM).
pub fn truncate(n: u32, len: u32) -> Vec<u8> {
    let d: Vec<u8> = [len, 1663, 5, n, 3]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    record(2, 0x20, &[], &d)
}

/// dbase create (WAL_LOG) of database `db` in pg_default.
pub fn create_db(db: u32) -> Vec<u8> {
    let d: Vec<u8> = [db, 1663].iter().flat_map(|w| w.to_le_bytes()).collect();
    record(4, 0x10, &[], &d)
}

/// A logical message of `n` bytes (no blocks): a record as long as needed.
pub fn big(n: usize) -> Vec<u8> {
    record(21, 0, &[], &vec![b'x'; n])
}
