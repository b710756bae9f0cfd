//! `pagevault check`: proves that backups and recovery will work (see ops::check).

use super::{print_json, shown, Exit};
use crate::device::object::StoreOptions;
use crate::ops::check::{check, CheckOptions, Outcome};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
#[command(after_help = "\
Checks, one line each: repository (opens), key (loads, is the repository's),
connect (a server version pagevault backs up), identity (the cluster the repository
holds), archive_command (archive_mode on, pushing into this repository), wal-archived
(a forced WAL switch reaches the repository through the server's own
archive_command), repository-writable (a probe object written, read back, removed),
restore_command (the one a restore writes, run as the data directory's owner on that
segment), wal-intact (no archived segment marked damaged: one whose records could
not be decoded when archive-push stored it stops a recovery there), free-space.
Exit 0 when none failed (warnings allowed), 1 otherwise; each
failure names its fix.

Examples:
  pagevault check --source postgres://postgres@/postgres --repo /backups/main
  pagevault check --source 'postgres://backup@db1:5432/postgres' --repo s3://bucket/main \\
      --key-file /etc/pagevault/key --timeout 120 --json")]
pub struct CheckArgs {
    /// The PostgreSQL server (postgres://USER@HOST:PORT/DB, ?pgdata=DIR when the data
    /// directory is elsewhere on this machine).
    #[arg(long)]
    pub source: String,
    /// The source's password is the first line of FILE.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// The repository (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Seconds to wait for the switched WAL segment to reach the repository.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CheckArgs, store: Result<StoreOptions>, s3_endpoint: Option<String>) -> Result<()> {
    let (store, key_error) = match store {
        Ok(s) => (s, None),
        Err(e) => (
            StoreOptions {
                s3_endpoint,
                key: None,
            },
            Some(format!("{e:#}")),
        ),
    };
    let r = check(&CheckOptions {
        source: a.source,
        password_file: a.password_file,
        repo: a.repo,
        timeout: Duration::from_secs(a.timeout),
        store,
        key_error,
        stanza_repo: Some(super::config::ConfigFile::archive_push_value),
    })?;
    if a.json {
        print_json(&serde_json::to_value(&r)?);
    } else {
        for k in &r.checks {
            let word = match k.status {
                Outcome::Ok => "ok  ",
                Outcome::Warn => "WARN",
                Outcome::Fail => "FAIL",
                Outcome::Skip => "skip",
            };
            let fix = k
                .fix
                .as_deref()
                .map(|f| format!(" -> {f}"))
                .unwrap_or_default();
            println!("{word} {:<20} {}{}", k.name, shown(&k.detail), shown(&fix));
        }
    }
    if r.ok {
        return Ok(());
    }
    let failed: Vec<&str> = (r.checks.iter())
        .filter(|k| !k.ok)
        .map(|k| k.name)
        .collect();
    Err(Exit {
        code: 1,
        error: anyhow::anyhow!("check failed: {}", failed.join(", ")),
    }
    .into())
}
