//! `drill`: proves a repository restores, end to end, and measures how long that takes.
//! The chain is restored into a scratch directory, PostgreSQL started there (archiving
//! off, a free loopback port), the archived WAL replayed to its newest point (or the
//! target given), pg_amcheck, the visibility-map check and the user's SQL run against
//! the result, the server stopped and the scratch removed. Reports restore and replay
//! seconds, the point reached and its lag behind the newest archived WAL or the target
//! (RPO), the whole time (RTO) and every check; the result is recorded in the
//! repository for `status`.

mod config;
pub mod record;
mod server;
mod visibility;

use super::check::Outcome;
use super::restore::{self, RestoreOptions, TimelineTarget};
use super::verify::{ReadOptions, Show};
use crate::pg::{self, Kind};
use crate::private_dir::PrivateDir;
use crate::repo::many::RepoStore;
use crate::repo::{wal, Repo};
use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use server::Server;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct DrillOptions {
    pub repo: String,
    pub set: Option<String>,
    pub until: Option<String>,
    pub until_lsn: Option<String>,
    pub until_xid: Option<String>,
    pub until_name: Option<String>,
    pub timeline: Option<TimelineTarget>,
    pub tablespace_map: Vec<String>,
    /// Restore here (an empty or new directory) instead of a new one under the temp dir.
    pub scratch: Option<PathBuf>,
    /// Leave the scratch directory (the restored cluster, its log) in place.
    pub keep: bool,
    /// The user the server runs as when root runs the drill.
    pub owner: Option<String>,
    pub pg_bin: Option<PathBuf>,
    pub port: Option<u16>,
    /// The role the checks connect as.
    pub db_user: String,
    pub sql: Option<PathBuf>,
    pub sql_db: String,
    pub timeout: Duration,
    pub threads: Option<usize>,
    pub store: crate::device::object::StoreOptions,
    /// The stanza's other repositories, after `repo`: the chain comes from the first
    /// holding it, as a restore takes it.
    pub fallback: Vec<RepoStore>,
    /// Repositories passed over before the drill (their key or settings refused), why.
    pub passed_over: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Outcome,
    pub detail: String,
}

/// What `drill --json` prints.
#[derive(Debug, Serialize)]
pub struct DrillReport {
    pub command: &'static str,
    pub repo: String,
    /// "ok" or "failed".
    pub outcome: &'static str,
    pub started: String,
    /// The set restored: the newest link of its chain (the one `--set` names).
    pub set_id: Option<String>,
    pub pg_major: Option<u32>,
    pub scratch: PathBuf,
    pub kept: bool,
    pub port: u16,
    pub restore_seconds: Option<f64>,
    pub replay_seconds: Option<f64>,
    /// From the start to the server's checks done: the recovery time measured.
    pub rto_seconds: f64,
    /// The lag of the point reached (the last transaction replayed) behind the point
    /// asked: without a recovery target (or with --timeline only), the newest archived
    /// segment's storing; with --until TIME, that time (recovery stops before it, so
    /// never negative). With --until-lsn, --until-xid or --until-name the target has no
    /// time the drill can read (it is in the record recovery stopped at, not replayed):
    /// None, as when either time is unknown; a server that promoted did reach the target
    /// (PostgreSQL 13 and later fail a recovery that ends before it).
    pub rpo_seconds: Option<f64>,
    /// What `rpo_seconds` is measured to: "newest_wal" or "target_time"; None with it.
    pub rpo_to: Option<&'static str>,
    pub reached_lsn: Option<String>,
    pub reached_time: Option<String>,
    pub newest_wal: Option<String>,
    pub newest_wal_archived: Option<String>,
    pub checks: Vec<Check>,
    /// The record written in the repository, or why none could be.
    pub recorded: Option<String>,
    pub record_error: Option<String>,
    /// The restore's warnings (stripes overwritten after their backup, read at the
    /// versions the backup wrote).
    pub warnings: Vec<String>,
    /// Over several repositories: why `repo` served (the first holding the chain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_because: Option<String>,
    /// The repositories passed over before the one that served, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<String>,
}

impl DrillReport {
    pub fn failed_checks(&self) -> Vec<&'static str> {
        (self.checks.iter())
            .filter(|c| c.status == Outcome::Fail)
            .map(|c| c.name)
            .collect()
    }
}

/// The scratch directory: made new (0700, the owner's), or an empty one given.
struct Scratch {
    dir: PathBuf,
    made: bool,
}

impl Scratch {
    fn prepare(given: Option<&Path>, ids: Option<(u32, u32)>) -> Result<Scratch> {
        let (dir, made) = match given {
            Some(d) if std::fs::symlink_metadata(d).is_ok() => {
                let pd = PrivateDir::open(d, "--scratch")?
                    .ok_or_else(|| anyhow!("--scratch '{}' went away", d.display()))?;
                let empty = (pd.is_empty())
                    .with_context(|| format!("--scratch '{}' cannot be listed", d.display()))?;
                if !empty {
                    bail!(
                        "--scratch '{}' is not empty: a drill restores only into an empty or new directory (never over a data directory)",
                        d.display()
                    );
                }
                (pd, false)
            }
            Some(d) => (PrivateDir::make(d, "the drill's scratch")?, true),
            None => (
                PrivateDir::make(
                    &std::env::temp_dir().join(format!("pagevault-drill-{}", uuid::Uuid::new_v4())),
                    "the drill's scratch",
                )?,
                true,
            ),
        };
        let dir = dir.path().to_path_buf();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::lchown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("cannot give '{}' to uid {uid}", dir.display()))?;
        }
        // The server's socket path must fit in sun_path.
        if dir.as_os_str().len() > 80 {
            bail!("scratch directory '{}' is too long a path for the server's socket (80 bytes at most)", dir.display());
        }
        Ok(Scratch { dir, made })
    }

    /// Removes what the drill made. archive-get's background fetcher may still be writing
    /// a segment into the scratch's pg_wal as it goes (it ends once its directory is
    /// gone): a removal that meets a file made meanwhile is tried again, for up to 10 s.
    fn remove(&self) -> Result<()> {
        let once = || match self.made {
            true => std::fs::remove_dir_all(&self.dir),
            // confined: the drill's own scratch emptied (unlinks; no link is followed)
            false => std::fs::read_dir(&self.dir)?.try_for_each(|e| {
                let p = e?.path();
                match p.is_dir() && !p.is_symlink() {
                    true => std::fs::remove_dir_all(&p),
                    false => std::fs::remove_file(&p),
                }
            }),
        };
        let mut tries = 0;
        loop {
            match once() {
                Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                r => {
                    return r.with_context(|| {
                        format!("cannot remove the scratch '{}'", self.dir.display())
                    })
                }
            }
        }
    }
}

fn check(name: &'static str, status: Outcome, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// The first `n` lines of a program's output.
fn first_lines(out: &std::process::Output, n: usize) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut s = lines[..lines.len().min(n)].join("\n");
    if lines.len() > n {
        s += &format!("\n... ({} more lines)", lines.len() - n);
    }
    s
}

fn owner_for(o: &DrillOptions) -> Result<Option<String>> {
    if o.owner.is_some() || !crate::sys::is_root() {
        return Ok(o.owner.clone());
    }
    match crate::target::lookup_user("postgres") {
        Ok(_) => Ok(Some("postgres".into())),
        Err(_) => bail!("PostgreSQL refuses to run as root and there is no user 'postgres': give --owner USER, the user the scratch server runs as"),
    }
}

/// Over several repositories, the first holding the chain (restore's choice) as the
/// one drilled, and those passed over, why; else `o` as it is.
fn served(o: &DrillOptions) -> Result<(DrillOptions, Option<String>, Vec<String>)> {
    let mut passed_over = o.passed_over.clone();
    if o.fallback.is_empty() {
        return Ok((o.clone(), None, passed_over));
    }
    let mut ro = restore_options(o, Path::new("."), None);
    ro.read.fallback = o.fallback.clone();
    let (i, passed) = restore::chain_repository(&ro).map_err(|e| match passed_over.is_empty() {
        true => e,
        false => e.context(passed_over.join("; ")),
    })?;
    passed_over.extend(passed);
    let mut out = o.clone();
    if i > 0 {
        let r = &o.fallback[i - 1];
        (out.repo, out.store) = (r.spec.clone(), r.store.clone());
    }
    out.fallback.clear();
    let n = o.fallback.len() + 1 + o.passed_over.len();
    let why = format!("the first of the stanza's {n} repositories holding the chain");
    Ok((out, Some(why), passed_over))
}

pub fn drill(o: &DrillOptions, show: Show) -> Result<DrillReport> {
    let t0 = Instant::now();
    let started = Utc::now();
    // Refusals before anything is written: no record.
    let (o, served_because, passed_over) = served(o)?;
    let o = &o;
    let repo = Repo::open(&o.repo, false, &o.store)?;
    if let Some(f) = &o.sql {
        std::fs::File::open(f).with_context(|| format!("cannot read --sql '{}'", f.display()))?;
    }
    let owner = owner_for(o)?;
    let ids = owner
        .as_deref()
        .map(crate::target::lookup_user)
        .transpose()?;
    let port = match o.port {
        Some(p) if !server::port_free(p) => {
            bail!("--port {p}: the port is in use on 127.0.0.1")
        }
        Some(p) => p,
        None => server::free_port()?,
    };
    let scratch = Scratch::prepare(o.scratch.as_deref(), ids)?;
    // A signal stops the drill through its failure path: server stopped, scratch removed.
    let _signals = crate::interrupt::catch();
    let mut r = DrillReport {
        command: "drill",
        repo: repo.describe(),
        outcome: "failed",
        started: started.to_rfc3339(),
        set_id: None,
        pg_major: None,
        scratch: scratch.dir.clone(),
        kept: o.keep,
        port,
        restore_seconds: None,
        replay_seconds: None,
        rto_seconds: 0.0,
        rpo_seconds: None,
        rpo_to: None,
        reached_lsn: None,
        reached_time: None,
        newest_wal: None,
        newest_wal_archived: None,
        checks: vec![],
        recorded: None,
        record_error: None,
        warnings: vec![],
        served_because,
        passed_over,
    };
    let ran = run(o, &repo, &scratch.dir, owner.as_deref(), port, show, &mut r);
    r.rto_seconds = t0.elapsed().as_secs_f64();
    if let Err(e) = ran {
        r.checks
            .push(check("drill", Outcome::Fail, format!("{e:#}")));
    }
    for name in ["restore", "replay", "pg_amcheck", "visibility", "sql"] {
        if !r.checks.iter().any(|c| c.name == name) {
            r.checks.push(check(
                name,
                Outcome::Skip,
                "not run: a step before it failed",
            ));
        }
    }
    if !o.keep {
        if let Err(e) = scratch.remove() {
            r.checks
                .push(check("cleanup", Outcome::Fail, format!("{e:#}")));
        }
    }
    if r.failed_checks().is_empty() {
        r.outcome = "ok";
    }
    // An interrupted drill says nothing of the repository: not recorded.
    if let Some(sig) = crate::interrupt::received() {
        return Err(crate::interrupt::error(sig).context(format!(
            "the drill was stopped; its server is down and '{}' {}",
            scratch.dir.display(),
            if o.keep { "kept" } else { "removed" }
        )));
    }
    let rec = record::DrillRecord {
        time: Utc::now().to_rfc3339(),
        outcome: r.outcome.into(),
        rto_seconds: r.rto_seconds,
        restore_seconds: r.restore_seconds,
        replay_seconds: r.replay_seconds,
        rpo_seconds: r.rpo_seconds,
        set_id: r.set_id.clone(),
        reached_lsn: r.reached_lsn.clone(),
        failed: r.failed_checks().iter().map(|s| s.to_string()).collect(),
        key_id: None,
        tag: None,
    };
    let written = (repo.record_master()).and_then(|m| record::write(&repo, &rec, m.as_ref()));
    match written {
        Ok(name) => r.recorded = Some(repo.store().describe(&name)),
        Err(e) => r.record_error = Some(format!("{e:#}")),
    }
    Ok(r)
}

/// The restore a drill runs: the chain of `o.repo` into `to`.
fn restore_options(o: &DrillOptions, to: &Path, owner: Option<&str>) -> RestoreOptions {
    RestoreOptions {
        read: ReadOptions {
            repo: Some(o.repo.clone()),
            set: o.set.clone(),
            threads: o.threads,
            store: o.store.clone(),
            ..ReadOptions::default()
        },
        to: to.to_path_buf(),
        until: o.until.clone(),
        until_lsn: o.until_lsn.clone(),
        until_xid: o.until_xid.clone(),
        until_name: o.until_name.clone(),
        timeline: o.timeline,
        owner: owner.map(str::to_string),
        tablespace_map: o.tablespace_map.clone(),
        same_cluster: true,
        // The drill writes its scratch server's own settings (it never archives).
        archive_mode: Some(crate::ops::restore::ArchiveMode::Preserve),
        ..RestoreOptions::default()
    }
}

/// Restore, start, replay, check, stop: each step's result into `r.checks`; an error
/// is a failure outside them.
fn run(
    o: &DrillOptions,
    repo: &Repo,
    scratch: &Path,
    owner: Option<&str>,
    port: u16,
    show: Show,
    r: &mut DrillReport,
) -> Result<()> {
    let data = scratch.join("data");
    let ro = restore_options(o, &data, owner);
    let t = Instant::now();
    match restore::restore(&ro, show) {
        Ok(rr) => {
            r.restore_seconds = Some(t.elapsed().as_secs_f64());
            let newest = (rr.chain.last()).map_or(rr.set_id.clone(), |l| l.set_id.clone());
            let chain = match rr.chain.len() {
                0 | 1 => String::new(),
                _ => format!(
                    " (chain {})",
                    (rr.chain.iter().map(|l| l.set_id.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let mut detail = format!(
                "set {newest}{chain} restored: {} files, {} pages, every frame and file checksum verified",
                rr.files, rr.pages
            );
            r.set_id = Some(newest);
            for w in &rr.warnings {
                detail.push_str(&format!("\n{w}"));
            }
            let status = match rr.warnings.is_empty() {
                true => Outcome::Ok,
                false => Outcome::Warn,
            };
            r.warnings.extend(rr.warnings);
            r.checks.push(check("restore", status, detail));
        }
        Err(e) => {
            r.checks
                .push(check("restore", Outcome::Fail, format!("{e:#}")));
            return Ok(());
        }
    }
    if !data.join("PG_VERSION").is_file() {
        bail!("the set restored is not a PostgreSQL cluster (no PG_VERSION): a drill proves PostgreSQL restores only; `verify` checks other sets");
    }
    let version = std::fs::read_to_string(data.join("PG_VERSION")).unwrap_or_default();
    let major: u32 = version.trim().parse().with_context(|| {
        format!(
            "the restored PG_VERSION reads '{}', not a version",
            version.trim().escape_default()
        )
    })?;
    r.pg_major = Some(major);
    let bin = pg::bin::server_bin(major, o.pg_bin.as_deref())?;
    same_cluster(repo, &data)?;
    let ids = owner.map(crate::target::lookup_user).transpose()?;
    let command = restore::restore_command(repo);
    let line = format!(
        "restore_command = {}",
        crate::source::postgres_restore::conf_quote(&command)
    );
    let kept = config::confine(scratch, ids, &line)?;
    if let Some(c) = r.checks.iter_mut().find(|c| c.name == "restore") {
        c.detail.push_str(&format!(
            "\nthe set's configuration moved to '{}'; kept of it: {}",
            scratch.join(config::ASIDE).display(),
            match kept.is_empty() {
                true => "nothing".to_string(),
                false => kept.join(", "),
            }
        ));
    }
    let t = Instant::now();
    let mut srv = Server::start(&bin, &data, scratch, port, owner, &o.db_user)?;
    if let Err(e) = srv.wait_promoted(o.timeout) {
        r.checks
            .push(check("replay", Outcome::Fail, format!("{e:#}")));
        return Ok(());
    }
    r.replay_seconds = Some(t.elapsed().as_secs_f64());
    let replay = replayed(o, repo, &srv, r)?;
    r.checks.push(replay);
    r.checks.push(amcheck(&srv));
    r.checks.push(visibility::visibility(&srv));
    r.checks.push(match &o.sql {
        Some(f) => user_sql(&srv, f, &o.sql_db),
        None => check("sql", Outcome::Skip, "no --sql FILE given"),
    });
    srv.stop()?;
    Ok(())
}

/// The restored cluster (its pg_control) must be the one whose WAL the repository
/// archives: refused before the server starts, naming both.
fn same_cluster(repo: &Repo, data: &Path) -> Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let Some(wal_id) = wal::system_identifier(repo)? else {
        return Ok(());
    };
    let p = data.join(crate::pg::PG_CONTROL);
    let f = std::fs::OpenOptions::new() // confined: a read, not through a link
        .read(true)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(&p)
        .with_context(|| format!("cannot read '{}'", p.display()))?;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, 0)
        .with_context(|| format!("cannot read '{}'", p.display()))?;
    let id = crate::pg::control_system_identifier(&b).unwrap_or_default();
    if id != wal_id {
        bail!("the restored cluster is cluster {id} (its pg_control), but the repository's archived WAL is of cluster {wal_id}: a set of another cluster is never started as this repository's");
    }
    Ok(())
}

fn epoch(t: std::time::SystemTime) -> f64 {
    DateTime::<Utc>::from(t).timestamp_millis() as f64 / 1000.0
}

/// The point replay reached, its lag behind the newest archived segment or the target
/// time (see `rpo_seconds`), and whether it reached that segment (when no recovery
/// target stops it earlier).
fn replayed(o: &DrillOptions, repo: &Repo, srv: &Server, r: &mut DrillReport) -> Result<Check> {
    let mut c = srv
        .connect("postgres")
        .context("cannot connect to the scratch server")?;
    let row = c
        .query_one(
            "SELECT pg_last_wal_replay_lsn()::text, pg_last_xact_replay_timestamp()::text, \
             extract(epoch FROM pg_last_xact_replay_timestamp())::float8, \
             (SELECT setting::int8 FROM pg_settings WHERE name = 'wal_segment_size')",
            &[],
        )
        .map_err(|e| anyhow::anyhow!("{}", crate::source::postgres::pg_err(&e)))?;
    let (lsn, at, at_epoch, seg): (Option<String>, Option<String>, Option<f64>, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    r.reached_lsn = lsn.clone();
    r.reached_time = at.clone();
    let newest = (wal::all_archived(repo)?.into_iter())
        .map(|(n, _)| n)
        .rfind(|n| pg::parse_name(n).is_some_and(|w| w.kind == Kind::Segment));
    let archived = match &newest {
        Some(n) => wal::archived_at(repo, n)?,
        None => None,
    };
    r.newest_wal = newest.clone();
    r.newest_wal_archived = archived.map(|t| DateTime::<Utc>::from(t).to_rfc3339());
    let point_target = o.until_lsn.is_some() || o.until_xid.is_some() || o.until_name.is_some();
    let (to, rpo) = match (&o.until, point_target) {
        (Some(_), _) => ("target_time", target_time(&mut c).zip(at_epoch)),
        (None, false) => ("newest_wal", archived.map(epoch).zip(at_epoch)),
        (None, true) => ("", None),
    };
    r.rpo_seconds = rpo.map(|(t, x)| (t - x).max(0.0));
    r.rpo_to = r.rpo_seconds.is_some().then_some(to);
    let point = format!(
        "replayed to {} ({})",
        lsn.as_deref().unwrap_or("an unknown LSN"),
        at.as_deref()
            .map_or("no transaction replayed".into(), |t| format!(
                "last transaction {t}"
            ))
    );
    let targeted = o.until.is_some()
        || o.until_lsn.is_some()
        || o.until_xid.is_some()
        || o.until_name.is_some()
        || o.timeline.is_some();
    let reached = lsn.as_deref().and_then(pg::parse_lsn);
    let newest_seg = newest
        .as_deref()
        .zip(u64::try_from(seg).ok().filter(|&s| s > 0));
    if let (false, Some(lsn), Some((name, seg))) = (targeted, reached, newest_seg) {
        if let Some((_, segno)) = pg::parse_segment_name(name, seg) {
            if lsn / seg < segno {
                return Ok(check(
                    "replay",
                    Outcome::Fail,
                    format!(
                        "recovery ended early: {point}, before the newest archived segment {name}; the server log's last lines:\n{}",
                        server::log_tail(&srv.log, 15)
                    ),
                ));
            }
        }
    }
    Ok(check("replay", Outcome::Ok, point))
}

/// recovery_target_time as the server read it (in its own time zone), in epoch seconds.
fn target_time(c: &mut postgres::Client) -> Option<f64> {
    let row = c
        .query_one(
            "SELECT extract(epoch FROM nullif(current_setting('recovery_target_time', true), '')::timestamptz)::float8",
            &[],
        )
        .ok()?;
    row.get(0)
}

/// pg_amcheck over every database (heap and B-tree indexes); amcheck is installed
/// where missing, in the scratch copy only.
fn amcheck(srv: &Server) -> Check {
    if !srv.bin.join("pg_amcheck").is_file() {
        return check(
            "pg_amcheck",
            Outcome::Skip,
            format!("no pg_amcheck in '{}'", srv.bin.display()),
        );
    }
    let out = srv
        .client("pg_amcheck", "postgres")
        .args(["--all", "--install-missing", "--maintenance-db", "postgres"])
        .output();
    match out {
        Ok(out) if out.status.success() => check(
            "pg_amcheck",
            Outcome::Ok,
            "every table and B-tree index of every database checked: no corruption",
        ),
        Ok(out) => check(
            "pg_amcheck",
            Outcome::Fail,
            format!("pg_amcheck ({}):\n{}", out.status, first_lines(&out, 20)),
        ),
        Err(e) => check(
            "pg_amcheck",
            Outcome::Fail,
            format!("cannot run pg_amcheck: {e}"),
        ),
    }
}

/// The user's SQL through psql, stopping at the first error.
fn user_sql(srv: &Server, file: &Path, db: &str) -> Check {
    let out = srv
        .client("psql", db)
        .args(["-X", "-q", "-A", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(file)
        .output();
    match out {
        Ok(out) if out.status.success() => check("sql", Outcome::Ok, first_lines(&out, 10)),
        Ok(out) => check(
            "sql",
            Outcome::Fail,
            format!(
                "'{}' failed ({}):\n{}",
                file.display(),
                out.status,
                first_lines(&out, 10)
            ),
        ),
        Err(e) => check("sql", Outcome::Fail, format!("cannot run psql: {e}")),
    }
}
