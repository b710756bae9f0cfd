//! Media header (first block of every stripe) and tail (last 64 bytes).
//!
//! Media header, padded with zeros to the block size (at least 512 bytes):
//! ```text
//!  0 magic "PAGEVLT1" 8 | 8 version u16 | 10 header length u16 (=64)
//! 12 block size u32     | 16 set id [16]
//! 32 stripe index u32   | 36 stripe count u32
//! 40 codec u8 | 41 encryption u8 (0 none, 1 AES-256-GCM)
//! 42 signature u8 (0 none, 1 keyed BLAKE3) | 43 reserved u8
//! 44 page size u32      | 48 transfer size u32
//! 52 created, unix seconds u64 | 60 CRC32C of bytes 0..60 u32
//! ```
//! Tail, the last 64 bytes of a complete stripe:
//! ```text
//!  0 magic "PVTAIL01" 8 | 8 manifest offset u64 | 16 manifest stored length u64
//! 24 manifest raw length u64 | 32 frame count u64 | 40 body end u64
//! 48 CRC32C of the stored manifest u32 | 52 reserved [8] | 60 CRC32C of bytes 0..60 u32
//! ```
//! A stripe without a valid tail was not finished: it is never taken for a good set.
//! An encrypted set (version 3) or a signed one (version 4) has its key block after the
//! header (`seal.rs`).

use super::seal::{
    header_bound, KeyBlock, KeyUse, AES_256_GCM, AES_256_GCM_TAG_ONLY, KEYED_BLAKE3, KEY_BLOCK_END,
};
use super::{
    get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, show_magic, valid_block_size,
    valid_page_size, valid_transfer_size, Codec, FormatError, MANIFEST_MAX, MANIFEST_RATIO,
    MANIFEST_RATIO_FLOOR, NEWEST_VERSION, OLDEST_VERSION, PAGE_MAX, PAGE_MIN, SEALED_VERSION,
    SIGNED_VERSION, STRIPES_MAX,
};
use crate::crypt::{DataKey, SetMac, DOMAIN_MANIFEST, TAG_LEN};
use crate::format::frame::FRAME_HEADER_LEN;

pub const MEDIA_MAGIC: &[u8; 8] = b"PAGEVLT1";
pub const TAIL_MAGIC: &[u8; 8] = b"PVTAIL01";
pub const MEDIA_HEADER_LEN: usize = 64;
pub const TAIL_LEN: usize = 64;
/// The smallest block size; a reader first reads this much to learn the real one.
pub const MIN_BLOCK: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaHeader {
    pub version: u16,
    pub block_size: u32,
    pub set_id: [u8; 16],
    pub stripe_index: u32,
    pub stripe_count: u32,
    pub codec: Codec,
    pub page_size: u32,
    pub transfer_size: u32,
    pub created_unix: u64,
    /// An encrypted (version 3) or signed (version 4) set's key block.
    pub key: Option<KeyBlock>,
    /// An encrypted set whose frames carry no CRC32C (encryption method 2).
    pub tag_only: bool,
}

impl MediaHeader {
    /// What the key block's key is for: its version says.
    pub fn key_use(&self) -> Option<KeyUse> {
        match self.version {
            SEALED_VERSION => Some(KeyUse::Seal),
            SIGNED_VERSION => Some(KeyUse::Sign),
            _ => None,
        }
    }

    /// The header block as written: `block_size` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size as usize];
        b[0..8].copy_from_slice(MEDIA_MAGIC);
        put_u16(&mut b, 8, self.version);
        put_u16(&mut b, 10, MEDIA_HEADER_LEN as u16);
        put_u32(&mut b, 12, self.block_size);
        b[16..32].copy_from_slice(&self.set_id);
        put_u32(&mut b, 32, self.stripe_index);
        put_u32(&mut b, 36, self.stripe_count);
        b[40] = self.codec.id();
        put_u32(&mut b, 44, self.page_size);
        put_u32(&mut b, 48, self.transfer_size);
        put_u64(&mut b, 52, self.created_unix);
        if let Some(k) = &self.key {
            match self.key_use() {
                Some(KeyUse::Sign) => b[42] = KEYED_BLAKE3,
                _ if self.tag_only => b[41] = AES_256_GCM_TAG_ONLY,
                _ => b[41] = AES_256_GCM,
            }
            k.encode(&mut b);
        }
        let crc = crc32c::crc32c(&b[..60]);
        put_u32(&mut b, 60, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<MediaHeader, FormatError> {
        if b.len() < MEDIA_HEADER_LEN || &b[0..8] != MEDIA_MAGIC {
            return Err(FormatError::BadMagic {
                offset: 0,
                expected: "PAGEVLT1 (a pagevault stripe)",
                found: show_magic(&b[..b.len().min(8)]),
            });
        }
        let stored = get_u32(b, 60);
        let computed = crc32c::crc32c(&b[..60]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "media header",
                offset: 0,
                stored,
                computed,
            });
        }
        let version = get_u16(b, 8);
        if !(OLDEST_VERSION..=NEWEST_VERSION).contains(&version) {
            return Err(FormatError::Version(version));
        }
        let block_size = get_u32(b, 12);
        if !valid_block_size(block_size) {
            return Err(FormatError::Invalid {
                field: "block size",
                offset: 12,
                detail: format!("{block_size} is not a power of two from 512 to 1 MiB"),
            });
        }
        let stripe_index = get_u32(b, 32);
        let stripe_count = get_u32(b, 36);
        if stripe_count == 0 || stripe_index >= stripe_count || stripe_count > STRIPES_MAX {
            return Err(FormatError::Invalid {
                field: "stripe number",
                offset: 32,
                detail: format!("stripe {} of {stripe_count}", stripe_index + 1),
            });
        }
        let codec = Codec::from_id(b[40]).ok_or_else(|| FormatError::Invalid {
            field: "codec",
            offset: 40,
            detail: format!("{} is not a known codec", b[40]),
        })?;
        // Version 3 is exactly the encrypted sets, version 4 the signed ones.
        let flags = (b[41], b[42], version);
        let key = match flags {
            (0, 0, v) if v < SEALED_VERSION => None,
            (AES_256_GCM | AES_256_GCM_TAG_ONLY, 0, SEALED_VERSION)
            | (0, KEYED_BLAKE3, SIGNED_VERSION)
                if b.len() >= KEY_BLOCK_END =>
            {
                Some(KeyBlock::decode(b)?)
            }
            (AES_256_GCM | AES_256_GCM_TAG_ONLY | 0, KEYED_BLAKE3 | 0, _) => {
                return Err(FormatError::Invalid {
                    field: "encryption and signature",
                    offset: 41,
                    detail: format!(
                        "methods {} and {} in a set of format version {version} (only version {SEALED_VERSION} is encrypted, only {SIGNED_VERSION} signed)",
                        b[41], b[42]
                    ),
                })
            }
            (m, n, _) => {
                return Err(FormatError::Invalid {
                    field: "encryption and signature",
                    offset: 41,
                    detail: format!("methods {m} and {n} are not supported by this build"),
                })
            }
        };
        let page_size = get_u32(b, 44);
        if !valid_page_size(page_size) {
            return Err(FormatError::Invalid {
                field: "page size",
                offset: 44,
                detail: format!("{page_size} is not a power of two from {PAGE_MIN} to {PAGE_MAX}"),
            });
        }
        let transfer_size = get_u32(b, 48);
        if !valid_transfer_size(transfer_size) {
            return Err(FormatError::Invalid {
                field: "transfer size",
                offset: 48,
                detail: format!("{transfer_size} is outside 64 KiB..16 MiB"),
            });
        }
        Ok(MediaHeader {
            version,
            block_size,
            set_id: b[16..32].try_into().unwrap(),
            stripe_index,
            stripe_count,
            codec,
            page_size,
            transfer_size,
            created_unix: get_u64(b, 52),
            key,
            tag_only: b[41] == AES_256_GCM_TAG_ONLY,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub manifest_offset: u64,
    pub manifest_len: u64,
    pub manifest_raw_len: u64,
    pub frame_count: u64,
    pub body_end: u64,
    pub manifest_crc: u32,
    /// The frame index after the stored manifest: every frame's header in stripe order
    /// (0: none, as in stripes written before it).
    pub index_len: u32,
    pub index_crc: u32,
}

/// A frame index holds at most this many bytes (`FRAME_HEADER_LEN` per frame): a
/// stripe with more frames has none, and readers step over frames by their headers.
pub const INDEX_MAX: u32 = 64 << 20;

impl Tail {
    /// Where the frame index starts: right after the stored manifest.
    pub fn index_offset(&self) -> u64 {
        self.manifest_offset + self.manifest_len
    }

    pub fn encode(&self) -> [u8; TAIL_LEN] {
        let mut b = [0u8; TAIL_LEN];
        b[0..8].copy_from_slice(TAIL_MAGIC);
        put_u64(&mut b, 8, self.manifest_offset);
        put_u64(&mut b, 16, self.manifest_len);
        put_u64(&mut b, 24, self.manifest_raw_len);
        put_u64(&mut b, 32, self.frame_count);
        put_u64(&mut b, 40, self.body_end);
        put_u32(&mut b, 48, self.manifest_crc);
        put_u32(&mut b, 52, self.index_len);
        put_u32(&mut b, 56, self.index_crc);
        let crc = crc32c::crc32c(&b[..60]);
        put_u32(&mut b, 60, crc);
        b
    }

    /// Parses the tail of a stripe of `stripe_len` bytes.
    pub fn decode(b: &[u8], stripe_len: u64) -> Result<Tail, FormatError> {
        let at = stripe_len.saturating_sub(TAIL_LEN as u64);
        if b.len() < TAIL_LEN || &b[0..8] != TAIL_MAGIC {
            return Err(FormatError::BadMagic {
                offset: at,
                expected: "PVTAIL01 (stripe tail): the stripe is incomplete, its backup was interrupted or the file was truncated",
                found: show_magic(&b[..b.len().min(8)]),
            });
        }
        let stored = get_u32(b, 60);
        let computed = crc32c::crc32c(&b[..60]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "stripe tail",
                offset: at,
                stored,
                computed,
            });
        }
        let t = Tail {
            manifest_offset: get_u64(b, 8),
            manifest_len: get_u64(b, 16),
            manifest_raw_len: get_u64(b, 24),
            frame_count: get_u64(b, 32),
            body_end: get_u64(b, 40),
            manifest_crc: get_u32(b, 48),
            index_len: get_u32(b, 52),
            index_crc: get_u32(b, 56),
        };
        let fits = t
            .manifest_offset
            .checked_add(t.manifest_len)
            .is_some_and(|end| end <= at)
            && t.body_end <= t.manifest_offset;
        if !fits {
            return Err(FormatError::Invalid {
                field: "stripe tail",
                offset: at,
                detail: format!(
                    "manifest at {} (+{}) and body end {} do not fit a stripe of {stripe_len} bytes",
                    t.manifest_offset, t.manifest_len, t.body_end
                ),
            });
        }
        let index_fits = (t.manifest_offset.checked_add(t.manifest_len))
            .and_then(|o| o.checked_add(t.index_len as u64))
            .is_some_and(|end| end <= at);
        if t.index_len > INDEX_MAX
            || !(t.index_len as usize).is_multiple_of(FRAME_HEADER_LEN)
            || !index_fits
        {
            return Err(FormatError::Invalid {
                field: "frame index length",
                offset: at + 52,
                detail: format!(
                    "{} bytes: not a multiple of {FRAME_HEADER_LEN} up to {INDEX_MAX} between the manifest and the tail",
                    t.index_len
                ),
            });
        }
        // Checked before the manifest is read or decompressed into memory.
        if !(1..=MANIFEST_MAX).contains(&t.manifest_len) {
            return Err(FormatError::Invalid {
                field: "manifest stored length",
                offset: at + 16,
                detail: format!("{} bytes, not 1 to {MANIFEST_MAX}", t.manifest_len),
            });
        }
        let most = MANIFEST_MAX
            .min((t.manifest_len.saturating_mul(MANIFEST_RATIO)).max(MANIFEST_RATIO_FLOOR));
        if !(1..=most).contains(&t.manifest_raw_len) {
            return Err(FormatError::Invalid {
                field: "manifest raw length",
                offset: at + 24,
                detail: format!(
                    "{} bytes from {} stored: not 1 to {most} (past {MANIFEST_RATIO_FLOOR}, at most {MANIFEST_RATIO} times the stored length, and {MANIFEST_MAX})",
                    t.manifest_raw_len, t.manifest_len
                ),
            });
        }
        Ok(t)
    }
}

/// What guards a stored manifest: nothing (a plain set), the set's data key and id
/// (an encrypted set's seal), or its MAC keys and its header (a signed set's tag).
#[derive(Clone, Copy)]
pub enum Guard<'a> {
    Plain,
    Seal(&'a DataKey, &'a [u8; 16]),
    Sign(&'a SetMac, &'a [u8]),
}

/// A manifest as every stripe stores it: compressed, padded to the ratio and, for an
/// encrypted set, sealed. `raw_len` is its JSON's length.
pub struct StoredManifest {
    pub bytes: Vec<u8>,
    pub raw_len: u64,
}

impl StoredManifest {
    /// Pads and (under `Guard::Seal`) seals a compressed manifest, once for all stripes.
    pub fn new(mut bytes: Vec<u8>, raw_len: u64, guard: Guard) -> StoredManifest {
        pad_manifest(&mut bytes, raw_len);
        if let Guard::Seal(dek, set_id) = guard {
            let len = bytes.len();
            bytes.resize(len + TAG_LEN, 0);
            let aad = super::seal::manifest_aad(set_id);
            dek.seal(DOMAIN_MANIFEST, 0, &aad, &mut bytes, len);
        }
        StoredManifest { bytes, raw_len }
    }

    /// What a stripe holds after the stored manifest: a signed set's tag, the frame
    /// `index` (its frames' headers, or nothing), the zero padding to the block size, then
    /// a block that ends with the tail.
    pub fn suffix(
        &self,
        body_end: u64,
        frame_count: u64,
        block: u64,
        guard: Guard,
        index: &[u8],
    ) -> Vec<u8> {
        let tag = match guard {
            Guard::Sign(mac, header) => mac
                .manifest
                .tag(&header_bound(header), &self.bytes)
                .to_vec(),
            _ => vec![],
        };
        let index = match index.len() as u64 == frame_count * FRAME_HEADER_LEN as u64
            && index.len() <= INDEX_MAX as usize
        {
            true => index,
            false => &[],
        };
        let stored_len = (self.bytes.len() + tag.len()) as u64;
        let mlen = super::pad_to(stored_len + index.len() as u64, block);
        let mut out = vec![0u8; (mlen - self.bytes.len() as u64 + block) as usize];
        out[..tag.len()].copy_from_slice(&tag);
        out[tag.len()..tag.len() + index.len()].copy_from_slice(index);
        let tail = Tail {
            manifest_offset: body_end,
            manifest_len: stored_len,
            manifest_raw_len: self.raw_len,
            frame_count,
            body_end,
            manifest_crc: crc32c::crc32c_append(crc32c::crc32c(&self.bytes), &tag),
            index_len: index.len() as u32,
            index_crc: crc32c::crc32c(index),
        };
        let n = out.len();
        out[n - TAIL_LEN..].copy_from_slice(&tail.encode());
        out
    }
}

/// Everything after a stripe's last frame, from the manifest's JSON.
#[cfg(test)]
pub fn trailer(
    manifest_raw: &[u8],
    body_end: u64,
    frame_count: u64,
    block: u64,
    guard: Guard,
) -> Vec<u8> {
    let stored = zstd::bulk::compress(manifest_raw, 3).expect("zstd compresses in memory");
    let m = StoredManifest::new(stored, manifest_raw.len() as u64, guard);
    let mut out = m.bytes.clone();
    out.extend(m.suffix(body_end, frame_count, block, guard, &[]));
    out
}

/// A zstd skippable frame's magic (0x184D2A50 to 0x184D2A5F): readers pass over it.
const SKIPPABLE: u32 = 0x184D_2A50;

/// Makes a compressed manifest at least 1/MANIFEST_RATIO of its raw length: a zstd
/// skippable frame after its frame, which the reader's single-frame decoder never reads.
fn pad_manifest(stored: &mut Vec<u8>, raw_len: u64) {
    let least = raw_len.div_ceil(MANIFEST_RATIO) as usize;
    if stored.len() >= least {
        return;
    }
    let body = (least - stored.len()).saturating_sub(8);
    stored.extend_from_slice(&SKIPPABLE.to_le_bytes());
    stored.extend_from_slice(&(body as u32).to_le_bytes());
    stored.resize(stored.len() + body, 0);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::FORMAT_VERSION;
    use proptest::prelude::*;

    /// A valid header for tests.
    pub(crate) fn header() -> MediaHeader {
        MediaHeader {
            version: FORMAT_VERSION,
            block_size: 4096,
            set_id: [3; 16],
            stripe_index: 1,
            stripe_count: 2,
            codec: Codec::Lz4,
            page_size: 8192,
            transfer_size: 1 << 20,
            created_unix: 1_700_000_000,
            key: None,
            tag_only: false,
        }
    }

    #[test]
    fn header_round_trip_and_length() {
        let b = header().encode();
        assert_eq!(b.len(), 4096);
        assert_eq!(MediaHeader::decode(&b).unwrap(), header());
    }

    /// A header at `version` with a key block for `u`.
    fn keyed_header(version: u16, u: KeyUse) -> MediaHeader {
        let m = crate::crypt::Master::new([9; 32]);
        let kb = KeyBlock::new(&m, crate::crypt::Kdf::Raw, &[3; 16], &DataKey::random(), u);
        MediaHeader {
            version,
            key: Some(kb),
            ..header()
        }
    }

    #[test]
    fn encrypted_header_is_version_3_with_its_key_block() {
        let h = keyed_header(SEALED_VERSION, KeyUse::Seal);
        let b = h.encode();
        assert_eq!(b[41], AES_256_GCM);
        assert_eq!(MediaHeader::decode(&b).unwrap(), h);
        // An encrypted header at version 2, or a plain one at version 3, is refused.
        let plain3 = MediaHeader {
            version: SEALED_VERSION,
            ..header()
        };
        assert!(MediaHeader::decode(&plain3.encode()).is_err());
        let sealed2 = MediaHeader {
            version: FORMAT_VERSION,
            ..h
        };
        assert!(MediaHeader::decode(&sealed2.encode()).is_err());
    }

    #[test]
    fn encrypted_header_says_whether_frames_carry_a_crc() {
        let h = MediaHeader {
            tag_only: true,
            ..keyed_header(SEALED_VERSION, KeyUse::Seal)
        };
        let b = h.encode();
        assert_eq!(b[41], AES_256_GCM_TAG_ONLY);
        assert_eq!(MediaHeader::decode(&b).unwrap(), h);
        // Method 2 at another version, or beside a signature, is refused.
        for (v, f42) in [(2, 0), (4, 0), (3, 1)] {
            let mut c = b.clone();
            c[8] = v;
            c[42] = f42;
            let crc = crc32c::crc32c(&c[..60]);
            put_u32(&mut c, 60, crc);
            assert!(MediaHeader::decode(&c).is_err(), "{v} {f42}");
        }
    }

    #[test]
    fn signed_header_is_version_4_with_its_key_block() {
        let h = keyed_header(SIGNED_VERSION, KeyUse::Sign);
        let b = h.encode();
        assert_eq!((b[41], b[42]), (0, KEYED_BLAKE3));
        assert_eq!(MediaHeader::decode(&b).unwrap(), h);
        assert_eq!(h.key_use(), Some(KeyUse::Sign));
        // A signed flag at another version, or both flags, is refused.
        for (v, f41, f42) in [(2, 0, 1), (3, 1, 1), (4, 1, 0), (4, 0, 0), (3, 0, 1)] {
            let mut c = b.clone();
            c[8] = v;
            c[41] = f41;
            c[42] = f42;
            let crc = crc32c::crc32c(&c[..60]);
            put_u32(&mut c, 60, crc);
            assert!(MediaHeader::decode(&c).is_err(), "{v} {f41} {f42}");
        }
    }

    #[test]
    fn header_bit_flips_rejected() {
        let b = header().encode();
        for bit in 0..MEDIA_HEADER_LEN * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(MediaHeader::decode(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_manifest_that_shrinks_past_the_ratio_is_padded_and_still_read() {
        let raw: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{{\"id\":{i},\"kind\":\"dir\",\"mtime\":0}},").into_bytes())
            .collect();
        let zstd_alone = zstd::bulk::compress(&raw, 3).unwrap().len() as u64;
        assert!(raw.len() as u64 > zstd_alone * MANIFEST_RATIO);
        let out = trailer(&raw, 4096, 0, 4096, Guard::Plain);
        let t = Tail::decode(&out[out.len() - TAIL_LEN..], 4096 + out.len() as u64).unwrap();
        assert!(t.manifest_len * MANIFEST_RATIO >= raw.len() as u64);
        let stored = &out[..t.manifest_len as usize];
        assert_eq!(
            crate::format::zstd_exact(stored, raw.len() as u64).unwrap(),
            raw
        );
        // A manifest within the ratio is stored as zstd made it.
        let small = b"{\"files\":[]}";
        let out = trailer(small, 4096, 0, 4096, Guard::Plain);
        let t = Tail::decode(&out[out.len() - TAIL_LEN..], 4096 + out.len() as u64).unwrap();
        assert_eq!(
            t.manifest_len,
            zstd::bulk::compress(small, 3).unwrap().len() as u64
        );
    }

    #[test]
    fn tail_round_trip_and_bounds() {
        let t = Tail {
            manifest_offset: 8192,
            manifest_len: 100,
            manifest_raw_len: 300,
            frame_count: 5,
            body_end: 8192,
            manifest_crc: 77,
            index_len: 0,
            index_crc: 0,
        };
        let b = t.encode();
        assert_eq!(Tail::decode(&b, 8192 + 100 + 64).unwrap(), t);
        // A frame index: whole headers, between the manifest and the tail.
        let indexed = Tail {
            index_len: 5 * FRAME_HEADER_LEN as u32,
            index_crc: 9,
            ..t.clone()
        };
        let end = 8192 + 100 + 5 * FRAME_HEADER_LEN as u64 + 64;
        assert_eq!(Tail::decode(&indexed.encode(), end).unwrap(), indexed);
        assert_eq!(indexed.index_offset(), 8292);
        assert!(Tail::decode(&indexed.encode(), end - 1).is_err());
        let torn = Tail {
            index_len: 5 * FRAME_HEADER_LEN as u32 - 1,
            ..indexed.clone()
        };
        let e = Tail::decode(&torn.encode(), end).unwrap_err().to_string();
        assert!(e.contains("frame index length"), "{e}");
        // The same tail in a stripe too short to hold its manifest is rejected.
        assert!(Tail::decode(&b, 8192 + 64).is_err());
        // Manifest lengths: none, or a raw length no zstd frame of that size holds.
        for (stored, raw, field) in [
            (0, 0, "manifest stored length"),
            (100, 0, "manifest raw length"),
            (100, MANIFEST_RATIO_FLOOR + 1, "manifest raw length"),
            (100, 1 << 32, "manifest raw length"),
        ] {
            let b = Tail {
                manifest_len: stored,
                manifest_raw_len: raw,
                ..t.clone()
            }
            .encode();
            let e = Tail::decode(&b, 8192 + 100 + 64).unwrap_err().to_string();
            assert!(e.contains(field), "{stored} {raw}: {e}");
        }
    }

    #[test]
    fn header_page_sizes() {
        for (ps, ok) in [
            (0, false),
            (511, false),
            (512, true),
            (8192, true),
            (12288, false),
            (1 << 20, true),
            (2 << 20, false),
        ] {
            let mut h = header();
            h.page_size = ps;
            assert_eq!(MediaHeader::decode(&h.encode()).is_ok(), ok, "{ps}");
        }
    }

    proptest! {
        #[test]
        fn media_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = MediaHeader::decode(&bytes);
        }
        #[test]
        fn tail_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80), len in any::<u64>()) {
            let _ = Tail::decode(&bytes, len);
        }
    }
}
