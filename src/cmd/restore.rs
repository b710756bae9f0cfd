//! `pagevault restore` and `pagevault verify`.

use super::PrintWaits;
use super::{default_threads, print_json, set, Reporter};
use crate::engine::restore;
use crate::engine::stats::{Live, Progress};
use crate::format::manifest::{EntryKind, Manifest};
use crate::format::{Codec, ContentHash};
use crate::pg;
use crate::repo::{chain, walchain};
use crate::repo::{CatalogEntry, Repo};
use crate::report;
use crate::source::postgres;
use crate::target::{self, Target};
use crate::units::mb_per_sec;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Args)]
pub struct ReadArgs {
    /// A stripe of the set (a file path). Name every stripe, in any order.
    #[arg(long = "from", required_unless_present = "repo")]
    pub from: Vec<String>,
    /// Take the set (and the WAL) from this repository instead of --from.
    #[arg(long)]
    pub repo: Option<String>,
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

#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub read: ReadArgs,
    /// Directory to restore into; it must be empty or missing unless --replace.
    #[arg(long)]
    pub to: PathBuf,
    /// Delete what the target directory holds and restore over it.
    #[arg(long)]
    pub replace: bool,
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
    /// PostgreSQL: the timeline to recover along (recovery_target_timeline; default: the
    /// newest one the archive holds a history file for, as PostgreSQL picks it).
    #[arg(long, value_name = "TLI", value_parser = clap::value_parser!(u32).range(1..))]
    pub timeline: Option<u32>,
    /// PostgreSQL: check only that every WAL file recovery needs is in the archive, not
    /// that each is intact (by default each is read and checked before anything is written).
    #[arg(long)]
    pub no_verify_wal: bool,
    /// Give the restored files to this user (restoring as root for a server that runs as another).
    #[arg(long)]
    pub owner: Option<String>,
    /// PostgreSQL: restore tablespace OID into DIR (default: its original location). Repeatable.
    #[arg(long = "tablespace-map", value_name = "OID=DIR")]
    pub tablespace_map: Vec<String>,
    /// Write an HTML page with the timeline (throughput, latency, pool, waits, CPU).
    #[arg(long, value_name = "FILE.html", value_parser = crate::report::writable_path)]
    pub report: Option<PathBuf>,
}

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub read: ReadArgs,
}

const MARKER: &str = ".pagevault-restore-incomplete";

fn check_checksums(m: &Manifest, ids: &[(u32, u64)], got: &[Result<String, String>]) -> Result<()> {
    let by_id: HashMap<u32, &crate::format::manifest::FileEntry> =
        m.files.iter().map(|f| (f.id, f)).collect();
    for ((id, _), g) in ids.iter().zip(got) {
        let f = by_id[id];
        match g {
            Err(e) => bail!("file '{}' is incomplete in the set: {e}", f.path),
            Ok(c) if *c != f.checksum => bail!(
                "file '{}' does not match its manifest checksum (restored {}, expected {})",
                f.path,
                c,
                f.checksum
            ),
            Ok(_) => {}
        }
    }
    Ok(())
}

fn engine_params(a: &ReadArgs, set: &set::OpenSet) -> restore::Params {
    let threads = a
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(default_threads);
    restore::Params {
        transfer_size: set.manifest.transfer_size as usize,
        page_size: set.manifest.page_size as usize,
        block_size: set.manifest.block_size as usize,
        buffer_count: a
            .buffer_count
            .map(|b| b as usize)
            .unwrap_or(set.stripes.len() * 4 + threads * 2),
        threads,
        hash: ContentHash::of_version(set.manifest.format_version),
    }
}

fn regular_files(m: &Manifest) -> Vec<(u32, u64)> {
    m.files
        .iter()
        .filter(|f| f.kind == EntryKind::File)
        .map(|f| (f.id, f.size))
        .collect()
}

/// Whether a set's files are best created alongside its pipeline. A set stored without
/// compression leaves the CPU idle while its writes wait for the disk, and creating
/// files before them left the disk idle: 0.1-0.4 s less for such restores in bench/pg.sh
/// while creation was slow. With decompression the CPU is the limit, and creating files
/// alongside cost 0.15-0.5 s more, so those files are created first.
fn create_alongside(m: &Manifest) -> bool {
    m.codec == Codec::None.name()
}

/// Runs the restore pipeline into `target`, its files created alongside or first, and
/// marks the phases that took.
fn run_into(
    set: &set::OpenSet,
    ids: &[(u32, u64)],
    params: &restore::Params,
    target: &Target,
    progress: &Progress,
    phases: &mut super::Phases,
) -> Result<restore::Outcome> {
    if !create_alongside(&set.manifest) {
        target.files.create_first(params.threads)?;
        phases.mark("create files");
        let out = restore::run(&set.stripes, ids, params, Some(target), progress);
        phases.mark("read, check and write");
        return out;
    }
    phases.mark("create directories");
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let creator = s.spawn(|| target.files.create_all(&stop));
        let out = restore::run(&set.stripes, ids, params, Some(target), progress);
        if out.is_err() {
            stop.store(true, Relaxed);
        }
        let made = creator.join().expect("file creation panicked");
        let out = out?;
        made.map_err(|e| anyhow!(e))?;
        Ok(out)
    });
    phases.mark("create files, read, check and write");
    out
}

/// Writes a differential set over a restored full set: changed pages in place,
/// whole files where it stores them, new sizes, and files dropped since the base removed.
fn apply_diff(
    ds: &set::OpenSet,
    base: &Manifest,
    place: &dyn Fn(&str) -> PathBuf,
    read: &ReadArgs,
    stats: Option<u32>,
    json: bool,
    live: &Arc<Live>,
) -> Result<restore::Outcome> {
    let dm = &ds.manifest;
    let params = engine_params(read, ds);
    let files = target::lay_out(dm, place, true)?;
    let keep: std::collections::HashSet<&str> = dm.files.iter().map(|f| f.path.as_str()).collect();
    for f in base
        .files
        .iter()
        .filter(|f| f.kind == EntryKind::File && !keep.contains(f.path.as_str()))
    {
        let _ = fs::remove_file(place(&f.path));
    }
    let target = Target::new(files);
    let ids = regular_files(dm);
    let progress = Arc::new(Progress {
        live: live.clone(),
        ..Progress::default()
    });
    let reporter = Reporter::start(progress.clone(), stats, json, "restore diff");
    // The differential is one phase of the restore's report.
    let mut phases = super::Phases::start();
    let out = run_into(ds, &ids, &params, &target, &progress, &mut phases);
    reporter.finish();
    let out = out?;
    check_checksums(dm, &ids, &out.checksums)?;
    Ok(out)
}

/// The repository --repo names and its catalog (None with --from).
fn open_repo(a: &ReadArgs) -> Result<Option<(Repo, Vec<CatalogEntry>)>> {
    let Some(r) = &a.repo else {
        return Ok(None);
    };
    if !a.from.is_empty() {
        bail!("name either --from stripes or --repo, not both");
    }
    let repo = Repo::open(r, false)?;
    let catalog = repo.catalog()?;
    Ok(Some((repo, catalog)))
}

/// Says where the sets are listed when a named one is not found.
fn with_history_hint(e: anyhow::Error, repo: &Repo) -> anyhow::Error {
    anyhow!(
        "{e:#}; `pagevault history --repo {}` lists them",
        repo.describe()
    )
}

/// The stripes of a recorded set, as device specs.
fn stripes_of(repo: &Repo, e: &CatalogEntry) -> Vec<String> {
    e.stripes.iter().map(|s| repo.stripe_path(s)).collect()
}

/// Finds a broken or damaged log chain before anything is written: every WAL file
/// recovery will fetch after the set, on every timeline up to the target, must be in
/// the archive (and intact, unless --no-verify-wal). Returns what it found, for output.
fn check_wal_chain(
    repo: &Repo,
    entry: &CatalogEntry,
    extra: &std::collections::BTreeMap<String, serde_json::Value>,
    a: &RestoreArgs,
) -> Result<Option<WalCheck>> {
    let (Some(tli), Some(stop)) = (
        entry.timeline,
        entry.stop_lsn.as_deref().and_then(pg::parse_lsn),
    ) else {
        return Ok(None);
    };
    let seg_size = extra
        .get("wal_segment_size")
        .and_then(|v| v.as_u64())
        .unwrap_or(16 << 20);
    let end = match a.until_lsn.as_deref().and_then(pg::parse_lsn) {
        Some(l) => walchain::End::Lsn(l),
        None => walchain::End::Latest,
    };
    let from = walchain::From {
        set_id: &entry.set_id,
        tli,
        stop_lsn: stop,
        seg_size,
    };
    let chain = walchain::plan(repo, &from, end, a.timeline)?;
    let verified = match a.no_verify_wal {
        true => None,
        false => {
            // Objects are downloaded: more requests in flight than cores.
            let threads = match repo.store().local_path("wal") {
                Some(_) => default_threads(),
                None => 8,
            };
            Some(walchain::verify(repo, &chain, threads)?)
        }
    };
    Ok(Some(WalCheck { chain, verified }))
}

/// The log chain a restore checked.
struct WalCheck {
    chain: walchain::WalChain,
    /// How long reading and checking every file took (None: --no-verify-wal).
    verified: Option<std::time::Duration>,
}

impl WalCheck {
    fn note(&self) -> String {
        let how = match self.verified {
            Some(d) => format!(
                "all {} files read and checked in {:.3} s",
                self.chain.files.len(),
                d.as_secs_f64()
            ),
            None => format!(
                "{} files present, their content NOT checked (--no-verify-wal): archive-get checks \
                 each as recovery fetches it and stops recovery on a damaged one",
                self.chain.files.len()
            ),
        };
        format!(
            "recovery will replay from the archive {} up to timeline {}; {how}",
            self.chain.describe(),
            self.chain.target_tli
        )
    }

    fn json(&self) -> serde_json::Value {
        let mut j = self.chain.json();
        j["verified"] = json!(self.verified.is_some());
        j["verify_seconds"] = json!(self.verified.map(|d| d.as_secs_f64()));
        j
    }
}

pub fn run_restore(a: RestoreArgs) -> Result<()> {
    let sel = chain::Selector::parse(
        a.read.set.as_deref(),
        a.until.as_deref(),
        a.until_lsn.as_deref(),
    )?;
    let (chosen, diff) = match open_repo(&a.read)? {
        Some((repo, catalog)) => {
            let c = chain::select(&catalog, &sel).map_err(|e| with_history_hint(e, &repo))?;
            (Some((repo, c.full)), c.diff)
        }
        None => (None, None),
    };
    let from = match &chosen {
        Some((repo, full)) => stripes_of(repo, full),
        None => a.read.from.clone(),
    };
    let diff_set = match (&chosen, &diff) {
        (Some((repo, _)), Some(d)) => Some(set::open(&stripes_of(repo, d))?),
        _ => None,
    };
    let set = set::open(&from)?;
    let m = &set.manifest;
    if m.backup_type == "diff" {
        bail!("set {} is a differential: it holds only changed pages; restore it with --repo (and --set {}) so its base full set is restored first", m.set_id, m.set_id);
    }
    let is_pg = m.source.kind == "postgres";
    let mut wal_check = None;
    if !is_pg
        && (a.until.is_some()
            || a.timeline.is_some()
            || a.until_lsn.is_some()
            || a.until_xid.is_some()
            || a.until_name.is_some())
    {
        bail!(
            "recovery targets (--until*, --timeline) apply to PostgreSQL sets only; this set is of a {} source",
            m.source.kind
        );
    }
    if is_pg {
        postgres::check_not_running(&a.to)?;
        if let Some((repo, entry)) = &chosen {
            wal_check = match (&diff, &diff_set) {
                (Some(d), Some(ds)) => check_wal_chain(repo, d, &ds.manifest.extra, &a)?,
                _ => check_wal_chain(repo, entry, &m.extra, &a)?,
            };
        }
    }
    let owner = a.owner.as_deref().map(target::lookup_user).transpose()?;
    let spaces = if is_pg {
        tablespace_dirs(&m.extra, &a.tablespace_map)?
    } else {
        HashMap::new()
    };
    let place = |rel: &str| place(&a.to, rel, &spaces);
    let mut phases = super::Phases::start();
    let progress = Arc::new(Progress::default());
    // The timeline spans what the summary's seconds count.
    let sampler = a
        .report
        .as_ref()
        .map(|_| report::Sampler::start(progress.live.clone()));
    target::prepare(&a.to, a.replace)?;
    let marker = a.to.join(MARKER);
    File::create(&marker)
        .with_context(|| format!("cannot write in target '{}'", a.to.display()))?;

    phases.mark("prepare target");
    let params = engine_params(&a.read, &set);
    let files = target::lay_out(m, &place, false)?;
    let target = Target::new(files);
    let ids = regular_files(m);
    let reporter = Reporter::start(progress.clone(), a.read.stats, a.read.json, "restore");
    let out = run_into(&set, &ids, &params, &target, &progress, &mut phases);
    reporter.finish();
    let out = out.with_context(|| {
        format!(
            "restore failed; '{}' is incomplete (it holds {MARKER})",
            a.to.display()
        )
    })?;
    drop(target);
    check_checksums(m, &ids, &out.checksums).with_context(|| {
        format!(
            "restore failed; '{}' is incomplete (it holds {MARKER})",
            a.to.display()
        )
    })?;
    let mut out = out;
    if let Some(ds) = &diff_set {
        let d = apply_diff(
            ds,
            m,
            &place,
            &a.read,
            a.read.stats,
            a.read.json,
            &progress.live,
        )
        .with_context(|| {
            format!(
                "applying differential {} failed; '{}' is incomplete (it holds {MARKER})",
                ds.manifest.set_id,
                a.to.display()
            )
        })?;
        out.raw_bytes += d.raw_bytes;
        out.stored_bytes += d.stored_bytes;
        out.frames += d.frames;
        phases.mark("apply differential");
    }
    // Facts of the newest set applied: its backup_label starts recovery.
    let last = diff_set.as_ref().map(|d| &d.manifest).unwrap_or(m);

    target::finish_entries(m, &place)?;
    phases.mark("links, modes, times");
    // Each tablespace is linked from pg_tblspc as PostgreSQL expects.
    for (oid, dir) in &spaces {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        std::os::unix::fs::symlink(dir, a.to.join("pg_tblspc").join(oid))
            .with_context(|| format!("cannot link tablespace {oid} to '{}'", dir.display()))?;
        if let Some((uid, gid)) = owner {
            target::chown_tree(dir, uid, gid)?;
        }
        target::sync_fs(dir);
    }
    // One syncfs makes every restored file durable before we say so.
    target::sync_fs(&a.to);
    phases.mark("sync to disk");
    let mut notes = vec![];
    if is_pg {
        let rec = postgres::Recovery {
            restore_command: chosen.as_ref().map(|(repo, _)| {
                let exe = std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "pagevault".into());
                format!(
                    "{exe} archive-get %f \"%p\" --repo {}{}",
                    repo.spec_for_command(),
                    crate::device::object::endpoint_option()
                )
            }),
            target: a
                .until
                .clone()
                .map(|t| ("time", t))
                .or(a.until_lsn.clone().map(|l| ("lsn", l)))
                .or(a.until_xid.clone().map(|x| ("xid", x)))
                .or(a.until_name.clone().map(|n| ("name", n))),
            timeline: a.timeline,
        };
        notes = postgres::finish_restore(&a.to, &last.extra, &rec)?;
        if let Some(w) = &wal_check {
            notes.push(w.note());
        }
        if let Some(d) = &diff {
            notes.push(format!(
                "differential {} applied over full {}",
                d.set_id, m.set_id
            ));
        }
    }
    if let Some((uid, gid)) = owner {
        target::chown_tree(&a.to, uid, gid)?;
    }
    fs::remove_file(&marker)?;
    let series = sampler.map(report::Sampler::finish);
    phases.mark("recovery settings, owner");
    let secs = phases.total();
    let rate = mb_per_sec(out.raw_bytes, secs);
    let mut summary = json!({
        "command": "restore",
        "set_id": m.set_id,
        "target": a.to,
        "pages": m.totals.pages,
        "files": ids.len(),
        "raw_bytes": out.raw_bytes,
        "stored_bytes": out.stored_bytes,
        "frames": out.frames,
        "seconds": secs,
        "mb_per_sec": rate,
        "pool_bytes": out.pool_bytes,
        "set": chosen.as_ref().map(|(_, c)| c.set_id.clone()),
        "postgres": notes,
        "waits": out.waits,
        "phases": phases.json(),
        "object_store": super::retries_json(),
        "wal": wal_check.as_ref().map(WalCheck::json),
    });
    if let (Some(path), Some(series)) = (&a.report, series) {
        let mut read_names: Vec<String> = set.stripes.iter().map(|s| s.name.clone()).collect();
        for (i, d) in diff_set.iter().flat_map(|d| &d.stripes).enumerate() {
            match read_names.get_mut(i) {
                Some(n) => *n = format!("{n}, then {}", d.name),
                None => read_names.push(d.name.clone()),
            }
        }
        let r = report::Report {
            command: "restore",
            config: json!({
                "from": read_names,
                "target": a.to,
                "buffer_count": params.buffer_count,
                "transfer_size": params.transfer_size,
                "block_size": params.block_size,
                "threads": params.threads,
                "codec": m.codec,
            }),
            summary: &summary,
            series,
            read_names,
            write_names: vec![format!("target {}", a.to.display())],
        };
        report::write(path, &r)?;
        summary["report"] = json!(path);
    }
    if a.read.json {
        print_json(&summary);
    } else {
        println!(
            "Processed {} pages for database '{}' in {} files, every frame and file checksum verified.",
            m.totals.pages,
            m.source.database,
            ids.len()
        );
        println!("RESTORE DATABASE successfully processed {} pages in {secs:.3} seconds ({rate:.3} MB/sec).", m.totals.pages);
        for n in &notes {
            println!("PostgreSQL: {n}.");
        }
        out.waits.print();
        phases.print();
        super::print_retries();
        if let Some(path) = &a.report {
            println!("Report written to {}", path.display());
        }
    }
    Ok(())
}

pub fn run_verify(a: VerifyArgs) -> Result<()> {
    let from = match open_repo(&a.read)? {
        Some((repo, catalog)) => {
            let e = match &a.read.set {
                Some(id) => chain::find(&catalog, id),
                None => chain::newest(&catalog),
            };
            stripes_of(&repo, e.map_err(|e| with_history_hint(e, &repo))?)
        }
        None => a.read.from.clone(),
    };
    let set = set::open(&from)?;
    let m = &set.manifest;
    let params = engine_params(&a.read, &set);
    let ids = regular_files(m);
    let progress = Arc::new(Progress::default());
    let reporter = Reporter::start(progress.clone(), a.read.stats, a.read.json, "verify");
    let out = restore::run(&set.stripes, &ids, &params, None, &progress);
    reporter.finish();
    let out = out.context("the backup set is damaged")?;
    check_checksums(m, &ids, &out.checksums).context("the backup set is damaged")?;
    let secs = out.wall.as_secs_f64();
    if a.read.json {
        print_json(&json!({
            "command": "verify",
            "valid": true,
            "set_id": m.set_id,
            "damaged_flag": m.damaged,
            "files": ids.len(),
            "frames": out.frames,
            "raw_bytes": out.raw_bytes,
            "stored_bytes": out.stored_bytes,
            "seconds": secs,
            "mb_per_sec": mb_per_sec(out.raw_bytes, secs),
            "waits": out.waits,
            "object_store": super::retries_json(),
        "object_store": super::retries_json(),
        }));
    } else {
        println!(
            "Checked {} frames of {} files ({} pages) in {secs:.3} seconds ({:.3} MB/sec): every frame CRC, content digest and file checksum matches.",
            out.frames,
            ids.len(),
            m.totals.pages,
            mb_per_sec(out.raw_bytes, secs)
        );
        println!("The backup set on file 1 is valid.");
    }
    Ok(())
}

/// Where each tablespace of a PostgreSQL set goes: OID -> directory, from the set's
/// tablespace_map unless relocated. Each must be empty or missing: nothing is overwritten.
fn tablespace_dirs(
    extra: &std::collections::BTreeMap<String, serde_json::Value>,
    overrides: &[String],
) -> Result<HashMap<String, PathBuf>> {
    let mut dirs: HashMap<String, PathBuf> = HashMap::new();
    for line in extra
        .get("tablespace_map")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .lines()
    {
        if let Some((oid, path)) = line.split_once(' ') {
            dirs.insert(oid.to_string(), PathBuf::from(path));
        }
    }
    for o in overrides {
        let Some((oid, dir)) = o.split_once('=') else {
            bail!("--tablespace-map '{o}': write OID=DIR")
        };
        if !dirs.contains_key(oid) {
            let known: Vec<&String> = dirs.keys().collect();
            bail!("--tablespace-map: the set has no tablespace {oid} (it has {known:?})");
        }
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            bail!(
                "--tablespace-map {oid}: '{}' must be an absolute path",
                dir.display()
            );
        }
        dirs.insert(oid.to_string(), dir);
    }
    for (oid, dir) in &dirs {
        if fs::read_dir(dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
        {
            bail!("tablespace {oid} would be restored into '{}', which is not empty: relocate it with --tablespace-map {oid}=DIR", dir.display());
        }
    }
    Ok(dirs)
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
