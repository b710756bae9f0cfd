use super::chart::{nice, num};
use super::html::render;
use super::sampler::Sample;
use super::valley::find_valley;
use super::*;
use crate::engine::stats::{Counts, Snapshot};
use serde_json::json;

#[test]
fn nice_steps() {
    assert_eq!(nice(0.0), 1.0);
    assert_eq!(nice(7.0), 10.0);
    assert_eq!(nice(180.0), 200.0);
    assert_eq!(nice(2.2), 2.5);
    assert_eq!(num(2.50), "2.5");
    assert_eq!(num(120.4), "120");
}

/// Samples of one volume: per interval (MB read, reads, ms per read, buffers in use).
fn samples(intervals: &[(u64, u64, u64, f64)]) -> Vec<Sample> {
    let mut c = Counts::default();
    let mut v = vec![Sample {
        t: 0.0,
        snap: Snapshot::default(),
        cpu: 0.0,
        pool_mean: 0.0,
        pool_peak: 0,
    }];
    for (i, &(mb, ops, ms, pool)) in intervals.iter().enumerate() {
        c.bytes += mb << 20;
        c.ops += ops;
        c.ns += ops * ms * 1_000_000;
        v.push(Sample {
            t: (i + 1) as f64 * 0.25,
            snap: Snapshot {
                reads: vec![c],
                pool_size: 10,
                ..Snapshot::default()
            },
            cpu: 0.0,
            pool_mean: pool,
            pool_peak: pool.ceil() as u64,
        });
    }
    v
}

#[test]
fn a_valley_is_found_and_explained() {
    let steady = (100, 100, 2, 4.0);
    let mut iv = vec![steady; 8];
    // Smaller reads, slower, pool full.
    iv[4] = (20, 80, 5, 10.0);
    iv[5] = (30, 90, 5, 9.5);
    let s = Series::from_samples(&samples(&iv));
    let v = find_valley(&s).expect("a valley");
    assert_eq!((v.t_start, v.t_end), (1.0, 1.5));
    let causes = v.causes.join("; ");
    assert!(causes.contains("pool was full"), "{causes}");
    assert!(causes.contains("reads were smaller"), "{causes}");
    assert!(causes.contains("took longer"), "{causes}");
    let summary =
        json!({"raw_bytes": 1, "seconds": 2.0, "mb_per_sec": 0.5, "waits": {"stages": []}});
    let html = render(&Report {
        command: "backup",
        config: json!({"source": "files:/x</script>"}),
        summary: &summary,
        series: s,
        read_names: vec!["/data".into()],
        write_names: vec![],
    });
    assert_eq!(
        html.matches("class=\"valley\"").count(),
        9,
        "shaded in every chart"
    );
    assert!(html.contains("<b>Valley</b> from 1.00 s to 1.50 s"));
    assert!(!html.contains("/x</script>"), "config text is escaped");
    // Steady reads: no valley.
    assert!(find_valley(&Series::from_samples(&samples(&[steady; 8]))).is_none());
}

#[test]
fn bad_paths_are_refused() {
    let e = writable_path("/nonexistent-dir-pv/r.html").unwrap_err();
    assert!(e.contains("/nonexistent-dir-pv"), "{e}");
    assert!(writable_path("/").is_err());
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("r.html");
    assert_eq!(writable_path(p.to_str().unwrap()).unwrap(), p);
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "probe removed"
    );
}
