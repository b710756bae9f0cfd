//! `pagevault archive-push` and `archive-get`: WAL archiving as log backups, for
//! PostgreSQL's `archive_command` and `restore_command`:
//!
//! ```text
//! archive_command = 'pagevault archive-push %p --repo /backup/repo'
//! restore_command = 'pagevault archive-get %f %p --repo /backup/repo'
//! ```
//!
//! With `--async --spool DIR`, archive-push returns once the file is durable in a local
//! spool and a background pusher stores it (ops/archive/pusher.rs):
//!
//! ```text
//! archive_command = 'pagevault archive-push %p --repo s3://b/repo --async --spool /var/spool/pagevault'
//! ```
//!
//! With several `--repo`, a push stores into all at once and a get reads from the first
//! holding an intact copy (ops/archive/many.rs); an async push's spool keeps a file until
//! every one holds it (ops/archive/pusher.rs).
//!
//! Exit 0 only when the file is durable in every repository, or in the spool (push), or
//! complete at its destination (get). archive-push fails with exit 1 (PostgreSQL retries it).
//! archive-get exits 1 only when the archive does not hold the file, which PostgreSQL
//! reads as "the end of the archive" (expected for files that may not exist, such as
//! the next timeline's history file). A file that is there but damaged, or an archive
//! that cannot be read, exits 126: PostgreSQL treats a status above 125 as fatal and
//! stops recovery with an error, instead of ending it early and promoting.

use crate::cmd::config::RepoOptions;
use crate::device::object::StoreOptions;
use crate::ops::archive;
use crate::repo::wal;
use crate::units::human;
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(after_help = "Examples:
  archive_command = 'pagevault archive-push %p --repo /backup/repo'
  archive_command = 'pagevault archive-push --stanza main %p'   (repo ... from [stanza.main], docs/CONFIG.md)
  archive_command = 'pagevault archive-push %p --repo /backup/repo --repo s3://bucket/repo'   (into both at once)
  archive_command = 'pagevault archive-push %p --repo s3://bucket/repo --async --spool /var/spool/pagevault'
  archive_command = 'pagevault archive-push --stanza main %p --async --spool /var/spool/pagevault'   (every repository of the stanza)
  pagevault archive-push --drain --spool /var/spool/pagevault --repo s3://bucket/repo   (push what waits, now)")]
pub struct PushArgs {
    /// The segment to archive (%p in archive_command); not with --drain.
    #[arg(required_unless_present = "drain")]
    pub path: Option<PathBuf>,
    /// The repository to archive into. Repeat to archive into several at once (a
    /// stanza's repo list does): the push succeeds only once every one holds the file,
    /// and a failure names the repository. With --async, the spool keeps each file
    /// until every one holds it, each pushed to on its own. Each repository of a
    /// stanza is sealed with its own key-file or passphrase-file and reached at its own
    /// s3-endpoint when its [[stanza.NAME.repo]] table gives them.
    #[arg(long, required = true)]
    pub repo: Vec<String>,
    /// Store each segment's block summary beside it (which blocks its records change):
    /// what lets `backup --type incr` and `diff` read only the changed pages, and
    /// `estimate` count them. Off saves the summarizing CPU; those backups then read
    /// every page of the cluster.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub summaries: String,
    /// With a key (--key-file, --passphrase-file or their variables): make a new or
    /// plain repository signed rather than encrypted. Its WAL files and sets are then
    /// stored readable and authenticated by keyed BLAKE3 tags, and it refuses unsigned
    /// writes from then on. Into a repository already signed or encrypted, a key alone
    /// does what it says.
    #[arg(long)]
    pub sign: bool,
    /// Return once the file is durable in the spool (--spool), checked and summarized;
    /// a background pusher stores spooled files in the repository, --process-max at a
    /// time, retrying until each is stored: nothing is dropped, and the repository's
    /// gaps are what the spool still holds. An unreachable repository does not stop
    /// archiving; the spool grows, and every push warns in PostgreSQL's log past
    /// --spool-max. With several --repo, each has its own pushes and retries (one down
    /// delays no other), and every push names in PostgreSQL's log a repository that
    /// fails and what it lacks.
    #[arg(long = "async", requires = "spool")]
    pub asynchronous: bool,
    /// The spool directory (local, on a file system that survives a reboot; not pg_wal).
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// Files the pusher stores at once (into each repository, with several).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub process_max: u16,
    /// Warn on every push while the spool holds more than this (e.g. 4G); nothing is dropped.
    #[arg(long, default_value = "4G", value_parser = crate::units::parse_size)]
    pub spool_max: u64,
    /// With --async: also spool up to this many files PostgreSQL has ready to archive
    /// after this one (pg_wal/archive_status/*.ready), several at once; its next calls
    /// then find them spooled: the file handed over is known by its identity (device,
    /// inode, size, times, unchanged since it was spooled), else read and compared.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(0..=256))]
    pub look_ahead: u16,
    /// Push everything waiting in --spool into the repository, then exit (what the
    /// background pusher runs; by hand, after the repository was unreachable).
    #[arg(long, requires = "spool")]
    pub drain: bool,
    /// With --drain: end with an error once pushes have failed for this long (30s, 5m,
    /// 1h; 0s: at the first failed round), naming the file; what failed stays in the
    /// spool, what could be pushed is. The background pusher retries for ever.
    #[arg(long, value_name = "D", default_value = "5m",
          value_parser = crate::ops::expire::plan::parse_duration)]
    pub give_up: u64,
    /// The background pusher's --drain: ends at once when another pusher runs (by
    /// hand, --drain waits for it).
    #[arg(long, hide = true, requires = "drain")]
    pub pusher: bool,
    /// Print what was done as one JSON object on stdout (warnings still go to stderr,
    /// which PostgreSQL logs).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(after_help = "Examples:
  restore_command = 'pagevault archive-get %f \"%p\" --repo /backup/repo'
  restore_command = 'pagevault archive-get --stanza main %f \"%p\"'
  restore_command = 'pagevault archive-get %f \"%p\" --repo /backup/repo --repo s3://bucket/repo'   (the second when the first cannot serve)

Exit status: 0 fetched, 1 the archive does not hold the file, 126 any fault (recovery stops).")]
pub struct GetArgs {
    /// The segment name wanted (%f in restore_command).
    pub name: String,
    /// Where to write it (%p in restore_command).
    pub dest: PathBuf,
    /// The repository to fetch from. Repeat to fall back: the first that holds an intact
    /// copy serves, the others passed over are named on stderr (prefetch reads the
    /// first). Each repository of a stanza opens with its own key and endpoint when its
    /// table gives them (a restore_command over such repositories names --config and
    /// --stanza).
    #[arg(long, required = true)]
    pub repo: Vec<String>,
    /// The most segments fetched ahead: a background fetcher brings the next segments,
    /// up to 8 at once, while PostgreSQL replays this one, each checked as archive-get
    /// checks a file; the next archive-get finds its segment there and hands it over
    /// with no request to the store. How far ahead adapts to the store's round trip and
    /// the replay rate (twice the segments replayed while one fetch takes, plus one, at
    /// least 2); N bounds it, and with it the disk used (16 segments of 16 MiB: 256 MiB).
    /// Default: 16 when PostgreSQL asks (the destination is pg_wal/RECOVERYXLOG), else 0
    /// (off).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=256))]
    pub prefetch: Option<u16>,
    /// Where prefetched segments wait (default: pagevault-prefetch beside the
    /// destination, in pg_wal; removed at the end of the archive).
    #[arg(long)]
    pub prefetch_dir: Option<PathBuf>,
    /// The background fetcher: fetch the window after NAME (segments of this many bytes).
    #[arg(long, hide = true)]
    pub fetch_ahead: Option<u64>,
}

impl GetArgs {
    fn options(&self, store: &StoreOptions, repos: &RepoOptions) -> Result<archive::GetOptions> {
        let asked_by_server = self.dest.file_name().is_some_and(|n| n == "RECOVERYXLOG");
        let prefetch = self
            .prefetch
            .map_or(if asked_by_server { 16 } else { 0 }, usize::from);
        let prefetch_dir = self.prefetch_dir.clone().unwrap_or_else(|| {
            let parent = self.dest.parent().filter(|p| !p.as_os_str().is_empty());
            parent
                .unwrap_or(Path::new("."))
                .join(archive::prefetch::DEFAULT_DIR)
        });
        Ok(archive::GetOptions {
            name: self.name.clone(),
            dest: self.dest.clone(),
            repos: repos.stores(&self.repo, store)?,
            prefetch,
            prefetch_dir,
        })
    }
}

/// Each repository opens with its own key and endpoint (`repos`).
pub fn run_push(a: PushArgs, store: &StoreOptions, repos: &RepoOptions) -> Result<()> {
    if a.drain {
        return run_drain(&a, store, repos);
    }
    let path = a
        .path
        .clone()
        .expect("clap requires a path without --drain");
    if a.asynchronous {
        // The pusher signs with each repository's key: refused here, not after spooling.
        let stores = match a.sign {
            true => repos.stores(&a.repo, store)?,
            false => vec![],
        };
        for r in stores {
            if r.store.key.is_none() {
                anyhow::bail!(
                    "--sign needs a key, and {} has none: {}",
                    r.spec,
                    crate::crypt::load::GIVE_KEY
                );
            }
        }
        return run_push_async(&a, path);
    }
    let all = archive::push(&archive::PushOptions {
        path,
        repos: repos.stores(&a.repo, store)?,
        no_summaries: a.summaries == "off",
        sign: a.sign,
    })?;
    let p = &all.pushed;
    for w in &p.warnings {
        super::log::warn_as(&format!("pagevault: WARNING: {w}"), w);
    }
    let several = all.each.len() > 1;
    if a.json {
        let mut v = serde_json::to_value(p)?;
        if several {
            v["repositories"] = serde_json::to_value(&all.each)?;
        }
        v["object_store"] = super::retries_json();
        super::print_json(&v);
        return Ok(());
    }
    if several {
        for r in &all.each {
            println!(
                "pagevault: {} into {}: {} ({}) in {:.3} s",
                p.name,
                r.repo,
                serde_json::to_value(r.outcome)?
                    .as_str()
                    .unwrap_or_default(),
                human(r.stored_bytes),
                r.seconds
            );
        }
    }
    match p.outcome {
        wal::Outcome::Archived => println!(
            "pagevault: archived {} ({} -> {}) in {:.3} s, {:.3} s CPU (summary {:.3} s CPU)",
            p.name,
            human(p.raw_bytes),
            human(p.stored_bytes),
            p.seconds,
            p.cpu_seconds,
            p.summary_cpu_seconds
        ),
        wal::Outcome::AlreadyArchived => println!(
            "pagevault: {} was already archived with identical content: nothing to do",
            p.name
        ),
        wal::Outcome::Repaired => println!(
            "pagevault: {} was archived before but that copy was damaged: replaced it with this identical file",
            p.name
        ),
    }
    if let Some(s) = &p.summary {
        println!("pagevault: {}: {s}", p.name);
    }
    Ok(())
}

fn run_push_async(a: &PushArgs, path: PathBuf) -> Result<()> {
    let p = archive::push_async(
        &archive::AsyncOptions {
            path,
            repos: a.repo.clone(),
            spool: a.spool.clone().expect("clap requires --spool with --async"),
            no_summaries: a.summaries == "off",
            spool_max: a.spool_max,
            look_ahead: a.look_ahead as usize,
        },
        start_pusher,
    )?;
    for w in &p.warnings {
        super::log::warn_as(&format!("pagevault: WARNING: {w}"), w);
    }
    if super::printed_json(&p, a.json) {
        return Ok(());
    }
    let pusher = match p.pusher {
        archive::Pusher::Running => "the pusher runs".to_string(),
        archive::Pusher::Started { pid } => format!("started the pusher (pid {pid})"),
    };
    let lacking: Vec<String> = (p.repositories.iter())
        .filter(|r| r.lacks.files > 0)
        .map(|r| {
            format!(
                "{} lacks {} ({})",
                r.repo,
                r.lacks.files,
                human(r.lacks.bytes)
            )
        })
        .collect();
    println!(
        "pagevault: spooled {} ({}{}{}) in {:.3} s; {} files ({}) wait for the {}, {pusher}",
        p.name,
        human(p.raw_bytes),
        if p.already { ", spooled before" } else { "" },
        match p.spooled_ahead {
            0 => String::new(),
            k => format!(", and {k} files ready after it"),
        },
        p.seconds,
        p.backlog.files,
        human(p.backlog.bytes),
        match lacking.is_empty() {
            true if p.repositories.is_empty() => "repository".to_string(),
            true => "repositories".to_string(),
            false => format!("repositories ({})", lacking.join(", ")),
        }
    );
    Ok(())
}

/// Starts this archive-push again in the background with `--drain --pusher`.
fn start_pusher(spool: &archive::spool::Spool) -> Result<u32> {
    spawn_self(
        spool.log()?,
        &["--drain".to_string(), "--pusher".to_string()],
    )
    .context("cannot start the pusher")
}

fn run_drain(a: &PushArgs, store: &StoreOptions, repos: &RepoOptions) -> Result<()> {
    let spool = a.spool.clone().expect("clap requires --spool with --drain");
    // The background pusher yields the cores to PostgreSQL and to archive_command, whose
    // speed is what keeps pg_wal small; it catches up when they rest.
    if a.pusher {
        let _ = crate::sys::lower_priority(10);
    }
    let d = archive::pusher::drain(
        &archive::pusher::DrainOptions {
            spool: spool.clone(),
            repos: repos.stores(&a.repo, store)?,
            process_max: a.process_max as usize,
            linger: std::time::Duration::from_secs(2),
            give_up: (!a.pusher).then_some(std::time::Duration::from_secs(a.give_up)),
            yield_below: a.spool_max / 2,
            wait_for_lock: (!a.pusher).then_some(std::time::Duration::from_secs(300)),
            sign: a.sign,
            summaries: a.summaries == "on",
        },
        &mut |line| {
            eprintln!(
                "{} pagevault[{}]: {line}",
                chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"),
                std::process::id()
            )
        },
    )?;
    // The background pusher writes lines to its log, --json or not.
    if !a.pusher && super::printed_json(&d, a.json) {
        return Ok(());
    }
    if !d.ran {
        println!(
            "pagevault: another pusher holds '{}'; {} files ({}) wait",
            spool.display(),
            d.left.files,
            human(d.left.bytes)
        );
        return Ok(());
    }
    let requests = match d.object_store.requests {
        0 => String::new(),
        n => format!(", {n} requests to the store"),
    };
    println!(
        "pagevault: pushed {} files ({} -> {}) from '{}' in {:.1} s{requests}, {} failed rounds; {} files wait",
        d.pushed,
        human(d.raw_bytes),
        human(d.stored_bytes),
        spool.display(),
        d.seconds,
        d.failures,
        d.left.files
    );
    for r in &d.repositories {
        println!(
            "pagevault: into {}: {} files ({}), {} failed rounds; it lacks {} files ({})",
            r.repo,
            r.pushed,
            human(r.stored_bytes),
            r.failures,
            r.lacks.files,
            human(r.lacks.bytes)
        );
    }
    Ok(())
}

/// Starts this archive-get again in the background as the prefetch fetcher.
fn start_fetcher(dir: &Path, seg_size: u64) -> Result<()> {
    let log = archive::prefetch::make(dir)?.log()?;
    spawn_self(log, &["--fetch-ahead".to_string(), seg_size.to_string()]).map(|_| ())
}

/// Starts `pagevault` again with this command's arguments and `extra`, in the
/// background: in its own process group (PostgreSQL's signals to its archiver or
/// startup process stop it not), its output appended to `out`.
fn spawn_self(out: std::fs::File, extra: &[String]) -> Result<u32> {
    let args = (std::env::args_os().skip(1)).chain(extra.iter().map(Into::into));
    crate::sys::spawn_detached(args, Some(out)).context("cannot start it")
}

/// archive-get's status for a file that is there but cannot be used: above 125.
pub const GET_FATAL: u8 = 126;

/// archive-get's status for an error: 1 only when the archive does not hold the file.
pub fn get_status(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<wal::NotArchived>() {
        Some(_) => 1,
        None => GET_FATAL,
    }
}

/// Each repository opens with its own key and endpoint (`repos`).
pub fn run_get(a: GetArgs, store: &StoreOptions, repos: &RepoOptions) -> Result<()> {
    let o = a.options(store, repos)?;
    if let Some(seg_size) = a.fetch_ahead {
        // The segments it fetches readable and writable by this user only.
        crate::sys::private_umask(false);
        let f = archive::prefetch::fetch_ahead(&archive::prefetch::FetchOptions {
            dir: o.prefetch_dir,
            repo: o.repos[0].spec.clone(),
            first: o.name.clone(),
            seg_size,
            window: o.prefetch,
            linger: std::time::Duration::from_secs(10),
            store: o.repos[0].store.clone(),
        })?;
        let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.0} ms", s * 1e3));
        println!(
            "{} pagevault[{}]: from {}: fetched {} segments ({}), {} fetches found nothing yet, {} failed; \
             {} ahead at the end, {} at most (a fetch {}, a segment's replay {})",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"),
            std::process::id(),
            a.name,
            f.fetched,
            human(f.bytes),
            f.absent,
            f.failed,
            f.depth,
            f.depth_max,
            ms(f.fetch_seconds),
            ms(f.replay_seconds)
        );
        return Ok(());
    }
    let fetched = archive::get(&o, start_fetcher);
    if let Ok(g) = &fetched {
        for w in g.warning.iter().chain(&g.passed_over) {
            super::log::warn_as(&format!("pagevault: WARNING: {w}"), w);
        }
    }
    match fetched {
        Ok(_) => Ok(()),
        Err(e) if e.downcast_ref::<wal::NotArchived>().is_some() => {
            Err(e.context("exit 1: PostgreSQL takes this as the end of the archive"))
        }
        Err(e) => Err(super::Exit {
            code: GET_FATAL,
            error: e.context(format!(
                "{} could not be restored, and recovery must not end here: exit {GET_FATAL} stops \
                 it with an error (fix the archive or its access, then start the server again)",
                a.name
            )),
        }
        .into()),
    }
}
