//! The sampler: snapshots of `Live` every 250 ms on a thread of its own.

use super::series::Series;
use crate::engine::stats::{Live, Snapshot};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const INTERVAL: Duration = Duration::from_millis(250);
/// Pool occupancy changes every transfer: it is read this often and averaged.
const TICK: Duration = Duration::from_millis(10);

pub(super) struct Sample {
    pub(super) t: f64,
    pub(super) snap: Snapshot,
    pub(super) cpu: f64,
    /// Pool buffers in use over the interval: mean and peak of the ticks.
    pub(super) pool_mean: f64,
    pub(super) pool_peak: u64,
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
                cpu: crate::sys::cpu_seconds(),
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
