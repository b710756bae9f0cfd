//! Wait statistics: per stage, time busy and time waiting for input or output.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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

#[derive(Debug, Clone, Serialize)]
pub struct WaitStats {
    pub stages: Vec<StageSummary>,
    pub bottleneck: String,
    pub explanation: String,
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
    let explanation = match top.stage {
        "read" => "the source storage: reads took most of the time; more readers or a faster volume help, compression and devices were waiting".to_string(),
        "compress" => "the CPU: compression kept its threads busiest; a lighter codec or more --threads help".to_string(),
        "write" => "the destination: device writes took most of the time; more stripes or faster devices help".to_string(),
        "decompress" => "the CPU: decompression and checksums kept the threads busiest".to_string(),
        other => format!("the {other} stage"),
    };
    WaitStats {
        bottleneck: top.stage.to_string(),
        explanation,
        stages,
    }
}

impl WaitStats {
    pub fn print(&self) {
        println!("Wait statistics:");
        println!(
            "  {:<11} {:>7} {:>9} {:>12} {:>13} {:>6}",
            "stage", "threads", "busy s", "wait input s", "wait output s", "util"
        );
        for st in &self.stages {
            println!(
                "  {:<11} {:>7} {:>9.3} {:>12.3} {:>13.3} {:>5.0}%",
                st.stage,
                st.threads,
                st.busy_seconds,
                st.wait_input_seconds,
                st.wait_output_seconds,
                st.utilization * 100.0
            );
        }
        println!("Bottleneck: {} ({})", self.bottleneck, self.explanation);
    }
}
