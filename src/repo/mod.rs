//! A repository: a directory holding backup sets, their catalog (history) and the
//! WAL archive (log backups).
//!
//! ```text
//! REPO/pagevault.repo        marker with the format version
//! REPO/sets/SET_ID/N.pv      stripe N of a set (stripes may also live elsewhere)
//! REPO/catalog/SET_ID.json   one record per committed set (written last, atomically)
//! REPO/wal/TIMELINE/SEGMENT  archived WAL segments (see wal.rs)
//! ```

pub mod wal;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

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

pub struct Repo {
    pub root: PathBuf,
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
        if spec.contains("://") {
            bail!("repository '{spec}': only directory repositories are supported by this build");
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
        Ok(Repo { root })
    }

    pub fn set_dir(&self, set_id: &str) -> PathBuf {
        self.root.join("sets").join(set_id)
    }

    pub fn wal_dir(&self) -> PathBuf {
        self.root.join("wal")
    }

    /// Records a committed set. Called only after every stripe is durable.
    pub fn record(&self, e: &CatalogEntry) -> Result<()> {
        let p = self.root.join("catalog").join(format!("{}.json", e.set_id));
        write_atomic(&p, &serde_json::to_vec_pretty(e)?)
    }

    /// Every recorded set, oldest first.
    pub fn catalog(&self) -> Result<Vec<CatalogEntry>> {
        let mut out = vec![];
        let dir = self.root.join("catalog");
        for e in fs::read_dir(&dir).with_context(|| format!("cannot read '{}'", dir.display()))? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "json") {
                let b = fs::read(&p)?;
                let c: CatalogEntry = serde_json::from_slice(&b)
                    .with_context(|| format!("catalog record '{}' is damaged", p.display()))?;
                out.push(c);
            }
        }
        out.sort_by(|a, b| a.started.cmp(&b.started));
        Ok(out)
    }

    /// Resolves a stripe location recorded in the catalog.
    pub fn stripe_path(&self, recorded: &str) -> PathBuf {
        let p = Path::new(recorded);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.root.join(p)
        }
    }
}
