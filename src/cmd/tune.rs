//! `pagevault tune`: parses, runs ops::tune, prints what each trial measured and the
//! table of the points.

use super::printed_json;
use crate::device::object::StoreOptions;
use crate::ops::tune::{human_flag, Measured, Point, TuneOptions, TuneReport, TuneWatch};
use crate::units::{human, parse_size};
use anyhow::Result;
use clap::Args;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault tune --source files:/data\n  pagevault tune --source 'postgres://postgres@127.0.0.1/postgres?pgdata=/pg/data' --to /backup/scratch --codecs none,lz4,zstd:1\n  pagevault tune --source sqlite:app.db --sample 1G --repeat 5 --memory-budget 256M --json"
)]
pub struct TuneArgs {
    /// What to back up (as for backup): files:PATH, sqlite:PATH or postgres://...
    #[arg(long)]
    pub source: String,
    /// Where trial backups go: NUL (the read side and the CPU only), a directory (trial
    /// stripes are written there and removed), or s3://BUCKET/PREFIX/,
    /// azure://CONTAINER/PREFIX/ or gs://BUCKET/PREFIX/ (uploads are aborted, nothing
    /// stays).
    #[arg(long, default_value = "NUL")]
    pub to: String,
    /// How much of the source each trial reads: the same share of every file. Trials
    /// shorter than a second or so are too noisy to rank fast devices.
    #[arg(long, default_value = "1G", value_parser = parse_size_arg)]
    pub sample: u64,
    /// Trials per configuration (median and spread are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Configurations whose buffers need more memory are not tried.
    #[arg(long, default_value = "512M", value_parser = parse_size_arg)]
    pub memory_budget: u64,
    /// Codecs to consider (comma separated): none, lz4, zstd, zstd:LEVEL.
    #[arg(long, default_value = "none,lz4")]
    pub codecs: String,
    /// Drop the sample from the page cache before every trial (posix_fadvise), so reads
    /// come from the device as in a real backup. Default: on when the source is larger
    /// than the machine's memory (its backup reads from the device), else off.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub cold: Option<super::Switch>,
    /// PostgreSQL data directory, when the URL has no ?pgdata=.
    #[arg(long)]
    pub pgdata: Option<std::path::PathBuf>,
    /// PostgreSQL: read the password from the first line of FILE (as for backup).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<std::path::PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Prints each trial as the search goes (text output only).
struct Show {
    repeat: u32,
}

impl TuneWatch for Show {
    fn sampled(&mut self, sampled: u64, source: u64, files: usize, volumes: usize, grid: usize) {
        println!(
            "Sampled {} of {} ({:.1}%) from {files} files on {volumes} volume(s); {} per configuration, {grid} grid points.",
            human(sampled),
            human(source),
            100.0 * sampled as f64 / source as f64,
            match self.repeat {
                1 => "1 trial".to_string(),
                n => format!("{n} trials"),
            },
        );
    }
    fn tried(&mut self, m: &Measured) {
        println!(
            "  tried {:<58} {:>9.1} MB/s (spread {:>4.0}%)",
            describe(&m.point),
            m.median,
            m.spread * 100.0
        );
    }
}

pub fn run(a: TuneArgs, store: &StoreOptions) -> Result<()> {
    let o = TuneOptions {
        source: a.source,
        to: a.to,
        sample: a.sample,
        repeat: a.repeat,
        memory_budget: a.memory_budget,
        codecs: a
            .codecs
            .split(',')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect(),
        cold: a.cold.map(|c| c.on()),
        pgdata: a.pgdata,
        password_file: a.password_file,
        store: store.clone(),
    };
    if a.json {
        printed_json(&crate::ops::tune::tune(&o, &mut ())?, true);
    } else {
        let r = crate::ops::tune::tune(&o, &mut Show { repeat: o.repeat })?;
        print_table(&r);
    }
    Ok(())
}

fn print_table(s: &TuneReport) {
    println!();
    for w in &s.warnings {
        println!("Warning: {w}");
    }
    println!(
        "{:<3} {:>7} {:>5} {:>7} {:>8} {:>7} {:<8} {:>7} {:>9} {:>9} {:>9} {:>7} {:>6}",
        "",
        "readers",
        "depth",
        "buffers",
        "transfer",
        "stripes",
        "codec",
        "threads",
        "median",
        "min",
        "max",
        "spread",
        "ratio"
    );
    for m in &s.points {
        let tag = if m.point == s.recommended.point {
            "*"
        } else if m.point == s.default_point {
            "d"
        } else {
            ""
        };
        println!(
                "{:<3} {:>7} {:>5} {:>7} {:>8} {:>7} {:<8} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>6.0}% {:>5.2}x",
                tag,
                m.point.readers,
                m.point.read_depth,
                m.buffer_count,
                human_flag(m.point.transfer_size),
                m.point.stripes,
                m.point.codec,
                m.point.threads,
                m.median,
                m.min,
                m.max,
                m.spread * 100.0,
                m.compression_ratio
            );
    }
    println!("(MB/s of source bytes read; * recommended, d the defaults; ratio = compression)");
    println!(
        "Measured {} of {} grid points ({:.0}%), {} over the memory budget skipped, in {:.1} s.",
        s.points.len(),
        s.grid_points,
        100.0 * s.points.len() as f64 / s.grid_points as f64,
        s.skipped_over_budget,
        s.seconds
    );
    println!(
        "Recommended: {}: {:.1} MB/s median against {:.1} MB/s with the defaults ({:.2}x), {} of buffers.",
        s.flags,
        s.recommended.median,
        s.default.median,
        s.recommended.median / s.default.median.max(1e-9),
        human(s.recommended.memory_bytes)
    );
    if !s.cold {
        println!("Trials read the sample from the page cache after a warm-up; add --cold to read it from the device each time.");
    }
    if let Some(n) = &s.noise {
        println!("Not told apart: {n}.");
    }
}

fn describe(p: &Point) -> String {
    format!(
        "readers {} depth {} buffers x{} transfer {} stripes {} {} threads {}",
        p.readers,
        p.read_depth,
        p.buffer_factor,
        human_flag(p.transfer_size),
        p.stripes,
        p.codec,
        p.threads
    )
}
