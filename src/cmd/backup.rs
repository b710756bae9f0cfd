//! `pagevault backup`.

use super::PrintWaits;
use super::{default_threads, print_json, Reporter};
use crate::device;
use crate::engine::backup::{self, Params, ReadFile};
use crate::engine::codec::CodecSpec;
use crate::engine::stats::Progress;
use crate::format::manifest::{EntryKind, FileEntry, Manifest, StripeInfo, Totals};
use crate::format::media::{trailer, MediaHeader};
use crate::format::FORMAT_VERSION;
use crate::repo::{CatalogEntry, Repo};
use crate::report;
use crate::source::{self, SourceFile};
use crate::units::{self, human, mb_per_sec};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn transfer_size(s: &str) -> Result<u64, String> {
    let v = units::parse_in_range(s, 64 << 10, 16 << 20, "max transfer size", false)?;
    if v % (64 << 10) != 0 {
        return Err(format!(
            "max transfer size {v} must be a multiple of 64 KiB (64K..16M)"
        ));
    }
    Ok(v)
}
fn block_size(s: &str) -> Result<u64, String> {
    units::parse_in_range(s, 512, 1 << 20, "block size", true)
}
fn page_size(s: &str) -> Result<u64, String> {
    units::parse_in_range(s, 512, 1 << 20, "page size", true)
}

/// What a backup that fails before its stripes are committed leaves: nothing.
const STOPPED: &str =
    "backup stopped: its partial stripes were removed (uploads aborted) and no set was recorded";
#[derive(Args, Clone)]
pub struct BackupArgs {
    /// What to back up: files:PATH (a file or directory tree), sqlite:PATH (a live database) or postgres://USER@HOST:PORT/DB?pgdata=DIR (a running cluster).
    #[arg(long)]
    pub source: String,
    /// Destination: a file path (one stripe) or NUL. Repeat to stripe the set over several devices.
    #[arg(long = "to", required_unless_present = "repo")]
    pub to: Vec<String>,
    /// Repository (a directory) that holds the set's stripes and records it in its catalog.
    #[arg(long)]
    pub repo: Option<String>,
    /// Stripes to write inside the repository (default 1, or 0 when --to names devices).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub stripes: Option<u32>,
    /// full (the whole source) or diff (PostgreSQL: pages changed since the newest full
    /// set of --repo). Log backups are taken by archive-push.
    #[arg(long = "type", default_value = "full", value_parser = ["full", "diff", "log"])]
    pub backup_type: String,
    /// PostgreSQL data directory, when the URL has no ?pgdata= and the server cannot say.
    #[arg(long)]
    pub pgdata: Option<PathBuf>,
    /// On a page checksum failure, finish the backup and mark the set damaged.
    #[arg(long)]
    pub continue_after_error: bool,
    /// PostgreSQL: seconds to wait at pg_backup_stop for the WAL to be archived.
    #[arg(long, default_value_t = 300)]
    pub archive_timeout: u64,
    /// Compression: none, lz4, zstd or zstd:LEVEL (1..22).
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Buffers in the pool (BUFFERCOUNT). Default: from devices and volumes, as SQL Server does.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=65536))]
    pub buffer_count: Option<u32>,
    /// Size of one read or write (MAXTRANSFERSIZE): 64K..16M, a multiple of 64K.
    #[arg(long, default_value = "1M", value_parser = transfer_size)]
    pub max_transfer_size: u64,
    /// Alignment and padding of device writes (BLOCKSIZE): a power of two, 512..1M.
    #[arg(long, default_value = "4K", value_parser = block_size)]
    pub block_size: u64,
    /// Readers per volume (each keeps --read-depth reads in flight).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub readers: u32,
    /// Reads in flight per reader.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub read_depth: u32,
    /// Compression threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Print "N percent processed." every N percent (default 10 when not on a terminal).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub stats: Option<u32>,
    /// Print the buffer configuration before the backup.
    #[arg(long)]
    pub show_config: bool,
    /// Never a differential base, changes no chain (NUL backups always are).
    #[arg(long)]
    pub copy_only: bool,
    /// A name for the set, shown by `header`.
    #[arg(long)]
    pub name: Option<String>,
    /// Page size of a files: source.
    #[arg(long, default_value = "8K", value_parser = page_size)]
    pub page_size: u64,
    /// Adaptive readers: raise the reads in flight (up to 4x --readers x --read-depth)
    /// while reads are small or slow, as with many small files.
    #[arg(long, value_enum, default_value = "on")]
    pub adaptive_readers: super::Switch,
    /// Read with O_DIRECT where the filesystem allows (bypasses the page cache).
    #[arg(long, value_enum, default_value = "off")]
    pub direct_io: super::Switch,
    /// Where the SQLite source puts its snapshot copy (default: beside the database).
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// One "Processed" line per file instead of per volume.
    #[arg(long)]
    pub verbose: bool,
    /// Print one JSON document with the results instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write an HTML page with the timeline (throughput, latency, pool, waits, CPU).
    #[arg(long, value_name = "FILE.html", value_parser = crate::report::writable_path)]
    pub report: Option<PathBuf>,
}

impl BackupArgs {
    /// The command line's defaults, for commands that start backups themselves.
    pub fn with_defaults(source: &str, to: &[String]) -> BackupArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            a: BackupArgs,
        }
        let mut argv = vec!["backup".to_string(), "--source".into(), source.into()];
        for d in to {
            argv.extend(["--to".into(), d.clone()]);
        }
        <Wrap as clap::Parser>::parse_from(argv).a
    }
}

pub fn run(a: BackupArgs) -> Result<()> {
    let summary = backup(&a)?;
    if a.json {
        print_json(&summary);
    }
    Ok(())
}

/// Volumes seen so far: device id -> reader index, and a name for each.
#[derive(Default)]
pub(super) struct Volumes {
    index: HashMap<u64, usize>,
    pub names: Vec<PathBuf>,
}

impl Volumes {
    /// The reader index of `e`'s volume; a volume is named by the deepest directory
    /// holding all of its files (the database file itself for SQLite).
    fn of(&mut self, e: &SourceFile, kind: &str) -> usize {
        let dir = if kind == "sqlite" {
            PathBuf::from(&e.rel_path)
        } else {
            e.abs_path.parent().unwrap_or(Path::new("/")).to_path_buf()
        };
        match self.index.get(&e.dev) {
            Some(&v) => {
                let name = &mut self.names[v];
                while !dir.starts_with(&*name) {
                    if !name.pop() {
                        break;
                    }
                }
                v
            }
            None => {
                self.names.push(dir);
                self.index.insert(e.dev, self.names.len() - 1);
                self.names.len() - 1
            }
        }
    }
}

/// The regular files of `entries` as engine input; ids are entry indexes plus `first_id`.
pub(super) fn plan_of(
    entries: &[SourceFile],
    first_id: usize,
    vols: &mut Volumes,
    kind: &str,
) -> (Vec<ReadFile>, Vec<usize>) {
    let mut plan = vec![];
    let mut ids = vec![];
    for (i, e) in entries.iter().enumerate() {
        if e.kind == EntryKind::File {
            let volume = vols.of(e, kind);
            plan.push(ReadFile {
                id: (first_id + i) as u32,
                path: e.abs_path.clone(),
                size: e.size,
                volume,
                missing_ok: e.missing_ok,
            });
            ids.push(first_id + i);
        }
    }
    (plan, ids)
}

/// The base of a differential: the newest full set of the repository that may be
/// one (not copy-only, not damaged, of a PostgreSQL source), and the paths it holds.
fn diff_base(
    repo: &Repo,
    source: &str,
) -> Result<(CatalogEntry, crate::source::postgres::DiffBase)> {
    if !source.starts_with("postgres") {
        bail!("differential backups are for PostgreSQL sources (pages carry LSNs); take a full backup");
    }
    let catalog = repo.catalog()?;
    let Some(base) = catalog.iter().rev().find(|c| {
        c.backup_type == "full" && !c.copy_only && !c.damaged && c.source_kind == "postgres"
    }) else {
        bail!(
            "no usable base for a differential in '{}': it needs a full backup that is not copy-only or damaged; take one with --type full",
            repo.describe()
        );
    };
    let start_lsn = base
        .start_lsn
        .as_deref()
        .and_then(crate::pg::parse_lsn)
        .ok_or_else(|| anyhow::anyhow!("base set {} records no start LSN", base.set_id))?;
    let first = repo.stripe_path(&base.stripes[0]);
    let manifest = super::set::open_any(&first)
        .with_context(|| format!("cannot read the base set {}", base.set_id))?;
    let files = manifest.files.into_iter().map(|f| f.path).collect();
    Ok((
        base.clone(),
        crate::source::postgres::DiffBase { start_lsn, files },
    ))
}

/// Runs a backup and returns its JSON summary (printed as text unless --json).
pub fn backup(a: &BackupArgs) -> Result<serde_json::Value> {
    let set_id: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    let r = backup_set(a, set_id);
    if let (Err(_), Some(repo)) = (&r, &a.repo) {
        // Failed stripes are removed by their devices; drop the then empty set folder.
        let _ = std::fs::remove_dir(Path::new(repo).join("sets").join(hex::encode(set_id)));
    }
    r
}

fn backup_set(a: &BackupArgs, set_id: [u8; 16]) -> Result<serde_json::Value> {
    let codec = CodecSpec::parse(&a.compress)?;
    if a.backup_type == "log" {
        bail!("log backups are WAL archiving: set archive_command = 'pagevault archive-push %p --repo DIR'");
    }
    let repo = a.repo.as_deref().map(|r| Repo::open(r, true)).transpose()?;
    let base = match (a.backup_type.as_str(), &repo) {
        ("diff", None) => {
            bail!("a differential backup needs --repo: its base is the newest full set there")
        }
        ("diff", Some(repo)) => Some(diff_base(repo, &a.source)?),
        _ => None,
    };
    let set_hex = hex::encode(set_id);
    let mut specs: Vec<String> = vec![];
    if let Some(repo) = &repo {
        let n = a.stripes.unwrap_or(if a.to.is_empty() { 1 } else { 0 });
        for i in 1..=n {
            specs.push(repo.stripe_spec(&set_hex, i as usize)?);
        }
    }
    specs.extend(a.to.iter().cloned());
    if specs.is_empty() {
        bail!("no device: name --to DEVICE or --repo with --stripes 1 or more");
    }
    let devices = specs
        .iter()
        .map(|d| device::parse(d))
        .collect::<Result<Vec<_>>>()?;
    let discard = devices.iter().filter(|d| d.is_discard()).count();
    if discard > 0 && discard < devices.len() {
        bail!("NUL cannot be striped with real devices: back up to NUL alone, or to files alone");
    }
    let discard = discard > 0;
    let copy_only = a.copy_only || discard;
    let mut src = source::parse(
        &a.source,
        &source::Options {
            page_size: a.page_size as u32,
            spool: a.spool.clone(),
            pgdata: a.pgdata.clone(),
            label: a
                .name
                .clone()
                .unwrap_or_else(|| format!("pagevault {set_hex}")),
            continue_after_error: a.continue_after_error,
            archive_timeout: a.archive_timeout,
            base: base.as_ref().map(|(_, b)| b.clone()),
        },
    )?;
    // The clock starts before the source is prepared: a snapshot copy or a
    // checkpoint is part of what the user waits for.
    let started = chrono::Utc::now();
    let progress = Arc::new(Progress::default());
    // The timeline spans what the summary's seconds count.
    let sampler = a
        .report
        .as_ref()
        .map(|_| report::Sampler::start(progress.live.clone()));
    let mut entries = src.prepare()?;
    let info = src.info();
    if let Some((b, _)) = &base {
        if b.system_identifier.as_ref() != info.identity.get("system_identifier") {
            let _ = src.finish(false);
            bail!(
                "the base set {} is of another cluster than {}: take a full backup first",
                b.set_id,
                info.location
            );
        }
    }
    if let (Some(repo), Some(sysid)) = (&repo, info.identity.get("system_identifier")) {
        if let Some(other) = repo
            .catalog()?
            .iter()
            .find(|c| c.system_identifier.as_ref().is_some_and(|s| s != sysid))
        {
            let _ = src.finish(false);
            bail!(
                "repository '{}' holds sets of cluster {} (set {}), not of cluster {sysid}: use one repository per cluster",
                repo.describe(),
                other.system_identifier.as_deref().unwrap_or("?"),
                other.set_id
            );
        }
    }
    let page_size = src.page_size() as u64;
    let mut vols = Volumes::default();
    let (plan, mut plan_ids) = plan_of(&entries, 0, &mut vols, &info.kind);
    let volumes = vols.names.len().max(1);
    let threads = a
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(default_threads);
    let stripes = devices.len();
    let readers_total = volumes * (a.readers * a.read_depth) as usize;
    // SQL Server: devices x (suggested I/O depth 3 + 1) + 2 x volumes; never fewer than
    // the pipeline needs to keep every reader, compressor and writer busy.
    let sql_default = stripes * 4 + 2 * volumes;
    let pipeline_min = readers_total + 2 * threads + 2 * stripes;
    let buffer_count = a
        .buffer_count
        .map(|b| b as usize)
        .unwrap_or(sql_default.max(pipeline_min));
    let params = Params {
        buffer_count,
        transfer_size: a.max_transfer_size as usize,
        block_size: a.block_size as usize,
        readers_per_volume: a.readers as usize,
        read_depth: a.read_depth as usize,
        threads,
        codec,
        direct_io: a.direct_io.on(),
        page_size: page_size as usize,
        adaptive: a.adaptive_readers.on(),
    };
    let pool_bytes = (buffer_count * params.buffer_size()) as u64;
    let hint = device::CreateHint {
        expected_bytes: plan.iter().map(|f| f.size).sum::<u64>() / stripes as u64,
        transfer_size: a.max_transfer_size as usize,
    };
    let device_bytes: u64 = devices.iter().map(|d| d.write_memory(&hint)).sum();
    let config = json!({
        "buffer_count": buffer_count,
        "max_transfer_size": a.max_transfer_size,
        "buffer_bytes": params.buffer_size(),
        "total_buffer_memory": pool_bytes,
        "device_buffer_memory": device_bytes,
        "compression_scratch_buffers": threads,
        "volumes": volumes,
        "readers_per_volume": a.readers,
        "read_depth": a.read_depth,
        "devices": devices.iter().map(|d| d.describe()).collect::<Vec<_>>(),
        "block_size": a.block_size,
        "codec": codec.describe(),
        "threads": threads,
        "direct_io": params.direct_io,
        "page_size": page_size,
    });
    if a.show_config && !a.json {
        println!("Buffer configuration:");
        println!("  BufferCount:           {buffer_count} (default: {stripes} devices x 4 + 2 x {volumes} volumes = {sql_default}, pipeline needs {pipeline_min})");
        println!("  MaxTransferSize:       {}", human(a.max_transfer_size));
        println!("  Total buffer memory:   {} ({} buffers of {}, plus {threads} compression scratch buffers)", human(pool_bytes), buffer_count, human(params.buffer_size() as u64));
        if device_bytes > 0 {
            println!(
                "  Upload buffers:        {} (object-store parts in flight, all stripes)",
                human(device_bytes)
            );
        }
        println!("  Volumes:               {volumes}, readers per volume {}, reads in flight per reader {}", a.readers, a.read_depth);
        println!(
            "  Devices:               {}",
            devices
                .iter()
                .map(|d| d.describe())
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!("  BlockSize:             {}", human(a.block_size));
        println!(
            "  Codec:                 {} on {threads} threads",
            codec.describe()
        );
        println!(
            "  Direct I/O:            {}",
            if params.direct_io { "on" } else { "off" }
        );
    }

    // From the first stripe on, a signal ends the backup through its failure path.
    let _signals = crate::interrupt::catch();
    let mut sinks = vec![];
    for d in &devices {
        match d.create(&hint) {
            Ok(s) => sinks.push(s),
            Err(e) => {
                sinks
                    .into_iter()
                    .for_each(|s: Box<dyn device::StripeSink>| s.abort());
                let _ = src.finish(false);
                return Err(e);
            }
        }
    }
    let headers: Vec<Vec<u8>> = (0..stripes)
        .map(|i| {
            MediaHeader {
                version: FORMAT_VERSION,
                block_size: a.block_size as u32,
                set_id,
                stripe_index: i as u32,
                stripe_count: stripes as u32,
                codec: codec.codec,
                page_size: page_size as u32,
                transfer_size: a.max_transfer_size as u32,
                created_unix: started.timestamp() as u64,
            }
            .encode()
        })
        .collect();

    let reporter = Reporter::start(progress.clone(), a.stats, a.json, "backup");
    let filter = src.filter(&entries);
    let run = backup::run(
        &plan,
        volumes,
        sinks,
        headers,
        &params,
        filter.as_deref(),
        &progress,
    );
    let mut out = match run {
        Ok(o) => o,
        Err(e) => {
            reporter.finish();
            let _ = src.finish(false);
            return Err(e.context(STOPPED));
        }
    };
    let problems = filter.map(|f| f.problems()).unwrap_or_default();
    let fin = match src.finish(true) {
        Ok(f) => f,
        Err(e) => {
            reporter.finish();
            out.stripes.into_iter().for_each(|s| s.sink.abort());
            return Err(e.context(STOPPED));
        }
    };
    if !fin.late.is_empty() {
        // Second pass over the same stripes: files that exist only now (the WAL).
        let (plan2, ids2) = plan_of(&fin.late, entries.len(), &mut vols, &info.kind);
        let (sinks, prior): (Vec<_>, Vec<_>) = out
            .stripes
            .into_iter()
            .map(|s| (s.sink, (s.frames, s.body_end)))
            .unzip();
        let more = backup::run(
            &plan2,
            vols.names.len(),
            sinks,
            vec![vec![]; stripes],
            &params,
            None,
            &progress,
        );
        let more = match more {
            Ok(m) => m,
            Err(e) => {
                reporter.finish();
                return Err(e
                    .context("copying the WAL written during the backup failed")
                    .context(STOPPED));
            }
        };
        out.stripes = more
            .stripes
            .into_iter()
            .zip(prior)
            .map(|(mut s, (f, b))| {
                s.frames += f;
                s.body_end += b;
                s
            })
            .collect();
        out.files.extend(more.files);
        out.raw_bytes += more.raw_bytes;
        out.stored_bytes += more.stored_bytes;
        out.zero_frames += more.zero_frames;
        out.wall += more.wall;
        plan_ids.extend(ids2);
        entries.extend(fin.late);
    }
    reporter.finish();
    let extra = fin.extra;
    let finished = chrono::Utc::now();
    let vol_names = vols.names.clone();
    let volumes = vol_names.len().max(1);

    let mut files: Vec<FileEntry> = vec![];
    let mut result_of: HashMap<usize, &backup::FileResult> = HashMap::new();
    for (k, &i) in plan_ids.iter().enumerate() {
        result_of.insert(i, &out.files[k]);
    }
    let mut warnings = vec![];
    let mut pages = 0u64;
    let mut vol_pages = vec![0u64; volumes];
    let mut file_lines = vec![];
    for (i, e) in entries.iter().enumerate() {
        let mut checksum = String::new();
        if let Some(r) = result_of.get(&i) {
            if r.vanished {
                if info.kind != "postgres" {
                    warnings.push(format!(
                        "'{}' vanished during the backup and is not in the set",
                        e.rel_path
                    ));
                }
                continue;
            }
            if r.shrank && info.kind != "postgres" {
                warnings.push(format!(
                    "'{}' shrank while it was read; its end is stored as zeros",
                    e.rel_path
                ));
            }
            checksum = r.checksum.clone();
        }
        let p = e.size.div_ceil(page_size);
        pages += p;
        if e.kind == EntryKind::File {
            vol_pages[vols.index[&e.dev]] += p;
            file_lines.push((e.rel_path.clone(), p));
        }
        files.push(FileEntry {
            id: i as u32,
            path: e.rel_path.clone(),
            kind: e.kind,
            size: e.size,
            mode: e.mode,
            mtime: e.mtime,
            pages: p,
            checksum,
            link_target: e.link_target.clone(),
        });
    }
    warnings.extend(problems.iter().cloned());

    let seconds = out.wall.as_secs_f64();
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        set_id: set_hex.clone(),
        name: a.name.clone(),
        backup_type: a.backup_type.clone(),
        copy_only,
        damaged: !problems.is_empty(),
        source: info.clone(),
        codec: codec.describe(),
        block_size: a.block_size as u32,
        transfer_size: a.max_transfer_size as u32,
        page_size: page_size as u32,
        started: started.to_rfc3339(),
        finished: finished.to_rfc3339(),
        seconds,
        stripes: out
            .stripes
            .iter()
            .zip(&devices)
            .enumerate()
            .map(|(i, (s, d))| StripeInfo {
                index: i as u32,
                device: d.describe(),
                frames: s.frames,
                body_end: s.body_end,
            })
            .collect(),
        totals: Totals {
            files: files.iter().filter(|f| f.kind == EntryKind::File).count() as u64,
            raw_bytes: out.raw_bytes,
            stored_bytes: out.stored_bytes,
            pages,
            frames: out.stripes.iter().map(|s| s.frames).sum(),
        },
        files,
        extra,
    };
    let mbytes = manifest.to_bytes();
    let mut stripes_out = vec![];
    let mut failed = None;
    for s in out.stripes {
        if failed.is_none() {
            failed = crate::interrupt::received().map(crate::interrupt::error);
        }
        if failed.is_some() {
            s.sink.abort();
            continue;
        }
        let mut sink = s.sink;
        let t = trailer(&mbytes, s.body_end, s.frames, a.block_size);
        let r = sink
            .write_all(&t)
            .map_err(anyhow::Error::from)
            .and_then(|_| sink.commit());
        match r {
            Ok(()) => {
                stripes_out.push(json!({"frames": s.frames, "bytes": s.body_end + t.len() as u64}))
            }
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        // Stripes already committed are removed: no part of the set stays behind.
        for d in devices.iter().take(stripes_out.len()) {
            if let Err(r) = d.remove() {
                eprintln!("Warning: {r:#}");
            }
        }
        return Err(e.context("the backup set was not completed"));
    }
    // The catalog record is written last: a set is in the history only once durable.
    if let (Some(repo), false) = (&repo, discard) {
        let fact = |k: &str| {
            manifest
                .extra
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        repo.record(&CatalogEntry {
            set_id: set_hex.clone(),
            name: a.name.clone(),
            backup_type: manifest.backup_type.clone(),
            copy_only,
            damaged: manifest.damaged,
            base_set: base.as_ref().map(|(e, _)| e.set_id.clone()),
            source_kind: info.kind.clone(),
            database: info.database.clone(),
            system_identifier: info.identity.get("system_identifier").cloned(),
            timeline: manifest
                .extra
                .get("timeline")
                .and_then(|v| v.as_u64())
                .map(|t| t as u32),
            start_lsn: fact("start_lsn"),
            stop_lsn: fact("stop_lsn"),
            start_wal: fact("start_wal"),
            stop_wal: fact("stop_wal"),
            started: manifest.started.clone(),
            finished: manifest.finished.clone(),
            seconds,
            raw_bytes: out.raw_bytes,
            stored_bytes: out.stored_bytes,
            codec: codec.describe(),
            stripes: specs.iter().map(|p| repo.relative(p)).collect(),
        })?;
    }
    let series = sampler.map(report::Sampler::finish);
    // What the user waited for: the pipeline plus making every stripe durable.
    let seconds = (chrono::Utc::now() - started)
        .num_microseconds()
        .unwrap_or(0) as f64
        / 1e6;
    let rate = mb_per_sec(out.raw_bytes, seconds);
    if !a.json {
        for w in &warnings {
            println!("Warning: {w}");
        }
        if a.verbose {
            for (f, p) in &file_lines {
                println!(
                    "Processed {p} pages for database '{}', file '{f}' on file 1.",
                    info.database
                );
            }
        } else {
            for (v, name) in vol_names.iter().enumerate() {
                println!(
                    "Processed {} pages for database '{}', file '{}' on file 1.",
                    vol_pages[v],
                    info.database,
                    name.display()
                );
            }
        }
        println!("BACKUP DATABASE successfully processed {pages} pages in {seconds:.3} seconds ({rate:.3} MB/sec).");
        if codec.codec != crate::format::Codec::None || out.zero_frames > 0 {
            println!(
                "Stored {} of {} ({:.2}x){}.",
                human(out.stored_bytes),
                human(out.raw_bytes),
                out.raw_bytes as f64 / (out.stored_bytes.max(1)) as f64,
                if out.zero_frames > 0 {
                    format!(", {} all-zero transfers kept as holes", out.zero_frames)
                } else {
                    String::new()
                }
            );
        }
        if manifest.damaged {
            println!(
                "The set is marked DAMAGED: {} page checksum failure(s) listed above.",
                problems.len()
            );
        }
        if !discard {
            println!("Backup set {} on {} stripe(s).", manifest.set_id, stripes);
        }
        out.waits.print();
        if out.adaptive_raises > 0 {
            println!(
                "Adaptive readers: reads were small or slow, so reads in flight were raised {} time(s), up to {} per volume (base {}).",
                out.adaptive_raises,
                out.peak_in_flight,
                params.in_flight().0
            );
        }
        super::print_retries();
    }
    let mut summary = json!({
        "command": "backup",
        "set_id": manifest.set_id,
        "source": info,
        "copy_only": copy_only,
        "damaged": manifest.damaged,
        "discarded": discard,
        "pages": pages,
        "files": manifest.totals.files,
        "raw_bytes": out.raw_bytes,
        "stored_bytes": out.stored_bytes,
        "zero_frames": out.zero_frames,
        "seconds": seconds,
        "pipeline_seconds": out.wall.as_secs_f64(),
        "mb_per_sec": rate,
        "stripes": stripes_out,
        "devices": specs,
        "config": config,
        "pool_bytes": out.pool_bytes,
        "volumes": vol_names.iter().zip(&vol_pages).map(|(n, p)| json!({"name": n, "pages": p})).collect::<Vec<_>>(),
        "extra": manifest.extra,
        "warnings": warnings,
        "waits": out.waits,
        "adaptive_readers": {"enabled": params.adaptive, "raises": out.adaptive_raises, "peak_in_flight": out.peak_in_flight},
        "object_store": super::retries_json(),
    });
    if let (Some(path), Some(series)) = (&a.report, series) {
        let mut config = json!({"source": a.source});
        config
            .as_object_mut()
            .unwrap()
            .extend(summary["config"].as_object().cloned().unwrap_or_default());
        let r = report::Report {
            command: "backup",
            config,
            summary: &summary,
            series,
            read_names: vol_names.iter().map(|n| n.display().to_string()).collect(),
            write_names: devices.iter().map(|d| d.describe()).collect(),
        };
        report::write(path, &r)?;
        summary["report"] = json!(path);
        if !a.json {
            println!("Report written to {}", path.display());
        }
    }
    Ok(summary)
}
