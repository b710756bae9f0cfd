//! `--report FILE.html`: the series embedded in the page add up to what the run
//! reports, a real browser renders the charts, and a bad path stops before any work.

mod common;
use common::*;
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A source of `files` files of `mib` MiB each (a repeated random MiB: quick to
/// make, incompressible per transfer) and one short file.
fn data_set(root: &Path, files: u64, mib: u64) -> u64 {
    fs::create_dir_all(root).unwrap();
    let mut total = 0;
    for i in 0..files {
        let block = bytes(100 + i, MIB as usize, false);
        let mut f = fs::File::create(root.join(format!("f{i}"))).unwrap();
        for _ in 0..mib {
            f.write_all(&block).unwrap();
        }
        total += mib * MIB;
    }
    fs::write(root.join("short"), bytes(7, 100_001, false)).unwrap();
    total + 100_001
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Checks the shape every report has; returns the number of samples.
fn check_series(d: &Value) -> usize {
    let s = &d["series"];
    let t = f64s(&s["t"]);
    let n = t.len();
    assert!(n >= 2, "at least two samples, got {n}: {t:?}");
    let dt = f64s(&s["dt"]);
    let mut prev = 0.0;
    for (i, (&ti, &di)) in t.iter().zip(&dt).enumerate() {
        assert!(ti > prev, "timestamps increase: {t:?}");
        assert!((ti - prev - di).abs() < 1e-6, "dt[{i}] is the step of t");
        assert!(di <= 1.0, "sampled at least once a second: {dt:?}");
        prev = ti;
    }
    let size = s["pool"]["size"].as_u64().unwrap();
    assert!(size >= 2, "pool size {size}");
    for (k, p) in s["pool"]["peak_in_use"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let p = p.as_u64().unwrap();
        let mean = s["pool"]["mean_in_use"][k].as_f64().unwrap();
        assert!(p <= size, "peak occupancy {p} over the pool size {size}");
        assert!(mean <= p as f64 + 1e-9, "mean {mean} over peak {p}");
    }
    let mut series: Vec<&Value> = vec![
        &s["pool"]["mean_in_use"],
        &s["pool"]["peak_in_use"],
        &s["cpu_percent"],
    ];
    for lane in s["reads"]
        .as_array()
        .unwrap()
        .iter()
        .chain(s["writes"].as_array().unwrap())
    {
        for k in [
            "bytes",
            "ops",
            "latency_ns",
            "mb_per_s",
            "ops_per_s",
            "mean_size_bytes",
            "mean_latency_ms",
        ] {
            series.push(&lane[k]);
        }
    }
    for st in s["stages"].as_array().unwrap() {
        for k in ["wait_in_s", "wait_out_s", "busy_s"] {
            series.push(&st[k]);
        }
    }
    for v in series {
        assert_eq!(
            v.as_array().map(Vec::len),
            Some(n),
            "one value per sample: {v}"
        );
    }
    n
}

#[test]
fn backup_and_restore_reports_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // Big enough that backup and restore each last over the 250 ms sampling interval (a 512 MiB
    // restore from the page cache took 0.32 s here, one sample).
    let total = data_set(&src, 4, 256);
    let stripe = dir.path().join("a.pv");
    let page = dir.path().join("backup.html");
    let j = backup_files_json(
        &src,
        &s(&stripe),
        &["--threads", "1", "--report", &s(&page)],
    );
    assert_eq!(j["report"], s(&page));
    let d = report_data(&page);
    assert_eq!(d["command"], "backup");
    check_series(&d);
    let series = &d["series"];
    let reads = series["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 1, "one volume");
    assert_eq!(d["read_names"][0], s(&src));
    // Every byte read is in exactly one interval.
    assert_eq!(j["raw_bytes"], total);
    assert_eq!(series_sum(&reads[0]["bytes"]), total);
    assert_eq!(d["summary"]["raw_bytes"], total);
    // One read per transfer (256 per big file, one for the short one), fewer while the
    // adaptive readers try reads of several adjacent transfers.
    let ops = series_sum(&reads[0]["ops"]);
    assert!(
        (4 * 256 / 16..=4 * 256 + 1).contains(&ops),
        "{ops} reads for 1025 transfers"
    );
    // The engine writes the media header and the frames (body_end bytes); the
    // trailer with the manifest follows after the run.
    let h = json(&["header", "--from", &s(&stripe)]);
    let body_end = h["sets"][0]["stripes"][0]["body_end"].as_u64().unwrap();
    let writes = series["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 1, "one device");
    assert_eq!(series_sum(&writes[0]["bytes"]), body_end);
    let file_len = fs::metadata(&stripe).unwrap().len();
    assert_eq!(j["stripes"][0]["bytes"], file_len);
    assert!(
        file_len > body_end && file_len - body_end < MIB,
        "trailer of {file_len} - {body_end}"
    );
    let stages: Vec<&str> = series["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["read", "compress", "write"]);
    for k in [
        "buffer_count",
        "max_transfer_size",
        "devices",
        "codec",
        "threads",
        "readers_per_volume",
        "source",
    ] {
        assert!(
            !d["config"][k].is_null(),
            "config names {k}: {}",
            d["config"]
        );
    }

    let target = dir.path().join("restored");
    let page = dir.path().join("restore.html");
    let r = json(&[
        "restore",
        "--from",
        &s(&stripe),
        "--to",
        &s(&target),
        "--threads",
        "1",
        "--report",
        &s(&page),
    ]);
    assert_eq!(r["report"], s(&page));
    let d = report_data(&page);
    assert_eq!(d["command"], "restore");
    check_series(&d);
    let series = &d["series"];
    // Restore reads the frames of the stripe: its body after the header block.
    let block = h["sets"][0]["block_size"].as_u64().unwrap();
    let reads = &series["reads"][0];
    assert_eq!(series_sum(&reads["bytes"]), body_end - block);
    assert_eq!(series_sum(&reads["ops"]), r["frames"].as_u64().unwrap());
    // And writes every byte of every file into the target.
    assert_eq!(series_sum(&series["writes"][0]["bytes"]), total);
    assert_eq!(r["raw_bytes"], total);
    assert_eq!(fs::metadata(target.join("f3")).unwrap().len(), 256 * MIB);
}

#[test]
fn text_output_names_the_report() {
    let (dir, src) = tree_in_tempdir();
    let page = dir.path().join("nul.html");
    let out = ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        "NUL",
        "--report",
        &s(&page),
    ]);
    let line = format!("Report written to {}", s(&page));
    assert!(out.lines().any(|l| l == line), "'{line}' in\n{out}");
    let d = report_data(&page);
    assert_eq!(d["config"]["devices"][0], "NUL");
    // A run shorter than the interval still has its one final sample.
    assert!(!d["series"]["t"].as_array().unwrap().is_empty());
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Runs chromium headless on `page` and returns the DOM it built.
fn rendered_dom(page: &Path, profile: &Path) -> String {
    let chromium = Command::new("chromium").arg("--version").output();
    assert!(
        chromium.is_ok_and(|o| o.status.success()),
        "chromium is missing: scripts/setup.sh installs it (apt-get install chromium)"
    );
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=2000",
            &format!("--user-data-dir={}", s(profile)),
            "--dump-dom",
            &format!("file://{}", s(page)),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// The `points` of each polyline of the chart `id` in a DOM.
fn chart_points(dom: &str, id: &str) -> Vec<Vec<(f64, f64)>> {
    let open = format!("<div class=\"chart\" id=\"{id}\">");
    let at = dom
        .find(&open)
        .unwrap_or_else(|| panic!("chart {id} in the DOM"));
    let chart = &dom[at..at + dom[at..].find("</svg>").expect("the chart's svg")];
    assert!(chart.contains("<svg"), "chart {id} is an SVG");
    chart
        .split("<polyline")
        .skip(1)
        .map(|p| {
            let p = &p[p.find("points=\"").expect("points") + 8..];
            p[..p.find('"').unwrap()]
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_headless_browser_renders_the_charts() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // Text at zstd level 12 on one thread: slow enough for several samples of 250 ms
    // on a fast machine too (16 MiB was not).
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("text"), bytes(5, 64 << 20, true)).unwrap();
    let page = dir.path().join("b.html");
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &s(&dir.path().join("a.pv")),
        "--compress",
        "zstd:12",
        "--threads",
        "1",
        "--report",
        &s(&page),
    ]);
    let d = report_data(&page);
    let n = check_series(&d);
    let dom = rendered_dom(&page, &dir.path().join("chromium-profile"));
    assert!(
        dom.contains("id=\"pagevault-data\""),
        "the data stays in the DOM"
    );
    for id in [
        "read-mbps",
        "read-size",
        "read-latency",
        "pool",
        "read-inflight",
        "read-ops",
        "write-mbps",
        "waits",
        "cpu",
    ] {
        let lines = chart_points(&dom, id);
        assert!(!lines.is_empty(), "chart {id} draws lines");
        let points: usize = lines.iter().map(Vec::len).sum();
        if id == "read-size" || id == "read-latency" {
            // Means exist only where there were reads (the tail may only compress).
            let with_reads = d["series"]["reads"][0]["ops"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|o| o.as_u64().unwrap() > 0)
                .count();
            assert_eq!(
                points,
                2 * with_reads,
                "chart {id}: a step per interval with reads"
            );
        } else {
            assert!(points >= n, "chart {id}: {points} points for {n} samples");
        }
        for (x, y) in lines.iter().flatten() {
            assert!(
                (0.0..=960.0).contains(x) && (0.0..=150.0).contains(y),
                "{id}: point {x},{y} outside the plot"
            );
        }
    }
    // Read MB/s is not flat on the axis: it has data.
    let read = &chart_points(&dom, "read-mbps")[0];
    assert_eq!(read.len(), 2 * n, "one step per sample");
    let axis = read.iter().map(|p| p.1).fold(0.0, f64::max);
    assert!(
        read.iter().any(|p| p.1 < axis - 10.0),
        "read MB/s rises off the axis: {read:?}"
    );
    // The page's script ran in the browser: it shows each chart's last values.
    assert!(
        dom.contains("<span class=\"rd\">t="),
        "the readout was filled by the script"
    );
    // The charts share one time axis, read MB/s directly above read size, latency, pool.
    let order: Vec<usize> = ["read-mbps", "read-size", "read-latency", "pool"]
        .iter()
        .map(|id| dom.find(&format!("id=\"{id}\"")).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "chart order {order:?}"
    );
}

#[test]
fn a_bad_report_path_stops_before_any_work() {
    let (dir, src) = tree_in_tempdir();
    let stripe = dir.path().join("a.pv");
    let missing = dir.path().join("no/such/dir/r.html");
    let args = |report: &str| {
        vec![
            "backup".to_string(),
            "--source".into(),
            format!("files:{}", s(&src)),
            "--to".into(),
            s(&stripe),
            "--report".into(),
            report.into(),
        ]
    };
    for (report, says) in [
        (s(&missing), s(&dir.path().join("no/such/dir"))),
        (s(dir.path()), "is a directory".to_string()),
    ] {
        let a = args(&report);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let e = fails(&a, 2);
        assert!(e.contains(&report) && e.contains(&says), "{e}");
        assert!(!stripe.exists(), "no backup written");
        assert!(
            !dir.path().join("a.pv.partial").exists(),
            "no backup started"
        );
    }
    // A stripe to restore from, then a restore with a bad report path.
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &s(&stripe),
    ]);
    let target = dir.path().join("restored");
    let e = fails(
        &[
            "restore",
            "--from",
            &s(&stripe),
            "--to",
            &s(&target),
            "--report",
            &s(&missing),
        ],
        2,
    );
    assert!(e.contains(&s(&missing)), "{e}");
    assert!(!target.exists(), "nothing restored");
}
