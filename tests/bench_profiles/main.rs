//! `pagevault bench`: the I/O each profile really issues (counted under strace), the
//! JSON figures and how they add up, the table, the removal of the test file, the errors.

#[path = "../common/mod.rs"]
mod common;
mod trace;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use trace::*;

const PROFILES: [&str; 7] = [
    "oltp-log",
    "oltp-data",
    "bulk-insert",
    "read-ahead",
    "backup",
    "restore",
    "checkdb",
];
const SIZE: u64 = 16 << 20;

#[test]
fn oltp_log_writes_small_sequential_and_syncs_each() {
    let t = traced("oltp-log");
    let w = ios(&t.phase, "pwrite64");
    assert!(w.len() >= 10, "too few log writes: {}", w.len());
    assert!(ios(&t.phase, "pread64").is_empty(), "the log is not read");
    assert!(
        sizes_between(&w, 512, 65536, 512, "oltp-log") >= 4,
        "a mix of sizes"
    );
    assert!(w.iter().any(|e| e.count < 4096), "sub-page log writes");
    assert_sequential(&w, 0, "oltp-log");
    // Every write is followed by an fdatasync before the next write.
    let io: Vec<&Ev> = t.phase.iter().filter(|e| e.call != "openat").collect();
    let first = io.iter().position(|e| e.call == "pwrite64").unwrap();
    for pair in io[first..].chunks(2) {
        assert_eq!(pair[0].call, "pwrite64", "{pair:?}");
        assert!(
            pair.len() == 2 && (pair[1].call == "fdatasync" || pair[1].call == "fsync"),
            "a log write not followed by a sync: {pair:?}"
        );
    }
    let p = &t.json["profiles"][0];
    assert_eq!(p["syncs"], p["ops"]);
    assert_eq!(p["sync_each_write"], true);
    assert_eq!(p["direct"], false);
}

#[test]
fn oltp_data_reads_and_writes_8k_pages_at_scattered_offsets() {
    let t = traced("oltp-data");
    let r = ios(&t.phase, "pread64");
    let w = ios(&t.phase, "pwrite64");
    assert!(
        r.len() >= 20 && w.len() >= 5,
        "reads {} writes {}",
        r.len(),
        w.len()
    );
    let all: Vec<&Ev> = t
        .phase
        .iter()
        .filter(|e| e.call == "pread64" || e.call == "pwrite64")
        .collect();
    sizes_between(&all, 8192, 8192, 8192, "oltp-data");
    let reads = r.len() as f64 / all.len() as f64;
    assert!(
        (0.55..0.85).contains(&reads),
        "reads are {reads:.2} of the I/O, not about 70%"
    );
    for e in &all {
        assert_eq!(e.offset % 8192, 0, "unaligned page {e:?}");
        assert!(e.offset + 8192 <= SIZE, "outside the file {e:?}");
    }
    // Scattered: hardly ever the next page, many distinct pages, all over the file.
    let adjacent = all
        .windows(2)
        .filter(|w| w[1].offset == w[0].offset + 8192)
        .count();
    assert!(
        adjacent * 10 < all.len(),
        "{adjacent} of {} adjacent",
        all.len()
    );
    let distinct: std::collections::BTreeSet<u64> = all.iter().map(|e| e.offset).collect();
    // Uniform over 2048 pages: a few repeat by chance (birthday), most do not.
    assert!(
        distinct.len() * 2 >= all.len().min(2048),
        "offsets repeat: {} distinct in {}",
        distinct.len(),
        all.len()
    );
    let (lo, hi) = (
        all.iter().map(|e| e.offset).min().unwrap(),
        all.iter().map(|e| e.offset).max().unwrap(),
    );
    assert!(
        lo < SIZE / 4 && hi > SIZE * 3 / 4,
        "offsets span {lo}..{hi}"
    );
    assert!(
        ios(&t.phase, "fdatasync").is_empty() || t.json["profiles"][0]["direct"] == false,
        "O_DIRECT data writes are not synced one by one"
    );
}

#[test]
fn bulk_insert_writes_8k_to_128k_sequentially() {
    let t = traced("bulk-insert");
    let w = ios(&t.phase, "pwrite64");
    assert!(w.len() >= 10);
    assert!(ios(&t.phase, "pread64").is_empty());
    assert!(sizes_between(&w, 8192, 131072, 8192, "bulk-insert") >= 3);
    assert_sequential(&w, 0, "bulk-insert");
    if t.json["profiles"][0]["direct"] == true {
        assert!(ios(&t.phase, "fdatasync").is_empty(), "no sync per write");
    }
}

#[test]
fn buffered_writes_are_flushed_every_8_mib_and_reads_stay_sequential() {
    let t = traced_with("bulk-insert", &["--buffered"]);
    let p = &t.json["profiles"][0];
    assert_eq!(p["direct"], false);
    assert!(
        p["io"].as_str().unwrap().contains("buffered"),
        "{}",
        p["io"]
    );
    assert_eq!(t.json["read_io_reason"], "--buffered");
    assert!(
        !t.all.iter().any(|e| e.flags.contains("O_DIRECT")),
        "--buffered opens nothing with O_DIRECT"
    );
    let io: Vec<&Ev> = t.phase.iter().filter(|e| e.call != "openat").collect();
    let w = ios(&t.phase, "pwrite64");
    sizes_between(&w, 8192, 131072, 8192, "buffered bulk-insert");
    assert_sequential(&w, 0, "buffered bulk-insert");
    // A flush after every 8 MiB written, and one at the end for the rest.
    let mut unflushed = 0;
    for e in &io {
        match e.call.as_str() {
            "pwrite64" => {
                assert!(unflushed < 8 << 20, "more than 8 MiB unflushed");
                unflushed += e.count;
            }
            "fdatasync" => {
                unflushed = 0;
            }
            c => panic!("unexpected {c}"),
        }
    }
    assert_eq!(
        unflushed, 0,
        "the last writes are flushed before the clock stops"
    );
    assert_eq!(p["syncs"], ios(&t.phase, "fdatasync").len() as u64);
    if p["bytes"].as_u64().unwrap() > 8 << 20 {
        assert!(p["syncs"].as_u64().unwrap() >= 2, "flushed along the way");
    }

    let t = traced_with("read-ahead", &["--buffered"]);
    assert_eq!(t.json["profiles"][0]["direct"], false);
    assert!(!t.all.iter().any(|e| e.flags.contains("O_DIRECT")));
    let r = ios(&t.phase, "pread64");
    assert!(sizes_between(&r, 8192, 262144, 8192, "buffered read-ahead") >= 4);
    assert_sequential(&r, 0, "buffered read-ahead");
}

#[test]
fn read_ahead_reads_8k_to_256k_sequentially() {
    let t = traced("read-ahead");
    let r = ios(&t.phase, "pread64");
    assert!(r.len() >= 10);
    assert!(
        ios(&t.phase, "pwrite64").is_empty(),
        "read-ahead writes nothing"
    );
    assert!(sizes_between(&r, 8192, 262144, 8192, "read-ahead") >= 4);
    assert!(r.iter().any(|e| e.count == 262144));
    assert_sequential(&r, 0, "read-ahead");
}

#[test]
fn backup_reads_and_writes_1mib_alternating_in_two_streams() {
    let t = traced("backup");
    let io: Vec<&Ev> = t
        .phase
        .iter()
        .filter(|e| e.call == "pread64" || e.call == "pwrite64")
        .collect();
    assert!(io.len() >= 10);
    sizes_between(&io, 1 << 20, 1 << 20, 1 << 20, "backup");
    for (i, e) in io.iter().enumerate() {
        let want = if i % 2 == 0 { "pread64" } else { "pwrite64" };
        assert_eq!(e.call, want, "reads and writes alternate: {e:?}");
    }
    let r = ios(&t.phase, "pread64");
    let w = ios(&t.phase, "pwrite64");
    // Reads from the first half (the database), writes to the second (the backup file).
    assert!(r.iter().all(|e| e.offset + e.count <= SIZE / 2));
    assert!(w
        .iter()
        .all(|e| e.offset >= SIZE / 2 && e.offset + e.count <= SIZE));
    assert_sequential(&r, 0, "backup reads");
    assert_sequential(&w, SIZE / 2, "backup writes");
    let p = &t.json["profiles"][0];
    assert_eq!(p["rating"]["figure"], p["read"]["mb_per_sec"]);
}

#[test]
fn restore_writes_64k_sequentially() {
    let t = traced("restore");
    let w = ios(&t.phase, "pwrite64");
    assert!(w.len() >= 10);
    assert!(ios(&t.phase, "pread64").is_empty());
    sizes_between(&w, 65536, 65536, 65536, "restore");
    assert_sequential(&w, 0, "restore");
}

#[test]
fn checkdb_reads_8k_to_64k_sequentially() {
    let t = traced("checkdb");
    let r = ios(&t.phase, "pread64");
    assert!(r.len() >= 10);
    assert!(ios(&t.phase, "pwrite64").is_empty());
    assert!(sizes_between(&r, 8192, 65536, 8192, "checkdb") >= 3);
    assert_sequential(&r, 0, "checkdb");
    // The fill before it: the whole file, written once in 1 MiB pieces.
    let fill: Vec<&Ev> = t
        .all
        .iter()
        .take_while(|e| e.call != "openat" || e.flags.contains("O_CREAT"))
        .filter(|e| e.call == "pwrite64")
        .collect();
    assert_eq!(fill.iter().map(|e| e.count).sum::<u64>(), SIZE);
    assert!(fill.iter().all(|e| e.count == 1 << 20));
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-3
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn check_dir(d: &Value, seconds: f64, what: &str) {
    let (ops, bytes) = (f(&d["ops"]), f(&d["bytes"]));
    assert!(
        close(f(&d["mb_per_sec"]), bytes / 1048576.0 / seconds, 1e-3),
        "{what}: MB/s {} is not bytes/seconds ({bytes} / {seconds})",
        d["mb_per_sec"]
    );
    assert!(
        close(f(&d["iops"]), ops / seconds, 1e-3),
        "{what}: IOPS {} is not ops/seconds",
        d["iops"]
    );
    let l = &d["latency_us"];
    let [min, mean, p50, p95, p99, max] =
        ["min", "mean", "p50", "p95", "p99", "max"].map(|k| f(&l[k]));
    if ops == 0.0 {
        assert_eq!(max, 0.0, "{what}");
        return;
    }
    assert!(
        min <= p50 && p50 <= p95 && p95 <= p99 && p99 <= max,
        "{what}: percentiles out of order {l}"
    );
    assert!(min <= mean + 0.1 && mean <= max + 0.1, "{what}: mean {l}");
    assert!(min > 0.0, "{what}: a zero latency {l}");
    // The I/O can not take longer in all than the profile ran.
    assert!(
        mean * ops <= seconds * 1e6 * 1.01 + 1.0,
        "{what}: latencies add up to more than the run"
    );
}

#[test]
fn json_has_every_figure_and_they_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let d = s(dir.path());
    let j = json(&["bench", "--path", &d, "--size", "16M", "--duration", "0.2"]);
    assert_empty(dir.path());
    assert_eq!(j["test_file_removed"], true);
    assert_eq!(j["file_size"], SIZE);
    assert_eq!(j["queue_depth"], 1);
    assert_eq!(j["mb"], 1048576);
    assert!(j["filesystem"].is_string() && j["read_io"].is_string());
    assert!(j["file"].as_str().unwrap().starts_with(&d));
    let prep = &j["prepare"];
    assert_eq!(prep["bytes"], SIZE);
    assert!(close(
        f(&prep["mb_per_sec"]),
        16.0 / f(&prep["seconds"]),
        2e-3
    ));
    let profiles = j["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, PROFILES, "all profiles by default, in order");
    for p in profiles {
        let name = p["name"].as_str().unwrap();
        for k in [
            "pattern",
            "access",
            "io",
            "direct",
            "sizes",
            "read_percent",
            "sync_each_write",
            "queue_depth",
            "seconds",
            "bytes",
            "ops",
            "syncs",
            "mb_per_sec",
            "iops",
            "latency_us",
            "read",
            "write",
            "rating",
        ] {
            assert!(!p[k].is_null(), "{name}: no {k}");
        }
        let secs = f(&p["seconds"]);
        assert!(
            (0.2..3.0).contains(&secs),
            "{name}: ran {secs} s for --duration 0.2"
        );
        check_dir(p, secs, name);
        check_dir(&p["read"], secs, &format!("{name} read"));
        check_dir(&p["write"], secs, &format!("{name} write"));
        assert_eq!(f(&p["ops"]), f(&p["read"]["ops"]) + f(&p["write"]["ops"]));
        assert_eq!(
            f(&p["bytes"]),
            f(&p["read"]["bytes"]) + f(&p["write"]["bytes"])
        );
        assert!(f(&p["ops"]) >= 1.0, "{name}: no I/O");
        let pct: u64 = p["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["percent"].as_u64().unwrap())
            .sum();
        assert_eq!(pct, 100, "{name}: size mix");
        let min = p["sizes"][0]["bytes"].as_f64().unwrap();
        let max = p["sizes"].as_array().unwrap().last().unwrap()["bytes"]
            .as_f64()
            .unwrap();
        let mean_io = f(&p["bytes"]) / f(&p["ops"]);
        assert!(
            mean_io >= min && mean_io <= max,
            "{name}: mean I/O {mean_io} outside the mix"
        );
        let rd = f(&p["read_percent"]);
        match name {
            "read-ahead" | "checkdb" => {
                assert_eq!(rd, 100.0);
                assert_eq!(p["write"]["ops"], 0);
            }
            "oltp-log" | "bulk-insert" | "restore" => {
                assert_eq!(rd, 0.0);
                assert_eq!(p["read"]["ops"], 0);
            }
            _ => assert!(f(&p["read"]["ops"]) > 0.0 && f(&p["write"]["ops"]) > 0.0),
        }
        assert_eq!(
            p["access"],
            if name == "oltp-data" {
                "random"
            } else {
                "sequential"
            }
        );
        // The rating follows from its figure and the stated thresholds.
        let r = &p["rating"];
        let fig = f(&r["figure"]);
        let t = &r["thresholds"];
        let want = match t["basis"].as_str().unwrap() {
            "mean_latency_ms" => {
                assert!(close(fig, f(&p["latency_us"]["mean"]) / 1000.0, 1e-3));
                assert_eq!(r["unit"], "ms");
                if fig < f(&t["excellent_below"]) {
                    "excellent"
                } else if fig < f(&t["good_below"]) {
                    "good"
                } else if fig < f(&t["fair_below"]) {
                    "fair"
                } else {
                    "slow"
                }
            }
            basis => {
                let m = if basis == "read_mb_per_sec" {
                    &p["read"]["mb_per_sec"]
                } else {
                    &p["mb_per_sec"]
                };
                assert!(close(fig, f(m), 1e-3), "{name}: rated figure");
                assert_eq!(r["unit"], "MB/s");
                if fig >= f(&t["excellent_from"]) {
                    "excellent"
                } else if fig >= f(&t["good_from"]) {
                    "good"
                } else if fig >= f(&t["fair_from"]) {
                    "fair"
                } else {
                    "slow"
                }
            }
        };
        assert_eq!(r["value"], want, "{name}: rating {r}");
        assert!(t["text"].as_str().unwrap().contains("excellent"));
    }
    let basis = |n: usize| profiles[n]["rating"]["thresholds"]["basis"].clone();
    assert_eq!(basis(0), "mean_latency_ms");
    assert_eq!(basis(1), "mean_latency_ms");
    assert_eq!(basis(3), "mb_per_sec");
    assert_eq!(basis(4), "read_mb_per_sec");
}

#[test]
fn table_names_each_profile_and_explains_the_ratings() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&[
        "bench",
        "--path",
        &s(dir.path()),
        "--profile",
        "oltp-log,restore",
        "--profile",
        "checkdb",
        "--size",
        "2M",
        "--duration",
        "0.1",
    ]);
    assert_empty(dir.path());
    for h in [
        "profile", "MB/s", "IOPS", "p50 ms", "p95 ms", "p99 ms", "max ms", "rating",
    ] {
        assert!(out.contains(h), "no column {h}:\n{out}");
    }
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| {
            ["oltp-log ", "restore ", "checkdb "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("backup ")),
        "only the asked profiles"
    );
    for r in rows {
        assert!(
            ["excellent (", "good (", "fair (", "slow ("]
                .iter()
                .any(|x| r.contains(x)),
            "no rating: {r}"
        );
    }
    assert!(out.contains("Ratings"), "{out}");
    assert!(
        out.contains("< 1 ms excellent, < 5 ms good, < 20 ms fair"),
        "{out}"
    );
    assert!(out.contains(">= 400 excellent"), "{out}");
    assert!(out.contains("queue depth 1"), "{out}");
}

#[test]
fn errors_are_clear_with_the_right_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = s(dir.path());
    // Usage: an unknown profile lists the valid ones.
    let e = fails(&["bench", "--path", &d, "--profile", "oltp-dta"], 2);
    assert!(e.contains("oltp-dta"), "{e}");
    for p in PROFILES {
        assert!(e.contains(p), "{p} not listed: {e}");
    }
    // Usage: a size too small for a profile, with what it needs.
    let e = fails(
        &["bench", "--path", &d, "--profile", "backup", "--size", "8M"],
        2,
    );
    assert!(
        e.contains("too small") && e.contains("backup") && e.contains("16 MiB"),
        "{e}"
    );
    let e = fails(&["bench", "--path", &d, "--size", "64K"], 2);
    assert!(e.contains("too small"), "{e}");
    let e = fails(&["bench", "--path", &d, "--size", "12Q"], 2);
    assert!(e.contains("unknown unit"), "{e}");
    let e = fails(&["bench", "--path", &d, "--duration", "0"], 2);
    assert!(e.contains("0.05"), "{e}");
    fails(&["bench", "--path", &d, "--duration", "soon"], 2);
    fails(&["bench"], 2);
    // Failures: no such directory, not a directory, not writable.
    let missing = dir.path().join("nope");
    let e = fails(&["bench", "--path", &s(&missing), "--size", "16M"], 1);
    assert!(
        e.contains("nope") && e.contains("existing directory"),
        "{e}"
    );
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = fails(&["bench", "--path", &s(&file), "--size", "16M"], 1);
    assert!(e.contains("not a directory"), "{e}");
    let e = fails(&["bench", "--path", "/proc", "--size", "16M"], 1);
    assert!(
        e.contains("cannot create a test file") && e.contains("/proc"),
        "{e}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let e = fails(&["bench", "--path", &s(&ro), "--size", "16M"], 1);
        assert!(e.contains("cannot create a test file"), "{e}");
    }
    // A size larger than the free space is refused before anything is written.
    let e = fails(&["bench", "--path", &d, "--size", "16000G"], 1);
    assert!(e.contains("free space"), "{e}");
    std::fs::remove_file(&file).unwrap();
    assert_empty(dir.path());
}

#[test]
fn interrupt_removes_the_test_file() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let child = Command::new(bin())
        .args(["bench", "--path"])
        .arg(dir.path())
        .args([
            "--profile",
            "oltp-data",
            "--size",
            "16M",
            "--duration",
            "60",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = false;
    for _ in 0..500 {
        if std::fs::read_dir(dir.path()).unwrap().next().is_some() {
            seen = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen, "the test file never appeared");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill on the pid of our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "not stopped by SIGINT"
    );
    assert_eq!(out.status.code(), Some(130), "128 + SIGINT");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("interrupted"), "{e}");
    assert!(out.stdout.is_empty(), "no figures from an interrupted run");
    assert_empty(dir.path());
}
