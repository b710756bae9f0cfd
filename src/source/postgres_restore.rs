//! Putting a PostgreSQL set back: never into a running server's directory, each
//! tablespace into its own directory linked from pg_tblspc, then backup_label and the
//! recovery settings that make the copy consistent from the WAL archive.

use super::postgres::EMPTY_DIRS;
use super::{Extra, Recovery, Restorer};
use crate::format::manifest::{EntryKind, Manifest};
use crate::pg::facts::PgFacts;
use crate::target;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The line before the recovery settings a restore appends to postgresql.auto.conf.
pub(crate) const RESTORE_MARK: &str = "# Added by pagevault restore";

/// Files the restore writes by name in the data directory.
const OWN_FILES: &[&str] = &[
    "backup_label",
    "tablespace_map",
    "postgresql.auto.conf",
    "recovery.signal",
    "standby.signal",
];

pub struct PgRestorer {
    /// `--tablespace-map` as given: OID=DIR.
    overrides: Vec<String>,
    /// `--tablespaces-from-set`: the set's own locations may be written.
    set_locations: bool,
    /// OID -> directory, once `plan` has run.
    spaces: HashMap<String, PathBuf>,
    /// Tablespace directories that existed, as they were before `claim_places`.
    claimed: Vec<(PathBuf, target::Before)>,
}

impl PgRestorer {
    pub fn new(tablespace_map: &[String], set_locations: bool) -> PgRestorer {
        PgRestorer {
            overrides: tablespace_map.to_vec(),
            set_locations,
            spaces: HashMap::new(),
            claimed: vec![],
        }
    }
}

/// The system identifier in control file `p`; None when it is absent or unreadable (a
/// delta restore rewrites it then).
fn read_system_identifier(p: &Path) -> Option<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    crate::sys::open_regular(p).ok()?.read_exact(&mut b).ok()?;
    crate::pg::control_system_identifier(&b)
}

impl Restorer for PgRestorer {
    fn recovers(&self) -> bool {
        true
    }

    fn check_target(&self, to: &Path) -> Result<()> {
        check_not_running(to)
    }

    fn check_delta_target(&self, to: &Path, extra: &Extra, force: bool) -> Result<()> {
        let holds = fs::read_dir(to).is_ok_and(|mut d| d.next().is_some());
        let version = fs::symlink_metadata(to.join("PG_VERSION")).is_ok_and(|m| m.is_file());
        if holds && !version {
            bail!(
                "--delta: '{}' holds files but no PG_VERSION: it is not a PostgreSQL data directory (restore into an empty directory, or use --replace to delete what it holds)",
                to.display()
            );
        }
        // Another cluster's directory would be re-seeded as this set's without a word.
        let Some(set) = PgFacts::from_extra(extra)
            .ok()
            .flatten()
            .and_then(|f| f.system_identifier.parse::<u64>().ok())
        else {
            return Ok(());
        };
        let control = to.join(crate::pg::PG_CONTROL);
        let Some(there) = read_system_identifier(&control) else {
            return Ok(());
        };
        if there != set && !force {
            bail!(
                "--delta: '{}' is a data directory of another cluster: its {} says system identifier {there}, the set's is {set}; a delta restore would turn it into this set's cluster. Restore into an empty directory (or --replace it), or give --force if that is what you mean; nothing was written",
                to.display(),
                crate::pg::PG_CONTROL
            );
        }
        Ok(())
    }

    fn check_entries(&self, m: &Manifest) -> Result<()> {
        // The restore writes these names itself and fills these directories: a link
        // from the set there would carry those writes outside the target.
        let ours = |p: &str| OWN_FILES.contains(&p) || p == "pg_tblspc" || EMPTY_DIRS.contains(&p);
        match m
            .files
            .iter()
            .find(|f| f.kind == EntryKind::Link && ours(&f.path))
        {
            Some(f) => bail!(
                "the set is damaged or forged: '{}' is a link, where restore writes a file or directory of its own",
                f.path
            ),
            None => Ok(()),
        }
    }

    fn plan(&mut self, extra: &Extra) -> Result<()> {
        let facts = facts(extra)?;
        self.spaces = tablespace_dirs(&facts, &self.overrides, self.set_locations)?;
        Ok(())
    }

    fn check_places(&self, keep: bool) -> Result<()> {
        match keep {
            true => check_tablespaces(&self.spaces),
            false => check_empty(&self.spaces),
        }
    }

    fn place(&self, to: &Path, rel: &str) -> PathBuf {
        place(to, rel, &self.spaces)
    }

    fn places(&self) -> Vec<PathBuf> {
        self.spaces.values().cloned().collect()
    }

    fn claim_places(&mut self, keep: bool) -> Result<()> {
        let how = match keep {
            true => target::Prepare::Keep,
            false => target::Prepare::Empty,
        };
        for dir in self.spaces.values() {
            let before = target::prepare(dir, how)?;
            self.claimed.extend(before.map(|b| (dir.clone(), b)));
        }
        Ok(())
    }

    fn link(&self, to: &Path, owner: Option<(u32, u32)>) -> Result<()> {
        // Each tablespace is linked from pg_tblspc as PostgreSQL expects.
        for (oid, dir) in &self.spaces {
            fs::create_dir_all(dir)?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
            std::os::unix::fs::symlink(dir, to.join("pg_tblspc").join(oid))
                .with_context(|| format!("cannot link tablespace {oid} to '{}'", dir.display()))?;
            if let Some((uid, gid)) = owner {
                target::chown_tree(dir, uid, gid)?;
            } else if let Some((_, b)) = self.claimed.iter().find(|(d, _)| d == dir) {
                target::give_back(dir, target::Before { mode: 0o700, ..*b })?;
            }
            target::sync_fs(dir)?;
        }
        Ok(())
    }

    fn finish(&self, to: &Path, extra: &Extra, rec: &Recovery) -> Result<Vec<String>> {
        finish_restore(to, extra, rec)
    }
}

/// Where each tablespace of a PostgreSQL set goes: OID -> directory, from the set's
/// tablespace_map unless relocated. The set's map is data: its OIDs must be numbers
/// (an OID names a link under pg_tblspc) and its locations absolute, without `..`.
/// Where each tablespace goes: `--tablespace-map`, else the set's own location, which
/// lies outside the target and is written only once the user accepts it.
fn tablespace_dirs(
    facts: &PgFacts,
    overrides: &[String],
    set_locations: bool,
) -> Result<HashMap<String, PathBuf>> {
    let mut dirs: HashMap<String, PathBuf> = HashMap::new();
    for (oid, path) in facts.tablespaces() {
        if oid.is_empty() || oid.len() > 10 || !oid.bytes().all(|c| c.is_ascii_digit()) {
            bail!(
                "the set's tablespace_map names tablespace '{}', which is not an OID: the set is damaged or forged",
                oid.escape_debug()
            );
        }
        let dir = absolute_dir(path, || {
            format!("the set's tablespace_map puts tablespace {oid} at '{}', which is not an absolute path without '..': the set is damaged or forged", path.escape_debug())
        })?;
        dirs.insert(oid.to_string(), dir);
    }
    for o in overrides {
        let Some((oid, dir)) = o.split_once('=') else {
            bail!("--tablespace-map '{o}': write OID=DIR")
        };
        if !dirs.contains_key(oid) {
            let known: Vec<&String> = dirs.keys().collect();
            bail!("--tablespace-map: the set has no tablespace {oid} (it has {known:?})");
        }
        let dir = absolute_dir(dir, || {
            format!("--tablespace-map {oid}: '{dir}' must be an absolute path without '..'")
        })?;
        dirs.insert(oid.to_string(), dir);
    }
    let mapped = |oid: &str| {
        overrides
            .iter()
            .any(|o| o.split_once('=').is_some_and(|(k, _)| k == oid))
    };
    let mut unconfirmed: Vec<String> = (dirs.iter())
        .filter(|(oid, _)| !mapped(oid))
        .map(|(oid, d)| format!("{oid} at '{}'", d.display()))
        .collect();
    if !set_locations && !unconfirmed.is_empty() {
        unconfirmed.sort();
        bail!(
            "the set puts tablespaces outside the target: {}; a set is data anyone who reaches the storage could have written, so restore writes there only when you say: --tablespace-map OID=DIR for each, or --tablespaces-from-set to accept these locations",
            unconfirmed.join(", ")
        );
    }
    Ok(dirs)
}

/// `path` when it is absolute and every component a name (no `..` or `.`), else the
/// error `why` says.
fn absolute_dir(path: &str, why: impl Fn() -> String) -> Result<PathBuf> {
    use std::path::Component;
    let p = PathBuf::from(path);
    let plain = p.is_absolute()
        && (p.components()).all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        bail!("{}", why());
    }
    Ok(p)
}

/// Each tablespace directory must be an empty directory or missing: nothing is
/// overwritten, and what cannot be read is not taken for empty.
fn check_empty(dirs: &HashMap<String, PathBuf>) -> Result<()> {
    for (oid, dir) in dirs {
        let relocate = format!("relocate it with --tablespace-map {oid}=DIR");
        match fs::read_dir(dir).map(|mut d| d.next().is_none()) {
            Ok(true) => {}
            Ok(false) => bail!(
                "tablespace {oid} would be restored into '{}', which is not empty: {relocate}",
                dir.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!(
                "tablespace {oid} would be restored into '{}', which cannot be used ({e}): {relocate}",
                dir.display()
            ),
        }
    }
    Ok(())
}

/// A delta restore's tablespace directories: each empty, missing, or a tablespace (it
/// holds a PG_ version directory); anything else would be swept away.
fn check_tablespaces(dirs: &HashMap<String, PathBuf>) -> Result<()> {
    for (oid, dir) in dirs {
        let Ok(list) = fs::read_dir(dir) else {
            continue;
        };
        let names: Vec<String> = list
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !names.is_empty() && !names.iter().any(|n| n.starts_with("PG_")) {
            bail!(
                "--delta: tablespace {oid} would be restored into '{}', which holds files but no PG_ version directory: it is not a tablespace (relocate it with --tablespace-map {oid}=DIR)",
                dir.display()
            );
        }
    }
    Ok(())
}

/// The restored location of a set path: inside the target, or in a tablespace directory.
fn place(to: &Path, rel: &str, spaces: &HashMap<String, PathBuf>) -> PathBuf {
    if let Some(rest) = rel.strip_prefix("pg_tblspc/") {
        let (oid, sub) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(dir) = spaces.get(oid) {
            return if sub.is_empty() {
                dir.clone()
            } else {
                dir.join(sub)
            };
        }
    }
    to.join(rel)
}

/// Refuses a restore target that a running server is using.
fn check_not_running(target: &Path) -> Result<()> {
    let pid_file = target.join(crate::pg::POSTMASTER_PID);
    // A FIFO planted there is refused, never waited on.
    let text = crate::sys::open_regular(&pid_file).and_then(std::io::read_to_string);
    if let Ok(text) = text {
        if let Some(pid) = crate::pg::postmaster_pid(&text) {
            if crate::sys::process_alive(pid) {
                bail!(
                    "'{}' is the data directory of a running PostgreSQL server (pid {pid}): stop it first, or restore elsewhere",
                    target.display()
                );
            }
        }
    }
    Ok(())
}

/// Turns a restored set into a data directory PostgreSQL starts from: backup_label,
/// the empty directories the server expects, and the recovery settings.
/// The set's PostgreSQL facts, checked; a set without them is not a PostgreSQL backup.
fn facts(extra: &Extra) -> Result<PgFacts> {
    PgFacts::from_extra(extra)
        .map_err(|e| anyhow!("the set's manifest is damaged: its PostgreSQL facts: {e}"))?
        .filter(|f| f.stop.is_some())
        .ok_or_else(|| {
            anyhow!("the set has no backup_label: it is not a complete PostgreSQL backup")
        })
}

fn finish_restore(target: &Path, extra: &Extra, rec: &Recovery) -> Result<Vec<String>> {
    let mut notes = vec![];
    let facts = facts(extra)?;
    let label = &facts.stop.as_ref().expect("checked").backup_label;
    crate::repo::write_atomic(&target.join("backup_label"), label.as_bytes())?;
    for d in EMPTY_DIRS
        .iter()
        .chain(["pg_wal/archive_status", "pg_tblspc"].iter())
    {
        std::fs::create_dir_all(target.join(d))?;
    }
    let any = rec.restore_command.is_some() || rec.target.is_some() || rec.timeline.is_some();
    if any || rec.standby || rec.archive_off.is_some() || !rec.options.is_empty() {
        let mut conf = format!("\n{RESTORE_MARK}\n");
        if let Some(cmd) = &rec.restore_command {
            conf.push_str(&format!("restore_command = {}\n", conf_quote(cmd)));
        }
        if let Some(c) = &rec.primary_conninfo {
            conf.push_str(&format!("primary_conninfo = {}\n", conf_quote(c)));
        }
        if let Some((name, value)) = &rec.target {
            let action = rec.action.unwrap_or("promote");
            conf.push_str(&format!("recovery_target_{name} = {}\nrecovery_target_action = '{action}'\nrecovery_target_inclusive = off\n", conf_quote(value)));
            notes.push(format!("recovery stops before {name} {value}"));
            match action {
                "pause" => notes.push("recovery pauses there, the server open for reads: SELECT pg_wal_replay_resume() ends it".into()),
                "shutdown" => notes.push("the server shuts down there; started again it replays on, to a later target if one is set".into()),
                _ => {}
            }
        }
        if let Some(t) = &rec.timeline {
            conf.push_str(&format!("recovery_target_timeline = {}\n", conf_quote(t)));
            notes.push(format!("recovery follows timeline {t}"));
        }
        if let Some(why) = &rec.archive_off {
            conf.push_str("archive_mode = 'off'\n");
            notes.push(format!("archive_mode = off: {why}"));
        }
        for (k, v) in &rec.options {
            conf.push_str(&format!("{k} = {}\n", conf_quote(v)));
        }
        if !rec.options.is_empty() {
            let keys: Vec<&str> = rec.options.iter().map(|(k, _)| k.as_str()).collect();
            notes.push(format!("--recovery-option set {}", keys.join(", ")));
        }
        let auto = target.join("postgresql.auto.conf");
        let mut text = read_own(&auto)?;
        text.push_str(&conf);
        crate::repo::write_atomic(&auto, text.as_bytes())?;
        // Without restore_command or a target the server replays what pg_wal holds, as
        // after a crash: settings alone (archive_mode, options) make no recovery.
        let signal = match (rec.standby, any) {
            (true, _) => Some(crate::pg::STANDBY_SIGNAL),
            (false, true) => Some(crate::pg::RECOVERY_SIGNAL),
            (false, false) => None,
        };
        match signal {
            Some(signal) => {
                crate::repo::write_atomic(&target.join(signal), b"")?;
                notes.push(format!(
                    "{signal} and restore settings written to postgresql.auto.conf"
                ));
            }
            None => notes.push("settings written to postgresql.auto.conf".into()),
        }
        if rec.standby {
            notes.push(match &rec.primary_conninfo {
                Some(_) => "the server starts as a standby: it streams from primary_conninfo and replays the archive when the primary cannot serve".into(),
                None => "the server starts as a standby replaying the archive (give --primary-conninfo to stream)".into(),
            });
        }
    }
    // PostgreSQL refuses a data directory others can read.
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o700))?;
    Ok(notes)
}

/// A file of the restored data directory, never read through a link ("" if absent).
fn read_own(p: &Path) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(p);
    let mut text = String::new();
    match f {
        Ok(mut f) => f
            .read_to_string(&mut text)
            .map(drop)
            .with_context(|| format!("cannot read '{}'", p.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read '{}'", p.display())),
    }
    Ok(text)
}

/// A string value for postgresql.conf: in single quotes, with the quote doubled and
/// the backslash, newline and carriage return escaped as its parser reads them.
pub(crate) fn conf_quote(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_where_restore_writes_its_own_files_are_refused() {
        use crate::format::manifest::tests::{link, sample};
        let with_link = |path: &str| {
            let mut m = sample();
            m.files = vec![link(0, path, "/etc/passwd")];
            m
        };
        let r = PgRestorer::new(&[], false);
        for bad in [
            "recovery.signal",
            "postgresql.auto.conf",
            "backup_label",
            "pg_wal",
        ] {
            let e = r.check_entries(&with_link(bad)).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("forged"), "{e}");
        }
        r.check_entries(&with_link("postgresql.conf")).unwrap();
    }

    #[test]
    fn the_auto_conf_is_never_read_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        let auto = d.path().join("postgresql.auto.conf");
        assert_eq!(read_own(&auto).unwrap(), "");
        std::os::unix::fs::symlink(&secret, &auto).unwrap();
        assert!(read_own(&auto).is_err());
    }

    #[test]
    fn conf_values_are_quoted_as_the_parser_reads_them() {
        assert_eq!(conf_quote("a'b"), "'a''b'");
        assert_eq!(conf_quote("a\\"), "'a\\\\'");
        assert_eq!(conf_quote("x\ny"), "'x\\ny'");
        assert_eq!(conf_quote("plain"), "'plain'");
    }

    fn facts_with(map: &str) -> PgFacts {
        PgFacts {
            start_lsn: 0x100_0028,
            start_wal: "000000010000000000000001".into(),
            timeline: 1,
            version_num: 160000,
            data_checksums: true,
            system_identifier: "1".into(),
            wal_segment_size: 16 << 20,
            databases: Default::default(),
            stop: Some(crate::pg::facts::Stop {
                lsn: 0x100_0100,
                wal: "000000010000000000000001".into(),
                backup_label: "START WAL LOCATION: 0/1000028\n".into(),
                tablespace_map: map.into(),
            }),
        }
    }

    fn extra(map: &str) -> Extra {
        facts_with(map).to_extra()
    }

    #[test]
    fn tablespaces_go_to_their_directories() {
        let tmp = std::env::temp_dir().join(format!("pv-ts-{}", std::process::id()));
        let mut r = PgRestorer::new(&[format!("16390={}", tmp.join("b").display())], true);
        r.plan(&extra("16389 /nowhere/a\n16390 /nowhere/b\n"))
            .unwrap();
        let to = Path::new("/restore");
        assert_eq!(
            r.place(to, "base/1/1259"),
            Path::new("/restore/base/1/1259")
        );
        assert_eq!(
            r.place(to, "pg_tblspc/16389/PG_16/5/1"),
            Path::new("/nowhere/a/PG_16/5/1")
        );
        assert_eq!(r.place(to, "pg_tblspc/16390"), tmp.join("b"));
        assert!(r.recovers());
    }

    #[test]
    fn bad_tablespace_maps_are_refused() {
        let e = facts_with("16389 /nowhere/a\n");
        for bad in ["16389", "99=/x", "16389=relative", "16389=/a/../etc"] {
            assert!(
                tablespace_dirs(&e, &[bad.to_string()], true).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_forged_tablespace_map_is_refused() {
        for map in [
            "../../x /tmp/a\n",
            "16389 relative\n",
            "16389 /a/../../etc\n",
        ] {
            let e = format!(
                "{:#}",
                tablespace_dirs(&facts_with(map), &[], true).unwrap_err()
            );
            assert!(e.contains("forged"), "{map}: {e}");
        }
        assert!(tablespace_dirs(&facts_with("16389 /srv/ts\n"), &[], true).is_ok());
    }

    #[test]
    fn the_sets_own_tablespace_locations_need_consent() {
        let f = facts_with("16389 /srv/a\n16390 /srv/b\n");
        let e = tablespace_dirs(&f, &["16390=/x".into()], false).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("16389 at '/srv/a'") && !e.contains("16390"),
            "{e}"
        );
        assert!(e.contains("--tablespaces-from-set"), "{e}");
        let both = ["16389=/y".to_string(), "16390=/x".to_string()];
        assert_eq!(tablespace_dirs(&f, &both, false).unwrap().len(), 2);
        assert!(tablespace_dirs(&facts_with(""), &[], false)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_tablespace_place_that_is_a_file_or_unreadable_is_not_empty() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let dirs = HashMap::from([("1".to_string(), file)]);
        assert!(check_empty(&dirs).is_err());
        let fresh = HashMap::from([("1".to_string(), d.path().join("new"))]);
        assert!(check_empty(&fresh).is_ok());
    }

    #[test]
    fn a_delta_keeps_only_a_tablespace_in_a_tablespace_place() {
        let d = tempfile::tempdir().unwrap();
        let (ts, other) = (d.path().join("ts"), d.path().join("other"));
        std::fs::create_dir_all(ts.join("PG_15_202209061")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("notes"), b"x").unwrap();
        let ok = HashMap::from([
            ("1".to_string(), ts),
            ("2".to_string(), d.path().join("new")),
            ("3".to_string(), d.path().join("empty")),
        ]);
        std::fs::create_dir(d.path().join("empty")).unwrap();
        assert!(check_tablespaces(&ok).is_ok());
        let e = check_tablespaces(&HashMap::from([("4".to_string(), other)])).unwrap_err();
        assert!(e.to_string().contains("not a tablespace"), "{e}");
    }

    #[test]
    fn a_directory_without_a_server_is_not_refused() {
        assert!(check_not_running(Path::new("/nonexistent/pagevault")).is_ok());
    }
}
