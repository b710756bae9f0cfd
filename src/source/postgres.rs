//! `postgres://USER@HOST:PORT/DB?pgdata=DIR`: a hot physical backup of a running
//! PostgreSQL cluster, reached with the password libpq would use (connect.rs).
//! pg_backup_start/pg_backup_stop bracket the copy over one connection; every file of
//! the data directory and its tablespaces is read (each tablespace volume gets its own
//! reader); page checksums are verified as pages pass; the WAL from the start to the
//! stop segment is added to the set so the copy can be made consistent from the set
//! alone.

use super::{Extra, Finish, Source, SourceFile};
use crate::engine::backup::{ChunkFilter, PageSet, ReadFile};
use crate::engine::Abort;
use crate::format::manifest::SourceKind;
use crate::format::manifest::{EntryKind, SourceInfo};
use crate::pg::facts::{PgFacts, Stop};
use crate::pg::page as pgpage;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether an archive holds a WAL file, by name.
pub type Archived = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

pub struct Postgres {
    /// The connection's settings, its password and the location shown.
    conn: Conn,
    pgdata: Option<PathBuf>,
    client: Option<postgres::Client>,
    /// What the manifest records, once the backup started.
    facts: Option<PgFacts>,
    system_identifier: String,
    start_lsn: u64,
    timeline: u32,
    checksums: bool,
    /// The server's major version.
    major: u32,
    /// The server is a standby (in recovery): the backup is taken as PostgreSQL allows
    /// there, and its end waited for in the archive the primary writes.
    standby: bool,
    /// `--primary`: the primary of a standby source, whose WAL is switched at the
    /// backup's end so that its stop segment is archived at once.
    pub primary: Option<Conn>,
    pub continue_after_error: bool,
    /// Seconds pg_backup_stop may wait for WAL archiving.
    pub archive_timeout: u64,
    /// Set for a differential backup.
    pub base: Option<DiffBase>,
    /// Whether the set's archive holds a WAL file (see `source::Options::archived`).
    pub archived: Option<Archived>,
    label: String,
    /// Holds the connection while files are read, and says when the server went away.
    watcher: Option<Watcher>,
    /// Why the backup cannot be valid any more (the server went away), once known.
    gone: Arc<OnceLock<String>>,
    /// The pipeline to stop when the server goes away.
    abort: Arc<Abort>,
    /// The segment holding the start, as pg_wal held it up to the start (see
    /// [`Source::start_wal_head`]).
    start_head: Option<(String, Vec<u8>)>,
    /// The stop segment, once the backup stopped with archiving on: the archive must
    /// hold it before the set is committed.
    stop_segment: Option<String>,
}

/// Owns the backup's connection while the files are read and asks the server every
/// half second whether it is still there: a server that dies fails the backup within
/// a second, not at pg_backup_stop.
struct Watcher {
    stop: crossbeam_channel::Sender<()>,
    thread: std::thread::JoinHandle<postgres::Client>,
}

impl Watcher {
    fn start(
        mut client: postgres::Client,
        gone: Arc<OnceLock<String>>,
        abort: Arc<Abort>,
        location: String,
    ) -> Watcher {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::spawn(move || {
            let tick = std::time::Duration::from_millis(500);
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stopped.recv_timeout(tick)
            {
                if let Err(e) = client.is_valid(std::time::Duration::from_secs(10)) {
                    let why = went_away(&location, &e);
                    abort.fail(crate::fault::transient(why.clone()));
                    let _ = gone.set(why);
                    break;
                }
            }
            client
        });
        Watcher { stop, thread }
    }

    /// Stops watching and hands the connection back.
    fn stop(self) -> Option<postgres::Client> {
        drop(self.stop);
        self.thread.join().ok()
    }
}

fn went_away(location: &str, e: &postgres::Error) -> String {
    format!(
        "the PostgreSQL server at {location} went away during the backup ({}); the backup is \
         not valid: check the server log, start the server and back up again",
        pg_err(e)
    )
}

/// Whether `e` is a lost connection (closed, reset, refused, timed out, the server shut
/// down or crashed) rather than an answer: a later run may pass. An SQL error the
/// server answers with (a refused function, a permission) is not.
pub fn lost(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if let Some(c) = e.code() {
        let gone = [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ];
        return c.code().starts_with("08") || gone.contains(c);
    }
    let io = std::iter::successors(std::error::Error::source(e), |c| c.source())
        .any(|c| c.is::<std::io::Error>());
    e.as_db_error().is_none()
        && (e.is_closed() || io || e.to_string() == "timeout waiting for server")
}

/// The server's own words for an error (the driver's Display says only "db error"),
/// or the driver's with its causes (its Display names only the kind).
pub fn pg_err(e: &postgres::Error) -> String {
    let Some(d) = e.as_db_error() else {
        let mut m = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            m.push_str(&format!(": {c}"));
            cause = c.source();
        }
        return m;
    };
    let mut m = format!("{}: {}", d.severity(), d.message());
    if let Some(h) = d.hint() {
        m.push_str(&format!(" (hint: {h})"));
    }
    if d.message().contains("permission denied") {
        m.push_str(PRIVILEGE_HINT);
    }
    m
}

/// A set's source as an older pagevault recorded it, which kept the URL's query (a
/// `?password=` too) in its location and database: without the query. Other kinds
/// are returned as they are.
pub fn scrub_recorded(info: &SourceInfo) -> SourceInfo {
    let mut info = info.clone();
    if info.kind == SourceKind::Postgres {
        for s in [&mut info.location, &mut info.database] {
            s.truncate(s.find('?').unwrap_or(s.len()));
        }
    }
    info
}

/// What a differential or incremental needs of its base set.
#[derive(Clone)]
pub struct DiffBase {
    pub start_lsn: u64,
    /// Paths the base set holds.
    pub files: HashSet<String>,
    /// The pages to read come from the WAL's block summaries: the segment holding the
    /// start is read from pg_wal up to the start (or, when it cannot be, ended at once,
    /// so that it is archived and summarized).
    pub summaries: bool,
}

const PRIVILEGE_HINT: &str = " (the backup user needs superuser, or EXECUTE on pg_backup_start, pg_backup_stop and pg_control_system)";

mod check;
pub mod connect;
mod walk;
use check::relation_files;
pub use check::{full_page_checker, PageChecker};
use connect::Conn;
pub(super) use walk::EMPTY_DIRS;

impl Postgres {
    /// Parses the source URL; `pgdata` from `?pgdata=` or the option; the password
    /// from the URL, `password_file`, PGPASSWORD or the libpq password file.
    pub fn new(
        spec: &str,
        pgdata: Option<PathBuf>,
        label: String,
        password_file: Option<&Path>,
    ) -> Result<Postgres> {
        let (url, given) = connect::split_pgdata(spec);
        let pgdata = given.or(pgdata);
        Ok(Postgres {
            conn: connect::settle(&url, password_file, &connect::Env::of_process())?,
            pgdata,
            client: None,
            facts: None,
            system_identifier: String::new(),
            start_lsn: 0,
            timeline: 0,
            checksums: false,
            major: 0,
            standby: false,
            primary: None,
            continue_after_error: false,
            archive_timeout: 300,
            archived: None,
            base: None,
            label,
            watcher: None,
            gone: Arc::new(OnceLock::new()),
            abort: Arc::default(),
            start_head: None,
            stop_segment: None,
        })
    }

    /// The connection settings of `--primary URL`, its password found as the source's.
    pub fn primary_conn(&self, url: &str, password_file: Option<&Path>) -> Result<Conn> {
        connect::settle(url, password_file, &connect::Env::of_process()).context("--primary")
    }

    fn client(&mut self) -> &mut postgres::Client {
        self.client.as_mut().expect("connected")
    }

    fn query_one_text(&mut self, sql: &str) -> Result<String> {
        let row = self
            .client()
            .query_one(sql, &[])
            .map_err(|e| self.failed(&format!("query failed: {sql}"), &e))?;
        Ok(row.get::<_, String>(0))
    }

    /// The cluster's databases, OID -> name (what `restore --db-include` and
    /// `estimate` name them by).
    fn databases(&mut self) -> Result<std::collections::BTreeMap<u32, String>> {
        let sql = "SELECT oid::int8, datname::text FROM pg_database";
        let rows = (self.client().query(sql, &[]))
            .map_err(|e| self.failed(&format!("query failed: {sql}"), &e))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u32, r.get::<_, String>(1)))
            .collect())
    }

    /// `what` failed with `e`: transient when the connection was lost (the server
    /// named), fatal when the server answered with an error.
    fn failed(&self, what: &str, e: &postgres::Error) -> anyhow::Error {
        match lost(e) {
            true => crate::fault::transient(format!(
                "{what}: the PostgreSQL server at {} did not answer ({}): start the server (see its log) and back up again",
                self.conn.location,
                pg_err(e)
            )),
            false => anyhow!("{what}: {}", pg_err(e)),
        }
    }

    /// Ends the current WAL segment so that it is archived: the primary's when the
    /// source is a standby (when --primary names it), else the server's own. Without
    /// the privilege the backup waits for the archiver or reads every page.
    fn switch_wal(&mut self) {
        match self.standby {
            true => self.switch_primary_wal(),
            false => {
                let _ = self.client().batch_execute("SELECT pg_switch_wal()");
            }
        }
    }

    fn switch_primary_wal(&self) {
        if let Some(mut c) = self.primary.as_ref().and_then(|p| p.connect().ok()) {
            let _ = c.batch_execute("SELECT pg_switch_wal()");
        }
    }

    /// Waits until the archiver has archived each of `names` (files of pg_wal), as
    /// pg_backup_stop's own wait does: archived once `.done` is marked or the file has
    /// left pg_wal. Bounded by --archive-timeout; a signal ends it.
    fn wait_archived(&self, names: &[&str]) -> Result<()> {
        let pg_wal = self.pgdata().join("pg_wal");
        let status = pg_wal.join("archive_status");
        let in_archive = |n: &str| self.archived.as_ref().is_some_and(|a| a(n));
        // A standby marks what it received done whether or not the primary archived
        // it: there only the archive itself says (when the backup knows it).
        let by_archive = self.standby && self.archived.is_some();
        let busy = |n: &str| match by_archive {
            true => !in_archive(n),
            false => {
                !status.join(format!("{n}.done")).exists()
                    && pg_wal.join(n).exists()
                    && !in_archive(n)
            }
        };
        let t0 = std::time::Instant::now();
        while let Some(name) = names.iter().find(|n| busy(n)) {
            if let Some(sig) = crate::interrupt::received() {
                return Err(crate::interrupt::error(sig));
            }
            if let Some(m) = self.gone.get() {
                return Err(crate::fault::transient(m.clone()));
            }
            // A timeout: a later run may find the archiver caught up.
            if t0.elapsed().as_secs() >= self.archive_timeout && self.standby {
                return Err(crate::fault::transient(format!(
                    "waited {} s for the primary to archive {name}, the standby's backup stop segment: the primary's archive_command is failing or slow, or it writes little WAL (give --primary URL so that pagevault switches its WAL); the backup is not valid",
                    self.archive_timeout
                )));
            }
            if t0.elapsed().as_secs() >= self.archive_timeout {
                return Err(crate::fault::transient(format!(
                    "waited {} s for the archiver to archive {name}: archive_command is failing or too slow (see pg_stat_archiver and the server log); the backup is not valid",
                    self.archive_timeout
                )));
            }
            // Archivers take milliseconds to tens of: look often at first.
            let ms = (2 + t0.elapsed().as_millis() as u64 / 10).min(50);
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        Ok(())
    }

    pub fn pgdata(&self) -> &Path {
        self.pgdata.as_deref().expect("pgdata known after prepare")
    }
}

impl Postgres {
    /// `pgdata` must be the server's own data directory, not another copy of the same
    /// cluster (an old one beside it): refused when the server's `data_directory` is
    /// here, holds the same cluster, and is another directory. A server whose
    /// directory is not visible here (another host) is taken at its word.
    fn refuse_a_copy(&mut self, pgdata: &Path, sysid: &str) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let Ok(dd) = self.query_one_text("SELECT current_setting('data_directory')") else {
            return Ok(());
        };
        let dd = PathBuf::from(dd);
        let same_cluster = read_control_sysid(&dd).is_ok_and(|id| id.to_string() == sysid);
        let (Ok(a), Ok(b)) = (std::fs::metadata(pgdata), std::fs::metadata(&dd)) else {
            return Ok(());
        };
        if same_cluster && (a.dev(), a.ino()) != (b.dev(), b.ino()) {
            bail!(
                "'{}' is another copy of cluster {sysid}, not the data directory of the server at {}, which is '{}': a backup reads the running server's files; give ?pgdata={} (or leave it out: the server says where its directory is)",
                pgdata.display(),
                self.conn.location,
                dd.display(),
                dd.display()
            );
        }
        Ok(())
    }
}

fn read_control_sysid(pgdata: &Path) -> Result<u64> {
    let p = pgdata.join("global/pg_control");
    let f = std::fs::File::open(&p).with_context(|| {
        format!(
            "'{}' is not a PostgreSQL data directory (no global/pg_control)",
            pgdata.display()
        )
    })?;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, 0)?;
    Ok(u64::from_le_bytes(b))
}

impl Source for Postgres {
    fn info(&self) -> SourceInfo {
        let mut identity = BTreeMap::new();
        if !self.system_identifier.is_empty() {
            identity.insert("system_identifier".into(), self.system_identifier.clone());
        }
        SourceInfo {
            kind: SourceKind::Postgres,
            location: self.conn.location.clone(),
            database: self.conn.database.clone(),
            identity,
        }
    }

    fn page_size(&self) -> u32 {
        pgpage::BLCKSZ as u32
    }

    fn prepare(&mut self) -> Result<Vec<SourceFile>> {
        self.client = Some(self.conn.connect()?);
        let version = self.query_one_text("SELECT current_setting('server_version_num')")?;
        self.major = crate::pg::check_backup_server(&version).map_err(|m| anyhow!("{m}"))?;
        let sysid =
            self.query_one_text("SELECT system_identifier::text FROM pg_control_system()")?;
        if self.pgdata.is_none() {
            let dd = self
                .query_one_text("SELECT current_setting('data_directory')")
                .context("cannot ask the server for its data directory; give it with ?pgdata=DIR or --pgdata")?;
            self.pgdata = Some(PathBuf::from(dd));
        }
        let pgdata = self.pgdata.clone().unwrap();
        let local = read_control_sysid(&pgdata)?;
        if local.to_string() != sysid {
            bail!(
                "data directory '{}' belongs to cluster {local}, but the server at {} is cluster {sysid}: give the data directory of that server",
                pgdata.display(),
                self.conn.location
            );
        }
        self.refuse_a_copy(&pgdata, &sysid)?;
        self.system_identifier = sysid.clone();
        self.checksums = self.query_one_text("SELECT current_setting('data_checksums')")? == "on";
        self.standby = self.query_one_text("SELECT pg_is_in_recovery()::text")? == "true";
        if let Some(p) = &self.primary {
            if !self.standby {
                bail!(
                    "--primary {} is for a standby source, and {} is not in recovery",
                    p.location,
                    self.conn.location
                );
            }
        }
        let seg =
            self.query_one_text("SELECT setting FROM pg_settings WHERE name = 'wal_segment_size'")?;
        let seg_size = seg
            .parse::<u64>()
            .ok()
            .filter(|&s| crate::pg::valid_seg_size(s))
            .ok_or_else(|| anyhow!("the server reports wal_segment_size '{seg}'"))?;
        let label = self.label.clone();
        let warming = warm_metadata(pgdata.clone());
        // A standby names no WAL file (pg_walfile_name is refused in recovery).
        let start_sql = format!(
            "SELECT s::text FROM {} s",
            crate::pg::backup_start_call(self.major)
        );
        let row = self
            .client()
            .query_one(&start_sql, &[&label])
            .map_err(|e| self.failed("pg_backup_start failed", &e))?;
        let _ = warming.join();
        let start: String = row.get(0);
        self.start_lsn = crate::pg::parse_lsn(&start)
            .ok_or_else(|| anyhow!("server returned a bad LSN '{start}'"))?;
        // The start's timeline: the checkpoint's (a standby's restartpoint) the backup
        // starts from; backup_label says it again at the stop.
        self.timeline = self
            .query_one_text("SELECT timeline_id::text FROM pg_control_checkpoint()")?
            .parse()
            .map_err(|_| anyhow!("the server reports a bad timeline"))?;
        let start_wal = crate::pg::walfile_name(self.timeline, self.start_lsn, seg_size);
        if self.base.as_ref().is_some_and(|b| b.summaries) {
            // The WAL up to the start is summarized from pg_wal's copy of its segment;
            // when that cannot be read, the segment is ended now to be archived and
            // summarized (without the privilege, the backup waits for the archiver or
            // reads every page).
            match read_start_head(&pgdata, &start_wal, self.start_lsn) {
                Ok(bytes) => self.start_head = Some((start_wal.clone(), bytes)),
                Err(_) => self.switch_wal(),
            }
        }
        self.facts = Some(PgFacts {
            start_lsn: self.start_lsn,
            start_wal,
            timeline: self.timeline,
            version_num: version.parse().unwrap_or(0),
            data_checksums: self.checksums,
            system_identifier: sysid,
            wal_segment_size: seg_size,
            databases: self.databases()?,
            stop: None,
        });
        let mut out = vec![];
        self.walk(&pgdata, "", &mut out)?;
        let client = self.client.take().expect("connected");
        self.watcher = Some(Watcher::start(
            client,
            self.gone.clone(),
            self.abort.clone(),
            self.conn.location.clone(),
        ));
        Ok(out)
    }

    fn settle(&mut self) -> Result<()> {
        match self.stop_segment.take() {
            Some(name) => self.wait_archived(&[&name]),
            None => Ok(()),
        }
    }

    fn finish(&mut self, ok: bool) -> Result<Finish> {
        let client = match self.watcher.take() {
            Some(w) => w.stop(),
            None => self.client.take(),
        };
        let Some(mut client) = client else {
            return Ok(Finish::default());
        };
        if !ok {
            // Closing the session aborts a non-exclusive backup.
            drop(client);
            return Ok(Finish::default());
        }
        if let Some(m) = self.gone.get() {
            return Err(crate::fault::transient(m.clone()));
        }
        // pagevault waits for the archiver itself (`settle`): the server's own wait
        // looks once a second. One round trip.
        // On a standby the stop point is its minimum recovery point, on that point's
        // timeline; the primary's archive, not the standby's archive_mode, holds it.
        let stop_sql = format!(
            "SELECT lsn::text, labelfile, spcmapfile, (SELECT min_recovery_end_timeline FROM pg_control_recovery())::int8, \
             current_setting('archive_mode') <> 'off' OR pg_is_in_recovery() FROM {}",
            crate::pg::backup_stop_call(self.major)
        );
        let row = client
            .query_one(&stop_sql, &[])
            .map_err(|e| match lost(&e) {
                true => crate::fault::transient(went_away(&self.conn.location, &e)),
                false => anyhow!("pg_backup_stop failed: {}", pg_err(&e)),
            })?;
        let stop: String = row.get(0);
        let label: String = row.get(1);
        let spcmap: Option<String> = row.get(2);
        let recovery_tli: i64 = row.get(3);
        let archiving: bool = row.get(4);
        let stop_lsn = crate::pg::parse_lsn(&stop)
            .ok_or_else(|| anyhow!("server returned a bad LSN '{stop}'"))?;
        let facts = self.facts.as_mut().expect("prepared");
        let seg_size = facts.wal_segment_size;
        let stop_tli = match self.standby {
            true => u32::try_from(recovery_tli).unwrap_or(self.timeline),
            false => self.timeline,
        };
        let stop_wal = crate::pg::walfile_name(stop_tli, stop_lsn, seg_size);
        if self.standby {
            // backup_label names the start's file: it is what recovery reads first.
            if let Some(f) = crate::pg::facts::label_start_wal(&label) {
                facts.start_wal = f;
            }
        }
        facts.stop = Some(Stop {
            lsn: stop_lsn,
            wal: stop_wal.clone(),
            backup_label: label,
            tablespace_map: spcmap.unwrap_or_default(),
        });
        let start_wal = facts.start_wal.clone();
        if self.standby && archiving {
            // The primary ends the stop segment now, so that its archiver takes it.
            self.switch_primary_wal();
        }
        // The archive must reach the set's end (`settle`, once the late files are
        // copied). The backup history file the archiver takes next is not waited for:
        // no restore reads it (the set holds backup_label).
        if archiving {
            self.stop_segment = Some(stop_wal.clone());
        }
        // The WAL that makes the copy consistent: start to stop segment, from pg_wal.
        let pg_wal = self.pgdata().join("pg_wal");
        let mut late = vec![];
        let mut names: Vec<String> = std::fs::read_dir(&pg_wal)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 24 && n.bytes().all(|c| c.is_ascii_hexdigit()))
            .filter(|n| {
                n[..8] == start_wal[..8]
                    && n.as_str() >= start_wal.as_str()
                    && n.as_str() <= stop_wal.as_str()
            })
            .collect();
        names.sort();
        let expected = wal_range(&start_wal, &stop_wal, seg_size)?;
        for name in &expected {
            if !names.contains(name) {
                bail!("WAL segment {name} left pg_wal before it could be copied; set wal_keep_size or archive with archive-push");
            }
            let p = pg_wal.join(name);
            let m = std::fs::metadata(&p)?;
            late.push(SourceFile {
                rel_path: format!("pg_wal/{name}"),
                abs_path: p.into(),
                kind: EntryKind::File,
                size: m.len(),
                mode: m.mode() & 0o7777,
                mtime: m.mtime(),
                dev: m.dev(),
                missing_ok: false,
                link_target: None,
            });
        }
        Ok(Finish {
            extra: self.facts.take().map(|f| f.to_extra()).unwrap_or_default(),
            late,
        })
    }

    fn start_wal_head(&mut self) -> Option<(String, Vec<u8>)> {
        self.start_head.take()
    }

    fn facts(&self) -> Extra {
        self.facts
            .as_ref()
            .map(PgFacts::to_extra)
            .unwrap_or_default()
    }

    fn warnings(&self) -> Vec<String> {
        self.conn.warnings.clone()
    }

    fn abort_with(&mut self, abort: Arc<Abort>) {
        self.abort = abort;
    }

    fn filter(&self, entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        let relations = relation_files(entries);
        let segments = relations
            .clone()
            .map(|(i, e)| (i as u32, pgpage::segment_number(&e.rel_path)))
            .collect();
        // A differential stores changed pages of relation files the base holds; new
        // files (CREATE DATABASE copies pages with old LSNs) are stored whole.
        let diff_ids = match &self.base {
            // Only main forks: the visibility map and free space map change without
            // their page LSN moving, so they are stored whole.
            Some(b) => relations
                .filter(|(_, e)| {
                    b.files.contains(&e.rel_path)
                        && !e.rel_path.rsplit('/').next().unwrap_or("").contains('_')
                })
                .map(|(i, _)| i as u32)
                .collect(),
            None => HashSet::new(),
        };
        Some(Box::new(PageChecker {
            segments,
            verify: self.checksums,
            start_lsn: self.start_lsn,
            base_lsn: self.base.as_ref().map(|b| b.start_lsn),
            summarized_from: match (&self.base, &self.facts) {
                (Some(b), Some(f)) => b.start_lsn - b.start_lsn % f.wal_segment_size,
                _ => 0,
            },
            diff_ids,
            continue_after_error: self.continue_after_error,
            failures: Mutex::new(vec![]),
            stale: Mutex::default(),
        }))
    }
}

/// Segment names from `first` to `last` (same timeline) for segments of `seg_size`.
fn wal_range(first: &str, last: &str, seg_size: u64) -> Result<Vec<String>> {
    let parse = |n: &str| {
        crate::pg::parse_segment_name(n, seg_size).ok_or_else(|| {
            anyhow!("the server named WAL file '{n}', not a segment of {seg_size} bytes")
        })
    };
    let ((tli, a), (_, b)) = (parse(first)?, parse(last)?);
    Ok((a..=b.max(a))
        .map(|s| crate::pg::segment_name_for(tli, s, seg_size))
        .collect())
}

/// Reads the metadata of every entry below `pgdata` into the kernel's caches while
/// pg_backup_start's checkpoint runs, so that the walk after it (the one the backup
/// uses: files must be listed after the start) finds them there. Warming only.
fn warm_metadata(pgdata: PathBuf) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for e in walkdir::WalkDir::new(pgdata).into_iter().flatten() {
            let _ = e.metadata();
        }
    })
}

/// The segment holding `start` as pg_wal holds it, up to `start` (checked and the rest
/// zeroed: [`crate::pg::walpage::live_head`]).
fn read_start_head(pgdata: &Path, name: &str, start: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let path = pgdata.join("pg_wal").join(name);
    let f =
        std::fs::File::open(&path).with_context(|| format!("cannot open '{}'", path.display()))?;
    let seg_size = f.metadata()?.len();
    let want = (start % seg_size.max(1)) as usize;
    let mut bytes = Vec::with_capacity(seg_size as usize);
    f.take(want as u64).read_to_end(&mut bytes)?;
    crate::pg::walpage::live_head(name, &mut bytes, start)
        .map_err(|m| anyhow!("'{}': {m}", path.display()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_ranges() {
        const SEG: u64 = 16 << 20;
        assert_eq!(
            wal_range("000000010000000000000003", "000000010000000000000003", SEG)
                .unwrap()
                .len(),
            1
        );
        let r = wal_range("0000000100000000000000FE", "000000010000000100000001", SEG).unwrap();
        assert_eq!(
            r,
            [
                "0000000100000000000000FE",
                "0000000100000000000000FF",
                "000000010000000100000000",
                "000000010000000100000001"
            ]
        );
        // 1 MiB segments: 4096 per log id, so 0xFF is followed by 0x100.
        let r = wal_range(
            "0000000100000000000000FF",
            "000000010000000000000101",
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            r,
            [
                "0000000100000000000000FF",
                "000000010000000000000100",
                "000000010000000000000101"
            ]
        );
        let r = wal_range(
            "000000010000000000000FFF",
            "000000010000000100000000",
            1 << 20,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        // 64 MiB segments: 64 per log id.
        let r = wal_range(
            "00000001000000000000003F",
            "000000010000000100000000",
            64 << 20,
        )
        .unwrap();
        assert_eq!(r, ["00000001000000000000003F", "000000010000000100000000"]);
        assert!(wal_range(
            "000000010000000000000040",
            "000000010000000000000040",
            64 << 20
        )
        .is_err());
    }

    #[test]
    fn recorded_queries_are_dropped() {
        let old = SourceInfo {
            kind: SourceKind::Postgres,
            location: "postgres://u@h:5432/db?password=secret&sslmode=disable".into(),
            database: "db?password=secret&sslmode=disable".into(),
            identity: BTreeMap::new(),
        };
        let info = scrub_recorded(&old);
        assert_eq!(info.location, "postgres://u@h:5432/db");
        assert_eq!(info.database, "db");
        let files = SourceInfo::plain(SourceKind::Files, "/a?b".into(), "a?b".into());
        assert_eq!(scrub_recorded(&files).location, "/a?b");
    }

    #[test]
    fn url_without_password_or_query_is_shown() {
        let p = Postgres::new(
            "postgres://alice@127.0.0.1:5432/app?pgdata=/d&sslmode=disable&password=secret",
            None,
            "x".into(),
            None,
        )
        .unwrap();
        let info = p.info();
        assert_eq!(info.location, "postgres://alice@127.0.0.1:5432/app");
        assert_eq!(info.database, "app");
        assert_eq!(p.pgdata.as_deref(), Some(Path::new("/d")));
    }
}
