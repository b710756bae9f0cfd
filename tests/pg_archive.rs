//! WAL archiving against a real PostgreSQL 15: `archive-push` as archive_command,
//! `archive-get` as restore_command (a copy of the cluster recovers through it),
//! idempotent pushes, refused corrupt or foreign segments, damaged archives, and a
//! pgbench load that must not make pg_wal pile up.

mod common;
use common::pg::{
    as_postgres, connect_args, give_to_postgres, postgres_dir, push_cmd, sql_at, Pg, BIN,
};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One cluster at a time: the machine has 2 cores and the pgbench test measures.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// (archived_count, failed_count, last_archived_wal, last_failed_wal)
fn archiver(pg: &Pg) -> (u64, u64, String, String) {
    let r = pg.sql(
        "SELECT archived_count, failed_count, coalesce(last_archived_wal, ''), \
         coalesce(last_failed_wal, '') FROM pg_stat_archiver",
    );
    let f: Vec<&str> = r.split('|').collect();
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].to_string(),
        f[3].to_string(),
    )
}

fn wait_archived(pg: &Pg, at_least: u64, timeout: Duration) -> (u64, u64, String, String) {
    let t0 = Instant::now();
    loop {
        let a = archiver(pg);
        if a.0 >= at_least {
            return a;
        }
        assert!(
            t0.elapsed() < timeout,
            "archiver stuck at {a:?}, wanted {at_least} archived; server log:\n{}",
            pg.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ready_count(data: &Path) -> usize {
    fs::read_dir(data.join("pg_wal/archive_status"))
        .map(|rd| {
            rd.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".ready"))
            })
            .count()
        })
        .unwrap_or(0)
}

fn is_segment_name(n: &str) -> bool {
    n.len() == 24 && n.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Segments in pg_wal that PostgreSQL reports archived (.done).
fn done_segments(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(data.join("pg_wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| is_segment_name(n))
        .filter(|n| {
            data.join(format!("pg_wal/archive_status/{n}.done"))
                .exists()
        })
        .collect();
    v.sort();
    v
}

/// Every file of the archive, relative to the repository's wal/ directory.
fn archive_files(repo: &Path) -> Vec<String> {
    let mut out = vec![];
    let wal = repo.join("wal");
    for e in walkdir::WalkDir::new(&wal).min_depth(1) {
        let e = e.unwrap();
        if e.file_type().is_file() {
            out.push(s(e.path().strip_prefix(&wal).unwrap()));
        }
    }
    out.sort();
    out
}

fn archived_segments(repo: &Path, tli: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(repo.join("wal").join(tli))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter_map(|n| n.strip_suffix(".zst").map(str::to_string))
                .filter(|n| is_segment_name(n))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn get_ok(repo: &Path, name: &str, dest: &Path) -> Vec<u8> {
    ok(&["archive-get", name, &s(dest), "--repo", &s(repo)]);
    fs::read(dest).unwrap()
}

/// A second cluster started by pg_ctl, stopped on drop (even when a test panics).
struct Started {
    dir: PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl")])
            .args([
                "-D",
                &s(&self.dir.join("data")),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Removes a directory when the test passes (kept for a look when it fails).
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// The test lock, a repository removed when the test passes, and a server with
/// checksums archiving into it (the server is dropped first: it is declared last).
fn archiving() -> (std::sync::MutexGuard<'static, ()>, Cleanup, PathBuf, Pg) {
    let g = lock();
    let repo = postgres_dir("repo");
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    (g, Cleanup(repo.clone()), repo, pg)
}

#[test]
fn live_cluster_archives_and_recovers_through_archive_get() {
    let (_g, _clean, repo, pg) = archiving();
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text NOT NULL)");
    let start = archiver(&pg).0;
    for i in 0..4 {
        pg.sql(&format!(
            "INSERT INTO t SELECT g, md5(g::text) FROM generate_series({}, {}) g",
            i * 20_000 + 1,
            (i + 1) * 20_000
        ));
        if i < 3 {
            pg.sql("SELECT pg_switch_wal()");
        }
    }
    let last = pg.switch_and_wait();
    let a = wait_archived(&pg, start + 4, Duration::from_secs(60));
    assert_eq!(a.2, last);
    assert_eq!(a.1, 0, "archive failures: {a:?}\n{}", pg.log());

    // The repository holds them, under the timeline, with the cluster's identity.
    let sysid = pg.sql("SELECT system_identifier FROM pg_control_system()");
    assert_eq!(
        fs::read_to_string(repo.join("wal/system_identifier"))
            .unwrap()
            .trim(),
        sysid
    );
    let archived = archived_segments(&repo, "00000001");
    assert!(archived.len() >= 4, "{archived:?}");
    assert!(archived.contains(&a.2), "{} not in {archived:?}", a.2);
    let files = archive_files(&repo);
    assert!(
        files.iter().all(|f| f == "system_identifier"
            || (f.starts_with("00000001/") && (f.ends_with(".zst") || f.ends_with(".sum")))),
        "unexpected files in the archive: {files:?}"
    );
    // Every archived segment has its block summary beside it.
    for n in &archived {
        assert!(
            files.contains(&format!("00000001/{n}.sum")),
            "{n} has no summary: {files:?}"
        );
    }

    // archive-get returns byte-identical copies of the segments still in pg_wal.
    let tmp = tempfile::tempdir().unwrap();
    let done = done_segments(&pg.data);
    assert!(done.len() >= 3, "{done:?}");
    for n in &done {
        let got = get_ok(&repo, n, &tmp.path().join("RECOVERYXLOG"));
        assert!(
            got == fs::read(pg.data.join("pg_wal").join(n)).unwrap(),
            "{n}: archive-get differs from pg_wal"
        );
    }
    let first = done[0].clone();
    let src = pg.data.join("pg_wal").join(&first);
    let stored = repo.join(format!("wal/00000001/{first}.zst"));
    let stored_bytes = fs::read(&stored).unwrap();
    // The archived file is a plain zstd file as well: `zstd -d` would restore it.
    // (Read now: the checkpoint of pg_basebackup below recycles archived segments.)
    let src_bytes = fs::read(&src).unwrap();
    assert!(zstd::stream::decode_all(&stored_bytes[..]).unwrap() == src_bytes);

    // (2) Pushing the same segment twice is fine ...
    let out = ok(&["archive-push", &s(&src), "--repo", &s(&repo)]);
    assert!(out.contains("already archived"), "{out}");
    let j = json(&["archive-push", &s(&src), "--repo", &s(&repo)]);
    assert_eq!(j["outcome"], "already_archived", "{j}");
    assert_eq!(j["name"], first.as_str(), "{j}");
    assert_eq!(j["raw_bytes"], src_bytes.len() as u64, "{j}");
    assert_eq!(
        j["blake3"],
        blake3::hash(&src_bytes).to_hex().as_str(),
        "{j}"
    );
    // ... a different content under the same name is refused and changes nothing.
    let mut other = src_bytes.clone();
    let mid = other.len() / 2 + 100;
    other[mid] ^= 0x01;
    let fake = tmp.path().join(&first);
    fs::write(&fake, &other).unwrap();
    let before = archive_files(&repo);
    let err = fails(&["archive-push", &s(&fake), "--repo", &s(&repo)], 1);
    assert!(
        err.contains("different content") && err.contains(&first),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(fs::read(&stored).unwrap() == stored_bytes);
    assert_eq!(archive_files(&repo), before);

    // restore_command: a copy taken with pg_basebackup (without WAL) recovers every
    // change made after it from the archive alone, then promotes.
    let rdir = postgres_dir("restored");
    let rdata = rdir.join("data");
    let mut args: Vec<String> = connect_args(pg.port).into();
    args.extend(["-D".into(), s(&rdata)]);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["-X", "none", "-c", "fast", "--no-sync"]);
    as_postgres(&format!("{BIN}/pg_basebackup"), &args);
    pg.sql("INSERT INTO t SELECT g, 'after backup' FROM generate_series(80001, 90000) g");
    pg.sql("CREATE TABLE after_backup AS SELECT 42 AS answer");
    pg.switch_and_wait();
    let rows = pg.sql("SELECT count(*) FROM t");
    assert_eq!(rows, "90000");
    let rport = free_port();
    let mut conf = fs::OpenOptions::new()
        .append(true)
        .open(rdata.join("postgresql.conf"))
        .unwrap();
    std::io::Write::write_all(
        &mut conf,
        format!(
            "\nport = {rport}\narchive_mode = off\nrestore_command = '{} archive-get %f %p --repo {}'\n",
            bin(),
            s(&repo)
        )
        .as_bytes(),
    )
    .unwrap();
    fs::write(rdata.join("recovery.signal"), b"").unwrap();
    give_to_postgres(&rdir);
    let rlog = rdir.join("log");
    let _restored = Started { dir: rdir.clone() };
    as_postgres(
        &format!("{BIN}/pg_ctl"),
        &[
            "-D",
            &s(&rdata),
            "-l",
            &s(&rlog),
            "-w",
            "-t",
            "120",
            "start",
        ],
    );
    let t0 = Instant::now();
    while sql_at(rport, "postgres", "SELECT pg_is_in_recovery()") != "f" {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "recovery did not finish:\n{}",
            fs::read_to_string(&rlog).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(sql_at(rport, "postgres", "SELECT count(*) FROM t"), rows);
    assert_eq!(
        sql_at(rport, "postgres", "SELECT answer FROM after_backup"),
        "42"
    );
    let log = fs::read_to_string(&rlog).unwrap();
    let restored = log.matches("restored log file").count();
    assert!(
        restored >= 1,
        "no segment restored from the archive:\n{log}"
    );
    assert!(
        !log.contains("damaged") && !log.contains("panicked"),
        "{log}"
    );
    eprintln!("recovery restored {restored} segments through archive-get");
    drop(_restored);

    // (4) archive-get of a name the archive does not hold: exit 1, one short line.
    let dest = tmp.path().join("wanted");
    for missing in ["00000002.history", "0000000100000000000000FE"] {
        let err = fails(&["archive-get", missing, &s(&dest), "--repo", &s(&repo)], 1);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(missing) && err.contains("not in"), "{err}");
        assert!(!dest.exists());
    }
    // A damaged archived file is an error naming it, with a status above 125 so that
    // PostgreSQL stops recovery instead of ending it; nothing is written.
    let mut body = stored_bytes.clone();
    let at = body.len() / 2;
    body[at] ^= 0x20;
    let mut header = stored_bytes.clone();
    header[100] ^= 0x01;
    let truncated = stored_bytes[..stored_bytes.len() - 10].to_vec();
    for (dmg, says) in [
        (body, "damaged"),
        (header, "header"),
        (truncated, "damaged"),
    ] {
        fs::write(&stored, &dmg).unwrap();
        let err = fails(
            &["archive-get", &first, &s(&dest), "--repo", &s(&repo)],
            126,
        );
        assert!(err.contains(&s(&stored)) && err.contains(says), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!dest.exists());
    }
    // No temp file anywhere.
    assert!(
        fs::read_dir(tmp.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")),
        "temp files left beside the destination"
    );
    fs::write(&stored, &stored_bytes).unwrap();
    assert!(get_ok(&repo, &first, &dest) == src_bytes);
    assert_eq!(archiver(&pg).1, 0, "{}", pg.log());
}

#[test]
fn corrupt_and_foreign_segments_are_refused() {
    let _g = lock();
    let tmp = tempfile::tempdir().unwrap();
    // Real segments of a cluster without data checksums and without archiving.
    let (seg2, seg3, sysid) = {
        let pg = Pg::start(false, None);
        pg.sql("CREATE TABLE t AS SELECT g, md5(g::text) FROM generate_series(1, 50000) g");
        let first = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        pg.sql("SELECT pg_switch_wal()");
        pg.sql("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 50000) g");
        let second = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        pg.sql("SELECT pg_switch_wal()");
        let copy = |n: &str| {
            let p = tmp.path().join("good").join(n);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::copy(pg.data.join("pg_wal").join(n), &p).unwrap();
            p
        };
        (
            copy(&first),
            copy(&second),
            pg.sql("SELECT system_identifier FROM pg_control_system()"),
        )
    };
    let name2 = seg2.file_name().unwrap().to_str().unwrap().to_string();
    let good = fs::read(&seg2).unwrap();
    assert_eq!(good.len(), 16 << 20);
    let repo = tmp.path().join("repo");
    let r = s(&repo);
    // Issue 53: a repository is made on purpose only. A push into a path that is none
    // (a share not mounted) fails, so PostgreSQL keeps the segment, and makes nothing;
    // a directory without the marker is refused too, sync and async alike.
    let spool_un = s(&tmp.path().join("spool-unmade"));
    for mode in [&[][..], &["--async", "--spool", &spool_un][..]] {
        let err = fails(
            &[&["archive-push", &s(&seg2), "--repo", &r][..], mode].concat(),
            1,
        );
        assert!(
            err.contains("pagevault init --repo") && err.contains("mounted"),
            "{err}"
        );
        assert!(!repo.exists(), "{mode:?}: a push made '{r}'");
        fs::create_dir(&repo).unwrap();
        let err = fails(
            &[&["archive-push", &s(&seg2), "--repo", &r][..], mode].concat(),
            1,
        );
        assert!(err.contains("is not a pagevault repository"), "{err}");
        assert_eq!(
            fs::read_dir(&repo).unwrap().count(),
            0,
            "{mode:?}: wrote into it"
        );
        fs::remove_dir(&repo).unwrap();
    }
    // A fault, not "the archive does not hold it": recovery stops, never ends early.
    let err = fails(
        &[
            "archive-get",
            &name2,
            &s(&tmp.path().join("got")),
            "--repo",
            &r,
        ],
        126,
    );
    assert!(err.contains("is not a pagevault repository"), "{err}");
    assert!(!repo.exists());
    ok(&["init", "--repo", &r]);
    let nothing_archived = || {
        let f = archive_files(&repo);
        assert!(
            f.iter().all(|f| f == "system_identifier"),
            "something was archived: {f:?}"
        );
    };

    let bad = |bytes: &[u8], name: &str, want: &[&str]| {
        let dir = tmp.path().join("bad");
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        let err = fails(&["archive-push", &s(&p), "--repo", &r], 1);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(&s(&p)), "error does not name the file: {err}");
        for w in want {
            assert!(err.contains(w), "'{w}' not in: {err}");
        }
        fs::remove_file(&p).unwrap();
        nothing_archived();
    };
    // Flipped magic.
    let mut m = good.clone();
    m[0] ^= 0xFF;
    bad(&m, &name2, &["magic", "nothing was archived"]);
    // Truncated.
    bad(&good[..8 << 20], &name2, &["truncated"]);
    bad(&good[..20], &name2, &["only 20 bytes"]);
    // The wrong name for its page address.
    let wrong = format!("{}{:08X}", &name2[..16], 0x7F);
    bad(&good, &wrong, &["WAL position", &name2]);
    // A stale page inside (a page of another segment).
    let mut st = good.clone();
    st[3 * 8192 + 8..3 * 8192 + 16].copy_from_slice(&0x0100_0000u64.to_le_bytes());
    bad(&st, &name2, &["page 3"]);
    // Not a WAL name at all.
    bad(&good, "pg_wal_copy", &["not a name"]);

    // Bytes inside records changed, page headers intact: archived as handed over (refusing
    // would only fill pg_wal), with a WARNING for PostgreSQL's log naming the segment and
    // the record, never a silent success; in both modes.
    let mut rec = good.clone();
    for b in &mut rec[3 * 8192 + 100..3 * 8192 + 164] {
        *b ^= 0x5A;
    }
    let p = tmp.path().join("damaged").join(&name2);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, &rec).unwrap();
    let (spool, damaged) = (s(&tmp.path().join("spool-damaged")), s(&p));
    for mode in [
        &[][..],
        &["--async", "--spool", &spool, "--look-ahead", "0"][..],
    ] {
        let other = s(&tmp.path().join(format!("repo-damaged-{}", mode.len())));
        ok(&["init", "--repo", &other]);
        let args = [
            &["archive-push", &damaged, "--repo", &other, "--json"][..],
            mode,
        ]
        .concat();
        let out = run(&args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr.contains("WARNING")
                && out.stderr.contains(&name2)
                && out.stderr.contains("as if the WAL ended"),
            "{mode:?}: {}",
            out.stderr
        );
        let j: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(j["warnings"].as_array().map(Vec::len), Some(1), "{j}");
        // Marked for status, check, verify and restore (both modes store the summary;
        // the async pusher once it took the file).
        let t0 = Instant::now();
        loop {
            let st = run(&["status", "--repo", &other, "--json"]);
            let j: serde_json::Value = serde_json::from_str(&st.stdout).unwrap_or_default();
            if j["damaged_wal"][0]["segment"] == name2.as_str() {
                break;
            }
            let shown = format!("{}{}", st.stdout, st.stderr);
            assert!(t0.elapsed() < Duration::from_secs(30), "{mode:?}: {shown}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    // The good copies archive, and the repository records the cluster.
    let t0 = Instant::now();
    let out = ok(&["archive-push", &s(&seg2), "--repo", &r]);
    let first_push = t0.elapsed();
    assert!(out.contains("archived"), "{out}");
    assert_eq!(
        fs::read_to_string(repo.join("wal/system_identifier"))
            .unwrap()
            .trim(),
        sysid
    );
    ok(&["archive-push", &s(&seg3), "--repo", &r]);

    // One push of a 16 MiB segment, process start included (several runs, fresh repos).
    let mut times = vec![];
    for i in 0..5 {
        let fresh = tmp.path().join(format!("timing{i}"));
        ok(&["init", "--repo", &s(&fresh)]);
        let t0 = Instant::now();
        ok(&["archive-push", &s(&seg3), "--repo", &s(&fresh)]);
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "archive-push of one 16 MiB segment: first {:.3} s, then min {:.3} s, median {:.3} s, max {:.3} s ({} stored)",
        first_push.as_secs_f64(),
        times[0],
        times[2],
        times[4],
        fs::metadata(
            tmp.path()
                .join("timing0/wal/00000001")
                .join(format!("{}.zst", seg3.file_name().unwrap().to_str().unwrap()))
        )
        .unwrap()
        .len()
    );

    // A segment of another cluster is refused: nothing archived.
    let other = {
        let pg = Pg::start(false, None);
        pg.sql("CREATE TABLE u AS SELECT g FROM generate_series(1, 1000) g");
        let n = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        pg.sql("SELECT pg_switch_wal()");
        let p = tmp.path().join("other").join(&n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::copy(pg.data.join("pg_wal").join(&n), &p).unwrap();
        p
    };
    let before = archive_files(&repo);
    let err = fails(&["archive-push", &s(&other), "--repo", &r], 1);
    assert!(
        err.contains("system identifier") && err.contains(&sysid),
        "{err}"
    );
    assert_eq!(archive_files(&repo), before);
}

#[test]
fn pgbench_load_does_not_pile_up_wal() {
    let (_g, _clean, repo, pg) = archiving();
    let data = pg.data.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let max_ready = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, max_ready, data) = (stop.clone(), max_ready.clone(), data.clone());
        std::thread::spawn(move || {
            let mut samples = 0;
            while !stop.load(Ordering::Relaxed) {
                max_ready.fetch_max(ready_count(&data), Ordering::Relaxed);
                samples += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            samples
        })
    };
    let lsn0 = pg.sql("SELECT pg_current_wal_lsn()");
    pg.pgbench_init(5);
    let max_init = max_ready.load(Ordering::Relaxed);
    let report = pg.pgbench_ok(&["-T", "10", "-c", "2"]);
    let wal_bytes: u64 = pg
        .sql(&format!(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn0}')::bigint"
        ))
        .parse()
        .unwrap();
    pg.switch_and_wait();
    let t0 = Instant::now();
    while ready_count(&data) > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "archiver fell behind"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let max = max_ready.load(Ordering::Relaxed);
    let a = archiver(&pg);
    let tps = report
        .lines()
        .find(|l| l.starts_with("tps"))
        .unwrap_or("")
        .to_string();

    // Push times as each push reported them to the server log.
    let log = pg.log();
    let mut secs: Vec<f64> = log
        .lines()
        .filter(|l| l.starts_with("pagevault: archived "))
        .filter_map(|l| l.split(" in ").nth(1)?.split(" s").next()?.parse().ok())
        .collect();
    secs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "pgbench: {tps}; {} MiB of WAL; archived {} files, {} failed; max .ready seen {max} \
         ({max_init} during pgbench -i; {samples} samples); push time in-process: min {:.3} s, \
         median {:.3} s, max {:.3} s over {} pushes",
        wal_bytes >> 20,
        a.0,
        a.1,
        secs.first().unwrap_or(&0.0),
        secs.get(secs.len() / 2).unwrap_or(&0.0),
        secs.last().unwrap_or(&0.0),
        secs.len()
    );
    assert_eq!(a.1, 0, "archive failures: {a:?}\n{log}");
    assert!(!log.contains("archive command failed"), "{log}");
    assert!(max <= 8, "pg_wal piled up: {max} segments waiting");
    assert!(wal_bytes > 48 << 20, "too little WAL to mean anything");

    // Everything archived under load restores, byte-identical where pg_wal still has it.
    let tmp = tempfile::tempdir().unwrap();
    let segs = archived_segments(&repo, "00000001");
    assert!(segs.len() as u64 >= wal_bytes >> 24, "{segs:?}");
    let done: std::collections::HashSet<String> = done_segments(&data).into_iter().collect();
    let mut compared = 0;
    for n in &segs {
        let got = get_ok(&repo, n, &tmp.path().join("x"));
        assert_eq!(got.len(), 16 << 20);
        if done.contains(n) {
            compared += 1;
            assert!(got == fs::read(data.join("pg_wal").join(n)).unwrap(), "{n}");
        }
    }
    eprintln!(
        "{} archived segments restore; {compared} compared with pg_wal",
        segs.len()
    );
}
