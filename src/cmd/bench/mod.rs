//! `pagevault bench`: the I/O patterns a database puts on storage, measured.
//!
//! Each profile replays one row of the SQL Server I/O pattern table (log writes, random
//! data pages, bulk insert, read-ahead, backup, restore, CHECKDB) against one test file
//! in the directory to measure, one I/O at a time, for a fixed time, and reports MB/s,
//! IOPS and latency percentiles with a plain rating against stated rules of thumb.
//!
//! Reads and the large writes use O_DIRECT where the filesystem allows it, so the
//! figures are the storage's and not the page cache's; otherwise buffered I/O with
//! `posix_fadvise(DONTNEED)` after every read (and an fdatasync at the end of a write
//! profile, inside the timed window). Log writes are always buffered and followed by
//! an fdatasync each, as a database commits. The test file is filled once (so reads
//! hit real blocks and writes overwrite allocated ones) and removed at the end, also
//! on error and on Ctrl-C / SIGTERM.

mod file;
mod measure;
mod output;
mod profiles;
mod replay;

use super::print_json;
use crate::units::{self, human, mb_per_sec};
use anyhow::{anyhow, bail, Result};
use clap::builder::PossibleValuesParser;
use clap::Args;
use file::{filesystem, free_bytes, prepare, Removal};
use measure::round3;
use output::{print_table, profile_json};
use profiles::{spec, Spec, K};
use serde_json::{json, Value};
use std::io::IsTerminal;
use std::path::PathBuf;

fn bench_size(s: &str) -> Result<u64, String> {
    units::parse_in_range(s, 1, 1 << 44, "test file size", false)
}

fn duration(s: &str) -> Result<f64, String> {
    let d: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds (try 5 or 0.5)"))?;
    if !d.is_finite() || !(0.05..=3600.0).contains(&d) {
        return Err(format!(
            "duration {s} is out of range: allowed 0.05 to 3600 seconds"
        ));
    }
    Ok(d)
}

#[derive(Args)]
#[command(
    after_help = "Profiles (SQL Server's I/O patterns; all run when none is given):\n  \
oltp-log     sequential write, 512 B to 64 KiB, fdatasync after each write\n  \
oltp-data    random 8 KiB reads and writes, 70% reads\n  \
bulk-insert  sequential write, 8 KiB to 128 KiB\n  \
read-ahead   sequential read, 8 KiB to 256 KiB\n  \
backup       sequential 1 MiB reads and 1 MiB writes, alternating\n  \
restore      sequential 64 KiB writes\n  \
checkdb      sequential read, 8 KiB to 64 KiB\n\n\
Examples:\n  pagevault bench --path /var/lib/postgresql\n  \
pagevault bench --path /mnt/backup --profile backup --profile restore --size 4G --duration 10\n  \
pagevault bench --path /data --profile oltp-log,oltp-data --json"
)]
pub struct BenchArgs {
    /// Directory on the storage to measure (a test file is created there and removed).
    #[arg(long)]
    pub path: PathBuf,
    /// Profile to run; repeat it or separate names with commas. Default: all of them.
    #[arg(long = "profile", value_name = "NAME", value_delimiter = ',',
          value_parser = PossibleValuesParser::new(profiles::names()))]
    pub profiles: Vec<String>,
    /// Size of the test file (64M, 1G, 1GiB ...). Larger than the storage's caches gives
    /// truer figures; each profile needs a minimum (backup 16 MiB).
    #[arg(long, default_value = "1G", value_parser = bench_size)]
    pub size: u64,
    /// Seconds each profile runs (fractions allowed, 0.05 to 3600).
    #[arg(long, default_value = "5", value_parser = duration)]
    pub duration: f64,
    /// Buffered I/O with posix_fadvise(DONTNEED) instead of O_DIRECT (what the bench falls
    /// back to where the filesystem refuses O_DIRECT; PostgreSQL's own way of doing I/O).
    #[arg(long)]
    pub buffered: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn usage_error(msg: String) -> ! {
    clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{msg}\n")).exit()
}

pub fn run(a: BenchArgs) -> Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for p in &a.profiles {
        if !names.contains(&p.as_str()) {
            names.push(p.as_str());
        }
    }
    if names.is_empty() {
        names = profiles::names().collect();
    }
    let specs: Vec<&Spec> = names.iter().map(|n| spec(n)).collect();
    for s in &specs {
        if a.size < s.min_size() {
            usage_error(format!(
                "--size {} is too small for profile {}: it needs at least {} (16 of its largest I/O of {}, and 1 MiB)",
                human(a.size),
                s.name,
                human(s.min_size()),
                human(s.max_io())
            ));
        }
    }
    // Whole 64 KiB units, so every O_DIRECT I/O stays aligned up to the end of the file.
    let size = a.size / (64 * K) * (64 * K);

    let dir = &a.path;
    let md = std::fs::metadata(dir).map_err(|e| {
        anyhow!(
            "cannot use --path '{}': {e}; give an existing directory on the storage to measure",
            dir.display()
        )
    })?;
    if !md.is_dir() {
        bail!(
            "--path '{}' is not a directory; give a directory on the storage to measure",
            dir.display()
        );
    }
    if let Some(free) = free_bytes(dir) {
        if free < size + (64 << 20) {
            bail!(
                "not enough free space in '{}': the test file needs {} and 64 MiB to spare, {} are free; give a smaller --size",
                dir.display(),
                human(size),
                human(free)
            );
        }
    }
    let fs = filesystem(dir);
    let chatty = !a.json && std::io::stderr().is_terminal();

    let _signals = crate::interrupt::catch();
    let mut guard: Option<Removal> = None;
    if chatty {
        eprintln!(
            "bench: writing a {} test file in {} ...",
            human(size),
            dir.display()
        );
    }
    let (tf, prep_secs) = prepare(dir, size, !a.buffered, &mut guard)?;
    let file = tf.path.clone();
    let direct_io = tf.direct;
    let mut results = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        if chatty {
            eprintln!("bench: {} ({} s) ...", s.name, a.duration);
        }
        let m = tf.run(s, a.duration, 0x5EED + i as u64)?;
        results.push((*s, m));
    }
    drop(tf);
    drop(guard);
    let removed = !file.exists();
    let read_mode = if direct_io {
        "O_DIRECT"
    } else {
        "buffered + fadvise DONTNEED"
    };
    let why = if direct_io {
        "the page cache is bypassed"
    } else if a.buffered {
        "--buffered"
    } else {
        "this filesystem refuses O_DIRECT"
    };

    if a.json {
        let profiles: Vec<Value> = results.iter().map(|(s, m)| profile_json(s, m)).collect();
        print_json(&json!({
            "path": dir.display().to_string(),
            "filesystem": fs,
            "file_size": size,
            "direct_io": direct_io,
            "read_io": read_mode,
            "read_io_reason": why,
            "duration_s": a.duration,
            "queue_depth": 1,
            "mb": 1_048_576,
            "prepare": {
                "bytes": size,
                "seconds": (prep_secs * 1e6).round() / 1e6,
                "mb_per_sec": round3(mb_per_sec(size, prep_secs)),
            },
            "file": file.display().to_string(),
            "test_file_removed": removed,
            "profiles": profiles,
        }));
        return Ok(());
    }
    let mode = format!("{read_mode} ({why})");
    print_table(dir, &fs, size, a.duration, &mode, prep_secs, &results);
    Ok(())
}
