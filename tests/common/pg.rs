//! A real PostgreSQL cluster for tests: initdb'd and started as the `postgres`
//! user on 127.0.0.1 on a free port, stopped and removed on drop. Debian's 15 by
//! default; 17 and 18 from the PyPI wheels scripts/setup.sh unpacks under the tools
//! directory ($PAGEVAULT_TOOLS, else /var/tmp/pagevault-tools) as pgMAJOR/.
#![allow(dead_code)]

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Debian's PostgreSQL 15, the default server and the client [`sql_at`] uses.
pub const BIN: &str = "/usr/lib/postgresql/15/bin";

/// The archive_command that pushes each WAL segment into the repository at `repo`,
/// made first (as the postgres user, whose server pushes) when it is not one yet:
/// archive-push never makes a repository.
pub fn push_cmd(repo: impl AsRef<Path>) -> String {
    init_for_postgres(repo.as_ref());
    format!(
        "{} archive-push %p --repo {}",
        super::bin(),
        repo.as_ref().display()
    )
}

/// A PostgreSQL 15 server with checksums archiving into `repo`, holding pgbench at
/// `scale`, and the source URL a backup of it takes.
pub fn archiving_pgbench(repo: &str, scale: u32) -> (Pg, String) {
    let pg = Pg::start(true, Some(&push_cmd(repo)));
    pg.pgbench_init(scale);
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    (pg, url)
}

/// Starts the cluster restored at `target`, waits for the end of recovery, checks that
/// `rows` of it is `want`, stops it, checks every page's checksum and removes the
/// target's parent.
pub fn check_restored(target: &Path, want: &str, rows: impl Fn(&Pg) -> String) {
    check_restored_with(target, want, rows, |_| {})
}

/// [`check_restored`], running `also` against the started copy before it stops.
pub fn check_restored_with(
    target: &Path,
    want: &str,
    rows: impl Fn(&Pg) -> String,
    also: impl Fn(&Pg),
) {
    let mut r = Pg::adopt(target);
    r.wait_promoted();
    assert_eq!(rows(&r), want, "{}", r.log());
    check_database(&r);
    also(&r);
    r.stop();
    let bin = bin_dir(15).join("pg_checksums");
    let out = as_postgres(
        bin.to_str().unwrap(),
        &["--check", "-D", &target.display().to_string()],
    );
    assert!(out.contains("Bad checksums:  0"), "{out}");
    drop(r);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
}

/// Where scripts/setup.sh caches the test tools.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("PAGEVAULT_TOOLS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/pagevault-tools"))
}

/// The bin/ directory of PostgreSQL `major`: Debian's for 15, scripts/setup.sh's
/// `TOOLS/pgMAJOR/bin` for the others. Panics when that server is not installed.
pub fn bin_dir(major: u32) -> PathBuf {
    let dir = if major == 15 {
        PathBuf::from(BIN)
    } else {
        tools_dir().join(format!("pg{major}")).join("bin")
    };
    assert!(
        dir.join("postgres").is_file(),
        "PostgreSQL {major} is not installed: no {}/postgres (scripts/setup.sh installs it)",
        dir.display()
    );
    dir
}

/// How [`Pg::start_with`] makes a cluster.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// The PostgreSQL major version (see [`bin_dir`]).
    pub major: u32,
    /// initdb --data-checksums (else none, also on 18, whose initdb turns them on by default).
    pub checksums: bool,
    /// The archive_command to set, if any (archive_mode on).
    pub archive: Option<String>,
    /// initdb --wal-segsize, in MB (a power of two, 1 to 1024); else the default 16.
    pub wal_segsize_mb: Option<u32>,
    /// Lines appended to postgresql.conf after the tests' own settings (so they win).
    pub extra_conf: String,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            major: 15,
            checksums: false,
            archive: None,
            wal_segsize_mb: None,
            extra_conf: String::new(),
        }
    }
}

pub struct Pg {
    pub dir: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    /// The major version and bin/ directory of the server (and of the tools run for it).
    pub major: u32,
    pub bin: PathBuf,
    running: bool,
    /// Options for a cluster whose postgresql.conf names another port (a restored copy).
    opts: Option<String>,
    owns_dir: bool,
}

/// Runs a command as the postgres user and insists on success.
pub fn as_postgres(cmd: &str, args: &[&str]) -> String {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", cmd])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("runuser");
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// pagevault run as the postgres user (as PostgreSQL runs it), whatever its exit.
pub fn run_as_postgres(args: &[&str]) -> super::Run {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", super::bin()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("runuser");
    super::Run::of(&out)
}

/// `pagevault init` of a plain repository at `repo` as the postgres user, unless one
/// is there.
pub fn init_for_postgres(repo: &Path) {
    if !repo.join("pagevault.repo").exists() {
        as_postgres(
            super::bin(),
            &["init", "--repo", &repo.display().to_string()],
        );
    }
}

/// A fresh directory the postgres user owns.
pub fn postgres_dir(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| super::sweep_ended_runs("pagevault-test"));
    // The counter keeps two tests of one process apart even if both get the same port.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(format!(
        "/tmp/pagevault-test-{}-{name}-{}-{n}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Command::new("chown")
        .args(["postgres:postgres", &dir.display().to_string()])
        .status()
        .unwrap();
    dir
}

impl Pg {
    /// initdb (with or without data checksums) and start PostgreSQL 15. `archive` is
    /// the archive_command to set, if any (archive_mode on).
    pub fn start(checksums: bool, archive: Option<&str>) -> Pg {
        Pg::start_with(&PgOptions {
            checksums,
            archive: archive.map(str::to_string),
            ..PgOptions::default()
        })
    }

    /// initdb and start a cluster as `o` says.
    pub fn start_with(o: &PgOptions) -> Pg {
        let bin = bin_dir(o.major);
        let dir = postgres_dir("pg");
        let data = dir.join("data");
        let mut init = vec![
            "-D".to_string(),
            data.display().to_string(),
            "--auth=trust".to_string(),
            "-U".to_string(),
            "postgres".to_string(),
            "--no-sync".to_string(),
        ];
        if o.checksums {
            init.push("--data-checksums".to_string());
        } else if o.major >= 18 {
            init.push("--no-data-checksums".to_string());
        }
        if let Some(mb) = o.wal_segsize_mb {
            init.push(format!("--wal-segsize={mb}"));
        }
        let init: Vec<&str> = init.iter().map(String::as_str).collect();
        as_postgres(&bin.join("initdb").display().to_string(), &init);
        let port = free_port();
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nwal_level = replica\nmax_wal_senders = 4\nfsync = off\nshared_buffers = 64MB\n",
            dir.display()
        );
        if let Some(cmd) = &o.archive {
            conf.push_str(&format!(
                "archive_mode = on\narchive_command = '{cmd}'\narchive_timeout = 0\n"
            ));
        }
        if !o.extra_conf.is_empty() {
            conf.push_str(&o.extra_conf);
            conf.push('\n');
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(&mut f, conf.as_bytes()).unwrap();
        let mut pg = Pg {
            dir,
            data,
            port,
            major: o.major,
            bin,
            running: false,
            opts: None,
            owns_dir: true,
        };
        pg.pg_ctl_start();
        pg
    }

    /// Starts a restored data directory of PostgreSQL 15 on a free port.
    pub fn adopt(data: &Path) -> Pg {
        Pg::adopt_with(data, 15)
    }

    /// Starts a restored data directory on a free port with PostgreSQL `major`.
    pub fn adopt_with(data: &Path, major: u32) -> Pg {
        Pg::adopt_conf(data, major, "-c archive_mode=off")
    }

    /// Starts a restored data directory with its own settings only (those the
    /// restore wrote decide whether it archives).
    pub fn adopt_as_restored(data: &Path) -> Pg {
        Pg::adopt_conf(data, 15, "")
    }

    /// Starts a restored data directory that archives with `archive_command` (a
    /// promoted copy writing a new timeline into the same repository).
    pub fn adopt_archiving(data: &Path, archive_command: &str) -> Pg {
        let auto = data.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap();
        text.push_str(&format!(
            "archive_mode = on\narchive_command = '{}'\n",
            archive_command.replace('\'', "''")
        ));
        std::fs::write(&auto, text).unwrap();
        Pg::adopt_conf(data, 15, "")
    }

    fn adopt_conf(data: &Path, major: u32, extra: &str) -> Pg {
        let bin = bin_dir(major);
        let port = free_port();
        let dir = data.parent().unwrap().to_path_buf();
        let opts = format!("-p {port} -c unix_socket_directories=/tmp {extra}");
        let mut pg = Pg {
            dir,
            data: data.to_path_buf(),
            port,
            major,
            bin,
            running: false,
            opts: Some(opts),
            owns_dir: false,
        };
        pg.pg_ctl_start();
        pg
    }

    /// Waits until WAL file `seg` (or a later one) has been archived.
    pub fn wait_archived(&self, seg: &str) {
        let t0 = std::time::Instant::now();
        loop {
            let last = self.sql("SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver");
            // The last archived file may be a backup history file archived after `seg`.
            let done = self.data.join(format!("pg_wal/archive_status/{seg}.done"));
            if (last.len() == 24 && last.as_str() >= seg) || done.exists() {
                return;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(120),
                "{seg} not archived (last {last}):\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Switches to a new WAL segment and waits until the one written so far is
    /// archived; returns its name.
    pub fn switch_and_wait(&self) -> String {
        // One record first: at a segment's first byte with nothing written (17 after a
        // backup's own switch), pg_switch_wal switches nothing.
        self.sql("SELECT pg_logical_emit_message(false, 'pagevault-test', 'switch')");
        let seg = self.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        self.sql("SELECT pg_switch_wal()");
        self.wait_archived(&seg);
        seg
    }

    /// Waits until the server has left recovery (promoted at its target).
    pub fn wait_promoted(&self) {
        for _ in 0..600 {
            if self.sql("SELECT pg_is_in_recovery()") == "f" {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("server still in recovery after 60 s:\n{}", self.log());
    }

    pub fn pg_ctl_start(&mut self) {
        let log = self.log_path();
        let mut args = vec![
            "-D",
            self.data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-t",
            "120",
        ];
        if let Some(o) = &self.opts {
            args.extend(["-o", o.as_str()]);
        }
        args.push("start");
        as_postgres(&self.tool("pg_ctl"), &args);
        self.running = true;
    }

    pub fn stop(&mut self) {
        if self.running {
            let _ = Command::new("runuser")
                .args([
                    "-u",
                    "postgres",
                    "--",
                    &self.tool("pg_ctl"),
                    "-D",
                    self.data.to_str().unwrap(),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ])
                .output();
            self.running = false;
        }
    }

    /// `pgbench -i -s SCALE`, insisting on success.
    pub fn pgbench_init(&self, scale: u32) {
        self.pgbench_ok(&["-i", "-s", &scale.to_string(), "-q"]);
    }

    /// Runs pgbench with `args`, insisting on success; returns its report.
    pub fn pgbench_ok(&self, args: &[&str]) -> String {
        let out = pgbench(self, args).output().unwrap();
        assert!(
            out.status.success(),
            "pgbench {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Creates superuser `role` with `password` and makes its logins over TCP need that
    /// password (scram-sha-256); the tests' own connections (postgres) stay trusted.
    pub fn scram_role(&self, role: &str, password: &str) {
        self.sql(&format!(
            "SET password_encryption = 'scram-sha-256'; CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'"
        ));
        let hba = self.data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        // The first matching line decides: ahead of initdb's trust lines.
        let line = format!("host all {role} 127.0.0.1/32 scram-sha-256\n");
        std::fs::write(&hba, line + &rules).unwrap();
        self.sql("SELECT pg_reload_conf()");
        // The reload is asynchronous: wait until a login without the password fails.
        let t0 = std::time::Instant::now();
        while Command::new(BIN.to_string() + "/psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", role])
            .args(["-d", "postgres", "-w", "-XAtqc", "SELECT 1"])
            .env_remove("PGPASSWORD")
            .env("PGPASSFILE", "/nonexistent")
            .output()
            .unwrap()
            .status
            .success()
        {
            assert!(t0.elapsed().as_secs() < 30, "pg_hba.conf not reloaded");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Runs SQL with psql in database postgres; returns unaligned, tuples-only output.
    /// Table `t(id, v)` of `rows` rows of `width` bytes, frozen and analysed, with room
    /// for HOT updates in place (fillfactor 50).
    pub fn hot_table(&self, rows: u32, width: u32) {
        self.sql("CREATE TABLE t(id int PRIMARY KEY, v text) WITH (fillfactor = 50)");
        self.sql(&format!(
            "INSERT INTO t SELECT g, repeat('x', {width}) FROM generate_series(1, {rows}) g"
        ));
        self.sql("VACUUM (FREEZE, ANALYZE) t");
    }

    /// Runs `sql` and parses the one value it returns.
    pub fn sql_num<T: std::str::FromStr>(&self, sql: &str) -> T
    where
        T::Err: std::fmt::Debug,
    {
        let v = self.sql(sql);
        v.parse()
            .unwrap_or_else(|e| panic!("'{v}' from {sql}: {e:?}"))
    }

    pub fn sql(&self, sql: &str) -> String {
        self.sql_db("postgres", sql)
    }

    /// Runs SQL with this server's psql in database `db`; returns unaligned, tuples-only output.
    pub fn sql_db(&self, db: &str, sql: &str) -> String {
        psql(&self.bin, self.port, db, sql)
    }

    /// The path of one of this server's programs (pg_ctl, pg_basebackup, ...).
    pub fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("log-{}", self.port))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

/// Restores `from` (`--from` stripes or `--repo DIR`) to `target` for the postgres user,
/// with `extra` options; insists on success and returns stdout.
pub fn restore_for_postgres(from: &[&str], target: &Path, extra: &[&str]) -> String {
    let to = target.display().to_string();
    let mut a = vec!["restore"];
    a.extend_from_slice(from);
    a.extend(["--to", &to, "--owner", "postgres"]);
    a.extend_from_slice(extra);
    super::ok(&a)
}

/// Restores repository `repo` into a new data directory for the postgres user, with
/// `extra` options; returns the directory and restore's JSON.
pub fn restore_repo(repo: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let target = postgres_dir("restored").join("data");
    let to = target.display().to_string();
    let mut a = vec![
        "restore", "--repo", repo, "--to", &to, "--owner", "postgres",
    ];
    a.extend_from_slice(extra);
    let r = super::json(&a);
    // Every checked restore of a cluster writes its large relation files with O_DIRECT
    // (a delta's compares in place, through the page cache).
    let w = &r["writes"];
    if !extra.contains(&"--delta") && !extra.contains(&"--dry-run") {
        assert!(w["direct_bytes"].as_u64().unwrap() > 0, "{w}");
    }
    (target, r)
}

/// How a client program reaches the test server on `port` as postgres.
pub fn connect_args(port: u16) -> [String; 6] {
    ["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"].map(String::from)
}

/// Runs SQL with PostgreSQL 15's psql (which talks to 17 and 18 too) against the
/// server on `port`; returns unaligned, tuples-only output.
pub fn sql_at(port: u16, db: &str, sql: &str) -> String {
    psql(Path::new(BIN), port, db, sql)
}

fn psql(bin: &Path, port: u16, db: &str, sql: &str) -> String {
    let out = Command::new(bin.join("psql"))
        .args(connect_args(port))
        .args(["-d", db, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.stop();
        if self.owns_dir && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Chowns a path to postgres (a repository the archive_command writes into).
pub fn give_to_postgres(p: &Path) {
    Command::new("chown")
        .args(["-R", "postgres:postgres", &p.display().to_string()])
        .status()
        .unwrap();
}

/// Key file `text` twice in `dir`: root's (`key`, for the commands root runs) and the
/// postgres user's (`pg-key`, for archive_command and a restore `--owner postgres`):
/// a key file is read only when root, the running user or the restored server's owns it.
pub fn keys_for_postgres(dir: &Path, text: &[u8]) -> (String, String) {
    use std::os::unix::fs::PermissionsExt;
    let (key, pg_key) = (dir.join("key"), dir.join("pg-key"));
    for k in [&key, &pg_key] {
        std::fs::write(k, text).unwrap();
        std::fs::set_permissions(k, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    give_to_postgres(&pg_key);
    (key.display().to_string(), pg_key.display().to_string())
}

/// A pgbench command against `pg`, its own version's (add its options).
pub fn pgbench(pg: &Pg, args: &[&str]) -> Command {
    let mut c = Command::new(pg.bin.join("pgbench"));
    c.args(connect_args(pg.port)).args(args).arg("postgres");
    c
}

/// pgbench in the background against `pg` for `secs` seconds at up to `rate`
/// transactions a second (2 clients), its output discarded.
pub fn pgbench_load(pg: &Pg, secs: u32, rate: u32) -> std::process::Child {
    pgbench(
        pg,
        &[
            "-T",
            &secs.to_string(),
            "-c",
            "2",
            "-n",
            "-R",
            &rate.to_string(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// A `ty` backup of `url` into `repo` taken while `load` runs (after `settle`), then
/// the load waited for; an incremental must have used the block summaries. Its JSON.
pub fn backup_during(
    mut load: std::process::Child,
    settle: std::time::Duration,
    url: &str,
    repo: &str,
    ty: &str,
) -> serde_json::Value {
    std::thread::sleep(settle);
    let j = super::json(&["backup", "--source", url, "--repo", repo, "--type", ty]);
    assert!(load.wait().unwrap().success());
    if ty == "incr" {
        assert_eq!(j["change_map"]["method"], "summaries", "{j}");
    }
    j
}

/// pgbench's invariant: every transaction moves the same delta through all four tables.
pub fn assert_pgbench_consistent(pg: &Pg) {
    let sums = pg.sql(
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || \
         (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || (SELECT coalesce(sum(delta),0) FROM pgbench_history)",
    );
    let v: Vec<&str> = sums.split(' ').collect();
    assert!(
        v.iter().all(|x| *x == v[0]),
        "pgbench tables disagree: {sums}"
    );
}

/// What PostgreSQL's own checkers say of a restored cluster, in every database that
/// takes connections: pg_amcheck --heapallindexed is clean; pg_visibility's
/// pg_check_visible and pg_check_frozen find nothing in any table (a visibility map
/// that calls a page all-visible or all-frozen when it is not); and an index-only scan
/// of every table with a btree index counts what a sequential scan counts.
pub fn check_database(pg: &Pg) {
    amcheck(pg);
    let dbs = pg.sql(
        "SELECT string_agg(datname, ' ' ORDER BY datname) FROM pg_database WHERE datallowconn",
    );
    for db in dbs.split_whitespace() {
        let bad = visibility_findings(pg, db);
        assert!(bad.is_empty(), "database {db}: {bad}\n{}", pg.log());
    }
}

/// pg_check_visible / pg_check_frozen and index-only against sequential counts over
/// every table of `db`: empty when all agree, else each finding (table, counts).
pub fn visibility_findings(pg: &Pg, db: &str) -> String {
    pg.sql_db(db, "CREATE EXTENSION IF NOT EXISTS pg_visibility");
    let mut bad = pg.sql_db(
        db,
        "SELECT coalesce(string_agg(format('%s: %s tuple(s) on all-visible pages not visible, %s on all-frozen pages not frozen', oid::regclass, v, f), '; '), '') \
         FROM (SELECT c.oid, (SELECT count(*) FROM pg_check_visible(c.oid)) v, (SELECT count(*) FROM pg_check_frozen(c.oid)) f \
         FROM pg_class c WHERE c.relkind IN ('r', 'm', 't') AND c.relpersistence <> 't') x WHERE v > 0 OR f > 0",
    );
    // Only index-only scans allowed, then only sequential ones: each count planned anew.
    let counts = pg.sql_db(
        db,
        "CREATE FUNCTION pg_temp.pv_counts() RETURNS text LANGUAGE plpgsql AS $f$ \
         DECLARE r record; ios bigint; seq bigint; bad text := ''; BEGIN \
           FOR r IN SELECT c.oid::regclass AS t FROM pg_class c WHERE c.relkind IN ('r', 'm') AND c.relpersistence <> 't' \
             AND EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
                         WHERE i.indrelid = c.oid AND am.amname = 'btree' AND i.indpred IS NULL AND i.indisvalid) LOOP \
             PERFORM set_config('enable_seqscan', 'off', true); PERFORM set_config('enable_bitmapscan', 'off', true); \
             PERFORM set_config('enable_indexscan', 'off', true); PERFORM set_config('enable_indexonlyscan', 'on', true); \
             EXECUTE format('SELECT count(*) FROM %s', r.t) INTO ios; \
             PERFORM set_config('enable_seqscan', 'on', true); PERFORM set_config('enable_indexonlyscan', 'off', true); \
             EXECUTE format('SELECT count(*) FROM %s', r.t) INTO seq; \
             IF ios <> seq THEN bad := bad || format('%s: an index-only scan counts %s rows, a sequential scan %s; ', r.t, ios, seq); END IF; \
           END LOOP; RETURN bad; END $f$; \
         SELECT pg_temp.pv_counts()",
    );
    bad.push_str(&counts);
    bad
}

/// pg_amcheck --heapallindexed over every database: must be clean.
pub fn amcheck(pg: &Pg) {
    let out = Command::new(pg.bin.join("pg_amcheck"))
        .args(connect_args(pg.port))
        .args(["--install-missing", "--heapallindexed", "--all"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_amcheck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the cluster restored into `target` to the LSN of the second of two marks (the
/// object-store round trips' chain): it promotes there, holds marks 1 and 2 and the
/// balances of the differential's updates, and its checkers find nothing.
pub fn promoted_at_the_second_mark(target: &Path) {
    let r = Pg::adopt(target);
    r.wait_promoted();
    assert_eq!(
        r.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM marks"),
        "1,2",
        "{}",
        r.log()
    );
    assert_eq!(
        r.sql("SELECT sum(abalance) FROM pgbench_accounts WHERE aid <= 2000"),
        "6000"
    );
    check_database(&r);
}

/// The uid of user `name`.
pub fn uid_of(name: &str) -> u32 {
    let out = Command::new("id").args(["-u", name]).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
