//! Adaptive readers: every volume starts with `--readers x --read-depth` reads in
//! flight and may go up to four times that. Every 100 ms one reader looks at the last
//! window of its volume's reads: when they are small (many small files, file tails) or
//! slow per byte, and the pool has free buffers, it tries twice the reads in flight;
//! the next window keeps the step only if the volume's throughput rose by 5% or more,
//! else it steps back and waits a second before trying again. Reads in flight then
//! follow what the device rewards, not a guess. Adjacent ranges are merged separately
//! (engine/backup.rs): transfers under 1 MiB are read up to 1 MiB per preadv.

use super::stats::Lane;
use super::Abort;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_millis(100);
/// A read slower than this per byte is latency-bound: 200 MB/s per read.
const SLOW_NS_PER_BYTE: u64 = 5;
/// Windows to wait after a step that did not pay.
const COOLDOWN: u32 = 10;

struct Window {
    at: Instant,
    bytes: u64,
    ops: u64,
    ns: u64,
    /// A step on trial: the level before it and the throughput there (bytes/s).
    trial: Option<(usize, f64)>,
    cooldown: u32,
}

pub struct Adapt {
    pub base: usize,
    pub max: usize,
    active: AtomicUsize,
    finished: AtomicBool,
    window: Mutex<Window>,
    /// Steps up that were kept.
    pub raised: AtomicU64,
    pub peak: AtomicUsize,
}

impl Adapt {
    pub fn new(base: usize, max: usize) -> Adapt {
        Adapt {
            base,
            max: max.max(base),
            active: AtomicUsize::new(base),
            finished: AtomicBool::new(false),
            window: Mutex::new(Window {
                at: Instant::now(),
                bytes: 0,
                ops: 0,
                ns: 0,
                trial: None,
                cooldown: 0,
            }),
            raised: AtomicU64::new(0),
            peak: AtomicUsize::new(base),
        }
    }

    /// Readers the volume may use at most (threads to start).
    pub fn threads(&self) -> usize {
        self.max
    }

    /// Parks reader `k` while it is beyond the reads allowed in flight; false when it
    /// should end (the volume is done or the run aborted).
    pub fn admit(&self, k: usize, abort: &Abort) -> bool {
        while k >= self.active.load(Relaxed) {
            if abort.aborted() || self.finished.load(Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// The volume has nothing more to read: parked readers end.
    pub fn finish(&self) {
        self.finished.store(true, Relaxed);
    }

    fn set(&self, lane: &Lane, n: usize) {
        self.active.store(n, Relaxed);
        lane.in_flight.store(n as u64, Relaxed);
    }

    /// Called after each read; adjusts the reads in flight at most once per window.
    pub fn tick(&self, lane: &Lane, transfer: usize, pool_has_room: bool) {
        if self.max == self.base {
            return;
        }
        let Ok(mut w) = self.window.try_lock() else {
            return;
        };
        let dt = w.at.elapsed();
        if dt < WINDOW {
            return;
        }
        let (b, o, n) = (
            lane.bytes.load(Relaxed),
            lane.ops.load(Relaxed),
            lane.ns.load(Relaxed),
        );
        let (db, dop, dns) = (b - w.bytes, o - w.ops, n - w.ns);
        (w.at, w.bytes, w.ops, w.ns) = (Instant::now(), b, o, n);
        let rate = db as f64 / dt.as_secs_f64();
        let cur = self.active.load(Relaxed);
        if let Some((before, before_rate)) = w.trial.take() {
            if rate >= before_rate * 1.05 {
                self.raised.fetch_add(1, Relaxed);
                self.peak.fetch_max(cur, Relaxed);
            } else {
                self.set(lane, before);
                w.cooldown = COOLDOWN;
            }
            return;
        }
        if w.cooldown > 0 {
            w.cooldown -= 1;
            return;
        }
        if dop < 4 || cur >= self.max || !pool_has_room {
            return;
        }
        let small = db / dop < transfer as u64 / 2;
        let slow = dns > db.saturating_mul(SLOW_NS_PER_BYTE);
        if small || slow {
            w.trial = Some((cur, rate));
            self.set(lane, (cur * 2).min(self.max));
        }
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.active.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One window of `reads` reads of `size` bytes taking `ns_each`, at `rate` MB/s.
    fn window(a: &Adapt, lane: &Lane, reads: u64, size: u64, ns_each: u64) {
        for _ in 0..reads {
            lane.op(size, Duration::from_nanos(ns_each));
        }
        std::thread::sleep(WINDOW + Duration::from_millis(5));
        a.tick(lane, 1 << 20, true);
    }

    #[test]
    fn small_reads_try_more_and_keep_it_only_when_it_pays() {
        let (a, lane) = (Adapt::new(4, 16), Lane::default());
        window(&a, &lane, 100, 8192, 1000);
        assert_eq!(a.active(), 8, "small reads: a step up on trial");
        // Twice the throughput in the next window: kept, and the next step tried.
        window(&a, &lane, 200, 8192, 1000);
        assert_eq!(a.raised.load(Relaxed), 1);
        window(&a, &lane, 200, 8192, 1000);
        assert_eq!(a.active(), 16);
        // No gain at 16: back to 8, and no new trial during the cool-down.
        window(&a, &lane, 200, 8192, 1000);
        assert_eq!(a.active(), 8);
        for _ in 0..3 {
            window(&a, &lane, 200, 8192, 1000);
            assert_eq!(a.active(), 8);
        }
        assert_eq!(a.raised.load(Relaxed), 1);
        assert_eq!(a.peak.load(Relaxed), 8);
    }

    #[test]
    fn large_fast_reads_full_pool_or_fixed_mode_change_nothing() {
        let (a, lane) = (Adapt::new(4, 16), Lane::default());
        window(&a, &lane, 100, 1 << 20, 1_000_000);
        assert_eq!(a.active(), 4, "1 MiB reads at 1 GB/s each");
        for _ in 0..100 {
            lane.op(8192, Duration::from_nanos(1000));
        }
        std::thread::sleep(WINDOW + Duration::from_millis(5));
        a.tick(&lane, 1 << 20, false);
        assert_eq!(a.active(), 4, "buffers all full: more reads cannot help");
        let (f, lane) = (Adapt::new(4, 4), Lane::default());
        window(&f, &lane, 100, 8192, 1000);
        assert_eq!(f.active(), 4);
    }

    #[test]
    fn parked_readers_end_when_the_volume_is_done() {
        let a = Adapt::new(1, 4);
        let abort = Abort::default();
        assert!(a.admit(0, &abort));
        a.finish();
        assert!(!a.admit(3, &abort));
    }
}
