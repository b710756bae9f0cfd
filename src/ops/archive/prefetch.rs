//! WAL prefetch for `archive-get`: while PostgreSQL replays one segment, a background
//! fetcher brings the next ones into a local directory, several at once, each checked
//! exactly as archive-get checks a file (header, CRC32C, size, BLAKE3, envelope); it
//! writes the record of that check beside the segment, then renames the segment into
//! place. archive-get hands a prefetched segment over with a rename and no request to
//! the store: only from a directory of its own user that no one else may write (`Dir`),
//! only a regular file of that user whose identity, size and BLAKE3 match its record.
//!
//! How far ahead adapts: twice the segments replayed while one fetch takes (the round
//! trip and the transfer, measured), plus one; at least 2, at most the `window` asked
//! (`--prefetch N`): the bound on disk is N segments, fetched or in flight.
//!
//! ```text
//! DIR/NAME            a segment fetched and checked, waiting for PostgreSQL to ask for it
//! DIR/NAME.checked    the record of its check (record.rs), written before NAME appears
//! DIR/NAME.fetching   the fetcher is fetching NAME: archive-get waits for it
//! DIR/NAME.error      why NAME could not be fetched (archive-get then fetches it itself,
//!                     and fails or succeeds exactly as without prefetch)
//! DIR/wanted          the segment PostgreSQL asked for last: the fetcher keeps the
//!                     window after it full, and ends once it stays unchanged a while
//! DIR/fetcher.lock    held (flock) by the fetcher while it runs
//! DIR/fetcher.log     its output
//! ```

use super::record::{self, Checked};
use crate::pg::{parse_name, parse_segment_name, segment_name_for, Kind};
use crate::private_dir::{owner, PrivateDir};
use crate::repo::{wal, Repo};
use anyhow::{anyhow, bail, Context, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_DIR: &str = "pagevault-prefetch";
const LOCK: &str = "fetcher.lock";
pub const LOG: &str = "fetcher.log";
pub const LOG_MAX: u64 = 16 << 20;
const ERROR: &str = ".error";
const CHECKED: &str = ".checked";
const FETCHING: &str = ".fetching";
const WANTED: &str = "wanted";
/// Fetches at once, at most.
const THREADS: usize = 8;
/// The fewest segments kept ahead.
const MIN_DEPTH: usize = 2;
/// How long archive-get waits for a segment the fetcher is fetching.
const WAIT: Duration = Duration::from_secs(60);

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
    /// systems) once its identity, size and BLAKE3 match the record the fetcher wrote of
    /// its check: no request to the store. False when it is not there. A recorded fetch
    /// error is dropped: the caller fetches the file itself. An error means the file was
    /// not handed over and is gone: the caller fetches it from the repository.
    pub fn take(&self, name: &str, dest: &Path) -> Result<bool> {
        let _ = rustix::fs::unlinkat(&self.fd, format!("{name}{ERROR}"), AtFlags::empty());
        let p = self.path.join(name);
        let rec_name = format!("{name}{CHECKED}");
        let discard = |why: String| -> Result<bool> {
            let _ = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty());
            let _ = rustix::fs::unlinkat(&self.fd, &rec_name, AtFlags::empty());
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
        if let Some(why) = not_own_file(&st) {
            return discard(why);
        }
        let rec = match self.record(&rec_name, name) {
            Ok(r) => r,
            Err(e) => return discard(format!("{e:#}")),
        };
        if (st.st_dev, st.st_ino) != (rec.dev, rec.ino) {
            return discard(format!(
                "it is not the file the fetcher checked (inode {}, its record names {})",
                st.st_ino, rec.ino
            ));
        }
        let mut f = fs::File::from(fd);
        let mut h = blake3::Hasher::new();
        let len =
            io::copy(&mut f, &mut h).with_context(|| format!("cannot read '{}'", p.display()))?;
        let got = *h.finalize().as_bytes();
        if len != rec.bytes || got != rec.blake3 {
            return discard(format!(
                "it is {len} bytes with BLAKE3 {}, but the fetcher checked {} bytes with BLAKE3 {} \
                 against the archive's {name}",
                &hex::encode(got)[..16],
                rec.bytes,
                &hex::encode(rec.blake3)[..16]
            ));
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
        let _ = rustix::fs::unlinkat(&self.fd, &rec_name, AtFlags::empty());
        Ok(true)
    }

    /// The record of `name`'s check: a regular file of this user (not a link), at most
    /// [`record::MAX`] bytes, as the fetcher writes it.
    fn record(&self, rec_name: &str, name: &str) -> Result<Checked> {
        let what = self.path.join(rec_name);
        let f = match self.dir.open_read(rec_name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
                "there is no record of its check ('{}'): the fetcher writes one before the segment",
                what.display()
            ),
            Err(e) => bail!("its record '{}' cannot be read: {e}", what.display()),
        };
        let st = rustix::fs::fstat(&f)?;
        if let Some(why) = not_own_file(&st) {
            bail!("its record '{}': {why}", what.display());
        }
        let mut b = vec![];
        io::Read::read_to_end(&mut io::Read::take(f, record::MAX + 1), &mut b)
            .with_context(|| format!("cannot read '{}'", what.display()))?;
        Checked::decode(&b, name).map_err(|e| anyhow!("its record '{}': {e}", what.display()))
    }

    /// Waits, up to [`WAIT`], while the fetcher fetches `name` (its `NAME.fetching` is
    /// there and a fetcher runs): fetching it again would only race it.
    pub fn wait_for(&self, name: &str) {
        let fetching = format!("{name}{FETCHING}");
        let error = format!("{name}{ERROR}");
        let t0 = Instant::now();
        let mut asked = t0;
        while self.dir.has(&fetching) && !self.dir.has(name) && !self.dir.has(&error) {
            if t0.elapsed() > WAIT {
                return;
            }
            if asked.elapsed() > Duration::from_secs(1) {
                if !self.running() {
                    return;
                }
                asked = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(3));
        }
    }
}

/// Why a file is not one only this user wrote (another owner, writable by others, more
/// than one link, not a regular file); None when it is.
fn not_own_file(st: &rustix::fs::Stat) -> Option<String> {
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Some("it is not a regular file".into());
    }
    let me = rustix::process::geteuid().as_raw();
    (st.st_uid != me || st.st_mode & 0o022 != 0 || st.st_nlink != 1).then(|| {
        format!(
            "it is owned by {} with mode {:04o} and {} links, not a file only this user wrote",
            owner(st.st_uid),
            st.st_mode & 0o7777,
            st.st_nlink
        )
    })
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
            let stem = ([ERROR, CHECKED, FETCHING].iter())
                .find_map(|x| f.strip_suffix(x))
                .unwrap_or(&f);
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
    /// The most segments kept fetched ahead of the one asked for last (the disk bound).
    pub window: usize,
    /// The fetcher ends once no new segment was asked for this long.
    pub linger: Duration,
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
    /// Segments kept ahead at the end, the deepest it went, and what set it: a fetch's
    /// time and a segment's replay time, in seconds (moving averages).
    pub depth: usize,
    pub depth_max: usize,
    pub fetch_seconds: Option<f64>,
    pub replay_seconds: Option<f64>,
}

/// How many segments to keep ahead: those replayed while one fetch takes, twice (the
/// rates vary), plus one; [`THREADS`] before anything is measured; within
/// [`MIN_DEPTH`]..=`most`.
pub fn depth(fetch: Option<f64>, replay: Option<f64>, most: usize) -> usize {
    let d = match (fetch, replay) {
        (Some(f), Some(r)) if r > 0.0 => (2.0 * f / r).ceil().min(1e6) as usize + 1,
        _ => THREADS,
    };
    d.clamp(MIN_DEPTH.min(most), most.max(1))
}

/// A moving average that takes at once a value calling for more depth (a slower fetch, a
/// faster replay: falling behind stalls recovery), and follows slowly the other way (being
/// ahead only holds disk, within the bound).
fn follow(old: Option<f64>, new: f64, deeper: impl Fn(f64, f64) -> bool) -> Option<f64> {
    Some(match old {
        Some(o) if !deeper(o, new) => 0.7 * o + 0.3 * new,
        _ => new,
    })
}

/// What the fetcher's threads share.
struct Plan {
    asked: String,
    depth: usize,
    in_flight: std::collections::HashSet<String>,
    /// Names found absent, and when: asked again after a second (a standby's archive grows).
    absent: std::collections::HashMap<String, Instant>,
    out: Fetched,
    done: bool,
    /// Counts what can change the names to fetch (an ask, a fetch ended): an idle thread
    /// looks at the directory again then, or every [`RESCAN`] (a file discarded, a name
    /// absent a second ago).
    changed: u64,
}

const RESCAN: Duration = Duration::from_millis(250);

/// The fetcher: keeps the window after the segment asked for last fetched into `dir`,
/// several at once, each checked and recorded; a failure recorded beside its name. One
/// process for a whole recovery: the repository is opened once.
pub fn fetch_ahead(o: &FetchOptions) -> Result<Fetched> {
    let dir = make(&o.dir)?;
    let Some(_lock) = dir.lock()? else {
        return Ok(Fetched::default());
    };
    // Left by a fetcher that was killed: none runs now.
    for e in dir.dir.files().unwrap_or_default() {
        if e.name.ends_with(FETCHING) {
            let _ = dir.dir.remove(&e.name);
        }
    }
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let most = o.window.max(1);
    let start = depth(None, None, most);
    let plan = std::sync::Mutex::new(Plan {
        asked: o.first.clone(),
        depth: start,
        in_flight: Default::default(),
        absent: Default::default(),
        out: Fetched {
            ran: true,
            depth: start,
            depth_max: start,
            ..Default::default()
        },
        done: false,
        changed: 0,
    });
    std::thread::scope(|sc| {
        for _ in 0..THREADS.min(most) {
            sc.spawn(|| fetch_worker(&dir, &repo, &plan, o.seg_size, most));
        }
        let mut since = Instant::now();
        loop {
            let w = dir.wanted();
            let mut p = plan.lock().unwrap();
            if let Some(w) = w.filter(|w| *w != p.asked) {
                let step = |n: &str| parse_segment_name(n, o.seg_size);
                // Segments replayed since the last ask, on the same timeline.
                if let (Some((t0, s0)), Some((t1, s1))) = (step(&p.asked), step(&w)) {
                    if t0 == t1 && s1 > s0 {
                        let per = since.elapsed().as_secs_f64() / (s1 - s0) as f64;
                        p.out.replay_seconds = follow(p.out.replay_seconds, per, |o, n| n < o);
                    }
                }
                p.asked = w;
                p.changed += 1;
                since = Instant::now();
                p.depth = depth(p.out.fetch_seconds, p.out.replay_seconds, most);
                let keep = window(&p.asked, o.seg_size, most);
                dir.clean(&p.asked, &keep, false);
            }
            // Removed (the recovery ended, a drill's scratch went): nothing to fetch into.
            if since.elapsed() > o.linger
                || crate::interrupt::received().is_some()
                || !o.dir.is_dir()
            {
                p.done = true;
                return;
            }
            drop(p);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let mut out = plan.into_inner().unwrap().out;
    out.depth = depth(out.fetch_seconds, out.replay_seconds, most);
    Ok(out)
}

/// One of the fetcher's threads: takes the next name of the window nobody fetches, until
/// the fetcher ends.
fn fetch_worker(dir: &Dir, repo: &Repo, plan: &std::sync::Mutex<Plan>, seg_size: u64, most: usize) {
    loop {
        let name = {
            let mut p = plan.lock().unwrap();
            if p.done {
                return;
            }
            p.absent.retain(|_, t| t.elapsed() < Duration::from_secs(1));
            let win = window(&p.asked, seg_size, p.depth);
            let next = (dir.missing(&win).into_iter())
                .find(|n| !p.in_flight.contains(n) && !p.absent.contains_key(n));
            match next {
                Some(n) => {
                    p.in_flight.insert(n.clone());
                    n
                }
                None => {
                    let seen = p.changed;
                    drop(p);
                    let t = Instant::now();
                    while t.elapsed() < RESCAN {
                        std::thread::sleep(Duration::from_millis(5));
                        let p = plan.lock().unwrap();
                        if p.done || p.changed != seen {
                            break;
                        }
                    }
                    continue;
                }
            }
        };
        let mark = format!("{name}{FETCHING}");
        let _ = dir.dir.replace(&mark, b"");
        let t0 = Instant::now();
        let r = fetch_one(dir, repo, &name);
        let secs = t0.elapsed().as_secs_f64();
        let mut p = plan.lock().unwrap();
        p.in_flight.remove(&name);
        p.changed += 1;
        match r {
            Ok(b) => {
                p.out.fetched += 1;
                p.out.bytes += b;
                p.out.fetch_seconds = follow(p.out.fetch_seconds, secs, |o, n| n > o);
                p.depth = depth(p.out.fetch_seconds, p.out.replay_seconds, most);
                p.out.depth_max = p.out.depth_max.max(p.depth);
            }
            Err(e) if e.downcast_ref::<wal::NotArchived>().is_some() => {
                p.out.absent += 1;
                p.absent.insert(name.clone(), Instant::now());
            }
            Err(e) => {
                p.out.failed += 1;
                let why = format!("{e:#}\n");
                let _ = dir.dir.replace(&format!("{name}{ERROR}"), why.as_bytes());
            }
        }
        let _ = dir.dir.remove(&mark);
    }
}

/// Fetches `name` into the directory checked, writes the record of that check, then
/// renames the segment into place (a segment without its record is never handed over).
fn fetch_one(dir: &Dir, repo: &Repo, name: &str) -> Result<u64> {
    let tmp = format!(".{name}.fetch.tmp");
    let _ = dir.dir.remove(&tmp);
    let r = (|| {
        let (bytes, blake3) = wal::fetch_checked(repo, name, &dir.path.join(&tmp))?;
        let st = rustix::fs::statat(&dir.fd, tmp.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        let rec = Checked {
            name: name.to_string(),
            bytes,
            blake3,
            dev: st.st_dev,
            ino: st.st_ino,
        };
        let rec_name = format!("{name}{CHECKED}");
        (dir.dir.replace(&rec_name, rec.encode().as_bytes()))
            .with_context(|| format!("cannot write '{}'", dir.dir.join(&rec_name).display()))?;
        (dir.dir.rename(&tmp, name))
            .with_context(|| format!("cannot rename '{}'", dir.dir.join(&tmp).display()))?;
        Ok(bytes)
    })();
    if r.is_err() {
        let _ = dir.dir.remove(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Depth follows the fetch time over the replay time, within its bounds.
    #[test]
    fn prefetch_depth_follows_the_round_trip_and_the_replay_rate() {
        // Nothing measured: as many as fetch at once, within the bound.
        assert_eq!(depth(None, None, 16), THREADS);
        assert_eq!(depth(None, None, 3), 3);
        // A far store (a fetch takes 5/16 s), a fast replay (1/16 s a segment): 11.
        assert_eq!(depth(Some(0.3125), Some(0.0625), 16), 11);
        // ... bounded by the window asked for.
        assert_eq!(depth(Some(0.3125), Some(0.005), 16), 16);
        // A near store and a slow replay: the least, 2.
        assert_eq!(depth(Some(0.01), Some(0.5), 16), MIN_DEPTH);
        assert_eq!(depth(Some(0.01), Some(0.5), 1), 1);
        assert_eq!(depth(Some(1.0), Some(0.0), 8), THREADS);
    }

    /// A faster replay or a slower fetch is taken at once; the other way, slowly.
    #[test]
    fn prefetch_rates_follow_a_need_for_depth_at_once() {
        let replay = |o, n| follow(o, n, |o: f64, n: f64| n < o).unwrap();
        assert_eq!(replay(None, 0.5), 0.5);
        assert_eq!(replay(Some(0.5), 0.25), 0.25);
        assert_eq!(replay(Some(0.25), 1.25), 0.7 * 0.25 + 0.3 * 1.25);
        let fetch = |o, n| follow(o, n, |o: f64, n: f64| n > o).unwrap();
        assert_eq!(fetch(Some(0.25), 1.0), 1.0);
        assert_eq!(fetch(Some(1.0), 0.0), 0.7);
    }

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
