//! A repository: a directory holding backup sets, their catalog (history) and the
//! WAL archive (log backups).
//!
//! ```text
//! REPO/pagevault.repo        marker with the format version
//! REPO/sets/SET_ID/N.pv      stripe N of a set (stripes may also live elsewhere)
//! REPO/catalog/SET_ID.json   one record per committed set (written last, atomically)
//! REPO/wal/TIMELINE/SEGMENT  archived WAL segments (see wal.rs)
//! ```

pub mod chain;
pub mod wal;
pub mod walchain;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::device::object::Location;

const MARKER: &str = "pagevault.repo";

/// One backup set as the catalog remembers it (msdb's backupset).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CatalogEntry {
    pub set_id: String,
    pub name: Option<String>,
    /// full, diff or log.
    pub backup_type: String,
    pub copy_only: bool,
    pub damaged: bool,
    /// The full set a diff is based on.
    pub base_set: Option<String>,
    pub source_kind: String,
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
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub codec: String,
    /// Stripe locations in stripe order (relative to the repository when inside it).
    pub stripes: Vec<String>,
}

/// Where a repository lives: a directory, or a prefix in an object store.
pub enum Root {
    Dir(PathBuf),
    Object(Location),
}

pub struct Repo {
    pub root: Root,
}

/// When root writes into a repository another user owns (the one PostgreSQL's
/// archive_command runs as), what it creates is given to that user.
pub fn inherit_owner(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let Some(parent) = path.parent() else { return };
    if let Ok(m) = fs::metadata(parent) {
        if m.uid() != 0 {
            let _ = std::os::unix::fs::lchown(path, Some(m.uid()), Some(m.gid()));
        }
    }
}

/// Creates a directory (and its parents) owned like the directory above it.
pub fn create_dir(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(p) = path.parent() {
        create_dir(p)?;
    }
    match fs::create_dir(path) {
        Ok(()) => inherit_owner(path),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create '{}'", path.display())),
    }
    Ok(())
}

/// Writes `bytes` to `path` so that it is either absent or complete and durable.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f =
            fs::File::create(&tmp).with_context(|| format!("cannot create '{}'", tmp.display()))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    inherit_owner(&tmp);
    fs::rename(&tmp, path).with_context(|| format!("cannot rename '{}'", tmp.display()))?;
    if let Some(d) = path.parent() {
        if let Ok(d) = fs::File::open(d) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

impl Repo {
    /// Opens a repository, creating it when `create` and it does not exist yet.
    pub fn open(spec: &str, create: bool) -> Result<Repo> {
        if let Some(loc) = crate::device::object::parse(spec)? {
            return Self::open_object(loc, create);
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            bail!("repository '{spec}': the {scheme}:// scheme is not supported; use a directory, s3://BUCKET/PREFIX or azure://CONTAINER/PREFIX");
        }
        let root = PathBuf::from(spec);
        let marker = root.join(MARKER);
        if !marker.exists() {
            if !create {
                bail!("'{}' is not a pagevault repository (no {MARKER}); a backup with --repo creates one", root.display());
            }
            // Another process (archive-push) may be creating the same repository.
            let foreign = |n: &std::ffi::OsStr| {
                !["sets", "catalog", "wal", MARKER]
                    .iter()
                    .any(|k| n.to_str().is_some_and(|n| n == *k || n.starts_with(MARKER)))
            };
            if root.exists()
                && fs::read_dir(&root)?
                    .filter_map(|e| e.ok())
                    .any(|e| foreign(&e.file_name()))
            {
                bail!("'{}' is not empty and not a pagevault repository: name an empty or new directory", root.display());
            }
            for d in ["sets", "catalog", "wal"] {
                create_dir(&root.join(d))
                    .with_context(|| format!("cannot create repository '{}'", root.display()))?;
            }
            write_atomic(&marker, b"pagevault repository 1\n")?;
        }
        Ok(Repo {
            root: Root::Dir(root),
        })
    }

    fn open_object(loc: Location, create: bool) -> Result<Repo> {
        let marker = loc.join(MARKER);
        if !marker.exists()? {
            if !create {
                bail!("'{}' is not a pagevault repository (no {MARKER}); a backup with --repo creates one", loc.describe());
            }
            let foreign = loc.list()?.into_iter().map(|(k, _)| k).find(|k| {
                !["sets/", "catalog/", "wal/"]
                    .iter()
                    .any(|p| k.starts_with(p))
            });
            if let Some(k) = foreign {
                bail!("'{}' is not empty ('{k}') and not a pagevault repository: name an empty or new prefix", loc.describe());
            }
            // A concurrent creator wrote the same bytes: either way the marker is there.
            marker.put_new(b"pagevault repository 1\n".to_vec())?;
        }
        Ok(Repo {
            root: Root::Object(loc),
        })
    }

    /// How the repository is shown to users (never with credentials).
    pub fn describe(&self) -> String {
        match &self.root {
            Root::Dir(p) => p.display().to_string(),
            Root::Object(l) => l.describe(),
        }
    }

    /// The repository as a `--repo` argument for another process (archive-get).
    pub fn spec_for_command(&self) -> String {
        match &self.root {
            Root::Dir(p) => fs::canonicalize(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string(),
            Root::Object(l) => l.describe(),
        }
    }

    /// The object location of `rel` in an object-store repository.
    pub fn object(&self, rel: &str) -> Option<Location> {
        match &self.root {
            Root::Dir(_) => None,
            Root::Object(l) => Some(l.join(rel)),
        }
    }

    /// The device spec of stripe `n` (1-based) of a set kept in the repository;
    /// creates its directory in a local repository.
    pub fn stripe_spec(&self, set_id: &str, n: usize) -> Result<String> {
        let rel = format!("sets/{set_id}/{n}.pv");
        match &self.root {
            Root::Dir(p) => {
                create_dir(&p.join("sets").join(set_id))?;
                Ok(p.join(rel).display().to_string())
            }
            Root::Object(l) => Ok(l.join(&rel).describe()),
        }
    }

    pub fn wal_dir(&self) -> PathBuf {
        match &self.root {
            Root::Dir(p) => p.join("wal"),
            Root::Object(_) => PathBuf::from("wal"),
        }
    }

    /// Records a committed set. Called only after every stripe is durable.
    pub fn record(&self, e: &CatalogEntry) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(e)?;
        let rel = format!("catalog/{}.json", e.set_id);
        match &self.root {
            Root::Dir(p) => write_atomic(&p.join(rel), &bytes),
            Root::Object(l) => l.join(&rel).put(bytes),
        }
    }

    /// Removes a set's catalog record (first, so a half-removed set is never listed).
    pub fn unrecord(&self, set_id: &str) -> Result<()> {
        let rel = format!("catalog/{set_id}.json");
        match &self.root {
            Root::Dir(p) => match fs::remove_file(p.join(&rel)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e).with_context(|| format!("cannot remove '{rel}'")),
            },
            Root::Object(l) => l.join(&rel).delete(),
        }
    }

    /// Every recorded set, oldest first.
    pub fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let mut out = vec![];
        let parse = |b: &[u8], name: &str| -> Result<CatalogEntry> {
            serde_json::from_slice(b).with_context(|| format!("catalog record '{name}' is damaged"))
        };
        match &self.root {
            Root::Dir(root) => {
                let dir = root.join("catalog");
                for e in fs::read_dir(&dir)
                    .with_context(|| format!("cannot read '{}'", dir.display()))?
                {
                    let p = e?.path();
                    if p.extension().is_some_and(|x| x == "json") {
                        out.push(parse(&fs::read(&p)?, &p.display().to_string())?);
                    }
                }
            }
            Root::Object(l) => {
                let cat = l.join("catalog");
                for (k, _) in cat.list()? {
                    if k.ends_with(".json") && !k.contains('/') {
                        let o = cat.join(&k);
                        if let Some(b) = o.get()? {
                            out.push(parse(&b, &o.describe())?);
                        }
                    }
                }
            }
        }
        out.sort_by(|a, b| a.started.cmp(&b.started));
        Ok(out)
    }

    /// Resolves a stripe location recorded in the catalog to a device spec.
    pub fn stripe_path(&self, recorded: &str) -> String {
        if recorded.contains("://") || Path::new(recorded).is_absolute() {
            return recorded.to_string();
        }
        match &self.root {
            Root::Dir(p) => p.join(recorded).display().to_string(),
            Root::Object(l) => l.join(recorded).describe(),
        }
    }

    /// How a stripe spec is recorded: relative when it is inside the repository.
    pub fn relative(&self, spec: &str) -> String {
        match &self.root {
            Root::Dir(p) => Path::new(spec)
                .strip_prefix(p)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| spec.to_string()),
            Root::Object(l) => spec
                .strip_prefix(&format!("{}/", l.describe()))
                .map(str::to_string)
                .unwrap_or_else(|| spec.to_string()),
        }
    }

    /// Removes every stripe of a set kept inside the repository.
    pub fn remove_set_files(&self, e: &CatalogEntry) -> Result<()> {
        for s in &e.stripes {
            let spec = self.stripe_path(s);
            // Stripes written elsewhere (--to) are the user's to manage.
            if self.relative(&spec) != spec {
                crate::device::parse(&spec)?.remove()?;
            }
        }
        if let Root::Dir(p) = &self.root {
            let _ = fs::remove_dir(p.join("sets").join(&e.set_id));
        }
        Ok(())
    }
}
