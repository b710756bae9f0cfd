//! `tune`: the BUFFERCOUNT / MAXTRANSFERSIZE / readers / stripes / codec / threads
//! sweep a DBA would run by hand for days, run on a sample of the source and searched
//! (coordinate descent from the defaults), not brute-forced.

use crate::device::{self, CreateHint};
use crate::engine::backup::{self, Params, ReadFile};
use crate::engine::codec::CodecSpec;
use crate::engine::default_threads;
use crate::engine::stats::Progress;
use crate::ops::backup::{buffer_memory, pipeline_min, plan_of, Volumes};
use crate::units::{human, mb_per_sec};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `tune` measures and within which limits.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// What to back up (as for backup).
    pub source: String,
    /// Where trial backups go: NUL, a directory or an object-store prefix.
    pub to: String,
    /// Bytes each trial reads: the same share of every file.
    pub sample: u64,
    /// Trials per configuration.
    pub repeat: u32,
    /// Configurations whose buffers need more memory are not tried.
    pub memory_budget: u64,
    /// Codecs to consider; the first is the default's.
    pub codecs: Vec<String>,
    /// Drop the sample from the page cache before every trial; None: when the source
    /// is larger than memory (a backup of it reads from the device).
    pub cold: Option<bool>,
    pub pgdata: Option<PathBuf>,
    /// PostgreSQL: a file whose first line is the password.
    pub password_file: Option<PathBuf>,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            source: String::new(),
            to: "NUL".into(),
            sample: 1 << 30,
            repeat: 3,
            memory_budget: 512 << 20,
            codecs: vec!["none".into(), "lz4".into()],
            cold: None,
            pgdata: None,
            password_file: None,
            store: Default::default(),
        }
    }
}

/// What `tune` found (what `--json` prints).
#[derive(Debug, Serialize)]
pub struct TuneReport {
    pub command: &'static str,
    pub source_bytes: u64,
    pub sampled_bytes: u64,
    pub sampled_files: usize,
    pub grid_points: usize,
    pub measured_points: usize,
    pub skipped_over_budget: usize,
    pub repeat: u32,
    pub seconds: f64,
    /// The defaults, measured.
    pub default: Measured,
    pub recommended: Measured,
    /// The backup flags that give the recommended point.
    pub flags: String,
    /// Every point measured, fastest first.
    pub points: Vec<Measured>,
    /// How the source was reached, when the user should know (a password file ignored).
    pub warnings: Vec<String>,
    /// Trials read from the device (the page cache dropped before each).
    pub cold: bool,
    /// Set when the trials' spread is as large as the gain they rank: the
    /// recommendation is not told apart from the defaults.
    pub noise: Option<String>,
    #[serde(skip)]
    pub default_point: Point,
}

/// Told of the search as it goes (the command prints it).
pub trait TuneWatch {
    /// The sample: bytes sampled, source bytes, files, volumes, grid points.
    fn sampled(
        &mut self,
        _sampled: u64,
        _source: u64,
        _files: usize,
        _volumes: usize,
        _grid: usize,
    ) {
    }
    /// A point measured for the first time.
    fn tried(&mut self, _m: &Measured) {}
}

impl TuneWatch for () {}

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
                missing_ok: f.missing_ok,
                ..ReadFile::new(f.id, f.path.clone(), want.min(f.size), f.volume)
            }
        })
        .collect()
}

fn drop_cache(plan: &[ReadFile]) {
    for f in plan {
        if let Ok(file) = std::fs::File::open(f.path.full()) {
            crate::sys::fadvise(&file, 0, 0, crate::sys::Advice::DontNeed);
        }
    }
}

/// Where trial stripes go.
fn trial_devices(
    to: &str,
    n: usize,
    o: &crate::device::object::StoreOptions,
) -> Result<Vec<Box<dyn device::Device>>> {
    if to.eq_ignore_ascii_case("nul") || to.eq_ignore_ascii_case("nul:") {
        return (0..n).map(|_| device::parse("NUL", o)).collect();
    }
    let pid = std::process::id();
    if to.contains("://") {
        let base = to.trim_end_matches('/');
        return (0..n)
            .map(|i| device::parse(&format!("{base}/pagevault-tune-{pid}-{i}.pv"), o))
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
                o,
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
    store: &'a crate::device::object::StoreOptions,
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
            direct_read_depth: p.read_depth,
            cached_read_depth: None,
            huge_pages: false,
            page_size: self.page_size,
            // The grid sets the reads in flight itself.
            adaptive: false,
            seal: None,
            sign: None,
            first_seq: 0,
            max_rate: None,
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
        let devices = trial_devices(self.to, p.stripes, self.store)?;
        let raw: u64 = self.plan.iter().map(|f| f.size).sum();
        let hint = CreateHint {
            expected_bytes: raw / p.stripes as u64,
            transfer_size: p.transfer_size,
            direct: true,
        };
        let sinks = crate::set::write::create(&devices, &hint)?;
        let progress = Progress::default();
        let t0 = Instant::now();
        let out = backup::run(
            self.plan,
            self.volumes,
            sinks.into_iter().map(|s| (s, vec![])).collect(),
            &params,
            self.filter,
            None,
            &progress,
            &crate::engine::Abort::default(),
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

/// When the trials' spread is at least the gain of the recommendation over the
/// defaults, the ranking is noise: say so and how to measure better.
fn noise(default: &Measured, best: &Measured) -> Option<String> {
    let gain = best.median / default.median.max(1e-9) - 1.0;
    let spread = default.spread.max(best.spread);
    (gain <= spread).then(|| {
        format!(
            "the trials' spread ({:.0}%) is not below the gain of the recommendation over the defaults ({:.0}%): \
             the ranking may be noise; run again with a larger --sample or --repeat 5",
            spread * 100.0,
            gain * 100.0
        )
    })
}

/// Measures the defaults, then searches the grid one dimension at a time.
pub fn tune(o: &TuneOptions, watch: &mut dyn TuneWatch) -> Result<TuneReport> {
    let started = Instant::now();
    if o.codecs.is_empty() {
        bail!("--codecs names no codec");
    }
    for c in &o.codecs {
        CodecSpec::parse(c)?;
    }
    let mut src = crate::source::parse(
        &o.source,
        &crate::source::Options {
            page_size: 8192,
            spool: None,
            pgdata: o.pgdata.clone(),
            label: "pagevault tune".into(),
            continue_after_error: true,
            archive_timeout: 60,
            base: None,
            password_file: o.password_file.clone(),
            primary: None,
            archived: None,
        },
    )?;
    let mut entries = src.prepare()?;
    let info = src.info();
    let result = (|| {
        let mut vols = Volumes::default();
        let (plan, _) = plan_of(&mut entries, 0, &mut vols, info.kind);
        let volumes = vols.names.len().max(1);
        let source_bytes: u64 = plan.iter().map(|f| f.size).sum();
        if source_bytes == 0 {
            bail!("the source '{}' holds no data to measure", info.location);
        }
        let sample = sample_plan(&plan, o.sample);
        let filter = src.filter(&entries);
        let cold = o
            .cold
            .unwrap_or_else(|| source_bytes > crate::sys::memory_total());
        let trial = Trial {
            plan: &sample,
            volumes,
            filter: filter.as_deref(),
            page_size: src.page_size() as usize,
            to: &o.to,
            store: &o.store,
            cold,
        };
        let (grid, default) = grid_and_defaults(&o.codecs);
        let sampled: u64 = sample.iter().map(|f| f.size).sum();
        watch.sampled(sampled, source_bytes, sample.len(), volumes, grid.size());
        // Warm-up: the first read of the sample is not a fair trial.
        trial.run(&default).context("the warm-up trial failed")?;
        let mut search = Search {
            trial: &trial,
            o,
            seen: HashMap::new(),
            skipped: 0,
            watch,
        };
        let (base, best) = search.descend(&grid, &default)?;
        let mut all: Vec<Measured> = search.seen.into_values().collect();
        all.sort_by(|x, y| y.median.total_cmp(&x.median));
        let noise = noise(&base, &best);
        Ok(TuneReport {
            command: "tune",
            source_bytes,
            sampled_bytes: sampled,
            sampled_files: sample.len(),
            grid_points: grid.size(),
            measured_points: all.len(),
            skipped_over_budget: search.skipped,
            repeat: o.repeat,
            seconds: started.elapsed().as_secs_f64(),
            flags: recommended_flags(&best),
            default: base,
            recommended: best,
            points: all,
            warnings: src.warnings(),
            cold,
            noise,
            default_point: default,
        })
    })();
    let _ = src.finish(false);
    result
}

/// The points measured so far, and the memory budget's refusals.
struct Search<'a> {
    trial: &'a Trial<'a>,
    o: &'a TuneOptions,
    seen: HashMap<Point, Measured>,
    skipped: usize,
    watch: &'a mut dyn TuneWatch,
}

impl Search<'_> {
    /// Measures `p` (`repeat` trials) unless it is over the budget or measured already.
    fn measure(&mut self, p: &Point) -> Result<Option<Measured>> {
        if let Some(m) = self.seen.get(p) {
            return Ok(Some(m.clone()));
        }
        let memory = self.trial.memory(p)?;
        if memory > self.o.memory_budget {
            self.skipped += 1;
            return Ok(None);
        }
        let mut rates = vec![];
        let mut ratio = 1.0;
        for _ in 0..self.o.repeat {
            let (r, c) = self.trial.run(p)?;
            rates.push(r);
            ratio = c;
        }
        let mut sorted = rates.clone();
        let med = median(&mut sorted);
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let m = Measured {
            point: p.clone(),
            buffer_count: self.trial.params(p)?.buffer_count,
            memory_bytes: memory,
            mb_per_sec: rates,
            median: med,
            min,
            max,
            spread: if med > 0.0 { (max - min) / med } else { 0.0 },
            compression_ratio: ratio,
        };
        self.watch.tried(&m);
        self.seen.insert(p.clone(), m.clone());
        Ok(Some(m))
    }

    /// Coordinate descent from `default`: one dimension at a time, keep what wins;
    /// repeat until a pass changes nothing. Returns the defaults measured and the best.
    fn descend(&mut self, grid: &Grid, default: &Point) -> Result<(Measured, Measured)> {
        let base = self.measure(default)?.ok_or_else(|| {
            anyhow!(
                "the default configuration needs more than --memory-budget {}",
                human(self.o.memory_budget)
            )
        })?;
        let mut best = base.clone();
        for _pass in 0..3 {
            let mut moved = false;
            for dim in DIMS {
                for p in grid.along(&best.point, dim) {
                    if let Some(m) = self.measure(&p)? {
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
        Ok((base, best))
    }
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
        depth: vec![1, 2, 4, 8, 16, 32, 64],
        factor: vec![1, 2, 4],
        transfer: vec![256 << 10, 1 << 20, 4 << 20, 16 << 20],
        stripes: vec![1, 2, 4],
        codecs: codecs.to_vec(),
        threads,
    };
    let default = Point {
        readers: 1,
        read_depth: 16,
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

/// A transfer size as the flag takes it (1M, 256K).
pub fn human_flag(n: usize) -> String {
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
        let f = |id, size| ReadFile::new(id, PathBuf::from("x"), size, 0);
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
