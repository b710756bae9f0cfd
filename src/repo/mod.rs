//! A repository: a directory holding backup sets, their catalog (history) and the
//! WAL archive (log backups).
//!
//! ```text
//! REPO/pagevault.repo        marker with the format version
//! REPO/sets/SET_ID/N.pv      stripe N of a set (stripes may also live elsewhere)
//! REPO/catalog/SET_ID.json   one record per committed set (written last, atomically)
//! REPO/wal/TIMELINE/SEGMENT  archived WAL segments (see wal.rs)
//! REPO/locks/retention.json  held by expire and merge while they run (lock.rs)
//! ```

pub mod chain;
mod immutable;
mod lock;
pub mod many;
mod marker;
mod pin;
pub mod store;
pub mod wal;
pub mod walchain;

use crate::format::manifest::{BackupType, SourceKind};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::device::object::{Location, StoreOptions};
pub use immutable::Lock;
pub use lock::RepoLock;
use marker::MARKER_HEAD;
pub use marker::{is_repo_id, RepoKey, RETAIN_MAX};
pub use store::{create_dir, inherit_owner};
use store::{DirStore, ObjectStore, Store};

const MARKER: &str = "pagevault.repo";
/// A catalog record is a few KiB; refuse anything absurd.
const RECORD_MAX: u64 = 16 << 20;

/// One backup set as the catalog remembers it (msdb's backupset).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CatalogEntry {
    pub set_id: String,
    pub name: Option<String>,
    pub backup_type: BackupType,
    pub copy_only: bool,
    pub damaged: bool,
    /// The full set a diff is based on.
    pub base_set: Option<String>,
    pub source_kind: SourceKind,
    pub database: String,
    pub system_identifier: Option<String>,
    pub timeline: Option<u32>,
    pub start_lsn: Option<String>,
    pub stop_lsn: Option<String>,
    /// First WAL segment needed to make the set consistent, and the last.
    pub start_wal: Option<String>,
    pub stop_wal: Option<String>,
    pub started: String,
    pub finished: String,
    pub seconds: f64,
    /// Bytes read from the source (sets recorded before it was: None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub codec: String,
    /// Stripe locations in stripe order (relative to the repository when inside it).
    pub stripes: Vec<String>,
    /// The version id a versioned store gave each stripe, in stripe order: every read
    /// asks for exactly it, so an object put over a stripe later is not what restores.
    /// Empty for sets recorded before (or on stores without versions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripe_versions: Vec<Option<String>>,
    /// The version id of the base set's record as this backup read it: a base record
    /// put over later is read at this version (repo/pin.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_version: Option<String>,
    /// The version of the change-tracking rules that chose the set's pages
    /// ([`crate::pg::walsummary::RULES`]); for a merged full, the oldest of its chain's.
    /// None: recorded before it was (see [`CatalogEntry::vm_may_be_stale`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_rules: Option<u32>,
}

/// What history, status, verify and restore say of a set whose visibility maps may be
/// stale.
pub const STALE_VM: &str = "visibility map may be stale: take a new full backup";

impl CatalogEntry {
    /// Whether a restore of this set may hold visibility-map pages older than its WAL
    /// made them: a PostgreSQL differential or incremental whose pages were chosen by
    /// change-tracking rules before 2, or a full merged from such a chain. Records
    /// written before the rules were recorded count as rules 1 when they are a
    /// differential, an incremental or a merge.
    pub fn vm_may_be_stale(&self) -> bool {
        if self.source_kind != SourceKind::Postgres {
            return false;
        }
        match self.change_rules {
            Some(r) => r < crate::pg::walsummary::RULES,
            None => {
                self.backup_type != BackupType::Full
                    || self
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(MERGE_NAME))
            }
        }
    }

    /// The change rules this set counts as (rules 1 for an old record that may be stale).
    pub fn rules(&self) -> u32 {
        match (self.change_rules, self.vm_may_be_stale()) {
            (Some(r), _) => r,
            (None, true) => 1,
            (None, false) => crate::pg::walsummary::RULES,
        }
    }
}

/// How a merged full's name starts.
pub const MERGE_NAME: &str = "merge of ";

pub struct Repo {
    store: Box<dyn Store>,
    /// The object-store options it was opened with: stripes outside it open with them.
    options: StoreOptions,
    /// An encrypted or signed repository's key id and derivation, from its marker.
    key: std::sync::Mutex<Option<RepoKey>>,
    /// A keyed repository's id, from its marker: every set written into it records
    /// it, and a set recording another is refused.
    id: std::sync::Mutex<Option<String>>,
    /// An immutable repository's retention in seconds, from its marker: nothing in it
    /// is overwritten, and expire removes nothing younger.
    immutable: Option<u64>,
    /// The records' versions and what pinning found (pin.rs).
    pins: pin::Pins,
    /// The system identifier of the cluster whose WAL it archives, once read: it never
    /// changes once written, so a pusher reads it once.
    sysid: std::sync::OnceLock<u64>,
}

/// Writes `bytes` to `path` so that it is either absent or complete and durable. The
/// temp file is created new under a unique name (never through a planted link); a link
/// at `path` itself is replaced, not followed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let (tmp, mut f) = store::temp_beside(dir, &name)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
    inherit_owner(&tmp.path);
    fs::rename(&tmp.path, path)
        .with_context(|| format!("cannot rename '{}'", tmp.path.display()))?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A new repository in a temporary directory, for unit tests.
#[cfg(test)]
pub(crate) fn temp_repo() -> (tempfile::TempDir, Repo) {
    let d = tempfile::tempdir().unwrap();
    let r = Repo::open(
        d.path().join("r").to_str().unwrap(),
        true,
        &Default::default(),
    );
    (d, r.unwrap())
}

/// How a repository is opened: to read, to write into one that exists, or to write
/// making it when missing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Opening {
    Read,
    Write,
    Create,
}

/// Why `at` cannot be opened the way `how` asks: it holds no marker.
fn not_made(at: &str, how: Opening) -> String {
    match how {
        Opening::Write => format!(
            "'{at}' is not a pagevault repository (no {MARKER}), and nothing was written there: a repository is made on purpose only. If it lives on a share, check that it is mounted; if it is new, make it with `pagevault init --repo {at}` (with the key options the stanza uses)"
        ),
        _ => format!(
            "'{at}' is not a pagevault repository (no {MARKER}): check the path (and that its share is mounted), or make one with `pagevault init --repo {at}` or a first backup"
        ),
    }
}

impl Repo {
    /// The archived WAL's system identifier once read or recorded (wal.rs).
    pub(crate) fn known_sysid(&self) -> &std::sync::OnceLock<u64> {
        &self.sysid
    }

    /// Opens a repository, creating it when `create` and it does not exist yet.
    pub fn open(spec: &str, create: bool, options: &StoreOptions) -> Result<Repo> {
        let how = match create {
            true => Opening::Create,
            false => Opening::Read,
        };
        Self::open_as(spec, how, options)
    }

    /// Opens a repository to write into it, never making one: WAL lands only in a
    /// repository made on purpose (`init`, a backup), never in a directory left where
    /// a share is not mounted.
    pub fn open_made(spec: &str, options: &StoreOptions) -> Result<Repo> {
        Self::open_as(spec, Opening::Write, options)
    }

    /// Refuses a repository directory without its marker, as [`Repo::open_made`] would,
    /// without opening it (one stat): what an async push checks before it spools. An
    /// object store's repository is checked by the pusher.
    pub fn refuse_unmade_dir(spec: &str) -> Result<()> {
        if spec.contains("://") {
            return Ok(());
        }
        let root = Path::new(spec);
        // Only a marker known to be absent: one this user cannot look at (a directory
        // closed to it for now) is the pusher's to report while the spool holds on.
        match fs::symlink_metadata(root.join(MARKER)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{}", not_made(&root.display().to_string(), Opening::Write))
            }
            Ok(m) if !m.is_file() => {
                bail!("{}", not_made(&root.display().to_string(), Opening::Write))
            }
            _ => Ok(()),
        }
    }

    fn open_as(spec: &str, how: Opening, options: &StoreOptions) -> Result<Repo> {
        let create = how == Opening::Create;
        if let Some(loc) = crate::device::object::parse(spec, options)? {
            return Self::open_object(loc, how, options);
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            bail!("repository '{spec}': the {scheme}:// scheme is not supported; use a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX");
        }
        let root = PathBuf::from(spec);
        let marker = root.join(MARKER);
        if !marker.exists() {
            if !create {
                bail!("{}", not_made(&root.display().to_string(), how));
            }
            // Another process (archive-push) may be creating the same repository.
            // (The marker is written through `.MARKER.*.tmp`, then linked: DirStore::put_new.)
            let foreign = |n: &std::ffi::OsStr| {
                let ours = |n: &str| {
                    ["sets", "catalog", "wal"].contains(&n)
                        || n.starts_with(MARKER)
                        || n.strip_prefix('.').is_some_and(|t| t.starts_with(MARKER))
                };
                !n.to_str().is_some_and(ours)
            };
            if root.exists()
                && fs::read_dir(&root)?
                    .filter_map(|e| e.ok())
                    .any(|e| foreign(&e.file_name()))
            {
                bail!("'{}' is not empty and not a pagevault repository: name an empty or new directory", root.display());
            }
            let recorded = fs::read_dir(root.join("catalog"))
                .map(|rd| {
                    (rd.flatten()).any(|e| e.file_name().to_string_lossy().ends_with(".json"))
                })
                .unwrap_or(false);
            if recorded && !marker.exists() {
                bail!("{}", marker_removed(&root.display().to_string()));
            }
            for d in ["sets", "catalog", "wal"] {
                create_dir(&root.join(d))
                    .with_context(|| format!("cannot create repository '{}'", root.display()))?;
            }
            // Never over a marker a concurrent creator wrote (and perhaps keyed since).
            DirStore::new(root.clone()).put_new(MARKER, MARKER_HEAD.as_bytes())?;
        }
        Repo {
            store: Box::new(DirStore::new(root)),
            options: options.clone(),
            key: Default::default(),
            id: Default::default(),
            immutable: None,
            pins: Default::default(),
            sysid: Default::default(),
        }
        .with_key(how != Opening::Read, None)
    }

    fn open_object(loc: Location, how: Opening, options: &StoreOptions) -> Result<Repo> {
        let marker = loc.join(MARKER);
        // Read at once: one request where a look-up and a read were two.
        let read = marker.get(marker::MARKER_MAX)?;
        if read.is_none() {
            if how != Opening::Create {
                bail!("{}", not_made(&loc.describe(), how));
            }
            let held = loc.list()?;
            let recorded =
                (held.iter()).any(|(k, _)| k.starts_with("catalog/") && k.ends_with(".json"));
            // A concurrent creator writes the marker before any record.
            if recorded && !marker.exists()? {
                bail!("{}", marker_removed(&loc.describe()));
            }
            let foreign = held.into_iter().map(|(k, _)| k).find(|k| {
                !["sets/", "catalog/", "wal/"]
                    .iter()
                    .any(|p| k.starts_with(p))
            });
            if let Some(k) = foreign {
                bail!("'{}' is not empty ('{k}') and not a pagevault repository: name an empty or new prefix", loc.describe());
            }
            // A concurrent creator wrote the same bytes: either way the marker is there.
            marker.put_new(MARKER_HEAD.as_bytes().to_vec())?;
        }
        Repo {
            store: Box::new(ObjectStore::new(loc)),
            options: options.clone(),
            key: Default::default(),
            id: Default::default(),
            immutable: None,
            pins: Default::default(),
            sysid: Default::default(),
        }
        .with_key(how != Opening::Read, read)
    }

    /// The object-store options it was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Where the repository's files live.
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// How the repository is shown to users (never with credentials).
    pub fn describe(&self) -> String {
        self.store.describe("")
    }

    /// The repository as a `--repo` argument for another process (archive-get).
    pub fn spec_for_command(&self) -> String {
        match self.store.local_path("") {
            Some(p) => fs::canonicalize(&p).unwrap_or(p).display().to_string(),
            None => self.store.describe(""),
        }
    }

    /// The device spec of stripe `n` (1-based) of a set kept in the repository;
    /// creates its directory in a local repository.
    pub fn stripe_spec(&self, set_id: &str, n: usize) -> Result<String> {
        self.store.create_dir(&format!("sets/{set_id}"))?;
        Ok(self.store.describe(&format!("sets/{set_id}/{n}.pv")))
    }

    /// Records a committed set. Called only after every stripe is durable.
    pub fn record(&self, e: &CatalogEntry) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(e)?;
        let rel = format!("catalog/{}.json", e.set_id);
        if self.immutable.is_none() {
            return self.store.put(&rel, &bytes);
        }
        // Create-only: a set id is random, so a record there is someone else's.
        if !self.store.put_new(&rel, &bytes)? {
            bail!(
                "catalog record '{}' exists already, and an immutable repository's records are never overwritten",
                self.store.describe(&rel)
            );
        }
        Ok(())
    }

    /// Removes a set's catalog record (first, so a half-removed set is never listed;
    /// in an immutable repository last, once every stripe is gone).
    pub fn unrecord(&self, set_id: &str) -> Result<()> {
        self.store.delete(&format!("catalog/{set_id}.json"))
    }

    /// Whether the catalog records set `set_id` now.
    pub fn recorded(&self, set_id: &str) -> Result<bool> {
        self.store.exists(&format!("catalog/{set_id}.json"))
    }

    /// Every recorded set, oldest first.
    pub fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let mut out = vec![];
        let mut versions = std::collections::HashMap::new();
        for (k, _) in self.store.list("catalog")? {
            if !k.ends_with(".json") || k.contains('/') || k.starts_with('.') {
                continue;
            }
            let rel = format!("catalog/{k}");
            // A record removed meanwhile (expire) is simply not listed.
            if let Some((b, v)) = self.store.get_versioned(&rel, RECORD_MAX, None)? {
                let e = parse_record(&b).map_err(|e| {
                    anyhow!(
                        "catalog record '{}' is damaged or forged: {e}; move it out of the \
                         repository (or put back an intact copy) to use the repository",
                        self.store.describe(&rel)
                    )
                })?;
                if let Some(v) = v {
                    versions.insert(e.set_id.clone(), v);
                }
                out.push(e);
            }
        }
        out.sort_by(|a: &CatalogEntry, b| a.started.cmp(&b.started));
        self.pins.set_read(versions);
        self.pin_bases(&mut out);
        Ok(out)
    }

    /// Resolves a stripe location recorded in the catalog to a device spec.
    pub fn stripe_path(&self, recorded: &str) -> String {
        if recorded.contains("://") || Path::new(recorded).is_absolute() {
            return recorded.to_string();
        }
        self.store.describe(recorded)
    }

    /// Whether a recorded stripe location lies inside the repository: a relative path
    /// of plain names (no `..`), or an absolute path or URL under the repository.
    pub fn inside(&self, recorded: &str) -> bool {
        let rel = match recorded.contains("://") || Path::new(recorded).is_absolute() {
            true => match self.store.relative(recorded) {
                Some(r) => r,
                None => return false,
            },
            false => recorded.to_string(),
        };
        !rel.is_empty()
            && (Path::new(&rel).components()).all(|c| matches!(c, std::path::Component::Normal(_)))
    }

    /// The device specs of a recorded set's stripes, and the version each is pinned to.
    pub fn stripes_of(&self, e: &CatalogEntry) -> (Vec<String>, Vec<Option<String>>) {
        let specs = e.stripes.iter().map(|s| self.stripe_path(s)).collect();
        (specs, e.stripe_versions.clone())
    }

    /// How a stripe spec is recorded: relative when it is inside the repository.
    pub fn relative(&self, spec: &str) -> String {
        self.store
            .relative(spec)
            .unwrap_or_else(|| spec.to_string())
    }

    /// Removes every stripe of a set kept inside the repository.
    /// Only files this repository would have named for the set are removed: a record
    /// is data (possibly forged), and a path in it never leads anywhere else.
    pub fn remove_set_files(&self, e: &CatalogEntry) -> Result<()> {
        if !is_set_id(&e.set_id) {
            bail!(
                "catalog record of set '{}': not a set id (32 hexadecimal digits); nothing removed",
                e.set_id.escape_debug()
            );
        }
        for s in &e.stripes {
            let spec = self.stripe_path(s);
            // Stripes written elsewhere (--to) are the user's to manage.
            if own_stripe(&e.set_id, &self.relative(&spec)) {
                crate::device::parse(&spec, &self.options)?.remove()?;
            }
        }
        self.store.remove_empty_dir(&format!("sets/{}", e.set_id));
        Ok(())
    }
}

/// Why a repository holding records but no marker is not made anew: a new marker would
/// drop what the old one said (its key, immutability).
fn marker_removed(at: &str) -> String {
    format!(
        "'{at}' holds catalog records but no {MARKER}: its marker was removed (in a versioned bucket a delete marker hides it: remove that delete marker); put it back rather than make a new repository over it"
    )
}

/// A catalog record, parsed and checked: what commands rely on in it is checked here,
/// since anyone who can write to the repository can forge one.
pub fn parse_record(b: &[u8]) -> Result<CatalogEntry, String> {
    let e: CatalogEntry = serde_json::from_slice(b).map_err(|e| e.to_string())?;
    e.check()?;
    Ok(e)
}

impl CatalogEntry {
    /// The record's fields against what a backup writes; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        if !is_set_id(&self.set_id) {
            return Err(format!(
                "'set_id' = '{}' is not a set id (32 hexadecimal digits)",
                self.set_id.escape_debug()
            ));
        }
        if let Some(b) = self.base_set.as_deref().filter(|b| !is_set_id(b)) {
            return Err(format!(
                "'base_set' = '{}' is not a set id",
                b.escape_debug()
            ));
        }
        let most = crate::format::STRIPES_MAX as usize;
        if self.stripes.is_empty() || self.stripes.len() > most {
            return Err(format!(
                "'stripes' lists {} stripes, not 1 to {most}",
                self.stripes.len()
            ));
        }
        if self
            .stripes
            .iter()
            .any(|s| s.is_empty() || s.contains('\0'))
        {
            return Err("'stripes' holds an empty name".into());
        }
        if !self.stripe_versions.is_empty() && self.stripe_versions.len() != self.stripes.len() {
            return Err(format!(
                "'stripe_versions' lists {} versions for {} stripes",
                self.stripe_versions.len(),
                self.stripes.len()
            ));
        }
        let valid = crate::device::object::valid_version;
        if let Some(v) = (self.stripe_versions.iter().flatten()).find(|v| !valid(v)) {
            return Err(format!(
                "'stripe_versions' holds '{}', not a version id",
                v.chars().take(64).collect::<String>().escape_default()
            ));
        }
        if let Some(v) = self.base_version.as_deref().filter(|v| !valid(v)) {
            return Err(format!(
                "'base_version' = '{}' is not a version id",
                v.chars().take(64).collect::<String>().escape_default()
            ));
        }
        if self.base_version.is_some() && self.base_set.is_none() {
            return Err("'base_version' is given without a 'base_set'".into());
        }
        if self.timeline == Some(0) {
            return Err("'timeline' is 0, not a timeline".into());
        }
        for (k, v) in [("start_wal", &self.start_wal), ("stop_wal", &self.stop_wal)] {
            let Some(v) = v else { continue };
            if !crate::pg::parse_name(v).is_some_and(|n| n.kind == crate::pg::Kind::Segment) {
                return Err(format!(
                    "'{k}' = '{}' is not a WAL segment name",
                    v.escape_debug()
                ));
            }
        }
        for (k, v) in [("start_lsn", &self.start_lsn), ("stop_lsn", &self.stop_lsn)] {
            if let Some(v) = v.as_deref().filter(|v| crate::pg::parse_lsn(v).is_none()) {
                return Err(format!("'{k}' = '{}' is not an LSN", v.escape_debug()));
            }
        }
        if let Some(s) = self
            .system_identifier
            .as_deref()
            .filter(|s| s.parse::<u64>().is_err())
        {
            return Err(format!(
                "'system_identifier' = '{}' is not a number",
                s.escape_debug()
            ));
        }
        Ok(())
    }
}

/// A set id as backups make them: 32 lowercase hexadecimal digits.
pub fn is_set_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `rel` (a path relative to the repository) is a stripe the repository names
/// for set `id`: exactly `sets/ID/N.pv`.
fn own_stripe(id: &str, rel: &str) -> bool {
    let Some(rest) = rel.strip_prefix("sets/").and_then(|r| r.strip_prefix(id)) else {
        return false;
    };
    let Some(n) = rest.strip_prefix('/').and_then(|r| r.strip_suffix(".pv")) else {
        return false;
    };
    !n.is_empty() && n.len() <= 4 && n.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod own_stripe_tests {
    use super::*;

    #[test]
    fn only_the_paths_a_repository_makes_are_its_stripes() {
        let id = "0123456789abcdef0123456789abcdef";
        assert!(is_set_id(id));
        assert!(own_stripe(id, &format!("sets/{id}/1.pv")));
        assert!(own_stripe(id, &format!("sets/{id}/12.pv")));
        for bad in [
            format!("sets/{id}/../../victim"),
            format!("sets/{id}/1.pv/../../x"),
            format!("sets/{id}x/1.pv"),
            format!("sets/{id}/.pv"),
            "../victim".to_string(),
            format!("/abs/sets/{id}/1.pv"),
        ] {
            assert!(!own_stripe(id, &bad), "{bad}");
        }
        assert!(!is_set_id("../../etc"));
        assert!(!is_set_id("0123456789ABCDEF0123456789ABCDEF"));
    }

    #[test]
    fn a_stripe_is_inside_only_under_the_repository() {
        let (d, r) = temp_repo();
        let root = d.path().join("r");
        let id = "0123456789abcdef0123456789abcdef";
        for ok in [
            format!("sets/{id}/1.pv"),
            format!("sets/{id}/./2.pv"),
            root.join(format!("sets/{id}/1.pv")).display().to_string(),
        ] {
            assert!(r.inside(&ok), "{ok}");
        }
        for out in [
            format!("../b/sets/{id}/1.pv"),
            format!("sets/{id}/../../../b/1.pv"),
            d.path()
                .join(format!("b/sets/{id}/1.pv"))
                .display()
                .to_string(),
            root.join(format!("../b/sets/{id}/1.pv"))
                .display()
                .to_string(),
            format!("s3://bucket/b/sets/{id}/1.pv"),
            format!("file://{}", root.join("x").display()),
            String::new(),
        ] {
            assert!(!r.inside(&out), "{out}");
        }
    }
}
