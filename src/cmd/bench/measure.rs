//! Latency histogram: log-linear buckets (64 per power of two, under 1.6% error), exact
//! count, sum, min and max. Bounded memory however long a profile runs.

use crate::units::mb_per_sec;
use serde_json::{json, Value};
use std::time::Duration;

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone)]
pub(super) struct Hist {
    pub(super) counts: Vec<u64>,
    pub(super) n: u64,
    pub(super) sum_ns: u128,
    pub(super) min_ns: u64,
    pub(super) max_ns: u64,
}

impl Hist {
    pub(super) fn new() -> Hist {
        Hist {
            counts: vec![0; ((64 - SUB_BITS as u64 + 1) * SUB) as usize],
            n: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
    pub(super) fn index(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as u64;
        let shift = e - SUB_BITS as u64;
        (((e - SUB_BITS as u64 + 1) * SUB) + ((v >> shift) - SUB)) as usize
    }
    /// The largest value that falls into bucket `i`.
    pub(super) fn upper(i: usize) -> u64 {
        let i = i as u64;
        if i < SUB {
            return i;
        }
        let e = i / SUB + SUB_BITS as u64 - 1;
        let shift = e - SUB_BITS as u64;
        let lower = (SUB + i % SUB) << shift;
        lower + (1u64 << shift) - 1
    }
    pub(super) fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.n += 1;
        self.sum_ns += ns as u128;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }
    pub(super) fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.sum_ns += o.sum_ns;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
    }
    pub(super) fn mean_ns(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.n as f64
        }
    }
    pub(super) fn percentile_ns(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }
}

#[derive(Clone)]
pub(super) struct Dir {
    pub(super) ops: u64,
    pub(super) bytes: u64,
    pub(super) hist: Hist,
}

impl Dir {
    pub(super) fn new() -> Dir {
        Dir {
            ops: 0,
            bytes: 0,
            hist: Hist::new(),
        }
    }
    pub(super) fn record(&mut self, bytes: u64, lat: Duration) {
        self.ops += 1;
        self.bytes += bytes;
        self.hist
            .record(lat.as_nanos().min(u64::MAX as u128) as u64);
    }
    pub(super) fn mean_ns(&self) -> f64 {
        self.hist.mean_ns()
    }
    pub(super) fn json(&self, seconds: f64) -> Value {
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        json!({
            "ops": self.ops,
            "bytes": self.bytes,
            "mb_per_sec": round3(mb_per_sec(self.bytes, seconds)),
            "iops": round3(self.ops as f64 / seconds.max(1e-9)),
            "latency_us": {
                "mean": (self.mean_ns() / 100.0).round() / 10.0,
                "min": us(if self.ops == 0 { 0 } else { self.hist.min_ns }),
                "p50": us(self.hist.percentile_ns(0.50)),
                "p95": us(self.hist.percentile_ns(0.95)),
                "p99": us(self.hist.percentile_ns(0.99)),
                "max": us(self.hist.max_ns),
            },
        })
    }
}

pub(super) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

pub(super) struct Measured {
    pub(super) seconds: f64,
    pub(super) read: Dir,
    pub(super) write: Dir,
    pub(super) all: Dir,
    pub(super) syncs: u64,
    pub(super) io: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_and_percentiles() {
        for v in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            123_456,
            1 << 40,
            u64::MAX / 3,
        ] {
            let i = Hist::index(v);
            assert!(Hist::upper(i) >= v, "{v}");
            assert!(i == 0 || Hist::upper(i - 1) < v, "{v}");
            assert!(Hist::upper(i) - v <= v / 64 + 1, "{v}");
        }
        let mut h = Hist::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.percentile_ns(0.5) as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.02, "{p50}");
        assert_eq!(h.percentile_ns(1.0), 1_000_000);
        assert!(h.percentile_ns(0.99) <= h.max_ns);
    }
}
