//! Damaged archived WAL against a real PostgreSQL 15: a segment whose records cannot be
//! decoded (64 bytes flipped inside its records, page headers intact) is archived as
//! handed over with a marker in `wal/damaged/`, and status, check, verify --repo and
//! restore report it; expire removes the marker with its segment; on MinIO too.

mod common;
use common::pg::{postgres_dir, Pg};
use common::stores::Minio;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};

/// 64 bytes inside page 3's records (as tests/pg_archive.rs flips them).
const PAGE_3: std::ops::Range<usize> = 3 * 8192 + 100..3 * 8192 + 164;

/// A copy of `seg` with the bytes `at` flipped: page headers stay intact, a record's
/// CRC fails.
fn damaged_copy(seg: &Path, dir: &Path, at: std::ops::Range<usize>) -> PathBuf {
    let mut b = fs::read(seg).unwrap();
    for x in &mut b[at] {
        *x ^= 0x5A;
    }
    fs::create_dir_all(dir).unwrap();
    let p = dir.join(seg.file_name().unwrap());
    fs::write(&p, b).unwrap();
    p
}

/// Copies segment `name` out of the server's pg_wal into `dir`.
fn copy_segment(pg: &Pg, name: &str, dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    fs::copy(pg.data.join("pg_wal").join(name), &p).unwrap();
    p
}

/// Pushes `seg`; a damaged one is archived (exit 0) with a WARNING naming it.
fn push(seg: &Path, repo: &str, damaged: bool) {
    let out = run(&["archive-push", &s(seg), "--repo", repo]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let name = seg.file_name().unwrap().to_str().unwrap();
    let warned = out.stderr.contains("WARNING") && out.stderr.contains(name);
    assert_eq!(warned, damaged, "{}{}", out.stdout, out.stderr);
}

/// The segment after `name` (same timeline, 16 MiB segments).
fn next(name: &str) -> String {
    let n = u64::from_str_radix(&name[8..], 16).unwrap();
    let (log, seg) = (n >> 32, n & 0xFFFF_FFFF);
    let (log, seg) = if seg == 0xFF {
        (log + 1, 0)
    } else {
        (log, seg + 1)
    };
    format!("{}{log:08X}{seg:08X}", &name[..8])
}

fn markers(repo: &Path) -> Vec<String> {
    match fs::read_dir(repo.join("wal/damaged")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

/// `check --json`'s exit code and its wal-intact item.
fn wal_intact(url: &str, repo: &str) -> (i32, serde_json::Value) {
    let args = [
        "check",
        "--source",
        url,
        "--repo",
        repo,
        "--timeout",
        "5",
        "--json",
    ];
    let c = run(&args);
    let j: serde_json::Value =
        serde_json::from_str(&c.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", c.stdout, c.stderr));
    let item = (j["checks"].as_array().unwrap().iter())
        .find(|k| k["name"] == "wal-intact")
        .unwrap_or_else(|| panic!("no wal-intact item: {j}"))
        .clone();
    (c.code, item)
}

fn damaged_names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d["segment"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn damaged_wal_is_reported_by_status_check_verify_restore_and_expired_with_its_segment() {
    let work = postgres_dir("damaged");
    let repo = work.join("repo");
    let r = s(&repo);
    let segs = work.join("segs");
    // No archiving: the test pushes each segment itself, damaged or not.
    let pg = Pg::start(false, None);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    pg.sql("SELECT pg_switch_wal()");
    pg.sql("CREATE TABLE t AS SELECT g, md5(g::text) FROM generate_series(1, 50000) g");
    ok(&["backup", "--source", &url, "--repo", &r]);
    let set = json(&["history", "--repo", &r])["sets"][0].clone();
    let (start, stop) = (
        set["start_wal"].as_str().unwrap().to_string(),
        set["stop_wal"].as_str().unwrap().to_string(),
    );
    // The set's own WAL, start to stop; then WAL written after it.
    let mut inside = vec![start.clone()];
    while inside.last().unwrap() != &stop {
        let n = next(inside.last().unwrap());
        inside.push(n);
    }
    let inside: Vec<PathBuf> = inside.iter().map(|n| copy_segment(&pg, n, &segs)).collect();
    // Where the next records go (the backup's stop switched segments): its page 3
    // will hold records.
    let busy = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
    pg.sql("INSERT INTO t SELECT g, 'x' FROM generate_series(1, 50000) g");
    let last = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    let mut after = vec![next(&stop)];
    while after.last().unwrap() != &last {
        let n = next(after.last().unwrap());
        after.push(n);
    }
    let after: Vec<PathBuf> = after.iter().map(|n| copy_segment(&pg, n, &segs)).collect();
    let bad_after = busy.clone();
    let busy = segs.join(&busy);

    // 1. A damaged segment after the set's stop: archived, marked, reported.
    for p in &after {
        match p == &busy {
            true => push(&damaged_copy(p, &work.join("bad"), PAGE_3), &r, true),
            false => push(p, &r, false),
        }
    }
    assert_eq!(markers(&repo), [bad_after.as_str()]);

    let st = json(&["status", "--repo", &r]);
    assert_eq!(damaged_names(&st["damaged_wal"]), [bad_after.as_str()]);
    let note = st["damaged_wal"][0]["note"].as_str().unwrap();
    assert!(
        !note.is_empty() && !note.contains("cannot be read"),
        "{note}"
    );
    let text = ok(&["status", "--repo", &r]);
    assert!(
        text.contains(&format!("WARNING: damaged WAL {bad_after}"))
            && text.contains("take a new full backup"),
        "{text}"
    );
    let prom = ok(&["status", "--repo", &r, "--prometheus"]);
    assert!(
        prom.lines()
            .any(|l| l.starts_with("pagevault_damaged_wal_segments{") && l.ends_with("} 1")),
        "{prom}"
    );

    let (code, item) = wal_intact(&url, &r);
    assert_eq!(code, 1, "{item}");
    assert_eq!(item["status"], "fail", "{item}");
    assert!(
        item["detail"].as_str().unwrap().contains(&bad_after),
        "{item}"
    );
    assert!(
        item["fix"].as_str().unwrap().contains("new full backup"),
        "{item}"
    );

    let v = json(&["verify", "--repo", &r]);
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(damaged_names(&v["damaged_wal"]), [bad_after.as_str()]);
    assert_eq!(v["damaged_wal"][0]["position"], "after", "{v}");
    let text = ok(&["verify", "--repo", &r]);
    assert!(
        text.contains("Warning: archived WAL segment") && text.contains(&bad_after),
        "{text}"
    );

    // A restore whose chain passes it says recovery will stop there, and restores.
    let target = work.join("restored");
    let rr = json(&["restore", "--repo", &r, "--to", &s(&target)]);
    let warned = (rr["warnings"].as_array().unwrap().iter())
        .map(|w| w.as_str().unwrap())
        .find(|w| w.contains(&bad_after))
        .unwrap_or_else(|| panic!("no warning names {bad_after}: {rr}"));
    assert!(warned.contains("recovery will stop there"), "{warned}");
    assert_eq!(damaged_names(&rr["wal"]["damaged"]), [bad_after.as_str()]);
    assert!(target.join("PG_VERSION").exists());
    fs::remove_dir_all(&target).unwrap();

    // 2. A damaged segment the set needs to be consistent: the set is invalid, named.
    let bad_inside = inside[0].file_name().unwrap().to_str().unwrap().to_string();
    // The record at the set's start LSN: its xl_xid (the CRC covers it).
    let lsn = set["start_lsn"].as_str().unwrap();
    let (hi, lo) = lsn.split_once('/').unwrap();
    let lsn = u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap();
    let at = (lsn % (16 << 20)) as usize;
    push(
        &damaged_copy(&inside[0], &work.join("bad"), at + 4..at + 8),
        &r,
        true,
    );
    let out = run(&["verify", "--repo", &r]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&bad_inside) && out.stderr.contains("consistent"),
        "{}",
        out.stderr
    );
    let out = run(&["verify", "--repo", &r, "--json"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["valid"], false, "{v}");
    let pos = |n: &str| {
        (v["damaged_wal"].as_array().unwrap().iter())
            .find(|d| d["segment"] == n)
            .map(|d| d["position"].clone())
    };
    assert_eq!(pos(&bad_inside), Some("inside".into()), "{v}");
    assert_eq!(pos(&bad_after), Some("after".into()), "{v}");
    // A restore of the set warns of both, the set's own first.
    let rr = json(&["restore", "--repo", &r, "--to", &s(&target)]);
    let d = &rr["wal"]["damaged"];
    assert_eq!(damaged_names(d), [bad_inside.as_str(), bad_after.as_str()]);
    assert_eq!(
        (d[0]["set_needs_it"].clone(), d[1]["set_needs_it"].clone()),
        (true.into(), false.into())
    );
    let w = rr["warnings"].to_string();
    assert!(w.contains("before the set is consistent"), "{w}");
    fs::remove_dir_all(&target).unwrap();

    // 3. A later full: expire of everything before it removes the damaged segments
    // and their markers together.
    pg.sql("SELECT pg_switch_wal()");
    ok(&["backup", "--source", &url, "--repo", &r]);
    let e = json(&["expire", "--repo", &r, "--keep-full", "1"]);
    assert_eq!(e["expired"].as_array().unwrap().len(), 1, "{e}");
    let gone = e["wal_expired"].as_array().unwrap();
    for n in [&bad_inside, &bad_after] {
        assert!(gone.iter().any(|g| g == n.as_str()), "{n} not expired: {e}");
        assert!(!repo.join(format!("wal/00000001/{n}.zst")).exists());
    }
    assert!(markers(&repo).is_empty(), "{:?}", markers(&repo));
    let st = json(&["status", "--repo", &r]);
    assert!(damaged_names(&st["damaged_wal"]).is_empty(), "{st}");
    let (_, item) = wal_intact(&url, &r);
    assert_eq!(item["status"], "ok", "{item}");

    // 4. On an object store: the marker is found by one listing of the prefix.
    let minio = Minio::start();
    minio.admin(&["mkbucket", "pvtest"]);
    minio.export_env();
    let s3 = "s3://pvtest/damaged/repo";
    ok(&["init", "--repo", s3]);
    push(&damaged_copy(&busy, &work.join("bad-s3"), PAGE_3), s3, true);
    let st = json(&["status", "--repo", s3]);
    assert_eq!(
        damaged_names(&st["damaged_wal"]),
        [bad_after.as_str()],
        "{st}"
    );
    assert!(
        !st["damaged_wal"][0]["note"]
            .as_str()
            .unwrap()
            .contains("cannot be read"),
        "{st}"
    );
    drop(pg);
    let _ = fs::remove_dir_all(&work);
}
