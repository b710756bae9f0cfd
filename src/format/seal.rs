//! An encrypted set (format version 3) or a signed one (4): the key block after the
//! media header, and what binds each sealed or tagged frame and manifest to its set and
//! place.
//!
//! Key block, bytes 64..180 of every stripe's first block:
//! ```text
//!  64 magic "PVKB" 4 | 68 kdf u8 (0 key file, 1 Argon2id) | 69 reserved [3]
//!  72 Argon2id salt [16] | 88 memory KiB u32 | 92 passes u32 | 96 lanes u32
//! 100 key id [16]       | 116 wrap nonce [12] | 128 wrapped data key [48]
//! 176 CRC32C of bytes 64..176 u32
//! ```

use super::{get_u32, put_u32, FormatError};
use crate::crypt::{DataKey, Kdf, KeySource, Master, KEY_ID_LEN, WRAPPED_LEN};

pub const KEY_BLOCK_AT: usize = 64;
pub const KEY_BLOCK_END: usize = 180;
const MAGIC: &[u8; 4] = b"PVKB";
/// Media header byte 41 of an encrypted set: AES-256-GCM, each frame's stored bytes
/// also under a CRC32C (sets written before method 2, commit 4a18ceb).
pub const AES_256_GCM: u8 = 1;
/// Media header byte 41: AES-256-GCM, frames without a CRC32C (the field is zero): the
/// tag is their check.
pub const AES_256_GCM_TAG_ONLY: u8 = 2;
/// Media header byte 42 of a signed set: keyed BLAKE3.
pub const KEYED_BLAKE3: u8 = 1;

/// What a key block's key is for: its wrap is bound to it, so a signed set's MAC key
/// never opens as an encrypted set's data key, nor the other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// The data key of an encrypted set (version 3).
    Seal,
    /// The MAC key of a signed set (version 4).
    Sign,
}

impl KeyUse {
    /// What a reader says the set is.
    pub fn verb(self) -> &'static str {
        match self {
            KeyUse::Seal => "encrypted",
            KeyUse::Sign => "signed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBlock {
    pub kdf: Kdf,
    pub key_id: [u8; KEY_ID_LEN],
    pub nonce: [u8; 12],
    pub wrapped: [u8; WRAPPED_LEN],
}

/// What the key's wrap is bound to: its use and the set.
fn wrap_aad(set_id: &[u8; 16], u: KeyUse) -> Vec<u8> {
    let what: &[u8] = match u {
        KeyUse::Seal => b"pagevault set key ",
        KeyUse::Sign => b"pagevault set mac key ",
    };
    [what, set_id].concat()
}

impl KeyBlock {
    /// `dek` wrapped by `master` for set `set_id` and use `u`.
    pub fn new(master: &Master, kdf: Kdf, set_id: &[u8; 16], dek: &DataKey, u: KeyUse) -> KeyBlock {
        let (nonce, wrapped) = master.wrap(dek, &wrap_aad(set_id, u));
        KeyBlock {
            kdf,
            key_id: master.id,
            nonce,
            wrapped,
        }
    }

    pub fn encode(&self, b: &mut [u8]) {
        let b = &mut b[KEY_BLOCK_AT..KEY_BLOCK_END];
        b.fill(0);
        b[0..4].copy_from_slice(MAGIC);
        if let Kdf::Argon2id { salt, m_kib, t, p } = self.kdf {
            b[4] = 1;
            b[8..24].copy_from_slice(&salt);
            put_u32(b, 24, m_kib);
            put_u32(b, 28, t);
            put_u32(b, 32, p);
        }
        b[36..52].copy_from_slice(&self.key_id);
        b[52..64].copy_from_slice(&self.nonce);
        b[64..112].copy_from_slice(&self.wrapped);
        let crc = crc32c::crc32c(&b[..112]);
        put_u32(b, 112, crc);
    }

    /// The key block of a header block (at least 512 bytes).
    pub fn decode(b: &[u8]) -> Result<KeyBlock, FormatError> {
        let b = &b[KEY_BLOCK_AT..KEY_BLOCK_END];
        if &b[0..4] != MAGIC {
            return Err(FormatError::BadMagic {
                offset: KEY_BLOCK_AT as u64,
                expected: "PVKB (the key block of an encrypted set)",
                found: super::show_magic(&b[0..4]),
            });
        }
        let (stored, computed) = (get_u32(b, 112), crc32c::crc32c(&b[..112]));
        if stored != computed {
            return Err(FormatError::Checksum {
                what: "key block",
                offset: KEY_BLOCK_AT as u64,
                stored,
                computed,
            });
        }
        let kdf = match b[4] {
            0 => Kdf::Raw,
            1 => Kdf::Argon2id {
                salt: b[8..24].try_into().unwrap(),
                m_kib: get_u32(b, 24),
                t: get_u32(b, 28),
                p: get_u32(b, 32),
            },
            k => {
                return Err(FormatError::Invalid {
                    field: "key derivation",
                    offset: KEY_BLOCK_AT as u64 + 4,
                    detail: format!("{k} is not a known derivation"),
                })
            }
        };
        kdf.check().map_err(|detail| FormatError::Invalid {
            field: "key derivation",
            offset: KEY_BLOCK_AT as u64 + 24,
            detail,
        })?;
        Ok(KeyBlock {
            kdf,
            key_id: b[36..52].try_into().unwrap(),
            nonce: b[52..64].try_into().unwrap(),
            wrapped: b[64..112].try_into().unwrap(),
        })
    }

    /// The set's key with master key `master` (its id checked by the caller).
    pub fn open_with(
        &self,
        master: &Master,
        set_id: &[u8; 16],
        u: KeyUse,
    ) -> Result<DataKey, String> {
        master
            .unwrap(&self.nonce, &self.wrapped, &wrap_aad(set_id, u))
            .ok_or_else(|| "its key does not unwrap with the right master key: the key block was moved from another set or forged".into())
    }

    /// The set's key with the key `source` gives; a wrong key is one error that names
    /// both key ids.
    pub fn open(
        &self,
        source: &KeySource,
        set_id: &[u8; 16],
        u: KeyUse,
    ) -> Result<DataKey, String> {
        let master = source.master(&self.kdf)?;
        if master.id != self.key_id {
            return Err(format!(
                "it is {} with key id {}, and {} gives key id {}: wrong key or passphrase",
                u.verb(),
                crate::crypt::show_id(&self.key_id),
                source.origin(),
                crate::crypt::show_id(&master.id)
            ));
        }
        self.open_with(&master, set_id, u)
    }
}

/// A frame's associated data: its header's bytes 0..28 (kind, codec, file, stored
/// length, offset, raw length), its sequence number and the set id. The sequence
/// number is also the nonce's counter.
pub fn frame_aad(header: &[u8], set_id: &[u8; 16]) -> [u8; 52] {
    let mut a = [0u8; 52];
    a[..28].copy_from_slice(&header[..28]);
    a[28..36].copy_from_slice(&header[64..72]);
    a[36..].copy_from_slice(set_id);
    a
}

/// What a signed set's manifest tag binds besides the stored manifest: the media
/// header's bytes 0..60 with the stripe index (32..36) zeroed, the same in every stripe
/// (version, sizes, set id, codec, flags, stripe count, creation time).
pub fn header_bound(header: &[u8]) -> [u8; 60] {
    let mut b: [u8; 60] = header[..60].try_into().unwrap();
    b[32..36].fill(0);
    b
}

/// The manifest's associated data: the set id.
pub fn manifest_aad(set_id: &[u8; 16]) -> Vec<u8> {
    [&b"pagevault manifest "[..], set_id].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_block_round_trip_and_wrong_key() {
        let src = KeySource::key([4; 32], "key file 'k'");
        let m = src.master(&Kdf::Raw).unwrap();
        let dek = DataKey::random();
        let kb = KeyBlock::new(&m, Kdf::Raw, &[1; 16], &dek, KeyUse::Seal);
        let mut b = vec![0u8; 512];
        kb.encode(&mut b);
        let back = KeyBlock::decode(&b).unwrap();
        assert_eq!(back, kb);
        assert!(back.open(&src, &[1; 16], KeyUse::Seal).is_ok());
        let e = back.open(&src, &[2; 16], KeyUse::Seal).err().unwrap();
        assert!(e.contains("moved from another set"), "{e}");
        // A data key never opens as a MAC key.
        let e = back.open(&src, &[1; 16], KeyUse::Sign).err().unwrap();
        assert!(e.contains("forged"), "{e}");
        let e = back
            .open(
                &KeySource::key([5; 32], "key file 'other'"),
                &[1; 16],
                KeyUse::Seal,
            )
            .err()
            .unwrap();
        assert!(
            e.contains(&crate::crypt::show_id(&m.id)) && e.contains("wrong key"),
            "{e}"
        );
        b[100] ^= 1;
        assert!(KeyBlock::decode(&b).is_err());
    }
}
