//! How the PostgreSQL source connects: the URL as the driver parses it, the password
//! found where libpq finds it (the URL, then `--password-file`, `PGPASSWORD`, the
//! password file), and the location users see and sets record, built from user, hosts,
//! ports and database alone: never a password or a query parameter.

use super::pg_err;
use crate::pg::pgpass;
use anyhow::{anyhow, bail, Context, Result};
use postgres::config::Host;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What libpq reads of the process besides the URL.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// `PGPASSWORD`.
    pub password: Option<Vec<u8>>,
    /// `PGPASSFILE`.
    pub passfile: Option<PathBuf>,
    /// Where `~/.pgpass` is: `HOME`, else the user database's home directory.
    pub home: Option<PathBuf>,
    /// Who connects when the URL names no user: the effective user.
    pub user: Option<String>,
}

impl Env {
    pub fn of_process() -> Env {
        // An empty variable is an unset one (libpq).
        let var = |k| std::env::var_os(k).filter(|v| !v.is_empty());
        let me = crate::sys::current_user();
        Env {
            password: var("PGPASSWORD").map(|v| v.into_vec()),
            passfile: var("PGPASSFILE").map(PathBuf::from),
            home: var("HOME")
                .map(PathBuf::from)
                .or_else(|| me.as_ref().map(|m| m.1.clone())),
            user: me.map(|m| m.0),
        }
    }
}

/// A source URL's connection settings.
pub struct Conn {
    config: postgres::Config,
    /// `postgres://USER@HOST:PORT/DB`: what users see and sets record.
    pub location: String,
    /// The database connected to (libpq's default: the user's name).
    pub database: String,
    /// Where the password came from (a refused login names it).
    origin: Option<String>,
    /// What was ignored on the way (a password file others may read).
    pub warnings: Vec<String>,
}

/// Splits pagevault's own `?pgdata=DIR` off a source URL: (the URL the driver parses,
/// the data directory if given).
pub fn split_pgdata(spec: &str) -> (String, Option<PathBuf>) {
    let (base, query) = spec.split_once('?').unwrap_or((spec, ""));
    let mut keep = vec![];
    let mut pgdata = None;
    for kv in query.split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("pgdata", v)) => pgdata = Some(PathBuf::from(v)),
            _ => keep.push(kv),
        }
    }
    match keep.is_empty() {
        true => (base.to_string(), pgdata),
        false => (format!("{base}?{}", keep.join("&")), pgdata),
    }
}

/// Parses `url` (without pagevault's own `pgdata`) and settles the password: the
/// URL's (`user:pw@` or `?password=`), else `password_file`'s first line, else
/// `PGPASSWORD`, else the password file's (`PGPASSFILE` or `~/.pgpass`). An empty
/// password is none (libpq).
pub fn settle(url: &str, password_file: Option<&Path>, env: &Env) -> Result<Conn> {
    // The driver's parse errors name options, never values.
    let mut config: postgres::Config = url.parse().map_err(|e| {
        anyhow!(
            "invalid PostgreSQL URL: {}; the form is postgres://USER@HOST:PORT/DB?pgdata=DIR",
            pg_err(&e)
        )
    })?;
    // Set for the driver too, so that the password file is searched for this user.
    if let (None, Some(u)) = (config.get_user(), &env.user) {
        config.user(u);
    }
    let user = config.get_user().unwrap_or_default().to_string();
    let database = config.get_dbname().unwrap_or(&user).to_string();
    let given = password_file.map(read_password_file).transpose()?;
    let mut warnings = vec![];
    let nonempty = |p: &[u8]| (!p.is_empty()).then(|| p.to_vec());
    let found = if let Some(p) = config.get_password().and_then(nonempty) {
        Some((p, "the URL".to_string()))
    } else if let (Some(p), Some(f)) = (given, password_file) {
        Some((p, format!("--password-file '{}'", f.display())))
    } else if let Some(p) = env.password.as_deref().and_then(nonempty) {
        Some((p, "PGPASSWORD".to_string()))
    } else {
        let file = env
            .passfile
            .clone()
            .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")));
        file.and_then(|f| {
            let key = key(&config, &user, &database);
            let p = from_pgpass(&f, &key, &mut warnings)?;
            Some((
                nonempty(&p)?,
                format!("the password file '{}'", f.display()),
            ))
        })
    };
    let origin = found.map(|(p, origin)| {
        config.password(p);
        origin
    });
    Ok(Conn {
        location: location(&config, &user, &database),
        config,
        database,
        origin,
        warnings,
    })
}

impl Conn {
    /// Connects. An error names the location, says where a refused password came
    /// from, and never holds the password.
    pub fn connect(&self) -> Result<postgres::Client> {
        self.config.connect(postgres::NoTls).map_err(|e| {
            let m = self.redact(self.refused(&e));
            // Not answering, starting up or out of connection slots: may pass.
            use postgres::error::SqlState;
            let later = (e.as_db_error().is_none() && !pg_err(&e).ends_with("password missing"))
                || e.code() == Some(&SqlState::CANNOT_CONNECT_NOW)
                || e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS);
            if later {
                crate::fault::transient(m)
            } else {
                anyhow!("{m}")
            }
        })
    }

    fn refused(&self, e: &postgres::Error) -> String {
        let mut why = pg_err(e);
        let missing = e.as_db_error().is_none() && why.ends_with("password missing");
        if missing {
            why = "the server asks for a password and none was given".into();
        }
        let mut m = format!("cannot connect to PostgreSQL at {}: {why}", self.location);
        if missing {
            m.push_str(": give it in the URL, with --password-file, PGPASSWORD or a password file (PGPASSFILE, ~/.pgpass)");
        } else if e.code() == Some(&postgres::error::SqlState::INVALID_PASSWORD) {
            if let Some(origin) = &self.origin {
                m.push_str(&format!("; the password came from {origin}"));
            }
        } else if e.as_db_error().is_none() {
            m.push_str("; is the server running and the URL right?");
        }
        for w in &self.warnings {
            m.push_str(&format!(" ({w})"));
        }
        m
    }

    /// `m` with the password blanked out, should any message ever carry it.
    fn redact(&self, m: String) -> String {
        match self.config.get_password().filter(|p| !p.is_empty()) {
            Some(p) => m.replace(&*String::from_utf8_lossy(p), "********"),
            None => m,
        }
    }
}

/// The first line of a `--password-file`, without its line ending.
fn read_password_file(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read the password file '{}' (--password-file)",
            path.display()
        )
    })?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        bail!(
            "the password file '{}' (--password-file) holds no password on its first line",
            path.display()
        );
    }
    Ok(line.to_vec())
}

/// What the password file is searched by: the first host (or host address) and port.
fn key(config: &postgres::Config, user: &str, database: &str) -> pgpass::Key {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.to_string_lossy().into_owned(),
        None => (config.get_hostaddrs().first())
            .map(|a| a.to_string())
            .unwrap_or_default(),
    };
    pgpass::Key {
        host: pgpass::host_key(&host).to_string(),
        port: config.get_ports().first().unwrap_or(&5432).to_string(),
        database: database.to_string(),
        user: user.to_string(),
    }
}

/// The password file's password for `key`. A file that is missing or unreadable is
/// skipped; one that is not a plain file, or that group or others may access, is
/// ignored with a warning, as libpq does.
fn from_pgpass(path: &Path, key: &pgpass::Key, warnings: &mut Vec<String>) -> Option<Vec<u8>> {
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() {
        warnings.push(format!(
            "password file '{}' is not a plain file: ignored",
            path.display()
        ));
        return None;
    }
    if m.permissions().mode() & 0o077 != 0 {
        warnings.push(format!(
            "password file '{}' has group or world access: ignored, as libpq does; permissions should be u=rw (0600) or less",
            path.display()
        ));
        return None;
    }
    pgpass::lookup(&std::fs::read(path).ok()?, key)
}

/// `postgres://USER@HOST:PORT,.../DB`, each part percent-encoded as a URL needs.
fn location(config: &postgres::Config, user: &str, database: &str) -> String {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let shown: Vec<String> = (0..hosts.len().max(addrs.len()))
        .map(|i| {
            let host = match (hosts.get(i), addrs.get(i)) {
                (Some(Host::Tcp(h)), _) if h.contains(':') => format!("[{h}]"),
                (Some(Host::Tcp(h)), _) => encode(h),
                (Some(Host::Unix(p)), _) => encode(&p.to_string_lossy()),
                (None, Some(std::net::IpAddr::V6(a))) => format!("[{a}]"),
                (None, Some(a)) => a.to_string(),
                (None, None) => String::new(),
            };
            // One port serves every host.
            let port = ports.get(i).or(ports.first()).unwrap_or(&5432);
            format!("{host}:{port}")
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        encode(user),
        shown.join(","),
        encode(database)
    )
}

/// Percent-encodes all but a URL's unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const SECRET: &str = "S3cr3t-unit";

    fn base_env() -> Env {
        Env {
            user: Some("osuser".into()),
            ..Env::default()
        }
    }

    fn password(c: &Conn) -> Option<String> {
        (c.config.get_password()).map(|p| String::from_utf8(p.to_vec()).unwrap())
    }

    /// A file holding `text` with `mode`.
    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn locations_hold_no_password_and_no_query() {
        for (url, want) in [
            (
                "postgres://alice:S3cr3t-unit@127.0.0.1:5433/app?sslmode=disable&application_name=x",
                "postgres://alice@127.0.0.1:5433/app",
            ),
            (
                "postgresql://alice@db.example/app?password=S3cr3t-unit",
                "postgres://alice@db.example:5432/app",
            ),
            // No database: the user's name (libpq); no user: the process's.
            ("postgres://bob@h:1", "postgres://bob@h:1/bob"),
            ("postgres://h:1/d", "postgres://osuser@h:1/d"),
            (
                "postgres://u@[::1]:5432,h2:6000/d",
                "postgres://u@[::1]:5432,h2:6000/d",
            ),
            (
                "postgres://u@%2Fvar%2Frun%2Fpostgresql/d",
                "postgres://u@%2Fvar%2Frun%2Fpostgresql:5432/d",
            ),
            (
                "postgres://u@/d?hostaddr=10.0.0.1&port=7000",
                "postgres://u@10.0.0.1:7000/d",
            ),
            ("postgres://u%40corp@h/my%20db", "postgres://u%40corp@h:5432/my%20db"),
        ] {
            let c = settle(url, None, &base_env()).unwrap();
            assert_eq!(c.location, want, "{url}");
            assert!(!c.location.contains(SECRET));
        }
        let c = settle("postgres://u@h/my%20db", None, &base_env()).unwrap();
        assert_eq!(c.database, "my db");
    }

    #[test]
    fn bad_urls_are_refused_without_their_values() {
        for url in [
            "postgres://u:S3cr3t-unit@h:notaport/d",
            "postgres://u:S3cr3t-unit@h/d?S3cr3t-unit",
            "postgres://u:S3cr3t-unit@h/d?sslmode=S3cr3t-unit",
        ] {
            let e = settle(url, None, &base_env()).err().unwrap().to_string();
            assert!(e.contains("invalid PostgreSQL URL"), "{e}");
            assert!(!e.contains(SECRET), "{e}");
        }
    }

    #[test]
    fn the_url_wins_then_the_file_then_pgpassword_then_pgpass() {
        let dir = tempfile::tempdir().unwrap();
        let pwfile = file(dir.path(), "pw", "from-file\nsecond line\n", 0o600);
        let pgpass = file(dir.path(), "pgpass", "*:*:*:*:from-pgpass\n", 0o600);
        let env = Env {
            password: Some(b"from-env".to_vec()),
            passfile: Some(pgpass.clone()),
            ..base_env()
        };
        let pw = |url: &str, f: Option<&Path>, env: &Env| {
            let c = settle(url, f, env).unwrap();
            (password(&c), c.origin.clone())
        };
        let (p, o) = pw("postgres://u:from-url@h/d", Some(&pwfile), &env);
        assert_eq!(
            (p.as_deref(), o.as_deref()),
            (Some("from-url"), Some("the URL"))
        );
        let (p, _) = pw("postgres://u@h/d?password=from-query", Some(&pwfile), &env);
        assert_eq!(p.as_deref(), Some("from-query"));
        let (p, o) = pw("postgres://u@h/d", Some(&pwfile), &env);
        assert_eq!(p.as_deref(), Some("from-file"));
        assert!(o.unwrap().starts_with("--password-file"));
        let (p, o) = pw("postgres://u@h/d", None, &env);
        assert_eq!(
            (p.as_deref(), o.as_deref()),
            (Some("from-env"), Some("PGPASSWORD"))
        );
        let no_env = Env {
            password: None,
            ..env.clone()
        };
        let (p, o) = pw("postgres://u@h/d", None, &no_env);
        assert_eq!(p.as_deref(), Some("from-pgpass"));
        assert!(o.unwrap().starts_with("the password file"));
        // An empty password anywhere is none: the next place is asked.
        let empty = Env {
            password: Some(vec![]),
            ..env.clone()
        };
        let (p, _) = pw("postgres://u:@h/d", None, &empty);
        assert_eq!(p.as_deref(), Some("from-pgpass"));
        // ~/.pgpass when PGPASSFILE is not set.
        std::fs::rename(&pgpass, dir.path().join(".pgpass")).unwrap();
        let home = Env {
            home: Some(dir.path().to_path_buf()),
            ..Env::default()
        };
        let (p, _) = pw("postgres://u@h/d", None, &home);
        assert_eq!(p.as_deref(), Some("from-pgpass"));
        // Nowhere: no password.
        let (p, o) = pw("postgres://u@h/d", None, &Env::default());
        assert_eq!((p, o), (None, None));
    }

    #[test]
    fn the_password_file_is_searched_by_host_port_database_and_user() {
        let dir = tempfile::tempdir().unwrap();
        let pgpass = file(
            dir.path(),
            "pgpass",
            "# comment\n\
             db.example:5433:app:alice:one\n\
             db.example:*:*:alice:two\n\
             localhost:5432:osuser:osuser:three\n\
             *:*:*:*:four\n",
            0o600,
        );
        let env = Env {
            passfile: Some(pgpass),
            ..base_env()
        };
        let pw = |url: &str| password(&settle(url, None, &env).unwrap());
        assert_eq!(
            pw("postgres://alice@db.example:5433/app").as_deref(),
            Some("one")
        );
        assert_eq!(
            pw("postgres://alice@db.example/other").as_deref(),
            Some("two")
        );
        // A socket in the default directory is `localhost`; user and database default.
        assert_eq!(
            pw("postgres://%2Fvar%2Frun%2Fpostgresql").as_deref(),
            Some("three")
        );
        assert_eq!(
            pw("postgres://bob@db.example:5433/app").as_deref(),
            Some("four")
        );
    }

    #[test]
    fn a_password_file_others_may_read_is_ignored_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o640, 0o604, 0o610, 0o644] {
            let pgpass = file(dir.path(), "pgpass", "*:*:*:*:open\n", mode);
            let env = Env {
                passfile: Some(pgpass.clone()),
                ..base_env()
            };
            let c = settle("postgres://u@h/d", None, &env).unwrap();
            assert_eq!(password(&c), None, "{mode:o}");
            assert_eq!(c.warnings.len(), 1);
            assert!(
                c.warnings[0].contains("group or world access"),
                "{:?}",
                c.warnings
            );
            assert!(c.warnings[0].contains(&pgpass.display().to_string()));
        }
        for mode in [0o600, 0o400] {
            let pgpass = file(dir.path(), "pgpass", "*:*:*:*:closed\n", mode);
            let env = Env {
                passfile: Some(pgpass),
                ..base_env()
            };
            let c = settle("postgres://u@h/d", None, &env).unwrap();
            assert_eq!(password(&c).as_deref(), Some("closed"), "{mode:o}");
            assert!(c.warnings.is_empty());
        }
        // A directory is not a password file; a missing one is no warning.
        let env = Env {
            passfile: Some(dir.path().to_path_buf()),
            ..base_env()
        };
        let c = settle("postgres://u@h/d", None, &env).unwrap();
        assert!(c.warnings[0].contains("not a plain file"));
        let env = Env {
            passfile: Some(dir.path().join("none")),
            ..base_env()
        };
        assert!(settle("postgres://u@h/d", None, &env)
            .unwrap()
            .warnings
            .is_empty());
        // Not searched at all when a password was given.
        let open = file(dir.path(), "open", "*:*:*:*:x\n", 0o644);
        let env = Env {
            passfile: Some(open),
            ..base_env()
        };
        let c = settle("postgres://u:pw@h/d", None, &env).unwrap();
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn a_password_file_option_is_read_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let crlf = file(dir.path(), "crlf", "pw\r\n", 0o600);
        let c = settle("postgres://u@h/d", Some(&crlf), &base_env()).unwrap();
        assert_eq!(password(&c).as_deref(), Some("pw"));
        let bare = file(dir.path(), "bare", "pw", 0o600);
        let c = settle("postgres://u@h/d", Some(&bare), &base_env()).unwrap();
        assert_eq!(password(&c).as_deref(), Some("pw"));
        let empty = file(dir.path(), "empty", "\nsecond\n", 0o600);
        let e = settle("postgres://u@h/d", Some(&empty), &base_env())
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("no password on its first line"),
            "{e}"
        );
        // Refused even when the URL has the password: the option names a file to read.
        let missing = dir.path().join("missing");
        let e = settle("postgres://u:pw@h/d", Some(&missing), &base_env())
            .err()
            .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("cannot read the password file") && e.contains("missing"),
            "{e}"
        );
    }

    #[test]
    fn connection_errors_never_hold_the_password() {
        // Nothing listens on port 1.
        let url = format!("postgres://u:{SECRET}@127.0.0.1:1/d");
        let c = settle(&url, None, &base_env()).unwrap();
        let e = c.connect().err().unwrap().to_string();
        assert!(
            e.contains("cannot connect to PostgreSQL at postgres://u@127.0.0.1:1/d"),
            "{e}"
        );
        assert!(e.contains("server running"), "{e}");
        assert!(!e.contains(SECRET), "{e}");
        assert_eq!(c.redact(format!("x {SECRET} y")), "x ******** y");
    }
}
