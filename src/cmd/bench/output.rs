//! The results: a table for people, JSON for programs.

use super::measure::{round3, Measured};
use super::profiles::{Kind, Spec};
use crate::units::{human, mb_per_sec};
use serde_json::{json, Value};
use std::path::Path;

fn ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub(super) fn print_table(
    dir: &Path,
    fs: &str,
    size: u64,
    secs: f64,
    read_mode: &str,
    prep_secs: f64,
    results: &[(&Spec, Measured)],
) {
    println!(
        "pagevault bench on {} ({fs}): test file {}, {secs} s per profile, one I/O at a time (queue depth 1)",
        dir.display(),
        human(size)
    );
    println!(
        "reads: {read_mode}; test file written at {:.1} MB/s (1 MiB writes) and removed",
        mb_per_sec(size, prep_secs)
    );
    println!();
    println!(
        "{:<11} {:<20} {:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  rating",
        "profile",
        "pattern",
        "io",
        "MB/s",
        "IOPS",
        "mean ms",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms"
    );
    for (s, m) in results {
        let h = &m.all.hist;
        let fig = s.rule.figure(m);
        let io = match m.io.as_str() {
            "O_DIRECT" => "direct",
            "buffered + fdatasync" => "buf+sync",
            _ => "buffered",
        };
        println!(
            "{:<11} {:<20} {:<9} {:>9.1} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>9}  {} ({} {})",
            s.name,
            s.short,
            io,
            mb_per_sec(m.all.bytes, m.seconds),
            m.all.ops as f64 / m.seconds,
            ms(h.mean_ns()),
            ms(h.percentile_ns(0.50) as f64),
            ms(h.percentile_ns(0.95) as f64),
            ms(h.percentile_ns(0.99) as f64),
            ms(h.max_ns as f64),
            s.rule.rate(fig),
            if fig >= 100.0 {
                format!("{fig:.0}")
            } else {
                format!("{fig:.2}")
            },
            s.rule.unit()
        );
    }
    println!();
    println!("Ratings (DBA rules of thumb; MB = 1,048,576 bytes):");
    // Profiles under the same rule share a line.
    let mut rules: Vec<(Vec<&str>, String)> = Vec::new();
    for (s, _) in results {
        let t = s.rule.text();
        match rules.iter_mut().find(|r| r.1 == t) {
            Some(r) => r.0.push(s.name),
            None => rules.push((vec![s.name], t)),
        }
    }
    for (names, text) in rules {
        println!("  {}: {text}", names.join(", "));
    }
    println!(
        "Latency is per I/O from issue to completion (oltp-log: the write and its fdatasync). \
MB/s and IOPS count reads and writes together."
    );
    if results.iter().any(|(_, m)| m.io.contains("every 8 MiB")) {
        println!(
            "Buffered writes are flushed with fdatasync every 8 MiB and at the end; the write \
that triggers a flush counts its time."
        );
    }
}

/// One profile's figures and rating as JSON.
pub(super) fn profile_json(s: &Spec, m: &Measured) -> Value {
    let fig = s.rule.figure(m);
    let mut p = m.all.json(m.seconds);
    let o = p.as_object_mut().unwrap();
    let mut head = serde_json::Map::new();
    head.insert("name".into(), json!(s.name));
    head.insert("pattern".into(), json!(s.pattern));
    head.insert(
        "access".into(),
        json!(if s.kind == Kind::Random {
            "random"
        } else {
            "sequential"
        }),
    );
    head.insert("io".into(), json!(m.io));
    head.insert("direct".into(), json!(m.io == "O_DIRECT"));
    head.insert(
        "sizes".into(),
        json!(s
            .mix
            .iter()
            .map(|(b, p)| json!({"bytes": b, "percent": p}))
            .collect::<Vec<_>>()),
    );
    head.insert("read_percent".into(), json!(s.read_percent));
    head.insert("sync_each_write".into(), json!(s.kind == Kind::LogWrite));
    head.insert("queue_depth".into(), json!(1));
    head.insert("seconds".into(), json!((m.seconds * 1e6).round() / 1e6));
    head.insert("syncs".into(), json!(m.syncs));
    for (k, v) in std::mem::take(o) {
        head.insert(k, v);
    }
    head.insert("read".into(), m.read.json(m.seconds));
    head.insert("write".into(), m.write.json(m.seconds));
    head.insert(
        "rating".into(),
        json!({
            "value": s.rule.rate(fig),
            "figure": round3(fig),
            "unit": s.rule.unit(),
            "thresholds": s.rule.json(),
        }),
    );
    Value::Object(head)
}
