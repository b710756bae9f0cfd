//! `pagevault tune`: searches (not brute force) over a sample of the source, says how
//! much it sampled, never recommends something slower than the defaults it measured,
//! respects the memory budget and leaves no trial stripe behind.

mod common;
use common::*;

#[test]
fn tune_searches_a_sample_and_recommends_no_worse_than_the_defaults() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_tree(&src);
    for i in 0..4 {
        std::fs::write(
            src.join(format!("big{i}")),
            bytes(20 + i, 6 << 20, i % 2 == 0),
        )
        .unwrap();
    }
    let out_dir = t.path().join("trials");
    std::fs::create_dir(&out_dir).unwrap();
    let budget: u64 = 64 << 20;
    let v = json(&[
        "tune",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &s(&out_dir),
        "--sample",
        "8M",
        "--repeat",
        "2",
        "--memory-budget",
        "64M",
        "--codecs",
        "none,lz4",
    ]);
    let source = v["source_bytes"].as_u64().unwrap();
    let sampled = v["sampled_bytes"].as_u64().unwrap();
    assert!(source > 24 << 20, "{v}");
    // The same share of every file, rounded up to 64 KiB steps: close to what was asked.
    assert!((8 << 20..10 << 20).contains(&sampled), "sampled {sampled}");
    assert!(v["sampled_files"].as_u64().unwrap() >= 7);
    let grid = v["grid_points"].as_u64().unwrap();
    let measured = v["measured_points"].as_u64().unwrap();
    assert!(measured >= 8, "{v}");
    assert!(
        measured * 10 < grid,
        "a search, not the grid: {measured} of {grid}"
    );
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len() as u64, measured);
    for p in points {
        assert!(p["memory_bytes"].as_u64().unwrap() <= budget, "{p}");
        assert_eq!(p["mb_per_sec"].as_array().unwrap().len(), 2);
        assert!(p["median"].as_f64().unwrap() > 0.0);
    }
    let (best, default) = (&v["recommended"], &v["default"]);
    assert!(
        best["median"].as_f64().unwrap() >= default["median"].as_f64().unwrap(),
        "{v}"
    );
    let flags = v["flags"].as_str().unwrap();
    assert!(
        flags.contains("--buffer-count") && flags.contains("--compress"),
        "{flags}"
    );
    // Trial stripes were removed.
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);
    // A source smaller than memory is tried warm unless asked; the grid reaches the
    // depths and transfers fast devices need; the noise verdict is given either way.
    assert_eq!(v["cold"], false, "{v}");
    assert!(grid >= 7 * 4 * 3 * 3 * 3 * 2, "{grid}");
    assert!(v["noise"].is_null() || v["noise"].as_str().unwrap().contains("spread"));
    let cold = json(&[
        "tune",
        "--source",
        &format!("files:{}", s(&src)),
        "--sample",
        "2M",
        "--repeat",
        "1",
        "--memory-budget",
        "64M",
        "--codecs",
        "none",
        "--cold",
    ]);
    assert_eq!(cold["cold"], true, "{cold}");

    // A budget the defaults do not fit in is a clear error.
    let source = format!("files:{}", s(&src));
    let e = source_fails("tune", &source, &["--memory-budget", "1M"], 1);
    assert!(e.contains("memory-budget"), "{e}");
    let e = source_fails("tune", &source, &["--to", "/no/such/dir"], 1);
    assert!(e.contains("existing directory"), "{e}");
}
