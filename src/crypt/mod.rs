//! Encryption at rest: master keys (a key file or a passphrase through Argon2id), key
//! ids, data keys wrapped by the master, and the AEAD (AES-256-GCM) that seals frames,
//! manifests and archived WAL; a signed set's MAC keys (keyed BLAKE3). A leaf: ring's
//! AES-256-GCM (its AES-NI/AVX code seals about six times faster than RustCrypto's
//! aes-gcm here), blake3, and RustCrypto's HMAC, HKDF and Argon2id; nothing of
//! pagevault.
//! Loading a key from the command line's files and environment is `load.rs`.

pub mod load;

use hmac::{Hmac, Mac};
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use zeroize::Zeroizing;

/// Bytes of a master key and of a data key.
pub const KEY_LEN: usize = 32;
/// Bytes of a GCM tag: every sealed piece is this much longer than its plaintext.
pub const TAG_LEN: usize = 16;
/// Bytes of a key id.
pub const KEY_ID_LEN: usize = 16;
/// Bytes of a data key wrapped by the master key (key + tag).
pub const WRAPPED_LEN: usize = KEY_LEN + TAG_LEN;

/// Argon2id parameters a reader accepts: a forged set must not make it allocate more.
pub const ARGON_M_MAX_KIB: u32 = 128 << 10;
pub const ARGON_T_MAX: u32 = 16;
pub const ARGON_P_MAX: u32 = 16;
/// What a new passphrase-derived key uses (64 MiB, 3 passes, 1 lane: RFC 9106's second
/// recommendation).
const ARGON_DEFAULT: (u32, u32, u32) = (64 << 10, 3, 1);

/// Nonce domains: a data key seals each kind of piece under its own nonces.
pub const DOMAIN_FRAME: u32 = 0;
pub const DOMAIN_MANIFEST: u32 = 1;
pub const DOMAIN_WAL: u32 = 2;

/// How a master key is made from what the user gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kdf {
    /// A key file: the master key is its 32 bytes.
    Raw,
    /// A passphrase through Argon2id with this salt and cost (memory KiB, passes, lanes).
    Argon2id {
        salt: [u8; 16],
        m_kib: u32,
        t: u32,
        p: u32,
    },
}

impl Kdf {
    /// Refuses parameters read from storage that no pagevault writes.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Kdf::Raw => Ok(()),
            Kdf::Argon2id { m_kib, t, p, .. } => {
                if !(8..=ARGON_M_MAX_KIB).contains(&m_kib)
                    || !(1..=ARGON_T_MAX).contains(&t)
                    || !(1..=ARGON_P_MAX).contains(&p)
                    || m_kib < 8 * p
                {
                    return Err(format!(
                        "Argon2id parameters m={m_kib} KiB t={t} p={p} are outside m 8..{ARGON_M_MAX_KIB} KiB, t 1..{ARGON_T_MAX}, p 1..{ARGON_P_MAX}"
                    ));
                }
                Ok(())
            }
        }
    }
}

/// What the user gave: a key or a passphrase, and where it came from (for messages).
#[derive(Clone)]
pub enum KeySource {
    Key {
        key: Arc<Zeroizing<[u8; KEY_LEN]>>,
        origin: String,
        file: Option<std::path::PathBuf>,
    },
    Passphrase {
        phrase: Arc<Zeroizing<Vec<u8>>>,
        origin: String,
        file: Option<std::path::PathBuf>,
    },
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySource({})", self.origin())
    }
}

impl PartialEq for KeySource {
    fn eq(&self, o: &KeySource) -> bool {
        match (self, o) {
            (KeySource::Key { key: a, .. }, KeySource::Key { key: b, .. }) => **a == **b,
            (KeySource::Passphrase { phrase: a, .. }, KeySource::Passphrase { phrase: b, .. }) => {
                **a == **b
            }
            _ => false,
        }
    }
}

/// Master keys already derived from a passphrase, by salt and cost: Argon2id runs once
/// per process for every stripe and set that shares them.
type DerivedCache = Mutex<HashMap<(Vec<u8>, [u8; 16], u32, u32, u32), Master>>;
static DERIVED: std::sync::OnceLock<DerivedCache> = std::sync::OnceLock::new();

impl KeySource {
    /// A key from its 32 bytes.
    pub fn key(bytes: [u8; KEY_LEN], origin: &str) -> KeySource {
        KeySource::Key {
            key: Arc::new(Zeroizing::new(bytes)),
            origin: origin.into(),
            file: None,
        }
    }

    pub fn passphrase(phrase: Vec<u8>, origin: &str) -> KeySource {
        KeySource::Passphrase {
            phrase: Arc::new(Zeroizing::new(phrase)),
            origin: origin.into(),
            file: None,
        }
    }

    /// The same source, read from `path` (another process can be told to read it).
    pub fn from_file(mut self, path: &std::path::Path) -> KeySource {
        let p = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        match &mut self {
            KeySource::Key { file, .. } | KeySource::Passphrase { file, .. } => *file = Some(p),
        }
        self
    }

    /// The option that gives another pagevault (restore_command) this key: the file's
    /// flag and absolute path; None for a passphrase from the environment.
    pub fn command_option(&self) -> Option<(&'static str, &std::path::Path)> {
        match self {
            KeySource::Key { file: Some(f), .. } => Some(("--key-file", f)),
            KeySource::Passphrase { file: Some(f), .. } => Some(("--passphrase-file", f)),
            _ => None,
        }
    }

    /// Where it came from: "key file 'F'", "PAGEVAULT_PASSPHRASE" ...
    pub fn origin(&self) -> &str {
        match self {
            KeySource::Key { origin, .. } | KeySource::Passphrase { origin, .. } => origin,
        }
    }

    /// The derivation a new set or repository records: a fresh salt for a passphrase.
    pub fn new_kdf(&self) -> Kdf {
        match self {
            KeySource::Key { .. } => Kdf::Raw,
            KeySource::Passphrase { .. } => {
                let mut salt = [0u8; 16];
                rand::rngs::OsRng.fill_bytes(&mut salt);
                let (m_kib, t, p) = ARGON_DEFAULT;
                Kdf::Argon2id { salt, m_kib, t, p }
            }
        }
    }

    /// The master key this source gives under `kdf` (checked first).
    pub fn master(&self, kdf: &Kdf) -> Result<Master, String> {
        kdf.check()?;
        match (self, *kdf) {
            (KeySource::Key { key, .. }, Kdf::Raw) => Ok(Master::new(***key)),
            (KeySource::Passphrase { phrase, .. }, Kdf::Argon2id { salt, m_kib, t, p }) => {
                let cache = DERIVED.get_or_init(Default::default);
                let id = (phrase.to_vec(), salt, m_kib, t, p);
                if let Some(m) = cache.lock().unwrap().get(&id) {
                    return Ok(m.clone());
                }
                let params = argon2::Params::new(m_kib, t, p, Some(KEY_LEN))
                    .map_err(|e| format!("Argon2id parameters: {e}"))?;
                let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
                let mut out = Zeroizing::new([0u8; KEY_LEN]);
                a.hash_password_into(phrase, &salt, &mut *out)
                    .map_err(|e| format!("Argon2id: {e}"))?;
                let m = Master::new(*out);
                cache.lock().unwrap().insert(id, m.clone());
                Ok(m)
            }
            (KeySource::Key { origin, .. }, Kdf::Argon2id { .. }) => Err(format!(
                "it was encrypted with a passphrase, and {origin} gives a key: give --passphrase-file or PAGEVAULT_PASSPHRASE"
            )),
            (KeySource::Passphrase { origin, .. }, Kdf::Raw) => Err(format!(
                "it was encrypted with a key file, and {origin} gives a passphrase: give --key-file or PAGEVAULT_KEY_FILE"
            )),
        }
    }
}

/// A master key and its id (the first 16 bytes of HMAC-SHA256(key, "pagevault key id")).
#[derive(Clone)]
pub struct Master {
    key: Arc<Zeroizing<[u8; KEY_LEN]>>,
    pub id: [u8; KEY_ID_LEN],
}

impl std::fmt::Debug for Master {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Master(id {})", show_id(&self.id))
    }
}

impl Master {
    pub fn new(key: [u8; KEY_LEN]) -> Master {
        let key = Arc::new(Zeroizing::new(key));
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&key[..]).expect("any key length");
        mac.update(b"pagevault key id");
        let id = mac.finalize().into_bytes()[..KEY_ID_LEN]
            .try_into()
            .unwrap();
        Master { key, id }
    }

    /// The key-encryption key: HKDF-SHA256 of the master, its own purpose.
    fn kek(&self) -> LessSafeKey {
        let mut k = Zeroizing::new([0u8; KEY_LEN]);
        hkdf::Hkdf::<Sha256>::new(None, &self.key[..])
            .expand(b"pagevault key wrap", &mut *k)
            .expect("32 bytes is a valid HKDF length");
        aead_key(&k)
    }

    /// HMAC-SHA256 under a key of the marker's own purpose (HKDF-SHA256 of the
    /// master): only a holder of the key can write a marker a keyed reader accepts.
    fn marker_mac(&self, text: &[u8]) -> Hmac<Sha256> {
        self.purpose_mac(b"pagevault repository marker", text)
    }

    /// HMAC-SHA256 of `text` under HKDF-SHA256 of the master for `purpose`.
    fn purpose_mac(&self, purpose: &[u8], text: &[u8]) -> Hmac<Sha256> {
        let mut k = Zeroizing::new([0u8; KEY_LEN]);
        hkdf::Hkdf::<Sha256>::new(None, &self.key[..])
            .expand(purpose, &mut *k)
            .expect("32 bytes is a valid HKDF length");
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&k[..]).expect("any key length");
        mac.update(text);
        mac
    }

    /// The tag of a drill record (its name and text): only a holder of the key can
    /// write a record `status` shows as genuine.
    pub fn drill_tag(&self, text: &[u8]) -> [u8; MAC_LEN] {
        (self
            .purpose_mac(b"pagevault drill record", text)
            .finalize()
            .into_bytes())
        .into()
    }

    /// Whether `tag` is the tag of the drill record `text` (constant time).
    pub fn drill_ok(&self, text: &[u8], tag: &[u8]) -> bool {
        (self.purpose_mac(b"pagevault drill record", text))
            .verify_slice(tag)
            .is_ok()
    }

    /// The tag of a repository marker's text.
    pub fn marker_tag(&self, text: &[u8]) -> [u8; MAC_LEN] {
        self.marker_mac(text).finalize().into_bytes().into()
    }

    /// Whether `tag` is the tag of `text` (compared in constant time).
    pub fn marker_ok(&self, text: &[u8], tag: &[u8]) -> bool {
        self.marker_mac(text).verify_slice(tag).is_ok()
    }

    /// `dek` wrapped under a random nonce, bound to `aad`: (nonce, wrapped).
    pub fn wrap(&self, dek: &DataKey, aad: &[u8]) -> ([u8; 12], [u8; WRAPPED_LEN]) {
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut out = [0u8; WRAPPED_LEN];
        out[..KEY_LEN].copy_from_slice(&dek.key[..]);
        let tag = self
            .kek()
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[..KEY_LEN],
            )
            .expect("AES-GCM seals 32 bytes");
        out[KEY_LEN..].copy_from_slice(tag.as_ref());
        (nonce, out)
    }

    /// The data key `wrapped` holds, or None when it was not wrapped by this key for `aad`.
    pub fn unwrap(
        &self,
        nonce: &[u8; 12],
        wrapped: &[u8; WRAPPED_LEN],
        aad: &[u8],
    ) -> Option<DataKey> {
        let mut sealed = Zeroizing::new(*wrapped);
        let k = self
            .kek()
            .open_in_place(
                Nonce::assume_unique_for_key(*nonce),
                Aad::from(aad),
                &mut sealed[..],
            )
            .ok()?;
        Some(DataKey::from_bytes(k.try_into().ok()?))
    }
}

/// A data key (one per set, one per archived WAL file) and its cipher.
#[derive(Clone)]
pub struct DataKey {
    key: Arc<Zeroizing<[u8; KEY_LEN]>>,
    aead: Arc<LessSafeKey>,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    /// A new random data key.
    pub fn random() -> DataKey {
        let mut k = Zeroizing::new([0u8; KEY_LEN]);
        rand::rngs::OsRng.fill_bytes(&mut *k);
        DataKey::from_bytes(*k)
    }

    fn from_bytes(k: [u8; KEY_LEN]) -> DataKey {
        let aead = Arc::new(aead_key(&k));
        DataKey {
            key: Arc::new(Zeroizing::new(k)),
            aead,
        }
    }

    /// The nonce of piece `counter` of `domain`: a data key never seals two pieces
    /// under one nonce as long as each counter is used once per domain.
    fn nonce(domain: u32, counter: u64) -> [u8; 12] {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&domain.to_le_bytes());
        n[4..].copy_from_slice(&counter.to_le_bytes());
        n
    }

    /// Seals `buf[..len]` in place and puts the tag after it; returns `len + TAG_LEN`.
    /// `buf` must have room for the tag.
    pub fn seal(&self, domain: u32, counter: u64, aad: &[u8], buf: &mut [u8], len: usize) -> usize {
        let n = Self::nonce(domain, counter);
        let tag = self
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(n),
                Aad::from(aad),
                &mut buf[..len],
            )
            .expect("AES-GCM seals pieces under 64 GiB");
        buf[len..len + TAG_LEN].copy_from_slice(tag.as_ref());
        len + TAG_LEN
    }

    /// Opens `buf` (ciphertext then tag) in place; returns the plaintext's length, or
    /// None when it is not what this key sealed there (forged, moved or damaged).
    pub fn open(&self, domain: u32, counter: u64, aad: &[u8], buf: &mut [u8]) -> Option<usize> {
        let len = buf.len().checked_sub(TAG_LEN)?;
        let n = Self::nonce(domain, counter);
        self.aead
            .open_in_place(Nonce::assume_unique_for_key(n), Aad::from(aad), buf)
            .ok()?;
        Some(len)
    }
}

/// Bytes of a keyed BLAKE3 tag.
pub const MAC_LEN: usize = 32;

/// A keyed BLAKE3 key: HKDF-SHA256 of a random MAC key (a `DataKey`'s 32 bytes,
/// wrapped by the master like a data key, so `key rotate` rewraps it), with a salt and
/// an info of its own use.
#[derive(Clone)]
pub struct MacKey(Arc<Zeroizing<[u8; KEY_LEN]>>);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    pub fn derive(key: &DataKey, salt: Option<&[u8]>, info: &[u8]) -> MacKey {
        let mut k = Zeroizing::new([0u8; KEY_LEN]);
        hkdf::Hkdf::<Sha256>::new(salt, &key.key[..])
            .expand(info, &mut *k)
            .expect("32 bytes is a valid HKDF length");
        MacKey(Arc::new(k))
    }

    fn hash(&self, bound: &[u8], bytes: &[u8]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(bound);
        h.update(bytes);
        h.finalize()
    }

    /// The tag of `bytes` at their place; `bound` is fixed-length for each use.
    pub fn tag(&self, bound: &[u8], bytes: &[u8]) -> [u8; MAC_LEN] {
        *self.hash(bound, bytes).as_bytes()
    }

    /// Whether `tag` is that of `bytes` at their place (compared in constant time).
    pub fn ok(&self, bound: &[u8], bytes: &[u8], tag: &[u8; MAC_LEN]) -> bool {
        self.hash(bound, bytes) == blake3::Hash::from(*tag)
    }
}

/// A signed set's MAC keys, for its frames and its manifest, salted with the set id.
#[derive(Clone, Debug)]
pub struct SetMac {
    pub frame: MacKey,
    pub manifest: MacKey,
    pub set_id: [u8; 16],
}

impl SetMac {
    /// The MAC keys of set `set_id` from its MAC key.
    pub fn new(key: &DataKey, set_id: [u8; 16]) -> SetMac {
        SetMac {
            frame: MacKey::derive(key, Some(&set_id), b"pagevault frame mac"),
            manifest: MacKey::derive(key, Some(&set_id), b"pagevault manifest mac"),
            set_id,
        }
    }
}

/// A signed WAL envelope's chunk key, from the file's MAC key.
pub fn chunk_mac(key: &DataKey) -> MacKey {
    MacKey::derive(key, None, b"pagevault wal chunk mac")
}

/// AES-256-GCM under `k`.
fn aead_key(k: &[u8; KEY_LEN]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("a 32-byte AES-256 key"))
}

/// Hex of a key id, as messages show it.
pub fn show_id(id: &[u8; KEY_ID_LEN]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_and_every_binding() {
        let k = DataKey::random();
        let mut b = b"some page bytes".to_vec();
        let len = b.len();
        b.resize(len + TAG_LEN, 0);
        assert_eq!(k.seal(DOMAIN_FRAME, 7, b"aad", &mut b, len), len + TAG_LEN);
        assert!(!b.windows(4).any(|w| w == b"page"));
        let good = b.clone();
        assert_eq!(k.open(DOMAIN_FRAME, 7, b"aad", &mut b), Some(len));
        assert_eq!(&b[..len], b"some page bytes");
        for (d, c, aad) in [
            (DOMAIN_MANIFEST, 7, &b"aad"[..]),
            (DOMAIN_FRAME, 8, b"aad"),
            (DOMAIN_FRAME, 7, b"aae"),
        ] {
            let mut x = good.clone();
            assert_eq!(k.open(d, c, aad, &mut x), None);
        }
        let mut x = good.clone();
        x[3] ^= 1;
        assert_eq!(k.open(DOMAIN_FRAME, 7, b"aad", &mut x), None);
        let mut x = good;
        assert_eq!(
            DataKey::random().open(DOMAIN_FRAME, 7, b"aad", &mut x),
            None
        );
    }

    #[test]
    fn wrap_binds_key_and_aad() {
        let m = Master::new([1; 32]);
        let dek = DataKey::random();
        let (n, w) = m.wrap(&dek, b"set 1");
        let back = m.unwrap(&n, &w, b"set 1").unwrap();
        assert_eq!(**back.key, **dek.key);
        assert!(m.unwrap(&n, &w, b"set 2").is_none());
        assert!(Master::new([2; 32]).unwrap(&n, &w, b"set 1").is_none());
        assert_ne!(Master::new([2; 32]).id, m.id);
        assert_eq!(Master::new([1; 32]).id, m.id);
    }

    #[test]
    fn set_macs_bind_key_set_and_place() {
        let k = DataKey::random();
        let m = SetMac::new(&k, [1; 16]);
        let t = m.frame.tag(b"place 1", b"bytes");
        assert!(m.frame.ok(b"place 1", b"bytes", &t));
        assert!(!m.frame.ok(b"place 2", b"bytes", &t));
        assert!(!m.frame.ok(b"place 1", b"bytez", &t));
        // Frame and manifest keys differ, and so do other sets' and other keys'.
        assert!(!m.manifest.ok(b"place 1", b"bytes", &t));
        assert!(!SetMac::new(&k, [2; 16]).frame.ok(b"place 1", b"bytes", &t));
        assert!(!SetMac::new(&DataKey::random(), [1; 16])
            .frame
            .ok(b"place 1", b"bytes", &t));
        assert_eq!(SetMac::new(&k, [1; 16]).frame.tag(b"place 1", b"bytes"), t);
    }

    /// What signing costs per core: keyed BLAKE3 over 1 MiB frames, beside what a
    /// plain set's digest (XXH3-128) and an encrypted set's seal cost. Run with
    /// `cargo test --release --lib -- --ignored mac_throughput --nocapture`.
    #[test]
    #[ignore]
    fn mac_throughput() {
        let frame: Vec<u8> = (0..1u32 << 20).map(|i| (i * 2_654_435_761) as u8).collect();
        let m = SetMac::new(&DataKey::random(), [1; 16]);
        let bound = [7u8; 52];
        let rate = |what: &str, f: &mut dyn FnMut()| {
            for _ in 0..20 {
                f();
            }
            let (n, t) = (400, std::time::Instant::now());
            for _ in 0..n {
                f();
            }
            let mbs = n as f64 * 1.048_576 / t.elapsed().as_secs_f64();
            println!("{what}: {mbs:.0} MB/s per core (1 MiB frames)");
        };
        let mut sink = 0u8;
        rate("keyed BLAKE3 (signed set, per frame tag)", &mut || {
            sink ^= m.frame.tag(&bound, &frame)[0];
        });
        rate("keyed BLAKE3 check (restore)", &mut || {
            sink ^= m.frame.ok(&bound, &frame, &[0; 32]) as u8;
        });
        rate("XXH3-128 (plain set digest)", &mut || {
            sink ^= twox_hash::XxHash3_128::oneshot(&frame) as u8;
        });
        rate("CRC32C", &mut || {
            sink ^= crc32c::crc32c(&frame) as u8;
        });
        let k = DataKey::random();
        let mut buf = frame.clone();
        buf.resize(frame.len() + TAG_LEN, 0);
        let mut seq = 0;
        rate("AES-256-GCM seal (encrypted set)", &mut || {
            seq += 1;
            sink ^= k.seal(DOMAIN_FRAME, seq, &bound, &mut buf, frame.len()) as u8;
        });
        println!("({sink})");
    }

    #[test]
    fn passphrase_derivation_is_stable_and_salted() {
        let s = KeySource::passphrase(b"correct horse".to_vec(), "test");
        let kdf = Kdf::Argon2id {
            salt: [5; 16],
            m_kib: 64,
            t: 1,
            p: 1,
        };
        let a = s.master(&kdf).unwrap();
        assert_eq!(a.id, s.master(&kdf).unwrap().id);
        let other = Kdf::Argon2id {
            salt: [6; 16],
            m_kib: 64,
            t: 1,
            p: 1,
        };
        assert_ne!(a.id, s.master(&other).unwrap().id);
        assert!(s.master(&Kdf::Raw).unwrap_err().contains("key file"));
        let huge = Kdf::Argon2id {
            salt: [5; 16],
            m_kib: u32::MAX,
            t: 1,
            p: 1,
        };
        assert!(s.master(&huge).is_err());
    }
}
