//! The local spool of `archive-push --async`:
//!
//! ```text
//! SPOOL/ready/NAME        a WAL file PostgreSQL handed over, durable, not yet in the repository
//! SPOOL/ready/NAME.sum    its block summary (a segment's), made as it was spooled
//! SPOOL/ready/NAME.src    the identity of the file it was copied from (device, inode, size,
//!                         times): PostgreSQL's call for that unchanged file needs no read
//! SPOOL/ready/NAME.done   that identity once the repository holds the file, until PostgreSQL
//!                         asks for it (or for an hour)
//! SPOOL/ready/NAME.in-TAG with several repositories: repository TAG holds this very
//!                         file ([`repo_tag`]; the file's inode and change time, so a
//!                         mark never speaks for another file of that name)
//! SPOOL/last.sum          the last spooled segment's summary: the next one continues it
//! SPOOL/pusher.lock       held (flock) by the pusher while it runs
//! SPOOL/pusher.json       the pusher's state: what waits, what it pushed, its last error
//! SPOOL/pusher.log        the pusher's output
//! ```
//!
//! A file leaves `ready/` only once the repository holds it durably (and its summary),
//! every repository with several, so a pusher killed at any point loses nothing: the
//! next one pushes it again, and a push of what the repository holds already is a no-op.
//! A mark is written once its repository holds the file, and removed before the file
//! leaves: a mark lost or left behind makes a repository get the file again, never skip it.

use crate::pg::parse_name;
use crate::private_dir::PrivateDir;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};

pub const READY: &str = "ready";
pub const LAST_SUM: &str = "last.sum";
const LOCK: &str = "pusher.lock";
/// Locked by a call while it copies files in; the pusher's uploads wait for it.
const SPOOLING: &str = "spooling.lock";
/// A stored file's name once out of the listing, until removed: `.NAME.pushed`.
const PUSHED_SUFFIX: &str = ".pushed";

/// The name stored file `name` takes before it is removed.
pub fn pushed_name(name: &str) -> String {
    format!(".{name}{PUSHED_SUFFIX}")
}
const STATE: &str = "pusher.json";
pub const LOG: &str = "pusher.log";
/// pusher.json is a few hundred bytes; more is damage.
const STATE_MAX: u64 = 64 << 10;
/// How long the identity of a stored file waits for PostgreSQL's call for it.
const DONE_KEEP: std::time::Duration = std::time::Duration::from_secs(3600);
/// How long a summary or identity may wait for its WAL file, which a push puts in place
/// right after writing them.
const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(60);
/// The log is cut back to nothing past this size when a pusher starts.
pub const LOG_MAX: u64 = 16 << 20;

/// The spool, checked by the rule of [`PrivateDir`]: its directory and `ready/` of this
/// user (or root), writable by no one else, nothing in them reached through a link.
pub struct Spool {
    /// Its real path.
    pub dir: PathBuf,
    top: PrivateDir,
    ready: PrivateDir,
}

const WHAT: &str = "the spool";
const WHAT_READY: &str = "the spool's ready directory";

/// What waits in the spool.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Backlog {
    pub files: u64,
    pub bytes: u64,
    /// The oldest and newest names waiting.
    pub oldest: Option<String>,
    pub newest: Option<String>,
}

/// The pusher's state, as it last wrote it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PusherState {
    pub pid: u32,
    /// Unix seconds of this state.
    pub updated: u64,
    /// Files pushed by this pusher since it started.
    pub pushed: u64,
    pub last_pushed: Option<String>,
    /// The last failure, and since when pushes fail (Unix seconds); None once a push
    /// succeeds again.
    pub last_error: Option<String>,
    pub failing_since: Option<u64>,
    /// With several repositories: each one's part (the fields above then speak of
    /// files stored into every one, and of the repository failing longest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repos: Vec<RepoPusher>,
}

/// One repository's pusher, with several.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RepoPusher {
    pub repo: String,
    /// Its marks' tag ([`repo_tag`]).
    pub tag: String,
    pub pushed: u64,
    pub last_pushed: Option<String>,
    pub last_error: Option<String>,
    pub failing_since: Option<u64>,
    /// The spooled files it lacks, as last counted.
    pub lacks: Backlog,
}

/// A WAL file waiting in the spool, and which copy of it: inode, change time, size.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub name: String,
    pub len: u64,
    pub id: String,
}

impl Waiting {
    fn of(e: crate::private_dir::Entry) -> Waiting {
        Waiting {
            id: format!("{} {} {}\n", e.ino, e.changed_ns, e.len),
            name: e.name,
            len: e.len,
        }
    }
}

/// What [`Backlog`] the files `w` make.
pub fn backlog_of<'a>(w: impl IntoIterator<Item = &'a Waiting>) -> Backlog {
    let mut b = Backlog::default();
    for w in w {
        b.files += 1;
        b.bytes += w.len;
        if b.oldest.as_ref().is_none_or(|o| &w.name < o) {
            b.oldest = Some(w.name.clone());
        }
        if b.newest.as_ref().is_none_or(|n| &w.name > n) {
            b.newest = Some(w.name.clone());
        }
    }
    b
}

/// The marker of a repository's marks in the names of `ready/`.
const HELD_INFIX: &str = ".in-";
/// A mark is one line; more is damage.
const MARK_MAX: u64 = 128;

/// How the spool names a repository in its marks: 16 hex digits of BLAKE3 of what its
/// specification names ([`crate::repo::many::identity`]), so two spellings of one
/// repository share its marks, and a repository put in the list later has none.
pub fn repo_tag(spec: &str) -> String {
    let h = blake3::hash(crate::repo::many::identity(spec).as_bytes());
    hex::encode(&h.as_bytes()[..8])
}

/// The mark of repository `tag` on spooled file `name`.
pub fn held_name(name: &str, tag: &str) -> String {
    format!("{name}{HELD_INFIX}{tag}")
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Spool {
    /// The spool at `dir`, its directories made (private, as every file this process
    /// makes) and checked.
    pub fn open(dir: &Path) -> Result<Spool> {
        let top = PrivateDir::make(dir, WHAT)?;
        let ready = top.sub(READY, WHAT_READY, true)?.expect("made");
        // The pool of segments to write over, when there is one.
        ready.sub(crate::repo::wal::spooled::POOL, "the spool's pool", false)?;
        Ok(Spool {
            dir: top.path().to_path_buf(),
            top,
            ready,
        })
    }

    /// The spool at `dir`, only to read its backlog and state (`status`, which may run
    /// as another user): None when it has no `ready/`.
    pub fn inspect(dir: &Path) -> Result<Option<Spool>> {
        let Some(top) = PrivateDir::inspect(dir, WHAT)? else {
            return Ok(None);
        };
        let Some(ready) = PrivateDir::inspect(&dir.join(READY), WHAT_READY)? else {
            return Ok(None);
        };
        Ok(Some(Spool {
            dir: dir.to_path_buf(),
            top,
            ready,
        }))
    }

    pub fn ready(&self) -> PathBuf {
        self.ready.path().to_path_buf()
    }

    /// The spool's directory, opened.
    pub fn top(&self) -> &PrivateDir {
        &self.top
    }

    /// Its `ready/`, opened.
    pub fn ready_dir(&self) -> &PrivateDir {
        &self.ready
    }

    /// The WAL files waiting, sorted (a timeline's history file before its segments),
    /// with their sizes. Temp files, summaries and anything not named as WAL are skipped.
    pub fn waiting(&self) -> Result<Vec<(String, u64)>> {
        let mut out: Vec<(String, u64)> = (self.ready.files())
            .with_context(|| format!("cannot list the spool '{}'", self.ready.path().display()))?
            .into_iter()
            .filter(|e| parse_name(&e.name).is_some())
            .map(|e| (e.name, e.len))
            .collect();
        out.sort();
        Ok(out)
    }

    /// [`Spool::waiting`], each file with its identity.
    pub fn waiting_files(&self) -> Result<Vec<Waiting>> {
        let mut out: Vec<Waiting> = (self.ready.files())
            .with_context(|| format!("cannot list the spool '{}'", self.ready.path().display()))?
            .into_iter()
            .filter(|e| parse_name(&e.name).is_some())
            .map(Waiting::of)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Spooled file `name` as it is now; None once it left.
    pub fn waiting_file(&self, name: &str) -> Option<Waiting> {
        self.ready.entry(name).map(Waiting::of)
    }

    /// Marks `w` as held by repository `tag` (unsynced: a mark lost to a crash makes
    /// the push again, which finds the file stored).
    pub fn mark_held(&self, w: &Waiting, tag: &str) -> Result<()> {
        let mark = held_name(&w.name, tag);
        (self.ready.replace(&mark, w.id.as_bytes()))
            .with_context(|| format!("cannot write '{}'", self.ready.join(&mark).display()))
    }

    /// Whether repository `tag` holds this very copy of `w`.
    pub fn holds(&self, w: &Waiting, tag: &str) -> bool {
        (self.ready.read(&held_name(&w.name, tag), MARK_MAX)).is_some_and(|b| b == w.id.as_bytes())
    }

    /// Removes the marks of `tags` on `name`.
    pub fn unmark(&self, name: &str, tags: &[String]) -> Result<()> {
        for t in tags {
            let mark = held_name(name, t);
            (self.ready.remove(&mark))
                .with_context(|| format!("cannot remove '{}'", self.ready.join(&mark).display()))?;
        }
        Ok(())
    }

    /// What waits for repository `tag`: the WAL files without its mark. By name only
    /// (`status`, which may run as another user, reads no file); the pusher checks each
    /// mark against its file.
    pub fn lacking(&self, tag: &str) -> Result<Backlog> {
        let files = (self.ready.files())
            .with_context(|| format!("cannot list the spool '{}'", self.ready.path().display()))?;
        let names: std::collections::HashSet<&str> =
            files.iter().map(|e| e.name.as_str()).collect();
        let lack: Vec<Waiting> = (files.iter())
            .filter(|e| parse_name(&e.name).is_some())
            .filter(|e| !names.contains(held_name(&e.name, tag).as_str()))
            .map(|e| Waiting::of(e.clone()))
            .collect();
        Ok(backlog_of(&lack))
    }

    pub fn backlog(&self) -> Result<Backlog> {
        let w = self.waiting()?;
        Ok(Backlog {
            files: w.len() as u64,
            bytes: w.iter().map(|(_, b)| b).sum(),
            oldest: w.first().map(|(n, _)| n.clone()),
            newest: w.last().map(|(n, _)| n.clone()),
        })
    }

    /// Files the pusher stored and took out of the listing ([`pushed_name`]) but did not
    /// remove (it was killed): to remove.
    pub fn pushed_leftovers(&self) -> Vec<PathBuf> {
        let files = self.ready.files().unwrap_or_default();
        files
            .into_iter()
            .filter(|e| {
                (e.name.strip_prefix('.'))
                    .and_then(|n| n.strip_suffix(PUSHED_SUFFIX))
                    .is_some_and(|stem| parse_name(stem).is_some())
            })
            .map(|e| self.ready.join(&e.name))
            .collect()
    }

    /// Summaries, source identities and repositories' marks whose WAL file is gone (a
    /// pusher stopped between the removals) for [`ORPHAN_GRACE`], and identities of
    /// stored files PostgreSQL has not asked for in [`DONE_KEEP`]. A push writes a file's
    /// summary and identity before it puts the file in place: one written just now is not
    /// an orphan.
    pub fn orphan_summaries(&self) -> Vec<PathBuf> {
        use crate::repo::wal::spooled::{DONE_SUFFIX, SRC_SUFFIX, SUM_SUFFIX};
        let files = self.ready.files().unwrap_or_default();
        files
            .into_iter()
            .filter_map(|e| {
                // A mark's temp file a killed pusher left (`.NAME.in-TAG.PID.tmp`).
                if e.name.starts_with('.')
                    && e.name.ends_with(".tmp")
                    && e.name.contains(HELD_INFIX)
                {
                    return (e.age_secs > ORPHAN_GRACE.as_secs()).then(|| self.ready.join(&e.name));
                }
                let mark = (e.name.rsplit_once(HELD_INFIX)).map(|(stem, _)| (SRC_SUFFIX, stem));
                let orphan = match [SUM_SUFFIX, SRC_SUFFIX, DONE_SUFFIX]
                    .into_iter()
                    .find_map(|s| Some((s, e.name.strip_suffix(s)?)))
                    .or(mark)?
                {
                    (_, stem) if parse_name(stem).is_none() => false,
                    (DONE_SUFFIX, _) => e.age_secs > DONE_KEEP.as_secs(),
                    (_, stem) => e.age_secs > ORPHAN_GRACE.as_secs() && !self.ready.has(stem),
                };
                orphan.then(|| self.ready.join(&e.name))
            })
            .collect()
    }

    /// The pusher's lock, taken without waiting; None when a pusher holds it.
    pub fn try_lock(&self) -> Result<Option<fs::File>> {
        (self.top.lock(LOCK))
            .with_context(|| format!("cannot lock '{}'", self.top.join(LOCK).display()))
    }

    /// Marks the spool as being written by this call until the file returned is dropped;
    /// None when another call marks it (or no mark can be made: it is a hint only).
    pub fn spooling(&self) -> Option<fs::File> {
        self.top.lock(SPOOLING).ok().flatten()
    }

    /// Waits, `max` at most, while a call copies files in: PostgreSQL waits on that
    /// call, an upload can wait, and on a busy host both compete for the cores (and the
    /// store's, when it runs on them).
    pub fn yield_to_spooling(&self, max: std::time::Duration) {
        let until = std::time::Instant::now() + max;
        while std::time::Instant::now() < until {
            match self.top.lock(SPOOLING) {
                // Free (released again at once), or no mark to read.
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        }
    }

    pub fn state(&self) -> Option<PusherState> {
        serde_json::from_slice(&self.top.read(STATE, STATE_MAX)?).ok()
    }

    /// Writes the pusher's state (informational: not synced).
    pub fn set_state(&self, s: &PusherState) {
        let body = serde_json::to_vec_pretty(s).unwrap_or_default();
        let _ = self.top.replace(STATE, &body);
    }

    /// The last spooled segment's summary, when there is one.
    pub fn last_summary(&self) -> Option<crate::repo::wal::summary::Summary> {
        let b = self
            .top
            .read(LAST_SUM, crate::repo::wal::summary::FILE_MAX)?;
        crate::repo::wal::summary::Summary::decode(&b).ok()
    }

    /// Opens the pusher's log to append (cut back to nothing past [`LOG_MAX`]).
    pub fn log(&self) -> Result<fs::File> {
        (self.top.append(LOG, LOG_MAX))
            .with_context(|| format!("cannot open the log '{}'", self.top.join(LOG).display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_summary_written_just_before_its_segment_is_no_orphan() {
        let d = tempfile::tempdir().unwrap();
        let sp = Spool::open(d.path()).unwrap();
        let seg = "000000010000000000000003";
        let sum = sp.ready().join(format!("{seg}.sum"));
        let src = sp.ready().join(format!("{seg}.src"));
        std::fs::write(&sum, b"s").unwrap();
        std::fs::write(&src, b"i").unwrap();
        assert!(sp.orphan_summaries().is_empty());
        // Left behind by a push that never put its segment in place.
        let old = std::time::SystemTime::now() - ORPHAN_GRACE - Duration::from_secs(5);
        for p in [&sum, &src] {
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(old).unwrap();
        }
        let mut orphans = sp.orphan_summaries();
        orphans.sort();
        assert_eq!(orphans, [src.clone(), sum.clone()]);
        // So are a repository's mark and a mark's temp file a killed pusher left.
        let mark = sp.ready().join(held_name(seg, "0123456789abcdef"));
        let tmp = sp
            .ready()
            .join(format!(".{seg}.in-0123456789abcdef.77.tmp"));
        for p in [&mark, &tmp] {
            std::fs::write(p, b"m").unwrap();
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(old).unwrap();
        }
        let mut orphans = sp.orphan_summaries();
        orphans.sort();
        assert_eq!(
            orphans,
            [tmp.clone(), mark.clone(), src.clone(), sum.clone()]
        );
        std::fs::remove_file(&tmp).unwrap();
        // With its segment there, at any age, neither is.
        std::fs::write(sp.ready().join(seg), b"x").unwrap();
        assert!(sp.orphan_summaries().is_empty());
    }

    #[test]
    fn an_upload_waits_for_a_spooling_call_but_never_longer_than_asked() {
        let d = tempfile::tempdir().unwrap();
        let sp = Spool::open(d.path()).unwrap();
        let t = Instant::now();
        sp.yield_to_spooling(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1), "no call spools");
        let mark = sp.spooling().expect("the first call marks the spool");
        assert!(sp.spooling().is_none(), "a second call finds it marked");
        let t = Instant::now();
        sp.yield_to_spooling(Duration::from_millis(300));
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "waited while marked"
        );
        // The call ends while an upload waits: the upload goes at once.
        let waiter = std::thread::spawn({
            let sp = Spool::open(d.path()).unwrap();
            move || {
                let t = Instant::now();
                sp.yield_to_spooling(Duration::from_secs(30));
                t.elapsed()
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(mark);
        let waited = waiter.join().unwrap();
        assert!(
            waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // A link planted as the lock is never followed: no file is made through it.
        let victim = d.path().join("victim");
        fs::remove_file(d.path().join(SPOOLING)).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join(SPOOLING)).unwrap();
        assert!(sp.spooling().is_none() && !victim.exists());
        sp.yield_to_spooling(Duration::from_secs(5));
        assert!(!victim.exists());
    }
}
