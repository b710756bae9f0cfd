//! The repository's marker (`pagevault.repo`) and the key it records: its text,
//! parsing and MAC tag, authenticating a marker written before markers were tagged
//! (against a sample of what the repository holds), and the keyed repository's rules
//! for reads and writes.

use super::{wal, Repo, MARKER};
use crate::crypt::{load::GIVE_KEY, show_id, Kdf, KeySource, Master};
use crate::format::seal::KeyUse;
use anyhow::{anyhow, bail, Result};
use std::path::Path;

/// A stripe's media header: byte 41 says whether its set is encrypted.
const MEDIA_HEAD: u64 = 64;
/// How many sets and archived files, at most, are looked at to authenticate an old
/// marker.
const CHECKED_MAX: usize = 64;

/// What a repository holds, and how much of it is encrypted.
#[derive(Default)]
struct Held {
    sets: usize,
    sealed_sets: usize,
    wal: usize,
    sealed_wal: usize,
}

/// What the marker of an encrypted or signed repository records: every set and
/// archived file of an encrypted one is sealed under a data key wrapped by the master
/// key of this id and derivation; every set written to a signed one since it became
/// signed is signed (or encrypted) with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoKey {
    pub key_id: [u8; crate::crypt::KEY_ID_LEN],
    pub kdf: Kdf,
    /// Encrypted (`Seal`) or signed (`Sign`).
    pub mode: KeyUse,
}

pub(super) const MARKER_HEAD: &str = "pagevault repository 1\n";
/// A marker is a few lines; more is damage.
pub(super) const MARKER_MAX: u64 = 1 << 16;
/// The marker's second line: what the repository's key does.
const MODE_SEAL: &str = "encryption aes-256-gcm";
const MODE_SIGN: &str = "signing keyed-blake3";
/// A keyed marker's line naming the repository: a random id, under the marker's tag,
/// that every set written into it records (its manifest's `extra.repository`), so a
/// record naming another repository's set is refused even when the key is the same.
const ID_LINE: &str = "repository-id";
/// A repository id's length, bytes (32 hex digits in the marker and manifests).
pub const REPO_ID_LEN: usize = 16;

/// A new random repository id, as text.
pub(super) fn new_repo_id() -> String {
    use rand::RngCore;
    let mut id = [0u8; REPO_ID_LEN];
    rand::rngs::OsRng.fill_bytes(&mut id);
    hex::encode(id)
}

/// Whether `id` is a repository id as markers write them: 32 lowercase hex digits.
pub fn is_repo_id(id: &str) -> bool {
    id.len() == 2 * REPO_ID_LEN && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The line after the first of an immutable repository's marker, with the seconds its
/// store keeps every object (expire removes nothing younger).
const IMMUTABLE: &str = "immutable retain";

/// The immutable line, when `retain` is given.
pub(super) fn immutable_line(retain: Option<u64>) -> String {
    retain.map_or(String::new(), |s| format!("{IMMUTABLE} {s}\n"))
}

fn kdf_text(kdf: &Kdf) -> String {
    match *kdf {
        Kdf::Raw => "raw".to_string(),
        Kdf::Argon2id { salt, m_kib, t, p } => {
            format!("argon2id {} {m_kib} {t} {p}", hex::encode(salt))
        }
    }
}

fn parse_kdf(words: &[&str]) -> Result<Kdf, String> {
    let kdf = match words {
        ["raw"] => Kdf::Raw,
        ["argon2id", salt, m, t, p] => Kdf::Argon2id {
            salt: hex::decode(salt)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or("a bad Argon2id salt")?,
            m_kib: m.parse().map_err(|_| "a bad Argon2id memory")?,
            t: t.parse().map_err(|_| "a bad Argon2id pass count")?,
            p: p.parse().map_err(|_| "a bad Argon2id lane count")?,
        },
        _ => return Err("an unknown key derivation".into()),
    };
    kdf.check()?;
    Ok(kdf)
}

fn parse_id(h: &str) -> Result<[u8; crate::crypt::KEY_ID_LEN], String> {
    hex::decode(h)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| "a bad key id".to_string())
}

impl RepoKey {
    /// The marker's text: the first line, then the encryption lines (and, while `key
    /// rotate` runs, the key it rotates to).
    #[cfg(test)]
    fn marker(&self, id: Option<&str>, rotating: Option<&RepoKey>) -> String {
        self.marker_of(None, id, rotating)
    }

    /// The marker's text, with an immutable repository's line after the first and
    /// the repository's id (None: a marker from before ids) after the derivation.
    fn marker_of(
        &self,
        retain: Option<u64>,
        id: Option<&str>,
        rotating: Option<&RepoKey>,
    ) -> String {
        let mode = match self.mode {
            KeyUse::Seal => MODE_SEAL,
            KeyUse::Sign => MODE_SIGN,
        };
        let mut m = format!(
            "{MARKER_HEAD}{}{mode}\nkey-id {}\nkdf {}\n",
            immutable_line(retain),
            hex::encode(self.key_id),
            kdf_text(&self.kdf)
        );
        if let Some(id) = id {
            m += &format!("{ID_LINE} {id}\n");
        }
        if let Some(r) = rotating {
            m += &format!(
                "rotating-to {} {}\n",
                hex::encode(r.key_id),
                kdf_text(&r.kdf)
            );
        }
        m
    }

    /// The marker's text authenticated by `master` (this key's): a last line `mac`
    /// with the tag of every byte before it.
    fn marker_tagged(&self, id: &str, rotating: Option<&RepoKey>, master: &Master) -> String {
        self.marker_tagged_of(None, Some(id), rotating, master)
    }

    /// As `marker_tagged`, with an immutable repository's line.
    pub(super) fn marker_tagged_of(
        &self,
        retain: Option<u64>,
        id: Option<&str>,
        rotating: Option<&RepoKey>,
        master: &Master,
    ) -> String {
        let text = self.marker_of(retain, id, rotating);
        let tag = master.marker_tag(text.as_bytes());
        format!("{text}{MAC_LINE}{}\n", hex::encode(tag))
    }
}

/// The longest retention a marker may name (100 years).
pub const RETAIN_MAX: u64 = 100 * 366 * 86400;

/// A keyed marker's last line: the tag of every byte before it.
const MAC_LINE: &str = "mac ";

/// A repository's marker as read: its bytes, its key and the key a rotation goes to
/// (None for a plain repository), and its tag with the length of the text it covers
/// (None for a marker written before markers were authenticated).
struct Marker {
    text: Vec<u8>,
    /// An immutable repository's retention, seconds.
    immutable: Option<u64>,
    key: Option<RepoKey>,
    /// A keyed repository's id (None in markers written before ids).
    id: Option<String>,
    rotating: Option<RepoKey>,
    tag: Option<(usize, Vec<u8>)>,
}

impl Marker {
    /// Parses a marker: the first line, then (keyed) the mode, key id, derivation, an
    /// optional rotation and an optional tag, in that order, and nothing after.
    fn parse(bytes: &[u8]) -> Result<Marker, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "it is not text")?;
        if !text.ends_with('\n') {
            return Err("it is empty or its last line does not end".into());
        }
        // Each line without its end, and the offset of its first byte.
        let mut at = 0;
        let mut lines = text.lines().map(|l| {
            let start = at;
            at += l.len() + 1;
            (start, l)
        });
        let mut m = Marker {
            text: bytes.to_vec(),
            immutable: None,
            key: None,
            id: None,
            rotating: None,
            tag: None,
        };
        match lines.next() {
            Some((_, l)) if l == MARKER_HEAD.trim_end() => {}
            Some((_, l)) => {
                return Err(format!(
                    "its first line is '{}', not '{}'",
                    l.escape_debug(),
                    MARKER_HEAD.trim_end()
                ))
            }
            None => return Err("it is empty".into()),
        }
        let mut next = lines.next();
        if let Some(v) = next.and_then(|(_, l)| l.strip_prefix(IMMUTABLE)?.strip_prefix(' ')) {
            let secs = v
                .parse::<u64>()
                .ok()
                .filter(|s| *s <= RETAIN_MAX)
                .ok_or("a bad 'immutable retain' line")?;
            m.immutable = Some(secs);
            next = lines.next();
        }
        let mode = match next {
            None => return Ok(m),
            Some((_, MODE_SEAL)) => KeyUse::Seal,
            Some((_, MODE_SIGN)) => KeyUse::Sign,
            Some((_, l)) => return Err(format!("unknown line '{}'", l.escape_debug())),
        };
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|(_, l)| l.strip_prefix(name)?.strip_prefix(' '))
                .ok_or_else(|| format!("no '{name}' line"))
        };
        let key_id = parse_id(field("key-id")?)?;
        let kdf: Vec<&str> = field("kdf")?.split(' ').collect();
        m.key = Some(RepoKey {
            key_id,
            kdf: parse_kdf(&kdf)?,
            mode,
        });
        let mut line = lines.next();
        if let Some(id) = line.and_then(|(_, l)| l.strip_prefix(ID_LINE)?.strip_prefix(' ')) {
            if !is_repo_id(id) {
                return Err("a bad 'repository-id' line".into());
            }
            m.id = Some(id.to_string());
            line = lines.next();
        }
        if let Some(r) = line.and_then(|(_, l)| l.strip_prefix("rotating-to ")) {
            let w: Vec<&str> = r.split(' ').collect();
            let (id, kdf) = w.split_first().ok_or("an empty 'rotating-to' line")?;
            m.rotating = Some(RepoKey {
                key_id: parse_id(id)?,
                kdf: parse_kdf(kdf)?,
                mode,
            });
            line = lines.next();
        }
        if let Some((start, l)) = line {
            let tag = l
                .strip_prefix(MAC_LINE)
                .ok_or_else(|| format!("unknown line '{}'", l.escape_debug()))?;
            let tag = hex::decode(tag)
                .ok()
                .filter(|t| t.len() == crate::crypt::MAC_LEN)
                .ok_or("a bad 'mac' line")?;
            m.tag = Some((start, tag));
            if lines.next().is_some() {
                return Err("a line after its 'mac' line".into());
            }
        }
        Ok(m)
    }
}

impl Repo {
    /// The marker, parsed.
    fn read_marker(&self) -> Result<Marker> {
        let text = self.store.get(MARKER, MARKER_MAX)?.ok_or_else(|| {
            anyhow!(
                "'{}' is missing: the repository's marker was removed; restore it from a copy",
                self.store.describe(MARKER)
            )
        })?;
        self.parse_marker(&text)
    }

    fn parse_marker(&self, text: &[u8]) -> Result<Marker> {
        Marker::parse(text).map_err(|e| {
            anyhow!(
                "'{}': {e}: the marker is damaged or forged",
                self.store.describe(MARKER)
            )
        })
    }

    /// Reads the marker. With a key, the repository must be keyed with it and its
    /// marker authenticated by it, whatever the marker says: a plain marker is refused
    /// to a read (`write`, a backup or push, may make a plain repository keyed), and a
    /// marker written before markers were authenticated is authenticated by a write
    /// (when what the repository holds agrees with it) and refused to a read.
    /// `read`: the marker's bytes when the opening read them already.
    pub(super) fn with_key(mut self, write: bool, read: Option<Vec<u8>>) -> Result<Repo> {
        let m = match read {
            Some(text) => self.parse_marker(&text)?,
            None => self.read_marker()?,
        };
        self.immutable = m.immutable;
        // Without a key the id is not authenticated, but no keyed set reads then.
        let mut id = m.id.clone();
        if let Some(source) = &self.options.key {
            match &m.key {
                Some(k) => {
                    let master = self.check_key(k, source)?;
                    id = self.authenticate(&m, k, &master, write)?;
                }
                None if !write => bail!(
                    "repository '{}' is neither encrypted nor signed (its marker names no key), and a key was given ({}): a keyed repository's marker is authenticated by its key, so this marker is forged or the repository is plain; read a plain repository without a key",
                    self.describe(),
                    source.origin()
                ),
                None => {}
            }
        }
        *self.key.lock().unwrap() = m.key;
        *self.id.lock().unwrap() = id;
        Ok(self)
    }

    /// Checks the marker's tag under `master` (of key `k`, the marker's); a marker
    /// without one is authenticated now by a write, refused to a read. A write gives
    /// a tagged marker without an id one. Returns the repository's id.
    fn authenticate(
        &self,
        m: &Marker,
        k: &RepoKey,
        master: &Master,
        write: bool,
    ) -> Result<Option<String>> {
        let what = self.store.describe(MARKER);
        match &m.tag {
            Some((covered, tag)) if master.marker_ok(&m.text[..*covered], tag) => {
                match &m.id {
                    None if write && m.rotating.is_none() && m.immutable.is_none() => {
                        self.rewrite_marker(m, k, master)
                    }
                    id => Ok(id.clone()),
                }
            }
            Some(_) => bail!(
                "'{what}' is damaged or forged: its tag does not match its text under key id {} (the repository's key): restore the marker from a copy, or recreate it with `pagevault key rotate` from the key it names",
                show_id(&k.key_id)
            ),
            None if !write => bail!(
                "'{what}' is not authenticated: it was written before repository markers were, or it is forged; the next backup or archive-push with the key authenticates it, as does `pagevault key rotate --repo {} --old-key-file K --new-key-file K` with the same key",
                self.describe()
            ),
            None => self.authenticate_old(m, k, master),
        }
    }

    /// Authenticates a marker written before markers were (format 1 without its
    /// `mac` line), if what the repository holds agrees with the mode it names: a
    /// forged mode is never taken up.
    fn authenticate_old(&self, m: &Marker, k: &RepoKey, master: &Master) -> Result<Option<String>> {
        let what = self.store.describe(MARKER);
        if m.id.is_some() {
            bail!(
                "'{what}' is not authenticated, and names a repository id, which only tagged markers do: it is forged, or lost its tag; restore the marker from a copy, or, if every line of it is right, authenticate it with `pagevault key rotate --repo {} --old-key-file K --new-key-file K` (the same key)",
                self.describe()
            );
        }
        if m.rotating.is_some() {
            bail!(
                "'{what}' is not authenticated and records a key rotation left halfway: run `pagevault key rotate` again with the same keys to finish it"
            );
        }
        let held = self.held(CHECKED_MAX)?;
        let fits = match k.mode {
            // An encrypted repository holds nothing else.
            KeyUse::Seal => held.sealed_wal == held.wal && held.sealed_sets == held.sets,
            // A signed one holds no sealed WAL, and something an encrypted one never
            // does (WAL or a set that is not sealed).
            KeyUse::Sign => held.sealed_wal == 0 && (held.wal > 0 || held.sealed_sets < held.sets),
        };
        if !fits {
            bail!(
                "'{what}' is not authenticated, and says the repository is {}, but of what it holds {} of {} WAL files and {} of {} sets are encrypted: it may be forged; check it, then authenticate it with `pagevault key rotate --repo {} --old-key-file K --new-key-file K` (the same key)",
                k.mode.verb(),
                held.sealed_wal,
                held.wal,
                held.sealed_sets,
                held.sets,
                self.describe()
            );
        }
        if m.immutable.is_some() {
            bail!("'{what}' is not authenticated, and an immutable repository's marker is tagged when it is made: it is forged");
        }
        self.rewrite_marker(m, k, master)
    }

    /// Rewrites marker `m` (of key `k`, no rotation under way) tagged by `master` with
    /// a new repository id, by a compare and swap; returns the id now recorded.
    fn rewrite_marker(&self, m: &Marker, k: &RepoKey, master: &Master) -> Result<Option<String>> {
        let id = new_repo_id();
        let text = k.marker_tagged(&id, None, master);
        if self.store.replace_if(MARKER, &m.text, text.as_bytes())? {
            return Ok(Some(id));
        }
        // Another write with the key got there first.
        let now = self.read_marker()?;
        match (&now.key, &now.tag) {
            (Some(theirs), Some(_)) if theirs == k => self.authenticate(&now, k, master, false),
            _ => bail!(
                "repository '{}': its marker changed while this write authenticated it: run it again",
                self.describe()
            ),
        }
    }

    /// The repository's id, from its marker (None: plain, or keyed before ids).
    pub fn id(&self) -> Option<String> {
        self.id.lock().unwrap().clone()
    }

    /// An encrypted or signed repository's master key, when one was given (checked to
    /// be the repository's): what tags and checks its drill records.
    pub fn record_master(&self) -> Result<Option<Master>> {
        match (self.protection(), &self.options.key) {
            (Some(k), Some(source)) => self.check_key(&k, source).map(Some),
            _ => Ok(None),
        }
    }

    /// The master key `source` gives for the repository's key `k`, which it must be.
    fn check_key(&self, k: &RepoKey, source: &KeySource) -> Result<Master> {
        let master = source
            .master(&k.kdf)
            .map_err(|e| anyhow!("repository '{}': {e}", self.describe()))?;
        if master.id != k.key_id {
            bail!(
                "repository '{}' is {} with key id {}, and {} gives key id {}: wrong key or passphrase",
                self.describe(),
                k.mode.verb(),
                show_id(&k.key_id),
                source.origin(),
                show_id(&master.id)
            );
        }
        Ok(master)
    }

    /// The repository's encryption, when it is encrypted.
    pub fn encryption(&self) -> Option<RepoKey> {
        self.protection().filter(|k| k.mode == KeyUse::Seal)
    }

    /// The repository's signing key, when it is signed.
    pub fn signing(&self) -> Option<RepoKey> {
        self.protection().filter(|k| k.mode == KeyUse::Sign)
    }

    /// The repository's key, encrypted or signed.
    pub fn protection(&self) -> Option<RepoKey> {
        *self.key.lock().unwrap()
    }

    /// Refuses a plain write (a backup or push without a key) into an encrypted
    /// repository, and an unsigned backup into a signed one.
    pub fn refuse_plain(&self) -> Result<()> {
        match self.protection() {
            Some(k) if k.mode == KeyUse::Seal => bail!(
                "repository '{}' is encrypted (key id {}): plain backups and WAL are refused; {GIVE_KEY}",
                self.describe(),
                show_id(&k.key_id)
            ),
            Some(k) => bail!(
                "repository '{}' is signed (key id {}): unsigned backups are refused; {GIVE_KEY} (the backup is then signed)",
                self.describe(),
                show_id(&k.key_id)
            ),
            None => Ok(()),
        }
    }

    /// The key a write with `source` uses: the repository's (its key checked). A plain
    /// repository becomes encrypted by its first write with a key (`asked` Seal), if it
    /// holds no set and no WAL yet (an encrypted repository holds nothing
    /// unauthenticated); signed by its first signed write (`asked` Sign), whatever it
    /// holds: the sets from before are refused from then on, as `verify --repo` says.
    pub fn key_for(&self, source: &KeySource, asked: KeyUse) -> Result<RepoKey> {
        if let Some(k) = self.protection() {
            self.check_key(&k, source)?;
            return Ok(k);
        }
        // Plain when opened: another keyed writer may have keyed it since (and written
        // under its key), so the marker is read again before anything is decided.
        let now = self.read_marker()?;
        if let Some(theirs) = now.key {
            return self.adopt(&now, theirs, source);
        }
        if self.immutable.is_some() {
            bail!(
                "repository '{}' is immutable and neither encrypted nor signed: its marker is never rewritten, so it takes no key; make a keyed one with `pagevault init --immutable` and the key, or run without a key",
                self.describe()
            );
        }
        if asked == KeyUse::Seal {
            let (sets, wal) = (self.catalog()?.len(), self.wal_files()?);
            if sets + wal > 0 {
                bail!(
                    "repository '{}' is not encrypted and holds {sets} sets and {wal} WAL files: encryption starts with a new repository (or run without a key)",
                    self.describe()
                );
            }
        }
        let kdf = source.new_kdf();
        let master = source
            .master(&kdf)
            .map_err(|e| anyhow!("{}: {e}", source.origin()))?;
        let k = RepoKey {
            key_id: master.id,
            kdf,
            mode: asked,
        };
        let id = new_repo_id();
        let mine = k.marker_tagged(&id, None, &master);
        // A compare and swap from the plain marker: two first writers with keys never
        // both win, and the one that loses takes the winner's key, if it is its own.
        let was = self.read_marker()?;
        let won = was.key.is_none() && self.store.replace_if(MARKER, &was.text, mine.as_bytes())?;
        // A plain write that checked the marker before the swap and wrote after it is
        // seen here, or it sees the swap itself (`check_still_plain`) and goes.
        if won && asked == KeyUse::Seal {
            let plain = self.plain_items()?;
            if plain > 0 {
                let _ = (self.store).replace_if(MARKER, mine.as_bytes(), &was.text);
                bail!(
                    "repository '{}' received {plain} sets or WAL files without a key while this write made it encrypted: it stays plain; encryption starts with a new repository (or run without a key)",
                    self.describe()
                );
            }
        }
        if !won {
            let now = self.read_marker()?;
            let Some(theirs) = now.key else {
                bail!(
                    "repository '{}': its marker changed while this write made it {}: run it again",
                    self.describe(),
                    asked.verb()
                );
            };
            return self.adopt(&now, theirs, source);
        }
        *self.key.lock().unwrap() = Some(k);
        *self.id.lock().unwrap() = Some(id);
        Ok(k)
    }

    /// The key another writer gave marker `now` taken, if `source` is it.
    fn adopt(&self, now: &Marker, theirs: RepoKey, source: &KeySource) -> Result<RepoKey> {
        let master = self.check_key(&theirs, source)?;
        let id = self.authenticate(now, &theirs, &master, true)?;
        *self.key.lock().unwrap() = Some(theirs);
        *self.id.lock().unwrap() = id;
        Ok(theirs)
    }

    /// Archived WAL files (`wal/TIMELINE/...`, not `wal/system_identifier`).
    fn wal_files(&self) -> Result<usize> {
        let all = self.store.list("wal")?;
        Ok(all.iter().filter(|(k, _)| k.contains('/')).count())
    }

    /// Sets and archived files stored without encryption (a concurrent writer's with
    /// the same key are sealed, and do not count); one removed meanwhile does not.
    fn plain_items(&self) -> Result<usize> {
        let h = self.held(usize::MAX)?;
        Ok(h.sets - h.sealed_sets + h.wal - h.sealed_wal)
    }

    /// How many of the sets and archived files it holds are encrypted: of at most
    /// `most` of each (the oldest and newest halves).
    fn held(&self, most: usize) -> Result<Held> {
        let ends = |n: usize, i: usize| i < most / 2 || i + most.div_ceil(2) >= n;
        let mut h = Held::default();
        let catalog = self.catalog()?;
        for (i, e) in catalog.iter().enumerate() {
            if !ends(catalog.len(), i) {
                continue;
            }
            let head = match e.stripes.first() {
                Some(st) if !st.contains("://") && !Path::new(st).is_absolute() => {
                    self.store.get_head(st, MEDIA_HEAD)?
                }
                _ => None,
            };
            h.sets += 1;
            h.sealed_sets +=
                usize::from(head.is_some_and(|h| h.len() == MEDIA_HEAD as usize && h[41] != 0));
        }
        let wal: Vec<String> = (self.store.list("wal")?.into_iter())
            .map(|(k, _)| k)
            .filter(|k| k.contains('/'))
            .collect();
        for (i, k) in wal.iter().enumerate() {
            if !ends(wal.len(), i) {
                continue;
            }
            // One removed meanwhile does not count.
            if let Some(head) = self.store.get_head(&format!("wal/{k}"), 8)? {
                h.wal += 1;
                h.sealed_wal += usize::from(wal::sealed_head(&head));
            }
        }
        Ok(h)
    }

    /// After a plain write, whose caller then removes what it wrote on an error: the
    /// repository became encrypted or signed while it ran (a first keyed write raced
    /// it), so it is refused as it would have been a moment later.
    pub fn check_still_plain(&self) -> Result<()> {
        let m = self.read_marker()?;
        if m.key.is_none() {
            return Ok(());
        }
        *self.key.lock().unwrap() = m.key;
        *self.id.lock().unwrap() = m.id;
        match self.refuse_plain() {
            Err(e) => bail!(
                "{e} (it became so while this write ran, and what the write stored was removed)"
            ),
            Ok(()) => Ok(()),
        }
    }

    /// The key archived WAL files are sealed or signed with, and which: None for a
    /// plain repository. A write (`archive-push`) with a key makes an empty repository
    /// encrypted; without one it is refused by an encrypted repository, as a read is.
    /// A signed repository signs every file a push writes and refuses a push without
    /// its key; a read without a key gets None (plain files from before its signing
    /// read as they are, signed ones are refused for want of the key).
    pub fn wal_master(&self, write: bool) -> Result<Option<wal::WalKey>> {
        if let Some(k) = self.signing() {
            let Some(source) = &self.options.key else {
                if write {
                    bail!(
                        "repository '{}' is signed (key id {}): every WAL file archived into it is signed, and this push has no key; {GIVE_KEY}",
                        self.describe(),
                        show_id(&k.key_id)
                    );
                }
                // Without the key no file of it can be told genuine.
                bail!(
                    "repository '{}' is signed (key id {}): its WAL is read only with its key, which checks every file; {GIVE_KEY}",
                    self.describe(),
                    show_id(&k.key_id)
                );
            };
            let master = self.check_key(&k, source)?;
            return Ok(Some(wal::WalKey {
                master,
                env: wal::Envelope::Sign,
            }));
        }
        let kdf = match (&self.options.key, self.encryption()) {
            (Some(source), _) if write => self.key_for(source, KeyUse::Seal)?.kdf,
            (Some(_), Some(k)) => k.kdf,
            (Some(_), None) | (None, None) => return Ok(None),
            (None, Some(_)) if write => return self.refuse_plain().map(|()| None),
            (None, Some(k)) => bail!(
                "repository '{}' is encrypted (key id {}): {GIVE_KEY}",
                self.describe(),
                show_id(&k.key_id)
            ),
        };
        let source = self.options.key.as_ref().expect("a key");
        let master = source
            .master(&kdf)
            .map_err(|e| anyhow!("repository '{}': {e}", self.describe()))?;
        Ok(Some(wal::WalKey {
            master,
            env: wal::Envelope::Seal,
        }))
    }

    /// The key a `key rotate` left half done goes to, as the marker records it.
    pub fn rotating(&self) -> Result<Option<RepoKey>> {
        Ok(self.read_marker()?.rotating)
    }

    /// Checks the marker's tag under `master`, the repository's key (`key rotate`,
    /// which opens the repository without a key).
    pub fn check_marker(&self, master: &Master) -> Result<()> {
        let m = self.read_marker()?;
        let Some(k) = m.key else {
            bail!(
                "repository '{}' is neither encrypted nor signed",
                self.describe()
            );
        };
        if master.id != k.key_id {
            bail!(
                "repository '{}' is {} with key id {}, and the key given has key id {}",
                self.describe(),
                k.mode.verb(),
                show_id(&k.key_id),
                show_id(&master.id)
            );
        }
        match m.tag {
            Some(_) => self.authenticate(&m, &k, master, false).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Records the repository's key (and the key a rotation goes to, while it runs),
    /// the marker authenticated by `master`, that key's. The repository keeps its id
    /// (the marker's as read now: a write may have given it one); a marker without
    /// one gets one.
    pub fn set_key(&self, key: RepoKey, rotating: Option<&RepoKey>, master: &Master) -> Result<()> {
        self.refuse_rewrite("its key cannot be rotated (its marker and key blocks are never rewritten); copy its sets into a new repository to change the key")?;
        let id = (self.read_marker().ok().and_then(|m| m.id))
            .or_else(|| self.id())
            .unwrap_or_else(new_repo_id);
        self.store
            .put(MARKER, key.marker_tagged(&id, rotating, master).as_bytes())?;
        *self.key.lock().unwrap() = Some(key);
        *self.id.lock().unwrap() = Some(id);
        Ok(())
    }
}

#[cfg(test)]
#[path = "marker_tests.rs"]
mod marker_tests;
