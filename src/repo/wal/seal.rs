//! An encrypted repository's archived files (`NAME.zst`, `NAME.sum`): the plain
//! archived file (wal/mod.rs, summary/) sealed whole in an envelope, under a data key of
//! its own wrapped by the master key, bound to the object's name so that it cannot be
//! renamed, and in chunks that cannot be dropped, reordered or cut short.
//!
//! ```text
//!   0 magic "PVWALENC" 8 | 8 version u16 (1) | 10 name length u16 | 12 name [64]
//!  76 key id [16] | 92 wrap nonce [12] | 104 wrapped data key [48]
//! 152 plain length u64 | 160 CRC32C of bytes 0..160 u32
//! 164 chunks: each 1 MiB of the plain file (the last one shorter) sealed, then its tag
//! ```
//! Chunk i is sealed with nonce (DOMAIN_WAL, i) and associated data: the name, i, 1 for
//! the last chunk else 0, and the plain length.

use super::*;
use crate::crypt::{show_id, DataKey, Master, DOMAIN_WAL, KEY_ID_LEN, TAG_LEN, WRAPPED_LEN};

pub(super) const ENV_MAGIC: &[u8; 8] = b"PVWALENC";
pub(super) const ENV_HDR: usize = 164;
const ENV_VERSION: u16 = 1;
const SEAL_CHUNK: usize = 1 << 20;

/// Bytes an envelope adds to a plain file of `plain` bytes.
pub(super) fn overhead(plain: u64) -> u64 {
    ENV_HDR as u64 + plain.div_ceil(SEAL_CHUNK as u64).max(1) * TAG_LEN as u64
}

fn wrap_aad(name: &str) -> Vec<u8> {
    [&b"pagevault wal key "[..], name.as_bytes()].concat()
}

fn chunk_aad(name: &str, i: u64, last: bool, plain: u64) -> Vec<u8> {
    let mut a = name.as_bytes().to_vec();
    a.extend_from_slice(&i.to_le_bytes());
    a.push(last as u8);
    a.extend_from_slice(&plain.to_le_bytes());
    a
}

fn chunks(plain: u64) -> u64 {
    plain.div_ceil(SEAL_CHUNK as u64).max(1)
}

/// The envelope's header for a new data key.
fn header(master: &Master, name: &str, dek: &DataKey, plain: u64) -> [u8; ENV_HDR] {
    let mut b = [0u8; ENV_HDR];
    b[0..8].copy_from_slice(ENV_MAGIC);
    b[8..10].copy_from_slice(&ENV_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(name.len() as u16).to_le_bytes());
    b[12..12 + name.len()].copy_from_slice(name.as_bytes());
    let (nonce, wrapped) = master.wrap(dek, &wrap_aad(name));
    b[76..92].copy_from_slice(&master.id);
    b[92..104].copy_from_slice(&nonce);
    b[104..152].copy_from_slice(&wrapped);
    b[152..160].copy_from_slice(&plain.to_le_bytes());
    let c = crc32c::crc32c(&b[..160]);
    b[160..164].copy_from_slice(&c.to_le_bytes());
    b
}

/// Checks an envelope's header for object `name` and opens its data key; returns it
/// and the plain length. A wrong key names both key ids.
fn open_header(master: &Master, name: &str, b: &[u8]) -> Result<(DataKey, u64), String> {
    if b.len() < ENV_HDR || &b[0..8] != ENV_MAGIC {
        return Err("it is not an encrypted archive file (no PVWALENC header)".into());
    }
    if crc32c::crc32c(&b[..160]) != get_u32(b, 160) {
        return Err("its envelope header fails its CRC32C".into());
    }
    if get_u16(b, 8) != ENV_VERSION {
        return Err(format!("its envelope has version {}", get_u16(b, 8)));
    }
    let nl = (get_u16(b, 10) as usize).min(NAME_MAX);
    let own = String::from_utf8_lossy(&b[12..12 + nl]);
    if own != name {
        return Err(format!(
            "it was sealed as {own}, not {name}: renamed or forged"
        ));
    }
    let id: [u8; KEY_ID_LEN] = b[76..92].try_into().unwrap();
    if id != master.id {
        return Err(format!(
            "it is encrypted with key id {}, and the key given has key id {}: wrong key or passphrase",
            show_id(&id),
            show_id(&master.id)
        ));
    }
    let wrapped: [u8; WRAPPED_LEN] = b[104..152].try_into().unwrap();
    let dek = master
        .unwrap(&b[92..104].try_into().unwrap(), &wrapped, &wrap_aad(name))
        .ok_or("its data key does not unwrap: forged")?;
    Ok((dek, get_u64(b, 152)))
}

/// Seals `plain` (bytes) as object `name`.
pub(super) fn seal_bytes(master: &Master, name: &str, plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain.len() + overhead(plain.len() as u64) as usize);
    let mut r = plain;
    seal_stream(master, name, &mut r, plain.len() as u64, &mut out)
        .expect("sealing into memory cannot fail");
    out
}

fn seal_stream(
    master: &Master,
    name: &str,
    r: &mut impl Read,
    plain: u64,
    out: &mut impl Write,
) -> io::Result<()> {
    let dek = DataKey::random();
    out.write_all(&header(master, name, &dek, plain))?;
    let n = chunks(plain);
    let mut buf = vec![0u8; SEAL_CHUNK + TAG_LEN];
    for i in 0..n {
        let len = (plain - i * SEAL_CHUNK as u64).min(SEAL_CHUNK as u64) as usize;
        if read_full(r, &mut buf[..len])? != len {
            return Err(io::Error::other("the file shrank while it was sealed"));
        }
        let aad = chunk_aad(name, i, i + 1 == n, plain);
        let k = dek.seal(DOMAIN_WAL, i, &aad, &mut buf, len);
        out.write_all(&buf[..k])?;
    }
    Ok(())
}

/// Opens sealed object `name` from `r` (of `len` bytes) into `out`, every chunk
/// authenticated; `most` bounds the plain length.
fn open_stream(
    master: &Master,
    name: &str,
    r: &mut impl Read,
    len: u64,
    most: u64,
    out: &mut impl Write,
) -> Result<u64, String> {
    let mut hb = [0u8; ENV_HDR];
    let k = read_full(r, &mut hb).map_err(|e| e.to_string())?;
    let (dek, plain) = open_header(master, name, &hb[..k])?;
    if plain > most || len != plain + overhead(plain) {
        return Err(format!(
            "its envelope says {plain} plain bytes in a file of {len} bytes: damaged or forged"
        ));
    }
    let n = chunks(plain);
    let mut buf = vec![0u8; SEAL_CHUNK + TAG_LEN];
    for i in 0..n {
        let clen = (plain - i * SEAL_CHUNK as u64).min(SEAL_CHUNK as u64) as usize + TAG_LEN;
        if read_full(r, &mut buf[..clen]).map_err(|e| e.to_string())? != clen {
            return Err("it is shorter than its envelope says".into());
        }
        let aad = chunk_aad(name, i, i + 1 == n, plain);
        let m = dek
            .open(DOMAIN_WAL, i, &aad, &mut buf[..clen])
            .ok_or_else(|| {
                format!("its chunk {i} does not authenticate with its key: damaged or forged")
            })?;
        out.write_all(&buf[..m]).map_err(|e| e.to_string())?;
    }
    Ok(plain)
}

/// Opens sealed bytes of object `name`.
pub(super) fn open_bytes(
    master: &Master,
    name: &str,
    b: &[u8],
    most: u64,
) -> Result<Vec<u8>, String> {
    let mut out = vec![];
    let mut r = b;
    open_stream(master, name, &mut r, b.len() as u64, most, &mut out)?;
    Ok(out)
}

/// The first `n` plain bytes of sealed object `name` from its first bytes (`head`, at
/// least the header and the first chunk, or the whole object).
pub(super) fn open_head(
    master: &Master,
    name: &str,
    head: &[u8],
    n: usize,
) -> Result<Vec<u8>, String> {
    let (dek, plain) = open_header(master, name, head)?;
    let first = (plain.min(SEAL_CHUNK as u64)) as usize + TAG_LEN;
    let mut c = head
        .get(ENV_HDR..ENV_HDR + first)
        .ok_or("it is shorter than its first chunk")?
        .to_vec();
    let aad = chunk_aad(name, 0, chunks(plain) == 1, plain);
    let m = dek
        .open(DOMAIN_WAL, 0, &aad, &mut c)
        .ok_or("its first chunk does not authenticate with its key: damaged or forged")?;
    c.truncate(m.min(n));
    Ok(c)
}

/// Bytes to fetch for [`open_head`].
pub(super) const HEAD_FETCH: u64 = (ENV_HDR + SEAL_CHUNK + TAG_LEN) as u64;

/// Seals the plain file `plain` as object `name` into a new durable temp file in `dir`.
pub(super) fn seal_file(master: &Master, name: &str, plain: &Path, dir: &Path) -> Result<Temp> {
    let mut f = File::open(plain).with_context(|| format!("cannot open '{}'", plain.display()))?;
    let len = f.metadata()?.len();
    let (tmp, out) = temp_beside(dir, name)?;
    let mut w = io::BufWriter::with_capacity(SEAL_CHUNK, out);
    seal_stream(master, name, &mut f, len, &mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
    let out = w.into_inner().map_err(|e| anyhow!("{}", e.error()))?;
    out.sync_all()?;
    Ok(tmp)
}

/// Opens sealed file `path` (object `name`, at most `most` plain bytes) into a new temp
/// file in `dir`.
pub(super) fn open_file(
    master: &Master,
    name: &str,
    path: &Path,
    dir: &Path,
    most: u64,
) -> Result<Temp> {
    let mut f = File::open(path).with_context(|| format!("cannot open '{}'", path.display()))?;
    let len = f.metadata()?.len();
    let (tmp, out) = temp_beside(dir, name)?;
    let mut w = io::BufWriter::with_capacity(SEAL_CHUNK, out);
    let mut r = io::BufReader::with_capacity(SEAL_CHUNK, &mut f);
    open_stream(master, name, &mut r, len, most, &mut w).map_err(|m| damaged(path, &m))?;
    w.flush()?;
    Ok(tmp)
}

/// Rewraps the data key of sealed file `path` (object `name`) from `old` to `new` in
/// place (its 164-byte header rewritten, fsynced): Ok(true) when rewritten, Ok(false)
/// when it was `new`'s already.
pub(super) fn rewrap_file(path: &Path, name: &str, old: &Master, new: &Master) -> Result<bool> {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open '{}'", path.display()))?;
    let mut b = [0u8; ENV_HDR];
    f.read_exact_at(&mut b, 0)
        .with_context(|| format!("cannot read '{}'", path.display()))?;
    let id: [u8; KEY_ID_LEN] = b[76..92].try_into().unwrap();
    if id == new.id && crc32c::crc32c(&b[..160]) == get_u32(&b, 160) {
        return Ok(false);
    }
    let (dek, _) = open_header(old, name, &b).map_err(|m| damaged(path, &m))?;
    let (nonce, wrapped) = new.wrap(&dek, &wrap_aad(name));
    b[76..92].copy_from_slice(&new.id);
    b[92..104].copy_from_slice(&nonce);
    b[104..152].copy_from_slice(&wrapped);
    let c = crc32c::crc32c(&b[..160]);
    b[160..164].copy_from_slice(&c.to_le_bytes());
    f.write_all_at(&b, 0)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot rewrite '{}'", path.display()))?;
    Ok(true)
}

/// Whether a file starts as an envelope.
pub(super) fn is_sealed(path: &Path) -> Result<bool> {
    let mut f = File::open(path).with_context(|| format!("cannot open '{}'", path.display()))?;
    let mut b = [0u8; 8];
    let k = read_full(&mut f, &mut b)?;
    Ok(&b[..k] == ENV_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_bind_name_key_and_length() {
        let m = Master::new([3; 32]);
        for len in [0usize, 10, SEAL_CHUNK, SEAL_CHUNK * 2 + 5] {
            let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let s = seal_bytes(&m, "A.zst", &plain);
            assert_eq!(s.len() as u64, len as u64 + overhead(len as u64));
            assert_eq!(open_bytes(&m, "A.zst", &s, u64::MAX).unwrap(), plain);
            let e = open_bytes(&m, "B.zst", &s, u64::MAX).unwrap_err();
            assert!(e.contains("renamed"), "{e}");
            let e = open_bytes(&Master::new([4; 32]), "A.zst", &s, u64::MAX).unwrap_err();
            assert!(e.contains("wrong key"), "{e}");
            let mut cut = s.clone();
            cut.truncate(s.len() - 1);
            assert!(open_bytes(&m, "A.zst", &cut, u64::MAX).is_err());
            let mut flip = s.clone();
            let n = flip.len();
            flip[n - 1] ^= 1;
            assert!(open_bytes(&m, "A.zst", &flip, u64::MAX).is_err());
            if len > 0 {
                assert_eq!(open_head(&m, "A.zst", &s, 5).unwrap(), plain[..5.min(len)]);
            }
        }
        // A two-chunk file cut after its first chunk (the length fixed) is refused.
        let plain = vec![7u8; SEAL_CHUNK + 1];
        let s = seal_bytes(&m, "A.zst", &plain);
        let mut cut = s[..ENV_HDR + SEAL_CHUNK + TAG_LEN].to_vec();
        cut[152..160].copy_from_slice(&(SEAL_CHUNK as u64).to_le_bytes());
        let c = crc32c::crc32c(&cut[..160]);
        cut[160..164].copy_from_slice(&c.to_le_bytes());
        assert!(open_bytes(&m, "A.zst", &cut, u64::MAX).is_err());
    }
}
