//! A real PostgreSQL 15 cluster for tests: initdb'd and started as the `postgres`
//! user on 127.0.0.1 on a free port, stopped and removed on drop.
#![allow(dead_code)]

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct Pg {
    pub dir: PathBuf,
    pub data: PathBuf,
    pub port: u16,
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

/// A fresh directory the postgres user owns.
pub fn postgres_dir(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| super::sweep_ended_runs("pagevault-test"));
    let dir = PathBuf::from(format!(
        "/tmp/pagevault-test-{}-{name}-{}",
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
    /// initdb (with or without data checksums) and start. `archive` is the
    /// archive_command to set, if any (archive_mode on).
    pub fn start(checksums: bool, archive: Option<&str>) -> Pg {
        let dir = postgres_dir("pg");
        let data = dir.join("data");
        let mut init = vec![
            "-D",
            data.to_str().unwrap(),
            "--auth=trust",
            "-U",
            "postgres",
            "--no-sync",
        ];
        if checksums {
            init.push("--data-checksums");
        }
        as_postgres(&format!("{BIN}/initdb"), &init);
        let port = free_port();
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nwal_level = replica\nmax_wal_senders = 4\nfsync = off\nshared_buffers = 64MB\n",
            dir.display()
        );
        if let Some(cmd) = archive {
            conf.push_str(&format!(
                "archive_mode = on\narchive_command = '{cmd}'\narchive_timeout = 0\n"
            ));
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
            running: false,
            opts: None,
            owns_dir: true,
        };
        pg.pg_ctl_start();
        pg
    }

    /// Starts a restored data directory on a free port.
    pub fn adopt(data: &Path) -> Pg {
        let port = free_port();
        let dir = data.parent().unwrap().to_path_buf();
        let opts = format!("-p {port} -c unix_socket_directories=/tmp -c archive_mode=off");
        let mut pg = Pg {
            dir,
            data: data.to_path_buf(),
            port,
            running: false,
            opts: Some(opts),
            owns_dir: false,
        };
        pg.pg_ctl_start();
        pg
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
        as_postgres(&format!("{BIN}/pg_ctl"), &args);
        self.running = true;
    }

    pub fn stop(&mut self) {
        if self.running {
            let _ = Command::new("runuser")
                .args([
                    "-u",
                    "postgres",
                    "--",
                    &format!("{BIN}/pg_ctl"),
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

    /// Runs SQL with psql; returns unaligned, tuples-only output.
    pub fn sql(&self, sql: &str) -> String {
        sql_at(self.port, "postgres", sql)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("log-{}", self.port))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

pub fn sql_at(port: u16, db: &str, sql: &str) -> String {
    let out = Command::new(format!("{BIN}/psql"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            db,
            "-XAtq",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
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

/// A pgbench command against `pg` (add its options).
pub fn pgbench(pg: &Pg, args: &[&str]) -> Command {
    let mut c = Command::new(format!("{BIN}/pgbench"));
    c.args([
        "-h",
        "127.0.0.1",
        "-p",
        &pg.port.to_string(),
        "-U",
        "postgres",
    ])
    .args(args)
    .arg("postgres");
    c
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

/// pg_amcheck --heapallindexed over every database: must be clean.
pub fn amcheck(pg: &Pg) {
    let out = Command::new(format!("{BIN}/pg_amcheck"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port.to_string(),
            "-U",
            "postgres",
            "--install-missing",
            "--heapallindexed",
            "--all",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg_amcheck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
