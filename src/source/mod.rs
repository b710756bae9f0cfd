//! Sources: what is backed up. A source lists its files (with the volume each
//! lives on) and brackets the read with whatever makes the copy consistent; its
//! [`Restorer`] knows how a set of it is put back.

pub mod files;
pub mod postgres;
pub mod postgres_restore;
pub mod sqlite;
pub mod staged;

use crate::engine::backup::ChunkFilter;
use crate::engine::Abort;
use crate::format::manifest::SourceKind;
use crate::format::manifest::{EntryKind, Manifest, SourceInfo};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct SourceFile {
    /// Path inside the backup set ('/'-separated, relative).
    pub rel_path: String,
    pub abs_path: crate::engine::backup::FilePath,
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    pub mtime: i64,
    /// Device id of the volume holding the file.
    pub dev: u64,
    pub missing_ok: bool,
    pub link_target: Option<Box<str>>,
}

pub trait Source {
    fn info(&self) -> SourceInfo;
    fn page_size(&self) -> u32;
    /// Makes the source ready to be read consistently and lists what to read.
    fn prepare(&mut self) -> Result<Vec<SourceFile>>;
    /// Ends the backup on the source side: facts for the manifest, and files that
    /// exist only now (the WAL written during the backup), read in a second pass.
    fn finish(&mut self, ok: bool) -> Result<Finish>;
    /// PostgreSQL: the WAL segment holding the backup's start (its name and bytes), as
    /// the server had written it up to the start, the rest zeroed; once, after
    /// `prepare`. None when not read (then the segment is ended and archived instead).
    fn start_wal_head(&mut self) -> Option<(String, Vec<u8>)> {
        None
    }
    /// What the user should know of how the source was reached (a password file
    /// ignored), once prepared; the set is good all the same.
    fn warnings(&self) -> Vec<String> {
        vec![]
    }
    /// What the source knows of itself once prepared (the manifest's extra map so far).
    fn facts(&self) -> Extra {
        Extra::new()
    }
    /// The run to stop if the source fails while it is read (a server that goes
    /// away); given before `prepare`.
    fn abort_with(&mut self, _abort: Arc<Abort>) {}
    /// Waits for what makes the set restorable beyond its files (PostgreSQL: the
    /// archive reaching the stop segment); called once the late files are stored.
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
    /// Chunks sent in place of reading the entries' files (a merge's).
    fn feed(&self) -> Option<&dyn crate::engine::backup::Feed> {
        None
    }
    /// A check run on every chunk read (page checksums); ids are entry indexes.
    fn filter(&self, _entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        None
    }
}

/// Most threads `stat_all` runs.
const STAT_THREADS: usize = 16;

/// lstat of every path, in order; many at once: a sequential walk of a cold tree waits
/// for its inodes to be read from the device one at a time.
pub(crate) fn stat_all(paths: &[&Path]) -> Vec<std::io::Result<std::fs::Metadata>> {
    let threads = paths.len().div_ceil(64).min(STAT_THREADS);
    crate::par::map_index(paths.len(), threads, |i| {
        std::fs::symlink_metadata(paths[i])
    })
}

/// One lstat result slot of `stat_into`.
pub(crate) type StatSlot = std::sync::OnceLock<std::io::Result<std::fs::Metadata>>;

/// lstat of `path(i)` for every `i` in `0..n`, as `stat_all`, into `out[i]` (grown to `n`
/// when shorter). A walk passes the same slots for every batch: fresh ones each time (a
/// few hundred KiB) would leave holes among the small strings it keeps, and the heap
/// would grow by most of a batch's slots every batch.
pub(crate) fn stat_into<'a>(
    n: usize,
    path: impl Fn(usize) -> &'a Path + Sync,
    out: &mut Vec<StatSlot>,
) {
    if out.len() < n {
        out.resize_with(n, StatSlot::new);
    }
    let threads = n.div_ceil(64).min(STAT_THREADS);
    let slots = &out[..n];
    crate::par::each_index(n, threads, |i| {
        let _ = slots[i].set(std::fs::symlink_metadata(path(i)));
    });
}

#[derive(Default)]
pub struct Finish {
    pub extra: BTreeMap<String, serde_json::Value>,
    pub late: Vec<SourceFile>,
}

pub struct Options {
    pub page_size: u32,
    pub spool: Option<PathBuf>,
    pub pgdata: Option<PathBuf>,
    pub label: String,
    pub continue_after_error: bool,
    pub archive_timeout: u64,
    /// Set for a differential backup of a PostgreSQL source.
    pub base: Option<postgres::DiffBase>,
    /// PostgreSQL: a file whose first line is the password (--password-file).
    pub password_file: Option<PathBuf>,
    /// PostgreSQL: the primary of a standby source (--primary).
    pub primary: Option<String>,
    /// PostgreSQL: whether the archive the set restores from holds a WAL file by name;
    /// the wait at the backup's end ends as soon as it does, even before the archiver
    /// marks it done (an archive_command that goes on to other tools).
    pub archived: Option<postgres::Archived>,
}

/// Parses a SOURCE argument: `files:PATH`, `sqlite:PATH` or `postgres://...`.
pub fn parse(spec: &str, opts: &Options) -> Result<Box<dyn Source>> {
    let postgres = spec.starts_with("postgres://") || spec.starts_with("postgresql://");
    if opts.password_file.is_some() && !postgres {
        bail!("--password-file is for postgres:// sources");
    }
    if opts.primary.is_some() && !postgres {
        bail!("--primary is for postgres:// sources (a standby)");
    }
    match spec.split_once(':') {
        Some(("files", path)) if !path.is_empty() => {
            Ok(Box::new(files::Files::new(path.into(), opts.page_size)))
        }
        Some(("sqlite", path)) if !path.is_empty() => Ok(Box::new(sqlite::Sqlite::new(
            path.into(),
            opts.spool.clone(),
        ))),
        _ if postgres => {
            let mut pg = postgres::Postgres::new(
                spec,
                opts.pgdata.clone(),
                opts.label.clone(),
                opts.password_file.as_deref(),
            )?;
            pg.continue_after_error = opts.continue_after_error;
            pg.archive_timeout = opts.archive_timeout;
            pg.base = opts.base.clone();
            pg.archived = opts.archived.clone();
            pg.primary = (opts.primary.as_deref())
                .map(|url| pg.primary_conn(url, opts.password_file.as_deref()))
                .transpose()?;
            Ok(Box::new(pg))
        }
        _ => bail!("unknown source '{spec}': use files:PATH, sqlite:PATH or postgres://USER@HOST:PORT/DB?pgdata=DIR"),
    }
}

/// A manifest's source facts (`Manifest::extra`).
pub use crate::pg::facts::Extra;

/// What recovery a restored data directory is set up for.
#[derive(Default)]
pub struct Recovery {
    /// `restore_command` fetching WAL from the repository's archive.
    pub restore_command: Option<String>,
    /// `recovery_target_*` setting name and value (time, lsn, xid, name).
    pub target: Option<(&'static str, String)>,
    /// `recovery_target_timeline`: latest, current or a number (None: PostgreSQL's
    /// default, the latest).
    pub timeline: Option<String>,
    /// `recovery_target_action` at the target: pause or shutdown (None: promote).
    pub action: Option<&'static str>,
    /// Start as a standby (`standby.signal`) instead of recovering to the end.
    pub standby: bool,
    /// `primary_conninfo` of a standby that streams.
    pub primary_conninfo: Option<String>,
    /// `archive_mode = off` written, and why (None: the set's setting kept).
    pub archive_off: Option<String>,
    /// `--recovery-option` settings, written last: they win over the lines above.
    pub options: Vec<(String, String)>,
}

/// How a set of a source is put back. The restore use case calls, in order:
/// `check_target`, `plan`, `place` for every path, `link`, then `finish`.
pub trait Restorer {
    /// Whether the set replays a log: recovery targets (--until*, --timeline) and the
    /// WAL archive apply.
    fn recovers(&self) -> bool {
        false
    }
    /// Refuses a target that must not be written (before anything is).
    fn check_target(&self, _to: &Path) -> Result<()> {
        Ok(())
    }
    /// Refuses a set whose entries the restore must not create as they are (before
    /// anything is written).
    fn check_entries(&self, _m: &Manifest) -> Result<()> {
        Ok(())
    }
    /// A delta restore's target, which holds something: refused unless it is what the
    /// set restores (PostgreSQL: a data directory of the set's cluster, or any with
    /// `force`). `extra`: the set's source facts.
    fn check_delta_target(&self, _to: &Path, _extra: &Extra, _force: bool) -> Result<()> {
        Ok(())
    }
    /// Settles where the set's paths go, from its source facts.
    fn plan(&mut self, _extra: &Extra) -> Result<()> {
        Ok(())
    }
    /// Refuses places outside the target that already hold something (after `plan`,
    /// before anything is written); with `keep` (a delta restore), those that hold
    /// something other than what the set restores there.
    fn check_places(&self, _keep: bool) -> Result<()> {
        Ok(())
    }
    /// Makes the places outside the target private to this process before anything
    /// is written there (after `check_places`, once the target is prepared); `keep`
    /// (a delta restore) keeps what they hold.
    fn claim_places(&mut self, _keep: bool) -> Result<()> {
        Ok(())
    }
    /// Where a set path is restored.
    /// The directories outside the target that `place` puts files in (claimed).
    fn places(&self) -> Vec<PathBuf> {
        vec![]
    }

    fn place(&self, to: &Path, rel: &str) -> PathBuf {
        to.join(rel)
    }
    /// After links, modes and times, before the target is synced: what lives
    /// outside the target (PostgreSQL: tablespace directories and their links).
    fn link(&self, _to: &Path, _owner: Option<(u32, u32)>) -> Result<()> {
        Ok(())
    }
    /// After the files are durable: what makes the copy usable; notes for the summary.
    fn finish(&self, _to: &Path, _extra: &Extra, _rec: &Recovery) -> Result<Vec<String>> {
        Ok(vec![])
    }
}

/// Files and SQLite: the files as they were, under the target.
pub struct Plain;

impl Restorer for Plain {}

/// The restorer for a set of source `kind` (the manifest's `source.kind`).
/// The restorer of a source kind; `set_locations` accepts the locations outside the
/// target that the set names (PostgreSQL tablespaces not in `tablespace_map`).
pub fn restorer(
    kind: SourceKind,
    tablespace_map: &[String],
    set_locations: bool,
) -> Box<dyn Restorer> {
    match kind {
        SourceKind::Postgres => Box::new(postgres_restore::PgRestorer::new(
            tablespace_map,
            set_locations,
        )),
        SourceKind::Files | SourceKind::Sqlite => Box::new(Plain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sources_restore_under_the_target() {
        for kind in [SourceKind::Files, SourceKind::Sqlite] {
            let mut r = restorer(kind, &["1=/x".to_string()], false);
            assert!(!r.recovers());
            r.plan(&Extra::new()).unwrap();
            assert_eq!(
                r.place(Path::new("/t"), "pg_tblspc/1/a"),
                Path::new("/t/pg_tblspc/1/a")
            );
        }
        assert!(restorer(SourceKind::Postgres, &[], false).recovers());
    }

    #[test]
    fn stat_into_reuses_its_slots_batch_after_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths: Vec<PathBuf> = (0..300)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, vec![0u8; i]).unwrap();
                p
            })
            .collect();
        paths.insert(7, dir.path().join("missing"));
        let mut slots = Vec::new();
        let mut first = None;
        // A batch, a shorter one in the same slots, then a longer one: slots added.
        for (k, n) in [(0, 200), (200, 50), (50, 251)] {
            stat_into(n, |i| &paths[k + i], &mut slots);
            assert_eq!(slots.len(), n.max(200));
            if n <= 200 {
                assert_eq!(*first.get_or_insert(slots.as_ptr()), slots.as_ptr());
            }
            for (i, slot) in slots[..n].iter_mut().enumerate() {
                let got = slot.take().expect("every slot of the batch is set");
                match k + i {
                    7 => assert!(got.is_err(), "the missing path's own error"),
                    j => assert_eq!(got.unwrap().len(), (j - usize::from(j > 7)) as u64),
                }
            }
            assert!(slots.iter().all(|s| s.get().is_none()), "all taken");
        }
    }

    #[test]
    fn stat_all_keeps_the_order_and_reports_each_path_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths: Vec<PathBuf> = (0..1000)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, vec![0u8; i % 97]).unwrap();
                p
            })
            .collect();
        paths.insert(500, dir.path().join("missing"));
        let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let got = stat_all(&refs);
        assert_eq!(got.len(), 1001);
        for (i, m) in got.iter().enumerate() {
            match i.cmp(&500) {
                std::cmp::Ordering::Equal => assert!(m.is_err()),
                std::cmp::Ordering::Less => assert_eq!(m.as_ref().unwrap().len(), (i % 97) as u64),
                std::cmp::Ordering::Greater => {
                    assert_eq!(m.as_ref().unwrap().len(), ((i - 1) % 97) as u64)
                }
            }
        }
    }
}
