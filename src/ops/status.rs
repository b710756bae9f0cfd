//! `status`: what a repository holds and how fresh it is, for a DBA and for monitoring:
//! the age of the newest full, differential and incremental set and of the newest
//! archived WAL segment, the recovery window, damaged sets and archived segments, the
//! repository's size and, with a source, how far archiving lags behind the server;
//! backups running now and their percent complete.

use super::expire::plan::window_start;
use crate::format::manifest::BackupType;
use crate::pg::{self, Kind};
use crate::repo::{wal, CatalogEntry, Repo};
use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Debug, Clone, Default)]
pub struct StatusOptions {
    pub repo: String,
    /// A PostgreSQL source (`postgres://...`): the archiving lag is measured against it.
    pub source: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
    /// The spool of `archive-push --async`, if any: its backlog and its pusher's state.
    pub spool: Option<std::path::PathBuf>,
    pub store: crate::device::object::StoreOptions,
}

/// The newest set of one type.
#[derive(Debug, Clone, Serialize)]
pub struct Newest {
    pub set_id: String,
    pub finished: String,
    pub age_seconds: f64,
}

/// What `status --json` prints.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusReport {
    pub command: &'static str,
    pub repo: String,
    /// The repository could be opened and read; when not, `errors` says why and the
    /// other fields are empty.
    pub repository_up: bool,
    /// What could not be read (the repository, the source's position, the spool), one
    /// sentence each: a status with errors is incomplete.
    pub errors: Vec<String>,
    /// An immutable repository's retention, seconds (None: not immutable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub immutable_retain_seconds: Option<u64>,
    pub now: String,
    pub sets: usize,
    /// Sets recorded as damaged (`--continue-after-error`): they restore with errors.
    pub damaged_sets: Vec<String>,
    /// Sets whose restore may hold stale visibility maps (taken with change-tracking
    /// rules before 2, or built on such a set): take a new full backup.
    pub stale_vm_sets: Vec<String>,
    pub newest_full: Option<Newest>,
    pub newest_diff: Option<Newest>,
    pub newest_incr: Option<Newest>,
    pub newest_full_age_seconds: Option<f64>,
    /// The newest set of any type.
    pub newest_backup_age_seconds: Option<f64>,
    pub wal_files: usize,
    pub newest_wal: Option<String>,
    pub newest_wal_age_seconds: Option<f64>,
    /// Archived segments whose records could not be decoded when pushed: a recovery
    /// replaying one stops there (`wal/damaged/`).
    pub damaged_wal: Vec<wal::damaged::Damaged>,
    /// The oldest point a restore can reach to any later point (the end of the oldest
    /// full set that is not damaged and whose WAL the archive holds from its start on,
    /// as `expire` keeps it) and the newest (the newest archived WAL segment's storing, else the
    /// newest set's end).
    pub recovery_window_start: Option<String>,
    pub recovery_window_end: Option<String>,
    pub repository_bytes: u64,
    /// With a source: bytes of WAL the server wrote past the end of the newest segment
    /// archived on its timeline.
    pub wal_archive_lag_bytes: Option<u64>,
    /// With a spool: what waits there for the repository, and the pusher's last error.
    pub spool: Option<SpoolStatus>,
    /// The newest `drill` the repository records.
    pub last_drill: Option<super::drill::record::LastDrill>,
    /// Backups writing into the repository now (SQL Server's percent_complete).
    pub running: Vec<RunningBackup>,
    /// Progress records left by backups that are gone (killed, or their host down).
    pub stale_running: Vec<StaleRunning>,
}

/// A backup running now, from its progress record (`running/SET.json`).
#[derive(Debug, Clone, Serialize)]
pub struct RunningBackup {
    pub id: String,
    pub kind: BackupType,
    pub started: String,
    pub updated: String,
    pub percent_complete: f64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub pid: i32,
    pub host: String,
}

/// A progress record whose backup is gone, and why it is taken as stale.
#[derive(Debug, Clone, Serialize)]
pub struct StaleRunning {
    pub record: String,
    pub id: Option<String>,
    pub pid: Option<i32>,
    pub host: Option<String>,
    pub why: String,
    /// Its process is gone from this host: the next backup here removes the record.
    pub dead: bool,
}

fn running(repo: &Repo, now: DateTime<Utc>) -> Result<(Vec<RunningBackup>, Vec<StaleRunning>)> {
    use super::backup::running::{list, Found};
    let (mut live, mut stale) = (vec![], vec![]);
    for f in list(repo, now)? {
        match f {
            Found::Live(r) => live.push(RunningBackup {
                percent_complete: r.percent(),
                id: r.set_id,
                kind: r.kind,
                started: r.started,
                updated: r.updated,
                bytes_done: r.bytes_done,
                bytes_total: r.bytes_total,
                pid: r.pid,
                host: r.host,
            }),
            Found::Stale {
                name,
                record,
                why,
                dead,
            } => stale.push(StaleRunning {
                record: name,
                id: record.as_ref().map(|r| r.set_id.clone()),
                pid: record.as_ref().map(|r| r.pid),
                host: record.map(|r| r.host),
                why,
                dead,
            }),
        }
    }
    Ok((live, stale))
}

#[derive(Debug, Clone, Serialize)]
pub struct SpoolStatus {
    pub dir: String,
    pub files: u64,
    pub bytes: u64,
    pub oldest: Option<String>,
    pub pusher_last_pushed: Option<String>,
    pub pusher_error: Option<String>,
    pub pusher_failing_seconds: Option<u64>,
    /// With several repositories: what of the spool this one lacks (the pusher's error
    /// above is then its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lacks: Option<super::archive::spool::Backlog>,
}

pub(crate) fn spool_status(dir: &std::path::Path) -> Result<SpoolStatus> {
    use super::archive::spool::{unix_now, Spool};
    let Some(sp) = Spool::inspect(dir)? else {
        anyhow::bail!(
            "'{}' is not a spool of archive-push --async (it has no ready/ directory)",
            dir.display()
        );
    };
    let b = sp.backlog()?;
    let st = sp.state().unwrap_or_default();
    Ok(SpoolStatus {
        dir: dir.display().to_string(),
        files: b.files,
        bytes: b.bytes,
        oldest: b.oldest,
        pusher_last_pushed: st.last_pushed,
        pusher_error: st.last_error,
        pusher_failing_seconds: st.failing_since.map(|t| unix_now().saturating_sub(t)),
        lacks: None,
    })
}

/// Narrows `sp` to repository `spec` of several: what it lacks, its pusher's error.
fn spool_of_repo(sp: &mut SpoolStatus, spec: &str) -> Result<()> {
    use super::archive::spool::{repo_tag, unix_now, Spool};
    let Some(spool) = Spool::inspect(std::path::Path::new(&sp.dir))? else {
        return Ok(());
    };
    let tag = repo_tag(spec);
    sp.lacks = Some(spool.lacking(&tag)?);
    let st = spool.state().unwrap_or_default();
    if let Some(r) = st.repos.iter().find(|r| r.tag == tag) {
        sp.pusher_last_pushed = r.last_pushed.clone();
        sp.pusher_error = r.last_error.clone();
        sp.pusher_failing_seconds = r.failing_since.map(|t| unix_now().saturating_sub(t));
    }
    Ok(())
}

fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> f64 {
    (now - t).num_milliseconds().max(0) as f64 / 1000.0
}

fn when(e: &CatalogEntry) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&e.finished)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The status; what cannot be read is in its `errors` (a repository that cannot be
/// read makes `repository_up` false), so a monitor is never left without an answer.
pub fn status(o: &StatusOptions) -> Result<StatusReport> {
    let now = super::now()?;
    let (mut r, segments) = match of_repository(o, now) {
        Ok(x) => x,
        Err(e) => {
            let r = StatusReport {
                command: "status",
                repo: o.repo.clone(),
                now: now.to_rfc3339(),
                errors: vec![format!("the repository cannot be read: {e:#}")],
                ..Default::default()
            };
            (r, None)
        }
    };
    if let Some(url) = &o.source {
        match &segments {
            Some(segs) => match archive_lag(url, o.password_file.as_deref(), segs) {
                Ok(l) => r.wal_archive_lag_bytes = Some(l),
                Err(e) => r
                    .errors
                    .push(format!("the archiving lag cannot be measured: {e:#}")),
            },
            None => r
                .errors
                .push("the archiving lag is not measured: the repository cannot be read".into()),
        }
    }
    if let Some(dir) = &o.spool {
        match spool_status(dir) {
            Ok(sp) => r.spool = Some(sp),
            Err(e) => r.errors.push(format!("the spool cannot be read: {e:#}")),
        }
    }
    Ok(r)
}

/// What the repository says, and the archived segments' names.
fn of_repository(
    o: &StatusOptions,
    now: DateTime<Utc>,
) -> Result<(StatusReport, Option<Vec<String>>)> {
    let repo = Repo::open(&o.repo, false, &o.store)?;
    let mut catalog = repo.catalog()?;
    catalog.sort_by_key(when);
    let newest = |ty: Option<BackupType>| {
        (catalog.iter().rev())
            .filter(|e| ty.is_none_or(|t| e.backup_type == t) && !e.damaged)
            .find_map(|e| {
                when(e).map(|t| Newest {
                    set_id: e.set_id.clone(),
                    finished: e.finished.clone(),
                    age_seconds: age(now, t),
                })
            })
    };
    let newest_full = newest(Some(BackupType::Full));
    let segments: Vec<String> = (wal::all_archived(&repo)?.into_iter())
        .map(|(n, _)| n)
        .filter(|n| pg::parse_name(n).is_some_and(|w| w.kind == Kind::Segment))
        .collect();
    let held: std::collections::HashSet<&str> = segments.iter().map(String::as_str).collect();
    let newest_wal = segments.last().cloned();
    // A marker whose segment is gone (an expire interrupted) says nothing any more.
    let damaged_wal: Vec<_> = (wal::damaged::list(&repo)?.into_iter())
        .filter(|d| held.contains(d.segment.as_str()))
        .collect();
    let wal_at = match &newest_wal {
        Some(n) => wal::archived_at(&repo, n)?.map(DateTime::<Utc>::from),
        None => None,
    };
    // As expire keeps it (ops::expire::plan::window_start).
    let oldest_full =
        window_start(&catalog, !segments.is_empty(), |n| held.contains(n)).and_then(when);
    let newest_any = catalog.iter().rev().filter(|e| !e.damaged).find_map(when);
    let repository_bytes = repo.store().list("")?.iter().map(|(_, n)| n).sum();
    let (running, stale_running) = running(&repo, now)?;
    let r = StatusReport {
        command: "status",
        repo: repo.describe(),
        repository_up: true,
        errors: vec![],
        immutable_retain_seconds: repo.immutable(),
        now: now.to_rfc3339(),
        sets: catalog.len(),
        damaged_sets: (catalog.iter())
            .filter(|e| e.damaged)
            .map(|e| e.set_id.clone())
            .collect(),
        stale_vm_sets: crate::repo::chain::stale_vm_sets(&catalog),
        newest_full_age_seconds: newest_full.as_ref().map(|n| n.age_seconds),
        newest_full,
        newest_diff: newest(Some(BackupType::Diff)),
        newest_incr: newest(Some(BackupType::Incr)),
        newest_backup_age_seconds: newest(None).map(|n| n.age_seconds),
        wal_files: segments.len(),
        newest_wal,
        newest_wal_age_seconds: wal_at.map(|t| age(now, t)),
        damaged_wal,
        recovery_window_start: oldest_full.map(|t| t.to_rfc3339()),
        recovery_window_end: wal_at.or(newest_any).map(|t| t.to_rfc3339()),
        repository_bytes,
        wal_archive_lag_bytes: None,
        spool: None,
        last_drill: super::drill::record::newest(&repo, now)?,
        running,
        stale_running,
    };
    Ok((r, Some(segments)))
}

/// Bytes the server at `url` wrote past the end of the newest segment the archive
/// holds on its timeline (all it wrote on that timeline when none).
fn archive_lag(
    url: &str,
    password_file: Option<&std::path::Path>,
    segments: &[String],
) -> Result<u64> {
    // A source's own `?pgdata=` is pagevault's, not the driver's.
    let (url, _) = crate::source::postgres::connect::split_pgdata(url);
    let conn = crate::source::postgres::connect::settle(
        &url,
        password_file,
        &crate::source::postgres::connect::Env::of_process(),
    )?;
    let mut c = conn.connect()?;
    let row = c
        .query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text, \
             (SELECT timeline_id FROM pg_control_checkpoint())::int8, (SELECT setting FROM pg_settings WHERE name = 'wal_segment_size')::int8",
            &[],
        )
        .map_err(|e| anyhow!("{}: {}", conn.location, crate::source::postgres::pg_err(&e)))?;
    let (lsn, tli, seg): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let lsn = pg::parse_lsn(&lsn).ok_or_else(|| anyhow!("the server gave a bad LSN '{lsn}'"))?;
    let archived_end = (segments.iter().rev())
        .filter_map(|n| pg::parse_segment_name(n, seg as u64))
        .find(|&(t, _)| t as i64 == tli)
        .map_or(0, |(_, segno)| (segno + 1) * seg as u64);
    Ok(lsn.saturating_sub(archived_end))
}

/// A repository behind the others in WAL: its newest archived segment older than the
/// newest any of them holds, or its archive not readable.
#[derive(Debug, Clone, Serialize)]
pub struct WalLag {
    pub repo: String,
    pub newest_wal: Option<String>,
    /// Why it lags, in a sentence.
    pub why: String,
}

/// `status` of several repositories: each one's, and which lag in WAL.
#[derive(Debug, Clone, Serialize)]
pub struct StatusOfAll {
    pub command: &'static str,
    pub repositories: Vec<StatusReport>,
    /// The newest segment any of them holds, and the first repository holding it.
    pub newest_wal: Option<String>,
    pub newest_wal_repo: Option<String>,
    pub wal_lagging: Vec<WalLag>,
}

/// Each repository's status, read at once, and the ones whose WAL lags: a segment name
/// orders by timeline and position, so the greatest is the newest.
pub fn status_of_all(
    o: &StatusOptions,
    repos: &[crate::repo::many::RepoStore],
) -> Result<StatusOfAll> {
    let specs = crate::repo::many::specs(repos);
    crate::repo::many::refuse_repeats(&specs)?;
    let mut reports: Vec<StatusReport> = std::thread::scope(|s| {
        let handles: Vec<_> = (repos.iter())
            .map(|r| {
                let o = StatusOptions {
                    repo: r.spec.clone(),
                    store: r.store.clone(),
                    ..o.clone()
                };
                s.spawn(move || status(&o))
            })
            .collect();
        (handles.into_iter())
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("its status panicked")))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    for (r, spec) in reports.iter_mut().zip(&specs) {
        if let Some(sp) = &mut r.spool {
            if let Err(e) = spool_of_repo(sp, spec) {
                r.errors.push(format!("the spool cannot be read: {e:#}"));
            }
        }
    }
    let newest = (reports.iter())
        .filter_map(|r| r.newest_wal.as_ref().map(|n| (n, &r.repo)))
        .fold(None::<(&String, &String)>, |best, (n, repo)| match best {
            Some((b, _)) if b >= n => best,
            _ => Some((n, repo)),
        });
    let mut wal_lagging = vec![];
    for r in &reports {
        let mut why: Vec<String> = vec![];
        match (&r.newest_wal, newest) {
            _ if !r.repository_up => why.push("its archive cannot be read".to_string()),
            (None, Some((n, by))) => why.push(format!("it holds no WAL; {by} holds up to {n}")),
            (Some(mine), Some((n, by))) if mine < n => why.push(format!(
                "its newest segment is {mine}; {by} holds up to {n}"
            )),
            _ => {}
        }
        // The spool keeps what it lacks: archived for PostgreSQL, not yet here.
        if let Some((sp, l)) = (r.spool.as_ref()).and_then(|sp| Some((sp, sp.lacks.as_ref()?))) {
            if l.files > 0 {
                why.push(format!(
                    "it lacks {} files ({}) the spool '{}' keeps for it, the oldest {}",
                    l.files,
                    crate::units::human(l.bytes),
                    sp.dir,
                    l.oldest.as_deref().unwrap_or("-")
                ));
                if let (Some(e), Some(secs)) = (&sp.pusher_error, sp.pusher_failing_seconds) {
                    why.push(format!("pushes into it have failed for {secs} s: {e}"));
                }
            }
        }
        if why.is_empty() {
            continue;
        }
        let why = why.join("; ");
        wal_lagging.push(WalLag {
            repo: r.repo.clone(),
            newest_wal: r.newest_wal.clone(),
            why,
        });
    }
    Ok(StatusOfAll {
        command: "status",
        newest_wal: newest.map(|(n, _)| n.clone()),
        newest_wal_repo: newest.map(|(_, r)| r.clone()),
        repositories: reports,
        wal_lagging,
    })
}
