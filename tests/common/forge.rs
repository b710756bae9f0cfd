//! Forging stripes as an attacker would: a field rewritten and its checksums made
//! valid again, so what a test reaches is the reader's bounds, not its CRCs.
//! Layouts are docs/FORMAT.md's.

use std::fs;

/// A restore stepping over frames by the index reads through those within this many
/// bytes of the last frame it read (the reader's `AHEAD_GAP`).
pub const READ_THROUGH_GAP: usize = 256 << 10;

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

/// The frame index's offset and length, from the tail.
pub fn index_of(b: &[u8]) -> (usize, usize) {
    let tail = &b[b.len() - 64..];
    let at = (u64_at(tail, 8) + u64_at(tail, 16)) as usize;
    (at, u32_at(tail, 52) as usize)
}

/// Stripe `b` with index entry `i` (frame `i`'s header) edited, every CRC made valid
/// again: the entry's, the index's and the tail's.
pub fn with_index_entry(b: &[u8], i: usize, edit: impl Fn(&mut [u8])) -> Vec<u8> {
    let (at, len) = index_of(b);
    let mut bad = b.to_vec();
    let e = at + i * 80;
    edit(&mut bad[e..e + 80]);
    fix_frame(&mut bad, e);
    let c = crc32c::crc32c(&bad[at..at + len]);
    let n = bad.len();
    put_u32(&mut bad, n - 64 + 56, c);
    fix_tail(&mut bad);
    bad
}

/// The offsets of a stripe's frames, walking the headers from the first block to the
/// body end its tail gives.
pub fn frames_of(b: &[u8]) -> Vec<usize> {
    let block = block_of(b);
    if b.len() < 1024 || !block.is_power_of_two() || block < 512 {
        return vec![];
    }
    // A damaged tail may name any end.
    let body_end = (u64_at(&b[b.len() - 64..], 40) as usize).min(b.len());
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
    try_manifest_json(b).expect("a stripe with a manifest")
}

/// The manifest's JSON, if the tail leads to one (a damaged stripe's may not).
pub fn try_manifest_json(b: &[u8]) -> Option<Vec<u8>> {
    let tail = b.get(b.len().checked_sub(64)?..)?;
    let (off, len, raw) = (u64_at(tail, 8), u64_at(tail, 16), u64_at(tail, 24));
    let end = off.checked_add(len).filter(|&e| e <= b.len() as u64)?;
    if raw > 64 << 20 {
        return None;
    }
    zstd::bulk::decompress(&b[off as usize..end as usize], raw as usize).ok()
}

/// The little-endian number of `w` bytes at `at`.
pub fn uint_at(b: &[u8], at: usize, w: usize) -> u64 {
    (0..w).fold(0, |v, k| v | (b[at + k] as u64) << (8 * k))
}

/// The stripe with `stored` (zstd bytes) as its manifest; the tail says `raw_len`
/// raw bytes, and its lengths and CRCs are valid.
pub fn with_stored_manifest(b: &[u8], stored: &[u8], raw_len: u64) -> Vec<u8> {
    let block = block_of(b);
    let tail = &b[b.len() - 64..];
    let off = u64_at(tail, 8) as usize;
    // The frame index after the manifest goes along (none where a damaged tail names
    // bytes the stripe does not hold).
    let index_at = (off as u64).saturating_add(u64_at(tail, 16));
    let index_end = index_at.saturating_add(u32_at(tail, 52) as u64);
    let index = (b
        .get(index_at as usize..index_end as usize)
        .unwrap_or_default())
    .to_vec();
    let mut out = b[..off].to_vec();
    out.extend(stored);
    out.extend(&index);
    out.resize(
        off + (stored.len() + index.len()).div_ceil(block) * block + block,
        0,
    );
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

/// One frame of a stripe: its 80-byte header and its stored bytes.
#[derive(Clone, Debug)]
pub struct Frame {
    pub hdr: Vec<u8>,
    pub stored: Vec<u8>,
}

impl Frame {
    pub fn kind(&self) -> u8 {
        self.hdr[4]
    }
    pub fn file(&self) -> u32 {
        u32_at(&self.hdr, 8)
    }
    pub fn offset(&self) -> u64 {
        u64_at(&self.hdr, 16)
    }
    pub fn raw_len(&self) -> usize {
        u32_at(&self.hdr, 24) as usize
    }

    /// The raw bytes the frame holds (decompressed; zeros for a zero frame).
    pub fn raw(&self) -> Option<Vec<u8>> {
        let n = self.raw_len();
        match (self.kind(), self.hdr[5]) {
            (2, _) => Some(vec![0; n]),
            (_, 0) => Some(self.stored.clone()),
            (_, 1) => lz4::block::decompress(&self.stored, Some(n as i32)).ok(),
            (_, 2) => zstd::bulk::decompress(&self.stored, n).ok(),
            _ => None,
        }
    }

    /// Makes the frame of `kind` hold `raw`, stored uncompressed, with its digest.
    pub fn set_raw(&mut self, kind: u8, raw: &[u8]) {
        self.hdr[4] = kind;
        self.hdr[5] = 0;
        self.stored = if kind == 2 { vec![] } else { raw.to_vec() };
        put_u32(&mut self.hdr, 12, self.stored.len() as u32);
        put_u32(&mut self.hdr, 24, raw.len() as u32);
        put_u32(&mut self.hdr, 28, crc32c::crc32c(&self.stored));
        self.hdr[32..64].copy_from_slice(&digest(raw));
    }
}

/// A frame's content digest as format version 2 writes it (XXH3-128).
pub fn digest(raw: &[u8]) -> [u8; 32] {
    let mut d = [0; 32];
    d[..16].copy_from_slice(&twox_hash::XxHash3_128::oneshot(raw).to_le_bytes());
    d
}

/// An intact stripe taken apart: its header block, its frames and its manifest.
#[derive(Clone, Debug)]
pub struct Parts {
    pub head: Vec<u8>,
    pub frames: Vec<Frame>,
    pub manifest: serde_json::Value,
}

pub fn parse_stripe(b: &[u8]) -> Parts {
    let frames = frames_of(b)
        .into_iter()
        .map(|at| {
            let stored = u32_at(b, at + 12) as usize;
            Frame {
                hdr: b[at..at + 80].to_vec(),
                stored: b[at + 80..at + 80 + stored].to_vec(),
            }
        })
        .collect();
    Parts {
        head: b[..block_of(b)].to_vec(),
        frames,
        manifest: serde_json::from_slice(&manifest_json(b)).unwrap(),
    }
}

/// Every regular file's checksum in every manifest recomputed from the frames of all
/// stripes: a set whose frames were changed is whole again.
pub fn fix_checksums(parts: &mut [Parts]) {
    let mut digests: std::collections::BTreeMap<u32, Vec<(u64, Vec<u8>)>> = Default::default();
    for f in parts.iter().flat_map(|p| &p.frames) {
        digests
            .entry(f.file())
            .or_default()
            .push((f.offset(), f.hdr[32..64].to_vec()));
    }
    for p in parts.iter_mut() {
        let Some(files) = p.manifest.get_mut("files").and_then(|f| f.as_array_mut()) else {
            continue;
        };
        for e in files.iter_mut().filter(|e| e["kind"] == "file") {
            let (Some(id), Some(size)) = (e["id"].as_u64(), e["size"].as_u64()) else {
                continue;
            };
            let mut d = digests.get(&(id as u32)).cloned().unwrap_or_default();
            d.sort();
            let mut h = blake3::Hasher::new();
            h.update(&size.to_le_bytes());
            for (_, x) in &d {
                h.update(x);
            }
            e["checksum"] = h.finalize().to_hex().to_string().into();
        }
    }
}

/// The stripes of a set put back together: frames padded to the block size with valid
/// header CRCs (their fields as they are), and manifests counting each stripe's frames
/// and body end, stored with valid tails.
pub fn build_set(parts: &[Parts]) -> Vec<Vec<u8>> {
    let mut bodies = vec![];
    for p in parts {
        let block = block_of(&p.head).max(512);
        let mut out = p.head.clone();
        for f in &p.frames {
            let mut h = f.hdr.clone();
            let c = crc32c::crc32c(&h[..76]);
            put_u32(&mut h, 76, c);
            out.extend(&h);
            out.extend(&f.stored);
            out.resize(out.len().div_ceil(block) * block, 0);
        }
        bodies.push(out);
    }
    let counts: Vec<(usize, usize)> = parts
        .iter()
        .zip(&bodies)
        .map(|(p, b)| (p.frames.len(), b.len()))
        .collect();
    parts
        .iter()
        .zip(bodies)
        .map(|(p, mut out)| {
            let block = block_of(&p.head).max(512);
            let mut m = p.manifest.clone();
            if let Some(a) = m.get_mut("stripes").and_then(|s| s.as_array_mut()) {
                for (s, &(n, end)) in a.iter_mut().zip(&counts) {
                    if s.is_object() {
                        s["frames"] = n.into();
                        s["body_end"] = end.into();
                    }
                }
            }
            let raw = serde_json::to_vec(&m).unwrap();
            let stored = zstd::bulk::compress(&raw, 3).unwrap();
            let (body_end, frames) = (out.len() as u64, p.frames.len() as u64);
            out.extend(&stored);
            out.resize(out.len().div_ceil(block) * block + block, 0);
            let n = out.len();
            let t = &mut out[n - 64..];
            t[..8].copy_from_slice(b"PVTAIL01");
            put_u64(t, 8, body_end);
            put_u64(t, 16, stored.len() as u64);
            put_u64(t, 24, raw.len() as u64);
            put_u64(t, 32, frames);
            put_u64(t, 40, body_end);
            put_u32(t, 48, crc32c::crc32c(&stored));
            fix_tail(&mut out);
            out
        })
        .collect()
}
