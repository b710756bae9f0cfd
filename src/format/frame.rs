//! Frame header: 80 bytes in front of every stored chunk of a file.
//!
//! ```text
//!  0  magic "PVFR"          4
//!  4  kind u8, codec u8     2   kind 1 = data, 2 = zero (no stored bytes), 3 = pages
//!  6  reserved              2
//!  8  file id u32           4
//! 12  stored length u32     4
//! 16  file offset u64       8
//! 24  raw length u32        4
//! 28  CRC32C of stored u32  4
//! 32  content digest of raw bytes (XXH3-128; BLAKE3 in version 1; zero in 3; in 4
//!     the keyed BLAKE3 tag of the stored bytes)  32
//! 64  sequence u64          8   position of the frame in the set (diagnostics)
//! 72  reserved              4
//! 76  CRC32C of bytes 0..76 4
//! ```

use super::{get_u32, get_u64, put_u32, put_u64, show_magic, Codec, FormatError};

pub const FRAME_MAGIC: &[u8; 4] = b"PVFR";
pub const FRAME_HEADER_LEN: usize = 80;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Data,
    /// The chunk was all zero bytes: nothing stored, restore leaves a hole.
    Zero,
    /// Some pages of the chunk (a differential): the raw bytes are a bitmap of the
    /// chunk's pages (bit i = page i present), then the present pages in order.
    Pages,
}

/// Bytes of the page bitmap of a chunk of `chunk_len` bytes.
pub fn bitmap_len(chunk_len: u64, page_size: u64) -> usize {
    chunk_len.div_ceil(page_size).div_ceil(8) as usize
}

/// Whether a frame's CRC32C field holds the CRC of its stored bytes (else 0 when
/// written, not checked when read). Not when a tag checks them (sealed by a method
/// without a CRC: `sealed_crc` Some(false)), nor when they are a plain set's raw bytes,
/// which the content digest checks (sets written before this rule carry one there).
pub fn carries_crc(codec: super::Codec, sealed_crc: Option<bool>, signed: bool) -> bool {
    !matches!(
        (sealed_crc, signed, codec),
        (Some(false), _, _) | (None, false, super::Codec::None)
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub codec: Codec,
    pub file_id: u32,
    pub offset: u64,
    pub raw_len: u32,
    pub stored_len: u32,
    pub stored_crc: u32,
    pub raw_hash: [u8; 32],
    pub seq: u64,
}

impl FrameHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let out = &mut out[..FRAME_HEADER_LEN];
        out.fill(0);
        out[0..4].copy_from_slice(FRAME_MAGIC);
        out[4] = match self.kind {
            FrameKind::Data => 1,
            FrameKind::Zero => 2,
            FrameKind::Pages => 3,
        };
        out[5] = self.codec.id();
        put_u32(out, 8, self.file_id);
        put_u32(out, 12, self.stored_len);
        put_u64(out, 16, self.offset);
        put_u32(out, 24, self.raw_len);
        put_u32(out, 28, self.stored_crc);
        out[32..64].copy_from_slice(&self.raw_hash);
        put_u64(out, 64, self.seq);
        let crc = crc32c::crc32c(&out[..76]);
        put_u32(out, 76, crc);
    }

    /// Parses and checks a header of a plain set; `at` is its offset in the stripe.
    pub fn decode(b: &[u8], at: u64) -> Result<FrameHeader, FormatError> {
        Self::decode_in(b, at, false)
    }

    /// Parses and checks a header; `sealed` for an encrypted set, whose every frame
    /// stores its bytes and a GCM tag (a zero frame the tag alone).
    pub fn decode_in(b: &[u8], at: u64, sealed: bool) -> Result<FrameHeader, FormatError> {
        let tag = if sealed {
            crate::crypt::TAG_LEN as u32
        } else {
            0
        };
        if b.len() < FRAME_HEADER_LEN {
            return Err(FormatError::Invalid {
                field: "frame header",
                offset: at,
                detail: format!(
                    "only {} bytes left, a header needs {FRAME_HEADER_LEN}",
                    b.len()
                ),
            });
        }
        if &b[0..4] != FRAME_MAGIC {
            return Err(FormatError::BadMagic {
                offset: at,
                expected: "PVFR (frame)",
                found: show_magic(&b[0..4]),
            });
        }
        let stored = get_u32(b, 76);
        let computed = crc32c::crc32c(&b[..76]);
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "frame header",
                offset: at,
                stored,
                computed,
            });
        }
        let kind = match b[4] {
            1 => FrameKind::Data,
            2 => FrameKind::Zero,
            3 => FrameKind::Pages,
            k => {
                return Err(FormatError::Invalid {
                    field: "frame kind",
                    offset: at + 4,
                    detail: format!("{k} is not a known kind"),
                })
            }
        };
        let codec = Codec::from_id(b[5]).ok_or_else(|| FormatError::Invalid {
            field: "frame codec",
            offset: at + 5,
            detail: format!("{} is not a known codec", b[5]),
        })?;
        let h = FrameHeader {
            kind,
            codec,
            file_id: get_u32(b, 8),
            stored_len: get_u32(b, 12),
            offset: get_u64(b, 16),
            raw_len: get_u32(b, 24),
            stored_crc: get_u32(b, 28),
            raw_hash: b[32..64].try_into().unwrap(),
            seq: get_u64(b, 64),
        };
        if kind == FrameKind::Zero && h.stored_len != tag {
            return Err(FormatError::Invalid {
                field: "frame stored length",
                offset: at + 12,
                detail: match sealed {
                    false => "a zero frame stores no bytes".into(),
                    true => "a zero frame of an encrypted set stores its tag alone".into(),
                },
            });
        }
        if codec == Codec::None
            && kind != FrameKind::Zero
            && Some(h.stored_len) != h.raw_len.checked_add(tag)
        {
            return Err(FormatError::Invalid {
                field: "frame stored length",
                offset: at + 12,
                detail: format!(
                    "uncompressed frame stores {} bytes for {} raw bytes",
                    h.stored_len, h.raw_len
                ),
            });
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_crc_is_carried_unless_a_tag_or_the_digest_checks_the_stored_bytes() {
        use crate::format::Codec::{Lz4, None as Plain, Zstd};
        // Plain and unsigned: compressed frames carry one, uncompressed ones do not.
        assert!(!carries_crc(Plain, None, false));
        assert!(carries_crc(Lz4, None, false) && carries_crc(Zstd, None, false));
        // Signed: the tag is checked after the bytes are trusted enough to decode.
        assert!(carries_crc(Plain, None, true));
        // Sealed: by the method's rule, whatever the codec.
        for c in [Plain, Lz4, Zstd] {
            assert!(carries_crc(c, Some(true), false));
            assert!(!carries_crc(c, Some(false), false));
            assert!(!carries_crc(c, Some(false), true));
        }
    }

    fn sample() -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Data,
            codec: Codec::Zstd,
            file_id: 7,
            offset: 1 << 20,
            raw_len: 1 << 20,
            stored_len: 1234,
            stored_crc: 0xdead_beef,
            raw_hash: [9; 32],
            seq: 42,
        }
    }

    #[test]
    fn round_trip() {
        let mut b = [0u8; FRAME_HEADER_LEN];
        sample().encode(&mut b);
        assert_eq!(FrameHeader::decode(&b, 0).unwrap(), sample());
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let mut b = [0u8; FRAME_HEADER_LEN];
        sample().encode(&mut b);
        for bit in 0..FRAME_HEADER_LEN * 8 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(
                FrameHeader::decode(&c, 0).is_err(),
                "bit {bit} flip accepted"
            );
        }
    }

    proptest! {
        // Fuzz: arbitrary bytes never panic the parser.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = FrameHeader::decode(&bytes, 0);
        }

        // Fuzz: a valid header with a forged CRC over random fields either parses to
        // exactly those fields or is rejected.
        #[test]
        fn forged_headers_are_consistent(kind in 0u8..5, codec in 0u8..4, raw in any::<u32>(), stored in any::<u32>()) {
            let mut b = [0u8; FRAME_HEADER_LEN];
            sample().encode(&mut b);
            b[4] = kind; b[5] = codec;
            put_u32(&mut b, 24, raw); put_u32(&mut b, 12, stored);
            let crc = crc32c::crc32c(&b[..76]);
            put_u32(&mut b, 76, crc);
            if let Ok(h) = FrameHeader::decode(&b, 0) {
                prop_assert_eq!(h.raw_len, raw);
                prop_assert_eq!(h.stored_len, stored);
            }
        }
    }
}
