//! The drill's scratch server: the restored cluster started on a free loopback port
//! with archiving off and logical replication workers off (a copy must never write to
//! the archive or consume a publisher's changes), its own pg_hba (trust on its socket
//! only, in the private scratch directory) and configuration (`config`), watched until
//! recovery ends, then stopped.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) struct Server {
    child: Child,
    pub bin: PathBuf,
    pub data: PathBuf,
    pub socket_dir: PathBuf,
    pub port: u16,
    pub log: PathBuf,
    pub db_user: String,
    /// The data directory's owner: name, uid, gid.
    owner: Option<(String, u32, u32)>,
    stopped: bool,
}

/// `prog` run as `owner` (its name, uid and gid) when root runs (PostgreSQL refuses
/// root): its uid, groups and home set between fork and exec, as the server's own user
/// runs it.
fn as_owner(owner: Option<&(String, u32, u32)>, prog: &Path) -> Result<Command> {
    let mut c = plain(prog);
    if let Some((u, uid, gid)) = owner.filter(|_| crate::sys::is_root()) {
        crate::sys::run_as(&mut c, u, *uid, *gid)
            .with_context(|| format!("cannot run '{}' as user '{u}'", prog.display()))?;
    }
    Ok(c)
}

/// `prog` with nothing of the caller's libpq environment that redirects or alters a
/// connection, and no input.
fn plain(prog: &Path) -> Command {
    let mut c = Command::new(prog);
    for v in [
        "PGOPTIONS",
        "PGSERVICE",
        "PGSERVICEFILE",
        "PGHOST",
        "PGPORT",
        "PGDATA",
    ] {
        c.env_remove(v);
    }
    c.stdin(Stdio::null());
    c
}

/// Whether 127.0.0.1:`port` is free to listen on.
pub(super) fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port the system says is free now.
pub(super) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).context("cannot find a free port")?;
    Ok(l.local_addr()?.port())
}

/// The last `n` lines of a log file (its last 64 KiB at most).
pub(super) fn log_tail(log: &Path, n: usize) -> String {
    let mut f = match std::fs::File::open(log) {
        Ok(f) => f,
        Err(e) => return format!("(no server log '{}': {e})", log.display()),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 << 10)));
    let mut b = vec![];
    let _ = f.read_to_end(&mut b);
    let text = String::from_utf8_lossy(&b);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    /// Starts `bin/postgres` on `data`, its socket and log in `scratch`.
    pub fn start(
        bin: &Path,
        data: &Path,
        scratch: &Path,
        port: u16,
        owner: Option<&str>,
        db_user: &str,
    ) -> Result<Server> {
        if !port_free(port) {
            bail!("port {port} on 127.0.0.1 is in use: give another with --port");
        }
        let owner = match owner {
            Some(u) => {
                let (uid, gid) = crate::target::lookup_user(u)?;
                Some((u.to_string(), uid, gid))
            }
            None => None,
        };
        let ids = owner.as_ref().map(|&(_, uid, gid)| (uid, gid));
        // The server's own files, the owner's, made new (never through a link).
        let top = super::config::open_dir(scratch)?;
        let write = |name: &str, text: &str, ids| -> Result<std::fs::File> {
            let mut f = super::config::create_at(&top, name, ids)
                .and_then(|mut f| f.write_all(text.as_bytes()).map(|_| f))
                .with_context(|| format!("cannot write '{}'", scratch.join(name).display()))?;
            f.flush()?;
            Ok(f)
        };
        let hba = scratch.join("drill_hba.conf");
        write("drill_hba.conf", "local all all trust\n", ids)?;
        let ident = scratch.join("drill_ident.conf");
        write("drill_ident.conf", "", ids)?;
        let log = scratch.join("server.log");
        let out = write("server.log", "", None)?;
        let mut c = as_owner(owner.as_ref(), &bin.join("postgres"))?;
        c.arg("-D").arg(data);
        let socket = scratch.display().to_string();
        for (k, v) in [
            ("port", port.to_string().as_str()),
            ("listen_addresses", "127.0.0.1"),
            ("unix_socket_directories", &socket),
            ("hba_file", hba.to_str().unwrap_or_default()),
            ("ident_file", ident.to_str().unwrap_or_default()),
            ("archive_mode", "off"),
            ("recovery_target_action", "promote"),
            ("max_logical_replication_workers", "0"),
            ("primary_conninfo", ""),
            ("ssl", "off"),
            ("logging_collector", "off"),
            // Never the set's, whatever a configuration file says.
            ("shared_preload_libraries", ""),
            ("session_preload_libraries", ""),
            ("local_preload_libraries", ""),
            ("recovery_end_command", ""),
            ("archive_cleanup_command", ""),
        ] {
            c.arg("-c").arg(format!("{k}={v}"));
        }
        let child = c
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start '{}'", bin.join("postgres").display()))?;
        Ok(Server {
            child,
            bin: bin.to_path_buf(),
            data: data.to_path_buf(),
            socket_dir: scratch.to_path_buf(),
            port,
            log,
            db_user: db_user.to_string(),
            owner,
            stopped: false,
        })
    }

    pub fn connect(&self, db: &str) -> Result<postgres::Client, postgres::Error> {
        postgres::Config::new()
            .host_path(&self.socket_dir)
            .port(self.port)
            .user(&self.db_user)
            .dbname(db)
            .application_name("pagevault drill")
            .connect_timeout(Duration::from_secs(10))
            .connect(postgres::NoTls)
    }

    fn failed(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "{what}; the server log's last lines ({}):\n{}",
            self.log.display(),
            log_tail(&self.log, 15)
        )
    }

    /// Waits until the server has left recovery (promoted), for at most `timeout`.
    pub fn wait_promoted(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(sig) = crate::interrupt::received() {
                return Err(crate::interrupt::error(sig));
            }
            if let Some(st) = self.child.try_wait()? {
                self.stopped = true;
                return Err(
                    self.failed(&format!("the server stopped ({st}) before recovery ended"))
                );
            }
            let last = match self.connect("postgres") {
                Ok(mut c) => match c.query_one("SELECT pg_is_in_recovery()", &[]) {
                    Ok(row) if !row.get::<_, bool>(0) => return Ok(()),
                    Ok(_) => "in recovery".into(),
                    Err(e) => crate::source::postgres::pg_err(&e),
                },
                Err(e) => crate::source::postgres::pg_err(&e),
            };
            if Instant::now() > deadline {
                return Err(self.failed(&format!(
                    "recovery did not end within {} s (--timeout; last: {last})",
                    timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// A client program of the server's version, connected to `db` on its socket.
    pub fn client(&self, prog: &str, db: &str) -> Command {
        let mut c = plain(&self.bin.join(prog));
        c.arg("-h").arg(&self.socket_dir).args([
            "-p",
            &self.port.to_string(),
            "-U",
            &self.db_user,
            "-w",
        ]);
        if prog == "psql" {
            c.args(["-d", db]);
        }
        c
    }

    /// Stops the server (fast shutdown; immediate when that fails).
    pub fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let pg_ctl = self.bin.join("pg_ctl");
        let mode = |m: &str| {
            as_owner(self.owner.as_ref(), &pg_ctl).is_ok_and(|mut c| {
                c.arg("-D")
                    .arg(&self.data)
                    .args(["-m", m, "-w", "-t", "120", "stop"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
        };
        if !mode("fast") && !mode("immediate") {
            let _ = self.child.kill();
        }
        self.child.wait().context("waiting for the server")?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
