//! The restore use case: chooses the chain of sets (a full, differentials and
//! incrementals), opens every set and checks the log chain recovery will need, writes
//! the files into the target in one pass (chain.rs), checks every file against its
//! manifest checksum, and hands the rest to the source's [`Restorer`].

mod by_wal;
mod chain;
mod checks;
mod command;
mod only;
mod recovery;
mod replace;
pub(crate) mod wal;

use super::verify::{engine_params, ReadOptions, Show};
use crate::device::object::{retry_stats, RetryStats};
use crate::engine::restore::merge::ChunkOut;
use crate::engine::restore::{self, FileIn, FrameSink};
use crate::engine::stats::{Progress, WaitStats};
use crate::format::manifest::{BackupType, EntryKind, Manifest};
use crate::format::Codec;
use crate::report;
use crate::set::read::OpenSet;
use crate::source::{Recovery, Restorer};
use crate::target::{self, Target};
use crate::units::mb_per_sec;
use anyhow::{anyhow, Context, Result};
pub use chain::{chain_repository, LinkReport};
use chain::{open_sets, Sets};
use checks::{check_and_probe, check_same_cluster};
pub use command::ConfigRef;
pub(crate) use command::{restore_command, restore_command_with};
pub use only::{LeftOut, LeftOutDb};
pub use recovery::ArchiveMode;
use serde::Serialize;
use serde_json::json;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use wal::WalCheck;
pub use wal::CHECK_WAL;

#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    pub read: ReadOptions,
    /// Directory to restore into; it must be empty or missing unless `replace`.
    pub to: PathBuf,
    /// Delete what the target holds and restore over it.
    pub replace: bool,
    /// Restore over what the target holds, writing only what differs from the set.
    pub delta: bool,
    /// With `delta`: only the pages the WAL says can differ are written (PostgreSQL).
    pub delta_wal: bool,
    /// `--delta` over a data directory of another cluster (PostgreSQL).
    pub force: bool,
    /// Recovery targets (PostgreSQL): time, LSN, transaction id, restore point.
    pub until: Option<String>,
    pub until_lsn: Option<String>,
    pub until_xid: Option<String>,
    pub until_name: Option<String>,
    /// The timeline to recover along (default: the newest the archive knows).
    pub timeline: Option<TimelineTarget>,
    /// What the server does at the recovery target (default: promote).
    pub target_action: Option<TargetAction>,
    /// Check only that each WAL file recovery needs is present, not its content.
    pub no_verify_wal: bool,
    /// Give the restored files to this user.
    pub owner: Option<String>,
    /// Tablespaces relocated: OID=DIR.
    pub tablespace_map: Vec<String>,
    /// Restore tablespaces not in `tablespace_map` to the locations the set names.
    pub tablespaces_from_set: bool,
    /// Write an HTML page with the run's timeline here.
    pub report: Option<PathBuf>,
    /// Only the set's files, for a merge to read back: no log chain check, recovery
    /// settings, owner or sync.
    pub stage_only: bool,
    /// Refuse a chain not of the cluster whose WAL the repository archives (or, with
    /// no WAL archived, whose other sets it holds), before anything is written.
    pub same_cluster: bool,
    /// PostgreSQL: restore only these databases (names or OIDs); the other databases'
    /// relation files are left out. The built-in ones are always restored.
    pub db_include: Vec<String>,
    /// PostgreSQL: leave these databases' relation files out.
    pub db_exclude: Vec<String>,
    /// PostgreSQL: start as a standby (standby.signal) that keeps replaying.
    pub standby: bool,
    /// PostgreSQL: the standby's primary_conninfo (it streams from that server).
    pub primary_conninfo: Option<String>,
    /// PostgreSQL: archive_mode off or kept (None: off unless --delta or --standby).
    pub archive_mode: Option<ArchiveMode>,
    /// PostgreSQL: KEY=VALUE lines for postgresql.auto.conf, written last.
    pub recovery_options: Vec<String>,
    /// Which writes skip the page cache.
    pub direct_writes: target::DirectWrites,
    /// Where archive-get reads each repository's own key and endpoint, for a
    /// restore_command over repositories that do not share them.
    pub config: Option<ConfigRef>,
    /// Writer threads (default: `default_write_depth`).
    pub write_depth: Option<usize>,
}

/// `--target-action`: PostgreSQL's recovery_target_action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetAction {
    /// Open for writes (end recovery).
    Promote,
    /// Stay in recovery, open for reads, until pg_wal_replay_resume().
    Pause,
    /// Stop the server; started again, it replays on.
    Shutdown,
}

impl std::str::FromStr for TargetAction {
    type Err = String;

    fn from_str(s: &str) -> Result<TargetAction, String> {
        match s {
            "promote" => Ok(TargetAction::Promote),
            "pause" => Ok(TargetAction::Pause),
            "shutdown" => Ok(TargetAction::Shutdown),
            _ => Err(format!("'{s}': give promote, pause or shutdown")),
        }
    }
}

impl TargetAction {
    /// Its recovery_target_action value (None: the default, promote).
    fn setting(self) -> Option<&'static str> {
        match self {
            TargetAction::Promote => None,
            TargetAction::Pause => Some("pause"),
            TargetAction::Shutdown => Some("shutdown"),
        }
    }
}

/// `--timeline`: PostgreSQL's recovery_target_timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineTarget {
    /// The newest timeline the archive holds a history file for.
    Latest,
    /// The timeline of the set's end (no switch followed).
    Current,
    Id(u32),
}

impl std::str::FromStr for TimelineTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<TimelineTarget, String> {
        match s {
            "latest" => Ok(TimelineTarget::Latest),
            "current" => Ok(TimelineTarget::Current),
            n => match n.parse::<u32>() {
                Ok(t) if t >= 1 => Ok(TimelineTarget::Id(t)),
                _ => Err(format!(
                    "'{n}' is not a timeline: give latest, current or a timeline number (1 or more)"
                )),
            },
        }
    }
}

impl TimelineTarget {
    /// The timeline recovery follows from a set ending on `set_tli`; None: the newest.
    pub fn id(self, set_tli: u32) -> Option<u32> {
        match self {
            TimelineTarget::Latest => None,
            TimelineTarget::Current => Some(set_tli),
            TimelineTarget::Id(t) => Some(t),
        }
    }

    /// Its recovery_target_timeline value.
    pub fn setting(self) -> String {
        match self {
            TimelineTarget::Latest => "latest".into(),
            TimelineTarget::Current => "current".into(),
            TimelineTarget::Id(t) => t.to_string(),
        }
    }
}

impl RestoreOptions {
    fn has_recovery_target(&self) -> bool {
        self.until.is_some()
            || self.timeline.is_some()
            || self.until_lsn.is_some()
            || self.until_xid.is_some()
            || self.until_name.is_some()
    }

    /// Writer threads for `threads` decompressors: none for a merge's copy (each
    /// decompressor writes its frames, in the order the merge feeds them on).
    pub(crate) fn write_depth(&self, threads: usize) -> usize {
        match self.stage_only {
            true => 0,
            false => self.write_depth.unwrap_or((2 * threads).max(4)),
        }
    }
}

/// What `restore --json` prints.
#[derive(Debug, Serialize)]
pub struct RestoreReport {
    pub command: &'static str,
    pub set_id: String,
    pub target: PathBuf,
    pub pages: u64,
    pub files: usize,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub frames: u64,
    pub seconds: f64,
    pub mb_per_sec: f64,
    pub pool_bytes: u64,
    /// Which writes went with O_DIRECT and why, and how many were in flight at most.
    pub writes: target::WriteReport,
    /// The full set taken from the repository (None with stripes named).
    pub set: Option<String>,
    /// What the restorer set up (PostgreSQL: recovery), one sentence each.
    pub postgres: Vec<String>,
    pub waits: WaitStats,
    pub phases: Phases,
    pub object_store: RetryStats,
    /// The log chain checked (PostgreSQL with a repository).
    pub wal: Option<serde_json::Value>,
    /// The sets restored, oldest first, and what each gave.
    pub chain: Vec<LinkReport>,
    /// The HTML page written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<PathBuf>,
    /// What `--delta` kept, rewrote, created and removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<target::DeltaReport>,
    /// `--delta wal`: what told the pages that can differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_wal: Option<by_wal::ByWal>,
    /// The databases `--db-include`/`--db-exclude` left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOut>,
    /// Stripes overwritten or deleted after their backup: read at the version the
    /// backup wrote all the same.
    pub overwritten: Vec<crate::set::read::Overwritten>,
    /// One sentence each: the overwritten stripes, and catalog records read at the
    /// version a later record names.
    pub warnings: Vec<String>,
    /// For the text summary.
    #[serde(skip)]
    pub database: String,
}

/// Wall time per step of a restore: what the pipeline's wait statistics do not cover
/// (creating files, making them durable) is often where a restore's time goes.
#[derive(Debug)]
pub struct Phases {
    last: Instant,
    list: Vec<Phase>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub phase: &'static str,
    pub seconds: f64,
}

impl Phases {
    pub fn start() -> Phases {
        Phases {
            last: Instant::now(),
            list: vec![],
        }
    }

    /// The time since the previous mark was spent on `name` (added up when it recurs).
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        let secs = (now - self.last).as_secs_f64();
        self.last = now;
        match self.list.iter_mut().find(|p| p.phase == name) {
            Some(p) => p.seconds += secs,
            None => self.list.push(Phase {
                phase: name,
                seconds: secs,
            }),
        }
    }

    /// Seconds from `start` to the last mark.
    pub fn total(&self) -> f64 {
        self.list.iter().map(|p| p.seconds).sum()
    }

    pub fn list(&self) -> &[Phase] {
        &self.list
    }
}

impl Serialize for Phases {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.list.serialize(s)
    }
}

/// Left in the target while a restore runs: its presence says the target is incomplete.
pub const MARKER: &str = ".pagevault-restore-incomplete";

/// Restores a set (or the chain ending at the newest set before the target) into `o.to`.
pub fn restore(o: &RestoreOptions, show: Show) -> Result<RestoreReport> {
    restore_with(o, show, None)
}

/// A merge's restore (with `stage_only`): the newer sets of the chain are restored
/// into `o.to`, and every chunk of the result goes to `out`, the full's with the newer
/// pages put in (`engine::restore::merge`).
pub fn restore_merged(o: &RestoreOptions, show: Show, out: &dyn ChunkOut) -> Result<RestoreReport> {
    restore_with(o, show, Some(out))
}

fn restore_with(
    o: &RestoreOptions,
    show: Show,
    merge: Option<&dyn ChunkOut>,
) -> Result<RestoreReport> {
    let retries = retry_stats();
    // From the start: opening and checking are the restore's time too.
    let mut phases = Phases::start();
    let sets = open_sets(o)?;
    if o.same_cluster {
        check_same_cluster(&sets)?;
    }
    let overwritten: Vec<_> = (sets.links.iter())
        .flat_map(|l| l.set.overwritten.iter().cloned())
        .collect();
    let full = &sets.full().manifest;
    // The restored cluster is the newest set's: its files, sizes, links and facts.
    let m = &sets.newest().set.manifest;
    // Read before the sweep, alongside the checks and the restore_command's trial (the
    // copy's pg_wal tells what it changed); only read, and dropped if a check fails.
    let (checked, wal_plan) = std::thread::scope(|s| {
        let plan = (o.delta && o.delta_wal)
            .then(|| s.spawn(|| by_wal::plan(&o.to, sets.repo.as_ref(), m)));
        let checked = check_and_probe(o, &sets, show);
        let plan = plan.map(|p| p.join().expect("the delta's plan panicked"));
        (checked, plan)
    });
    let (mut restorer, wal_check, owner) = checked?;
    let wal_plan = wal_plan.transpose()?;
    let mut left_out = LeftOut::choose(&o.db_include, &o.db_exclude, m)?;
    restorer.plan(&m.extra)?;
    restorer.check_places(o.delta)?;
    phases.mark("open and check");
    let progress = Arc::new(Progress::default());
    // The timeline spans the writing, from the target's preparation on.
    let sampler = o
        .report
        .as_ref()
        .map(|_| report::Sampler::start(progress.live.clone()));
    let how = match (o.replace, o.delta) {
        (_, true) => target::Prepare::Keep,
        (true, _) => target::Prepare::Replace,
        _ => target::Prepare::Empty,
    };
    let mode_before = target::prepare(&o.to, how)?;
    restorer.claim_places(o.delta)?;
    let place = |rel: &str| restorer.place(&o.to, rel);
    let marker = o.to.join(MARKER);
    if o.delta {
        // One an interrupted delta restore left (a link planted there goes, not its target).
        match fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
        .with_context(|| format!("cannot remove '{}'", marker.display()))?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .with_context(|| format!("cannot write in target '{}'", o.to.display()))?;
    phases.mark("prepare target");
    let incomplete = || match o.stage_only {
        // A staged copy is its caller's scratch, removed on failure.
        true => "restoring the chain failed".to_string(),
        false => format!(
            "restore failed; '{}' is incomplete (it holds {MARKER})",
            o.to.display()
        ),
    };
    let roots_list: Vec<PathBuf> = std::iter::once(o.to.clone())
        .chain(restorer.places())
        .collect();
    let swept = match o.delta {
        true => {
            let s = target::sweep(m, &place, &roots_list, &marker).with_context(incomplete)?;
            phases.mark("remove what the set does not hold");
            s
        }
        false => target::Swept::default(),
    };
    // What the sweep moved aside goes while the set is written; under `--delta wal` once
    // the data is in place, as its many small reads would each wait out the unlink of an
    // old WAL segment (bench/README).
    let trash = swept.trash.clone();
    let emptying =
        (!trash.is_empty() && wal_plan.is_none()).then(|| target::Emptying::start(trash.clone()));
    let roots = Arc::new(target::Roots::open(roots_list)?);
    let mut files = target::lay_out(m, &place, o.delta, roots.clone())?;
    if let Some(p) = &wal_plan {
        files.by_wal(m, crate::pg::page::BLCKSZ as u64, |path, size| {
            p.pages(path, size)
        });
    }
    if let Some(l) = &left_out {
        files.keep_sparse(l.ids(m));
    }
    let mut target = Target::new(files, o.direct_writes);
    if o.stage_only {
        target = target.without_writeback();
    }
    let written = chain::write_chain(
        &sets,
        o,
        left_out.as_ref(),
        &target,
        merge,
        &progress.live,
        show,
        &mut phases,
    );
    let mut delta = target.files.delta_report(swept);
    let threads = (o.read.threads).unwrap_or_else(crate::engine::default_threads);
    let writes = target.write_report(o.write_depth(threads));
    drop(target);
    let (out, links) = written.with_context(incomplete)?;
    if let Some(d) = &mut delta {
        d.stored_bytes_not_read = out.proven_bytes;
        d.frames_read_in_part = out.partial_frames;
    }
    if let Some(l) = &mut left_out {
        l.stored_bytes_not_read = out.left_out_bytes;
    }
    target::finish_entries(m, &place, &roots, owner.filter(|_| !o.stage_only))?;
    phases.mark("links, owners, modes, times");
    // What is left of it is not waited for: the caller removes it after the restore.
    let left = match emptying {
        Some(e) => e.stop(),
        None => Ok(trash),
    };
    if let Some(d) = &mut delta {
        d.still_removing = left.with_context(incomplete)?;
    }
    restorer.link(&o.to, owner)?;
    let mut notes = vec![];
    if !o.stage_only {
        // One syncfs makes every restored file durable before we say so.
        target::sync_fs(&o.to).with_context(incomplete)?;
        phases.mark("sync to disk");
        notes = finish(o, &sets, restorer.as_ref(), wal_check.as_ref())?;
        notes.extend(left_out.as_ref().map(LeftOut::note));
        if let Some((uid, gid)) = owner {
            target::chown_tree(&o.to, uid, gid)?;
        }
    }
    fs::remove_file(&marker)?;
    if let Some(mut b) = mode_before.filter(|_| owner.is_none()) {
        // Claimed while it was written; the directory the user gave gets its owner
        // back, and its mode (PostgreSQL's stays 0700: the server refuses others').
        if restorer.recovers() {
            b.mode = 0o700;
        }
        target::give_back(&o.to, b)?;
    }
    let series = sampler.map(report::Sampler::finish);
    phases.mark("recovery settings, owner");
    let secs = phases.total();
    let mut r = RestoreReport {
        command: "restore",
        set_id: full.set_id.clone(),
        target: o.to.clone(),
        pages: full.totals.pages,
        files: m.files.iter().filter(|f| f.kind == EntryKind::File).count(),
        raw_bytes: out.raw_bytes,
        stored_bytes: out.stored_bytes,
        frames: out.frames,
        seconds: secs,
        mb_per_sec: mb_per_sec(out.raw_bytes, secs),
        pool_bytes: out.pool_bytes,
        writes,
        set: sets.links[0].entry.as_ref().map(|c| c.set_id.clone()),
        postgres: notes,
        waits: out.waits,
        phases,
        object_store: retry_stats().since(retries),
        wal: wal_check.as_ref().map(WalCheck::json),
        chain: links,
        report: None,
        delta,
        delta_wal: wal_plan.map(|p| p.report),
        left_out,
        overwritten: overwritten.clone(),
        warnings: (overwritten.iter().map(|w| w.message.clone()))
            .chain(sets.repo.iter().flat_map(crate::repo::Repo::record_notes))
            .chain(sets.passed_over.iter().cloned())
            .chain(wal_check.iter().flat_map(WalCheck::warnings))
            .chain(stale_vm_warning(&sets))
            .chain(out.unneeded_damage.iter().map(|d| unneeded_warning(d)))
            .collect(),
        database: full.source.database.clone(),
    };
    if let (Some(path), Some(series)) = (&o.report, series) {
        let params = engine_params(&o.read, sets.full());
        write_report(path, series, &r, &sets, &params)?;
        r.report = Some(path.clone());
    }
    Ok(r)
}

/// Damage in a frame this restore read through but did not need: what it restored is
/// whole, the set is not.
fn unneeded_warning(d: &str) -> String {
    format!(
        "{d}: not needed by this restore (the target held those bytes, or their file is \
         left out), so what it restored is whole and checked; the set is damaged: run \
         `pagevault verify` on it and take a new backup"
    )
}

/// The chain's sets whose visibility maps may be stale, named once.
fn stale_vm_warning(sets: &Sets) -> Option<String> {
    let stale: Vec<&str> = (sets.links.iter())
        .filter(|l| {
            crate::ops::vm_may_be_stale(&l.set.manifest)
                || l.entry.as_ref().is_some_and(|e| e.vm_may_be_stale())
        })
        .map(|l| l.set.manifest.set_id.as_str())
        .collect();
    (!stale.is_empty()).then(|| {
        format!(
            "set(s) {} of this restore: {} (index-only scans may return deleted or old \
             rows; pg_visibility's pg_truncate_visibility_map on each table, then VACUUM, \
             rebuilds the maps)",
            stale.join(", "),
            crate::repo::STALE_VM
        )
    })
}

/// What the restorer writes after the files, and the notes of the summary.
fn finish(
    o: &RestoreOptions,
    sets: &Sets,
    restorer: &dyn Restorer,
    wal_check: Option<&WalCheck>,
) -> Result<Vec<String>> {
    if !restorer.recovers() {
        return restorer.finish(&o.to, &sets.full().manifest.extra, &no_recovery());
    }
    let rec = recovery::settings(o, sets)?;
    // Facts of the newest set applied: its backup_label starts recovery.
    let last = &sets.newest().set.manifest;
    let mut notes = restorer.finish(&o.to, &last.extra, &rec)?;
    if let Some(w) = wal_check {
        notes.push(w.note());
    }
    if sets.links.len() > 1 {
        let names: Vec<String> = (sets.links.iter())
            .map(|l| {
                let m = &l.set.manifest;
                let what = match m.backup_type {
                    BackupType::Full => "full",
                    BackupType::Diff => "differential",
                    BackupType::Incr => "incremental",
                };
                format!("{what} {}", m.set_id)
            })
            .collect();
        notes.push(format!(
            "a chain of {} sets restored in one pass, each page from the newest set holding it: {}",
            names.len(),
            names.join(", ")
        ));
    }
    Ok(notes)
}

fn no_recovery() -> Recovery {
    Recovery::default()
}

/// The HTML page of `--report`: the run's configuration, its summary and timeline.
fn write_report(
    path: &Path,
    series: report::Series,
    r: &RestoreReport,
    sets: &Sets,
    params: &restore::Params,
) -> Result<()> {
    // Read newest set first.
    let mut read_names: Vec<String> = vec![];
    for (i, d) in (sets.links.iter().rev()).flat_map(|l| l.set.stripes.iter().enumerate()) {
        match read_names.get_mut(i) {
            Some(n) => *n = format!("{n}, then {}", d.name),
            None => read_names.push(d.name.clone()),
        }
    }
    let summary = serde_json::to_value(r)?;
    let page = report::Report {
        command: "restore",
        config: json!({
            "from": read_names,
            "target": r.target,
            "buffer_count": params.buffer_count,
            "transfer_size": params.transfer_size,
            "block_size": params.block_size,
            "threads": params.threads,
            "codec": sets.full().manifest.codec,
        }),
        summary: &summary,
        series,
        read_names,
        write_names: vec![format!("target {}", r.target.display())],
    };
    report::write(path, &page)
}

/// Whether a set's files are best created alongside its pipeline: where its frames
/// cost the CPU little (stored as they are, or lz4) the writes wait for the disk, and
/// creating files first would leave the disk idle meanwhile. zstd keeps the CPU busy,
/// and its files are created first.
fn create_alongside(m: &Manifest) -> bool {
    m.codec == Codec::None.name() || m.codec == Codec::Lz4.name()
}

/// Runs the restore pipeline into `sink`, the files of `target` created alongside or
/// first, and marks the phases that took.
#[allow(clippy::too_many_arguments)]
fn run_into(
    set: &OpenSet,
    ids: &[FileIn],
    params: &restore::Params,
    target: &Target,
    sink: &dyn FrameSink,
    progress: &Progress,
    done: &restore::Done,
    phases: &mut Phases,
) -> Result<restore::Outcome> {
    if !create_alongside(&set.manifest) {
        target.files.create_first(params.threads)?;
        phases.mark("create files");
        let out = restore::run(&set.stripes, ids, params, Some(sink), progress, done);
        phases.mark("read, check and write");
        return out;
    }
    phases.mark("create directories");
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let creator = s.spawn(|| target.files.create_all(&stop));
        let out = restore::run(&set.stripes, ids, params, Some(sink), progress, done);
        if out.is_err() {
            stop.store(true, Relaxed);
        }
        let made = creator.join().expect("file creation panicked");
        let out = out?;
        made.map_err(|e| anyhow!(e))?;
        Ok(out)
    });
    phases.mark("create files, read, check and write");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_serialise_as_a_list() {
        let mut p = Phases::start();
        p.mark("a");
        p.mark("b");
        p.mark("a");
        assert_eq!(p.list().len(), 2);
        assert!((p.total() - p.list().iter().map(|x| x.seconds).sum::<f64>()).abs() < 1e-12);
        let j = serde_json::to_value(&p).unwrap();
        assert_eq!(j[0]["phase"], "a");
        assert_eq!(j[1]["phase"], "b");
    }

    #[test]
    fn recovery_targets_are_seen() {
        assert!(!RestoreOptions::default().has_recovery_target());
        let o = RestoreOptions {
            timeline: Some(TimelineTarget::Id(2)),
            ..RestoreOptions::default()
        };
        assert!(o.has_recovery_target());
    }
}
