//! `archive-get`'s prefetch: the segments after the one recovery asks for are fetched
//! ahead into a directory only the server's user may write, each checked against the
//! archive before it is handed over; a damaged one fails as if fetched, and nothing
//! planted in the directory is ever handed over.

mod common;

use common::pg::{postgres_dir, Pg};
use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

fn add(pg: &Pg, from: u32, to: u32) {
    pg.sql(&format!(
        "INSERT INTO t SELECT g FROM generate_series({from}, {to}) g"
    ));
}

/// Files in the prefetch directory named as WAL (fetched) or NAME.error (failed).
fn prefetched(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).map_or(vec![], |d| {
        d.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 24 || n.ends_with(".error"))
            .collect()
    });
    v.sort();
    v
}

#[test]
fn archive_get_prefetches_the_next_segments_checked_and_a_damaged_one_fails_as_if_fetched() {
    let dir = postgres_dir("prefetch");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    let pg = Pg::start(true, Some(&common::pg::push_cmd(&repo)));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let mut segs = vec![];
    for i in 0..6 {
        add(&pg, 1001 + i * 1000, 2000 + i * 1000);
        segs.push(pg.switch_and_wait());
    }
    drop(pg);
    let wal = |n: &str| repo_dir.join("wal").join(&n[..8]).join(format!("{n}.zst"));
    // What each segment restores to, fetched without prefetch.
    let plain = dir.join("plain");
    fs::create_dir(&plain).unwrap();
    // As PostgreSQL runs it: as postgres, in its directories.
    let get = |name: &str, dest: &Path, extra: &[&str]| {
        let d = s(dest);
        let mut a = vec!["archive-get", name, &d, "--repo", &repo];
        a.extend_from_slice(extra);
        common::pg::give_to_postgres(&dir);
        common::pg::run_as_postgres(&a)
    };
    for n in &segs[..4] {
        assert_eq!(get(n, &plain.join(n), &["--prefetch", "0"]).code, 0);
    }
    assert!(!plain.join("pagevault-prefetch").exists());
    // The fourth segment is damaged in the archive before anything fetches it ahead.
    let good4 = fs::read(wal(&segs[3])).unwrap();
    let mut bad = good4.clone();
    let at = bad.len() - 100;
    bad[at] ^= 0x55;
    fs::write(wal(&segs[3]), &bad).unwrap();

    // As PostgreSQL asks: the destination is RECOVERYXLOG, prefetch is on.
    let pg_wal = dir.join("pg_wal");
    fs::create_dir(&pg_wal).unwrap();
    let dest = pg_wal.join("RECOVERYXLOG");
    let ahead = pg_wal.join("pagevault-prefetch");
    let r = get(&segs[0], &dest, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(plain.join(&segs[0])).unwrap()
    );
    let t0 = Instant::now();
    while prefetched(&ahead).len() < 5 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{:?}\n{}",
            prefetched(&ahead),
            fs::read_to_string(ahead.join("fetcher.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let want: Vec<String> = vec![
        segs[1].clone(),
        segs[2].clone(),
        format!("{}.error", segs[3]),
        segs[4].clone(),
        segs[5].clone(),
    ];
    assert_eq!(prefetched(&ahead), want);

    // A prefetched segment matching the archive's header is handed over (moved).
    let r = get(&segs[1], &dest, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("discarded"), "{}", r.stderr);
    assert!(!ahead.join(&segs[1]).exists());
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(plain.join(&segs[1])).unwrap()
    );
    // The damaged one fails exactly as a fetch of it fails: 126, naming the damage.
    let direct = get(&segs[3], &plain.join("x"), &["--prefetch", "0"]);
    let r = get(&segs[3], &dest, &[]);
    assert_eq!((direct.code, r.code), (126, 126), "{}", r.stderr);
    assert!(
        r.stderr.contains("damaged") && r.stderr.contains(&segs[3]),
        "{}",
        r.stderr
    );
    // Repaired, it is fetched again and served.
    fs::write(wal(&segs[3]), &good4).unwrap();
    let r = get(&segs[3], &dest, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(plain.join(&segs[3])).unwrap()
    );
    // The end of the archive: exit 1, and the prefetch directory is gone.
    let t0 = Instant::now();
    while ahead.join("fetcher.lock").exists()
        && !prefetched(&ahead).is_empty()
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let next = format!(
        "{}{:08X}",
        &segs[5][..16],
        u32::from_str_radix(&segs[5][16..], 16).unwrap() + 1
    );
    let r = get(&next, &dest, &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let t0 = Instant::now();
    while ahead.exists() {
        // A fetcher still running keeps its lock file there: the next end removes it.
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{:?}",
            prefetched(&ahead)
        );
        std::thread::sleep(Duration::from_millis(200));
        get(&next, &dest, &[]);
    }
}

/// The prefetch directory is used only when it is this user's and no one else may write
/// it; even then a file in it is handed over only if it is a regular file whose bytes
/// match the record of the fetcher's check beside it (a forged segment, a forged record
/// or a planted link is discarded, and the segment fetched from the repository).
#[test]
fn archive_get_hands_over_nothing_planted_in_the_prefetch_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = postgres_dir("prefetch_planted");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    let pg = Pg::start(true, Some(&common::pg::push_cmd(&repo)));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let mut segs = vec![];
    for i in 0..3 {
        add(&pg, 1001 + i * 1000, 2000 + i * 1000);
        segs.push(pg.switch_and_wait());
    }
    drop(pg);
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    let get = |name: &str, dest: &Path, ahead: &Path| {
        let (d, a) = (s(dest), s(ahead));
        run(&[
            "archive-get",
            name,
            &d,
            "--repo",
            &repo,
            "--prefetch",
            "1",
            "--prefetch-dir",
            &a,
        ])
    };
    let genuine = out.join("genuine");
    let r = run(&["archive-get", &segs[0], &s(&genuine), "--repo", &repo]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = fs::read(&genuine).unwrap();
    let mut forged = want.clone();
    forged[want.len() / 2] ^= 0x5A;
    // Run as root here: the directories under one of root's (those above a prefetch
    // directory are checked too).
    let base = tempfile::tempdir().unwrap();
    let private = |name: &str| {
        let d = base.path().join(name);
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        d
    };

    // (a) Another user's directory, or one anyone may write: refused, naming the path,
    // its owner and mode and the fix; the segment comes from the repository.
    let nobody = common::pg::uid_of("nobody");
    let theirs = private("theirs");
    fs::write(theirs.join(&segs[0]), &forged).unwrap();
    std::os::unix::fs::chown(&theirs, Some(nobody), None).unwrap();
    let open = private("open");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(open.join(&segs[0]), &forged).unwrap();
    for (d, says) in [
        (&theirs, format!("uid {nobody} (nobody) with mode 0700")),
        (&open, "with mode 0777".to_string()),
    ] {
        let dest = out.join("a");
        let r = get(&segs[0], &dest, d);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(fs::read(&dest).unwrap(), want, "{}", r.stderr);
        for w in [s(d).as_str(), &says, "chmod 700", "chown", "refused"] {
            assert!(r.stderr.contains(w), "no '{w}' in: {}", r.stderr);
        }
        // Left as it is, and no fetcher writes there.
        assert_eq!(fs::read(d.join(&segs[0])).unwrap(), forged);
        assert!(!d.join("fetcher.log").exists());
    }

    // (b) A forged segment in a private directory: without the record of a check, or
    // with the record of the genuine bytes (right file, wrong digest), or a record
    // forged out of shape: discarded with a warning, and the archive's bytes delivered.
    let mine = private("mine");
    let record = mine.join(format!("{}.checked", segs[0]));
    let genuine_record = |f: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(f).unwrap();
        format!(
            "pagevault prefetched 1\nname {}\nbytes {}\nblake3 {}\nfile {} {}\n",
            segs[0],
            want.len(),
            blake3::hash(&want).to_hex(),
            m.dev(),
            m.ino()
        )
    };
    type Record<'a> = &'a dyn Fn(&Path) -> String;
    let cases: [(&str, Record); 3] = [
        ("no record of its check", &|_| String::new()),
        ("BLAKE3", &genuine_record),
        ("not a number", &|f| {
            genuine_record(f).replace("bytes ", "bytes x")
        }),
    ];
    for (i, (says, rec)) in cases.iter().enumerate() {
        let seg = mine.join(&segs[0]);
        fs::write(&seg, &forged).unwrap();
        let text = rec(&seg);
        if !text.is_empty() {
            fs::write(&record, text).unwrap();
        }
        let dest = out.join(format!("b{i}"));
        let r = get(&segs[0], &dest, &mine);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(fs::read(&dest).unwrap(), want, "{}", r.stderr);
        for w in ["WARNING", "discarded", says, &segs[0]] {
            assert!(r.stderr.contains(w), "no '{w}' in: {}", r.stderr);
        }
        assert!(!seg.exists() && !record.exists());
    }

    // (c) A link planted under a segment's name is not followed (nor moved into place):
    // what it points to stays, and the archive's bytes are delivered.
    let linked = private("linked");
    let target = out.join("target");
    fs::write(&target, &forged).unwrap();
    std::os::unix::fs::symlink(&target, linked.join(&segs[0])).unwrap();
    let dest = out.join("c");
    let r = get(&segs[0], &dest, &linked);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        fs::symlink_metadata(&dest).unwrap().is_file(),
        "{}",
        r.stderr
    );
    assert_eq!(fs::read(&dest).unwrap(), want, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    assert_eq!(fs::read(&target).unwrap(), forged);
    assert!(fs::symlink_metadata(linked.join(&segs[0])).is_err());
    // The directory itself a link: refused.
    let via = dir.join("via");
    std::os::unix::fs::symlink(&mine, &via).unwrap();
    let r = get(&segs[0], &out.join("d"), &via);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("is a symbolic link"), "{}", r.stderr);
}
