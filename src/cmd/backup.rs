//! `pagevault backup`: the command line of the backup use case (`ops::backup`) and
//! how a backup is shown (progress, configuration, SQL Server's lines, --json).

use super::PrintWaits;
use super::{print_json, Reporter};
use crate::device::object::StoreOptions;
use crate::engine::stats::Progress;
use crate::format::manifest::BackupType;
use crate::ops::backup::{
    self as ops, AdaptiveReport, BackupConfig, BackupOptions, BackupReport, Watch,
};
use crate::ops::backup::{ChangeMap, DirectIo};
use crate::units::{self, human};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

fn page_size(s: &str) -> Result<u64, String> {
    use crate::format::{PAGE_MAX, PAGE_MIN};
    units::parse_in_range(s, PAGE_MIN as u64, PAGE_MAX as u64, "page size", true)
}

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
    /// With --stanza whose repo lists several repositories: the one to write to, by its
    /// name or its place (1 the first, the default). Its own settings (compress, stripes
    /// ...) win over the stanza's.
    #[arg(long, value_name = "NAME|N")]
    pub to_repo: Option<String>,
    /// Stripes to write inside the repository (default 1, or 0 when --to names devices).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=ops::REPO_STRIPES_MAX as i64))]
    pub stripes: Option<u32>,
    /// full (the whole source), diff (PostgreSQL: pages changed since the newest full set
    /// of --repo) or incr (pages changed since the newest set of any type). diff and incr
    /// read only the pages the WAL's block summaries list when archive-push archived
    /// every segment since the base, else every page. Log backups are archive-push's.
    #[arg(long = "type", default_value = "full", value_parser = parse_type)]
    pub backup_type: BackupType,
    /// PostgreSQL data directory, when the URL has no ?pgdata= and the server cannot say.
    #[arg(long)]
    pub pgdata: Option<PathBuf>,
    /// PostgreSQL: the password is the first line of FILE. Used when the URL has none;
    /// without either, PGPASSWORD, then PGPASSFILE or ~/.pgpass (mode 0600) as libpq.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// PostgreSQL, when --source names a standby: its primary
    /// (postgres://USER@HOST:PORT/DB, the password found as for the source). The backup
    /// ends by switching the primary's WAL, so that the segment holding the backup's
    /// stop is archived at once instead of when the primary next fills one (the set
    /// waits, up to --archive-timeout, for the repository to hold it). Files are read
    /// from the standby; the primary does no backup I/O.
    #[arg(long, value_name = "URL")]
    pub primary: Option<String>,
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
    #[arg(long, default_value = "1M", value_parser = ops::parse_transfer_size)]
    pub max_transfer_size: u64,
    /// Alignment and padding of device writes (BLOCKSIZE): a power of two, 512..1M.
    #[arg(long, default_value = "4K", value_parser = ops::parse_block_size)]
    pub block_size: u64,
    /// Readers per volume (each keeps --read-depth reads in flight).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub readers: u32,
    /// Reads in flight per reader, where the adaptive readers start. Default 16 (buffered
    /// reads need many in flight to keep fast devices busy); 4 on a volume read mostly
    /// with O_DIRECT (each read is one request; the device merges a few); one per
    /// compression thread, held there, on a volume found mostly in the page cache (its
    /// reads are copies).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub read_depth: Option<u32>,
    /// Compression threads (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Print "N percent processed." every N percent (default 10 when not on a terminal).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub stats: Option<u32>,
    /// Print the buffer configuration before the backup (set by the global --show-config).
    #[arg(skip)]
    pub show_config: bool,
    /// Never a differential base, changes no chain (NUL backups always are).
    #[arg(long)]
    pub copy_only: bool,
    /// A name for the set, shown by `header`.
    #[arg(long)]
    pub name: Option<String>,
    /// Encrypt the set, and fail without a key (a key given with --key-file,
    /// --passphrase-file or their variables encrypts anyway, unless --sign or the
    /// repository is signed).
    #[arg(long)]
    pub encrypt: bool,
    /// Sign the set instead of encrypting it: each frame and the manifest get a keyed
    /// BLAKE3 tag from the key, so no edit, swap, drop or replay of a frame goes
    /// unnoticed by a reader given the key; the data stays readable on the storage.
    /// Fails without a key. With --encrypt, or into an encrypted repository, the set is
    /// encrypted (which authenticates it as well). A repository that takes a signed set
    /// refuses unsigned ones from then on.
    #[arg(long)]
    pub sign: bool,
    /// Page size of a files: source.
    #[arg(long, default_value = "8K", value_parser = page_size)]
    pub page_size: u64,
    /// Adaptive readers: start at --readers x --read-depth reads in flight per volume
    /// and probe upward (doubling, up to 64) while throughput rises by 5% or more,
    /// stepping back when it does not, as a congestion window does. Off: the reads in
    /// flight stay fixed.
    #[arg(long, value_enum, default_value = "on")]
    pub adaptive_readers: super::Switch,
    /// The most memory the backup's buffers may hold (pool, compression scratch,
    /// object-store upload parts), e.g. 256M or 1G: the pool grows only as the reads
    /// in flight need it, and the adaptive readers stop where it is full. Default: room
    /// for the readers' cap (64 reads in flight per volume, about 70 MiB at 1M
    /// transfers); either way a buffer is made only when the run first needs it.
    #[arg(long, value_parser = units::parse_size)]
    pub memory_budget: Option<u64>,
    /// The most the source is read per second, e.g. 50M (pg_basebackup's --max-rate): a
    /// backup kept from taking the I/O a busy server needs. At least 32K.
    #[arg(long, value_name = "RATE", value_parser = max_rate)]
    pub max_rate: Option<u64>,
    /// Read with O_DIRECT where the file system allows it, bypassing the page cache:
    /// auto reads so the whole files of 64 MiB or more none of whose pages are in the page
    /// cache (a cold large file reads faster so, into buffers on huge pages); on reads so
    /// every file; off none.
    #[arg(long, value_enum, default_value = "auto")]
    pub direct_io: DirectIoArg,
    /// Write stripes that are disk files with O_DIRECT, bypassing the page cache: auto
    /// and on do so where the file system allows it (each stripe copied into three
    /// aligned buffers of 4 MiB, two written at a time); off writes through the page
    /// cache, its writeback started every 8 MiB.
    #[arg(long, value_name = "auto|on|off", default_value = "auto")]
    pub direct_writes: crate::target::DirectWrites,
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

/// `--max-rate`: bytes per second, 32 KiB or more.
fn max_rate(s: &str) -> Result<u64, String> {
    let v = units::parse_size(s)?;
    if v < 32 << 10 {
        return Err(format!(
            "'{s}' is below the least rate, 32K (bytes per second)"
        ));
    }
    Ok(v)
}

/// full or diff; log says where log backups come from.
fn parse_type(s: &str) -> Result<BackupType, String> {
    match s {
        "log" => Err("log backups are WAL archiving: set archive_command = 'pagevault archive-push %p --repo DIR'".into()),
        _ => s.parse(),
    }
}

impl BackupArgs {
    /// What the use case needs of the arguments.
    pub fn options(&self) -> BackupOptions {
        BackupOptions {
            source: self.source.clone(),
            to: self.to.clone(),
            repo: self.repo.clone(),
            stripes: self.stripes,
            backup_type: self.backup_type,
            pgdata: self.pgdata.clone(),
            password_file: self.password_file.clone(),
            primary: self.primary.clone(),
            continue_after_error: self.continue_after_error,
            archive_timeout: self.archive_timeout,
            compress: self.compress.clone(),
            buffer_count: self.buffer_count,
            max_transfer_size: self.max_transfer_size,
            block_size: self.block_size,
            readers: self.readers,
            read_depth: self.read_depth,
            threads: self.threads,
            copy_only: self.copy_only,
            name: self.name.clone(),
            data_finished: None,
            page_size: self.page_size,
            adaptive_readers: self.adaptive_readers.on(),
            direct_io: self.direct_io.into(),
            direct_writes: self.direct_writes,
            memory_budget: self.memory_budget,
            max_rate: self.max_rate,
            spool: self.spool.clone(),
            report: self.report.clone(),
            store: StoreOptions::default(),
            encrypt: self.encrypt,
            sign: self.sign,
            file_pages: self.verbose,
        }
    }

    /// How the backup is shown.
    pub fn show(&self) -> Show {
        Show {
            stats: self.stats,
            show_config: self.show_config,
            verbose: self.verbose,
            json: self.json,
        }
    }
}

pub fn run(a: BackupArgs, store: &StoreOptions) -> Result<()> {
    let show = a.show();
    let progress = Arc::new(Progress::default());
    let o = BackupOptions {
        store: store.clone(),
        ..a.options()
    };
    let r = ops::backup(&o, &progress, &mut show.watch(&progress))?;
    show.print(&r)
}

/// How a backup is shown: progress lines (STATS), the configuration, text or JSON.
#[derive(Clone, Copy, Default)]
pub struct Show {
    pub stats: Option<u32>,
    pub show_config: bool,
    pub verbose: bool,
    pub json: bool,
}

/// Shows a running backup: the configuration, then the progress of its pipeline.
pub struct Shown {
    show: Show,
    progress: Arc<Progress>,
    reporter: Option<Reporter>,
}

impl Show {
    pub fn watch(&self, progress: &Arc<Progress>) -> Shown {
        Shown {
            show: *self,
            progress: progress.clone(),
            reporter: None,
        }
    }

    /// The backup's result: SQL Server's lines and wait statistics, or the JSON summary.
    pub fn print(&self, r: &BackupReport) -> Result<()> {
        if self.json {
            print_json(&serde_json::to_value(r)?);
        } else {
            print_text(r, self.verbose);
        }
        Ok(())
    }
}

impl Watch for Shown {
    fn config(&mut self, c: &BackupConfig) {
        if self.show.show_config && !self.show.json {
            print_config(c);
        }
    }

    fn started(&mut self) {
        self.reporter = Some(Reporter::start(
            self.progress.clone(),
            self.show.stats,
            self.show.json,
            "backup",
        ));
    }

    fn stopped(&mut self) {
        if let Some(r) = self.reporter.take() {
            r.finish();
        }
    }
}

/// What the adaptive readers settled on, and why they went no higher.
fn adaptive_line(a: &AdaptiveReport) -> Option<String> {
    let base = a.started_in_flight;
    use crate::engine::adapt::Held;
    let why = match a.held? {
        Held::NotTried => return None,
        Held::NoGain => "a step higher did not raise throughput by 5%",
        Held::Cap => "that is the most allowed",
        Held::PoolFull => "every buffer was in use (raise --buffer-count or --memory-budget)",
    };
    Some(format!(
        "Adaptive readers: reads in flight started at {base} per volume and settled at {} (peak {}; {} step(s) kept, {} taken back): {why}. Reads of {} each{}.",
        a.settled_in_flight, a.peak_in_flight, a.raises, a.undone,
        human(a.settled_read_bytes as u64),
        if a.span_raises > 0 { format!(" ({} step(s) to larger reads kept)", a.span_raises) } else { String::new() }
    ))
}

/// `--direct-io`, as listed in `--help`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirectIoArg {
    Auto,
    On,
    Off,
}

impl From<DirectIoArg> for DirectIo {
    fn from(a: DirectIoArg) -> DirectIo {
        match a {
            DirectIoArg::Auto => DirectIo::Auto,
            DirectIoArg::On => DirectIo::On,
            DirectIoArg::Off => DirectIo::Off,
        }
    }
}

fn print_config(c: &BackupConfig) {
    let (stripes, volumes, threads) = (c.devices.len(), c.volumes, c.threads);
    println!("Buffer configuration:");
    println!("  BufferCount:           {} (default: {stripes} devices x 4 + 2 x {volumes} volumes = {}, pipeline needs {})", c.buffer_count, c.sql_default, c.pipeline_min);
    println!("  MaxTransferSize:       {}", human(c.max_transfer_size));
    let each = if c.huge_pages {
        format!(
            "{}, on {} of huge pages",
            human(c.buffer_bytes as u64),
            human(c.total_buffer_memory / c.buffer_count.max(1) as u64)
        )
    } else {
        human(c.buffer_bytes as u64)
    };
    println!("  Total buffer memory:   {} at most ({} buffers of {each}, each made when first needed, plus {threads} compression scratch buffers)", human(c.total_buffer_memory), c.buffer_count);
    if let Some(b) = c.memory_budget {
        println!(
            "  Memory budget:         {} (pool, scratch and upload buffers)",
            human(b)
        );
    }
    if c.device_buffer_memory > 0 {
        println!(
            "  Device buffers:        {} (object-store parts in flight, disk files' O_DIRECT staging; all stripes)",
            human(c.device_buffer_memory)
        );
    }
    let mut depth = c.read_depth.to_string();
    if c.direct_files > 0 && c.direct_read_depth != c.read_depth {
        depth += &format!(
            " ({} on a volume read mostly with O_DIRECT)",
            c.direct_read_depth
        );
    }
    if let (true, Some(n)) = (c.cached_files > 0, c.cached_read_depth) {
        depth += &format!(
            " ({n} per volume, held, on a volume found mostly in the page cache: its reads are copies)"
        );
    }
    println!(
        "  Volumes:               {volumes}, readers per volume {}, reads in flight per reader {depth}{}",
        c.readers_per_volume, if c.adaptive { format!(" (adaptive: probes up to {} per volume, and reads up to 16 MiB long, while throughput rises)", c.adaptive_cap) } else { String::new() }
    );
    println!("  Devices:               {}", c.devices.join(", "));
    println!("  BlockSize:             {}", human(c.block_size));
    println!("  Codec:                 {} on {threads} threads", c.codec);
    let direct = match c.direct_io {
        DirectIo::Off => "off".to_string(),
        DirectIo::On => "on: every file".to_string(),
        DirectIo::Auto if c.direct_files == 0 => {
            "auto: none (no file of 64 MiB or more is missing from the page cache)".to_string()
        }
        DirectIo::Auto => format!(
            "auto: {} file(s), {} (64 MiB or more, none of their pages in the page cache)",
            c.direct_files,
            human(c.direct_bytes)
        ),
    };
    let cached = if c.cached_files > 0 {
        format!(
            "; {} file(s), {}, found in the page cache",
            c.cached_files,
            human(c.cached_bytes)
        )
    } else {
        String::new()
    };
    let huge = if c.huge_pages {
        "; buffers on huge pages"
    } else {
        ""
    };
    println!("  Direct I/O:            {direct}{huge}{cached}");
    let writes = match c.direct_writes {
        crate::target::DirectWrites::Off => "page cache (--direct-writes off)",
        _ => "O_DIRECT to disk files where the file system allows it",
    };
    println!("  Stripe writes:         {writes}");
}

fn print_text(r: &BackupReport, verbose: bool) {
    for w in &r.warnings {
        println!("Warning: {w}");
    }
    let database = &r.source.database;
    if verbose {
        for (f, p) in &r.file_pages {
            println!("Processed {p} pages for database '{database}', file '{f}' on file 1.");
        }
    } else {
        for v in &r.volumes {
            println!(
                "Processed {} pages for database '{database}', file '{}' on file 1.",
                v.pages,
                v.name.display()
            );
        }
    }
    println!(
        "BACKUP DATABASE successfully processed {} pages in {:.3} seconds ({:.3} MB/sec).",
        r.pages, r.seconds, r.mb_per_sec
    );
    if r.compressed || r.zero_frames > 0 {
        println!(
            "Stored {} of {} ({:.2}x){}.",
            human(r.stored_bytes),
            human(r.raw_bytes),
            r.raw_bytes as f64 / (r.stored_bytes.max(1)) as f64,
            if r.zero_frames > 0 {
                format!(", {} all-zero transfers kept as holes", r.zero_frames)
            } else {
                String::new()
            }
        );
    }
    match &r.change_map {
        Some(ChangeMap::Summaries {
            segments,
            live,
            sparse_files,
            listed_pages,
            vm_read_whole,
        }) => {
            println!(
                "Changed pages from the block summaries of {segments} WAL segment(s){}: {listed_pages} page(s) listed in {sparse_files} relation file(s) read; files new since the base read whole.",
                if *live {
                    " (the last one summarized from the server's pg_wal up to this backup's start)"
                } else {
                    ""
                }
            );
            if let Some(why) = vm_read_whole {
                println!("Visibility maps read whole: {why}.");
            }
        }
        Some(ChangeMap::LsnScan { reason }) => println!(
            "Changed pages found by reading every page of the base's relation files (LSN scan): {reason}."
        ),
        None => {}
    }
    if r.read_bytes != r.raw_bytes {
        println!(
            "Read {} from the source; the set holds {} of changed pages before compression.",
            human(r.read_bytes),
            human(r.raw_bytes)
        );
    }
    if r.damaged {
        println!(
            "The set is marked DAMAGED: {} page checksum failure(s) listed above.",
            r.checksum_failures
        );
    }
    if !r.discarded {
        println!(
            "Backup set {} on {} stripe(s).",
            r.set_id,
            r.config.devices.len()
        );
    }
    r.waits.print();
    if let Some(line) = adaptive_line(&r.adaptive_readers) {
        println!("{line}");
    }
    super::print_retries();
    if let Some(path) = &r.report {
        println!("Report written to {}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        a: BackupArgs,
    }

    #[test]
    fn options_default_to_the_command_lines_defaults() {
        let w =
            <Wrap as clap::Parser>::parse_from(["backup", "--source", "files:/x", "--to", "NUL"]);
        let want = BackupOptions {
            source: "files:/x".into(),
            to: vec!["NUL".into()],
            ..BackupOptions::default()
        };
        assert_eq!(w.a.options(), want);
    }
}
