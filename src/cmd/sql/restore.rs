//! `RESTORE VERIFYONLY | HEADERONLY | FILELISTONLY | DATABASE`: the first three read a
//! set's stripes; RESTORE DATABASE runs the same use case as `pagevault restore`, from
//! stripes (`FROM DISK`) or a repository's chain (`FROM URL`).

use super::lex::{Dev, Tok, P};
use super::{num, SqlArgs};
use crate::cmd::{info, restore as cmd_restore};
use crate::device::object::StoreOptions;
use crate::format::manifest::{EntryKind, Manifest, SourceKind};
use crate::ops::restore::{restore, RestoreOptions, TargetAction};
use crate::ops::verify::{verify, ReadOptions, VerifyOptions};
use crate::repo::Repo;
use crate::set::read as set;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The WITH options RESTORE DATABASE takes.
const SUPPORTED: &str =
    "MOVE, REPLACE, STOPAT, STATS, RECOVERY, BUFFERCOUNT, FILE = 1, CHECKSUM, NOREWIND, NOUNLOAD";

pub(super) fn run(p: &mut P, a: &SqlArgs, store: &StoreOptions) -> Result<()> {
    let kind = match p.next() {
        Some(Tok::Word(w))
            if ["VERIFYONLY", "HEADERONLY", "FILELISTONLY", "DATABASE"].contains(&w.as_str()) =>
        {
            w
        }
        Some(Tok::Word(w)) if w == "LOG" => {
            bail!("RESTORE LOG: the log is replayed by PostgreSQL's recovery from the repository's WAL archive: RESTORE DATABASE [db] FROM URL = 'repository' WITH MOVE 'data' TO 'dir', STOPAT = 'time'")
        }
        _ => bail!("expected DATABASE, VERIFYONLY, HEADERONLY or FILELISTONLY after RESTORE"),
    };
    let db = if kind == "DATABASE" {
        match p.next() {
            Some(Tok::Word(w)) => Some(w),
            _ => bail!("expected a database name after RESTORE DATABASE"),
        }
    } else {
        None
    };
    if p.word("FILEGROUP") || p.word("FILE") || p.word("PAGE") {
        bail!("piecemeal restores (FILE, FILEGROUP, PAGE) are not supported: restore the whole database");
    }
    p.expect_word("FROM")?;
    let from = p.sources("FROM")?;
    let opts = p.options()?;
    if let Some(db) = db {
        return database(&db, &from, opts, a, store);
    }
    let from = disks(&from, &kind)?;
    if let Some((o, _)) = opts.iter().find(|(o, _)| o != "STATS" && o != "CHECKSUM") {
        bail!("unsupported WITH option {o} for RESTORE {kind}");
    }
    match kind.as_str() {
        "VERIFYONLY" => {
            let o = VerifyOptions {
                read: ReadOptions {
                    from,
                    store: store.clone(),
                    ..ReadOptions::default()
                },
            };
            let r = verify(&o, &cmd_restore::shower(Some(100), a.json))?;
            cmd_restore::print_verify(&r, a.json);
            Ok(())
        }
        "HEADERONLY" => info::print_header(&set::describe(&from, store)?, a.json),
        _ => {
            let m = set::describe(&from, store)?;
            info::print_files(&m, a.json)?;
            if a.json {
                return Ok(());
            }
            println!(
                "RESTORE DATABASE ... WITH MOVE takes {}.",
                describe_names("", &m)
            );
            Ok(())
        }
    }
}

/// The stripes of a `FROM DISK = ...` list (URL refused for `kind`).
fn disks(from: &[Dev], kind: &str) -> Result<Vec<String>> {
    from.iter()
        .map(|d| match d {
            Dev::Disk(s) if s.eq_ignore_ascii_case("nul") => {
                bail!("RESTORE {kind} FROM DISK = 'NUL': NUL holds nothing to read (a NUL backup is discarded)")
            }
            Dev::Disk(s) => Ok(s.clone()),
            Dev::Url(_) => bail!(
                "RESTORE {kind} FROM URL: name the set's stripes with DISK = 'path' (URL names a repository, for RESTORE DATABASE)"
            ),
        })
        .collect()
}

/// RESTORE DATABASE: the statement mapped to `pagevault restore`'s options.
fn database(
    db: &str,
    from: &[Dev],
    opts: Vec<(String, Option<Tok>)>,
    a: &SqlArgs,
    store: &StoreOptions,
) -> Result<()> {
    let mut o = RestoreOptions {
        owner: a.owner.clone(),
        ..RestoreOptions::default()
    };
    o.read.store = store.clone();
    match from {
        [Dev::Url(repo)] => o.read.repo = Some(repo.clone()),
        [Dev::Url(_), ..] => bail!("RESTORE DATABASE takes one URL (a repository), not several"),
        _ => o.read.from = disks(from, "DATABASE")?,
    }
    let manifest = newest_manifest(&o, store)?;
    let mut stats = None;
    let mut action = None;
    let mut moves = vec![];
    let mut unsupported = vec![];
    for (name, v) in opts {
        match (name.as_str(), v) {
            ("MOVE", Some(Tok::Move(logical, to))) => moves.push((logical, to)),
            ("REPLACE", None) => o.replace = true,
            ("STOPAT", Some(Tok::Str(t))) => o.until = Some(t),
            ("STOPAT", _) => {
                bail!("STOPAT needs a quoted time, as in STOPAT = '2026-11-27 10:00:00+00'")
            }
            ("STATS", v) => {
                stats = Some(
                    v.as_ref()
                        .map(|_| num("STATS", &v))
                        .transpose()?
                        .unwrap_or(10)
                        .clamp(1, 100) as u32,
                )
            }
            ("BUFFERCOUNT", v) => {
                o.read.buffer_count = Some(num("BUFFERCOUNT", &v)?.clamp(2, 65536) as usize)
            }
            ("FILE", v) => {
                if num("FILE", &v)? != 1 {
                    bail!(
                        "FILE = {}: a pagevault media set holds one backup set: FILE = 1",
                        num("FILE", &v)?
                    );
                }
            }
            // The default: recovery runs and the server opens for writes.
            ("RECOVERY", None) => action = Some((name, TargetAction::Promote)),
            // Ready at the exact point and able to replay on: SQL Server's restoring state.
            ("NORECOVERY", None) => action = Some((name, TargetAction::Shutdown)),
            // Open for reads between restores; PostgreSQL needs no undo file.
            ("STANDBY", None | Some(Tok::Str(_))) => action = Some((name, TargetAction::Pause)),
            // Always true here: every frame and file checksum is checked.
            ("CHECKSUM" | "NOREWIND" | "NOUNLOAD", None) => {}
            (other, _) => unsupported.push(other.to_string()),
        }
    }
    if !unsupported.is_empty() {
        bail!(
            "unsupported WITH option(s) for RESTORE DATABASE: {} (supported: {SUPPORTED})",
            unsupported.join(", ")
        );
    }
    match action {
        Some((name, _)) if name != "RECOVERY" && o.until.is_none() => bail!(
            "{name} needs STOPAT = 'time': PostgreSQL's recovery stops at a target (recovery_target_action = '{}'); without one it replays the whole archive and the server opens",
            if name == "NORECOVERY" { "shutdown" } else { "pause" }
        ),
        Some((_, a)) if o.until.is_some() => o.target_action = Some(a),
        _ => {}
    }
    let mut to = None;
    for (logical, path) in moves {
        match logical_target(db, &manifest, &logical, Path::new(&path))? {
            Moved::Data(dir) => {
                if to.replace(dir).is_some() {
                    bail!("MOVE '{logical}': the database's directory is moved twice");
                }
            }
            Moved::Tablespace(oid) => o.tablespace_map.push(format!("{oid}={path}")),
        }
    }
    o.to = to.ok_or_else(|| {
        anyhow::anyhow!(
            "RESTORE DATABASE needs WITH MOVE '{}' TO '/directory' (where to restore; {}); the source's own location is never written without it",
            logical_names(db, &manifest)[0],
            describe_names(db, &manifest)
        )
    })?;
    let r = restore(&o, &cmd_restore::shower(Some(stats.unwrap_or(100)), a.json)).map_err(|e| {
        if !o.replace && format!("{e:#}").contains("--replace") {
            anyhow::anyhow!("{e:#} (in T-SQL: WITH REPLACE)")
        } else {
            e
        }
    })?;
    cmd_restore::print_restore(&r, a.json);
    Ok(())
}

/// The manifest of the stripes named, or of the repository's newest set: what MOVE's
/// logical names are checked against.
fn newest_manifest(o: &RestoreOptions, store: &StoreOptions) -> Result<Manifest> {
    let Some(spec) = &o.read.repo else {
        return set::describe(&o.read.from, store);
    };
    let repo = Repo::open(spec, false, store)?;
    let catalog = repo.catalog()?;
    let newest = (catalog.iter().rev())
        .find(|e| !e.damaged)
        .with_context(|| format!("repository '{}' records no usable set", repo.describe()))?;
    crate::ops::set_manifest(&repo, newest)
}

enum Moved {
    /// The whole set: the restore's target directory.
    Data(PathBuf),
    /// A PostgreSQL tablespace: `--tablespace-map OID=DIR`.
    Tablespace(String),
}

/// The names MOVE takes for a set, as FILELISTONLY lists its paths: the whole set
/// ('data', the database's name, the statement's name), a PostgreSQL tablespace
/// (pg_tblspc/OID) and a top-level file (a SQLite database file).
fn logical_names(db: &str, m: &Manifest) -> Vec<String> {
    let mut names = vec![
        "data".to_string(),
        m.source.database.clone(),
        db.to_string(),
    ];
    for f in &m.files {
        let tablespace = m.source.kind == SourceKind::Postgres
            && f.kind == EntryKind::Link
            && is_tablespace(&f.path);
        let top_file = f.kind == EntryKind::File
            && !f.path.contains('/')
            && m.source.kind == SourceKind::Sqlite;
        if tablespace || top_file {
            names.push(f.path.to_string());
        }
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| !n.is_empty() && seen.insert(n.clone()));
    names
}

fn describe_names(db: &str, m: &Manifest) -> String {
    let names: Vec<String> = logical_names(db, m)
        .iter()
        .map(|n| format!("'{n}'"))
        .collect();
    format!("the set's logical names: {}", names.join(", "))
}

fn is_tablespace(p: &str) -> bool {
    p.strip_prefix("pg_tblspc/")
        .is_some_and(|oid| !oid.is_empty() && oid.bytes().all(|b| b.is_ascii_digit()))
}

/// Where `MOVE 'logical' TO 'path'` puts what. TO names the directory restored into;
/// for a file of the set, TO may also name the file itself in that directory (its name
/// kept: a restore never renames a set's files).
fn logical_target(db: &str, m: &Manifest, logical: &str, path: &Path) -> Result<Moved> {
    let names = logical_names(db, m);
    if !names.iter().any(|n| n == logical) {
        let listed = m.files.iter().any(|f| &*f.path == logical);
        bail!(
            "MOVE '{logical}': {}; {}",
            if listed {
                "a single file of the set is not moved on its own (the set restores as one tree)"
            } else {
                "the set has no such logical name"
            },
            describe_names(db, m)
        );
    }
    if path.as_os_str().is_empty() {
        bail!("MOVE '{logical}' TO '': give a directory");
    }
    if is_tablespace(logical) {
        return Ok(Moved::Tablespace(logical["pg_tblspc/".len()..].to_string()));
    }
    let is_file = m
        .files
        .iter()
        .any(|f| f.kind == EntryKind::File && &*f.path == logical);
    let own_name = is_file && path.file_name().is_some_and(|n| n == logical);
    Ok(Moved::Data(match (own_name, path.parent()) {
        (true, Some(dir)) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        (true, _) => PathBuf::from("."),
        _ => path.to_path_buf(),
    }))
}
