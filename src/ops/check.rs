//! `check`: proves that backups and recovery will work, end to end, before they are
//! needed: the repository opens and takes a write, the key loads and is the
//! repository's, the server is one pagevault backs up and the cluster the repository
//! holds, its archive_command brings a switched WAL segment into the repository, the
//! restore_command a restore would write fetches it as the server's user, no archived
//! segment is marked damaged, and how much room is left. Every check runs (one failing
//! does not hide the next), each failure names its fix.

use crate::format::manifest::BackupType;
use crate::repo::{wal, Repo};
use crate::source::postgres::{connect, pg_err};
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// `postgres://USER@HOST:PORT/DB` (`?pgdata=DIR` allowed, as for backup).
    pub source: String,
    pub password_file: Option<PathBuf>,
    pub repo: String,
    /// How long to wait for the switched segment to reach the repository.
    pub timeout: Duration,
    pub store: crate::device::object::StoreOptions,
    /// Why the key given (`--key-file`, `--passphrase-file`) could not be loaded.
    pub key_error: Option<String>,
    /// The repository `archive-push --stanza S [--config F]` pushes into, as the
    /// configuration file says (the command line's reading of it).
    pub stanza_repo: Option<StanzaRepo>,
}

/// Looks up what `archive-push --stanza S` runs with in configuration file `F` (None:
/// the default): the value of a key (`repo`, `async`, `spool`).
pub type StanzaRepo = fn(Option<&std::path::Path>, &str, &str) -> Result<Option<String>>;

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    /// Works, but not as it should be set up.
    Warn,
    Fail,
    /// Not run: what it needs failed before.
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Outcome,
    pub ok: bool,
    pub detail: String,
    /// What to do when it is not ok.
    pub fix: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub command: &'static str,
    pub ok: bool,
    pub checks: Vec<Check>,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, name: &'static str, status: Outcome, detail: String, fix: Option<String>) {
        self.0.push(Check {
            name,
            ok: status != Outcome::Fail,
            status,
            detail,
            fix,
        });
    }
    fn ok(&mut self, name: &'static str, detail: String) {
        self.add(name, Outcome::Ok, detail, None);
    }
    fn fail(&mut self, name: &'static str, detail: String, fix: String) {
        self.add(name, Outcome::Fail, detail, Some(fix));
    }
    fn skip(&mut self, name: &'static str, why: &str) {
        self.add(name, Outcome::Skip, format!("not run: {why}"), None);
    }
}

/// What the server said, as far as the checks after it need.
struct Server {
    client: postgres::Client,
    sysid: String,
    data_directory: Option<PathBuf>,
}

pub fn check(o: &CheckOptions) -> Result<CheckReport> {
    let mut c = Checks::default();
    let plain_store = crate::device::object::StoreOptions {
        key: None,
        ..o.store.clone()
    };
    let repo = match Repo::open(&o.repo, false, &plain_store) {
        Ok(r) => {
            let what = match (r.encryption(), r.signing()) {
                (Some(_), _) => "encrypted",
                (None, Some(_)) => "signed",
                _ => "plain",
            };
            let sets = r.catalog().map(|s| s.len());
            match sets {
                Ok(n) => {
                    c.ok(
                        "repository",
                        format!("{} opens ({what}, {n} sets)", r.describe()),
                    );
                    Some(r)
                }
                Err(e) => {
                    c.fail(
                        "repository",
                        format!("{e:#}"),
                        "move the damaged record out of the repository, or put back an intact copy"
                            .into(),
                    );
                    None
                }
            }
        }
        Err(e) => {
            c.fail("repository", format!("{e:#}"), repo_fix(&o.repo));
            None
        }
    };
    // The repository as the server's commands see it: with the key when one is given.
    let repo = key_check(&mut c, o, repo);
    let server = connect_check(&mut c, o);
    identity_check(&mut c, repo.as_ref(), server.as_ref());
    let mut server = server;
    let archiving = archiving_check(&mut c, o, repo.as_ref(), server.as_mut());
    let segment = switch_check(&mut c, o, repo.as_ref(), server.as_mut(), archiving);
    writable_check(&mut c, repo.as_ref());
    restore_command_check(&mut c, repo.as_ref(), server.as_ref(), segment);
    intact_check(&mut c, repo.as_ref());
    space_check(&mut c, repo.as_ref());
    Ok(CheckReport {
        command: "check",
        ok: c.0.iter().all(|k| k.ok),
        checks: c.0,
    })
}

fn repo_fix(spec: &str) -> String {
    if spec.starts_with("s3://") {
        "check the bucket and prefix, that the store answers (AWS_ENDPOINT_URL or --s3-endpoint) and the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION); a first backup with --repo creates the repository".into()
    } else if spec.starts_with("azure://") {
        "check the container and prefix, that the store answers and the credentials (AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY); a first backup with --repo creates the repository".into()
    } else if spec.starts_with("gs://") {
        "check the bucket and prefix, that the store answers (STORAGE_EMULATOR_HOST for an emulator) and the credentials (GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT, or the metadata server's on Google Cloud); a first backup with --repo creates the repository".into()
    } else {
        "check the path, that this user can read it, and that it is a pagevault repository; a first backup with --repo creates one".into()
    }
}

fn key_check(c: &mut Checks, o: &CheckOptions, repo: Option<Repo>) -> Option<Repo> {
    const NAME: &str = "key";
    let Some(repo) = repo else {
        c.skip(NAME, "the repository does not open");
        return None;
    };
    let protected = repo.protection().is_some();
    if let Some(e) = &o.key_error {
        c.fail(NAME, e.clone(), "make the key file a regular file of this user, mode 0600 (chmod 600), or give the right path with --key-file / --passphrase-file".into());
        return Some(repo);
    }
    match (&o.store.key, protected) {
        (None, false) => {
            c.ok(NAME, "the repository is plain: no key needed".into());
            Some(repo)
        }
        (None, true) => {
            c.fail(
                NAME,
                format!(
                    "{} is encrypted or signed and no key was given",
                    repo.describe()
                ),
                "give --key-file or --passphrase-file, as archive_command does".into(),
            );
            Some(repo)
        }
        (Some(_), _) => {
            match Repo::open(&o.repo, false, &o.store) {
                Ok(keyed) => {
                    c.ok(
                        NAME,
                        "the key loads and matches the repository's marker".into(),
                    );
                    Some(keyed)
                }
                Err(e) => {
                    c.fail(NAME, format!("{e:#}"), "give the repository's own key (the one its archive_command and backups use)".into());
                    Some(repo)
                }
            }
        }
    }
}

fn connect_check(c: &mut Checks, o: &CheckOptions) -> Option<Server> {
    const NAME: &str = "connect";
    let (url, pgdata) = connect::split_pgdata(&o.source);
    let conn = match connect::settle(
        &url,
        o.password_file.as_deref(),
        &connect::Env::of_process(),
    ) {
        Ok(conn) => conn,
        Err(e) => {
            c.fail(
                NAME,
                format!("{e:#}"),
                "give a URL of the form postgres://USER@HOST:PORT/DB".into(),
            );
            return None;
        }
    };
    let mut client = match conn.connect() {
        Ok(cl) => cl,
        Err(e) => {
            c.fail(NAME, format!("{e:#}"), "check that the server runs and listens there, and the user, password and pg_hba.conf".into());
            return None;
        }
    };
    let q = "SELECT current_setting('server_version_num'), (SELECT system_identifier::text FROM pg_control_system()), current_setting('data_directory'), pg_is_in_recovery()";
    let row = match client.query_one(q, &[]) {
        Ok(r) => r,
        Err(e) => {
            c.fail(
                NAME,
                format!("{}: {}", conn.location, pg_err(&e)),
                "connect as a superuser, or a role with pg_read_all_settings and pg_monitor".into(),
            );
            return None;
        }
    };
    let (version, sysid, dd, standby): (String, String, String, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    match crate::pg::check_backup_server(&version) {
        Ok(major) if standby => c.add(
            NAME,
            Outcome::Warn,
            format!("{}: PostgreSQL {major}, a standby", conn.location),
            Some("run check against the primary: a standby cannot switch WAL".into()),
        ),
        Ok(major) => c.ok(NAME, format!("{}: PostgreSQL {major}", conn.location)),
        Err(m) => {
            c.fail(
                NAME,
                m,
                "back up a PostgreSQL version this pagevault supports, or upgrade pagevault".into(),
            );
            return None;
        }
    }
    Some(Server {
        client,
        sysid,
        data_directory: Some(pgdata.unwrap_or_else(|| PathBuf::from(dd))),
    })
}

fn identity_check(c: &mut Checks, repo: Option<&Repo>, server: Option<&Server>) {
    const NAME: &str = "identity";
    let (Some(repo), Some(server)) = (repo, server) else {
        c.skip(NAME, "needs the repository and the server");
        return;
    };
    let mut seen = vec![];
    match wal::system_identifier(repo) {
        Ok(Some(id)) => seen.push(("its archived WAL".to_string(), id.to_string())),
        Ok(None) => {}
        Err(e) => {
            // A file this user may not read is intact: the fix is access, not a copy.
            let unreadable = (e.chain())
                .filter_map(|x| x.downcast_ref::<std::io::Error>())
                .any(|x| x.kind() == std::io::ErrorKind::PermissionDenied)
                || format!("{e:#}").contains("ermission denied");
            let fix = match unreadable {
                true => "give this user read access to the repository (the directory's owner and mode, or the store's policy)",
                false => "put back an intact copy of that file, or move it away",
            };
            return c.fail(NAME, format!("{e:#}"), fix.into());
        }
    }
    if let Ok(sets) = repo.catalog() {
        for s in sets.iter().rev() {
            if let Some(id) = &s.system_identifier {
                seen.push((format!("set {}", s.set_id), id.clone()));
                break;
            }
        }
    }
    match seen.iter().find(|(_, id)| *id != server.sysid) {
        Some((what, id)) => c.fail(
            NAME,
            format!("the server is cluster {}, but {what} is of cluster {id}", server.sysid),
            "give this cluster a repository of its own (a new --repo), or point --source at the cluster the repository holds".into(),
        ),
        None if seen.is_empty() => c.ok(NAME, format!("cluster {}; the repository holds nothing of any cluster yet", server.sysid)),
        None => c.ok(NAME, format!("cluster {}, the one the repository holds", server.sysid)),
    }
}

/// The words of a command line as a shell splits the simple ones: by blanks, single
/// and double quotes removed.
fn command_words(command: &str) -> Vec<String> {
    let (mut words, mut cur, mut quote, mut any) = (vec![], String::new(), None, false);
    for ch in command.chars() {
        match (quote, ch) {
            (None, '\'' | '"') => (quote, any) = (Some(ch), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => (cur, any) = (cur + &c.to_string(), true),
        }
    }
    if any {
        words.push(cur);
    }
    words
}

/// The value of `--name V` or `--name=V` among `words`.
fn flag_value(words: &[String], name: &str) -> Option<String> {
    let long = format!("--{name}");
    let eq = format!("--{name}=");
    (words.iter().enumerate()).find_map(|(i, w)| match w.strip_prefix(&eq) {
        Some(v) => Some(v.to_string()),
        None if *w == long => words.get(i + 1).cloned(),
        None => None,
    })
}

/// Whether two local paths name one directory.
fn same_dir(a: &str, b: &str) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.trim_end_matches('/') == b.trim_end_matches('/'),
    }
}

/// The archive_command to set, for the fixes.
fn push_command(repo: Option<&Repo>, spec: &str) -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "pagevault".into());
    let q = crate::units::sh_quote;
    let spec = repo.map_or(spec.to_string(), Repo::spec_for_command);
    let key = repo
        .and_then(|r| r.options().key.as_ref())
        .and_then(|k| k.command_option())
        .map(|(flag, f)| format!(" {flag} {}", q(&f.display().to_string())))
        .unwrap_or_default();
    format!("{} archive-push %p --repo {}{key}", q(&exe), q(&spec))
}

/// Whether archiving is on at all (the switch check waits only then).
fn archiving_check(
    c: &mut Checks,
    o: &CheckOptions,
    repo: Option<&Repo>,
    server: Option<&mut Server>,
) -> bool {
    const NAME: &str = "archive_command";
    let Some(server) = server else {
        c.skip(NAME, "no connection");
        return false;
    };
    let fix = format!(
        "set archive_mode = on and archive_command = '{}' in postgresql.conf, then reload (restart when archive_mode changed)",
        push_command(repo, &o.repo).replace('\'', "''")
    );
    let q = "SELECT current_setting('archive_mode'), current_setting('archive_command')";
    let (mode, command): (String, String) = match server.client.query_one(q, &[]) {
        Ok(r) => (r.get(0), r.get(1)),
        Err(e) => {
            c.fail(NAME, pg_err(&e), fix);
            return false;
        }
    };
    if mode == "off" {
        c.fail(
            NAME,
            "archive_mode is off: no WAL reaches the repository".into(),
            fix,
        );
        return false;
    }
    if command.trim().is_empty() || command.trim() == "(disabled)" {
        c.fail(
            NAME,
            format!("archive_mode is {mode} but archive_command is empty"),
            fix,
        );
        return false;
    }
    let spec = repo.map_or(o.repo.clone(), Repo::spec_for_command);
    let pushes_here =
        |r: &str| r == spec || r == o.repo || (!r.contains("://") && same_dir(r, &spec));
    let words = command_words(&command);
    let flag = |name: &str| flag_value(&words, name);
    let runs_push = words.iter().any(|w| w == "archive-push");
    let verdict: std::result::Result<(), (String, String)> = match (flag("repo"), flag("stanza")) {
        _ if !runs_push => Err((format!("archive_command = '{command}' does not run pagevault archive-push"), fix)),
        (Some(r), _) if pushes_here(&r) => Ok(()),
        (Some(r), _) => Err((
            format!("archive_command = '{command}' pushes into {r}, not {spec}"),
            format!("give its --repo as {spec} (keep its other options, such as --async and --spool), then reload"),
        )),
        (None, Some(st)) => {
            let config = flag("config");
            match o.stanza_repo.map(|f| f(config.as_deref().map(std::path::Path::new), &st, "repo")) {
                Some(Ok(Some(r))) if r.lines().any(pushes_here) => Ok(()),
                Some(Ok(Some(r))) => Err((
                    format!("archive_command = '{command}' pushes into stanza {st}'s repository {r}, not {spec}"),
                    format!("set repo = \"{spec}\" in [stanza.{st}] of the configuration file it reads, or check another stanza"),
                )),
                Some(Ok(None)) => Err((
                    format!("archive_command = '{command}': stanza {st} names no repo"),
                    format!("set repo = \"{spec}\" in [stanza.{st}]"),
                )),
                Some(Err(e)) => Err((
                    format!("archive_command = '{command}': its configuration cannot be read here: {e:#}"),
                    "check the file as the server's user reads it (pagevault archive-push --stanza S --show-config)".into(),
                )),
                None => Err((format!("archive_command = '{command}' names a stanza this check cannot read"), fix)),
            }
        }
        // Only the environment (PAGEVAULT_REPO) can say: taken as it is.
        (None, None) if command.contains(spec.as_str()) => Ok(()),
        (None, None) => Err((format!("archive_command = '{command}' names no repository (--repo or --stanza)"), fix)),
    };
    if let Err((what, fix)) = verdict {
        c.add(NAME, Outcome::Warn, what, Some(fix));
    } else {
        c.ok(
            NAME,
            format!("archive_mode = {mode}, archive_command = '{command}'"),
        );
    }
    // Async archiving: the spool its command names, or its stanza's archive-push table.
    let stanza_value = |key: &str| {
        let (f, st) = (o.stanza_repo?, flag("stanza")?);
        f(
            flag("config").as_deref().map(std::path::Path::new),
            &st,
            key,
        )
        .ok()
        .flatten()
    };
    let is_async =
        words.iter().any(|w| w == "--async") || stanza_value("async").as_deref() == Some("true");
    if is_async {
        spool_check(c, flag("spool").or_else(|| stanza_value("spool")));
    }
    true
}

/// The async spool: the pusher's last failure is a failed check (the spool keeps every
/// segment meanwhile, but the repository falls behind).
fn spool_check(c: &mut Checks, spool: Option<String>) {
    const NAME: &str = "async-spool";
    let Some(dir) = spool else {
        c.add(
            NAME,
            Outcome::Warn,
            "archive_command archives --async, but its spool is not known here".into(),
            Some(
                "give the spool with --spool in archive_command or in [stanza.NAME.archive-push]"
                    .into(),
            ),
        );
        return;
    };
    match super::status::spool_status(std::path::Path::new(&dir)) {
        Err(e) => c.add(NAME, Outcome::Warn, format!("{e:#}"), Some("run check as a user who may read the spool (root or the server's user)".into())),
        Ok(sp) => match (&sp.pusher_error, sp.pusher_failing_seconds) {
            (Some(e), Some(secs)) => c.fail(
                NAME,
                format!("the pusher of spool {dir} has failed for {secs} s ({} files wait): {e}", sp.files),
                format!("see {dir}/pusher.log; fix what it names (the repository's path, access or key), and the pusher catches up"),
            ),
            _ => c.ok(NAME, format!("{} files ({} bytes) wait in spool {dir}; the pusher has not failed", sp.files, sp.bytes)),
        },
    }
}

/// Forces a WAL switch and waits until the switched segment is in the repository;
/// returns its name when it arrived.
fn switch_check(
    c: &mut Checks,
    o: &CheckOptions,
    repo: Option<&Repo>,
    server: Option<&mut Server>,
    archiving: bool,
) -> Option<String> {
    const NAME: &str = "wal-archived";
    let (Some(repo), Some(server), true) = (repo, server, archiving) else {
        c.skip(NAME, "needs the repository, the server and archiving on");
        return None;
    };
    // A restore point makes sure the segment holds a record, so the switch happens.
    let q = "SELECT pg_create_restore_point('pagevault check'), pg_walfile_name(pg_switch_wal())";
    let name: String = match server.client.query_one(q, &[]) {
        Ok(r) => r.get(1),
        Err(e) => {
            c.fail(NAME, format!("cannot switch WAL: {}", pg_err(&e)), "connect as a superuser (or a role granted EXECUTE on pg_switch_wal and pg_create_restore_point), to the primary".into());
            return None;
        }
    };
    let t0 = Instant::now();
    loop {
        if wal::has_segment(repo, &name) {
            c.ok(
                NAME,
                format!(
                    "{name} reached the repository {:.1} s after the switch",
                    t0.elapsed().as_secs_f64()
                ),
            );
            return Some(name);
        }
        if crate::interrupt::received().is_some() || t0.elapsed() >= o.timeout {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = server
        .client
        .query_one(
            "SELECT failed_count, coalesce(last_failed_wal, ''), coalesce(last_archived_wal, '') FROM pg_stat_archiver",
            &[],
        )
        .map(|r| {
            let (n, failed, last): (i64, String, String) = (r.get(0), r.get(1), r.get(2));
            format!("; pg_stat_archiver: {n} failed, last failed {}, last archived {}", or_none(&failed), or_none(&last))
        })
        .unwrap_or_default();
    c.fail(
        NAME,
        format!("{name} did not reach {} within {} s of the switch{stats}", repo.describe(), o.timeout.as_secs()),
        "the archive_command fails or pushes elsewhere: see the server log for its error, run it by hand as the server's user, fix it and reload; or give more --timeout".into(),
    );
    None
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// Writes, reads back and removes a small object where catalog records go; a name no
/// listing of the repository picks up (catalog entries starting with a dot are skipped).
fn writable_check(c: &mut Checks, repo: Option<&Repo>) {
    const NAME: &str = "repository-writable";
    let Some(repo) = repo else {
        c.skip(NAME, "the repository does not open");
        return;
    };
    let rel = format!("catalog/.pagevault-check-{}", uuid::Uuid::new_v4().simple());
    let body = b"pagevault check: safe to remove\n";
    let store = repo.store();
    // An immutable repository's objects are created only where absent, and stay.
    let immutable = repo.immutable().is_some();
    let put = match immutable {
        true => store.put_new(&rel, body).and_then(|made| match made {
            true => Ok(()),
            false => Err(anyhow!("the probe object's new name was taken")),
        }),
        false => store.put(&rel, body),
    };
    let done = put.and_then(|()| store.get(&rel, 1024)).and_then(|got| {
        match got.as_deref() == Some(&body[..]) {
            true => Ok(()),
            false => Err(anyhow!(
                "the probe object read back differs from what was written"
            )),
        }
    });
    let removed = match immutable {
        true => Ok(()),
        false => store.delete(&rel),
    };
    let left = match immutable {
        true => "left to the retention (the repository is immutable)",
        false => "removed",
    };
    match done.and(removed) {
        Ok(()) => c.ok(NAME, format!("a probe object was written, read back and {left} in {}", store.describe("catalog"))),
        Err(e) => c.fail(NAME, format!("{e:#}"), "give this user (and the server's, which runs archive_command) write access to the repository: the directory's owner and mode, or the bucket's or container's policy".into()),
    }
}

/// Runs the restore_command a restore writes, as the data directory's owner, on the
/// segment just archived (else the newest archived one).
fn restore_command_check(
    c: &mut Checks,
    repo: Option<&Repo>,
    server: Option<&Server>,
    segment: Option<String>,
) {
    const NAME: &str = "restore_command";
    let Some(repo) = repo else {
        c.skip(NAME, "the repository does not open");
        return;
    };
    let name = match segment {
        Some(s) => Some(s),
        None => match wal::all_archived(repo) {
            Ok(all) => (all.into_iter().rev())
                .map(|(n, _)| n)
                .find(|n| crate::pg::parse_name(n).is_some_and(|w| w.kind == crate::pg::Kind::Segment)),
            // A listing that fails is not an empty archive.
            Err(e) => {
                return c.fail(
                    NAME,
                    format!("the archive cannot be listed: {e:#}"),
                    "give this user (and the server's, which runs restore_command) read access to the repository's wal/".into(),
                )
            }
        },
    };
    let Some(name) = name else {
        c.skip(NAME, "the repository holds no WAL segment to fetch");
        return;
    };
    let owner = server
        .and_then(|s| s.data_directory.as_ref())
        .and_then(|d| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(d).ok()?;
            let (user, _) = crate::sys::user_by_uid(m.uid())?;
            Some((user, m.uid(), m.gid()))
        });
    let who = match &owner {
        Some((u, _, _)) => format!("user '{u}', the data directory's owner"),
        None => "this user (the data directory is not on this machine)".into(),
    };
    let command = crate::ops::restore::restore_command(repo);
    let user = owner.as_ref().map(|(u, uid, gid)| (u.as_str(), *uid, *gid));
    match crate::ops::restore::wal::probe_restore_command(&command, &name, true, user) {
        Ok(()) => c.ok(NAME, format!("{command} fetched {name} as {who}")),
        Err(e) => c.fail(NAME, format!("{e:#}"), format!("make the repository and the key file readable by {who}: a key file owned by that user, mode 0600")),
    }
}

/// No archived segment is marked damaged (one listing of `wal/damaged/`).
fn intact_check(c: &mut Checks, repo: Option<&Repo>) {
    const NAME: &str = "wal-intact";
    const SHOWN: usize = 10;
    let Some(repo) = repo else {
        c.skip(NAME, "the repository does not open");
        return;
    };
    let damaged = match wal::damaged::list(repo) {
        Ok(d) => d,
        Err(e) => {
            return c.fail(
                NAME,
                format!("cannot list the damaged segments: {e:#}"),
                "check that this user can list the repository's wal/damaged/".into(),
            )
        }
    };
    if damaged.is_empty() {
        return c.ok(NAME, "no archived WAL segment is marked damaged".into());
    }
    let mut named: Vec<String> = (damaged.iter().take(SHOWN))
        .map(|d| format!("{} ({})", d.segment, d.note))
        .collect();
    if damaged.len() > SHOWN {
        named.push(format!("and {} more", damaged.len() - SHOWN));
    }
    c.fail(
        NAME,
        format!(
            "{} archived WAL segment(s) could not be decoded when pushed: {}",
            damaged.len(),
            named.join("; ")
        ),
        "check the server's storage (the segment was damaged there), and take a new full backup: a recovery replaying a damaged segment stops there as if the WAL ended, so point-in-time recovery cannot pass it".into(),
    );
}

fn space_check(c: &mut Checks, repo: Option<&Repo>) {
    const NAME: &str = "free-space";
    let Some(repo) = repo else {
        c.skip(NAME, "the repository does not open");
        return;
    };
    let Some(path) = repo.store().local_path("") else {
        c.ok(NAME, "not known: an object store".into());
        return;
    };
    let Some((_, free)) = crate::sys::fs_space(&path) else {
        c.add(
            NAME,
            Outcome::Warn,
            format!("cannot read the free space of '{}'", path.display()),
            None,
        );
        return;
    };
    let newest_full = (repo.catalog().unwrap_or_default().iter().rev())
        .find(|s| s.backup_type == BackupType::Full && !s.damaged)
        .map(|s| s.stored_bytes);
    let shown = crate::units::human(free);
    match newest_full {
        Some(n) if free < n => c.add(
            NAME,
            Outcome::Warn,
            format!(
                "{shown} free in '{}', less than the newest full set ({})",
                path.display(),
                crate::units::human(n)
            ),
            Some(
                "make room (pagevault expire) or move the repository: the next full may not fit"
                    .into(),
            ),
        ),
        _ => c.ok(NAME, format!("{shown} free in '{}'", path.display())),
    }
}

#[cfg(test)]
mod archive_command_tests {
    use super::*;

    #[test]
    fn archive_commands_are_read_as_a_shell_would() {
        let w = command_words("'/usr/bin/pagevault' archive-push --config=\"/etc/pv a.toml\" --stanza main --async %p");
        assert_eq!(w[0], "/usr/bin/pagevault");
        assert_eq!(flag_value(&w, "config").as_deref(), Some("/etc/pv a.toml"));
        assert_eq!(flag_value(&w, "stanza").as_deref(), Some("main"));
        assert_eq!(flag_value(&w, "repo"), None);
        let w = command_words("pagevault archive-push %p --repo /r");
        assert_eq!(flag_value(&w, "repo").as_deref(), Some("/r"));
    }
}
