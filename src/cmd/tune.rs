//! `pagevault tune`: the BUFFERCOUNT / MAXTRANSFERSIZE / readers / stripes / codec /
//! threads sweep a DBA would run by hand for days, run on a sample of the source and
//! searched (coordinate descent from the defaults), not brute-forced.

use super::print_json;
use crate::device::{self, CreateHint};
use crate::engine::backup::{self, Params, ReadFile};
use crate::engine::codec::CodecSpec;
use crate::engine::default_threads;
use crate::engine::stats::Progress;
use crate::ops::backup::{buffer_memory, pipeline_min, plan_of, Volumes};
use crate::units::{human, mb_per_sec, parse_size};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault tune --source files:/data\n  pagevault tune --source 'postgres://postgres@127.0.0.1/postgres?pgdata=/pg/data' --to /backup/scratch --codecs none,lz4,zstd:1\n  pagevault tune --source sqlite:app.db --sample 1G --repeat 5 --memory-budget 256M --json"
)]
pub struct TuneArgs {
    /// What to back up (as for backup): files:PATH, sqlite:PATH or postgres://...
    #[arg(long)]
    pub source: String,
    /// Where trial backups go: NUL (the read side and the CPU only), a directory (trial
    /// stripes are written there and removed), or s3://BUCKET/PREFIX/ or
    /// azure://CONTAINER/PREFIX/ (uploads are aborted, nothing stays).
    #[arg(long, default_value = "NUL")]
    pub to: String,
    /// How much of the source each trial reads: the same share of every file.
    #[arg(long, default_value = "256M", value_parser = parse_size_arg)]
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
    /// come from the device as in a real backup.
    #[arg(long)]
    pub cold: bool,
    /// PostgreSQL data directory, when the URL has no ?pgdata=.
    #[arg(long)]
    pub pgdata: Option<std::path::PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// One configuration of the grid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Point {
    pub readers: usize,
    pub read_depth: usize,
    /// Buffers as a multiple of what the pipeline needs (1, 2 or 4).
    pub buffer_factor: usize,
    pub transfer_size: usize,
    pub stripes: usize,
    pub codec: String,
    pub threads: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    #[serde(flatten)]
    pub point: Point,
    pub buffer_count: usize,
    pub memory_bytes: u64,
    pub mb_per_sec: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// (max - min) / median.
    pub spread: f64,
    pub compression_ratio: f64,
}

const DIMS: [&str; 7] = [
    "threads",
    "codec",
    "transfer_size",
    "readers",
    "read_depth",
    "buffer_factor",
    "stripes",
];

struct Grid {
    readers: Vec<usize>,
    depth: Vec<usize>,
    factor: Vec<usize>,
    transfer: Vec<usize>,
    stripes: Vec<usize>,
    codecs: Vec<String>,
    threads: Vec<usize>,
}

impl Grid {
    fn size(&self) -> usize {
        self.readers.len()
            * self.depth.len()
            * self.factor.len()
            * self.transfer.len()
            * self.stripes.len()
            * self.codecs.len()
            * self.threads.len()
    }

    /// The points that differ from `p` in dimension `dim` only.
    fn along(&self, p: &Point, dim: &str) -> Vec<Point> {
        // One point per value of `field`, the rest as in `p`.
        fn each<T: Clone>(p: &Point, vals: &[T], set: impl Fn(&mut Point, T)) -> Vec<Point> {
            vals.iter()
                .map(|v| {
                    let mut q = p.clone();
                    set(&mut q, v.clone());
                    q
                })
                .collect()
        }
        match dim {
            "readers" => each(p, &self.readers, |q, v| q.readers = v),
            "read_depth" => each(p, &self.depth, |q, v| q.read_depth = v),
            "buffer_factor" => each(p, &self.factor, |q, v| q.buffer_factor = v),
            "transfer_size" => each(p, &self.transfer, |q, v| q.transfer_size = v),
            "stripes" => each(p, &self.stripes, |q, v| q.stripes = v),
            "codec" => each(p, &self.codecs, |q, v| q.codec = v),
            "threads" => each(p, &self.threads, |q, v| q.threads = v),
            _ => unreachable!(),
        }
    }
}

/// The same share of every file, in 64 KiB steps (small files whole).
fn sample_plan(plan: &[ReadFile], sample: u64) -> Vec<ReadFile> {
    let total: u64 = plan.iter().map(|f| f.size).sum();
    let share = (sample as f64 / total.max(1) as f64).min(1.0);
    plan.iter()
        .filter(|f| f.size > 0)
        .map(|f| {
            let want = ((f.size as f64 * share).ceil() as u64).next_multiple_of(64 << 10);
            ReadFile {
                id: f.id,
                path: f.path.clone(),
                size: want.min(f.size),
                volume: f.volume,
                missing_ok: f.missing_ok,
            }
        })
        .collect()
}

fn drop_cache(plan: &[ReadFile]) {
    for f in plan {
        if let Ok(file) = std::fs::File::open(&f.path) {
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
    }
}

/// Where trial stripes go.
fn trial_devices(to: &str, n: usize) -> Result<Vec<Box<dyn device::Device>>> {
    if to.eq_ignore_ascii_case("nul") || to.eq_ignore_ascii_case("nul:") {
        return (0..n).map(|_| device::parse("NUL")).collect();
    }
    let pid = std::process::id();
    if to.contains("://") {
        let base = to.trim_end_matches('/');
        return (0..n)
            .map(|i| device::parse(&format!("{base}/pagevault-tune-{pid}-{i}.pv")))
            .collect();
    }
    if !Path::new(to).is_dir() {
        bail!("--to '{to}': name NUL, an existing directory or an object-store prefix");
    }
    (0..n)
        .map(|i| {
            device::parse(
                &Path::new(to)
                    .join(format!("pagevault-tune-{pid}-{i}.pv"))
                    .display()
                    .to_string(),
            )
        })
        .collect()
}

struct Trial<'a> {
    plan: &'a [ReadFile],
    volumes: usize,
    filter: Option<&'a dyn backup::ChunkFilter>,
    page_size: usize,
    to: &'a str,
    cold: bool,
}

impl Trial<'_> {
    fn params(&self, p: &Point) -> Result<Params> {
        let mut params = Params {
            buffer_count: 0,
            transfer_size: p.transfer_size,
            block_size: 4096,
            readers_per_volume: p.readers,
            read_depth: p.read_depth,
            threads: p.threads,
            codec: CodecSpec::parse(&p.codec)?,
            direct_io: false,
            page_size: self.page_size,
            // The grid sets the reads in flight itself.
            adaptive: false,
        };
        let need = pipeline_min(
            self.volumes * p.readers * p.read_depth,
            p.threads,
            p.stripes,
        );
        params.buffer_count = need * p.buffer_factor;
        Ok(params)
    }

    fn memory(&self, p: &Point) -> Result<u64> {
        Ok(buffer_memory(&self.params(p)?))
    }

    /// One backup of the sample; returns MB/s and the compression ratio.
    fn run(&self, p: &Point) -> Result<(f64, f64)> {
        let params = self.params(p)?;
        if self.cold {
            drop_cache(self.plan);
        }
        let devices = trial_devices(self.to, p.stripes)?;
        let raw: u64 = self.plan.iter().map(|f| f.size).sum();
        let hint = CreateHint {
            expected_bytes: raw / p.stripes as u64,
            transfer_size: p.transfer_size,
        };
        let sinks = crate::set::write::create(&devices, &hint)?;
        let progress = Progress::default();
        let t0 = Instant::now();
        let out = backup::run(
            self.plan,
            self.volumes,
            sinks,
            vec![vec![]; p.stripes],
            &params,
            self.filter,
            &progress,
        )?;
        let secs = t0.elapsed().as_secs_f64();
        // Trials leave nothing behind.
        crate::set::write::abort(out.stripes);
        Ok((
            mb_per_sec(out.raw_bytes, secs),
            out.raw_bytes as f64 / out.stored_bytes.max(1) as f64,
        ))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Picks the best measured point: the highest median; a point is only preferred over
/// the incumbent when it beats it by more than the incumbent's spread (noise).
fn better(cand: &Measured, best: &Measured) -> bool {
    cand.median > best.median * (1.0 + best.spread.min(0.5) / 2.0)
}

pub fn run(a: TuneArgs) -> Result<()> {
    let started = Instant::now();
    let codecs: Vec<String> = a
        .codecs
        .split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    for c in &codecs {
        CodecSpec::parse(c)?;
    }
    if codecs.is_empty() {
        bail!("--codecs names no codec");
    }
    let mut src = crate::source::parse(
        &a.source,
        &crate::source::Options {
            page_size: 8192,
            spool: None,
            pgdata: a.pgdata.clone(),
            label: "pagevault tune".into(),
            continue_after_error: true,
            archive_timeout: 60,
            base: None,
        },
    )?;
    let entries = src.prepare()?;
    let info = src.info();
    let result = (|| -> Result<serde_json::Value> {
        let mut vols = Volumes::default();
        let (plan, _) = plan_of(&entries, 0, &mut vols, &info.kind);
        let volumes = vols.names.len().max(1);
        let source_bytes: u64 = plan.iter().map(|f| f.size).sum();
        if source_bytes == 0 {
            bail!("the source '{}' holds no data to measure", a.source);
        }
        let sample = sample_plan(&plan, a.sample);
        let sampled: u64 = sample.iter().map(|f| f.size).sum();
        let filter = src.filter(&entries);
        let trial = Trial {
            plan: &sample,
            volumes,
            filter: filter.as_deref(),
            page_size: src.page_size() as usize,
            to: &a.to,
            cold: a.cold,
        };
        let (grid, default) = grid_and_defaults(&codecs);
        if !a.json {
            println!(
                "Sampled {} of {} ({:.1}%) from {} files on {volumes} volume(s); {} per configuration, {} grid points.",
                human(sampled),
                human(source_bytes),
                100.0 * sampled as f64 / source_bytes as f64,
                sample.len(),
                if a.repeat == 1 { "1 trial".to_string() } else { format!("{} trials", a.repeat) },
                grid.size()
            );
        }
        // Warm-up: the first read of the sample is not a fair trial.
        trial.run(&default).context("the warm-up trial failed")?;
        let mut seen: HashMap<Point, Measured> = HashMap::new();
        let mut skipped = 0usize;
        let mut measure =
            |p: &Point, seen: &mut HashMap<Point, Measured>| -> Result<Option<Measured>> {
                if let Some(m) = seen.get(p) {
                    return Ok(Some(m.clone()));
                }
                let memory = trial.memory(p)?;
                if memory > a.memory_budget {
                    skipped += 1;
                    return Ok(None);
                }
                let mut rates = vec![];
                let mut ratio = 1.0;
                for _ in 0..a.repeat {
                    let (r, c) = trial.run(p)?;
                    rates.push(r);
                    ratio = c;
                }
                let mut sorted = rates.clone();
                let med = median(&mut sorted);
                let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
                let m = Measured {
                    point: p.clone(),
                    buffer_count: trial.params(p)?.buffer_count,
                    memory_bytes: memory,
                    mb_per_sec: rates,
                    median: med,
                    min,
                    max,
                    spread: if med > 0.0 { (max - min) / med } else { 0.0 },
                    compression_ratio: ratio,
                };
                if !a.json {
                    println!(
                        "  tried {:<58} {:>9.1} MB/s (spread {:>4.0}%)",
                        describe(p),
                        med,
                        m.spread * 100.0
                    );
                }
                seen.insert(p.clone(), m.clone());
                Ok(Some(m))
            };
        let base = measure(&default, &mut seen)?.ok_or_else(|| {
            anyhow!(
                "the default configuration needs more than --memory-budget {}",
                human(a.memory_budget)
            )
        })?;
        let mut best = base.clone();
        // Coordinate descent: one dimension at a time, keep what wins; repeat until a
        // pass changes nothing.
        for _pass in 0..3 {
            let mut moved = false;
            for dim in DIMS {
                for p in grid.along(&best.point, dim) {
                    if let Some(m) = measure(&p, &mut seen)? {
                        if better(&m, &best) {
                            best = m;
                            moved = true;
                        }
                    }
                }
            }
            if !moved {
                break;
            }
        }
        let mut all: Vec<Measured> = seen.into_values().collect();
        all.sort_by(|x, y| y.median.total_cmp(&x.median));
        let flags = recommended_flags(&best);
        let secs = started.elapsed().as_secs_f64();
        if !a.json {
            let summary = Summary {
                all: &all,
                best: &best,
                base: &base,
                default: &default,
                grid_points: grid.size(),
                skipped,
                secs,
                flags: &flags,
                cold: a.cold,
            };
            print_table(&summary);
        }
        Ok(json!({
            "command": "tune",
            "source_bytes": source_bytes,
            "sampled_bytes": sampled,
            "sampled_files": sample.len(),
            "grid_points": grid.size(),
            "measured_points": all.len(),
            "skipped_over_budget": skipped,
            "repeat": a.repeat,
            "seconds": secs,
            "default": base,
            "recommended": best,
            "flags": flags,
            "points": all,
        }))
    })();
    let _ = src.finish(false);
    let v = result?;
    if a.json {
        print_json(&v);
    }
    Ok(())
}

/// The grid `tune` searches and the defaults it starts from.
fn grid_and_defaults(codecs: &[String]) -> (Grid, Point) {
    let cores = default_threads();
    let mut threads: Vec<usize> = vec![1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&t| t <= cores)
        .collect();
    if !threads.contains(&cores) {
        threads.push(cores);
    }
    let grid = Grid {
        readers: vec![1, 2, 4],
        depth: vec![1, 2, 4, 8],
        factor: vec![1, 2, 4],
        transfer: vec![256 << 10, 1 << 20, 4 << 20],
        stripes: vec![1, 2, 4],
        codecs: codecs.to_vec(),
        threads,
    };
    let default = Point {
        readers: 1,
        read_depth: 4,
        buffer_factor: 1,
        transfer_size: 1 << 20,
        stripes: 1,
        codec: codecs[0].clone(),
        threads: cores,
    };
    (grid, default)
}

/// The backup flags that give the best point.
fn recommended_flags(best: &Measured) -> String {
    format!(
        "--readers {} --read-depth {} --buffer-count {} --max-transfer-size {} --threads {} --compress {}{}",
        best.point.readers,
        best.point.read_depth,
        best.buffer_count,
        human_flag(best.point.transfer_size),
        best.point.threads,
        best.point.codec,
        if best.point.stripes > 1 {
            format!(" and {} stripes (--to per stripe, or --stripes {} with --repo)", best.point.stripes, best.point.stripes)
        } else {
            String::new()
        }
    )
}

/// What the text table shows.
struct Summary<'a> {
    all: &'a [Measured],
    best: &'a Measured,
    base: &'a Measured,
    default: &'a Point,
    grid_points: usize,
    skipped: usize,
    secs: f64,
    flags: &'a str,
    cold: bool,
}

fn print_table(s: &Summary) {
    println!();
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
    for m in s.all {
        let tag = if m.point == s.best.point {
            "*"
        } else if m.point == *s.default {
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
        s.all.len(),
        s.grid_points,
        100.0 * s.all.len() as f64 / s.grid_points as f64,
        s.skipped,
        s.secs
    );
    println!(
        "Recommended: {}: {:.1} MB/s median against {:.1} MB/s with the defaults ({:.2}x), {} of buffers.",
        s.flags,
        s.best.median,
        s.base.median,
        s.best.median / s.base.median.max(1e-9),
        human(s.best.memory_bytes)
    );
    if !s.cold {
        println!("Trials read the sample from the page cache after a warm-up; add --cold to read it from the device each time.");
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

fn human_flag(n: usize) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else {
        format!("{}K", n >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_takes_the_same_share_of_every_file() {
        let f = |id, size| ReadFile {
            id,
            path: "x".into(),
            size,
            volume: 0,
            missing_ok: false,
        };
        let plan = vec![f(0, 100 << 20), f(1, 10 << 20), f(2, 1000), f(3, 0)];
        let s = sample_plan(&plan, 11 << 20);
        assert_eq!(s.len(), 3, "empty files are skipped");
        assert_eq!(s[0].size, 10 << 20);
        assert_eq!(s[1].size, 1 << 20);
        assert_eq!(s[2].size, 1000, "small files whole");
        let all = sample_plan(&plan, 1 << 40);
        assert_eq!(all[0].size, 100 << 20);
    }

    #[test]
    fn noise_does_not_move_the_recommendation() {
        let m = |median, spread| Measured {
            point: Point {
                readers: 1,
                read_depth: 1,
                buffer_factor: 1,
                transfer_size: 1,
                stripes: 1,
                codec: "none".into(),
                threads: 1,
            },
            buffer_count: 1,
            memory_bytes: 1,
            mb_per_sec: vec![],
            median,
            min: 0.0,
            max: 0.0,
            spread,
            compression_ratio: 1.0,
        };
        assert!(!better(&m(104.0, 0.0), &m(100.0, 0.1)));
        assert!(better(&m(106.0, 0.0), &m(100.0, 0.1)));
    }
}
