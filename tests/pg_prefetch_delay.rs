//! WAL prefetch behind a store in another zone (issue 55): MinIO behind the harness's
//! delay proxy. A segment found prefetched is handed over with no request to the store:
//! with the proxy stopped (the store unreachable) it still comes, checked against the
//! record of the fetcher's check; a segment not prefetched fails as it always did, and
//! forged bytes in the prefetch directory are never handed over.

mod common;

use common::pg::{postgres_dir, Pg};
use common::stores::{shared, unique};
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Names of the segments fetched ahead into `dir`.
fn prefetched(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).map_or(vec![], |d| {
        d.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 24)
            .collect()
    });
    v.sort();
    v
}

#[test]
fn a_prefetched_segment_comes_with_the_store_unreachable_and_forged_bytes_never() {
    let minio = &shared().minio;
    let repo = format!("s3://pvtest/{}", unique("prefetch-delay"));
    ok(&["init", "--repo", &repo]);
    // Segments archived by PostgreSQL into a directory, then pushed into the store.
    let dir = postgres_dir("prefetch_delay");
    let arch = dir.join("arch");
    fs::create_dir(&arch).unwrap();
    common::pg::give_to_postgres(&dir);
    let pg = Pg::start(true, Some(&format!("cp %p {}/%f", arch.display())));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let mut segs = vec![];
    for i in 0..5 {
        pg.sql(&format!(
            "INSERT INTO t SELECT g FROM generate_series({}, {}) g",
            1001 + i * 1000,
            2000 + i * 1000
        ));
        segs.push(pg.switch_and_wait());
    }
    drop(pg);
    for n in &segs {
        ok(&["archive-push", &s(&arch.join(n)), "--repo", &repo]);
    }
    let genuine = |n: &str| fs::read(arch.join(n)).unwrap();

    // archive-get through 10 ms each way, as PostgreSQL asks it; an unreachable store
    // fails within 2 s.
    let base = tempfile::tempdir().unwrap();
    let ahead = base.path().join("ahead");
    fs::create_dir(&ahead).unwrap();
    fs::set_permissions(&ahead, fs::Permissions::from_mode(0o700)).unwrap();
    let dest = base.path().join("RECOVERYXLOG");
    let get = |name: &str, endpoint: &str| {
        let (d, a) = (s(&dest), s(&ahead));
        run_env(
            &[
                "archive-get",
                name,
                &d,
                "--repo",
                &repo,
                "--s3-endpoint",
                endpoint,
                "--prefetch",
                "2",
                "--prefetch-dir",
                &a,
            ],
            &[("PAGEVAULT_RETRY_SECONDS", "2")],
        )
    };
    let mut proxy = minio.delayed(10);
    let r = get(&segs[0], &proxy.endpoint());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(fs::read(&dest).unwrap(), genuine(&segs[0]));
    let t0 = Instant::now();
    while prefetched(&ahead) != segs[1..3] {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{:?}\n{}",
            prefetched(&ahead),
            fs::read_to_string(ahead.join("fetcher.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(proxy.connections() > 0);
    // Each with the record of its check, written before it.
    for n in &segs[1..3] {
        assert!(ahead.join(format!("{n}.checked")).is_file());
    }

    // The store unreachable: what was prefetched still comes, checked.
    let endpoint = proxy.endpoint();
    proxy.stop();
    let r = get(&segs[1], &endpoint);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("WARNING"), "{}", r.stderr);
    assert_eq!(fs::read(&dest).unwrap(), genuine(&segs[1]));

    // Forged bytes in place of the next prefetched segment (same file, same size): not
    // handed over; the store being unreachable, archive-get fails (126: recovery stops)
    // rather than end the archive, and the destination does not hold them.
    let seg2 = ahead.join(&segs[2]);
    let mut forged = fs::read(&seg2).unwrap();
    assert_eq!(forged, genuine(&segs[2]));
    let at = forged.len() / 3;
    forged[at] ^= 0x5A;
    fs::OpenOptions::new()
        .write(true)
        .open(&seg2)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &forged))
        .unwrap();
    fs::remove_file(&dest).unwrap();
    let r = get(&segs[2], &endpoint);
    assert_eq!(r.code, 126, "{}", r.stderr);
    for w in ["discarded", "BLAKE3", &segs[2]] {
        assert!(r.stderr.contains(w), "no '{w}' in: {}", r.stderr);
    }
    assert!(!dest.exists() && !seg2.exists());

    // A segment not prefetched: the store unreachable fails it as before (126).
    let r = get(&segs[4], &endpoint);
    assert_eq!(r.code, 126, "{}", r.stderr);
    assert!(!dest.exists());

    // The store reachable again (a new proxy): the forged segment's genuine bytes come
    // from it.
    let proxy = minio.delayed(10);
    let r = get(&segs[2], &proxy.endpoint());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(fs::read(&dest).unwrap(), genuine(&segs[2]));
    // Ends the fetcher.
    let _ = fs::remove_dir_all(&ahead);
}
