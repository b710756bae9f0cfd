//! Adaptive readers, as a congestion window: every volume starts with `--readers x
//! --read-depth` reads in flight and probes upward on every device, up to `max` (64 by
//! default, bounded by the pool). Every 100 ms one reader looks at the last window of
//! its volume's reads (the first window, the start, only sets the baseline): while the
//! pool has free buffers it tries a step up; the next window keeps the step only if the
//! volume's throughput rose by 5% or more (then tries the next one at once), else it
//! steps back and waits a second before trying again. A step is one of two: twice the
//! reads in flight, or twice the span (adjacent transfers read by one preadv, up to
//! `max_span`: larger requests for devices that reward them). After a step that did not
//! pay the next trial is of the other kind. Reads then follow what the device rewards,
//! not a guess. A volume of small files is held where it starts (`backup::small_files`):
//! the pool grows one whole buffer per read in flight, and such reads carry a few KiB.

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

/// What a step changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dim {
    /// Reads in flight.
    Depth,
    /// Transfers per read.
    Span,
}

struct Window {
    at: Instant,
    bytes: u64,
    /// A step on trial: what it changed, the value before it and the throughput there
    /// (bytes/s).
    trial: Option<(Dim, usize, f64)>,
    /// What the next trial changes.
    next: Dim,
    cooldown: u32,
}

pub struct Adapt {
    pub base: usize,
    pub max: usize,
    active: AtomicUsize,
    /// Transfers one read may take: where it starts, the most, and now.
    pub base_span: usize,
    pub max_span: usize,
    span: AtomicUsize,
    /// Span steps kept.
    pub span_raised: AtomicU64,
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
            base_span: 1,
            max_span: 1,
            span: AtomicUsize::new(1),
            span_raised: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            parked: (Mutex::new(()), Condvar::new()),
            window: Mutex::new(Window {
                at: Instant::now(),
                bytes: 0,
                trial: None,
                next: Dim::Depth,
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

    /// Reads may merge `base` adjacent transfers, and the controller may try up to `max`.
    pub fn spans(mut self, base: usize, max: usize) -> Adapt {
        (self.base_span, self.max_span) = (base.max(1), max.max(base).max(1));
        self.span = AtomicUsize::new(self.base_span);
        self
    }

    /// Adjacent transfers one read may take now.
    pub fn span(&self) -> usize {
        self.span.load(Relaxed)
    }

    /// The span the volume settled at (the one before a step still on trial).
    pub fn settled_span(&self) -> usize {
        match self.window.lock().unwrap().trial {
            Some((Dim::Span, before, _)) => before,
            _ => self.span(),
        }
    }

    /// Readers the volume may use at most (threads to start).
    pub fn threads(&self) -> usize {
        self.max
    }

    /// Where the volume settled: the reads in flight allowed, or, while a step up is
    /// still on trial (the volume ended before it was judged), the level before it.
    pub fn level(&self) -> usize {
        match self.window.lock().unwrap().trial {
            Some((Dim::Depth, before, _)) => before,
            _ => self.active.load(Relaxed),
        }
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
        if self.max == self.base && self.max_span == self.base_span {
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
        if let Some((dim, before, before_rate)) = w.trial.take() {
            if rate >= before_rate * GAIN {
                match dim {
                    Dim::Depth => {
                        self.raised.fetch_add(1, Relaxed);
                        self.peak.fetch_max(self.active.load(Relaxed), Relaxed);
                    }
                    Dim::Span => _ = self.span_raised.fetch_add(1, Relaxed),
                }
                // Still rising: try the next step now, judged against this window.
                self.step(&mut w, lane, rate, pool_has_room);
            } else {
                match dim {
                    Dim::Depth => {
                        self.set(lane, before);
                        self.undone.fetch_add(1, Relaxed);
                        self.hold(Held::NoGain);
                    }
                    Dim::Span => self.span.store(before, Relaxed),
                }
                w.next = other(dim);
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
        self.step(&mut w, lane, rate, pool_has_room);
    }

    /// Puts a step on trial: of the kind due, or of the other when that one cannot
    /// go higher.
    fn step(&self, w: &mut Window, lane: &Lane, rate: f64, room: bool) {
        let (cur, span) = (self.active.load(Relaxed), self.span());
        if !room {
            return self.hold(Held::PoolFull);
        }
        let depth_open = cur < self.max;
        let span_open = span < self.max_span;
        if !depth_open {
            self.hold(Held::Cap);
        }
        let dim = match (w.next, depth_open, span_open) {
            (Dim::Depth, true, _) | (Dim::Span, true, false) => Dim::Depth,
            (Dim::Span, _, true) | (Dim::Depth, false, true) => Dim::Span,
            _ => return,
        };
        match dim {
            Dim::Depth => {
                w.trial = Some((dim, cur, rate));
                self.set(lane, (cur * 2).min(self.max));
            }
            Dim::Span => {
                w.trial = Some((dim, span, rate));
                self.span.store((span * 2).min(self.max_span), Relaxed);
            }
        }
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.active.load(Relaxed)
    }
}

fn other(d: Dim) -> Dim {
    match d {
        Dim::Depth => Dim::Span,
        Dim::Span => Dim::Depth,
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
    fn after_a_depth_step_that_did_not_pay_the_span_is_tried() {
        let (a, lane) = (Adapt::new(16, 64).spans(1, 16), Lane::default());
        window(&a, &lane, 10, 1 << 20, true);
        window(&a, &lane, 100, 1 << 20, true);
        assert_eq!((a.active(), a.span()), (32, 1), "depth first");
        window(&a, &lane, 100, 1 << 20, true);
        assert_eq!((a.active(), a.span()), (16, 1), "no gain: back");
        for _ in 0..=COOLDOWN {
            window(&a, &lane, 100, 1 << 20, true);
        }
        assert_eq!((a.active(), a.span()), (16, 2), "then larger reads");
        assert_eq!(a.settled_span(), 1, "a span on trial is not settled");
        window(&a, &lane, 150, 1 << 20, true);
        assert_eq!(
            (a.span(), a.span_raised.load(Relaxed)),
            (4, 1),
            "kept: next"
        );
        window(&a, &lane, 150, 1 << 20, true);
        assert_eq!((a.active(), a.span(), a.settled_span()), (16, 2, 2), "back");
        for _ in 0..=COOLDOWN {
            window(&a, &lane, 150, 1 << 20, true);
        }
        assert_eq!((a.active(), a.span()), (32, 2), "then depth again");
        // At the cap, only the span is tried.
        let (c, lane) = (Adapt::new(8, 8).spans(1, 4), Lane::default());
        window(&c, &lane, 10, 1 << 20, true);
        window(&c, &lane, 100, 1 << 20, true);
        assert_eq!((c.active(), c.span(), c.held()), (8, 2, Held::Cap));
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
