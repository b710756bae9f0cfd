//! `pagevault drill`: arguments -> options, the use case (ops::drill), report -> text
//! or JSON; exit 1 when the drill failed.

use super::each::EachRepo;
use crate::device::object::StoreOptions;
use crate::ops::drill::{self, DrillOptions, DrillReport};
use crate::repo::many::RepoStore;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault drill --repo /backups/main\n  pagevault drill --repo s3://bk/main --s3-endpoint http://127.0.0.1:9000 --sql checks.sql --json\n  pagevault drill --repo /backups/main --until '2026-11-21 10:00:00+00' --scratch /mnt/scratch --keep\n\nA drill restores the newest chain (or --set, --until ...) into a scratch directory, starts PostgreSQL there on a free 127.0.0.1 port with archiving off, replays the archived WAL to its newest point (or the target), runs pg_amcheck over every database (amcheck installed in the copy where missing), checks the visibility maps (pg_visibility's pg_check_visible and pg_check_frozen over every table, and index-only against sequential counts; pg_visibility installed in the copy where missing, the check skipped where the server has none) and runs the checks of --sql, stops the server and removes the scratch. It reports the set restored (the newest of its chain, or --set), restore and replay seconds, the point reached, its lag (RPO) behind the newest archived WAL or the --until time (none with --until-lsn, --until-xid or --until-name, whose target has no time to measure to) and the whole time (RTO), and records the result in the repository (tagged with the key in an encrypted or signed repository, so a forged record shows as forged): `status` shows the last drill. A stripe overwritten after its backup is read at the version the backup wrote, and named in a warning. The source cluster is never touched. Exit 1 when any check failed. A stanza naming several repositories (--stanza, no --repo-index): the chain from the first holding it, as restore takes it, each passed over named with why."
)]
pub struct DrillArgs {
    /// The repository.
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo. Without either, the first holding the chain.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// The set to restore (default: the newest chain).
    #[arg(long)]
    pub set: Option<String>,
    #[command(flatten)]
    pub target: super::restore::TargetArgs,
    /// Restore tablespace OID into DIR (as for restore). Repeatable.
    #[arg(long = "tablespace-map", value_name = "OID=DIR")]
    pub tablespace_map: Vec<String>,
    /// Restore into DIR (an empty or new directory, e.g. on a scratch volume) instead of
    /// a new directory under the system's temp directory.
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
    /// Leave the scratch directory (the restored cluster and server.log) in place.
    #[arg(long)]
    pub keep: bool,
    /// Run the server as this user when root runs the drill (default: postgres).
    #[arg(long)]
    pub owner: Option<String>,
    /// The PostgreSQL programs to use (default: those of the set's major version in
    /// /usr/lib/postgresql/MAJOR/bin, /usr/pgsql-MAJOR/bin, or PATH).
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// The 127.0.0.1 port of the scratch server (default: a free one); refused when in use.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// The role the checks connect as.
    #[arg(long, default_value = "postgres")]
    pub db_user: String,
    /// SQL checks of your own, run with psql (ON_ERROR_STOP): each statement must succeed.
    #[arg(long, value_name = "FILE")]
    pub sql: Option<PathBuf>,
    /// The database --sql runs in.
    #[arg(long, default_value = "postgres", value_name = "DB")]
    pub sql_db: String,
    /// How long replay may take before the drill fails (s, m, h, d).
    #[arg(long, default_value = "1h", value_parser = super::status::parse_age)]
    pub timeout: f64,
    /// Decompression threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Print one JSON document with the results instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DrillArgs, store: &StoreOptions) -> Result<()> {
    drill_with(a, store, vec![], vec![])
}

/// Over the stanza's repositories: the chain from the first holding it, as a restore
/// takes it; one whose key or settings are refused is passed over, named.
pub fn run_each(a: DrillArgs, list: Vec<EachRepo<DrillArgs>>) -> Result<()> {
    let mut passed_over = vec![];
    let mut usable = vec![];
    for e in list {
        let path = super::shown(&e.path);
        match e.take() {
            Ok((a, store)) => usable.push((a, store)),
            Err(x) => passed_over.push(format!("passed over {path}: {x:#}")),
        }
    }
    let mut usable = usable.into_iter();
    let Some((first, store)) = usable.next() else {
        anyhow::bail!(
            "no repository of the stanza can be drilled: {}",
            passed_over.join("; ")
        );
    };
    let fallback = usable.map(|(b, s)| RepoStore::new(&b.repo, &s)).collect();
    drill_with(
        DrillArgs {
            json: a.json,
            ..first
        },
        &store,
        fallback,
        passed_over,
    )
}

fn drill_with(
    a: DrillArgs,
    store: &StoreOptions,
    fallback: Vec<RepoStore>,
    passed_over: Vec<String>,
) -> Result<()> {
    let o = DrillOptions {
        repo: a.repo.clone(),
        set: a.set.clone(),
        until: a.target.until.clone(),
        until_lsn: a.target.until_lsn.clone(),
        until_xid: a.target.until_xid.clone(),
        until_name: a.target.until_name.clone(),
        timeline: a.target.timeline,
        tablespace_map: a.tablespace_map.clone(),
        scratch: a.scratch.clone(),
        keep: a.keep,
        owner: a.owner.clone(),
        pg_bin: a.pg_bin.clone(),
        port: a.port,
        db_user: a.db_user.clone(),
        sql: a.sql.clone(),
        sql_db: a.sql_db.clone(),
        timeout: std::time::Duration::from_secs_f64(a.timeout.max(1.0)),
        threads: a.threads.map(|t| t as usize),
        store: store.clone(),
        fallback,
        passed_over,
    };
    let r = drill::drill(&o, &super::restore::shower(None, a.json))?;
    if !super::printed_json(&r, a.json) {
        print_text(&r);
    }
    match r.failed_checks() {
        f if f.is_empty() => Ok(()),
        f => anyhow::bail!("the drill failed: {}", f.join(", ")),
    }
}

fn secs(s: Option<f64>) -> String {
    s.map_or("unknown".into(), |s| format!("{s:.1} s"))
}

fn print_text(r: &DrillReport) {
    println!(
        "Drill of {}{}: {}",
        super::shown(&r.repo),
        r.set_id
            .as_deref()
            .map_or(String::new(), |s| format!(", set {}", super::shown(s))),
        if r.outcome == "ok" {
            "PASSED"
        } else {
            "FAILED"
        }
    );
    if let Some(why) = &r.served_because {
        println!("  chain from {}: {why}", super::shown(&r.repo));
    }
    for p in &r.passed_over {
        println!("  {}", super::shown(p));
    }
    for c in &r.checks {
        let word = super::check::status_word(c.status);
        let mut lines = c.detail.lines();
        println!(
            "  {word} {:<11} {}",
            c.name,
            super::shown(lines.next().unwrap_or(""))
        );
        for l in lines {
            println!("       {:<11} {}", "", super::shown(l));
        }
    }
    let to = match r.rpo_to {
        Some("target_time") => " (to the --until time)",
        Some(_) => " (to the newest archived WAL)",
        None => "",
    };
    println!(
        "restore {}, replay {}, RTO {:.1} s, RPO {}{to}",
        secs(r.restore_seconds),
        secs(r.replay_seconds),
        r.rto_seconds,
        secs(r.rpo_seconds)
    );
    if let Some(w) = &r.newest_wal {
        println!(
            "point reached {} on {}; newest archived segment {w} ({})",
            r.reached_lsn.as_deref().unwrap_or("unknown"),
            r.reached_time.as_deref().unwrap_or("no transaction time"),
            r.newest_wal_archived.as_deref().unwrap_or("unknown")
        );
    }
    if r.kept {
        println!("scratch kept: {}", r.scratch.display());
    }
    match (&r.recorded, &r.record_error) {
        (Some(n), _) => println!("recorded as {}", super::shown(n)),
        (_, Some(e)) => println!("NOT recorded in the repository: {e}"),
        _ => {}
    }
}
