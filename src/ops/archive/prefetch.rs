//! WAL prefetch for `archive-get`: while PostgreSQL replays one segment, a background
//! fetcher brings the next ones into a local directory, several at once, each checked
//! exactly as archive-get checks a file (header, CRC32C, size, BLAKE3, envelope) before
//! it is renamed into place. archive-get hands a prefetched segment over with a rename,
//! only from a directory of its own user that no one else may write (`Dir`), and only a
//! regular file whose size and BLAKE3 match the archive's header for its name.
//!
//! ```text
//! DIR/NAME            a segment fetched and checked, waiting for PostgreSQL to ask for it
//! DIR/NAME.error      why NAME could not be fetched (archive-get then fetches it itself,
//!                     and fails or succeeds exactly as without prefetch)
//! DIR/wanted          the segment PostgreSQL asked for last: the fetcher keeps the
//!                     window after it full, and ends once it stays unchanged a while
//! DIR/fetcher.lock    held (flock) by the fetcher while it runs
//! DIR/fetcher.log     its output
//! ```

use crate::pg::{parse_name, parse_segment_name, segment_name_for, Kind};
use crate::private_dir::{owner, PrivateDir};
use crate::repo::{wal, Repo};
use anyhow::{bail, Context, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

pub const DEFAULT_DIR: &str = "pagevault-prefetch";
const LOCK: &str = "fetcher.lock";
pub const LOG: &str = "fetcher.log";
pub const LOG_MAX: u64 = 16 << 20;
const ERROR: &str = ".error";
const WANTED: &str = "wanted";
/// Fetches at once.
const THREADS: usize = 4;

/// The segments after `name` (of `seg_size` bytes) on its timeline: the window.
pub fn window(name: &str, seg_size: u64, n: usize) -> Vec<String> {
    let Some((tli, segno)) = parse_segment_name(name, seg_size) else {
        return vec![];
    };
    (1..=n as u64)
        .map(|i| segment_name_for(tli, segno + i, seg_size))
        .collect()
}

/// The prefetch directory, opened once and checked by the rule of [`PrivateDir`]: a
/// directory (not a link) of the effective user that no one else may write. Files are
/// taken from it by name relative to that handle, never through a link.
pub struct Dir {
    path: PathBuf,
    fd: OwnedFd,
    dir: PrivateDir,
}

const WHAT: &str = "prefetch directory";

impl Dir {
    /// Opens `path`; None when it does not exist. Anything else than a directory of
    /// this user, writable by no one else, is refused, naming what it is and the fix.
    pub fn open(path: &Path) -> Result<Option<Dir>> {
        let Some(dir) = PrivateDir::open(path, WHAT)? else {
            return Ok(None);
        };
        Ok(Some(Dir {
            path: dir.path().to_path_buf(),
            fd: rustix::io::dup(dir.fd())?,
            dir,
        }))
    }

    /// Its real path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the fetcher's log to append (cut back to nothing past [`LOG_MAX`]).
    pub fn log(&self) -> Result<fs::File> {
        (self.dir.append(LOG, LOG_MAX))
            .with_context(|| format!("cannot open the log '{}'", self.dir.join(LOG).display()))
    }

    /// Hands a prefetched `name` over as `dest` (a rename, or a copy across file
    /// systems) once its bytes match the archive's header for it (size and BLAKE3).
    /// False when it is not there. A recorded fetch error is dropped: the caller fetches
    /// the file itself. An error means the file was not handed over and is gone: the
    /// caller fetches it from the repository.
    pub fn take(&self, repo: &Repo, name: &str, dest: &Path) -> Result<bool> {
        let _ = rustix::fs::unlinkat(&self.fd, format!("{name}{ERROR}"), AtFlags::empty());
        let p = self.path.join(name);
        let discard = |why: String| -> Result<bool> {
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            bail!("prefetched '{}' is discarded: {why}", p.display())
        };
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags | OFlags::NOCTTY, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(false),
            Err(Errno::LOOP) => return discard("it is a symbolic link".into()),
            Err(e) => return discard(format!("it cannot be opened ({e})")),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return discard("it is not a regular file".into());
        }
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me || st.st_mode & 0o022 != 0 || st.st_nlink != 1 {
            return discard(format!(
                "it is owned by {} with mode {:04o} and {} links, not a file only this user wrote",
                owner(st.st_uid),
                st.st_mode & 0o7777,
                st.st_nlink
            ));
        }
        let mut f = fs::File::from(fd);
        let mut h = blake3::Hasher::new();
        let len =
            io::copy(&mut f, &mut h).with_context(|| format!("cannot read '{}'", p.display()))?;
        let got = *h.finalize().as_bytes();
        match wal::archived_digest(repo, name) {
            Ok(Some((raw, b3))) if raw == len && b3 == got => {}
            Ok(Some((raw, b3))) => {
                return discard(format!(
                    "it is {len} bytes with BLAKE3 {}, but the archive's {name} is {raw} bytes with BLAKE3 {}",
                    &hex::encode(got)[..16],
                    &hex::encode(b3)[..16]
                ))
            }
            Ok(None) => return discard(format!("the archive does not hold {name}")),
            Err(e) => return discard(format!("{e:#}")),
        }
        match rustix::fs::renameat(&self.fd, name, rustix::fs::CWD, dest) {
            Ok(()) => {
                // Only this user writes the directory; still, what was renamed must be
                // the file checked.
                let d = rustix::fs::lstat(dest)?;
                if (d.st_dev, d.st_ino) != (st.st_dev, st.st_ino) {
                    let _ = fs::remove_file(dest);
                    bail!(
                        "prefetched '{}' changed while it was handed over",
                        p.display()
                    );
                }
            }
            Err(Errno::XDEV) => {
                copy_to(&mut f, dest)?;
                let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            }
            Err(e) => {
                return Err(io::Error::from(e)).with_context(|| {
                    format!("cannot move '{}' to '{}'", p.display(), dest.display())
                })
            }
        }
        Ok(true)
    }
}

/// Copies the checked file `f` to `dest` through a temp file beside it.
fn copy_to(f: &mut fs::File, dest: &Path) -> Result<()> {
    use std::io::Seek;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file = dest.file_name().and_then(|n| n.to_str()).unwrap_or("wal");
    let (tmp, mut out) = crate::repo::store::temp_beside(dir, file)?;
    f.rewind()?;
    io::copy(f, &mut out).with_context(|| format!("cannot write '{}'", tmp.path.display()))?;
    drop(out);
    fs::rename(&tmp.path, dest).with_context(|| format!("cannot create '{}'", dest.display()))?;
    Ok(())
}

/// Makes the prefetch directory (private to this user) when it is not there, and
/// opens it checked.
pub fn make(path: &Path) -> Result<Dir> {
    let dir = PrivateDir::make(path, WHAT)?;
    Ok(Dir {
        path: dir.path().to_path_buf(),
        fd: rustix::io::dup(dir.fd())?,
        dir,
    })
}

impl Dir {
    /// Removes what no longer serves (call it while no fetcher runs): segments and
    /// errors before `name` or on another timeline, outside the window `keep`.
    /// Everything, with `all` (the end of the archive).
    pub fn clean(&self, name: &str, keep: &[String], all: bool) {
        for e in self.dir.files().unwrap_or_default() {
            let f = e.name;
            let stem = f.strip_suffix(ERROR).unwrap_or(&f);
            let stale = match parse_name(stem) {
                Some(n) if n.kind == Kind::Segment => {
                    all || (stem < name || stem[..8] != name[..8])
                        && !keep.iter().any(|k| k == stem)
                }
                // A killed fetcher's temp file: only once prefetch ends.
                _ => all && f.starts_with('.') && f.ends_with(".tmp"),
            };
            if stale {
                let _ = self.dir.remove(&f);
            }
        }
        if all {
            for f in [LOG, LOCK, WANTED] {
                let _ = self.dir.remove(f);
            }
            let _ = fs::remove_dir(&self.path);
        }
    }

    /// The names of the window neither fetched nor failed yet.
    pub fn missing(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| !self.dir.has_file(n) && !self.dir.has(&format!("{n}{ERROR}")))
            .cloned()
            .collect()
    }

    /// Whether a fetcher runs (holds the lock).
    pub fn running(&self) -> bool {
        self.lock().is_ok_and(|l| l.is_none())
    }

    fn lock(&self) -> Result<Option<fs::File>> {
        (self.dir.lock(LOCK))
            .with_context(|| format!("cannot lock '{}'", self.dir.join(LOCK).display()))
    }

    /// Records the segment PostgreSQL asked for last (informational for the fetcher:
    /// not synced).
    pub fn set_wanted(&self, name: &str) {
        let _ = self.dir.replace(WANTED, format!("{name}\n").as_bytes());
    }

    fn wanted(&self) -> Option<String> {
        let b = self.dir.read(WANTED, 64)?;
        let s = String::from_utf8(b).ok()?;
        let s = s.trim();
        parse_name(s)
            .is_some_and(|n| n.kind == Kind::Segment)
            .then(|| s.to_string())
    }
}

#[derive(Debug, Clone)]
pub struct FetchOptions {
    pub dir: PathBuf,
    pub repo: String,
    /// The segment asked for when the fetcher started, and the segment size.
    pub first: String,
    pub seg_size: u64,
    /// Segments kept fetched ahead of the one asked for last.
    pub window: usize,
    /// The fetcher ends once no new segment was asked for this long.
    pub linger: std::time::Duration,
    pub store: crate::device::object::StoreOptions,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Fetched {
    pub ran: bool,
    pub fetched: u64,
    pub bytes: u64,
    /// Fetches of names the archive did not hold (yet).
    pub absent: u64,
    pub failed: u64,
}

/// The fetcher: keeps the window after the segment asked for last fetched into `dir`,
/// several at once, each checked; a failure recorded beside its name. One process for
/// a whole recovery: the repository is opened once.
pub fn fetch_ahead(o: &FetchOptions) -> Result<Fetched> {
    use std::time::{Duration, Instant};
    let mut out = Fetched::default();
    let dir = make(&o.dir)?;
    let Some(_lock) = dir.lock()? else {
        return Ok(out);
    };
    out.ran = true;
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let mut asked = o.first.clone();
    let mut since = Instant::now();
    // Names found absent, and when: asked again after a second (a standby's archive grows).
    let mut absent: std::collections::HashMap<String, Instant> = Default::default();
    loop {
        if let Some(w) = dir.wanted() {
            if w != asked {
                asked = w;
                since = Instant::now();
            }
        }
        // Removed (the recovery ended, a drill's scratch went): nothing to fetch into.
        if since.elapsed() > o.linger || crate::interrupt::received().is_some() || !o.dir.is_dir() {
            return Ok(out);
        }
        absent.retain(|_, t| t.elapsed() < Duration::from_secs(1));
        let win = window(&asked, o.seg_size, o.window);
        let names: Vec<String> = (dir.missing(&win))
            .into_iter()
            .filter(|n| !absent.contains_key(n))
            .collect();
        if names.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let got = crate::par::map_index(names.len(), THREADS.min(names.len()), |i| {
            wal::fetch(&repo, &names[i], &dir.path.join(&names[i]))
        });
        for (r, name) in got.into_iter().zip(&names) {
            match r {
                Ok(b) => {
                    out.fetched += 1;
                    out.bytes += b;
                }
                Err(e) if e.downcast_ref::<wal::NotArchived>().is_some() => {
                    out.absent += 1;
                    absent.insert(name.clone(), Instant::now());
                }
                Err(e) => {
                    out.failed += 1;
                    let why = format!("{e:#}\n");
                    let _ = dir.dir.replace(&format!("{name}{ERROR}"), why.as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fetcher whose directory is removed (a drill's scratch going) ends then, not
    /// after its linger.
    #[test]
    fn a_fetcher_ends_when_its_directory_is_removed() {
        let (d, _repo) = crate::repo::temp_repo();
        let dir = d.path().join("prefetch");
        let o = FetchOptions {
            dir: dir.clone(),
            repo: d.path().join("r").to_str().unwrap().to_string(),
            first: "000000010000000000000003".into(),
            seg_size: 16 << 20,
            window: 2,
            linger: std::time::Duration::from_secs(60),
            store: Default::default(),
        };
        let t0 = std::time::Instant::now();
        let fetcher = std::thread::spawn(move || fetch_ahead(&o));
        // (Asking `running` would take the lock itself for a moment.)
        while !dir.join(LOCK).exists() {
            assert!(t0.elapsed().as_secs() < 10, "the fetcher did not start");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        fs::remove_dir_all(&dir).unwrap();
        let f = fetcher.join().unwrap().unwrap();
        assert!(f.ran);
        assert!(
            t0.elapsed().as_secs() < 10,
            "ended after {:?}",
            t0.elapsed()
        );
    }
}
