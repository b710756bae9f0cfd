//! `pagevault sql`: the T-SQL BACKUP / RESTORE statements DBAs already type, mapped
//! to a configured source. `TO DISK = 'NUL'` is the NUL device; several DISK clauses
//! stripe; WITH options map to the pipeline's settings.

use super::backup::Show;
use crate::device::object::StoreOptions;
use crate::engine::stats::Progress;
use crate::ops::backup::{self as ops, BackupOptions, BLOCK_SIZE, TRANSFER_SIZE};
use anyhow::{anyhow, bail, Result};
use clap::Args;
use lex::{tokenize, Tok, P};
use std::sync::Arc;

mod lex;
mod restore;

#[derive(Args)]
#[command(after_help = "Examples:
  pagevault sql --source sqlite:app.db \"BACKUP DATABASE [app] TO DISK = 'NUL' WITH STATS = 10\"
  pagevault sql --source files:/data \"BACKUP DATABASE [data] TO DISK = '/bk/a.pv', DISK = '/bk/b.pv' WITH COMPRESSION\"
  pagevault sql \"RESTORE VERIFYONLY FROM DISK = '/bk/a.pv', DISK = '/bk/b.pv'\"
  pagevault sql \"RESTORE FILELISTONLY FROM DISK = '/bk/a.pv', DISK = '/bk/b.pv'\"
  pagevault sql --json \"RESTORE HEADERONLY FROM DISK = '/bk/a.pv', DISK = '/bk/b.pv'\"
  pagevault sql \"RESTORE DATABASE [app] FROM DISK = '/bk/a.pv', DISK = '/bk/b.pv' WITH MOVE 'app.db' TO '/restore/app.db', REPLACE, STATS = 10\"
  pagevault sql --owner postgres \"RESTORE DATABASE [main] FROM URL = '/backups/main' WITH MOVE 'data' TO '/pg/data', STOPAT = '2026-11-27 10:00:00+00'\"

BACKUP DATABASE ... TO DISK = 'file' refuses a file that exists and is not a pagevault stripe (an empty one aside) unless WITH FORMAT is given; INIT keeps that refusal, as SQL Server's INIT keeps the media it finds.

RESTORE DATABASE runs `pagevault restore`: FROM DISK names a set's stripes, FROM URL a repository (a directory, s3://, azure:// or gs://) whose newest chain is restored, or the chain that reaches STOPAT (PostgreSQL's recovery_target_time). MOVE 'logical' TO 'path' says where: the logical name 'data', the database's name (HEADERONLY's DatabaseName) or the statement's name moves the whole set to the directory TO; a SQLite set's file (as FILELISTONLY lists it) to TO, its directory or the file in it; a PostgreSQL tablespace 'pg_tblspc/OID' to its own directory (restore --tablespace-map). REPLACE restores over what the directory holds (--replace); without it a non-empty directory is refused. STATS = N prints \"N percent processed.\" lines. With STOPAT, RECOVERY (the default) opens the server for writes at the target; NORECOVERY shuts it down there, ready to replay on to a later target (recovery_target_action = 'shutdown'); STANDBY [= 'file'] pauses there, open for reads, until SELECT pg_wal_replay_resume() (recovery_target_action = 'pause'; no undo file is needed). An encrypted or signed set is read with the key given by --key-file or --passphrase-file, as for every command.")]
pub struct SqlArgs {
    /// The source the statements act on (BACKUP): files:PATH, sqlite:PATH or postgres://...
    #[arg(long)]
    pub source: Option<String>,
    /// PostgreSQL: the password is the first line of FILE (as for backup).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Repository for the catalog (BACKUP records the set there).
    #[arg(long)]
    pub repo: Option<String>,
    /// RESTORE DATABASE: give the restored files to this user (restoring as root for a
    /// server that runs as another), as `restore --owner`.
    #[arg(long)]
    pub owner: Option<String>,
    /// Print what the statement ran as one JSON document, as the command it maps to
    /// prints it with --json: BACKUP as `backup --json`, RESTORE DATABASE as `restore
    /// --json`, VERIFYONLY as `verify --json`, HEADERONLY as `header --json`,
    /// FILELISTONLY as `files --json`. One statement per run.
    #[arg(long)]
    pub json: bool,
    /// Statements, separated by ';' (or GO lines).
    pub statements: Vec<String>,
}

fn num(name: &str, v: &Option<Tok>) -> Result<u64> {
    match v {
        Some(Tok::Num(n)) => Ok(*n),
        _ => bail!("{name} needs a number, as in {name} = 64"),
    }
}

fn run_backup(p: &mut P, a: &SqlArgs, store: &StoreOptions) -> Result<()> {
    if p.word("LOG") {
        bail!("BACKUP LOG: log backups are continuous WAL archiving here; set archive_command = 'pagevault archive-push %p --repo DIR' (every archived segment is a log backup)");
    }
    p.expect_word("DATABASE")?;
    let Some(Tok::Word(_db)) = p.next() else {
        bail!("expected a database name after BACKUP DATABASE")
    };
    if p.word("FILEGROUP") || p.word("FILE") {
        bail!("FILEGROUP / FILE backups (one tablespace) are not supported yet: back up the whole database");
    }
    p.expect_word("TO")?;
    let to = p.devices()?;
    let source = a
        .source
        .clone()
        .ok_or_else(|| anyhow!("BACKUP needs --source (the database the statement names)"))?;
    let nul = to.iter().all(|d| d.eq_ignore_ascii_case("nul"));
    let mut b = BackupOptions {
        source,
        to,
        repo: if nul { None } else { a.repo.clone() },
        password_file: a.password_file.clone(),
        store: store.clone(),
        ..BackupOptions::default()
    };
    let mut show = Show {
        json: a.json,
        ..Show::default()
    };
    let mut unsupported = vec![];
    let mut format = false;
    for (name, v) in p.options()? {
        match name.as_str() {
            "STATS" => {
                show.stats = Some(
                    v.as_ref()
                        .map(|_| num("STATS", &v))
                        .transpose()?
                        .unwrap_or(10)
                        .clamp(1, 100) as u32,
                )
            }
            "COMPRESSION" => {
                b.compress = match &v {
                    None => "zstd".into(),
                    Some(Tok::Word(alg)) if alg == "LZ4" => "lz4".into(),
                    Some(Tok::Word(alg)) if alg == "ZSTD" => "zstd".into(),
                    _ => bail!("COMPRESSION takes no value, or = LZ4 / ZSTD"),
                }
            }
            "NO_COMPRESSION" => b.compress = "none".into(),
            "BUFFERCOUNT" => b.buffer_count = Some(num(&name, &v)?.clamp(2, 65536) as u32),
            "MAXTRANSFERSIZE" => b.max_transfer_size = sized(&name, &v, &TRANSFER_SIZE)?,
            "BLOCKSIZE" => b.block_size = sized(&name, &v, &BLOCK_SIZE)?,
            "COPY_ONLY" => b.copy_only = true,
            "NAME" => match v {
                Some(Tok::Str(s)) => b.name = Some(s),
                _ => bail!("NAME needs a quoted text"),
            },
            "DIFFERENTIAL" => bail!("DIFFERENTIAL backups are not supported by this build yet"),
            // As SQL Server's: new media over whatever the file holds.
            "FORMAT" => format = true,
            // Always true here: every set is new, checksummed and self-describing.
            "INIT" | "SKIP" | "CHECKSUM" | "NOREWIND" | "NOUNLOAD" => {}
            other => unsupported.push(other.to_string()),
        }
    }
    if !unsupported.is_empty() {
        bail!("unsupported WITH option(s): {} (supported: STATS, COMPRESSION, NO_COMPRESSION, BUFFERCOUNT, MAXTRANSFERSIZE, BLOCKSIZE, COPY_ONLY, NAME, INIT, FORMAT, SKIP, CHECKSUM)", unsupported.join(", "));
    }
    if !format {
        refuse_foreign_files(&b.to)?;
    }
    if show.stats.is_none() {
        show.stats = Some(100);
    }
    let progress = Arc::new(Progress::default());
    let r = ops::backup(&b, &progress, &mut show.watch(&progress))?;
    show.print(&r)
}

/// A DISK file that exists and is not a pagevault stripe is never overwritten without
/// WITH FORMAT (as SQL Server refuses media it did not write; INIT keeps the media).
fn refuse_foreign_files(to: &[String]) -> Result<()> {
    use crate::format::media::MEDIA_MAGIC;
    use std::io::Read;
    let local = |d: &&String| !d.eq_ignore_ascii_case("nul") && !d.contains("://");
    for d in to.iter().filter(local) {
        let Ok(f) = crate::sys::open_regular(std::path::Path::new(d)) else {
            continue;
        };
        let mut magic = Vec::with_capacity(MEDIA_MAGIC.len());
        f.take(MEDIA_MAGIC.len() as u64).read_to_end(&mut magic)?;
        // An empty file holds nothing to lose.
        if !magic.is_empty() && magic != MEDIA_MAGIC {
            bail!("TO DISK = '{d}': the file exists and is not a pagevault stripe; BACKUP would overwrite it. Name another file, remove it, or add WITH FORMAT to overwrite it");
        }
    }
    Ok(())
}

/// MAXTRANSFERSIZE and BLOCKSIZE: bytes, checked by the backup's own rule.
fn sized(name: &str, v: &Option<Tok>, rule: &ops::SizeRule) -> Result<u64> {
    let n = num(name, v)?;
    if !rule.allows(n) {
        bail!("{name} = {n}: must be {}", rule.in_bytes());
    }
    Ok(n)
}

pub fn run(a: SqlArgs, store: &StoreOptions) -> Result<()> {
    let text = a
        .statements
        .join(" ")
        .replace("\nGO\n", ";")
        .replace("\ngo\n", ";");
    let toks = tokenize(&text)?;
    let statements: Vec<Vec<Tok>> = toks
        .split(|t| *t == Tok::Semi)
        .filter(|s| !s.is_empty())
        .map(|s| s.to_vec())
        .collect();
    if statements.is_empty() {
        bail!("no statement given: try \"BACKUP DATABASE [db] TO DISK = 'NUL' WITH STATS = 10\"");
    }
    if a.json && statements.len() > 1 {
        return Err(anyhow::Error::new(super::Exit {
            code: super::EXIT_USAGE,
            error: anyhow!(
                "--json prints one document: give one statement per run ({} given)",
                statements.len()
            ),
        }));
    }
    for st in statements {
        let mut p = P { toks: st, at: 0 };
        let r = match p.next() {
            Some(Tok::Word(w)) if w == "BACKUP" => run_backup(&mut p, &a, store),
            Some(Tok::Word(w)) if w == "RESTORE" => restore::run(&mut p, &a, store),
            _ => Err(anyhow!("only BACKUP and RESTORE statements are understood")),
        };
        r?;
        if p.at < p.toks.len() {
            bail!("unexpected {} at the end of the statement", p.show());
        }
    }
    Ok(())
}
