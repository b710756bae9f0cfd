//! Adaptive readers, as a congestion window: every volume starts with `--readers x
//! --read-depth` reads in flight and probes upward on every device, up to `max` (64 by
//! default, bounded by the pool). Every 100 ms one reader looks at the last window of
//! its volume's reads (the first window, the start, only sets the baseline): while the pool has free buffers it tries twice the reads in
//! flight; the next window keeps the step only if the volume's throughput rose by 5% or
//! more (then tries the next one at once), else it steps back and waits a second before
//! trying again. Reads in flight then follow what the device rewards, not a guess.
//! Adjacent ranges are merged separately (engine/backup/read.rs): transfers under 1 MiB
//! are read up to 1 MiB per preadv.

use super::stats::Lane;
use super::Abort;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_millis(100);
/// A step is kept when throughput rose by this factor.
const GAIN: f64 = 1.05;
/// Windows to wait after a step that did not pay.
const COOLDOWN: u32 = 10;
/// Reads in flight per volume the controller may reach by default.
pub const CAP: usize = 64;

/// Why the reads in flight went no higher (the last reason seen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Held {
    /// Not adaptive, or the volume ended before a step could be judged.
    NotTried,
    /// The last step up did not raise throughput by 5%.
    NoGain,
    /// At the most allowed.
    Cap,
    /// Every pool buffer was in use: more reads had nowhere to go.
    PoolFull,
}

impl Held {
    fn from_u8(v: u8) -> Held {
        match v {
            1 => Held::NoGain,
            2 => Held::Cap,
            3 => Held::PoolFull,
            _ => Held::NotTried,
        }
    }
}

struct Window {
    at: Instant,
    bytes: u64,
    /// A step on trial: the level before it and the throughput there (bytes/s).
    trial: Option<(usize, f64)>,
    cooldown: u32,
}

pub struct Adapt {
    pub base: usize,
    pub max: usize,
    active: AtomicUsize,
    finished: AtomicBool,
    /// Parked readers sleep here until the level rises or the volume ends.
    parked: (Mutex<()>, Condvar),
    window: Mutex<Window>,
    /// Steps up that were kept.
    pub raised: AtomicU64,
    /// Steps up that were taken back.
    pub undone: AtomicU64,
    pub peak: AtomicUsize,
    held: AtomicU8,
}

impl Adapt {
    pub fn new(base: usize, max: usize) -> Adapt {
        Adapt {
            base,
            max: max.max(base),
            active: AtomicUsize::new(base),
            finished: AtomicBool::new(false),
            parked: (Mutex::new(()), Condvar::new()),
            window: Mutex::new(Window {
                at: Instant::now(),
                bytes: 0,
                trial: None,
                // The first window holds the start (opening files, empty queues): it
                // is no baseline for a trial.
                cooldown: 1,
            }),
            raised: AtomicU64::new(0),
            undone: AtomicU64::new(0),
            peak: AtomicUsize::new(base),
            held: AtomicU8::new(0),
        }
    }

    /// Readers the volume may use at most (threads to start).
    pub fn threads(&self) -> usize {
        self.max
    }

    /// Where the volume settled: the reads in flight allowed, or, while a step up is
    /// still on trial (the volume ended before it was judged), the level before it.
    pub fn level(&self) -> usize {
        let w = self.window.lock().unwrap();
        w.trial
            .map_or_else(|| self.active.load(Relaxed), |(before, _)| before)
    }

    /// Why the reads in flight went no higher.
    pub fn held(&self) -> Held {
        Held::from_u8(self.held.load(Relaxed))
    }

    /// Parks reader `k` while it is beyond the reads allowed in flight; false when it
    /// should end (the volume is done or the run aborted).
    pub fn admit(&self, k: usize, abort: &Abort) -> bool {
        if k < self.active.load(Relaxed) {
            return true;
        }
        // Parked without spinning: dozens of idle readers must not cost CPU.
        let (lock, cv) = &self.parked;
        let mut g = lock.lock().unwrap();
        while k >= self.active.load(Relaxed) {
            if abort.aborted() || self.finished.load(Relaxed) {
                return false;
            }
            g = cv.wait_timeout(g, Duration::from_millis(50)).unwrap().0;
        }
        true
    }

    /// The volume has nothing more to read: parked readers end.
    pub fn finish(&self) {
        self.finished.store(true, Relaxed);
        let _g = self.parked.0.lock().unwrap();
        self.parked.1.notify_all();
    }

    fn set(&self, lane: &Lane, n: usize) {
        let _g = self.parked.0.lock().unwrap();
        self.active.store(n, Relaxed);
        lane.in_flight.store(n as u64, Relaxed);
        self.parked.1.notify_all();
    }

    fn hold(&self, why: Held) {
        self.held.store(why as u8, Relaxed);
    }

    /// Called after each read; adjusts the reads in flight at most once per window.
    pub fn tick(&self, lane: &Lane, pool_has_room: bool) {
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
        let b = lane.bytes.load(Relaxed);
        let db = b - w.bytes;
        (w.at, w.bytes) = (Instant::now(), b);
        let rate = db as f64 / dt.as_secs_f64();
        let cur = self.active.load(Relaxed);
        if let Some((before, before_rate)) = w.trial.take() {
            if rate >= before_rate * GAIN {
                self.raised.fetch_add(1, Relaxed);
                self.peak.fetch_max(cur, Relaxed);
                // Still rising: try the next step now, judged against this window.
                self.step(&mut w, lane, cur, rate, pool_has_room);
            } else {
                self.set(lane, before);
                self.undone.fetch_add(1, Relaxed);
                self.hold(Held::NoGain);
                w.cooldown = COOLDOWN;
            }
            return;
        }
        if w.cooldown > 0 {
            w.cooldown -= 1;
            return;
        }
        if db == 0 {
            return;
        }
        self.step(&mut w, lane, cur, rate, pool_has_room);
    }

    fn step(&self, w: &mut Window, lane: &Lane, cur: usize, rate: f64, room: bool) {
        if cur >= self.max {
            return self.hold(Held::Cap);
        }
        if !room {
            return self.hold(Held::PoolFull);
        }
        w.trial = Some((cur, rate));
        self.set(lane, (cur * 2).min(self.max));
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.active.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One window of `reads` reads of `size` bytes, then the controller's look at it.
    fn window(a: &Adapt, lane: &Lane, reads: u64, size: u64, room: bool) {
        for _ in 0..reads {
            lane.op(size, Duration::from_micros(100));
        }
        std::thread::sleep(WINDOW + Duration::from_millis(5));
        a.tick(lane, room);
    }

    #[test]
    fn every_volume_probes_up_keeps_what_pays_and_steps_back_from_what_does_not() {
        // Large reads too: the gate on small or slow reads is gone.
        let (a, lane) = (Adapt::new(4, 64), Lane::default());
        window(&a, &lane, 10, 1 << 20, true);
        assert_eq!(a.active(), 4, "the first window, the start, is no baseline");
        window(&a, &lane, 100, 1 << 20, true);
        assert_eq!(a.active(), 8, "a step up on trial");
        window(&a, &lane, 200, 1 << 20, true);
        assert_eq!(
            (a.raised.load(Relaxed), a.active()),
            (1, 16),
            "kept; next tried"
        );
        window(&a, &lane, 400, 1 << 20, true);
        assert_eq!((a.raised.load(Relaxed), a.active()), (2, 32));
        // No gain at 32: back to 16, and no new trial during the cool-down.
        window(&a, &lane, 300, 1 << 20, true);
        assert_eq!(a.active(), 16);
        assert_eq!(a.held(), Held::NoGain);
        for _ in 0..3 {
            window(&a, &lane, 400, 1 << 20, true);
            assert_eq!(a.active(), 16);
        }
        assert_eq!((a.undone.load(Relaxed), a.peak.load(Relaxed)), (1, 16));
        // After the cool-down a step is tried again; a volume that ends before it is
        // judged settled where it was, not at the step.
        for _ in 0..COOLDOWN {
            if a.active() == 32 {
                break;
            }
            window(&a, &lane, 400, 1 << 20, true);
        }
        assert_eq!((a.active(), a.level()), (32, 16));
    }

    #[test]
    fn the_cap_a_full_pool_and_fixed_mode_hold_the_level() {
        let (a, lane) = (Adapt::new(4, 8), Lane::default());
        window(&a, &lane, 10, 8192, true);
        window(&a, &lane, 100, 8192, true);
        window(&a, &lane, 200, 8192, true);
        assert_eq!((a.active(), a.held()), (8, Held::Cap));
        let (p, lane) = (Adapt::new(4, 64), Lane::default());
        window(&p, &lane, 10, 8192, false);
        window(&p, &lane, 100, 8192, false);
        assert_eq!((p.active(), p.held()), (4, Held::PoolFull));
        let (f, lane) = (Adapt::new(4, 4), Lane::default());
        window(&f, &lane, 100, 8192, true);
        assert_eq!((f.active(), f.held()), (4, Held::NotTried));
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
