//! The local spool of `archive-push --async`:
//!
//! ```text
//! SPOOL/ready/NAME        a WAL file PostgreSQL handed over, durable, not yet in the repository
//! SPOOL/ready/NAME.sum    its block summary (a segment's), made as it was spooled
//! SPOOL/ready/NAME.src    the identity of the file it was copied from (device, inode, size,
//!                         times): PostgreSQL's call for that unchanged file needs no read
//! SPOOL/ready/NAME.done   that identity once the repository holds the file, until PostgreSQL
//!                         asks for it (or for an hour)
//! SPOOL/last.sum          the last spooled segment's summary: the next one continues it
//! SPOOL/pusher.lock       held (flock) by the pusher while it runs
//! SPOOL/pusher.json       the pusher's state: what waits, what it pushed, its last error
//! SPOOL/pusher.log        the pusher's output
//! ```
//!
//! A file leaves `ready/` only once the repository holds it durably (and its summary),
//! so a pusher killed at any point loses nothing: the next one pushes it again, and a
//! push of what the repository holds already is a no-op.

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
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
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

    /// Summaries and source identities whose WAL file is gone (a pusher stopped between
    /// the removals) for [`ORPHAN_GRACE`], and identities of stored files PostgreSQL has
    /// not asked for in [`DONE_KEEP`]. A push writes a file's summary and identity before
    /// it puts the file in place: one written just now is not an orphan.
    pub fn orphan_summaries(&self) -> Vec<PathBuf> {
        use crate::repo::wal::spooled::{DONE_SUFFIX, SRC_SUFFIX, SUM_SUFFIX};
        let files = self.ready.files().unwrap_or_default();
        files
            .into_iter()
            .filter_map(|e| {
                let orphan = match [SUM_SUFFIX, SRC_SUFFIX, DONE_SUFFIX]
                    .into_iter()
                    .find_map(|s| Some((s, e.name.strip_suffix(s)?)))?
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
