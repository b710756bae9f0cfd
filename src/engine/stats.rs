//! Wait statistics: per stage, time busy and time waiting for input or output.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
pub struct Stage {
    pub busy_ns: AtomicU64,
    pub wait_in_ns: AtomicU64,
    pub wait_out_ns: AtomicU64,
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
}

impl Stage {
    pub fn busy(&self, d: Duration) {
        self.busy_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    pub fn wait_in(&self, d: Duration) {
        self.wait_in_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    pub fn wait_out(&self, d: Duration) {
        self.wait_out_ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    pub fn op(&self, bytes: u64) {
        self.ops.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }
}

/// Live counters the progress display and the report read while a run goes on.
#[derive(Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub done: AtomicU64,
    /// Per volume, device, stage and pool: what `--report` samples.
    pub live: Arc<Live>,
}

/// I/O counters of one volume (reads) or one device (writes).
#[derive(Default)]
pub struct Lane {
    pub bytes: AtomicU64,
    pub ops: AtomicU64,
    /// Time the operations took, summed.
    pub ns: AtomicU64,
    /// Reads allowed in flight now (adaptive readers); 0 for write lanes.
    pub in_flight: AtomicU64,
}

impl Lane {
    pub fn op(&self, bytes: u64, took: Duration) {
        self.bytes.fetch_add(bytes, Relaxed);
        self.ops.fetch_add(1, Relaxed);
        self.ns.fetch_add(took.as_nanos() as u64, Relaxed);
    }
}

/// Counters of every run of one command, cumulative across runs (a PostgreSQL backup
/// runs twice, a restore with a differential too). A run registers its lanes and
/// stages once when it starts (the only locks); the hot paths only add to atomics.
#[derive(Default)]
pub struct Live {
    reads: Mutex<Vec<Arc<Lane>>>,
    writes: Mutex<Vec<Arc<Lane>>>,
    stages: Mutex<Vec<(&'static str, Arc<Stage>)>>,
    /// Pool buffers handed out and not yet given back.
    pub pool_in_use: Arc<AtomicU64>,
    pub pool_size: AtomicU64,
}

fn lanes(v: &Mutex<Vec<Arc<Lane>>>, n: usize) -> Vec<Arc<Lane>> {
    let mut v = v.lock().unwrap();
    while v.len() < n {
        v.push(Arc::default());
    }
    v[..n].to_vec()
}

/// Cumulative values of one lane or stage at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub bytes: u64,
    pub ops: u64,
    pub ns: u64,
    pub wait_in_ns: u64,
    pub wait_out_ns: u64,
    /// A gauge, not a sum: reads allowed in flight at the instant.
    pub in_flight: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub reads: Vec<Counts>,
    pub writes: Vec<Counts>,
    /// Summed by stage name, in the order the stages first ran.
    pub stages: Vec<(&'static str, Counts)>,
    pub pool_in_use: u64,
    pub pool_size: u64,
}

impl Live {
    /// Lanes of the read side (volumes on backup, stripes on restore), by index.
    pub fn read_lanes(&self, n: usize) -> Vec<Arc<Lane>> {
        lanes(&self.reads, n)
    }
    /// Lanes of the write side (stripes on backup, the target on restore).
    pub fn write_lanes(&self, n: usize) -> Vec<Arc<Lane>> {
        lanes(&self.writes, n)
    }
    /// A fresh stage of one run, counted in the totals of `name`.
    pub fn stage(&self, name: &'static str) -> Arc<Stage> {
        let st = Arc::new(Stage::default());
        self.stages.lock().unwrap().push((name, st.clone()));
        st
    }
    pub fn snapshot(&self) -> Snapshot {
        let lane = |l: &Arc<Lane>| Counts {
            bytes: l.bytes.load(Relaxed),
            ops: l.ops.load(Relaxed),
            ns: l.ns.load(Relaxed),
            in_flight: l.in_flight.load(Relaxed),
            ..Counts::default()
        };
        let mut stages: Vec<(&'static str, Counts)> = vec![];
        for (name, st) in self.stages.lock().unwrap().iter() {
            let i = match stages.iter().position(|(n, _)| n == name) {
                Some(i) => i,
                None => {
                    stages.push((name, Counts::default()));
                    stages.len() - 1
                }
            };
            let c = &mut stages[i].1;
            c.bytes += st.bytes.load(Relaxed);
            c.ops += st.ops.load(Relaxed);
            c.ns += st.busy_ns.load(Relaxed);
            c.wait_in_ns += st.wait_in_ns.load(Relaxed);
            c.wait_out_ns += st.wait_out_ns.load(Relaxed);
        }
        Snapshot {
            reads: self.reads.lock().unwrap().iter().map(lane).collect(),
            writes: self.writes.lock().unwrap().iter().map(lane).collect(),
            stages,
            pool_in_use: self.pool_in_use.load(Relaxed),
            pool_size: self.pool_size.load(Relaxed),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StageSummary {
    pub stage: &'static str,
    pub threads: usize,
    /// What this stage waits on before it can work, and after.
    pub waits_for: &'static str,
    pub blocked_by: &'static str,
    pub busy_seconds: f64,
    pub wait_input_seconds: f64,
    pub wait_output_seconds: f64,
    /// Busy time over wall time times threads.
    pub utilization: f64,
    pub operations: u64,
    pub bytes: u64,
}

/// Figures only: the advice about the bottleneck, its JSON and its table are the
/// CLI's (`cmd::waits`).
#[derive(Debug, Clone)]
pub struct WaitStats {
    pub stages: Vec<StageSummary>,
    /// The stage with the highest utilization.
    pub bottleneck: String,
}

pub fn summarize(
    stages: &[(&'static str, &Stage, usize, &'static str, &'static str)],
    wall: Duration,
) -> WaitStats {
    let wall_s = wall.as_secs_f64().max(1e-9);
    let s = |v: &AtomicU64| v.load(Relaxed) as f64 / 1e9;
    let stages: Vec<StageSummary> = stages
        .iter()
        .map(|(name, st, threads, waits_for, blocked_by)| StageSummary {
            stage: name,
            threads: *threads,
            waits_for,
            blocked_by,
            busy_seconds: s(&st.busy_ns),
            wait_input_seconds: s(&st.wait_in_ns),
            wait_output_seconds: s(&st.wait_out_ns),
            utilization: s(&st.busy_ns) / (wall_s * (*threads).max(1) as f64),
            operations: st.ops.load(Relaxed),
            bytes: st.bytes.load(Relaxed),
        })
        .collect();
    let top = stages
        .iter()
        .max_by(|a, b| a.utilization.total_cmp(&b.utilization))
        .expect("at least one stage");
    WaitStats {
        bottleneck: top.stage.to_string(),
        stages,
    }
}
