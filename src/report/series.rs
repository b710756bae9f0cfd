//! Samples -> per-interval series (rates, sizes, latencies, waits, CPU).

use super::sampler::{Sample, INTERVAL};
use crate::engine::stats::{Counts, Snapshot};
use serde::Serialize;

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
    pub(super) fn from_samples(samples: &[Sample]) -> Series {
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
            cores: crate::engine::default_threads(),
            dt,
        }
    }
}
