//! Forging stripes as an attacker would: a field rewritten and its checksums made
//! valid again, so what a test reaches is the reader's bounds, not its CRCs.
//! Layouts are docs/FORMAT.md's.

use std::fs;

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The block size of a stripe (its media header's).
pub fn block_of(b: &[u8]) -> usize {
    u32_at(b, 12) as usize
}

/// Makes the media header's CRC (bytes 60..64) valid again.
pub fn fix_header(b: &mut [u8]) {
    let c = crc32c::crc32c(&b[..60]);
    put_u32(b, 60, c);
}

/// Makes the tail's CRC valid again.
pub fn fix_tail(b: &mut [u8]) {
    let n = b.len();
    let c = crc32c::crc32c(&b[n - 64..n - 4]);
    put_u32(b, n - 4, c);
}

/// Makes the CRC of the frame header at `at` valid again.
pub fn fix_frame(b: &mut [u8], at: usize) {
    let c = crc32c::crc32c(&b[at..at + 76]);
    put_u32(b, at + 76, c);
}

/// The offsets of a stripe's frames, walking the headers from the first block to the
/// body end its tail gives.
pub fn frames_of(b: &[u8]) -> Vec<usize> {
    let block = block_of(b);
    let body_end = u64_at(&b[b.len() - 64..], 40) as usize;
    let mut at = block;
    let mut out = vec![];
    while at + 80 <= body_end && &b[at..at + 4] == b"PVFR" {
        out.push(at);
        let stored = u32_at(b, at + 12) as usize;
        at += (80 + stored).div_ceil(block) * block;
    }
    out
}

/// The manifest's JSON.
pub fn manifest_json(b: &[u8]) -> Vec<u8> {
    let tail = &b[b.len() - 64..];
    let (off, len, raw) = (
        u64_at(tail, 8) as usize,
        u64_at(tail, 16) as usize,
        u64_at(tail, 24) as usize,
    );
    zstd::bulk::decompress(&b[off..off + len], raw).unwrap()
}

/// The stripe with `stored` (zstd bytes) as its manifest; the tail says `raw_len`
/// raw bytes, and its lengths and CRCs are valid.
pub fn with_stored_manifest(b: &[u8], stored: &[u8], raw_len: u64) -> Vec<u8> {
    let block = block_of(b);
    let tail = &b[b.len() - 64..];
    let off = u64_at(tail, 8) as usize;
    let mut out = b[..off].to_vec();
    out.extend(stored);
    out.resize(off + stored.len().div_ceil(block) * block + block, 0);
    let mut t = tail.to_vec();
    put_u64(&mut t, 16, stored.len() as u64);
    put_u64(&mut t, 24, raw_len);
    put_u32(&mut t, 48, crc32c::crc32c(stored));
    let n = out.len();
    out[n - 64..].copy_from_slice(&t);
    fix_tail(&mut out);
    out
}

/// The stripe with `raw` as its manifest's JSON, stored as backup stores it.
pub fn with_manifest(b: &[u8], raw: &[u8]) -> Vec<u8> {
    let stored = zstd::bulk::compress(raw, 3).unwrap();
    with_stored_manifest(b, &stored, raw.len() as u64)
}

/// Rewrites a stripe's manifest (with valid checksums), as a forger would.
pub fn rewrite_manifest(path: &str, edit: impl Fn(&mut serde_json::Value)) {
    let b = fs::read(path).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&manifest_json(&b)).unwrap();
    edit(&mut v);
    fs::write(path, with_manifest(&b, &serde_json::to_vec(&v).unwrap())).unwrap();
}

/// Rewrites a stripe's media header with `edit`, its CRC made valid again.
pub fn rewrite_header(path: &str, edit: impl Fn(&mut [u8])) {
    let mut b = fs::read(path).unwrap();
    edit(&mut b);
    fix_header(&mut b);
    fs::write(path, b).unwrap();
}

/// Rewrites an archived WAL file's header (layout in src/repo/wal/mod.rs) with `edit`,
/// its CRC made valid again.
pub fn rewrite_wal_header(path: &std::path::Path, edit: impl Fn(&mut [u8])) {
    let mut b = fs::read(path).unwrap();
    edit(&mut b);
    let c = crc32c::crc32c(&b[..148]);
    put_u32(&mut b, 148, c);
    fs::write(path, b).unwrap();
}
