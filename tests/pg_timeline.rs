//! Recovery across timelines, and an archive that is damaged or out of reach (issue
//! 18): a failover onto timeline 2 archiving into the same repository; restores to the
//! latest point, to an LSN and to a time on timeline 2 and to an LSN on timeline 1; a
//! missing or damaged segment refused before anything is written; a restored server
//! that stops recovery with an error, never promoting early, when a file it needs is
//! damaged or the object store is down.

mod common;

use common::pg::{postgres_dir, restore_repo, Pg, BIN};
use common::stores::{shared, Minio};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn insert(pg: &Pg, from: u32, to: u32) {
    pg.sql(&format!(
        "INSERT INTO t SELECT g, md5(g::text) FROM generate_series({from}, {to}) g"
    ));
}

/// "rows:max id" of table t.
fn rows(pg: &Pg) -> String {
    pg.sql("SELECT count(*) || ':' || coalesce(max(id), 0) FROM t")
}

/// What a failover left in the repository, and the points to restore to.
struct Failover {
    /// On timeline 1, after rows 1..150 (the full set holds rows 1..100).
    lsn_tl1: String,
    /// On timeline 2, after rows 1..300.
    lsn_tl2: String,
    /// On timeline 2, after rows 1..400.
    time_tl2: String,
    /// The timeline-2 segment holding rows 301..400 (neither the first nor the last).
    mid_seg: String,
    /// The last timeline-2 segment recovery needs (rows 401..500).
    last_seg: String,
}

/// A full set on timeline 1 and WAL after it; the primary fails; a copy restored from
/// the repository is promoted (timeline 2) and archives into the same repository.
fn failover(repo: &str, ep: &[&str]) -> Failover {
    ok(&[&["init", "--repo", repo][..], ep].concat());
    let push = format!("{} archive-push %p --repo {repo} {}", bin(), ep.join(" "));
    let mut primary = Pg::start(true, Some(&push));
    primary.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    insert(&primary, 1, 100);
    let url = format!("{}?pgdata={}", primary.url(), s(&primary.data));
    let mut a = vec!["backup", "--source", &url, "--repo", repo];
    a.extend_from_slice(ep);
    ok(&a);
    insert(&primary, 101, 150);
    let lsn_tl1 = primary.sql("SELECT pg_current_wal_insert_lsn()");
    insert(&primary, 151, 200);
    primary.switch_and_wait();
    primary.stop();

    let (b_data, _) = restore(repo, ep, &[]);
    let b = Pg::adopt_archiving(&b_data, &push);
    b.wait_promoted();
    assert_eq!(rows(&b), "200:200");
    let tli = b.sql("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)");
    assert_eq!(tli, "00000002", "{}", b.log());
    insert(&b, 201, 300);
    let lsn_tl2 = b.sql("SELECT pg_current_wal_insert_lsn()");
    b.switch_and_wait();
    insert(&b, 301, 400);
    let time_tl2 = b.sql("SELECT now()::text");
    std::thread::sleep(Duration::from_millis(1200));
    let mid_seg = b.switch_and_wait();
    insert(&b, 401, 500);
    let last_seg = b.switch_and_wait();
    assert_eq!(
        b.sql("SELECT failed_count FROM pg_stat_archiver"),
        "0",
        "{}",
        b.log()
    );
    drop(b);
    Failover {
        lsn_tl1,
        lsn_tl2,
        time_tl2,
        mid_seg,
        last_seg,
    }
}

/// Restores the repository into a new directory with `extra` options; returns the
/// data directory and restore's JSON.
fn restore(repo: &str, ep: &[&str], extra: &[&str]) -> (PathBuf, serde_json::Value) {
    restore_repo(repo, &[ep, extra].concat())
}

/// Restores, starts the copy, waits until it promoted; returns its rows and the copy.
fn restore_rows(repo: &str, ep: &[&str], extra: &[&str]) -> (String, serde_json::Value, Pg) {
    let (target, j) = restore(repo, ep, extra);
    let r = Pg::adopt(&target);
    r.wait_promoted();
    common::pg::check_database(&r);
    (rows(&r), j, r)
}

fn timelines(j: &serde_json::Value) -> Vec<u64> {
    j["wal"]["ranges"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|r| r["timeline"].as_u64().unwrap())
        .collect()
}

/// A restore that must fail before writing anything: exit 1, the target not created.
fn refused(repo: &str, ep: &[&str], extra: &[&str]) -> String {
    let target = postgres_dir("refused").join("data");
    let mut a = vec!["restore", "--repo", repo, "--to", target.to_str().unwrap()];
    a.extend_from_slice(ep);
    a.extend_from_slice(extra);
    let err = fails(&a, 1);
    assert!(
        !target.exists(),
        "a refused restore created '{}'",
        target.display()
    );
    err
}

/// Starts a restored data directory without insisting that it comes up, and watches it
/// for `secs`: it must never leave recovery. Returns the server log.
fn start_never_promotes(data: &Path, secs: u64) -> String {
    let port = free_port();
    let log = data.parent().unwrap().join("log-never");
    let _ = Command::new("runuser")
        .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl"), "-D"])
        .arg(data)
        .arg("-l")
        .arg(&log)
        .args([
            "-o",
            &format!("-p {port} -c unix_socket_directories=/tmp -c archive_mode=off"),
            "start",
        ])
        .output()
        .unwrap();
    let t0 = Instant::now();
    let text = loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        for promoted in ["archive recovery complete", "selected new timeline ID"] {
            assert!(
                !text.contains(promoted),
                "the server promoted early:\n{text}"
            );
        }
        if text.contains("database system is shut down") || t0.elapsed() > Duration::from_secs(secs)
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = Command::new("runuser")
        .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl"), "-D"])
        .arg(data)
        .args(["-m", "immediate", "-w", "stop"])
        .output();
    text
}

#[test]
fn failover_onto_timeline_2_restores_along_the_history() {
    let dir = postgres_dir("repo");
    let repo_dir = dir.join("repo");
    let repo = repo_dir.to_str().unwrap().to_string();
    let f = failover(&repo, &[]);

    // The latest point: timeline 1 up to the switch, then timeline 2, every row.
    let (got, j, r) = restore_rows(&repo, &[], &[]);
    assert_eq!(got, "500:500", "{}", r.log());
    assert_eq!(j["wal"]["target_timeline"], 2, "{j}");
    assert_eq!(timelines(&j), [1, 2], "{j}");
    assert_eq!(j["wal"]["verified"], true, "{j}");
    drop(r);
    // An LSN and a time on timeline 2.
    let (got, j, r) = restore_rows(&repo, &[], &["--until-lsn", &f.lsn_tl2]);
    assert_eq!(got, "300:300", "{}", r.log());
    assert_eq!(timelines(&j), [1, 2], "{j}");
    drop(r);
    let (got, _, r) = restore_rows(&repo, &[], &["--until", &f.time_tl2]);
    assert_eq!(got, "400:400", "{}", r.log());
    drop(r);
    // An LSN on timeline 1 before the switch: timeline 2's segments are not replayed.
    let (got, j, r) = restore_rows(&repo, &[], &["--until-lsn", &f.lsn_tl1]);
    assert_eq!(got, "150:150", "{}", r.log());
    assert_eq!(timelines(&j), [1], "{j}");
    assert!(
        !r.log().contains("restored log file \"000000020"),
        "timeline 2 was replayed:\n{}",
        r.log()
    );
    drop(r);

    // --timeline current: the set's own timeline, no switch followed: every row of
    // timeline 1, none of timeline 2's; `latest` is the default's word.
    let (got, j, r) = restore_rows(&repo, &[], &["--timeline", "current"]);
    assert_eq!(got, "200:200", "{}", r.log());
    assert_eq!(timelines(&j), [1], "{j}");
    let conf = fs::read_to_string(r.data.join("postgresql.auto.conf")).unwrap();
    assert!(
        conf.contains("recovery_target_timeline = 'current'"),
        "{conf}"
    );
    drop(r);
    let (got, j, r) = restore_rows(&repo, &[], &["--timeline", "latest"]);
    assert_eq!(
        (got.as_str(), timelines(&j)),
        ("500:500", vec![1, 2]),
        "{j}"
    );
    drop(r);
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            "/nonexistent",
            "--timeline",
            "newest",
        ],
        2,
    );
    assert!(e.contains("latest, current or a timeline number"), "{e}");
    // history and header name each set's timeline.
    let h = ok(&["history", "--repo", &repo]);
    let head = h.lines().next().unwrap();
    let row = h.lines().nth(1).unwrap();
    let col = head.find(" tli ").unwrap_or_else(|| panic!("{h}"));
    assert_eq!(row[col + 1..col + 4].trim(), "1", "{h}");
    let set = json(&["history", "--repo", &repo])["sets"][0]["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    let hd = ok(&["header", "--repo", &repo, "--set", &set]);
    assert!(
        hd.lines()
            .any(|l| l.starts_with("Timeline") && l.trim_end().ends_with(" 1")),
        "{hd}"
    );

    // The text output says which timelines and segments recovery replays.
    let target = postgres_dir("text").join("data");
    let out = ok(&["restore", "--repo", &repo, "--to", &s(&target)]);
    assert!(
        out.contains("timeline 1 segment") && out.contains("then timeline 2 segments"),
        "{out}"
    );

    // A timeline-2 segment missing: refused before writing, naming it and its timeline.
    let stored = repo_dir.join(format!("wal/00000002/{}.zst", f.mid_seg));
    let aside = dir.join("aside.zst");
    fs::rename(&stored, &aside).unwrap();
    let err = refused(&repo, &[], &[]);
    assert!(
        err.contains(&f.mid_seg) && err.contains("timeline 2") && err.contains("missing"),
        "{err}"
    );
    // A target before the gap still restores.
    let (_, j) = restore(&repo, &[], &["--until-lsn", &f.lsn_tl2]);
    assert_eq!(j["wal"]["target_timeline"], 2, "{j}");
    fs::rename(&aside, &stored).unwrap();

    // One byte flipped in an archived timeline-2 segment: refused before writing.
    let good = fs::read(&stored).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x20;
    fs::write(&stored, &bad).unwrap();
    let err = refused(&repo, &[], &[]);
    assert!(err.contains(&f.mid_seg) && err.contains("damaged"), "{err}");
    // With the check skipped, the restore says so, and the server stops recovery with an
    // error at the damaged file instead of promoting without the later transactions.
    let (target, j) = restore(&repo, &[], &["--no-verify-wal"]);
    assert_eq!(j["wal"]["verified"], false, "{j}");
    let notes = j["postgres"].to_string();
    assert!(notes.contains("NOT checked"), "{notes}");
    let log = start_never_promotes(&target, 60);
    assert!(
        log.contains(&f.mid_seg) && log.contains("damaged") && log.contains("FATAL"),
        "{log}"
    );
    // archive-get itself: damaged is exit 126 (fatal to recovery), absent is exit 1.
    let dest = dir.join("RECOVERYXLOG");
    let err = fails(
        &["archive-get", &f.mid_seg, &s(&dest), "--repo", &repo],
        126,
    );
    assert!(err.contains("damaged") && err.contains("126"), "{err}");
    let err = fails(
        &[
            "archive-get",
            "00000009.history",
            &s(&dest),
            "--repo",
            &repo,
        ],
        1,
    );
    assert!(err.contains("not in the WAL archive"), "{err}");
    assert!(!dest.exists());
    fs::write(&stored, &good).unwrap();
    assert!(f.last_seg > f.mid_seg);
}

#[test]
fn object_store_timeline_chain_and_a_store_that_goes_away() {
    let _ = shared(); // the credentials in the environment
    let mut m = Minio::start();
    m.admin(&["mkbucket", "pvtl"]);
    let ep_url = m.endpoint();
    let ep = ["--s3-endpoint", ep_url.as_str()];
    let repo = "s3://pvtl/r";
    let f = failover(repo, &ep);

    // A restore to the latest point checks every file; then the store goes away while
    // the restored server fetches WAL: recovery stops with an error, it never promotes.
    let (target, j) = restore(repo, &ep, &[]);
    assert_eq!(timelines(&j), [1, 2], "{j}");
    assert_eq!(j["wal"]["verified"], true, "{j}");
    m.kill();
    std::env::set_var("PAGEVAULT_RETRY_SECONDS", "3");
    let log = start_never_promotes(&target, 60);
    assert!(log.contains("FATAL"), "{log}");
    // Back again: the same directory recovers every row.
    m.restart();
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(rows(&r), "500:500", "{}", r.log());
    drop(r);

    // A flipped byte, then a missing segment on timeline 2: refused before writing.
    let key = |seg: &str| format!("r/wal/00000002/{seg}.zst");
    m.admin(&["flip", "pvtl", &key(&f.last_seg), "4000"]);
    let err = refused(repo, &ep, &[]);
    assert!(
        err.contains(&f.last_seg) && err.contains("damaged"),
        "{err}"
    );
    m.admin(&["rm", "pvtl", &key(&f.mid_seg)]);
    let err = refused(repo, &ep, &[]);
    assert!(
        err.contains(&f.mid_seg) && err.contains("timeline 2") && err.contains("missing"),
        "{err}"
    );
}

/// A repository whose path holds a space: the restore_command quotes it,
/// so recovery fetches every segment after the set (else each fetch fails, which
/// PostgreSQL reads as the archive's end: recovery would end early, rows missing).
#[test]
fn a_repository_path_with_a_space_recovers_everything() {
    let repo = postgres_dir("repo").join("my repo");
    ok(&["init", "--repo", &s(&repo)]);
    let push = format!("{} archive-push %p --repo \"{}\"", bin(), repo.display());
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    insert(&pg, 1, 100);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &s(&repo)]);
    insert(&pg, 101, 300);
    pg.switch_and_wait();
    insert(&pg, 301, 400);
    pg.switch_and_wait();
    let (rows, j, _copy) = restore_rows(&s(&repo), &[], &[]);
    assert_eq!(rows, "400:400", "{j}");
    let conf = std::fs::read_to_string(
        Path::new(j["target"].as_str().unwrap()).join("postgresql.auto.conf"),
    )
    .unwrap();
    assert!(conf.contains("--repo '"), "{conf}");
}
