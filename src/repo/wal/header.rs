//! The header of an archived WAL file (the layout is in wal/mod.rs).

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Header {
    pub(super) kind: Kind,
    pub(super) name: String,
    pub(super) raw: u64,
    pub(super) stored: u64,
    pub(super) blake3: [u8; 32],
    pub(super) sysid: u64,
    pub(super) crc: u32,
}

impl Header {
    pub(super) fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&SKIP_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&((HDR_LEN - 8) as u32).to_le_bytes());
        b[8..16].copy_from_slice(MAGIC);
        b[16..18].copy_from_slice(&VERSION.to_le_bytes());
        b[18] = self.kind.code();
        b[19] = CODEC_ZSTD;
        let name = self.name.as_bytes();
        b[20..22].copy_from_slice(&(name.len() as u16).to_le_bytes());
        b[22..22 + name.len()].copy_from_slice(name);
        b[88..96].copy_from_slice(&self.raw.to_le_bytes());
        b[96..104].copy_from_slice(&self.stored.to_le_bytes());
        b[104..136].copy_from_slice(&self.blake3);
        b[136..144].copy_from_slice(&self.sysid.to_le_bytes());
        b[144..148].copy_from_slice(&self.crc.to_le_bytes());
        let c = crc32c::crc32c(&b[..148]);
        b[148..152].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub(super) fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HDR_LEN {
            return Err(format!(
                "it is {} bytes, shorter than its {HDR_LEN}-byte header",
                b.len()
            ));
        }
        if get_u32(b, 0) != SKIP_MAGIC || &b[8..16] != MAGIC {
            return Err("it does not start with a pagevault WAL archive header".into());
        }
        if crc32c::crc32c(&b[..148]) != get_u32(b, 148) {
            return Err("its header fails its CRC32C".into());
        }
        let ver = get_u16(b, 16);
        if ver != VERSION || get_u32(b, 4) as usize != HDR_LEN - 8 {
            return Err(format!(
                "it has format version {ver}, which this pagevault does not read"
            ));
        }
        let kind = Kind::from_code(b[18]).ok_or("its header names an unknown kind")?;
        if b[19] != CODEC_ZSTD {
            return Err(format!("its header names unknown codec {}", b[19]));
        }
        let nl = get_u16(b, 20) as usize;
        let name = match std::str::from_utf8(&b[22..22 + nl.min(NAME_MAX)]) {
            Ok(n) if nl <= NAME_MAX => n.to_string(),
            _ => return Err("its header holds no valid name".into()),
        };
        Ok(Header {
            kind,
            name,
            raw: get_u64(b, 88),
            stored: get_u64(b, 96),
            blake3: b[104..136].try_into().unwrap(),
            sysid: get_u64(b, 136),
            crc: get_u32(b, 144),
        })
    }
}
