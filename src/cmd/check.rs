//! `pagevault check`: proves that backups and recovery will work (see ops::check).

use super::each::{each, EachRepo};
use super::{print_json, shown, Exit};
use crate::device::object::StoreOptions;
use crate::ops::check::{check, CheckOptions, CheckReport, Outcome};
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
failure names its fix. A stanza naming several repositories (--stanza, no
--repo-index): each checked with its own key and endpoint, each line naming it.

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
    /// apply. Instead of --repo. Without either, each repository is checked.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Seconds to wait for the switched WAL segment to reach the repository.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The run's options, and a key that did not load as one of the findings.
fn report(
    a: CheckArgs,
    store: Result<StoreOptions>,
    s3_endpoint: Option<String>,
) -> Result<CheckReport> {
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
    check(&CheckOptions {
        source: a.source,
        password_file: a.password_file,
        repo: a.repo,
        timeout: Duration::from_secs(a.timeout),
        store,
        key_error,
        stanza_repo: Some(super::config::ConfigFile::archive_push_value),
    })
}

pub fn run(a: CheckArgs, store: Result<StoreOptions>, s3_endpoint: Option<String>) -> Result<()> {
    let json = a.json;
    let r = report(a, store, s3_endpoint)?;
    if json {
        print_json(&serde_json::to_value(&r)?);
    } else {
        print_lines(&r, "");
    }
    match failed(&r) {
        None => Ok(()),
        Some(f) => Err(Exit {
            code: 1,
            error: anyhow::anyhow!("check failed: {f}"),
        }
        .into()),
    }
}

/// Each repository of the stanza checked in turn, with its own key and endpoint: each
/// line names its repository (`--json`: `repositories`); exit 1 when any check failed.
pub fn run_each(
    json: bool,
    list: Vec<EachRepo<CheckArgs>>,
    s3_endpoint: Option<String>,
) -> Result<()> {
    let of = list.len();
    // A key that does not load is a finding of its repository, not an error.
    let list = (list.into_iter())
        .map(|e| EachRepo {
            label: e.label,
            name: e.name,
            path: e.path,
            run: e
                .run
                .map(|(a, store)| ((a, store), Ok(StoreOptions::default()))),
        })
        .collect::<Vec<_>>();
    let out = each(
        list,
        json,
        |(a, store), _| report(a, store, s3_endpoint.clone()),
        |label, r| print_lines(r, &format!("{label} ")),
        failed,
    );
    if json {
        out.print_json("check");
    }
    out.verdict("check", of)
        .map_err(|error| Exit { code: 1, error }.into())
}

/// The names of the checks that failed (None when none did).
fn failed(r: &CheckReport) -> Option<String> {
    let failed: Vec<&str> = (r.checks.iter())
        .filter(|k| !k.ok)
        .map(|k| k.name)
        .collect();
    (!r.ok).then(|| failed.join(", "))
}

/// A check's status as its line starts.
pub(super) fn status_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "ok  ",
        Outcome::Warn => "WARN",
        Outcome::Fail => "FAIL",
        Outcome::Skip => "skip",
    }
}

/// One line a check, its name after `prefix` (the repository's, over several).
fn print_lines(r: &CheckReport, prefix: &str) {
    for k in &r.checks {
        let word = status_word(k.status);
        let fix = k
            .fix
            .as_deref()
            .map(|f| format!(" -> {f}"))
            .unwrap_or_default();
        let name = format!("{prefix}{}", k.name);
        println!("{word} {name:<20} {}{}", shown(&k.detail), shown(&fix));
    }
}
