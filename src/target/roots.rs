//! The directories a restore writes under (the target, each tablespace's location),
//! held open. Every file and directory below them is made and opened relative to these
//! handles with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS):
//! no link, whoever planted it, and no `..` leads out of them. Where the kernel has no
//! openat2 (before Linux 5.6, or a filter refuses it with ENOSYS), paths are opened as
//! they are, the last component with O_NOFOLLOW.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Set once openat2 answered ENOSYS: paths are used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

pub struct Roots {
    list: Vec<(PathBuf, OwnedFd)>,
    /// Parent directories opened by `finish`, by path.
    parents: Mutex<HashMap<PathBuf, std::sync::Arc<OwnedFd>>>,
}

impl Roots {
    /// Opens each of `dirs` (they exist: `prepare` made them). The user named them, so
    /// a link there is followed (a data directory reached through a link restores as it
    /// did); nothing below them is.
    pub fn open(dirs: impl IntoIterator<Item = PathBuf>) -> io::Result<Roots> {
        let mut list = vec![];
        for d in dirs {
            let fd = rustix::fs::open(
                &d,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| named(&d, "cannot open", e.into()))?;
            list.push((d, fd));
        }
        // The longest first: a tablespace inside the target is its own root.
        list.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_os_str().len()));
        Ok(Roots {
            list,
            parents: Mutex::new(HashMap::new()),
        })
    }

    /// Bytes an unprivileged writer may still use on the fullest of their file systems.
    pub fn free_bytes(&self) -> io::Result<u64> {
        let mut least = u64::MAX;
        for (_, fd) in &self.list {
            let st = rustix::fs::fstatvfs(fd)?;
            least = least.min(st.f_bavail.saturating_mul(st.f_frsize));
        }
        Ok(least)
    }

    /// The root `p` lies under, and `p` relative to it (plain names only).
    fn find<'a>(&self, p: &'a Path) -> io::Result<(&OwnedFd, &'a Path)> {
        for (root, fd) in &self.list {
            if let Ok(rel) = p.strip_prefix(root) {
                if rel.components().all(|c| matches!(c, Component::Normal(_))) {
                    return Ok((fd, rel));
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "'{}' is outside the directories this restore writes",
                p.display()
            ),
        ))
    }

    /// Opens file `p` with `flags` (and `mode` when it creates it).
    pub fn open_file(&self, p: &Path, flags: OFlags, mode: u32) -> io::Result<File> {
        let (root, rel) = self.find(p)?;
        beneath(root, rel, p, flags, Mode::from_raw_mode(mode))
            .map(File::from)
            .map_err(io::Error::from)
    }

    /// Makes directory `p` and those above it under its root, each step beneath it.
    pub fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        let (root, rel) = self.find(p)?;
        if NO_OPENAT2.load(Relaxed) {
            return std::fs::create_dir_all(p);
        }
        let dir = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let mut cur: Option<OwnedFd> = None;
        for c in rel.components() {
            let at = cur.as_ref().unwrap_or(root);
            let next = match rustix::fs::openat2(at, c.as_os_str(), dir, Mode::empty(), BENEATH) {
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(at, c.as_os_str(), Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    rustix::fs::openat2(at, c.as_os_str(), dir, Mode::empty(), BENEATH)
                }
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Relaxed);
                    return std::fs::create_dir_all(p);
                }
                r => r,
            };
            cur = Some(next.map_err(|e| named(p, "cannot make directory", e.into()))?);
        }
        Ok(())
    }

    /// The directory holding `p`, opened beneath its root (cached), and `p`'s name.
    fn parent<'a>(&self, p: &'a Path) -> io::Result<(std::sync::Arc<OwnedFd>, &'a OsStr)> {
        let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
            return Err(io::Error::other(format!("'{}' has no parent", p.display())));
        };
        if let Some(fd) = self.parents.lock().unwrap().get(dir) {
            return Ok((fd.clone(), name));
        }
        let (root, rel) = self.find(dir)?;
        let rel = match rel.as_os_str().is_empty() {
            true => Path::new("."),
            false => rel,
        };
        let fd = beneath(
            root,
            rel,
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        );
        let fd = std::sync::Arc::new(fd.map_err(|e| named(dir, "cannot open", e.into()))?);
        self.parents
            .lock()
            .unwrap()
            .insert(dir.to_path_buf(), fd.clone());
        Ok((fd, name))
    }

    /// Makes a link at `p` (whose directory exists) to `target`.
    pub fn symlink(&self, target: &str, p: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(p)?;
        rustix::fs::symlinkat(target, &*dir, name).map_err(io::Error::from)
    }

    /// The descriptor of root `p` itself (a tablespace's directory, whose parent is
    /// not the restore's to open).
    fn root(&self, p: &Path) -> Option<&OwnedFd> {
        self.list.iter().find(|(r, _)| r == p).map(|(_, fd)| fd)
    }

    /// Gives `p` (a link itself, never what it points to) to uid:gid.
    pub fn chown(&self, p: &Path, (uid, gid): (u32, u32)) -> io::Result<()> {
        let (uid, gid) = (
            rustix::fs::Uid::from_raw_unchecked(uid),
            rustix::fs::Gid::from_raw_unchecked(gid),
        );
        if let Some(fd) = self.root(p) {
            return rustix::fs::fchown(fd, Some(uid), Some(gid))
                .map_err(|e| named(p, "cannot chown", e.into()));
        }
        let (dir, name) = self.parent(p)?;
        rustix::fs::chownat(&*dir, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| named(p, "cannot chown", e.into()))
    }

    /// Gives `p`, a file or directory the restore made (a link there is refused), its
    /// owner (when given), mode and modification time, each only where it differs (a
    /// kept file's inode is not dirtied again). An owner that cannot be set is an error;
    /// a mode or a time is not worth failing a restore for. A set keeps whole seconds:
    /// a time within that second is left as it is.
    pub fn settle(
        &self,
        p: &Path,
        owner: Option<(u32, u32)>,
        mode: u32,
        mtime: i64,
    ) -> io::Result<()> {
        let t = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: mtime.max(0),
                tv_nsec: 0,
            },
        };
        let ids = owner.map(|(u, g)| {
            (
                rustix::fs::Uid::from_raw_unchecked(u),
                rustix::fs::Gid::from_raw_unchecked(g),
            )
        });
        let chown_err = |e: rustix::io::Errno| named(p, "cannot chown", e.into());
        let differs = |st: &rustix::fs::Stat| Differs {
            owner: owner.is_some_and(|(u, g)| (st.st_uid, st.st_gid) != (u, g)),
            mode: st.st_mode & 0o7777 != mode,
            time: st.st_mtime != mtime.max(0),
        };
        if let Some(fd) = self.root(p) {
            let d = differs(&rustix::fs::fstat(fd)?);
            if let (true, Some((u, g))) = (d.owner, ids) {
                rustix::fs::fchown(fd, Some(u), Some(g)).map_err(chown_err)?;
            }
            if d.mode {
                let _ = rustix::fs::fchmod(fd, Mode::from_raw_mode(mode));
            }
            if d.time {
                let _ = rustix::fs::futimens(fd, &t);
            }
            return Ok(());
        }
        let (dir, name) = self.parent(p)?;
        let st = match rustix::fs::statat(&*dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if owner.is_some() => return Err(chown_err(e)),
            Err(_) => return Ok(()),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(named(p, "refused", io::Error::other("it is a link")));
        }
        let d = differs(&st);
        if let (true, Some((u, g))) = (d.owner, ids) {
            rustix::fs::chownat(&*dir, name, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(chown_err)?;
        }
        if d.mode {
            let _ = rustix::fs::chmodat(&*dir, name, Mode::from_raw_mode(mode), AtFlags::empty());
        }
        if d.time {
            let _ = rustix::fs::utimensat(&*dir, name, &t, AtFlags::SYMLINK_NOFOLLOW);
        }
        Ok(())
    }
}

/// What `Roots::settle` changes.
struct Differs {
    owner: bool,
    mode: bool,
    time: bool,
}

/// `rel` opened beneath `root` (never through a link); `full`, its path, only where the
/// kernel has no openat2.
fn beneath(
    root: &OwnedFd,
    rel: &Path,
    full: &Path,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    if !NO_OPENAT2.load(Relaxed) {
        match rustix::fs::openat2(root, rel, flags, mode, BENEATH) {
            Err(Errno::NOSYS) => NO_OPENAT2.store(true, Relaxed),
            r => return r,
        }
    }
    rustix::fs::open(full, flags, mode)
}

fn named(p: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} '{}': {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted anywhere under a root (a directory or the last component) is
    /// never followed out of it, and a path outside every root is refused.
    #[test]
    fn nothing_is_made_or_opened_through_a_link_or_outside() {
        let t = tempfile::tempdir().unwrap();
        let (root, outside) = (t.path().join("root"), t.path().join("outside"));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("evil")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), root.join("d/last")).unwrap();
        let r = Roots::open([root.clone()]).unwrap();
        // A root reached through a link (the user's own) is opened.
        std::os::unix::fs::symlink(&root, t.path().join("via")).unwrap();
        let via = Roots::open([t.path().join("via")]).unwrap();
        via.create_dir_all(&t.path().join("via/x")).unwrap();
        assert!(root.join("x").is_dir());
        let create = OFlags::WRONLY | OFlags::CREATE;
        assert!(r.open_file(&root.join("evil/f"), create, 0o600).is_err());
        assert!(r.open_file(&root.join("d/last"), create, 0o600).is_err());
        assert!(r.create_dir_all(&root.join("evil/sub")).is_err());
        assert!(r.symlink("x", &root.join("evil/l")).is_err());
        assert!(r.settle(&root.join("d/last"), None, 0o777, 0).is_err());
        let e = r
            .open_file(&root.join("../outside/f"), create, 0o600)
            .unwrap_err();
        assert!(e.to_string().contains("outside the directories"), "{e}");
        assert!(r.open_file(&outside.join("f"), create, 0o600).is_err());
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written outside"
        );
        // What lies beneath is made and opened.
        r.create_dir_all(&root.join("a/b/c")).unwrap();
        r.open_file(&root.join("a/b/c/f"), create | OFlags::EXCL, 0o600)
            .unwrap();
        r.symlink("f", &root.join("a/b/c/l")).unwrap();
        r.settle(&root.join("a/b/c/f"), None, 0o640, 1_000_000)
            .unwrap();
        let m = std::fs::metadata(root.join("a/b/c/f")).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(
            (m.permissions().mode() & 0o777, m.mtime()),
            (0o640, 1_000_000)
        );
        // What already holds is not set again (the inode's change time stays).
        let ctime = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec());
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.settle(&root.join("a/b/c/f"), None, 0o640, 1_000_000)
            .unwrap();
        let again = std::fs::metadata(root.join("a/b/c/f")).unwrap();
        assert_eq!(ctime(&again), ctime(&m));
        r.settle(&root.join("a/b/c/f"), None, 0o600, 1_000_000)
            .unwrap();
        let changed = std::fs::metadata(root.join("a/b/c/f")).unwrap();
        assert_ne!(ctime(&changed), ctime(&m));
        assert_eq!(changed.permissions().mode() & 0o777, 0o600);
    }
}
