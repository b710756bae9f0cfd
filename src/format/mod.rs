//! The on-media format: media header, frames, trailer and manifest.
//! docs/FORMAT.md is the specification; this module is its only implementation.

pub mod frame;
pub mod manifest;
pub mod media;
pub mod page_checks;
pub mod seal;

use thiserror::Error;

/// Version of the on-media format written by this build. Version 1 (still read) digested
/// frames with BLAKE3; version 2 with XXH3-128, five times cheaper on the restore's hot path.
pub const FORMAT_VERSION: u16 = 2;
/// Version of an encrypted set (its frames and manifest sealed, a key block in its
/// header); plain sets stay at `FORMAT_VERSION`.
pub const SEALED_VERSION: u16 = 3;
/// Version of a signed set (plain, each frame and its manifest tagged by keyed BLAKE3, a
/// key block in its header).
pub const SIGNED_VERSION: u16 = 4;
/// The newest version this build reads.
pub const NEWEST_VERSION: u16 = SIGNED_VERSION;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u16 = 1;

/// Limits every reader checks before it trusts or allocates by a number read from a set.
/// Block sizes: powers of two from `media::MIN_BLOCK` to this.
pub const BLOCK_MAX: u32 = 1 << 20;
/// Page sizes: powers of two in this range (backup's `--page-size`).
pub const PAGE_MIN: u32 = 512;
pub const PAGE_MAX: u32 = 1 << 20;
/// Transfer sizes: frames hold at most this many raw bytes.
pub const TRANSFER_MIN: u32 = 64 << 10;
pub const TRANSFER_MAX: u32 = 16 << 20;
/// Stripes of one set.
pub const STRIPES_MAX: u32 = 4096;
/// A manifest's stored (compressed) and raw (JSON) lengths are at most this.
pub const MANIFEST_MAX: u64 = 1 << 30;
/// A manifest's JSON is at most this many times its stored length, so a forged one's
/// memory is bounded by the bytes it stores. Real trees' manifests are far within it;
/// the writer pads one that would shrink more (`media::trailer`), so every set it
/// writes is read.
pub const MANIFEST_RATIO: u64 = 64;
/// Up to this much JSON the ratio does not apply: sets written before the writer padded
/// shrink further (30,000 empty files: 66 times, long paths: 300), and must still read.
pub const MANIFEST_RATIO_FLOOR: u64 = 64 << 20;

/// The largest zstd window a reader accepts (16 MiB): pagevault compresses with levels
/// 1 to 3 at most, whose windows are far smaller; a larger one is forged, and would be
/// allocated.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// One zstd frame of exactly `raw_len` bytes. The frame must name its size, and name
/// this one; it is decompressed as it streams, so memory follows the bytes it really
/// holds, never a length read from the media.
pub fn zstd_exact(stored: &[u8], raw_len: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut out = Vec::with_capacity(raw_len.min(1 << 20) as usize);
    zstd_reader(stored, raw_len)?
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The bytes of one zstd frame that names its size, `raw_len`, as a reader: fewer or
/// more bytes, or a frame that does not decompress, fail the read that meets them. For
/// large contents (a manifest) parsed as they decompress, never held whole.
pub fn zstd_reader(stored: &[u8], raw_len: u64) -> Result<impl std::io::Read + '_, String> {
    match zstd::zstd_safe::get_frame_content_size(stored) {
        Ok(Some(n)) if n == raw_len => {}
        Ok(Some(n)) => return Err(format!("its zstd frame holds {n} bytes, not {raw_len}")),
        _ => return Err("it is not a zstd frame that names its size".into()),
    }
    let fail = |e: std::io::Error| format!("it does not decompress ({e})");
    let mut dec = zstd::stream::read::Decoder::with_buffer(stored)
        .map_err(fail)?
        .single_frame();
    dec.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(fail)?;
    Ok(Exact {
        inner: dec,
        left: raw_len,
        raw_len,
    })
}

/// A reader held to exactly `raw_len` bytes.
struct Exact<R> {
    inner: R,
    left: u64,
    raw_len: u64,
}

impl<R: std::io::Read> std::io::Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = buf
            .len()
            .min(self.left.saturating_add(1).min(usize::MAX as u64) as usize);
        let n = self
            .inner
            .read(&mut buf[..room])
            .map_err(|e| std::io::Error::other(format!("it does not decompress ({e})")))?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(format!(
                "it decompresses to more than {0} bytes, its length says {0}",
                self.raw_len
            )));
        }
        if n == 0 && self.left > 0 {
            return Err(std::io::Error::other(format!(
                "it decompresses to {} bytes, its length says {}",
                self.raw_len - self.left,
                self.raw_len
            )));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A page size a set may have.
pub fn valid_page_size(p: u32) -> bool {
    p.is_power_of_two() && (PAGE_MIN..=PAGE_MAX).contains(&p)
}

/// A transfer size a set may have.
pub fn valid_transfer_size(t: u32) -> bool {
    (TRANSFER_MIN..=TRANSFER_MAX).contains(&t)
}

/// A block size a set may have.
pub fn valid_block_size(b: u32) -> bool {
    b.is_power_of_two() && (media::MIN_BLOCK as u32..=BLOCK_MAX).contains(&b)
}

/// The digest of a frame's raw bytes, as the set's format version defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentHash {
    Blake3,
    Xxh3,
}

impl ContentHash {
    pub fn of_version(version: u16) -> ContentHash {
        if version == 1 {
            ContentHash::Blake3
        } else {
            ContentHash::Xxh3
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ContentHash::Blake3 => "BLAKE3",
            ContentHash::Xxh3 => "XXH3-128",
        }
    }

    /// 32 bytes either way: XXH3-128 fills the first 16 (little-endian), the rest stay zero.
    pub fn digest(self, raw: &[u8]) -> [u8; 32] {
        match self {
            ContentHash::Blake3 => *blake3::hash(raw).as_bytes(),
            ContentHash::Xxh3 => {
                let mut d = [0; 32];
                d[..16].copy_from_slice(&twox_hash::XxHash3_128::oneshot(raw).to_le_bytes());
                d
            }
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("bad magic at offset {offset}: expected {expected}, found {found}")]
    BadMagic {
        offset: u64,
        expected: &'static str,
        found: String,
    },
    #[error("unsupported format version {0}: this build reads versions {OLDEST_VERSION} to {NEWEST_VERSION} (a set of a later version needs a newer pagevault)")]
    Version(u16),
    #[error(
        "{what} checksum mismatch at offset {offset}: stored {stored:08x}, computed {computed:08x}"
    )]
    Checksum {
        what: &'static str,
        offset: u64,
        stored: u32,
        computed: u32,
    },
    #[error("invalid {field} at offset {offset}: {detail}")]
    Invalid {
        field: &'static str,
        offset: u64,
        detail: String,
    },
    #[error("manifest: {0}")]
    Manifest(String),
}

/// Codec of a frame's stored bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    None,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn id(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }
    pub fn from_id(id: u8) -> Option<Codec> {
        match id {
            0 => Some(Codec::None),
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// Rounds `n` up to a multiple of `block` (a power of two).
pub fn pad_to(n: u64, block: u64) -> u64 {
    n.div_ceil(block) * block
}

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn show_magic(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if c.is_ascii_graphic() {
                (c as char).to_string()
            } else {
                format!("\\x{c:02x}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_exact_holds_the_frame_to_its_length() {
        let raw = b"{\"a\": 1}".repeat(100);
        let stored = zstd::bulk::compress(&raw, 3).unwrap();
        assert_eq!(zstd_exact(&stored, raw.len() as u64).unwrap(), raw);
        let e = zstd_exact(&stored, 1 << 30).unwrap_err();
        assert!(e.contains("holds 800 bytes, not 1073741824"), "{e}");
        // A frame that does not name its size (a stream's) is not one pagevault wrote.
        let streamed = zstd::stream::encode_all(&raw[..], 3).unwrap();
        assert!(zstd_exact(&streamed, raw.len() as u64).is_err());
        assert!(zstd_exact(b"not zstd", 8).is_err());
        assert!(zstd_exact(&stored[..stored.len() / 2], raw.len() as u64).is_err());
    }
}
