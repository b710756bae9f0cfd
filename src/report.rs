//! `--report FILE.html`: a sampler that snapshots the engine's live counters every
//! 250 ms, and one self-contained page drawn from the samples (inline SVG, the raw
//! series embedded as JSON, no network needed to view it).

use crate::engine::stats::{Counts, Live, Snapshot};
use crate::units::human;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const INTERVAL: Duration = Duration::from_millis(250);
/// Pool occupancy changes every transfer: it is read this often and averaged.
const TICK: Duration = Duration::from_millis(10);

/// Value parser of `--report`: the file must be creatable, known before any work starts.
pub fn writable_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_dir() {
        return Err(format!(
            "report '{s}' is a directory; name a file such as '{}'",
            p.join("report.html").display()
        ));
    }
    let name = p
        .file_name()
        .ok_or_else(|| format!("report '{s}' names no file"))?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "directory '{}' of report '{s}' does not exist; create it first",
            dir.display()
        ));
    }
    // Creating a file is the only sure test (root ignores modes; read-only mounts).
    let probe = tmp_name(&dir, name);
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(p)
        }
        Err(e) => Err(format!(
            "cannot write report '{s}' in '{}': {e}",
            dir.display()
        )),
    }
}

fn tmp_name(dir: &Path, name: &OsStr) -> PathBuf {
    dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ))
}

struct Sample {
    t: f64,
    snap: Snapshot,
    cpu: f64,
    /// Pool buffers in use over the interval: mean and peak of the ticks.
    pool_mean: f64,
    pool_peak: u64,
}

/// Process CPU time (user + system, every thread) in seconds.
fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Samples `Live` every 250 ms on its own thread until `finish`.
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    pub fn start(live: Arc<Live>) -> Sampler {
        let (stop, wake) = mpsc::channel::<()>();
        let t0 = Instant::now();
        let take = move |live: &Live, ticks: &mut (u64, u64, u64)| {
            let snap = live.snapshot();
            let (sum, n, peak) = std::mem::take(ticks);
            Sample {
                t: t0.elapsed().as_secs_f64(),
                cpu: cpu_seconds(),
                pool_mean: (sum + snap.pool_in_use) as f64 / (n + 1) as f64,
                pool_peak: peak.max(snap.pool_in_use),
                snap,
            }
        };
        // The baseline is taken here, not on the thread: work may start before the
        // thread first runs, and every byte must fall in some interval.
        let first = take(&live, &mut (0, 0, 0));
        let handle = std::thread::spawn(move || {
            // Pool ticks since the last sample: sum, count, peak.
            let mut ticks = (0u64, 0u64, 0u64);
            let mut v = vec![first];
            let mut next = t0 + INTERVAL;
            loop {
                let until = next.min(Instant::now() + TICK);
                match wake.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
                let g = live.pool_in_use.load(Relaxed);
                ticks = (ticks.0 + g, ticks.1 + 1, ticks.2.max(g));
                let now = Instant::now();
                if now >= next {
                    v.push(take(&live, &mut ticks));
                    next += INTERVAL;
                    if next < now {
                        next = now + INTERVAL; // fell behind: skip, never sample in bursts
                    }
                }
            }
            // The final sample; a last interval under 100 ms gives noisy rates, so it
            // absorbs the interval before it.
            let mut last = take(&live, &mut ticks);
            if v.len() > 1 && last.t - v[v.len() - 1].t < 0.1 {
                let prev = v.pop().unwrap();
                last.pool_peak = last.pool_peak.max(prev.pool_peak);
                last.pool_mean = (last.pool_mean + prev.pool_mean) / 2.0;
            }
            v.push(last);
            v
        });
        Sampler {
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// Takes the final sample and returns the series.
    pub fn finish(mut self) -> Series {
        self.stop.take();
        let samples = self
            .handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Series::from_samples(&samples)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Per-interval I/O of one volume, stripe or target.
#[derive(Debug, Serialize)]
pub struct IoSeries {
    pub name: String,
    pub bytes: Vec<u64>,
    pub ops: Vec<u64>,
    pub latency_ns: Vec<u64>,
    pub mb_per_s: Vec<f64>,
    pub ops_per_s: Vec<f64>,
    /// None where the interval had no operation.
    pub mean_size_bytes: Vec<Option<f64>>,
    pub mean_latency_ms: Vec<Option<f64>>,
    /// Reads allowed in flight at the end of each interval (adaptive readers).
    pub in_flight: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct StageSeries {
    pub stage: &'static str,
    pub wait_in_s: Vec<f64>,
    pub wait_out_s: Vec<f64>,
    pub busy_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct PoolSeries {
    pub size: u64,
    /// Buffers in use over each interval, sampled every 10 ms: mean and peak.
    pub mean_in_use: Vec<f64>,
    pub peak_in_use: Vec<u64>,
}

/// The report's time series: one entry per interval, `t` its end in seconds from
/// the sampler's start.
#[derive(Debug, Serialize)]
pub struct Series {
    pub interval_ms: u64,
    pub t: Vec<f64>,
    pub dt: Vec<f64>,
    /// Read side: volumes on backup, stripes on restore.
    pub reads: Vec<IoSeries>,
    /// Write side: devices (stripes) on backup, the target on restore.
    pub writes: Vec<IoSeries>,
    pub pool: PoolSeries,
    pub stages: Vec<StageSeries>,
    pub cpu_percent: Vec<f64>,
    pub cores: usize,
}

fn io_series(
    samples: &[Sample],
    lanes: usize,
    pick: fn(&Snapshot) -> &Vec<Counts>,
) -> Vec<IoSeries> {
    (0..lanes)
        .map(|j| {
            let mut s = IoSeries {
                name: String::new(),
                bytes: vec![],
                ops: vec![],
                latency_ns: vec![],
                mb_per_s: vec![],
                ops_per_s: vec![],
                mean_size_bytes: vec![],
                mean_latency_ms: vec![],
                in_flight: vec![],
            };
            for w in samples.windows(2) {
                let at = |x: &Sample| pick(&x.snap).get(j).copied().unwrap_or_default();
                let (a, b) = (at(&w[0]), at(&w[1]));
                let dt = (w[1].t - w[0].t).max(1e-9);
                let (bytes, ops, ns) = (b.bytes - a.bytes, b.ops - a.ops, b.ns - a.ns);
                s.bytes.push(bytes);
                s.ops.push(ops);
                s.latency_ns.push(ns);
                s.mb_per_s.push(bytes as f64 / 1e6 / dt);
                s.ops_per_s.push(ops as f64 / dt);
                s.mean_size_bytes
                    .push((ops > 0).then(|| bytes as f64 / ops as f64));
                s.mean_latency_ms
                    .push((ops > 0).then(|| ns as f64 / 1e6 / ops as f64));
                s.in_flight.push(b.in_flight);
            }
            s
        })
        .collect()
}

impl Series {
    fn from_samples(samples: &[Sample]) -> Series {
        let last = samples.last().map(|s| &s.snap);
        let n_reads = last.map_or(0, |s| s.reads.len());
        let n_writes = last.map_or(0, |s| s.writes.len());
        let names: Vec<&'static str> = last
            .map(|s| s.stages.iter().map(|(n, _)| *n).collect())
            .unwrap_or_default();
        let pairs = samples.windows(2);
        let dt: Vec<f64> = pairs.clone().map(|w| w[1].t - w[0].t).collect();
        let stage_at = |s: &Sample, name: &str| {
            s.snap
                .stages
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .unwrap_or_default()
        };
        let secs = |ns: u64| ns as f64 / 1e9;
        Series {
            interval_ms: INTERVAL.as_millis() as u64,
            t: samples.iter().skip(1).map(|s| s.t - samples[0].t).collect(),
            reads: io_series(samples, n_reads, |s| &s.reads),
            writes: io_series(samples, n_writes, |s| &s.writes),
            pool: PoolSeries {
                size: samples.iter().map(|s| s.snap.pool_size).max().unwrap_or(0),
                mean_in_use: samples.iter().skip(1).map(|s| s.pool_mean).collect(),
                peak_in_use: samples.iter().skip(1).map(|s| s.pool_peak).collect(),
            },
            stages: names
                .iter()
                .map(|&name| {
                    let d = |f: fn(&Counts) -> u64| -> Vec<f64> {
                        pairs
                            .clone()
                            .map(|w| secs(f(&stage_at(&w[1], name)) - f(&stage_at(&w[0], name))))
                            .collect()
                    };
                    StageSeries {
                        stage: name,
                        wait_in_s: d(|c| c.wait_in_ns),
                        wait_out_s: d(|c| c.wait_out_ns),
                        busy_s: d(|c| c.ns),
                    }
                })
                .collect(),
            cpu_percent: pairs
                .clone()
                .map(|w| 100.0 * (w[1].cpu - w[0].cpu) / (w[1].t - w[0].t).max(1e-9))
                .collect(),
            cores: crate::cmd::default_threads(),
            dt,
        }
    }
}

/// Everything the page shows.
pub struct Report<'a> {
    /// "backup" or "restore".
    pub command: &'a str,
    /// Shown as a table: key -> value (arrays are joined).
    pub config: Value,
    /// The command's JSON summary (raw_bytes, seconds, mb_per_sec, waits ...).
    pub summary: &'a Value,
    pub series: Series,
    /// Names of the read and write lanes, by index.
    pub read_names: Vec<String>,
    pub write_names: Vec<String>,
}

/// A dip in read throughput and what the other counters say about it.
#[derive(Debug, Serialize)]
struct Valley {
    t_start: f64,
    t_end: f64,
    read_mb_per_s: f64,
    typical_mb_per_s: f64,
    causes: Vec<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The deepest interval run below half the typical read rate, away from the ramp
/// up and down, with its likely causes.
fn find_valley(s: &Series) -> Option<Valley> {
    let n = s.t.len();
    let sum = |f: &dyn Fn(&IoSeries, usize) -> f64, i: usize| -> f64 {
        s.reads.iter().map(|l| f(l, i)).sum()
    };
    let rate: Vec<f64> = (0..n).map(|i| sum(&|l, i| l.mb_per_s[i], i)).collect();
    let active: Vec<usize> = (0..n).filter(|&i| rate[i] > 0.0).collect();
    let (&first, &last) = (active.first()?, active.last()?);
    if last < first + 4 {
        return None;
    }
    let inner = first + 1..last;
    let typical = median(inner.clone().map(|i| rate[i]).collect());
    let low = |i: usize| rate[i] < typical * 0.5;
    let deepest = inner
        .clone()
        .filter(|&i| low(i))
        .min_by(|&a, &b| rate[a].total_cmp(&rate[b]))?;
    let (mut a, mut b) = (deepest, deepest);
    while a > inner.start && low(a - 1) {
        a -= 1;
    }
    while b + 1 < inner.end && low(b + 1) {
        b += 1;
    }
    let total = |r: std::ops::Range<usize>, f: &dyn Fn(&IoSeries, usize) -> f64| -> f64 {
        r.map(|i| sum(f, i)).sum()
    };
    let size = |r: std::ops::Range<usize>| {
        total(r.clone(), &|l, i| l.bytes[i] as f64) / total(r, &|l, i| l.ops[i] as f64).max(1.0)
    };
    let lat = |r: std::ops::Range<usize>| {
        total(r.clone(), &|l, i| l.latency_ns[i] as f64)
            / 1e6
            / total(r, &|l, i| l.ops[i] as f64).max(1.0)
    };
    let region = a..b + 1;
    let mut causes = vec![];
    let pool = region.clone().map(|i| s.pool.mean_in_use[i]).sum::<f64>() / region.len() as f64;
    if s.pool.size > 0 && pool >= 0.9 * s.pool.size as f64 {
        causes.push(format!(
            "the buffer pool was full ({pool:.0} of {} buffers in use): readers waited for free buffers, so the stages after the reads (compression, devices) set the pace",
            s.pool.size
        ));
    }
    let (vs, ts) = (size(region.clone()), size(inner.clone()));
    if vs > 0.0 && vs < 0.75 * ts {
        causes.push(format!(
            "reads were smaller ({} against {} typical): small files or fragmented ranges",
            human(vs as u64),
            human(ts as u64)
        ));
    }
    let (vl, tl) = (lat(region.clone()), lat(inner.clone()));
    if vl > 1.5 * tl && vl > 0.0 {
        causes.push(format!(
            "each read took longer ({vl:.2} ms against {tl:.2} ms typical): the storage slowed down"
        ));
    }
    if causes.is_empty() {
        causes.push("none of these counters moved: the readers had less to do (waiting on the source) or the machine was busy elsewhere".into());
    }
    Some(Valley {
        t_start: if a == 0 { 0.0 } else { s.t[a - 1] },
        t_end: s.t[b],
        read_mb_per_s: region.clone().map(|i| rate[i]).sum::<f64>() / region.len() as f64,
        typical_mb_per_s: typical,
        causes,
    })
}

/// Writes the page atomically: a temporary file beside it, then a rename.
pub fn write(path: &Path, r: &Report) -> Result<()> {
    let html = render(r);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tmp_name(dir, path.file_name().unwrap_or(OsStr::new("report")));
    let written = (|| -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(html.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write report '{}'", path.display()))
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A short number for axis labels and tables.
fn num(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The smallest of 1, 2, 2.5, 5 x 10^k at or above `v`.
fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&x| x >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 960.0;
const H: f64 = 150.0;
const ML: f64 = 60.0;
const MR: f64 = 14.0;
const MT: f64 = 8.0;
const MB: f64 = 20.0;

struct Line {
    name: String,
    values: Vec<Option<f64>>,
    dashed: bool,
}

struct Chart {
    id: &'static str,
    title: String,
    lines: Vec<Line>,
    /// A fixed top of the y axis (pool size), else from the data.
    ymax: Option<f64>,
}

fn chart_html(c: &Chart, t: &[f64], tmax: f64, band: Option<(f64, f64)>) -> String {
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let top = c.ymax.unwrap_or_else(|| {
        nice(
            c.lines
                .iter()
                .flat_map(|l| l.values.iter().flatten())
                .fold(0.0, |a: f64, &b| a.max(b)),
        )
    });
    let x = |v: f64| ML + v / tmax * pw;
    let y = |v: f64| MT + ph - (v / top).clamp(0.0, 1.05) * ph;
    let mut o = String::new();
    let _ = write!(
        o,
        "<div class=\"chart\" id=\"{}\"><div class=\"head\"><b>{}</b>",
        c.id,
        esc(&c.title)
    );
    for (i, l) in c.lines.iter().enumerate() {
        let _ = write!(
            o,
            " <span class=\"key\" data-n=\"{2}\" style=\"color:{}\">{} {}</span>",
            COLORS[i % COLORS.len()],
            if l.dashed { "- -" } else { "&#9473;" },
            esc(&l.name)
        );
    }
    let _ = write!(
        o,
        " <span class=\"rd\"></span></div><svg class=\"plot\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" data-top=\"{top}\" data-tmax=\"{tmax}\">"
    );
    if let Some((a, b)) = band {
        let _ = write!(
            o,
            "<rect class=\"valley\" x=\"{:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{ph}\"/>",
            x(a),
            (x(b) - x(a)).max(2.0)
        );
    }
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let _ = write!(
            o,
            "<line class=\"grid\" x1=\"{ML}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text class=\"yl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            ML + pw,
            y(v),
            y(v),
            ML - 4.0,
            y(v) + 4.0,
            num(v)
        );
    }
    let step = nice(tmax / 10.0);
    let mut tick = 0.0;
    while tick <= tmax * (1.0 + 1e-9) {
        let _ = write!(
            o,
            "<line class=\"tick\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\"/><text class=\"xl\" x=\"{0:.1}\" y=\"{3:.1}\">{4}s</text>",
            x(tick),
            MT + ph,
            MT + ph + 4.0,
            H - 5.0,
            num(tick)
        );
        tick += step;
    }
    for (i, l) in c.lines.iter().enumerate() {
        // A gap (no operation in an interval) splits the line.
        let mut seg: Vec<String> = vec![];
        let mut flush = |seg: &mut Vec<String>| {
            if !seg.is_empty() {
                let _ = write!(
                    o,
                    "<polyline class=\"s{i}{}\" stroke=\"{}\" points=\"{}\"/>",
                    if l.dashed { " dashed" } else { "" },
                    COLORS[i % COLORS.len()],
                    seg.join(" ")
                );
                seg.clear();
            }
        };
        // Steps: each interval's value spans the interval.
        for (k, v) in l.values.iter().enumerate() {
            match v {
                Some(v) => {
                    let from = if k == 0 { 0.0 } else { t[k - 1] };
                    seg.push(format!("{:.1},{:.1}", x(from), y(*v)));
                    seg.push(format!("{:.1},{:.1}", x(t[k]), y(*v)));
                }
                None => flush(&mut seg),
            }
        }
        flush(&mut seg);
    }
    let _ = writeln!(
        o,
        "<line class=\"cursor\" x1=\"-1\" x2=\"-1\" y1=\"{MT}\" y2=\"{:.1}\"/></svg></div>",
        MT + ph
    );
    o
}

fn charts(r: &Report) -> Vec<Chart> {
    let s = &r.series;
    let name = |names: &[String], i: usize, kind: &str| {
        names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("{kind} {}", i + 1))
    };
    let (rk, wk) = if r.command == "backup" {
        ("volume", "device")
    } else {
        ("stripe", "target")
    };
    let per = |lanes: &[IoSeries],
               names: &[String],
               kind: &str,
               f: &dyn Fn(&IoSeries) -> Vec<Option<f64>>| {
        lanes
            .iter()
            .enumerate()
            .map(|(i, l)| Line {
                name: name(names, i, kind),
                values: f(l),
                dashed: false,
            })
            .collect::<Vec<_>>()
    };
    let some = |v: &[f64]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
    let mut out = vec![
        Chart {
            id: "read-mbps",
            title: format!("Read MB/s per {rk}"),
            lines: per(&s.reads, &r.read_names, rk, &|l| some(&l.mb_per_s)),
            ymax: None,
        },
        Chart {
            id: "read-size",
            title: "Mean read size (KiB)".into(),
            lines: per(&s.reads, &r.read_names, rk, &|l| {
                l.mean_size_bytes
                    .iter()
                    .map(|v| v.map(|b| b / 1024.0))
                    .collect()
            }),
            ymax: None,
        },
        Chart {
            id: "read-latency",
            title: "Read latency (ms, mean per interval)".into(),
            lines: per(&s.reads, &r.read_names, rk, &|l| l.mean_latency_ms.clone()),
            ymax: None,
        },
        Chart {
            id: "pool",
            title: format!("Buffer pool: buffers in use of {}", s.pool.size),
            lines: vec![
                Line {
                    name: "in use (mean)".into(),
                    values: s.pool.mean_in_use.iter().map(|&v| Some(v)).collect(),
                    dashed: false,
                },
                Line {
                    name: "peak".into(),
                    values: s.pool.peak_in_use.iter().map(|&v| Some(v as f64)).collect(),
                    dashed: true,
                },
                Line {
                    name: "total".into(),
                    values: vec![Some(s.pool.size as f64); s.t.len()],
                    dashed: true,
                },
            ],
            ymax: Some((s.pool.size as f64).max(1.0)),
        },
        Chart {
            id: "read-inflight",
            title: format!("Reads in flight allowed per {rk} (adaptive readers)"),
            lines: per(&s.reads, &r.read_names, rk, &|l| {
                l.in_flight.iter().map(|&v| Some(v as f64)).collect()
            }),
            ymax: None,
        },
        Chart {
            id: "read-ops",
            title: format!("Reads/s per {rk}"),
            lines: per(&s.reads, &r.read_names, rk, &|l| some(&l.ops_per_s)),
            ymax: None,
        },
        Chart {
            id: "write-mbps",
            title: format!("Write MB/s per {wk}"),
            lines: per(&s.writes, &r.write_names, wk, &|l| some(&l.mb_per_s)),
            ymax: None,
        },
    ];
    let mut waits = vec![];
    for st in &s.stages {
        for (what, v, dashed) in [
            ("input", &st.wait_in_s, false),
            ("output", &st.wait_out_s, true),
        ] {
            waits.push(Line {
                name: format!("{} waits for {what}", st.stage),
                values: v
                    .iter()
                    .zip(&s.dt)
                    .map(|(w, dt)| Some(w / dt.max(1e-9)))
                    .collect(),
                dashed,
            });
        }
    }
    out.push(Chart {
        id: "waits",
        title: "Waits per stage (seconds of wait per second, summed over threads)".into(),
        lines: waits,
        ymax: None,
    });
    out.push(Chart {
        id: "cpu",
        title: format!(
            "CPU: process user+system (% of one core, {} cores)",
            s.cores
        ),
        lines: vec![Line {
            name: "cpu".into(),
            values: some(&s.cpu_percent),
            dashed: false,
        }],
        ymax: None,
    });
    out
}

fn table_row(o: &mut String, cells: &[String], head: bool) {
    let tag = if head { "th" } else { "td" };
    o.push_str("<tr>");
    for c in cells {
        let _ = write!(o, "<{tag}>{}</{tag}>", esc(c));
    }
    o.push_str("</tr>");
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(show).collect::<Vec<_>>().join(", "),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:20px;color:#222;max-width:1000px}
h1{font-size:20px}h2{font-size:16px;margin-top:24px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
td.n{text-align:right}.chart{margin:2px 0}.head{font-size:13px}
.key{margin-left:10px}.rd{margin-left:12px;color:#555}
svg.plot polyline{fill:none;stroke-width:1.5}svg.plot polyline.dashed{stroke-dasharray:5 3}
.grid{stroke:#eee}.tick{stroke:#999}.yl{font-size:10px;text-anchor:end;fill:#555}
.xl{font-size:10px;text-anchor:middle;fill:#555}.cursor{stroke:#000;stroke-width:0.7}
.valley{fill:#fbd38d;opacity:.45}.note{background:#fff7e6;border:1px solid #fbd38d;padding:6px 10px}";

/// Hover: one cursor across every chart and each chart's values under it.
const SCRIPT: &str = "function show(cx){document.querySelectorAll('svg.plot').forEach(function(s){
var c=s.querySelector('.cursor');c.setAttribute('x1',cx);c.setAttribute('x2',cx);
var top=+s.dataset.top,keys=s.parentNode.querySelectorAll('.key'),vals=[];
s.querySelectorAll('polyline').forEach(function(p){var k=keys[+p.getAttribute('class').slice(1,3)];
for(var i=0;i+1<p.points.numberOfItems;i+=2){var a=p.points.getItem(i),b=p.points.getItem(i+1);
if(a.x<=cx&&cx<=b.x){vals.push(k.dataset.n+' '+(+((MT0+PH0-a.y)/PH0*top).toPrecision(3)));break;}}});
var t=(cx-ML0)/PW0*(+s.dataset.tmax);
s.parentNode.querySelector('.rd').textContent='t='+t.toFixed(2)+' s: '+vals.join(', ');});}
document.querySelectorAll('svg.plot').forEach(function(sv){sv.addEventListener('mousemove',function(e){
var b=sv.getBoundingClientRect();show((e.clientX-b.left)*sv.viewBox.baseVal.width/b.width);});});
show(ML0+PW0-0.5);";

fn render(r: &Report) -> String {
    let s = &r.series;
    let tmax = s.t.last().copied().unwrap_or(1.0).max(1e-3);
    let valley = find_valley(s);
    let band = valley.as_ref().map(|v| (v.t_start, v.t_end));
    let data = json!({
        "version": 1,
        "command": r.command,
        "config": r.config,
        "summary": r.summary,
        "series": s,
        "read_names": r.read_names,
        "write_names": r.write_names,
        "valley": valley,
    });
    // "</" would end the script element early.
    let data = serde_json::to_string(&data).unwrap().replace("</", "<\\/");
    let sum = r.summary;
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>pagevault {} report</title><style>{STYLE}</style></head><body>\n<h1>pagevault {}: {} in {:.3} s ({:.1} MB/s)</h1>\n",
        r.command,
        r.command,
        human(sum["raw_bytes"].as_u64().unwrap_or(0)),
        sum["seconds"].as_f64().unwrap_or(0.0),
        sum["mb_per_sec"].as_f64().unwrap_or(0.0),
    );
    o.push_str("<h2>Summary</h2><table>");
    let bytes = |k: &str| {
        sum[k]
            .as_u64()
            .map(|b| format!("{} ({b} bytes)", human(b)))
            .unwrap_or_else(|| "-".into())
    };
    for (k, v) in [
        ("bytes read (raw)", bytes("raw_bytes")),
        ("bytes stored", bytes("stored_bytes")),
        (
            "seconds",
            format!("{:.3}", sum["seconds"].as_f64().unwrap_or(0.0)),
        ),
        (
            "MB/s",
            format!("{:.3}", sum["mb_per_sec"].as_f64().unwrap_or(0.0)),
        ),
        (
            "bottleneck",
            format!(
                "{} ({})",
                show(&sum["waits"]["bottleneck"]),
                show(&sum["waits"]["explanation"])
            ),
        ),
    ] {
        table_row(&mut o, &[k.to_string(), v], false);
    }
    o.push_str("</table><table>");
    table_row(
        &mut o,
        &[
            "stage",
            "threads",
            "busy s",
            "wait input s",
            "wait output s",
            "util",
            "waits for",
            "blocked by",
        ]
        .map(String::from),
        true,
    );
    for st in sum["waits"]["stages"].as_array().into_iter().flatten() {
        let f = |k: &str| format!("{:.3}", st[k].as_f64().unwrap_or(0.0));
        table_row(
            &mut o,
            &[
                show(&st["stage"]),
                show(&st["threads"]),
                f("busy_seconds"),
                f("wait_input_seconds"),
                f("wait_output_seconds"),
                format!("{:.0}%", st["utilization"].as_f64().unwrap_or(0.0) * 100.0),
                show(&st["waits_for"]),
                show(&st["blocked_by"]),
            ],
            false,
        );
    }
    o.push_str("</table>\n<h2>Timeline</h2>\n");
    let _ = writeln!(
        o,
        "<p>{} samples, one every {} ms and one at the end. The charts share the time axis: under a dip in read MB/s, smaller reads point at the source's layout, higher latency at the storage, a full buffer pool at the stages downstream.</p>",
        s.t.len(),
        s.interval_ms
    );
    if let Some(v) = &valley {
        let _ = writeln!(
            o,
            "<p class=\"note\"><b>Valley</b> from {:.2} s to {:.2} s (shaded): reads at {:.1} MB/s against {:.1} MB/s typical. {}.</p>",
            v.t_start,
            v.t_end,
            v.read_mb_per_s,
            v.typical_mb_per_s,
            esc(&capitalized(&v.causes.join("; ")))
        );
    }
    for c in charts(r) {
        o.push_str(&chart_html(&c, &s.t, tmax, band));
    }
    o.push_str("<h2>Configuration</h2><table>");
    if let Value::Object(m) = &r.config {
        for (k, v) in m {
            table_row(&mut o, &[k.clone(), show(v)], false);
        }
    }
    o.push_str("</table>\n");
    let _ = write!(
        o,
        "<script type=\"application/json\" id=\"pagevault-data\">{data}</script>\n<script>{}</script>\n</body></html>\n",
        SCRIPT
            .replace("MT0", &MT.to_string())
            .replace("PH0", &(H - MT - MB).to_string())
            .replace("ML0", &ML.to_string())
            .replace("PW0", &(W - ML - MR).to_string())
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice(0.0), 1.0);
        assert_eq!(nice(7.0), 10.0);
        assert_eq!(nice(180.0), 200.0);
        assert_eq!(nice(2.2), 2.5);
        assert_eq!(num(2.50), "2.5");
        assert_eq!(num(120.4), "120");
    }

    /// Samples of one volume: per interval (MB read, reads, ms per read, buffers in use).
    fn samples(intervals: &[(u64, u64, u64, f64)]) -> Vec<Sample> {
        let mut c = Counts::default();
        let mut v = vec![Sample {
            t: 0.0,
            snap: Snapshot::default(),
            cpu: 0.0,
            pool_mean: 0.0,
            pool_peak: 0,
        }];
        for (i, &(mb, ops, ms, pool)) in intervals.iter().enumerate() {
            c.bytes += mb << 20;
            c.ops += ops;
            c.ns += ops * ms * 1_000_000;
            v.push(Sample {
                t: (i + 1) as f64 * 0.25,
                snap: Snapshot {
                    reads: vec![c],
                    pool_size: 10,
                    ..Snapshot::default()
                },
                cpu: 0.0,
                pool_mean: pool,
                pool_peak: pool.ceil() as u64,
            });
        }
        v
    }

    #[test]
    fn a_valley_is_found_and_explained() {
        let steady = (100, 100, 2, 4.0);
        let mut iv = vec![steady; 8];
        // Smaller reads, slower, pool full.
        iv[4] = (20, 80, 5, 10.0);
        iv[5] = (30, 90, 5, 9.5);
        let s = Series::from_samples(&samples(&iv));
        let v = find_valley(&s).expect("a valley");
        assert_eq!((v.t_start, v.t_end), (1.0, 1.5));
        let causes = v.causes.join("; ");
        assert!(causes.contains("pool was full"), "{causes}");
        assert!(causes.contains("reads were smaller"), "{causes}");
        assert!(causes.contains("took longer"), "{causes}");
        let summary =
            json!({"raw_bytes": 1, "seconds": 2.0, "mb_per_sec": 0.5, "waits": {"stages": []}});
        let html = render(&Report {
            command: "backup",
            config: json!({"source": "files:/x</script>"}),
            summary: &summary,
            series: s,
            read_names: vec!["/data".into()],
            write_names: vec![],
        });
        assert_eq!(
            html.matches("class=\"valley\"").count(),
            9,
            "shaded in every chart"
        );
        assert!(html.contains("<b>Valley</b> from 1.00 s to 1.50 s"));
        assert!(!html.contains("/x</script>"), "config text is escaped");
        // Steady reads: no valley.
        assert!(find_valley(&Series::from_samples(&samples(&[steady; 8]))).is_none());
    }

    #[test]
    fn bad_paths_are_refused() {
        let e = writable_path("/nonexistent-dir-pv/r.html").unwrap_err();
        assert!(e.contains("/nonexistent-dir-pv"), "{e}");
        assert!(writable_path("/").is_err());
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.html");
        assert_eq!(writable_path(p.to_str().unwrap()).unwrap(), p);
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "probe removed"
        );
    }
}
