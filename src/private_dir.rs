//! The one rule for a directory pagevault keeps its own files in (the async spool, the
//! prefetch directory, the pusher's and fetcher's logs and locks): it is opened once and
//! checked, and everything in it is opened relative to that handle, never through a link.
//!
//! - The directory is a real directory (not a link), owned by the effective user or by
//!   root, and writable by no one else (group and others may read it, as PostgreSQL's
//!   group access wants).
//! - Every directory above it is owned by root or the effective user and writable by no
//!   one else, or sticky (as /tmp): no other user can swap it or a parent for their own.
//!   Links above it are resolved once: the directory is then named by its real path.
//! - A file in it is opened with `O_NOFOLLOW` relative to the handle, and used only when
//!   it is a regular file; a file made in it is made new (`O_EXCL`), never through a link.
//!
//! A refusal names the path, its owner and mode, and the fix.

use anyhow::{anyhow, bail, Context, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A checked directory, open.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// A regular file in a [`PrivateDir`], as listed.
#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub len: u64,
    /// Seconds since its last change (0 for one dated in the future).
    pub age_secs: u64,
    /// Its inode and change time (nanoseconds): another file, or this one written or
    /// renamed since, has another pair.
    pub ino: u64,
    pub changed_ns: i128,
}

/// A uid and its user name, for messages.
pub fn owner(uid: u32) -> String {
    match crate::sys::user_by_uid(uid) {
        Some((n, _)) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

fn user_name(uid: u32) -> String {
    crate::sys::user_by_uid(uid).map_or(uid.to_string(), |(n, _)| n)
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Why directory `path` (`what` it is for) with owner `uid` and `mode` may not be used;
/// None when it may.
fn refusal(what: &str, path: &Path, uid: u32, mode: u32) -> Option<String> {
    let me = me();
    if (uid == me || uid == 0) && mode & 0o022 == 0 {
        return None;
    }
    let p = path.display();
    Some(format!(
        "{what} '{p}' is refused: it is owned by {} with mode {:04o}, but must be owned by {} \
         and writable by no one else (another user could plant or swap files in it): \
         chown {} '{p}' && chmod 700 '{p}', or remove it (pagevault makes it)",
        owner(uid),
        mode & 0o7777,
        match me {
            0 => owner(0),
            _ => format!("{} (or root)", owner(me)),
        },
        user_name(me),
    ))
}

/// Each directory above `real` (a real path): owned by root or this user, and writable by
/// no one else unless sticky.
fn check_above(what: &str, real: &Path) -> Result<()> {
    let me = me();
    for a in real.ancestors().skip(1) {
        let st =
            rustix::fs::lstat(a).with_context(|| format!("cannot inspect '{}'", a.display()))?;
        let (uid, mode) = (st.st_uid, st.st_mode);
        let sticky = mode & 0o1000 != 0;
        if (uid != me && uid != 0) || (mode & 0o022 != 0 && !sticky) {
            bail!(
                "{what} '{}' is refused: the directory above it, '{}', is owned by {} with mode \
                 {:04o}: another user could put a directory of their own in its place; put it \
                 under directories only {} can write",
                real.display(),
                a.display(),
                owner(uid),
                mode & 0o7777,
                match me {
                    0 => "root".to_string(),
                    _ => format!("root and {}", owner(me)),
                },
            );
        }
    }
    Ok(())
}

impl PrivateDir {
    /// Opens directory `path` (`what`: "the spool", "prefetch directory", for messages)
    /// and checks it; None when it does not exist.
    pub fn open(path: &Path, what: &str) -> Result<Option<PrivateDir>> {
        let real = match std::fs::canonicalize(path) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling link is refused below; a missing path is None.
                if std::fs::symlink_metadata(path).is_err() {
                    return Ok(None);
                }
                path.to_path_buf()
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot resolve {what} '{}'", path.display()))
            }
        };
        // The real path of a link names its target; the link itself is refused.
        let fd = match rustix::fs::open(path, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let st = rustix::fs::lstat(path)
                    .with_context(|| format!("cannot inspect '{}'", path.display()))?;
                let kind = match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink => "a symbolic link",
                    _ => "not a directory",
                };
                bail!(
                    "{what} '{}' is refused: it is {kind} (owner {}, mode {:04o}); remove it \
                     (pagevault makes the directory)",
                    path.display(),
                    owner(st.st_uid),
                    st.st_mode & 0o7777
                );
            }
            Err(e) => {
                return Err(io::Error::from(e))
                    .with_context(|| format!("cannot open {what} '{}'", path.display()))
            }
        };
        let st = rustix::fs::fstat(&fd)?;
        if let Some(why) = refusal(what, path, st.st_uid, st.st_mode) {
            bail!(why);
        }
        check_above(what, &real)?;
        Ok(Some(PrivateDir { path: real, fd }))
    }

    /// Opens directory `path` only to look at what it holds (`status` of another user's
    /// spool): not a link, but of any owner. Nothing may be written through it.
    pub fn inspect(path: &Path, what: &str) -> Result<Option<PrivateDir>> {
        match rustix::fs::open(path, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(PrivateDir {
                path: path.to_path_buf(),
                fd,
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(io::Error::from(e))
                .with_context(|| format!("cannot open {what} '{}'", path.display())),
        }
    }

    /// Opens `path`, making it (and directories above it) private to this user when it is
    /// not there.
    pub fn make(path: &Path, what: &str) -> Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
        {
            Ok(()) => {}
            // A link or a file in its place: refused by open, with what it is.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create {what} '{}'", path.display()))
            }
        }
        Self::open(path, what)?
            .ok_or_else(|| anyhow!("{what} '{}' was removed as it was made", path.display()))
    }

    /// Subdirectory `name`, checked as its parent; made (0700) when `make` and missing,
    /// else None when missing.
    pub fn sub(&self, name: &str, what: &str, make: bool) -> Result<Option<PrivateDir>> {
        let path = self.path.join(name);
        if make {
            match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => {
                    return Err(io::Error::from(e))
                        .with_context(|| format!("cannot create {what} '{}'", path.display()))
                }
            }
        }
        let fd = match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => bail!(
                "{what} '{}' is refused: it is a symbolic link or not a directory; remove it \
                 (pagevault makes the directory)",
                path.display()
            ),
            Err(e) => {
                return Err(io::Error::from(e))
                    .with_context(|| format!("cannot open {what} '{}'", path.display()))
            }
        };
        let st = rustix::fs::fstat(&fd)?;
        if let Some(why) = refusal(what, &path, st.st_uid, st.st_mode) {
            bail!(why);
        }
        Ok(Some(PrivateDir { path, fd }))
    }

    /// Its real path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in it, for messages and for calls that take a path.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Opens `name` to read: a regular file, not through a link, without waiting on a
    /// FIFO. NotFound stays NotFound.
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(|e| match e {
            Errno::LOOP => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{}' is a symbolic link", self.join(name).display()),
            ),
            e => e.into(),
        })?;
        regular(&fd, &self.join(name))?;
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)?;
        Ok(fd.into())
    }

    /// The first `max` bytes of `name`; None when it is missing or not a regular file.
    pub fn read(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        let mut b = vec![];
        self.open_read(name)
            .ok()?
            .take(max)
            .read_to_end(&mut b)
            .ok()?;
        Some(b)
    }

    /// Makes `name` new (never over a file, never through a link), mode 0600 under the
    /// umask.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))?.into())
    }

    /// Puts `bytes` in `name` whole: a new temp file renamed over it (unsynced).
    pub fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let tmp = format!(".{name}.{}.tmp", std::process::id());
        let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        let r = self
            .create_new(&tmp)
            .and_then(|mut f| f.write_all(bytes))
            .and_then(|()| Ok(rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?));
        if r.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        r
    }

    /// Opens log `name` to append (made when missing), a regular file only; emptied first
    /// when past `max` bytes.
    pub fn append(&self, name: &str, max: u64) -> io::Result<File> {
        if let Ok(st) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            if st.st_size as u64 > max || FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                self.remove(name)?;
            }
        }
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::APPEND
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))?;
        regular(&fd, &self.join(name))?;
        Ok(fd.into())
    }

    /// Takes lock `name` (flock, made when missing) without waiting: None when another
    /// process holds it.
    pub fn lock(&self, name: &str) -> io::Result<Option<File>> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))?;
        regular(&fd, &self.join(name))?;
        let f = File::from(fd);
        Ok(crate::sys::try_lock(&f)?.then_some(f))
    }

    /// Removes `name` (a link is removed, never followed); a missing one is fine.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Renames `from` to `to`, both in this directory.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Whether `name` is a regular file here (a link is not).
    pub fn has_file(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    }

    /// Whether anything is named `name` here (a link too).
    pub fn has(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// The regular files in it (links, directories and the rest skipped), unsorted.
    pub fn files(&self) -> io::Result<Vec<Entry>> {
        let dup = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())?;
        let dir = rustix::fs::Dir::new(dup)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut out = vec![];
        for e in dir {
            let e = e?;
            let Ok(name) = e.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            if let Some(e) = self.entry_at(name, now) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Regular file `name` as [`PrivateDir::files`] lists it; None when it is not one.
    pub fn entry(&self, name: &str) -> Option<Entry> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.entry_at(name, now)
    }

    fn entry_at(&self, name: &str, now: i64) -> Option<Entry> {
        let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return None;
        }
        Some(Entry {
            name: name.to_string(),
            len: st.st_size as u64,
            age_secs: (now - st.st_mtime).max(0) as u64,
            ino: st.st_ino,
            changed_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
        })
    }

    /// Whether it holds nothing at all.
    pub fn is_empty(&self) -> io::Result<bool> {
        let dup = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())?;
        for e in rustix::fs::Dir::new(dup)? {
            let name = e?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Syncs the directory (its entries durable).
    pub fn sync(&self) -> io::Result<()> {
        Ok(rustix::fs::fsync(&self.fd)?)
    }
}

/// `fd` (opened as `path`) is a regular file, or InvalidInput naming what it is.
fn regular(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let kind = FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode);
    if kind == FileType::RegularFile {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("'{}' is not a regular file ({kind:?})", path.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_directory_others_could_write_or_swap_is_refused_naming_owner_mode_and_fix() {
        let d = tempfile::tempdir().unwrap();
        let ok = PrivateDir::make(&d.path().join("a/b"), "the spool").unwrap();
        assert_eq!(
            std::fs::metadata(ok.path()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // Writable by others.
        let wide = d.path().join("wide");
        std::fs::create_dir(&wide).unwrap();
        chmod(&wide, 0o777);
        let e = format!("{:#}", PrivateDir::open(&wide, "the spool").unwrap_err());
        assert!(
            e.contains("with mode 0777") && e.contains("chmod 700"),
            "{e}"
        );
        // Owned by another user (as root, a uid of no one; as another user, root's
        // directories are fine, so only root can run this half).
        if crate::sys::is_root() {
            let theirs = d.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            chmod(&theirs, 0o700);
            std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
            let e = format!("{:#}", PrivateDir::open(&theirs, "the spool").unwrap_err());
            assert!(
                e.contains("uid 4242 with mode 0700") && e.contains("chown"),
                "{e}"
            );
            // Inside a directory another user owns: refused, naming that directory.
            let under = theirs.join("spool");
            std::fs::create_dir(&under).unwrap();
            chmod(&under, 0o700);
            let e = format!("{:#}", PrivateDir::open(&under, "the spool").unwrap_err());
            assert!(
                e.contains("the directory above it") && e.contains("uid 4242"),
                "{e}"
            );
        }
        // Inside a directory others can write (not sticky): refused; sticky: fine.
        let open = d.path().join("open");
        std::fs::create_dir_all(open.join("spool")).unwrap();
        chmod(&open.join("spool"), 0o700);
        chmod(&open, 0o777);
        let e = format!(
            "{:#}",
            PrivateDir::open(&open.join("spool"), "the spool").unwrap_err()
        );
        assert!(e.contains("the directory above it"), "{e}");
        chmod(&open, 0o1777);
        PrivateDir::open(&open.join("spool"), "the spool")
            .unwrap()
            .unwrap();
        // A link: refused, even to a good directory; a missing path is None.
        let link = d.path().join("link");
        symlink(ok.path(), &link).unwrap();
        let e = format!("{:#}", PrivateDir::open(&link, "the spool").unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        let e = format!("{:#}", PrivateDir::make(&link, "the spool").unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        assert!(PrivateDir::open(&d.path().join("none"), "x")
            .unwrap()
            .is_none());
        // A subdirectory that is a link is refused too.
        symlink(d.path(), ok.join("ready")).unwrap();
        let e = format!(
            "{:#}",
            ok.sub("ready", "the spool's ready/", true).unwrap_err()
        );
        assert!(e.contains("symbolic link"), "{e}");
    }

    #[test]
    fn files_inside_are_never_reached_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let dir = PrivateDir::make(&d.path().join("p"), "x").unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        symlink(&victim, dir.join("log")).unwrap();
        symlink(&victim, dir.join("state")).unwrap();
        symlink(&victim, dir.join("lock")).unwrap();
        // A log planted as a link is replaced by a file, the target untouched.
        use std::io::Write;
        dir.append("log", 1 << 20)
            .unwrap()
            .write_all(b"line\n")
            .unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(dir.join("log")).unwrap(), b"line\n");
        assert!(dir.read("state", 100).is_none());
        assert!(dir.lock("lock").is_err());
        dir.replace("state", b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(dir.read("state", 100).unwrap(), b"new");
        // Listing: regular files only.
        symlink(&victim, dir.join("000000010000000000000001")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        let mut names: Vec<String> = dir.files().unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, ["log", "state"]);
        assert!(!dir.has_file("000000010000000000000001") && dir.has("000000010000000000000001"));
        // A FIFO is refused at once, not waited on.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(dir.open_read("fifo").is_err());
        assert!(dir.append("fifo", 1 << 20).is_err());
    }
}
