//! PostgreSQL 15, for real: hot backups under load, restore and start, point in
//! time recovery, page checksum failures, and the bad inputs a DBA will meet.

mod common;
use common::pg::{
    assert_pgbench_consistent, check_database, give_to_postgres, pgbench, postgres_dir, push_cmd,
    restore_for_postgres, Pg,
};
use common::*;
use std::time::Duration;

#[test]
fn hot_backup_under_pgbench_restores_and_starts_consistent() {
    let pg = Pg::start(true, None);
    pg.pgbench_init(8);
    let work = postgres_dir("hot");
    let mut load = pgbench(&pg, &["-T", "12", "-c", "2", "-n"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let before: i64 = pg
        .sql("SELECT count(*) FROM pgbench_history")
        .parse()
        .unwrap();
    let (a, b) = (s(&work.join("a.pv")), s(&work.join("b.pv")));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let j = json(&backup_args(&url, &[&a, &b], &["--compress", "lz4"]));
    assert!(load.wait().unwrap().success());
    assert_eq!(j["extra"]["data_checksums"], true);
    assert!(j["extra"]["backup_label"]
        .as_str()
        .unwrap()
        .contains("START WAL LOCATION"));
    assert_eq!(
        j["source"]["identity"]["system_identifier"],
        pg.sql("SELECT system_identifier FROM pg_control_system()")
    );
    let files = json(&["files", "--from", &a, "--from", &b]);
    let paths: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        !paths.contains(&"postmaster.pid"),
        "postmaster.pid must not be copied"
    );
    assert!(
        paths.iter().any(|p| p.starts_with("pg_wal/0000000")),
        "the WAL of the backup must be in the set"
    );
    assert!(!paths
        .iter()
        .any(|p| p.starts_with("pg_stat_tmp/") || p.starts_with("pg_replslot/")));

    let target = work.join("restored");
    restore_for_postgres(&["--from", &a, "--from", &b], &target, &[]);
    let restored = Pg::adopt(&target);
    let after: i64 = restored
        .sql("SELECT count(*) FROM pgbench_history")
        .parse()
        .unwrap();
    assert!(
        after >= before,
        "restored {after} transactions, fewer than the {before} committed before the backup began"
    );
    assert_pgbench_consistent(&restored);
    check_database(&restored);
    drop(restored);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn point_in_time_recovery_to_an_lsn_and_to_a_time() {
    let repo = postgres_dir("pitr-repo");
    let repo_s = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.sql("CREATE TABLE marks(id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo_s,
        "--compress",
        "zstd",
    ]);
    give_to_postgres(&repo);
    let hist = json(&["history", "--repo", &repo_s]);
    assert_eq!(hist["sets"].as_array().unwrap().len(), 1);
    assert_eq!(hist["sets"][0]["backup_type"], "full");

    pg.sql("INSERT INTO marks(id) VALUES (1)");
    let lsn1 = pg.sql("SELECT pg_current_wal_insert_lsn()");
    std::thread::sleep(Duration::from_millis(1100));
    let t1 = pg.sql("SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SS.US+00')");
    std::thread::sleep(Duration::from_millis(1100));
    pg.sql("INSERT INTO marks(id) VALUES (2)");
    pg.sql("INSERT INTO marks(id) VALUES (3)");
    let seg = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    for _ in 0..300 {
        let last = pg.sql("SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver");
        if last >= seg {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        pg.sql("SELECT failed_count FROM pg_stat_archiver"),
        "0",
        "{}",
        pg.log()
    );

    for (flag, value) in [("--until-lsn", lsn1.as_str()), ("--until", t1.as_str())] {
        let target = postgres_dir("pitr-target").join("data");
        let out = restore_for_postgres(&["--repo", &repo_s], &target, &[flag, value]);
        assert!(out.contains("recovery stops before"), "{out}");
        let r = Pg::adopt(&target);
        r.wait_promoted();
        assert_eq!(
            r.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM marks"),
            "1",
            "{flag} {value}: {}",
            r.log()
        );
        drop(r);
        let _ = std::fs::remove_dir_all(target.parent().unwrap());
    }
    // Without a target: everything archived is replayed.
    let target = postgres_dir("pitr-all").join("data");
    restore_for_postgres(&["--repo", &repo_s], &target, &[]);
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(
        r.sql("SELECT string_agg(id::text, ',' ORDER BY id) FROM marks"),
        "1,2,3"
    );
    drop(r);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
    let _ = std::fs::remove_dir_all(&repo);
}

#[test]
fn page_checksum_failure_is_caught_with_file_and_block() {
    let mut pg = Pg::start(true, None);
    pg.sql(
        "CREATE TABLE victim AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 20000) g",
    );
    pg.sql("CHECKPOINT");
    let rel = pg.sql("SELECT pg_relation_filepath('victim')");
    pg.stop();
    let file = pg.data.join(&rel);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.write_all_at(b"CORRUPTION", 3 * 8192 + 4000).unwrap();
    }
    pg.pg_ctl_start();
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let work = postgres_dir("corrupt");
    let st = s(&work.join("x.pv"));
    let e = fails(&["backup", "--source", &url, "--to", &st], 1);
    assert!(
        e.contains("page checksum failure") && e.contains(&rel) && e.contains("block 3"),
        "{e}"
    );
    assert!(!work.join("x.pv").exists() && !work.join("x.pv.partial").exists());
    // The server's backup was ended: another backup can start at once.
    let j = json(&[
        "backup",
        "--source",
        &url,
        "--to",
        &st,
        "--continue-after-error",
    ]);
    assert_eq!(j["damaged"], true);
    assert!(j["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("block 3")));
    let h = json(&["header", "--from", &st]);
    assert_eq!(h["sets"][0]["damaged"], true);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn cluster_without_checksums_backs_up_and_restores() {
    let pg = Pg::start(false, None);
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 50000) g");
    let work = postgres_dir("nochk");
    let st = s(&work.join("x.pv"));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let j = json(&backup_args(&url, &[&st], &["--compress", "zstd"]));
    assert_eq!(j["extra"]["data_checksums"], false);
    ok(&["verify", "--from", &st]);
    let target = work.join("r");
    restore_for_postgres(&["--from", &st], &target, &[]);
    let r = Pg::adopt(&target);
    assert_eq!(r.sql("SELECT count(*) FROM t"), "50000");
    drop(r);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_pg_wal_elsewhere_is_restored_as_a_directory_of_its_own() {
    // initdb --waldir's layout: pg_wal a link to another directory.
    let mut pg = Pg::start(false, None);
    pg.stop();
    let work = postgres_dir("waldir");
    let wal = work.join("wal");
    std::fs::rename(pg.data.join("pg_wal"), &wal).unwrap();
    std::os::unix::fs::symlink(&wal, pg.data.join("pg_wal")).unwrap();
    pg.pg_ctl_start();
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let st = s(&work.join("x.pv"));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&backup_args(&url, &[&st], &[]));
    let files = json(&["files", "--from", &st]);
    let kind = |p: &str| {
        let f = files["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p);
        f.map(|f| f["kind"].as_str().unwrap().to_string())
    };
    assert_eq!(kind("pg_wal").as_deref(), Some("dir"));
    assert_eq!(kind("pg_wal/archive_status").as_deref(), Some("dir"));
    let target = work.join("r");
    restore_for_postgres(&["--from", &st], &target, &[]);
    let restored_wal = std::fs::symlink_metadata(target.join("pg_wal")).unwrap();
    assert!(
        restored_wal.is_dir(),
        "a directory, not a link into the source's WAL"
    );
    let r = Pg::adopt(&target);
    assert_eq!(r.sql("SELECT count(*) FROM t"), "1000");
    drop(r);
    drop(pg);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let pg = Pg::start(true, None);
    let other = Pg::start(false, None);
    let work = postgres_dir("bad");
    let st = s(&work.join("x.pv"));
    // pgdata of another cluster.
    let url = format!("{}?pgdata={}", pg.url(), s(&other.data));
    let e = fails(&["backup", "--source", &url, "--to", &st], 1);
    assert!(
        e.contains("belongs to cluster") && e.contains(&s(&other.data)),
        "{e}"
    );
    // Server down.
    let e = fails(
        &[
            "backup",
            "--source",
            "postgres://postgres@127.0.0.1:1/postgres?pgdata=/tmp",
            "--to",
            &st,
        ],
        // A server that does not answer: try again later (docs/PROGRAMS.md).
        3,
    );
    assert!(
        e.contains("cannot connect to PostgreSQL") && e.contains("127.0.0.1:1"),
        "{e}"
    );
    // Not enough privileges.
    pg.sql("CREATE ROLE weak LOGIN");
    let url = format!(
        "postgres://weak@127.0.0.1:{}/postgres?pgdata={}",
        pg.port,
        s(&pg.data)
    );
    let e = fails(&["backup", "--source", &url, "--to", &st], 1);
    assert!(
        e.contains("permission denied") && e.contains("superuser"),
        "{e}"
    );
    assert!(!work.join("x.pv").exists());
    // Restore over a running cluster's data directory.
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--to", &st]);
    let e = fails(
        &["restore", "--from", &st, "--to", &s(&pg.data), "--replace"],
        1,
    );
    assert!(e.contains("running PostgreSQL server"), "{e}");
    assert!(
        pg.data.join("PG_VERSION").exists(),
        "nothing may be removed from a running cluster"
    );
    assert_eq!(pg.sql("SELECT 1"), "1");
    // A repository of one cluster refuses another cluster's backups.
    let repo = s(&work.join("repo"));
    ok(&["backup", "--source", &url, "--repo", &repo]);
    let url2 = format!("{}?pgdata={}", other.url(), s(&other.data));
    let e = fails(&["backup", "--source", &url2, "--repo", &repo], 1);
    assert!(e.contains("one repository per cluster"), "{e}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn tablespaces_are_read_on_their_own_volume_and_restored() {
    let pg = Pg::start(true, None);
    let ts_dir = postgres_dir("tblspc");
    pg.sql(&format!(
        "CREATE TABLESPACE extra LOCATION '{}'",
        s(&ts_dir)
    ));
    pg.sql("CREATE TABLE far (id int, pad text) TABLESPACE extra");
    pg.sql("INSERT INTO far SELECT g, repeat('y', 200) FROM generate_series(1, 30000) g");
    pg.sql("CREATE INDEX far_id ON far(id) TABLESPACE extra");
    let oid = pg.sql("SELECT oid FROM pg_tablespace WHERE spcname = 'extra'");
    let work = postgres_dir("tblspc-work");
    let st = s(&work.join("x.pv"));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let j = json(&["backup", "--source", &url, "--to", &st]);
    assert!(j["extra"]["tablespace_map"]
        .as_str()
        .unwrap()
        .contains(&s(&ts_dir)));
    let files = json(&["files", "--from", &st]);
    let prefix = format!("pg_tblspc/{oid}/PG_15_");
    assert!(
        files["files"].as_array().unwrap().iter().any(|f| f["path"]
            .as_str()
            .unwrap()
            .starts_with(&prefix)
            && f["kind"] == "file"),
        "tablespace files must be in the set under {prefix}"
    );
    let target = work.join("r");
    // The set's own location lies outside the target: refused until accepted.
    let e = fails(&["restore", "--from", &st, "--to", &s(&target)], 1);
    assert!(
        e.contains(&format!("{oid} at ")) && e.contains("--tablespaces-from-set"),
        "{e}"
    );
    assert!(!target.exists(), "nothing may be written before consent");
    // Accepted, but in use by the running cluster: refused, then relocated.
    let e = fails(
        &[
            "restore",
            "--from",
            &st,
            "--to",
            &s(&target),
            "--tablespaces-from-set",
        ],
        1,
    );
    assert!(
        e.contains("not empty") && e.contains("--tablespace-map"),
        "{e}"
    );
    assert!(
        !target.exists(),
        "nothing may be written before the tablespace check"
    );
    let moved = work.join("moved-ts");
    let map = format!("{oid}={}", s(&moved));
    restore_for_postgres(&["--from", &st], &target, &["--tablespace-map", &map]);
    assert_eq!(
        std::fs::read_link(target.join("pg_tblspc").join(&oid)).unwrap(),
        moved
    );
    let r = Pg::adopt(&target);
    assert_eq!(r.sql("SELECT count(*) FROM far WHERE id % 3 = 0"), "10000");
    assert_eq!(
        r.sql("SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'extra'"),
        s(&moved)
    );
    check_database(&r);
    drop(r);
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&ts_dir);
}

#[test]
fn differential_holds_the_changed_pages_and_restores_as_a_chain() {
    let pg = Pg::start(true, None);
    pg.pgbench_init(10);
    let repo = postgres_dir("diff-repo");
    let repo_s = s(&repo);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    // No base yet: refused, and a copy-only full is no base either.
    let e = fails(
        &[
            "backup", "--source", &url, "--repo", &repo_s, "--type", "diff",
        ],
        1,
    );
    assert!(e.contains("no usable base"), "{e}");
    ok(&["backup", "--source", &url, "--repo", &repo_s, "--copy-only"]);
    let e = fails(
        &[
            "backup", "--source", &url, "--repo", &repo_s, "--type", "diff",
        ],
        1,
    );
    assert!(e.contains("no usable base"), "{e}");
    // The report adds up over both passes of a PostgreSQL backup (data, then WAL).
    let page = repo.join("full.html");
    let full = json(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo_s,
        "--report",
        &s(&page),
    ]);
    let d = report_data(&page);
    let reads: u64 = d["series"]["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| series_sum(&l["bytes"]))
        .sum();
    assert_eq!(reads, full["raw_bytes"].as_u64().unwrap());

    // Change about 1% of the accounts (a contiguous 1% of the table's pages).
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid <= 10000");
    pg.sql("CHECKPOINT");
    let rel = pg
        .sql("SELECT pg_relation_size('pgbench_accounts')")
        .parse::<u64>()
        .unwrap();
    let diff = json(&[
        "backup", "--source", &url, "--repo", &repo_s, "--type", "diff",
    ]);
    let hist = json(&["history", "--repo", &repo_s]);
    let last = hist["sets"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["backup_type"], "diff");
    assert_eq!(last["base_set"], full["set_id"]);
    let (stored, full_stored) = (
        diff["stored_bytes"].as_u64().unwrap(),
        full["stored_bytes"].as_u64().unwrap(),
    );
    eprintln!("diff stored {stored} bytes, full stored {full_stored}, accounts table {rel} bytes: diff/full {:.3}", stored as f64 / full_stored as f64);
    assert!(
        stored < full_stored / 10,
        "a diff after changing 1% of the table stores {stored} bytes, the full {full_stored}"
    );
    pg.sql("UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1");

    let target = postgres_dir("diff-target").join("data");
    let page = repo.join("restore.html");
    let out = restore_for_postgres(&["--repo", &repo_s], &target, &["--report", &s(&page)]);
    assert!(out.contains("differential"), "{out}");
    // Both sets restored count: the full one and the differential over it.
    let d = report_data(&page);
    assert_eq!(
        series_sum(&d["series"]["writes"][0]["bytes"]),
        d["summary"]["raw_bytes"].as_u64().unwrap()
    );
    assert!(d["read_names"][0].as_str().unwrap().contains(", then "));
    let r = Pg::adopt(&target);
    assert_eq!(
        r.sql("SELECT sum(abalance) FROM pgbench_accounts WHERE aid <= 10000"),
        "70000"
    );
    assert_eq!(r.sql("SELECT count(*) FROM pgbench_accounts"), "1000000");
    check_database(&r);
    drop(r);
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
    let _ = std::fs::remove_dir_all(&repo);
}

#[test]
fn stuck_wal_archiving_times_out_or_is_interrupted_cleanly() {
    // archive_command always fails: the backup waits for a segment that never lands.
    let pg = Pg::start(true, Some("false"));
    let work = postgres_dir("stuck");
    let repo = s(&work.join("repo"));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let backup = ["backup", "--source", &url, "--repo", &repo];
    let no_set_left = || {
        let h = json(&["history", "--repo", &repo]);
        assert_eq!(h["sets"].as_array().map(Vec::len), Some(0), "{h}");
        let mut stack = vec![work.join("repo")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                assert!(!s(&p).ends_with(".partial"), "left behind: {}", p.display());
                if p.is_dir() {
                    stack.push(p);
                }
            }
        }
    };

    let mut args = backup.to_vec();
    args.extend(["--archive-timeout", "2"]);
    // A wait that timed out is worth retrying later: exit 3 (docs/PROGRAMS.md).
    let e = fails(&args, 3);
    assert!(e.contains("archive_command is failing"), "{e}");
    no_set_left();

    // Ctrl-C while it waits for the archiver: it ends at once, not after the timeout.
    let child = std::process::Command::new(bin())
        .args(backup)
        .args(["--archive-timeout", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // pg_backup_stop has run once the backup history file waits for the archiver.
    let stopped = || {
        std::fs::read_dir(pg.data.join("pg_wal/archive_status"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".backup.ready"))
            .count()
    };
    let before = stopped();
    let (r, took) = signal_when(child, "-INT", || stopped() > before);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(r.code, 130, "{}", r.stderr);
    assert!(r.stderr.contains("interrupted by SIGINT"), "{}", r.stderr);
    no_set_left();
    // The session ended with the process.
    let sessions = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
    assert_eq!(pg.sql(sessions), "0");
    let _ = std::fs::remove_dir_all(&work);
}

/// A server that dies while files are read fails the backup within a second or two,
/// saying which server went away (not 30 s later at pg_backup_stop with "Broken pipe"),
/// with exit status 3 (try again later: a lost connection, not a refusal), and the
/// repository holds nothing of it: no stripe, no record, no running record.
#[test]
fn a_server_that_dies_during_the_backup_fails_it_by_name() {
    let pg = Pg::start(true, None);
    pg.pgbench_init(10);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let work = postgres_dir("dies");
    let repo = work.join("repo");
    // Some 160 MB at 20 MB a second: the server stops while files are read.
    let child = std::process::Command::new(bin())
        .args(["backup", "--source", &url, "--repo", &s(&repo)])
        .args(["--max-rate", "20M"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let stripes = || -> Vec<std::path::PathBuf> {
        let sets = std::fs::read_dir(repo.join("sets")).unwrap();
        sets.flatten()
            .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
            .map(|f| f.path())
            .collect()
    };
    assert!(!stripes().is_empty(), "the backup is writing its stripes");
    common::pg::as_postgres(
        &pg.tool("pg_ctl"),
        &["-D", &s(&pg.data), "-m", "immediate", "-w", "stop"],
    );
    let killed = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("went away during the backup")
            && err.contains(&format!("127.0.0.1:{}", pg.port))
            && err.contains("not valid"),
        "{err}"
    );
    eprintln!("the backup failed {took:?} after the server died: {err}");
    assert!(
        took < Duration::from_secs(10),
        "noticed after {took:?}: {err}"
    );
    assert_eq!(stripes(), Vec::<std::path::PathBuf>::new(), "{err}");
    let listed = |d: &str| std::fs::read_dir(repo.join(d)).map_or(0, |r| r.count());
    assert_eq!(listed("catalog"), 0, "no record");
    assert_eq!(listed("running"), 0, "no running record");
    let h = json(&["history", "--repo", &s(&repo)]);
    assert_eq!(h["sets"], serde_json::json!([]), "{h:#}");
    let _ = std::fs::remove_dir_all(&work);
}

/// The password reaches the server from the URL (user:pw@ and ?password=), PGPASSWORD,
/// a PGPASSFILE or --password-file, and nothing pagevault prints or writes holds it.
#[test]
fn passwords_are_used_and_never_shown_or_stored() {
    const SECRET: &str = "S3cr3t-pv-XYZ";
    let pg = Pg::start(false, None);
    pg.scram_role("vault", SECRET);
    let work = postgres_dir("cred");
    let (repo, page) = (work.join("repo"), work.join("report.html"));
    let repo_s = s(&repo);
    let base = format!("postgres://vault@127.0.0.1:{}/postgres", pg.port);
    let url = format!("{base}?pgdata={}", s(&pg.data));
    let location = base.clone();
    // Every run sees no password but the one it is given (nor root's ~/.pgpass).
    let home = work.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut seen = String::new();
    let mut pv = |args: &[&str], env: &[(&str, &str)]| -> Run {
        let out = std::process::Command::new(bin())
            .args(args)
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE")
            .env("HOME", &home)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let r = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        // Outputs only: the arguments may hold it.
        seen.push_str(&format!("{}\n{}\n", r.stdout, r.stderr));
        r
    };
    let backup = |source: &str, extra: &[&str]| -> Vec<String> {
        let mut a = vec!["backup", "--source", source, "--repo", &repo_s];
        a.extend(["--compress", "none", "--verbose"]);
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect()
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let done = |r: &Run| {
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        r.stdout.clone()
    };
    let refused = |r: &Run, says: &[&str]| {
        assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
        for s in says {
            assert!(r.stderr.contains(s), "no '{s}' in: {}", r.stderr);
        }
    };

    // No password anywhere: the error says where one can be given.
    let r = pv(&args(&backup(&url, &[])), &[]);
    refused(
        &r,
        &[
            "cannot connect",
            &location,
            "asks for a password",
            "--password-file",
        ],
    );

    // (a) In the URL, as ?password= (with --json and --report) and as user:pw@.
    let with_query = format!("{url}&password={SECRET}");
    let page_s = s(&page);
    let r = pv(
        &args(&backup(&with_query, &["--json", "--report", &page_s])),
        &[],
    );
    let j: serde_json::Value = serde_json::from_str(&done(&r)).unwrap();
    assert_eq!(j["source"]["location"], location);
    assert_eq!(j["source"]["database"], "postgres");
    let d = report_data(&page);
    assert_eq!(d["config"]["source"], location, "{}", d["config"]);
    let html = std::fs::read_to_string(&page).unwrap();
    let in_userinfo = format!(
        "postgres://vault:{SECRET}@127.0.0.1:{}/postgres?pgdata={}",
        pg.port,
        s(&pg.data)
    );
    let out = done(&pv(&args(&backup(&in_userinfo, &[])), &[]));
    assert!(out.contains("for database 'postgres', file"), "{out}");

    // (b) PGPASSWORD; a wrong one is refused, saying where it came from.
    done(&pv(&args(&backup(&url, &[])), &[("PGPASSWORD", SECRET)]));
    let r = pv(&args(&backup(&url, &[])), &[("PGPASSWORD", "wrong-pv")]);
    refused(
        &r,
        &["password authentication failed", "came from PGPASSWORD"],
    );

    // (c) A password file through PGPASSFILE: ignored while others may read it.
    let pgpass = work.join("pgpass");
    std::fs::write(
        &pgpass,
        format!(
            "# pagevault test\n127.0.0.1:{}:postgres:other:nope\n127.0.0.1:{}:postgres:vault:{SECRET}\n*:*:*:*:wrong-pv\n",
            pg.port, pg.port
        ),
    )
    .unwrap();
    let mode = |m: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(m)).unwrap();
    };
    let pgpass_env = [("PGPASSFILE", s(&pgpass))];
    let pgpass_env: Vec<(&str, &str)> = pgpass_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    mode(0o644);
    let r = pv(&args(&backup(&url, &[])), &pgpass_env);
    refused(
        &r,
        &["asks for a password", "group or world access", &s(&pgpass)],
    );
    mode(0o600);
    done(&pv(&args(&backup(&url, &[])), &pgpass_env));

    // (d) --password-file, read before PGPASSWORD; an unreadable one is refused.
    let pwfile = work.join("pw");
    std::fs::write(&pwfile, format!("{SECRET}\n")).unwrap();
    let pw_s = s(&pwfile);
    let with_file = backup(&url, &["--password-file", &pw_s]);
    done(&pv(&args(&with_file), &[("PGPASSWORD", "wrong-pv")]));
    let missing = s(&work.join("no-such-file"));
    let r = pv(&args(&backup(&url, &["--password-file", &missing])), &[]);
    refused(&r, &["cannot read the password file", &missing]);
    // The T-SQL front end takes it too.
    let sql = ["sql", "--source", &url, "--password-file", &pw_s];
    let mut a = sql.to_vec();
    a.push("BACKUP DATABASE postgres TO DISK = 'NUL'");
    done(&pv(&a, &[]));

    // What the repository and its sets say of the source.
    let h: serde_json::Value =
        serde_json::from_str(&done(&pv(&["history", "--repo", &repo_s, "--json"], &[]))).unwrap();
    let sets = h["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 5, "{h}");
    for set in sets {
        assert_eq!(set["database"], "postgres", "{set}");
        let id = set["set_id"].as_str().unwrap();
        for what in ["header", "files"] {
            let out = done(&pv(&[what, "--repo", &repo_s, "--set", id, "--json"], &[]));
            if what == "header" {
                assert!(out.contains(&format!("\"{location}\"")), "{out}");
            }
        }
    }

    // The secret is nowhere: outputs, the report, every file of the repository.
    assert!(!seen.contains(SECRET), "the password was shown:\n{seen}");
    assert!(!html.contains(SECRET), "the report holds the password");
    let mut files = 0;
    let mut dirs = vec![repo.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            files += 1;
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{} holds the password",
                p.display()
            );
        }
    }
    assert!(files >= 5, "only {files} files in the repository");
    drop(pg);
    let _ = std::fs::remove_dir_all(&work);
}

/// Issue 53, item 6: `?pgdata=` naming another copy of the same cluster (an old copy
/// beside the live one) is refused at the start, naming both directories, instead of
/// failing later on WAL that "left pg_wal".
#[test]
fn a_pgdata_that_is_a_copy_of_the_cluster_is_refused() {
    let pg = Pg::start(true, None);
    let copy = pg.data.parent().unwrap().join("copy");
    let cp = std::process::Command::new("cp")
        .args(["-a", &s(&pg.data), &s(&copy)])
        .status()
        .unwrap();
    assert!(cp.success());
    let url = format!("{}?pgdata={}", pg.url(), s(&copy));
    let e = fails(&["backup", "--source", &url, "--to", "NUL"], 1);
    assert!(
        e.contains("is another copy of cluster") && e.contains(&s(&pg.data)),
        "{e}"
    );
    // Its own directory, by another spelling (a link to it), is taken.
    let link = pg.data.parent().unwrap().join("link");
    std::os::unix::fs::symlink(&pg.data, &link).unwrap();
    let url = format!("{}?pgdata={}", pg.url(), s(&link));
    ok(&["backup", "--source", &url, "--to", "NUL"]);
}
