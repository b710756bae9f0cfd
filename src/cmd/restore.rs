//! `pagevault restore` and `pagevault verify`: arguments -> options, the use case
//! (ops::restore, ops::verify), report -> text or JSON.

use super::PrintWaits;
use super::Reporter;
use crate::device::object::StoreOptions;
use crate::engine::stats::Progress;
use crate::ops::restore::{self, RestoreOptions, RestoreReport};
use crate::ops::verify::{self, ReadOptions, VerifyOptions, VerifyReport};
use crate::repo::wal::damaged::Position;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone)]
pub struct ReadArgs {
    /// A stripe of the set (a file path). Name every stripe, in any order.
    #[arg(long = "from", required_unless_present = "repo")]
    pub from: Vec<String>,
    /// Take the set (and the WAL) from this repository instead of --from. restore: repeat
    /// to fall back, the set taken from the first repository that holds the chain, the
    /// others named after it in the restore_command written (archive-get falls back in
    /// turn; when the stanza gives them keys or endpoints of their own, it names
    /// --config and --stanza instead of a key); verify verifies each in turn.
    #[arg(long)]
    pub repo: Vec<String>,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo (restore: from this one alone; verify: without it, each).
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// The set to use from the repository (default: the newest usable full set).
    #[arg(long)]
    pub set: Option<String>,
    /// Decompression threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Buffers in the pool (default: 4 per stripe + 2 per thread).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=65536))]
    pub buffer_count: Option<u32>,
    /// Print "N percent processed." every N percent (default 10 when not on a terminal).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub stats: Option<u32>,
    /// Print one JSON document with the results instead of text.
    #[arg(long)]
    pub json: bool,
}

impl ReadArgs {
    pub fn options(&self) -> ReadOptions {
        ReadOptions {
            from: self.from.clone(),
            repo: self.repo.first().cloned(),
            fallback: crate::repo::many::RepoStore::all(
                &self.repo.iter().skip(1).cloned().collect::<Vec<_>>(),
                &StoreOptions::default(),
            ),
            set: self.set.clone(),
            threads: self.threads.map(|t| t as usize),
            buffer_count: self.buffer_count.map(|b| b as usize),
            store: StoreOptions::default(),
        }
    }
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault restore --from /bk/a.pv --from /bk/b.pv --to /restore\n  pagevault restore --repo /backups/main --to /pg/data --owner postgres --replace\n  pagevault restore --repo /backups/main --to /pg/data --owner postgres --delta --json\n  pagevault restore --repo /backups/main --to /pg/one --db-include app\n  pagevault restore --repo /backups/main --to /pg/replica --owner postgres --standby --primary-conninfo 'host=db1 user=replicator'\n\n--delta re-seeds a stopped primary or refreshes a replica in place: files whose content matches the set are kept, relation files are compared chunk by chunk (a chunk's digest against the frame's before anything is decompressed) and only what differs is written; what the set does not hold is removed. A missing or empty target restores as without it."
)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub read: ReadArgs,
    /// Directory to restore into; it must be empty or missing unless --replace.
    #[arg(long)]
    pub to: PathBuf,
    /// Delete what the target directory holds and restore over it.
    #[arg(long, conflicts_with = "delta")]
    pub replace: bool,
    /// Restore over what the target holds (a stopped server's data directory), writing
    /// only what differs from the set: matching files kept, relation files compared by
    /// chunk, files the set does not hold removed. Refuses a running server's directory,
    /// and one of another cluster (without --force). `--delta wal` (PostgreSQL, from a
    /// repository) reads no relation page in place: the pages that can differ are those
    /// the archive's block summaries list from the copy's last checkpoint (or where its
    /// timeline left the set's) to the set's end, and those its own pg_wal changed; only
    /// they are written, and of an uncompressed plain set only they are read (each
    /// checked by its frame's page checks). It refuses, saying why, when that cannot be proven (summaries
    /// missing, WAL the copy wrote that its pg_wal no longer holds), and `--delta` is the
    /// answer then.
    #[arg(long, num_args = 0..=1, default_missing_value = "compare", value_name = "compare|wal")]
    pub delta: Option<DeltaMode>,
    /// With --delta: restore over a data directory of another cluster (another system
    /// identifier in its global/pg_control), which is refused without it. Lifts that
    /// refusal only.
    #[arg(long, requires = "delta")]
    pub force: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// PostgreSQL: what the server does at the recovery target (recovery_target_action):
    /// promote (open for writes, the default), pause (stay in recovery, open for reads,
    /// until SELECT pg_wal_replay_resume()) or shutdown (stop; started again it replays
    /// on, to a later target if one is set). Needs --until*.
    #[arg(long, value_name = "promote|pause|shutdown")]
    pub target_action: Option<crate::ops::restore::TargetAction>,
    /// PostgreSQL: check only that every WAL file recovery needs is in the archive, not
    /// that each is intact (by default each is read and checked before anything is written).
    #[arg(long)]
    pub no_verify_wal: bool,
    /// Give the restored files to this user (restoring as root for a server that runs as another).
    #[arg(long)]
    pub owner: Option<String>,
    /// PostgreSQL: restore tablespace OID into DIR (an empty or new directory). Repeatable.
    /// A set with tablespaces needs this for each, or --tablespaces-from-set.
    #[arg(long = "tablespace-map", value_name = "OID=DIR")]
    pub tablespace_map: Vec<String>,
    /// PostgreSQL: restore the tablespaces not in --tablespace-map to the locations the
    /// set names (outside --to). Without it such a set is refused: a set is data, and
    /// anyone who reaches the storage could have written those paths.
    #[arg(long)]
    pub tablespaces_from_set: bool,
    /// Write an HTML page with the timeline (throughput, latency, pool, waits, CPU).
    #[arg(long, value_name = "FILE.html", value_parser = crate::report::writable_path)]
    pub report: Option<PathBuf>,
    /// PostgreSQL: restore only this database (a name the set records, or an OID).
    /// Repeatable. The other databases' relation files are created empty (sparse, at
    /// their size) and nothing of them is read; template0, template1 and postgres are
    /// always restored. After recovery, DROP DATABASE the ones left out.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["db_exclude", "delta"])]
    pub db_include: Vec<String>,
    /// PostgreSQL: leave this database out (as --db-include leaves the others). Repeatable.
    #[arg(long, value_name = "NAME", conflicts_with = "delta")]
    pub db_exclude: Vec<String>,
    /// PostgreSQL: restore as a standby (standby.signal instead of recovery.signal): it
    /// replays the archive and keeps replaying, streaming from --primary-conninfo when
    /// given. The usual way to build a replica. No --until* with it.
    #[arg(long, conflicts_with = "target")]
    pub standby: bool,
    /// PostgreSQL: the standby's primary_conninfo, e.g. 'host=db1 port=5432
    /// user=replicator' (a password in ~/.pgpass of the server's user, not here).
    #[arg(long, value_name = "CONNINFO", requires = "standby")]
    pub primary_conninfo: Option<String>,
    /// PostgreSQL: off writes archive_mode = off, so the restored server archives
    /// nothing; preserve keeps the set's setting. Default: off for a copy (its WAL never
    /// mixes with the cluster's in the repository), preserve with --delta (the original
    /// re-seeded) or --standby (it archives only once promoted).
    #[arg(long, value_name = "off|preserve")]
    pub archive_mode: Option<crate::ops::restore::ArchiveMode>,
    /// PostgreSQL: a setting for postgresql.auto.conf, KEY=VALUE (repeatable), e.g.
    /// recovery_target_action=pause or max_connections=50. Written after pagevault's own
    /// recovery lines, so a key given here wins over them.
    #[arg(long, value_name = "KEY=VALUE")]
    pub recovery_option: Vec<String>,
    /// Which writes skip the page cache (O_DIRECT): auto (aligned writes of 128 KiB or
    /// more: a large file's chunks), on (every aligned write) or off (every write through
    /// the page cache, written back as each frame ends). Where the file system refuses
    /// O_DIRECT the writes go through the page cache, and the summary says so. A --delta
    /// restore always uses the page cache (it reads what is in place).
    #[arg(long, value_name = "auto|on|off", default_value = "auto")]
    pub direct_writes: crate::target::DirectWrites,
    /// Writes in flight at most: threads that only write, fed by the decompressors
    /// (default: 2 per decompression thread, at least 4).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub write_depth: Option<u32>,
}

/// The point recovery stops at, as `restore` and `drill` take it.
#[derive(Args)]
pub struct TargetArgs {
    /// PostgreSQL: recover up to this time (recovery_target_time), e.g. '2026-11-21 10:00:00+00'.
    #[arg(long, group = "target")]
    pub until: Option<String>,
    /// PostgreSQL: recover up to this LSN (recovery_target_lsn), e.g. 0/3000148.
    #[arg(long, group = "target")]
    pub until_lsn: Option<String>,
    /// PostgreSQL: recover up to this transaction id (recovery_target_xid).
    #[arg(long, group = "target")]
    pub until_xid: Option<String>,
    /// PostgreSQL: recover up to this restore point (recovery_target_name).
    #[arg(long, group = "target")]
    pub until_name: Option<String>,
    /// PostgreSQL: the timeline to recover along (recovery_target_timeline): latest (the
    /// newest one the archive holds a history file for, as PostgreSQL picks it by
    /// default), current (the set's own, following no switch) or a timeline number. A
    /// time or LSN that exists on more than one timeline (after a failover, or a split
    /// brain) needs it.
    #[arg(long, value_name = "latest|current|TLI")]
    pub timeline: Option<crate::ops::restore::TimelineTarget>,
}

/// `--delta`'s way of telling what differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeltaMode {
    /// Read and compare every file in place.
    Compare,
    /// Write the pages the WAL says can differ; read none.
    Wal,
}

impl RestoreArgs {
    pub fn options(&self) -> RestoreOptions {
        RestoreOptions {
            read: self.read.options(),
            to: self.to.clone(),
            replace: self.replace,
            delta: self.delta.is_some(),
            delta_wal: self.delta == Some(DeltaMode::Wal),
            force: self.force,
            until: self.target.until.clone(),
            until_lsn: self.target.until_lsn.clone(),
            until_xid: self.target.until_xid.clone(),
            until_name: self.target.until_name.clone(),
            timeline: self.target.timeline,
            target_action: self.target_action,
            no_verify_wal: self.no_verify_wal,
            owner: self.owner.clone(),
            tablespace_map: self.tablespace_map.clone(),
            tablespaces_from_set: self.tablespaces_from_set,
            report: self.report.clone(),
            db_include: self.db_include.clone(),
            db_exclude: self.db_exclude.clone(),
            standby: self.standby,
            primary_conninfo: self.primary_conninfo.clone(),
            archive_mode: self.archive_mode,
            recovery_options: self.recovery_option.clone(),
            direct_writes: self.direct_writes,
            write_depth: self.write_depth.map(|d| d as usize),
            ..RestoreOptions::default()
        }
    }
}

#[derive(Args, Clone)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub read: ReadArgs,
}

/// Shows each pipeline of a use case: a bar, or "N percent processed." lines.
pub fn shower(
    stats: Option<u32>,
    json: bool,
) -> impl Fn(Arc<Progress>, &'static str) -> Box<dyn std::any::Any> {
    move |progress, verb| match verb {
        restore::CHECK_WAL => Box::new(Reporter::bar_only(progress, stats, json, verb)),
        _ => Box::new(Reporter::start(progress, stats, json, verb)),
    }
}

/// Each repository opens with its own key and endpoint (`repos`); the restore_command
/// written reaches them all.
pub fn run_restore(
    a: RestoreArgs,
    store: &StoreOptions,
    repos: &crate::cmd::config::RepoOptions,
) -> Result<()> {
    let mut o = a.options();
    if let [first, rest @ ..] = a.read.repo.as_slice() {
        o.read.store = repos.store_of(first, store)?;
        o.read.fallback = repos.stores(rest, store)?;
        o.config = repos.config_ref(store);
        if o.config.is_none() && o.read.fallback.iter().any(|r| r.store != o.read.store) {
            return Err(super::Exit {
                code: super::EXIT_USAGE,
                error: anyhow::anyhow!(
                    "the repositories do not share one key and endpoint: a restore_command \
                     could not open each with its own; restore with --stanza NAME and the \
                     configuration file that gives each repository's key"
                ),
            }
            .into());
        }
    } else {
        o.read.store = store.clone();
    }
    let mut r = restore::restore(&o, &shower(a.read.stats, a.read.json))?;
    if let Some(d) = r.delta.as_mut().filter(|d| !d.still_removing.is_empty()) {
        d.removal_pid = remove_in_background(&d.still_removing);
    }
    print_restore(&r, a.read.json);
    Ok(())
}

#[derive(clap::Args)]
pub struct RemoveSweptArgs {
    /// The `.pagevault-swept` directories to remove.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
}

/// Starts `pagevault remove-swept` on what a delta restore moved aside and had not yet
/// removed, at a low priority, in its own process group: the restore does not wait for
/// it. None when it cannot start: then it is removed here, before the restore returns.
fn remove_in_background(dirs: &[PathBuf]) -> Option<u32> {
    let args = std::iter::once("remove-swept".as_ref()).chain(dirs.iter().map(|d| d.as_os_str()));
    let started = crate::sys::spawn_detached(args, None);
    match started {
        Ok(pid) => Some(pid),
        Err(e) => {
            super::log::warn(
                &format!(
                    "cannot start the removal of what --delta moved aside ({e}); removing it now"
                ),
                serde_json::json!({}),
            );
            let never = std::sync::atomic::AtomicBool::new(false);
            if let Err(e) = crate::target::remove_swept(dirs, &never) {
                super::log::warn(&format!("{e:#}: remove it by hand"), serde_json::json!({}));
            }
            None
        }
    }
}

pub fn run_remove_swept(a: RemoveSweptArgs) -> Result<()> {
    crate::target::check_swept(&a.dirs)?;
    let _ = rustix::process::nice(10);
    crate::target::remove_swept(&a.dirs, &std::sync::atomic::AtomicBool::new(false))
}

pub fn print_restore(r: &RestoreReport, json: bool) {
    if super::printed_json(r, json) {
        return;
    }
    // A delta by WAL checks the frames it reads; those it steps over are verify's.
    let checked = match (&r.delta, &r.delta_wal) {
        (Some(d), Some(_)) => format!(
            "every frame read and every file checksum verified ({} of frames stepped over unread: verify checks them; {} frame(s) read in part, each page read checked by its frame's page checks)",
            crate::units::human(d.stored_bytes_not_read),
            d.frames_read_in_part
        ),
        _ => "every frame and file checksum verified".into(),
    };
    println!(
        "Processed {} pages for database '{}' in {} files, {checked}.",
        r.pages, r.database, r.files
    );
    println!(
        "RESTORE DATABASE successfully processed {} pages in {:.3} seconds ({:.3} MB/sec).",
        r.pages, r.seconds, r.mb_per_sec
    );
    for n in &r.postgres {
        println!("PostgreSQL: {n}.");
    }
    if let Some(d) = &r.delta {
        println!(
            "Delta: {} files kept, {} rewritten, {} created, {} removed ({} directories); {} compared, {} written.",
            d.kept,
            d.rewritten,
            d.created,
            d.removed,
            d.removed_dirs,
            crate::units::human(d.compared_bytes),
            crate::units::human(d.written_bytes)
        );
        if let Some(pid) = d.removal_pid {
            let dirs: Vec<String> = (d.still_removing.iter())
                .map(|p| format!("'{}'", p.display()))
                .collect();
            println!(
                "Delta: what was moved aside is still being removed, in the background (pid {pid}): {}.",
                dirs.join(", ")
            );
        }
        if let Some(w) = &r.delta_wal {
            println!(
                "Delta by WAL: pages changed from {} to {} ({} summarized segments) and in the copy's own WAL from {} to {} ({} segments); {} in place proven the set's, not written.",
                w.from_lsn,
                w.to_lsn,
                w.summaries,
                w.copy_wal_from,
                w.copy_wal_to,
                w.copy_segments,
                crate::units::human(d.proven_bytes)
            );
        }
    }
    let w = &r.writes;
    if w.direct_bytes + w.buffered_bytes > 0 {
        println!(
            "Writes: {} with O_DIRECT, {} through the page cache, {} writers ({}).",
            crate::units::human(w.direct_bytes),
            crate::units::human(w.buffered_bytes),
            w.depth,
            w.why
        );
    }
    if r.chain.len() > 1 {
        for l in &r.chain {
            println!(
                "Set {} ({}): {} frames read ({}), {} written, {} pages superseded.",
                l.set_id,
                l.backup_type,
                l.frames,
                crate::units::human(l.read_bytes),
                crate::units::human(l.written_bytes),
                l.skipped_pages
            );
        }
    }
    for w in &r.warnings {
        println!("Warning: {w}.");
    }
    r.waits.print();
    let parts: Vec<String> = r
        .phases
        .list()
        .iter()
        .map(|p| format!("{} {:.3} s", p.phase, p.seconds))
        .collect();
    println!("Where the time went: {}.", parts.join(", "));
    super::print_retries();
    if let Some(path) = &r.report {
        println!("Report written to {}", path.display());
    }
}

pub fn run_verify(a: VerifyArgs, store: &StoreOptions) -> Result<()> {
    // Several --repo: each verified in turn, as a stanza's are.
    if a.read.repo.len() > 1 {
        let list = (a.read.repo.iter().enumerate())
            .map(|(i, path)| {
                let mut one = a.clone();
                one.read.repo = vec![path.clone()];
                super::each::EachRepo {
                    label: (i + 1).to_string(),
                    name: None,
                    path: path.clone(),
                    run: Ok((one, Ok(store.clone()))),
                }
            })
            .collect();
        return run_verify_each(a.read.json, list);
    }
    let o = VerifyOptions {
        read: ReadOptions {
            store: store.clone(),
            ..a.read.options()
        },
    };
    let r = verify::verify(&o, &shower(a.read.stats, a.read.json))?;
    print_verify(&r, a.read.json);
    match invalid(&r) {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// Each repository of the stanza verified in turn, with its own key and endpoint: a
/// heading per repository, then its lines (`--json`: `repositories`).
pub fn run_verify_each(json: bool, list: Vec<super::each::EachRepo<VerifyArgs>>) -> Result<()> {
    let of = list.len();
    let out = super::each::each(
        list,
        json,
        |a, store| {
            let o = VerifyOptions {
                read: ReadOptions {
                    store,
                    ..a.read.options()
                },
            };
            verify::verify(&o, &shower(a.read.stats, a.read.json))
        },
        |_, r| print_verify(r, false),
        invalid,
    );
    if json {
        out.print_json("verify");
    }
    out.verdict("verify", of)
}

/// Why a verified set fails (None when it passes).
fn invalid(r: &VerifyReport) -> Option<String> {
    if r.valid {
        return None;
    }
    {
        let mut names: Vec<&str> = r.overwritten.iter().map(|w| w.stripe.as_str()).collect();
        if !r.records_overwritten.is_empty() {
            names.push("catalog records (above)");
        }
        let inside = damaged_inside(r);
        let mut why = vec![];
        if !names.is_empty() {
            why.push(format!("overwritten or deleted after the backup: {} (the versions the backup wrote are intact and were read; find who wrote the newer ones, and remove them with the store's own tools)", names.join(", ")));
        }
        let sums: Vec<String> = (r.summaries.iter())
            .flat_map(|s| s.damaged.iter().map(|d| super::shown(&d.segment)))
            .collect();
        if !sums.is_empty() {
            why.push(format!("the block summaries of archived WAL segment(s) {} are refused (above): the next differential or incremental reads every page; put back intact copies, or push those segments again", sums.join(", ")));
        }
        if !inside.is_empty() {
            why.push(format!("archived WAL segment(s) {} it needs to be consistent could not be decoded when pushed: a recovery from it stops there before the set is consistent; check the server's storage, and take a new full backup", inside.join(", ")));
        }
        Some(format!("set {}: {}", r.set_id, why.join("; ")))
    }
}

/// The damaged segments inside the WAL the verified set needs.
fn damaged_inside(r: &VerifyReport) -> Vec<String> {
    (r.damaged_wal.iter())
        .filter(|d| d.position == Position::Inside)
        .map(|d| super::shown(&d.segment))
        .collect()
}

pub fn print_verify(r: &VerifyReport, json: bool) {
    if super::printed_json(r, json) {
        return;
    }
    println!(
        "Checked {} frames of {} files ({} pages) in {:.3} seconds ({:.3} MB/sec): every frame CRC, content digest and file checksum matches.",
        r.frames, r.files, r.pages, r.seconds, r.mb_per_sec
    );
    for w in &r.overwritten {
        println!("Finding: {}.", w.message);
    }
    for w in &r.records_overwritten {
        println!("Finding: {w}.");
    }
    for st in &r.outside_repository {
        println!("Note: stripe '{st}' lies outside the repository: its catalog record names it there (a backup with --to, or a forged record).");
    }
    for d in &r.damaged_wal {
        let (word, what) = match d.position {
            Position::Inside => ("Finding", "the set needs it to be consistent: a recovery from the set stops there before it is consistent"),
            Position::After => ("Warning", "it lies past the set's stop: point-in-time recovery from the set stops there"),
            Position::Before => continue,
        };
        println!(
            "{word}: archived WAL segment {} could not be decoded when pushed ({}); {what}; check the server's storage, and take a new full backup.",
            super::shown(&d.segment),
            super::shown(&d.note)
        );
    }
    let mut summary_damage = false;
    if let Some(s) = &r.summaries {
        for d in &s.damaged {
            summary_damage = true;
            println!(
                "Finding: the block summary of archived WAL segment {} is refused: {}; the next differential or incremental reads every page instead; put back an intact copy, or push the segment again.",
                super::shown(&d.segment),
                super::shown(&d.error)
            );
        }
        println!(
            "Block summaries from the newest full set on: {} intact ({} made by older change rules), {} missing, {} refused.",
            s.checked,
            s.old_rules,
            s.missing,
            s.damaged.len()
        );
    }
    if r.stale_visibility_map {
        println!(
            "Warning: set {}: {}.",
            super::shown(&r.set_id),
            crate::repo::STALE_VM
        );
    }
    let damaged = !damaged_inside(r).is_empty();
    match (r.valid, damaged) {
        (true, _) => println!("The backup set on file 1 is valid."),
        (false, _) if summary_damage => println!("The backup set on file 1 reads intact, but block summaries of the repository are damaged."),
        (false, true) => println!("The backup set on file 1 reads intact, but the WAL it needs to be consistent is damaged in the archive."),
        (false, false) => println!("The backup set on file 1 reads intact at the versions its backup wrote, but its stripes' names now hold other data."),
    }
    if let Some(n) = r.repo_sets_checked {
        println!("All {n} sets of the repository are encrypted or signed with its key.");
    }
}
