//! Where a repository's files live: a local directory or a prefix in an object store.
//! Names are relative to the repository root and use '/' (`catalog/ID.json`,
//! `wal/00000001/NAME.zst`); the catalog, retention and the WAL archive are written once
//! over this trait.

use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::device::object::Location;

pub trait Store: Send + Sync {
    /// How a user sees `rel` ("" for the root): a path or an s3://... URL, never
    /// credentials.
    fn describe(&self, rel: &str) -> String;

    /// `rel` of a spec that points inside the repository (as `describe` gives it).
    fn relative(&self, spec: &str) -> Option<String>;

    /// The local path of `rel`, for a local repository only.
    fn local_path(&self, rel: &str) -> Option<PathBuf>;

    /// A whole small object; None when absent. One larger than `max` is refused.
    fn get(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>>;

    /// `get` (of version `version` when given) and the version id the store names
    /// what was read by: None where versions are not kept (and a version asked is an
    /// error there).
    fn get_versioned(
        &self,
        rel: &str,
        max: u64,
        version: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>> {
        if let Some(v) = version {
            bail!(
                "'{}' keeps no versions (version {v} asked)",
                self.describe(rel)
            );
        }
        Ok(self.get(rel, max)?.map(|b| (b, None)))
    }

    /// The first `n` bytes of `rel` (fewer if it is shorter); None when absent.
    fn get_head(&self, rel: &str, n: u64) -> Result<Option<Vec<u8>>>;

    /// Creates or replaces `rel`: absent or complete, and durable when it returns.
    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()>;

    /// Replaces `rel` with `bytes` only while it holds `expected` (a compare and swap
    /// among the writers that use it). Local: under an exclusive lock on `.NAME.lock`
    /// beside it; objects: a PUT conditional on the version read. Ok(false) when it
    /// holds something else, or nothing: another writer came first.
    fn replace_if(&self, rel: &str, expected: &[u8], bytes: &[u8]) -> Result<bool>;

    /// Rewrites the first `n` bytes of `rel` (fewer if it is shorter) as `patch` makes
    /// them, in place (`patch` may not change their length); `patch` returns false to
    /// leave `rel` as it is, and so does this. Local: in
    /// place, fsynced. Objects: the object written anew, its other bytes copied within
    /// the store through this host (an object store has no write in place); the old
    /// object stays whole until the new one is. An error when `rel` is absent.
    fn patch_head(&self, rel: &str, n: u64, patch: &mut Patch) -> Result<bool>;

    /// Creates `rel` only if absent, durably; Ok(false) when it exists (never
    /// overwritten).
    fn put_new(&self, rel: &str, bytes: &[u8]) -> Result<bool>;

    /// Whether `rel` exists (as a file).
    fn exists(&self, rel: &str) -> Result<bool>;

    /// Removes `rel`; absent is fine.
    fn delete(&self, rel: &str) -> Result<()>;

    /// Every object under `prefix` (recursively): name relative to `prefix`, size.
    /// A missing prefix holds nothing.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>>;

    /// When `rel` was last written; None when it does not exist.
    fn modified(&self, rel: &str) -> Result<Option<std::time::SystemTime>>;

    /// Makes a directory ready to hold objects (local: created, owned like its
    /// parent; objects: nothing to do).
    fn create_dir(&self, rel: &str) -> Result<()>;

    /// Removes a directory if empty (local only; a prefix vanishes with its objects).
    fn remove_empty_dir(&self, rel: &str);

    // Large files (the WAL archive) go through local files.

    /// Where to write the temp file that `put_new_file` or `put_file` will make `rel`:
    /// local, its final directory (so it becomes `rel` by a link, never a copy);
    /// objects, the system's temp directory.
    fn stage_dir(&self, rel: &str) -> Result<PathBuf>;

    /// Makes the durable file `tmp` (in `stage_dir(rel)`) `rel` only if `rel` is absent;
    /// Ok(false) when it exists. `tmp` is left for the caller to remove.
    fn put_new_file(&self, rel: &str, tmp: &Path) -> Result<bool>;

    /// Makes the durable file `tmp` (in `stage_dir(rel)`) `rel`, replacing it.
    fn put_file(&self, rel: &str, tmp: &Path) -> Result<()>;

    /// A local file holding `rel`'s bytes, to read: local, `rel` itself; objects, a
    /// download into a temp file in `dir`, removed when dropped. None only when `rel`
    /// is absent: any other failure is an error, and so is an object over `max` bytes
    /// (refused before or while it is read).
    fn fetch_to(&self, rel: &str, dir: &Path, max: u64) -> Result<Option<Local>>;
}

/// What `Store::patch_head` applies to an object's head: true when it changed it.
pub type Patch<'a> = dyn FnMut(&mut Vec<u8>) -> Result<bool> + 'a;

/// A local file holding an object's bytes (see `Store::fetch_to`).
pub struct Local {
    pub path: PathBuf,
    _temp: Option<Temp>,
}

/// A temp file removed when dropped (after a successful link its name is redundant;
/// after an error it is garbage).
pub struct Temp {
    pub path: PathBuf,
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Creates a hidden temp file in `dir` for `name`: `.NAME.PID.N.tmp`.
pub fn temp_beside(dir: &Path, name: &str) -> Result<(Temp, File)> {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let p = dir.join(format!(
        ".{name}.{}.{nanos}{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .with_context(|| format!("cannot create '{}'", p.display()))?;
    Ok((Temp { path: p }, f))
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync directory '{}'", dir.display()))
}

/// Makes `tmp` visible as `fin` only if `fin` does not exist. Ok(false) when it does.
fn link_new(tmp: &Path, fin: &Path) -> Result<bool> {
    match fs::hard_link(tmp, fin) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        // A file system without hard links: rename, after checking the name is free.
        Err(_) if !fin.exists() => {
            fs::rename(tmp, fin).with_context(|| format!("cannot create '{}'", fin.display()))?;
            Ok(true)
        }
        Err(_) => Ok(false),
    }
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
    // "" is the parent of a relative path's first component: the working directory.
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(p) = path.parent() {
        create_dir(p)?;
    }
    match fs::create_dir(path) {
        Ok(()) => inherit_owner(path),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create '{}'", path.display())),
    }
    Ok(())
}

/// A repository in a local directory.
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    pub fn new(root: PathBuf) -> DirStore {
        DirStore { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        // An empty `rel` is the root itself (join would add a trailing slash).
        match rel {
            "" => self.root.clone(),
            _ => self.root.join(rel),
        }
    }

    /// Writes `bytes` to a durable hidden temp file beside `rel`'s final name.
    fn write_temp(&self, rel: &str, bytes: &[u8]) -> Result<(Temp, PathBuf)> {
        let fin = self.path(rel);
        let dir = self.stage_dir(rel)?;
        let name = fin.file_name().unwrap_or_default().to_string_lossy();
        let (tmp, mut f) = temp_beside(&dir, &name)?;
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
        inherit_owner(&tmp.path);
        Ok((tmp, fin))
    }
}

fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl Store for DirStore {
    fn describe(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    fn replace_if(&self, rel: &str, expected: &[u8], bytes: &[u8]) -> Result<bool> {
        use std::os::unix::fs::OpenOptionsExt;
        let fin = self.path(rel);
        let name = fin.file_name().unwrap_or_default().to_string_lossy();
        let lock = parent(&fin).join(format!(".{name}.lock"));
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(crate::sys::O_NOFOLLOW)
            .open(&lock)
            .with_context(|| format!("cannot open the lock file '{}'", lock.display()))?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("cannot lock '{}'", lock.display()))?;
        if self.get(rel, 1 << 16)?.as_deref() != Some(expected) {
            return Ok(false);
        }
        self.put(rel, bytes)?;
        Ok(true)
    }

    fn patch_head(&self, rel: &str, n: u64, patch: &mut Patch) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let p = self.path(rel);
        let f = crate::sys::open_regular_rw(&p)
            .with_context(|| format!("cannot open '{}' to rewrite its head", p.display()))?;
        let mut b = Vec::with_capacity(n.min(1 << 20) as usize);
        (&f).take(n)
            .read_to_end(&mut b)
            .with_context(|| format!("cannot read '{}'", p.display()))?;
        let len = b.len();
        if !patch(&mut b)? {
            return Ok(false);
        }
        if b.len() != len {
            bail!(
                "a patch changed the length of the head of '{}'",
                p.display()
            );
        }
        f.write_all_at(&b, 0)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot rewrite the head of '{}'", p.display()))?;
        Ok(true)
    }

    fn relative(&self, spec: &str) -> Option<String> {
        Path::new(spec)
            .strip_prefix(&self.root)
            .ok()
            .map(|r| r.display().to_string())
    }

    fn local_path(&self, rel: &str) -> Option<PathBuf> {
        Some(self.path(rel))
    }

    fn get(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let p = self.path(rel);
        let f = match crate::sys::open_regular(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read '{}'", p.display())),
        };
        let len = f
            .metadata()
            .with_context(|| format!("cannot read '{}'", p.display()))?
            .len();
        if len > max {
            bail!(
                "'{}' is {len} bytes, more than the {max} it may hold",
                p.display()
            );
        }
        let mut b = Vec::with_capacity(len as usize);
        // Bounded even if the file grows meanwhile.
        f.take(max + 1)
            .read_to_end(&mut b)
            .with_context(|| format!("cannot read '{}'", p.display()))?;
        if b.len() as u64 > max {
            bail!("'{}' is more than the {max} bytes it may hold", p.display());
        }
        Ok(Some(b))
    }

    fn get_head(&self, rel: &str, n: u64) -> Result<Option<Vec<u8>>> {
        let p = self.path(rel);
        let f = match crate::sys::open_regular(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read '{}'", p.display())),
        };
        let mut b = Vec::with_capacity(n.min(1 << 20) as usize);
        f.take(n)
            .read_to_end(&mut b)
            .with_context(|| format!("cannot read '{}'", p.display()))?;
        Ok(Some(b))
    }

    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let (tmp, fin) = self.write_temp(rel, bytes)?;
        fs::rename(&tmp.path, &fin)
            .with_context(|| format!("cannot create '{}'", fin.display()))?;
        sync_dir(parent(&fin))
    }

    fn put_new(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        let (tmp, fin) = self.write_temp(rel, bytes)?;
        if !link_new(&tmp.path, &fin)? {
            return Ok(false);
        }
        drop(tmp);
        sync_dir(parent(&fin))?;
        Ok(true)
    }

    fn exists(&self, rel: &str) -> Result<bool> {
        let p = self.path(rel);
        match fs::metadata(&p) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("cannot look up '{}'", p.display())),
        }
    }

    fn modified(&self, rel: &str) -> Result<Option<std::time::SystemTime>> {
        let p = self.path(rel);
        match fs::symlink_metadata(&p) {
            Ok(m) => Ok(m.modified().ok()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot look up '{}'", p.display())),
        }
    }

    fn delete(&self, rel: &str) -> Result<()> {
        let p = self.path(rel);
        match fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot remove '{}'", p.display())),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let dir = self.path(prefix);
        let mut out = vec![];
        for e in walkdir::WalkDir::new(&dir).min_depth(1) {
            let e = match e {
                Ok(e) => e,
                Err(e)
                    if e.depth() == 0
                        && e.io_error().map(|e| e.kind()) == Some(io::ErrorKind::NotFound) =>
                {
                    return Ok(vec![]);
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read '{}'", dir.display()))
                }
            };
            // Temp files (".NAME.PID.N.tmp") are another process's work in progress.
            if !e.file_type().is_file() || e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let size = match e.metadata() {
                Ok(m) => m.len(),
                // Gone since the directory was read (a rename or an expire): not listed.
                Err(err) if err.io_error().map(|e| e.kind()) == Some(io::ErrorKind::NotFound) => {
                    continue
                }
                Err(err) => {
                    return Err(err)
                        .with_context(|| format!("cannot read '{}'", e.path().display()))
                }
            };
            let rel = e.path().strip_prefix(&dir).expect("walked under dir");
            out.push((rel.to_string_lossy().into_owned(), size));
        }
        Ok(out)
    }

    fn create_dir(&self, rel: &str) -> Result<()> {
        create_dir(&self.path(rel))
    }

    fn remove_empty_dir(&self, rel: &str) {
        let _ = fs::remove_dir(self.path(rel));
    }

    fn stage_dir(&self, rel: &str) -> Result<PathBuf> {
        let dir = parent(&self.path(rel)).to_path_buf();
        if !dir.is_dir() {
            create_dir(&dir)?;
            sync_dir(parent(&dir))?;
        }
        Ok(dir)
    }

    fn put_new_file(&self, rel: &str, tmp: &Path) -> Result<bool> {
        let fin = self.path(rel);
        inherit_owner(tmp);
        if !link_new(tmp, &fin)? {
            return Ok(false);
        }
        sync_dir(parent(&fin))?;
        Ok(true)
    }

    fn put_file(&self, rel: &str, tmp: &Path) -> Result<()> {
        let fin = self.path(rel);
        inherit_owner(tmp);
        fs::rename(tmp, &fin).with_context(|| format!("cannot replace '{}'", fin.display()))?;
        sync_dir(parent(&fin))
    }

    fn fetch_to(&self, rel: &str, _dir: &Path, max: u64) -> Result<Option<Local>> {
        let p = self.path(rel);
        // Opened to learn what it is: present but unreadable, or not a regular file, is
        // not absent (archive-get's exit codes rely on it).
        let len = match crate::sys::open_regular(&p).and_then(|f| f.metadata()) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read '{}'", p.display())),
        };
        if len > max {
            bail!(
                "'{}' is {len} bytes, more than the {max} it may hold",
                p.display()
            );
        }
        Ok(Some(Local {
            path: p,
            _temp: None,
        }))
    }
}

/// A repository under a prefix in an object store (S3, Azure).
pub struct ObjectStore {
    loc: Location,
}

impl ObjectStore {
    pub fn new(loc: Location) -> ObjectStore {
        ObjectStore { loc }
    }

    fn at(&self, rel: &str) -> Location {
        if rel.is_empty() {
            self.loc.clone()
        } else {
            self.loc.join(rel)
        }
    }
}

impl Store for ObjectStore {
    fn describe(&self, rel: &str) -> String {
        self.at(rel).describe()
    }

    fn relative(&self, spec: &str) -> Option<String> {
        spec.strip_prefix(&format!("{}/", self.loc.describe()))
            .map(str::to_string)
    }

    fn local_path(&self, _rel: &str) -> Option<PathBuf> {
        None
    }

    fn replace_if(&self, rel: &str, expected: &[u8], bytes: &[u8]) -> Result<bool> {
        self.at(rel).replace_if(expected, bytes.to_vec())
    }

    fn patch_head(&self, rel: &str, n: u64, patch: &mut Patch) -> Result<bool> {
        match self.at(rel).patch_head(n, patch)? {
            Some(done) => Ok(done),
            None => bail!("'{}' does not exist", self.describe(rel)),
        }
    }

    fn get(&self, rel: &str, max: u64) -> Result<Option<Vec<u8>>> {
        self.at(rel).get(max)
    }

    fn get_versioned(
        &self,
        rel: &str,
        max: u64,
        version: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>> {
        self.at(rel).get_versioned(max, version)
    }

    fn get_head(&self, rel: &str, n: u64) -> Result<Option<Vec<u8>>> {
        self.at(rel).get_head(n)
    }

    fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.at(rel).put(bytes.to_vec())
    }

    fn put_new(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        self.at(rel).put_new(bytes.to_vec())
    }

    fn exists(&self, rel: &str) -> Result<bool> {
        self.at(rel).exists()
    }

    fn modified(&self, rel: &str) -> Result<Option<std::time::SystemTime>> {
        self.at(rel).modified()
    }

    fn delete(&self, rel: &str) -> Result<()> {
        self.at(rel).delete()
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.at(prefix).list()
    }

    fn create_dir(&self, _rel: &str) -> Result<()> {
        Ok(())
    }

    fn remove_empty_dir(&self, _rel: &str) {}

    fn stage_dir(&self, _rel: &str) -> Result<PathBuf> {
        Ok(std::env::temp_dir())
    }

    fn put_new_file(&self, rel: &str, tmp: &Path) -> Result<bool> {
        let b = fs::read(tmp).with_context(|| format!("cannot read '{}'", tmp.display()))?;
        self.at(rel).put_new(b)
    }

    fn put_file(&self, rel: &str, tmp: &Path) -> Result<()> {
        let b = fs::read(tmp).with_context(|| format!("cannot read '{}'", tmp.display()))?;
        self.at(rel).put(b)
    }

    fn fetch_to(&self, rel: &str, dir: &Path, max: u64) -> Result<Option<Local>> {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let (tmp, mut f) = temp_beside(dir, &format!("{name}.dl"))?;
        // Streamed to the file, never whole in memory.
        if !self.at(rel).download(&mut f, max)? {
            return Ok(None);
        }
        Ok(Some(Local {
            path: tmp.path.clone(),
            _temp: Some(tmp),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, DirStore) {
        let d = tempfile::tempdir().unwrap();
        let s = DirStore::new(d.path().join("r"));
        (d, s)
    }

    #[test]
    fn a_listing_leaves_out_other_processes_temp_files() {
        let (_d, s) = store();
        fs::create_dir_all(s.path("wal/00000001")).unwrap();
        fs::write(s.path("wal/00000001/A.zst"), b"x").unwrap();
        fs::write(s.path("wal/00000001/.A.sum.77.123.tmp"), b"half").unwrap();
        assert_eq!(s.list("wal").unwrap(), [("00000001/A.zst".to_string(), 1)]);
    }

    #[test]
    fn a_repository_another_process_is_creating_is_not_foreign() {
        let d = tempfile::tempdir().unwrap();
        // archive-push midway through creating it: its marker still a temp file.
        fs::create_dir_all(d.path().join("wal")).unwrap();
        fs::write(d.path().join(".pagevault.repo.77.123.tmp"), b"pagevault").unwrap();
        let spec = d.path().to_str().unwrap();
        crate::repo::Repo::open(spec, true, &Default::default()).unwrap();
        let e = d.path().join("x");
        fs::create_dir(&e).unwrap();
        fs::write(e.join("stranger"), b"x").unwrap();
        let err = crate::repo::Repo::open(e.to_str().unwrap(), true, &Default::default());
        assert!(format!("{:#}", err.err().unwrap()).contains("not empty"));
    }

    #[test]
    fn a_relative_path_s_empty_parent_is_the_working_directory() {
        create_dir(Path::new("")).unwrap();
        let d = tempfile::tempdir().unwrap();
        create_dir(&d.path().join("a/b")).unwrap();
        assert!(d.path().join("a/b").is_dir());
    }

    /// Names in `dir` that are temp files.
    fn temps(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn put_get_replace_and_size_limit() {
        let (_d, s) = store();
        assert_eq!(s.get("catalog/a.json", 100).unwrap(), None);
        s.put("catalog/a.json", b"one").unwrap();
        assert_eq!(s.get("catalog/a.json", 100).unwrap().unwrap(), b"one");
        s.put("catalog/a.json", b"two!").unwrap();
        assert_eq!(s.get("catalog/a.json", 4).unwrap().unwrap(), b"two!");
        let e = format!("{:#}", s.get("catalog/a.json", 3).unwrap_err());
        assert!(e.contains("4 bytes") && e.contains("a.json"), "{e}");
        assert!(s.exists("catalog/a.json").unwrap());
        assert!(!s.exists("catalog").unwrap());
        assert!(temps(&s.root.join("catalog")).is_empty());
    }

    #[test]
    fn put_new_never_overwrites() {
        let (_d, s) = store();
        assert!(s.put_new("wal/system_identifier", b"5\n").unwrap());
        assert!(!s.put_new("wal/system_identifier", b"6\n").unwrap());
        assert_eq!(s.get("wal/system_identifier", 10).unwrap().unwrap(), b"5\n");
        assert!(temps(&s.root.join("wal")).is_empty());
        // A staged file: linked only while the name is free.
        let rel = "wal/00000001/X.zst";
        let dir = s.stage_dir(rel).unwrap();
        assert_eq!(dir, s.root.join("wal/00000001"));
        let (t, mut f) = temp_beside(&dir, "X.zst").unwrap();
        f.write_all(b"first").unwrap();
        assert!(s.put_new_file(rel, &t.path).unwrap());
        let (t2, mut f) = temp_beside(&dir, "X.zst").unwrap();
        f.write_all(b"second").unwrap();
        assert!(!s.put_new_file(rel, &t2.path).unwrap());
        assert_eq!(fs::read(s.root.join(rel)).unwrap(), b"first");
        s.put_file(rel, &t2.path).unwrap();
        assert_eq!(fs::read(s.root.join(rel)).unwrap(), b"second");
        drop((t, t2));
        assert!(temps(&dir).is_empty());
    }

    #[test]
    fn put_new_race_has_one_winner() {
        let (_d, s) = store();
        let s = std::sync::Arc::new(s);
        let hs: Vec<_> = (0..8u8)
            .map(|i| {
                let s = s.clone();
                std::thread::spawn(move || s.put_new("wal/race", &[i; 1000]).unwrap())
            })
            .collect();
        let won: Vec<bool> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(won.iter().filter(|&&w| w).count(), 1);
        let b = s.get("wal/race", 1000).unwrap().unwrap();
        assert!(b.len() == 1000 && b.iter().all(|&x| x == b[0]));
        assert!(temps(&s.root.join("wal")).is_empty());
    }

    #[test]
    fn list_delete_fetch_and_describe() {
        let (_d, s) = store();
        assert!(s.list("wal").unwrap().is_empty());
        s.put("wal/00000001/A.zst", b"aa").unwrap();
        s.put("wal/00000002/B.zst", b"bbb").unwrap();
        s.put("wal/system_identifier", b"5\n").unwrap();
        let mut l = s.list("wal").unwrap();
        l.sort();
        assert_eq!(
            l,
            [
                ("00000001/A.zst".to_string(), 2),
                ("00000002/B.zst".to_string(), 3),
                ("system_identifier".to_string(), 2)
            ]
        );
        assert_eq!(s.list("wal/00000002").unwrap(), [("B.zst".to_string(), 3)]);
        let f = s.fetch_to("wal/00000001/A.zst", Path::new("/nonexistent"), 2);
        assert_eq!(f.unwrap().unwrap().path, s.root.join("wal/00000001/A.zst"));
        let e = s
            .fetch_to("wal/00000001/A.zst", Path::new("."), 1)
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("more than the 1"), "{e:#}");
        assert!(s
            .fetch_to("wal/00000001/Z.zst", Path::new("."), 2)
            .unwrap()
            .is_none());
        s.delete("wal/00000001/A.zst").unwrap();
        s.delete("wal/00000001/A.zst").unwrap();
        assert!(!s.exists("wal/00000001/A.zst").unwrap());
        s.remove_empty_dir("wal/00000001");
        assert!(!s.root.join("wal/00000001").exists());
        s.remove_empty_dir("wal/00000002");
        assert!(s.root.join("wal/00000002").exists());
        let spec = s.describe("sets/x/1.pv");
        assert_eq!(spec, s.root.join("sets/x/1.pv").display().to_string());
        assert_eq!(s.relative(&spec).as_deref(), Some("sets/x/1.pv"));
        assert_eq!(s.relative("/elsewhere/1.pv"), None);
        assert_eq!(s.describe(""), s.root.display().to_string());
    }

    #[test]
    fn unreadable_is_not_absent() {
        // A path through a regular file: an error other than NotFound.
        let (_d, s) = store();
        s.put("wal/f", b"x").unwrap();
        assert!(s.fetch_to("wal/f/g.zst", Path::new("."), 10).is_err());
        assert!(s.get("wal/f/g", 10).is_err());
    }
}
