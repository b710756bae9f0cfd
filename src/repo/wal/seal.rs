//! A protected repository's archived files (`NAME.zst`, `NAME.sum`): the plain
//! archived file (wal/mod.rs, summary/) whole in an envelope, under a random key of its
//! own wrapped by the master key, bound to the object's name so that it cannot be
//! renamed, and in chunks that cannot be dropped, reordered or cut short. An encrypted
//! repository seals each chunk (AES-256-GCM, "PVWALENC"); a signed one stores each
//! chunk plain and tags it (keyed BLAKE3, "PVWALSIG").
//!
//! ```text
//!   0 magic "PVWALENC" or "PVWALSIG" 8 | 8 version u16 (1) | 10 name length u16 | 12 name [64]
//!  76 key id [16] | 92 wrap nonce [12] | 104 wrapped data or MAC key [48]
//! 152 plain length u64 | 160 CRC32C of bytes 0..160 u32
//! 164 chunks: each 1 MiB of the plain file (the last one shorter), then its tag
//! ```
//! PVWALENC: the key is wrapped with associated data "pagevault wal key " + name; chunk
//! i is sealed with nonce (DOMAIN_WAL, i) and associated data: the name, i, 1 for the
//! last chunk else 0, and the plain length; its tag is the 16-byte GCM tag.
//!
//! PVWALSIG: the key is wrapped with associated data "pagevault wal mac key " + name;
//! chunk i is stored as is, followed by the 32-byte keyed BLAKE3 (key: HKDF-SHA256 of
//! the file's MAC key, info "pagevault wal chunk mac") of: name length u16, the name,
//! i u64, 1 for the last chunk else 0 (u8), the plain length u64, then the chunk.

use super::*;
use crate::crypt::{
    chunk_mac, show_id, DataKey, MacKey, Master, DOMAIN_WAL, KEY_ID_LEN, MAC_LEN, TAG_LEN,
    WRAPPED_LEN,
};

pub(super) const ENV_MAGIC: &[u8; 8] = b"PVWALENC";
pub(super) const SIG_MAGIC: &[u8; 8] = b"PVWALSIG";
pub(super) const ENV_HDR: usize = 164;
const ENV_VERSION: u16 = 1;
const SEAL_CHUNK: usize = 1 << 20;

/// How a repository protects its archived files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Encrypted: every chunk sealed (PVWALENC).
    Seal,
    /// Signed: every chunk plain and tagged (PVWALSIG).
    Sign,
}

impl Envelope {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            Envelope::Seal => ENV_MAGIC,
            Envelope::Sign => SIG_MAGIC,
        }
    }

    fn tag_len(self) -> usize {
        match self {
            Envelope::Seal => TAG_LEN,
            Envelope::Sign => MAC_LEN,
        }
    }

    /// "encrypted" or "signed", as messages say it.
    pub fn word(self) -> &'static str {
        match self {
            Envelope::Seal => "encrypted",
            Envelope::Sign => "signed",
        }
    }

    fn wrap_aad(self, name: &str) -> Vec<u8> {
        let d: &[u8] = match self {
            Envelope::Seal => b"pagevault wal key ",
            Envelope::Sign => b"pagevault wal mac key ",
        };
        [d, name.as_bytes()].concat()
    }

    /// The envelope `b` (a file's first bytes) starts as, if any.
    pub(super) fn of(b: &[u8]) -> Option<Envelope> {
        [Envelope::Seal, Envelope::Sign]
            .into_iter()
            .find(|e| b.starts_with(e.magic()))
    }
}

/// The key a protected repository's archived files are read and written with.
#[derive(Debug, Clone)]
pub struct WalKey {
    pub master: Master,
    pub env: Envelope,
}

/// One file's key: its data key (sealed) or its chunk MAC (signed).
enum FileKey {
    Seal(DataKey),
    Sign(MacKey),
}

impl FileKey {
    fn new(env: Envelope, k: &DataKey) -> FileKey {
        match env {
            Envelope::Seal => FileKey::Seal(k.clone()),
            Envelope::Sign => FileKey::Sign(chunk_mac(k)),
        }
    }

    /// Protects chunk `buf[..len]` in place, its tag after it; returns the bytes stored.
    fn seal(
        &self,
        name: &str,
        i: u64,
        last: bool,
        plain: u64,
        buf: &mut [u8],
        len: usize,
    ) -> usize {
        match self {
            FileKey::Seal(k) => k.seal(DOMAIN_WAL, i, &chunk_aad(name, i, last, plain), buf, len),
            FileKey::Sign(m) => {
                let t = m.tag(&chunk_bound(name, i, last, plain), &buf[..len]);
                buf[len..len + MAC_LEN].copy_from_slice(&t);
                len + MAC_LEN
            }
        }
    }

    /// Opens stored chunk `buf` (bytes then tag) in place; returns the plain length, or
    /// None when it does not authenticate.
    fn open(&self, name: &str, i: u64, last: bool, plain: u64, buf: &mut [u8]) -> Option<usize> {
        match self {
            FileKey::Seal(k) => k.open(DOMAIN_WAL, i, &chunk_aad(name, i, last, plain), buf),
            FileKey::Sign(m) => {
                let len = buf.len().checked_sub(MAC_LEN)?;
                let tag: [u8; MAC_LEN] = buf[len..].try_into().ok()?;
                m.ok(&chunk_bound(name, i, last, plain), &buf[..len], &tag)
                    .then_some(len)
            }
        }
    }
}

/// Bytes an envelope adds to a plain file of `plain` bytes.
pub(super) fn overhead(env: Envelope, plain: u64) -> u64 {
    ENV_HDR as u64 + chunks(plain) * env.tag_len() as u64
}

/// The most bytes either envelope adds to a plain file of `plain` bytes.
pub(super) fn overhead_max(plain: u64) -> u64 {
    overhead(Envelope::Sign, plain).max(overhead(Envelope::Seal, plain))
}

fn chunk_aad(name: &str, i: u64, last: bool, plain: u64) -> Vec<u8> {
    let mut a = name.as_bytes().to_vec();
    a.extend_from_slice(&i.to_le_bytes());
    a.push(last as u8);
    a.extend_from_slice(&plain.to_le_bytes());
    a
}

fn chunk_bound(name: &str, i: u64, last: bool, plain: u64) -> Vec<u8> {
    let mut a = (name.len() as u16).to_le_bytes().to_vec();
    a.extend_from_slice(&chunk_aad(name, i, last, plain));
    a
}

fn chunks(plain: u64) -> u64 {
    plain.div_ceil(SEAL_CHUNK as u64).max(1)
}

/// The envelope's header for a new file key.
fn header(k: &WalKey, name: &str, dek: &DataKey, plain: u64) -> [u8; ENV_HDR] {
    let mut b = [0u8; ENV_HDR];
    b[0..8].copy_from_slice(k.env.magic());
    b[8..10].copy_from_slice(&ENV_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(name.len() as u16).to_le_bytes());
    b[12..12 + name.len()].copy_from_slice(name.as_bytes());
    let (nonce, wrapped) = k.master.wrap(dek, &k.env.wrap_aad(name));
    b[76..92].copy_from_slice(&k.master.id);
    b[92..104].copy_from_slice(&nonce);
    b[104..152].copy_from_slice(&wrapped);
    b[152..160].copy_from_slice(&plain.to_le_bytes());
    let c = crc32c::crc32c(&b[..160]);
    b[160..164].copy_from_slice(&c.to_le_bytes());
    b
}

/// The key id an envelope's header names, shown; None for no envelope.
pub(super) fn key_id_of(b: &[u8]) -> Option<String> {
    Envelope::of(b)?;
    let id: [u8; KEY_ID_LEN] = b.get(76..92)?.try_into().ok()?;
    Some(show_id(&id))
}

/// Checks an envelope's header for object `name` and opens its file key; returns it
/// (a data key, or the key its chunk MAC derives from) and the plain length. A wrong
/// key names both key ids.
fn open_header(k: &WalKey, name: &str, b: &[u8]) -> Result<(DataKey, u64), String> {
    let (env, master) = (k.env, &k.master);
    if b.len() < ENV_HDR || !b.starts_with(env.magic()) {
        return Err(match Envelope::of(b) {
            Some(other) => format!(
                "it is {} (a {} envelope), but its repository is {}",
                other.word(),
                String::from_utf8_lossy(other.magic()),
                env.word()
            ),
            None => format!(
                "it is not {} archive file (no {} header)",
                match env {
                    Envelope::Seal => "an encrypted",
                    Envelope::Sign => "a signed",
                },
                String::from_utf8_lossy(env.magic())
            ),
        });
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
            "it was {} as {own}, not {name}: renamed or forged",
            match env {
                Envelope::Seal => "sealed",
                Envelope::Sign => "signed",
            }
        ));
    }
    let id: [u8; KEY_ID_LEN] = b[76..92].try_into().unwrap();
    if id != master.id {
        return Err(format!(
            "it is {} with key id {}, and the key given has key id {}: wrong key or passphrase",
            env.word(),
            show_id(&id),
            show_id(&master.id)
        ));
    }
    let wrapped: [u8; WRAPPED_LEN] = b[104..152].try_into().unwrap();
    let dek = master
        .unwrap(
            &b[92..104].try_into().unwrap(),
            &wrapped,
            &env.wrap_aad(name),
        )
        .ok_or(match env {
            Envelope::Seal => "its data key does not unwrap: forged",
            Envelope::Sign => "its MAC key does not unwrap: forged",
        })?;
    Ok((dek, get_u64(b, 152)))
}

/// Protects `plain` (bytes) as object `name`.
pub(super) fn seal_bytes(k: &WalKey, name: &str, plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(plain.len() + overhead(k.env, plain.len() as u64) as usize);
    let mut r = plain;
    seal_stream(k, name, &mut r, plain.len() as u64, &mut out)
        .expect("sealing into memory cannot fail");
    out
}

fn seal_stream(
    k: &WalKey,
    name: &str,
    r: &mut impl Read,
    plain: u64,
    out: &mut impl Write,
) -> io::Result<()> {
    let dek = DataKey::random();
    out.write_all(&header(k, name, &dek, plain))?;
    let fk = FileKey::new(k.env, &dek);
    let n = chunks(plain);
    let mut buf = vec![0u8; SEAL_CHUNK + MAC_LEN];
    for i in 0..n {
        let len = (plain - i * SEAL_CHUNK as u64).min(SEAL_CHUNK as u64) as usize;
        if read_full(r, &mut buf[..len])? != len {
            return Err(io::Error::other("the file shrank while it was sealed"));
        }
        let m = fk.seal(name, i, i + 1 == n, plain, &mut buf, len);
        out.write_all(&buf[..m])?;
    }
    Ok(())
}

/// Opens protected object `name` from `r` (of `len` bytes) into `out`, every chunk
/// authenticated; `most` bounds the plain length.
fn open_stream(
    k: &WalKey,
    name: &str,
    r: &mut impl Read,
    len: u64,
    most: u64,
    out: &mut impl Write,
) -> Result<u64, String> {
    let mut hb = [0u8; ENV_HDR];
    let got = read_full(r, &mut hb).map_err(|e| e.to_string())?;
    let (dek, plain) = open_header(k, name, &hb[..got])?;
    let fk = FileKey::new(k.env, &dek);
    if plain > most || len != plain + overhead(k.env, plain) {
        return Err(format!(
            "its envelope says {plain} plain bytes in a file of {len} bytes: damaged or forged"
        ));
    }
    let n = chunks(plain);
    let tl = k.env.tag_len();
    let mut buf = vec![0u8; SEAL_CHUNK + MAC_LEN];
    for i in 0..n {
        let clen = (plain - i * SEAL_CHUNK as u64).min(SEAL_CHUNK as u64) as usize + tl;
        if read_full(r, &mut buf[..clen]).map_err(|e| e.to_string())? != clen {
            return Err("it is shorter than its envelope says".into());
        }
        let m = fk
            .open(name, i, i + 1 == n, plain, &mut buf[..clen])
            .ok_or_else(|| {
                format!("its chunk {i} does not authenticate with its key: damaged or forged")
            })?;
        out.write_all(&buf[..m]).map_err(|e| e.to_string())?;
    }
    Ok(plain)
}

/// Opens protected bytes of object `name`.
pub(super) fn open_bytes(k: &WalKey, name: &str, b: &[u8], most: u64) -> Result<Vec<u8>, String> {
    let mut out = vec![];
    let mut r = b;
    open_stream(k, name, &mut r, b.len() as u64, most, &mut out)?;
    Ok(out)
}

/// The first `n` plain bytes of protected object `name` from its first bytes (`head`,
/// at least the header and the first chunk, or the whole object).
pub(super) fn open_head(k: &WalKey, name: &str, head: &[u8], n: usize) -> Result<Vec<u8>, String> {
    let (dek, plain) = open_header(k, name, head)?;
    let fk = FileKey::new(k.env, &dek);
    let first = (plain.min(SEAL_CHUNK as u64)) as usize + k.env.tag_len();
    let mut c = head
        .get(ENV_HDR..ENV_HDR + first)
        .ok_or("it is shorter than its first chunk")?
        .to_vec();
    let m = fk
        .open(name, 0, chunks(plain) == 1, plain, &mut c)
        .ok_or("its first chunk does not authenticate with its key: damaged or forged")?;
    c.truncate(m.min(n));
    Ok(c)
}

/// Bytes to fetch for [`open_head`].
pub(super) const HEAD_FETCH: u64 = (ENV_HDR + SEAL_CHUNK + MAC_LEN) as u64;

/// Protects the plain file `plain` as object `name` into a new durable temp file in `dir`.
pub(super) fn seal_file(k: &WalKey, name: &str, plain: &Path, dir: &Path) -> Result<Temp> {
    let mut f = crate::sys::open_regular(plain)
        .with_context(|| format!("cannot open '{}'", plain.display()))?;
    let len = f.metadata()?.len();
    let (tmp, out) = temp_beside(dir, name)?;
    let mut w = io::BufWriter::with_capacity(SEAL_CHUNK, out);
    seal_stream(k, name, &mut f, len, &mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
    let out = w.into_inner().map_err(|e| anyhow!("{}", e.error()))?;
    out.sync_all()?;
    Ok(tmp)
}

/// Opens protected file `path` (object `name`, at most `most` plain bytes) into a new
/// temp file in `dir`.
pub(super) fn open_file(
    k: &WalKey,
    name: &str,
    path: &Path,
    dir: &Path,
    most: u64,
) -> Result<Temp> {
    let mut f = crate::sys::open_regular(path)
        .with_context(|| format!("cannot open '{}'", path.display()))?;
    let len = f.metadata()?.len();
    let (tmp, out) = temp_beside(dir, name)?;
    let mut w = io::BufWriter::with_capacity(SEAL_CHUNK, out);
    let mut r = io::BufReader::with_capacity(SEAL_CHUNK, &mut f);
    open_stream(k, name, &mut r, len, most, &mut w).map_err(|m| damaged(path, &m))?;
    w.flush()?;
    Ok(tmp)
}

/// What [`rewrap_head`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rewrapped {
    Done,
    Already,
    /// A plain file (of a signed repository, archived before its signing): left as is.
    Plain,
}

/// Rewraps the file key in `b`, the head of protected file `shown` (object `name`), from
/// `old` to `new` in place: its 164-byte header. `env` is the repository's: a plain
/// file is an error when it seals, left as is when it signs.
pub(super) fn rewrap_head(
    b: &mut [u8],
    shown: &str,
    name: &str,
    env: Envelope,
    old: &Master,
    new: &Master,
) -> Result<Rewrapped> {
    if env == Envelope::Sign && Envelope::of(b).is_none() {
        return Ok(Rewrapped::Plain);
    }
    let damaged = |m: &str| {
        anyhow!(
            "archived WAL file '{shown}' is damaged: {m}; it cannot be restored from this archive"
        )
    };
    if b.len() < ENV_HDR {
        return Err(damaged("it is shorter than its envelope's header"));
    }
    let b = &mut b[..ENV_HDR];
    let id: [u8; KEY_ID_LEN] = b[76..92].try_into().unwrap();
    if id == new.id && crc32c::crc32c(&b[..160]) == get_u32(b, 160) {
        return Ok(Rewrapped::Already);
    }
    let k = WalKey {
        master: old.clone(),
        env,
    };
    let (dek, _) = open_header(&k, name, b).map_err(|m| damaged(&m))?;
    let (nonce, wrapped) = new.wrap(&dek, &env.wrap_aad(name));
    b[76..92].copy_from_slice(&new.id);
    b[92..104].copy_from_slice(&nonce);
    b[104..152].copy_from_slice(&wrapped);
    let c = crc32c::crc32c(&b[..160]);
    b[160..164].copy_from_slice(&c.to_le_bytes());
    Ok(Rewrapped::Done)
}

/// The envelope a file starts as, if any.
pub(super) fn envelope_of(path: &Path) -> Result<Option<Envelope>> {
    let mut f = crate::sys::open_regular(path)
        .with_context(|| format!("cannot open '{}'", path.display()))?;
    let mut b = [0u8; 8];
    let k = read_full(&mut f, &mut b)?;
    Ok(Envelope::of(&b[..k]))
}

/// The key id in a file's envelope header, shown; None for a plain file.
pub(super) fn file_key_id(path: &Path) -> Result<Option<String>> {
    let mut f = crate::sys::open_regular(path)
        .with_context(|| format!("cannot open '{}'", path.display()))?;
    let mut b = [0u8; ENV_HDR];
    let k = read_full(&mut f, &mut b)?;
    Ok(key_id_of(&b[..k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8, env: Envelope) -> WalKey {
        WalKey {
            master: Master::new([b; 32]),
            env,
        }
    }

    #[test]
    fn envelopes_bind_name_key_and_length() {
        for env in [Envelope::Seal, Envelope::Sign] {
            let m = key(3, env);
            for len in [0usize, 10, SEAL_CHUNK, SEAL_CHUNK * 2 + 5] {
                let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let s = seal_bytes(&m, "A.zst", &plain);
                assert!(s.starts_with(env.magic()));
                assert_eq!(s.len() as u64, len as u64 + overhead(env, len as u64));
                assert_eq!(open_bytes(&m, "A.zst", &s, u64::MAX).unwrap(), plain);
                let e = open_bytes(&m, "B.zst", &s, u64::MAX).unwrap_err();
                assert!(e.contains("renamed"), "{e}");
                let e = open_bytes(&key(4, env), "A.zst", &s, u64::MAX).unwrap_err();
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
                    // A byte of the chunk edited, its tag left.
                    let mut edit = s.clone();
                    edit[ENV_HDR] ^= 0x40;
                    let e = open_bytes(&m, "A.zst", &edit, u64::MAX).unwrap_err();
                    assert!(e.contains("chunk 0 does not authenticate"), "{e}");
                }
            }
            // A two-chunk file cut after its first chunk (the length fixed) is refused.
            let plain = vec![7u8; SEAL_CHUNK + 1];
            let s = seal_bytes(&m, "A.zst", &plain);
            let mut cut = s[..ENV_HDR + SEAL_CHUNK + env.tag_len()].to_vec();
            cut[152..160].copy_from_slice(&(SEAL_CHUNK as u64).to_le_bytes());
            let c = crc32c::crc32c(&cut[..160]);
            cut[160..164].copy_from_slice(&c.to_le_bytes());
            assert!(open_bytes(&m, "A.zst", &cut, u64::MAX).is_err());
            // Chunks swapped are refused.
            let plain: Vec<u8> = (0..SEAL_CHUNK * 2)
                .map(|i| (i / SEAL_CHUNK) as u8)
                .collect();
            let s = seal_bytes(&m, "A.zst", &plain);
            let c = SEAL_CHUNK + env.tag_len();
            let mut swap = s[..ENV_HDR].to_vec();
            swap.extend_from_slice(&s[ENV_HDR + c..]);
            swap.extend_from_slice(&s[ENV_HDR..ENV_HDR + c]);
            assert!(open_bytes(&m, "A.zst", &swap, u64::MAX).is_err());
        }
    }

    #[test]
    fn a_signed_envelope_keeps_its_bytes_plain_and_is_not_a_sealed_one() {
        let (sig, enc) = (key(3, Envelope::Sign), key(3, Envelope::Seal));
        let s = seal_bytes(&sig, "A.zst", b"hello wal");
        assert_eq!(&s[ENV_HDR..ENV_HDR + 9], b"hello wal");
        assert_eq!(key_id_of(&s), Some(show_id(&sig.master.id)));
        let e = open_bytes(&enc, "A.zst", &s, u64::MAX).unwrap_err();
        assert!(e.contains("is signed"), "{e}");
        let e = open_bytes(&sig, "A.zst", b"plain bytes", u64::MAX).unwrap_err();
        assert!(e.contains("not a signed archive file"), "{e}");
        // The magic changed to the other envelope's: the wrapped key does not unwrap.
        let mut relabel = s.clone();
        relabel[..8].copy_from_slice(ENV_MAGIC);
        let c = crc32c::crc32c(&relabel[..160]);
        relabel[160..164].copy_from_slice(&c.to_le_bytes());
        assert!(open_bytes(&enc, "A.zst", &relabel, u64::MAX).is_err());
    }
}
