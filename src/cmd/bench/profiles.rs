//! The profiles (one row each of the SQL Server I/O pattern table) and their ratings.

use super::measure::Measured;
use crate::units::mb_per_sec;
use serde_json::{json, Value};

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// Sequential buffered writes, each followed by fdatasync.
    LogWrite,
    /// Random 8 KiB reads and writes over the whole file.
    Random,
    SeqWrite,
    SeqRead,
    /// Sequential reads from the first half alternating with sequential writes to the second.
    Backup,
}

#[derive(Clone, Copy)]
enum Basis {
    /// Mean latency per I/O in ms; lower is better.
    MeanLatency,
    /// MB/s of all the I/O; higher is better.
    MBps,
    /// MB/s read (the backup rate); higher is better.
    ReadMBps,
}

pub(super) struct Rule {
    basis: Basis,
    /// Limits for excellent, good and fair (latency: below; throughput: at least).
    limits: [f64; 3],
    what: &'static str,
}

const LATENCY_LOG: Rule = Rule {
    basis: Basis::MeanLatency,
    limits: [1.0, 5.0, 20.0],
    what: "mean latency of a write plus its fdatasync (a commit)",
};
const LATENCY_DATA: Rule = Rule {
    basis: Basis::MeanLatency,
    limits: [5.0, 10.0, 20.0],
    what: "mean latency of an 8 KiB read or write",
};
// The backup-to-NUL article's customers: 25-35 MB/s bad, 110 a concern, 143-360 good, 412 great.
const THROUGHPUT: Rule = Rule {
    basis: Basis::MBps,
    limits: [400.0, 150.0, 50.0],
    what: "MB/s",
};
const THROUGHPUT_BACKUP: Rule = Rule {
    basis: Basis::ReadMBps,
    limits: [400.0, 150.0, 50.0],
    what: "MB/s read, the backup rate (as much again is written)",
};

pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) pattern: &'static str,
    pub(super) short: &'static str,
    /// (bytes, percent) of the I/O sizes; the percents add up to 100.
    pub(super) mix: &'static [(u64, u32)],
    pub(super) read_percent: u32,
    pub(super) rule: Rule,
}

pub(super) const K: u64 = 1024;

const SPECS: [Spec; 7] = [
    Spec {
        name: "oltp-log",
        kind: Kind::LogWrite,
        pattern: "sequential write, 512 B to 64 KiB, fdatasync after each write",
        short: "seq W 512B-64K+sync",
        mix: &[
            (512, 20),
            (K, 10),
            (2 * K, 10),
            (4 * K, 20),
            (8 * K, 15),
            (16 * K, 10),
            (32 * K, 10),
            (64 * K, 5),
        ],
        read_percent: 0,
        rule: LATENCY_LOG,
    },
    Spec {
        name: "oltp-data",
        kind: Kind::Random,
        pattern: "random 8 KiB reads and writes, 70% reads",
        short: "rand R/W 8K 70/30",
        mix: &[(8 * K, 100)],
        read_percent: 70,
        rule: LATENCY_DATA,
    },
    Spec {
        name: "bulk-insert",
        kind: Kind::SeqWrite,
        pattern: "sequential write, 8 KiB to 128 KiB",
        short: "seq W 8K-128K",
        mix: &[
            (8 * K, 10),
            (16 * K, 10),
            (32 * K, 20),
            (64 * K, 30),
            (128 * K, 30),
        ],
        read_percent: 0,
        rule: THROUGHPUT,
    },
    Spec {
        name: "read-ahead",
        kind: Kind::SeqRead,
        pattern: "sequential read, 8 KiB to 256 KiB",
        short: "seq R 8K-256K",
        mix: &[
            (8 * K, 10),
            (16 * K, 10),
            (32 * K, 10),
            (64 * K, 20),
            (128 * K, 20),
            (256 * K, 30),
        ],
        read_percent: 100,
        rule: THROUGHPUT,
    },
    Spec {
        name: "backup",
        kind: Kind::Backup,
        pattern: "sequential 1 MiB reads and 1 MiB writes, alternating",
        short: "seq R+W 1M",
        mix: &[(1024 * K, 100)],
        read_percent: 50,
        rule: THROUGHPUT_BACKUP,
    },
    Spec {
        name: "restore",
        kind: Kind::SeqWrite,
        pattern: "sequential 64 KiB writes",
        short: "seq W 64K",
        mix: &[(64 * K, 100)],
        read_percent: 0,
        rule: THROUGHPUT,
    },
    Spec {
        name: "checkdb",
        kind: Kind::SeqRead,
        pattern: "sequential read, 8 KiB to 64 KiB",
        short: "seq R 8K-64K",
        mix: &[(8 * K, 20), (16 * K, 20), (32 * K, 20), (64 * K, 40)],
        read_percent: 100,
        rule: THROUGHPUT,
    },
];

impl Spec {
    pub(super) fn max_io(&self) -> u64 {
        self.mix.iter().map(|m| m.0).max().unwrap_or(0)
    }
    /// The smallest test file the profile runs on: 16 of its largest I/O, at least 1 MiB.
    pub(super) fn min_size(&self) -> u64 {
        (16 * self.max_io()).max(1 << 20)
    }
}

/// The profile names, in the order they run.
pub(super) fn names() -> impl Iterator<Item = &'static str> {
    SPECS.iter().map(|s| s.name)
}

pub(super) fn spec(name: &str) -> &'static Spec {
    SPECS
        .iter()
        .find(|s| s.name == name)
        .expect("known profile")
}

impl Rule {
    pub(super) fn figure(&self, m: &Measured) -> f64 {
        match self.basis {
            Basis::MeanLatency => m.all.mean_ns() / 1e6,
            Basis::MBps => mb_per_sec(m.all.bytes, m.seconds),
            Basis::ReadMBps => mb_per_sec(m.read.bytes, m.seconds),
        }
    }
    pub(super) fn unit(&self) -> &'static str {
        match self.basis {
            Basis::MeanLatency => "ms",
            _ => "MB/s",
        }
    }
    pub(super) fn rate(&self, v: f64) -> &'static str {
        let [a, b, c] = self.limits;
        let better = |x: f64, lim: f64| match self.basis {
            Basis::MeanLatency => x < lim,
            _ => x >= lim,
        };
        if better(v, a) {
            "excellent"
        } else if better(v, b) {
            "good"
        } else if better(v, c) {
            "fair"
        } else {
            "slow"
        }
    }
    pub(super) fn text(&self) -> String {
        let [a, b, c] = self.limits;
        match self.basis {
            Basis::MeanLatency => format!(
                "{}: < {a} ms excellent, < {b} ms good, < {c} ms fair, else slow",
                self.what
            ),
            _ => format!(
                "{}: >= {a} excellent, >= {b} good, >= {c} fair, else slow",
                self.what
            ),
        }
    }
    pub(super) fn json(&self) -> Value {
        let [a, b, c] = self.limits;
        match self.basis {
            Basis::MeanLatency => json!({
                "basis": "mean_latency_ms", "excellent_below": a, "good_below": b, "fair_below": c,
                "text": self.text(),
            }),
            Basis::MBps | Basis::ReadMBps => json!({
                "basis": if matches!(self.basis, Basis::MBps) { "mb_per_sec" } else { "read_mb_per_sec" },
                "excellent_from": a, "good_from": b, "fair_from": c,
                "text": self.text(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_add_up_and_ratings() {
        for s in &SPECS {
            assert_eq!(s.mix.iter().map(|m| m.1).sum::<u32>(), 100, "{}", s.name);
        }
        assert_eq!(LATENCY_LOG.rate(0.5), "excellent");
        assert_eq!(LATENCY_LOG.rate(4.0), "good");
        assert_eq!(LATENCY_LOG.rate(25.0), "slow");
        assert_eq!(THROUGHPUT.rate(412.0), "excellent");
        assert_eq!(THROUGHPUT.rate(110.0), "fair");
        assert_eq!(THROUGHPUT.rate(31.0), "slow");
    }
}
