//! The backup use case: a source read into a new set on one or more devices, the
//! set committed whole and only then recorded in the repository's catalog.

use crate::device::{self, object::RetryStats, CreateHint, Device};
pub use crate::engine::backup::direct::DirectIo;
use crate::engine::backup::{self, direct, Outcome, Params, ReadFile};
use crate::engine::{codec::CodecSpec, stats::Progress, stats::WaitStats, Abort};
use crate::format::manifest::{BackupType, EntryKind, FileEntry, Manifest, SourceInfo};
use crate::format::manifest::{SourceKind, StripeInfo, Totals};
use crate::format::media::{Guard, MediaHeader};
use crate::format::{FORMAT_VERSION, SEALED_VERSION, SIGNED_VERSION};
use crate::repo::{CatalogEntry, Repo};
use crate::report;
use crate::set::write::{self as set_write, Committed};
use crate::source::{self, Source, SourceFile};
use crate::target::DirectWrites;
use crate::units::{self, human, mb_per_sec};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub(crate) mod changes;
mod dest;
mod guard;
mod record;
mod rules;
pub mod running;
pub use changes::ChangeMap;
use dest::{destination, parse_source, same_cluster, Dest};
use guard::guarding;
use record::*;
pub use record::{CHANGE_RULES, REPOSITORY};
pub use rules::*;

/// What a backup does; `Default` is the command line's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupOptions {
    /// files:PATH, sqlite:PATH or postgres://...
    pub source: String,
    /// Device specs (paths, NUL, s3://, azure://, gs://), after the repository's stripes.
    pub to: Vec<String>,
    pub repo: Option<String>,
    /// Stripes inside the repository (None: 1, or 0 when `to` names devices).
    pub stripes: Option<u32>,
    /// full, diff (or log, which is refused: that is archive-push).
    pub backup_type: BackupType,
    pub pgdata: Option<PathBuf>,
    /// PostgreSQL: a file whose first line is the password.
    pub password_file: Option<PathBuf>,
    /// PostgreSQL: the primary of a standby source (its WAL switched at the end).
    pub primary: Option<String>,
    pub continue_after_error: bool,
    /// Seconds to wait at pg_backup_stop for the WAL to be archived.
    pub archive_timeout: u64,
    /// none, lz4, zstd or zstd:LEVEL.
    pub compress: String,
    /// None: the larger of SQL Server's default and what the pipeline needs.
    pub buffer_count: Option<u32>,
    pub max_transfer_size: u64,
    pub block_size: u64,
    pub readers: u32,
    /// Reads in flight per reader where the adaptive readers start. None: 16, or
    /// `direct::DIRECT_DEPTH` on a volume read mostly with O_DIRECT.
    pub read_depth: Option<u32>,
    /// None: one per core.
    pub threads: Option<u32>,
    pub copy_only: bool,
    pub name: Option<String>,
    /// The time the set's data is of, when not the backup's end (a merge: the newest
    /// merged set's `finished`), as RFC 3339: restores to a time go by it. `started`
    /// stays the backup's own (the catalog's order).
    pub data_finished: Option<String>,
    /// Page size of a files: source.
    pub page_size: u64,
    pub adaptive_readers: bool,
    pub direct_io: DirectIo,
    /// Stripes written to disk files with O_DIRECT (not `Off`).
    pub direct_writes: DirectWrites,
    /// The most the buffers may hold (pool, compression scratch, device write
    /// buffers): the pool and the reads in flight stay within it. None: the pool is
    /// sized for the adaptive readers' cap.
    pub memory_budget: Option<u64>,
    /// The most bytes read from the source per second (`--max-rate`); None: no limit.
    pub max_rate: Option<u64>,
    /// Where the SQLite source puts its snapshot copy.
    pub spool: Option<PathBuf>,
    /// An HTML page with the timeline is written there.
    pub report: Option<PathBuf>,
    /// Object-store options (`--s3-endpoint`) and the key: a key encrypts the set.
    pub store: crate::device::object::StoreOptions,
    /// `--encrypt`: fail unless a key is given.
    pub encrypt: bool,
    /// `--sign`: a key signs the set instead of encrypting it (unless `encrypt`, or
    /// the repository is encrypted: an encrypted set is authenticated already); fail
    /// unless a key is given.
    pub sign: bool,
    /// Keep each file's pages for the report (`--verbose`): a path per file.
    pub file_pages: bool,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            source: String::new(),
            to: vec![],
            repo: None,
            stripes: None,
            backup_type: BackupType::Full,
            pgdata: None,
            password_file: None,
            primary: None,
            continue_after_error: false,
            archive_timeout: 300,
            compress: "none".into(),
            buffer_count: None,
            max_transfer_size: 1 << 20,
            block_size: 4 << 10,
            readers: 1,
            read_depth: None,
            threads: None,
            copy_only: false,
            name: None,
            data_finished: None,
            page_size: 8 << 10,
            adaptive_readers: true,
            direct_io: DirectIo::Auto,
            direct_writes: DirectWrites::Auto,
            memory_budget: None,
            max_rate: None,
            spool: None,
            report: None,
            store: Default::default(),
            encrypt: false,
            sign: false,
            file_pages: false,
        }
    }
}

/// The buffer configuration of a backup (`config` in its summary).
#[derive(Clone, Debug, Serialize)]
pub struct BackupConfig {
    pub buffer_count: usize,
    pub max_transfer_size: u64,
    pub buffer_bytes: usize,
    pub total_buffer_memory: u64,
    pub device_buffer_memory: u64,
    pub compression_scratch_buffers: usize,
    pub volumes: usize,
    pub readers_per_volume: u32,
    pub read_depth: u32,
    /// Reads in flight per reader where a volume read mostly with O_DIRECT starts, and
    /// per volume where one found mostly in the page cache stays.
    pub direct_read_depth: u32,
    pub cached_read_depth: Option<usize>,
    pub devices: Vec<String>,
    pub block_size: u64,
    pub codec: String,
    pub threads: usize,
    pub direct_io: DirectIo,
    pub direct_writes: DirectWrites,
    /// Files (and their bytes) read with O_DIRECT: all with `on`; with `auto`, the
    /// large ones the page cache held none of.
    pub direct_files: u64,
    pub direct_bytes: u64,
    /// Files of 64 MiB or more found in the page cache (15 of 16 pages or more), and their bytes: a volume
    /// mostly of them reads with one read in flight per core.
    pub cached_files: u64,
    pub cached_bytes: u64,
    /// Pool buffers on huge pages (some file is read with O_DIRECT, in transfers of
    /// 1 MiB or more).
    pub huge_pages: bool,
    pub page_size: u64,
    /// SQL Server's default BUFFERCOUNT and the pipeline's minimum (text only).
    #[serde(skip)]
    pub sql_default: usize,
    #[serde(skip)]
    pub pipeline_min: usize,
    /// Adaptive readers, and the reads in flight per volume they may reach.
    pub adaptive: bool,
    pub adaptive_cap: usize,
    /// `--memory-budget`, when given.
    pub memory_budget: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VolumeReport {
    pub name: PathBuf,
    pub pages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AdaptiveReport {
    pub enabled: bool,
    pub raises: u64,
    pub peak_in_flight: usize,
    /// Steps up taken back because throughput did not rise.
    pub undone: u64,
    /// Reads in flight the busiest volume started and ended at, and why no higher.
    pub started_in_flight: usize,
    pub settled_in_flight: usize,
    pub held: Option<crate::engine::adapt::Held>,
    /// Bytes one read settled at (adjacent transfers merged), and the span steps kept.
    pub settled_read_bytes: usize,
    pub span_raises: u64,
}

/// What a backup did: its `--json` summary, and a few facts only the text shows.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    pub command: &'static str,
    pub set_id: String,
    pub source: SourceInfo,
    pub copy_only: bool,
    pub damaged: bool,
    pub discarded: bool,
    pub pages: u64,
    pub files: u64,
    /// How a differential or incremental found the changed pages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_map: Option<ChangeMap>,
    /// Bytes read from the source.
    pub read_bytes: u64,
    /// Bytes the set holds before compression.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub zero_frames: u64,
    /// Chunks stored as they came, not compressed again (a merge's unchanged chunks).
    pub kept_frames: u64,
    /// What the user waited for: preparing, the pipeline, making every stripe durable.
    pub seconds: f64,
    pub pipeline_seconds: f64,
    /// Where the seconds went, step by step.
    pub phases: BackupPhases,
    pub mb_per_sec: f64,
    pub stripes: Vec<Committed>,
    pub devices: Vec<String>,
    pub config: BackupConfig,
    pub pool_bytes: u64,
    pub volumes: Vec<VolumeReport>,
    pub extra: BTreeMap<String, serde_json::Value>,
    pub warnings: Vec<String>,
    pub waits: WaitStats,
    pub adaptive_readers: AdaptiveReport,
    pub object_store: RetryStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<PathBuf>,
    /// Pages per regular file, in set order (`--verbose`).
    #[serde(skip)]
    pub file_pages: Vec<(String, u64)>,
    /// Page checksum failures (the set is damaged when there is one).
    #[serde(skip)]
    pub checksum_failures: usize,
    #[serde(skip)]
    pub compressed: bool,
}

/// Seconds of each step of a backup, in order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackupPhases {
    /// The source made ready and walked (PostgreSQL: pg_backup_start, its checkpoint).
    pub prepare: f64,
    /// Which pages a differential or incremental reads (waiting for the summary of
    /// this backup's start segment included).
    pub plan: f64,
    /// The pipeline over the source's files.
    pub read: f64,
    /// The source's backup ended (PostgreSQL: pg_backup_stop, the archiver's wait).
    pub finish: f64,
    /// Files only known at the end read in a second pass (PostgreSQL: the WAL).
    pub late: f64,
    /// Every stripe made durable, the catalog record written.
    pub commit: f64,
}

/// What the caller shows while a backup runs; the use case itself prints nothing.
pub trait Watch {
    /// The buffer configuration, once known and before any stripe exists.
    fn config(&mut self, _c: &BackupConfig) {}
    /// The pipeline starts: the progress counters move from now on.
    fn started(&mut self) {}
    /// The pipeline has ended, in success or failure.
    fn stopped(&mut self) {}
}

impl Watch for () {}

/// What a backup that fails before its stripes are committed leaves: nothing.
const STOPPED: &str =
    "backup stopped: its partial stripes were removed (uploads aborted) and no set was recorded";

/// Runs a backup. `progress` counts what the pipeline has done; `watch` is told of the
/// configuration and when the pipeline starts and stops.
pub fn backup(
    o: &BackupOptions,
    progress: &Arc<Progress>,
    watch: &mut dyn Watch,
) -> Result<BackupReport> {
    backup_of(o, None, progress, watch)
}

/// A backup of `source` when given (a merge's staged copy; `o.source` only names it),
/// else of the source `o.source` names.
pub fn backup_of(
    o: &BackupOptions,
    source: Option<Box<dyn Source>>,
    progress: &Arc<Progress>,
    watch: &mut dyn Watch,
) -> Result<BackupReport> {
    let set_id: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    let r = backup_set(o, set_id, source, progress, watch);
    if let (Err(_), Some(repo)) = (&r, &o.repo) {
        // Failed stripes are removed by their devices; drop the then empty set folder.
        let _ = std::fs::remove_dir(Path::new(repo).join("sets").join(hex::encode(set_id)));
    }
    r
}

/// The source's side of a backup: its files, their plan and volumes.
struct Input {
    src: Box<dyn Source>,
    info: SourceInfo,
    /// The source's entries until the pipeline starts; then `held`.
    entries: Vec<SourceFile>,
    held: Vec<Held>,
    plan: Vec<ReadFile>,
    plan_ids: Vec<u32>,
    vols: Volumes,
    /// Stops the pipeline; the source holds it too (a server that goes away).
    abort: Arc<Abort>,
    /// The filter's warnings that do not damage the set.
    notes: Vec<String>,
}

fn backup_set(
    o: &BackupOptions,
    set_id: [u8; 16],
    given: Option<Box<dyn Source>>,
    progress: &Arc<Progress>,
    watch: &mut dyn Watch,
) -> Result<BackupReport> {
    let codec = CodecSpec::parse(&o.compress)?;
    let set_hex = hex::encode(set_id);
    let dest = destination(o, &set_hex)?;
    let src = match given {
        Some(s) => s,
        None => parse_source(o, &dest, &set_hex)?,
    };
    // The clock starts before the source is prepared: a snapshot copy or a
    // checkpoint is part of what the user waits for.
    let started = chrono::Utc::now();
    // Its progress for `status`, removed once it is recorded or has failed.
    let running = (dest.repo.is_some() && !dest.discard)
        .then(|| running::Running::start(o, &set_hex, progress.clone()));
    let retries = device::object::retry_stats();
    // The timeline spans what the summary's seconds count.
    let sampler = o
        .report
        .as_ref()
        .map(|_| report::Sampler::start(progress.live.clone()));
    let mut phases = BackupPhases::default();
    let mut clock = Instant::now();
    let mut lap = || {
        let s = clock.elapsed().as_secs_f64();
        clock = Instant::now();
        s
    };
    let mut input = prepare(src, &dest)?;
    phases.prepare = lap();
    let change_map = match (&dest.base, &dest.repo) {
        (Some((entry, b)), Some(repo)) => Some(plan_changes(repo, entry, b, &mut input, o)),
        _ => None,
    };
    phases.plan = lap();
    let (mut params, config, hint) = match configure(o, codec, &dest.devices, &mut input) {
        Ok(c) => c,
        Err(e) => {
            let _ = input.src.finish(false);
            return Err(e);
        }
    };
    let guard = match guarding(o, &dest, set_id) {
        Ok(k) => k,
        Err(e) => {
            let _ = input.src.finish(false);
            return Err(e);
        }
    };
    params.seal = guard.seal.clone();
    params.sign = guard.sign.clone();
    watch.config(&config);

    // From the first stripe on, a signal ends the backup through its failure path.
    let _signals = crate::interrupt::catch();
    let stripes = dest.devices.len();
    let sinks = match set_write::create(&dest.devices, &hint) {
        Ok(s) => s,
        Err(e) => {
            let _ = input.src.finish(false);
            return Err(e);
        }
    };
    let headers = set_write::headers(
        &MediaHeader {
            version: guard.version(),
            block_size: o.block_size as u32,
            set_id,
            stripe_index: 0,
            stripe_count: stripes as u32,
            codec: codec.codec,
            page_size: params.page_size as u32,
            transfer_size: o.max_transfer_size as u32,
            created_unix: started.timestamp() as u64,
            key: guard.block.clone(),
            tag_only: guard.seal.is_some(),
        },
        stripes,
    );
    let header_block = headers[0][..64].to_vec();
    watch.started();
    let run = pipeline(&mut input, sinks, headers, &params, progress, &mut phases);
    watch.stopped();
    lap();
    let (mut out, mut extra, problems) = run?;
    if input.info.kind == crate::format::manifest::SourceKind::Postgres {
        // A merge's staged source brings its chain's rules; a backup reads with today's.
        extra
            .entry(record::CHANGE_RULES.to_string())
            .or_insert(crate::pg::walsummary::RULES.into());
    }
    // The repository the set is written into, under the manifest's tag or seal: a
    // record in another repository naming this set is refused (ops::authenticated_in).
    if let Some(repo) = &dest.repo {
        match repo.id() {
            Some(id) => extra.insert(record::REPOSITORY.to_string(), id.into()),
            None => extra.remove(record::REPOSITORY),
        };
    }
    let (manifest, text) = manifest(
        o, &set_hex, &dest, &mut input, &mut out, &params, extra, &problems, started,
    );
    let mut warnings = input.src.warnings();
    warnings.extend(text.warnings);
    warnings.extend(problems.iter().cloned());
    warnings.extend(input.notes.iter().cloned());
    warnings.extend(guard.note.clone());
    let committed = set_write::commit(
        &dest.devices,
        out.stripes,
        &manifest,
        o.block_size,
        match (&params.seal, &params.sign) {
            (Some(s), _) => Guard::Seal(&s.dek, &s.set_id),
            (None, Some(m)) => Guard::Sign(m, &header_block),
            (None, None) => Guard::Plain,
        },
    )?;
    // The catalog record is written last: a set is in the history only once durable.
    if let (Some(repo), false) = (&dest.repo, dest.discard) {
        let entry = catalog_entry(o, &dest, repo, &manifest, &input.info, &committed);
        let plain = params.seal.is_none() && params.sign.is_none();
        record::record_set(repo, &entry, &dest, plain)?;
    }
    drop(running);
    phases.commit = lap();
    let series = sampler.map(report::Sampler::finish);
    let seconds = (chrono::Utc::now() - started)
        .num_microseconds()
        .unwrap_or(0) as f64
        / 1e6;
    let mut r = BackupReport {
        command: "backup",
        set_id: manifest.set_id.clone(),
        source: input.info.clone(),
        copy_only: manifest.copy_only,
        damaged: manifest.damaged,
        discarded: dest.discard,
        pages: manifest.totals.pages,
        files: manifest.totals.files,
        change_map,
        read_bytes: out.read_bytes,
        raw_bytes: out.raw_bytes,
        stored_bytes: out.stored_bytes,
        zero_frames: out.zero_frames,
        kept_frames: out.kept_frames,
        seconds,
        pipeline_seconds: out.wall.as_secs_f64(),
        phases,
        mb_per_sec: mb_per_sec(out.read_bytes, seconds),
        stripes: committed,
        devices: dest.specs.clone(),
        config,
        pool_bytes: out.pool_bytes,
        volumes: (input.vols.names.iter().zip(text.vol_pages))
            .map(|(n, pages)| VolumeReport {
                name: n.clone(),
                pages,
            })
            .collect(),
        extra: manifest.extra,
        warnings,
        waits: out.waits,
        adaptive_readers: AdaptiveReport {
            enabled: params.adaptive,
            raises: out.adaptive_raises,
            peak_in_flight: out.peak_in_flight,
            undone: out.adaptive_undone,
            started_in_flight: out.base_in_flight,
            settled_in_flight: out.settled_in_flight,
            settled_read_bytes: out.settled_read_bytes,
            span_raises: out.span_raises,
            held: out.held,
        },
        object_store: device::object::retry_stats().since(retries),
        report: None,
        file_pages: text.file_pages,
        checksum_failures: problems.len(),
        compressed: codec.codec != crate::format::Codec::None,
    };
    if let (Some(path), Some(series)) = (&o.report, series) {
        write_report(path, &r, series, &dest.devices)?;
        r.report = Some(path.clone());
    }
    Ok(r)
}

/// The pages a differential or incremental reads of each base relation file.
fn plan_changes(
    repo: &Repo,
    entry: &CatalogEntry,
    b: &source::postgres::DiffBase,
    input: &mut Input,
    o: &BackupOptions,
) -> changes::ChangeMap {
    let now = match crate::pg::facts::PgFacts::from_extra(&input.src.facts()) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return changes::ChangeMap::LsnScan {
                reason: "the source gave no WAL position".into(),
            }
        }
        Err(e) => return changes::ChangeMap::LsnScan { reason: e },
    };
    let base = changes::Base {
        start_lsn: b.start_lsn,
        timeline: entry.timeline.unwrap_or(0),
        files: &b.files,
    };
    let wait = std::time::Duration::from_secs(o.archive_timeout.min(60));
    let live = input.src.start_wal_head();
    changes::plan_pages(
        repo,
        &base,
        &now,
        live,
        &input.entries,
        &mut input.plan,
        wait,
    )
}

/// Prepares the source and checks that it is the cluster of the base and of the
/// repository's other sets; on a refusal the source's backup is ended.
fn prepare(mut src: Box<dyn Source>, dest: &Dest) -> Result<Input> {
    let abort = Arc::new(Abort::default());
    src.abort_with(abort.clone());
    let mut entries = src.prepare()?;
    entries.shrink_to_fit();
    let info = src.info();
    if let Err(e) = same_cluster(&info, dest) {
        let _ = src.finish(false);
        return Err(e);
    }
    let mut vols = Volumes::default();
    let (plan, plan_ids) = plan_of(&mut entries, 0, &mut vols, info.kind);
    Ok(Input {
        src,
        info,
        entries,
        held: vec![],
        plan,
        plan_ids,
        vols,
        abort,
        notes: vec![],
    })
}

/// The pipeline's parameters, the configuration shown for them, what devices are told.
fn configure(
    o: &BackupOptions,
    codec: CodecSpec,
    devices: &[Box<dyn Device>],
    input: &mut Input,
) -> Result<(Params, BackupConfig, CreateHint)> {
    let volumes = input.vols.names.len().max(1);
    let threads = o
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(crate::engine::default_threads);
    let stripes = devices.len();
    let sql_default = sql_server_buffers(stripes, volumes);
    let direct = direct::choose(&mut input.plan, o.direct_io);
    let huge = direct::huge_pages(direct, o.max_transfer_size as usize);
    let read_depth = o.read_depth.unwrap_or(16);
    let direct_read_depth = o.read_depth.unwrap_or(direct::DIRECT_DEPTH as u32);
    let page_size = input.src.page_size() as u64;
    let mut params = Params {
        buffer_count: 0,
        transfer_size: o.max_transfer_size as usize,
        block_size: o.block_size as usize,
        readers_per_volume: o.readers as usize,
        read_depth: read_depth as usize,
        direct_read_depth: direct_read_depth as usize,
        // Copies from the page cache: one per compression thread (a core each).
        cached_read_depth: (o.read_depth.is_none() && o.adaptive_readers).then_some(threads),
        huge_pages: huge,
        threads,
        codec,
        page_size: page_size as usize,
        adaptive: o.adaptive_readers,
        seal: None,
        sign: None,
        first_seq: 0,
        max_rate: o.max_rate,
    };
    // Where each volume's reads in flight start, and the most they may reach: adaptive
    // readers may reach the cap on one volume, and the default pool has room for it.
    let (base, most) = (0..volumes)
        .map(|v| params.in_flight(direct::mostly(&input.plan, v)))
        .fold((0, 0), |(b, m), (base, max)| (b + base, m.max(max)));
    let reads = base.max(most);
    let pipeline_min = pipeline_min(reads, threads, stripes);
    // Never fewer than the pipeline needs to keep every stage busy.
    let buffer_count = o
        .buffer_count
        .map(|b| b as usize)
        .unwrap_or(sql_default.max(pipeline_min));
    params.buffer_count = buffer_count;
    let hint = CreateHint {
        expected_bytes: input.plan.iter().map(|f| f.size).sum::<u64>() / stripes as u64,
        transfer_size: o.max_transfer_size as usize,
        direct: o.direct_writes != DirectWrites::Off,
    };
    let device_memory: u64 = devices.iter().map(|d| d.write_memory(&hint)).sum();
    if let Some(budget) = o.memory_budget {
        let fit = within_budget(budget, device_memory, &params, (base, stripes))?;
        params.buffer_count = match o.buffer_count {
            Some(b) if b as usize > fit => bail!(
                "--buffer-count {b} needs {} of buffers, over --memory-budget {} (at most {fit} \
                 buffers of {} fit): raise the budget or lower --buffer-count",
                human(((b as usize + threads) * params.buffer_footprint()) as u64 + device_memory),
                human(budget),
                human(params.buffer_footprint() as u64)
            ),
            Some(b) => b as usize,
            None => buffer_count.min(fit),
        };
    }
    let buffer_count = params.buffer_count;
    let config = BackupConfig {
        buffer_count,
        max_transfer_size: o.max_transfer_size,
        buffer_bytes: params.buffer_size(),
        total_buffer_memory: (buffer_count * params.buffer_footprint()) as u64,
        device_buffer_memory: device_memory,
        compression_scratch_buffers: threads,
        volumes,
        readers_per_volume: o.readers,
        read_depth,
        direct_read_depth,
        cached_read_depth: params.cached_read_depth,
        devices: devices.iter().map(|d| d.describe()).collect(),
        block_size: o.block_size,
        codec: codec.describe(),
        threads,
        direct_io: o.direct_io,
        direct_writes: o.direct_writes,
        direct_files: direct.files,
        direct_bytes: direct.bytes,
        cached_files: direct.cached_files,
        cached_bytes: direct.cached_bytes,
        huge_pages: huge,
        page_size,
        sql_default,
        pipeline_min,
        adaptive: params.adaptive,
        adaptive_cap: params.in_flight(direct::Mostly::Buffered).1,
        memory_budget: o.memory_budget,
    };
    Ok((params, config, hint))
}

/// Reads the source into the stripes, then ends the source's backup and reads, in a
/// second pass over the same stripes, the files that exist only now (the WAL).
/// Returns the outcome, the source's facts and its page checksum failures.
#[allow(clippy::type_complexity)]
fn pipeline(
    input: &mut Input,
    sinks: Vec<Box<dyn device::StripeSink>>,
    headers: Vec<Vec<u8>>,
    params: &Params,
    progress: &Progress,
    phases: &mut BackupPhases,
) -> Result<(Outcome, BTreeMap<String, serde_json::Value>, Vec<String>)> {
    let t = Instant::now();
    let volumes = input.vols.names.len().max(1);
    let filter = input.src.filter(&input.entries);
    // The plan has what the readers need: the entries keep what the manifest does.
    input.held = held_of(std::mem::take(&mut input.entries));
    let abort = input.abort.clone();
    let run = backup::run(
        &input.plan,
        volumes,
        sinks.into_iter().zip(headers).collect(),
        params,
        filter.as_deref(),
        input.src.feed(),
        progress,
        &abort,
    );
    let mut out = match run {
        Ok(o) => o,
        Err(e) => {
            let _ = input.src.finish(false);
            return Err(e.context(STOPPED));
        }
    };
    let problems = filter.as_ref().map(|f| f.problems()).unwrap_or_default();
    input.notes = filter.map(|f| f.notes()).unwrap_or_default();
    phases.read = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let fin = match input.src.finish(true) {
        Ok(f) => f,
        Err(e) => {
            set_write::abort(out.stripes);
            return Err(e.context(STOPPED));
        }
    };
    phases.finish = t.elapsed().as_secs_f64();
    let t = Instant::now();
    if !fin.late.is_empty() {
        let first = input.held.len();
        let mut late = fin.late;
        let (plan2, ids2) = plan_of(&mut late, first, &mut input.vols, input.info.kind);
        let (sinks, prior): (Vec<_>, Vec<_>) = out
            .stripes
            .into_iter()
            .map(|s| (s.sink, (s.frames, s.body_end, s.index)))
            .unzip();
        // Sequence numbers go on from the first run's: a sealed frame's nonce is its own.
        let params2 = Params {
            first_seq: prior.iter().map(|(f, _, _)| f).sum(),
            ..params.clone()
        };
        let more = backup::run(
            &plan2,
            input.vols.names.len(),
            sinks.into_iter().map(|s| (s, vec![])).collect(),
            &params2,
            None,
            None,
            progress,
            &Abort::default(),
        )
        .context("copying the WAL written during the backup failed")
        .context(STOPPED)?;
        out.stripes = more
            .stripes
            .into_iter()
            .zip(prior)
            .map(|(mut s, (f, b, index))| {
                (s.frames, s.body_end) = (s.frames + f, s.body_end + b);
                s.index = [index, s.index].concat();
                s
            })
            .collect();
        out.files.append(more.files);
        out.read_bytes += more.read_bytes;
        out.raw_bytes += more.raw_bytes;
        out.stored_bytes += more.stored_bytes;
        out.zero_frames += more.zero_frames;
        out.kept_frames += more.kept_frames;
        out.wall += more.wall;
        input.plan_ids.extend(ids2);
        input.held.extend(late.into_iter().map(Held::from));
    }
    phases.late = t.elapsed().as_secs_f64();
    // The archiver worked while the late files were copied.
    let t = Instant::now();
    if let Err(e) = input.src.settle() {
        set_write::abort(out.stripes);
        return Err(e.context(STOPPED));
    }
    phases.finish += t.elapsed().as_secs_f64();
    Ok((out, fin.extra, problems))
}
