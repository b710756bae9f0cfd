//! PostgreSQL wherever it runs: the servers besides Debian's 15 that the tests can run
//! (14, 16, 17 and 18 from the PyPI wheels scripts/setup.sh unpacks, started with the
//! same helpers as 15), and backups from a streaming standby under load.

mod common;
use common::pg::{
    as_postgres, assert_pgbench_consistent, pgbench_load, postgres_dir, push_cmd, sql_at, Pg,
    PgOptions,
};
use common::{fails, json, s};

#[test]
fn postgres_18_starts_and_answers() {
    let pg = Pg::start_with(&PgOptions {
        major: 18,
        ..PgOptions::default()
    });
    assert_eq!(pg.major, 18);
    let version = pg.sql("SHOW server_version_num");
    assert!(version.starts_with("18"), "server_version_num {version}");
    // 18's initdb turns data checksums on unless told not to.
    assert_eq!(pg.sql("SHOW data_checksums"), "off");
    assert_eq!(
        pg.sql_db("template1", "SELECT current_database()"),
        "template1"
    );
    // 15's psql (the one sql_at runs) talks to 18 too.
    assert_eq!(sql_at(pg.port, "postgres", "SELECT 1 + 1"), "2");
}

#[test]
fn postgres_18_with_1mb_wal_segments_and_checksums() {
    let pg = Pg::start_with(&PgOptions {
        major: 18,
        checksums: true,
        wal_segsize_mb: Some(1),
        extra_conf: "max_wal_size = 64MB".into(),
        ..PgOptions::default()
    });
    assert_eq!(pg.sql("SHOW wal_segment_size"), "1MB");
    assert_eq!(pg.sql("SHOW data_checksums"), "on");
    assert_eq!(pg.sql("SHOW max_wal_size"), "64MB");
    assert!(pg.sql("SHOW server_version_num").starts_with("18"));
}

/// `n` new WAL segments, each with one row in `marks`.
fn segments(pg: &Pg, n: u32) {
    pg.sql(&format!(
        "DO $$ BEGIN FOR i IN 1..{n} LOOP INSERT INTO marks VALUES (default); \
         PERFORM pg_switch_wal(); END LOOP; END $$"
    ));
}

#[test]
fn postgres_18_archives_backs_up_and_restores() {
    let dir = common::pg::postgres_dir("pg18");
    let repo = dir.join("repo");
    let pg = Pg::start_with(&PgOptions {
        major: 18,
        checksums: true,
        archive: Some(push_cmd(&repo)),
        ..PgOptions::default()
    });
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let out = common::ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &common::s(&repo),
        "--compress",
        "lz4",
    ]);
    assert!(out.contains("BACKUP DATABASE successfully"), "{out}");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1001, 2000) g");
    let lsn = pg.sql("SELECT pg_current_wal_insert_lsn()");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(2001, 3000) g");
    let seg = pg.switch_and_wait();
    assert_eq!(
        pg.sql("SELECT failed_count FROM pg_stat_archiver"),
        "0",
        "{}",
        pg.log()
    );
    let (target, j) = common::pg::restore_repo(&common::s(&repo), &["--until-lsn", &lsn]);
    assert_eq!(j["wal"]["verified"], true, "{j}");
    let r = Pg::adopt_with(&target, 18);
    r.wait_promoted();
    assert_eq!(
        r.sql("SELECT count(*) || ':' || max(id) FROM t"),
        "2000:2000"
    );
    common::pg::check_database(&r);
    drop(r);

    // WAL of a release newer than pagevault knows: refused by name, nothing archived.
    let wal = pg.data.join("pg_wal").join(&seg);
    let mut bytes = std::fs::read(&wal).unwrap();
    assert_eq!(
        &bytes[0..2],
        &0xD118u16.to_le_bytes(),
        "PostgreSQL 18's WAL page magic"
    );
    bytes[0..2].copy_from_slice(&0xD11Au16.to_le_bytes());
    let fake = dir.join(&seg);
    std::fs::write(&fake, &bytes).unwrap();
    let other = dir.join("other-repo");
    common::ok(&["init", "--repo", &common::s(&other)]);
    let err = common::fails(
        &[
            "archive-push",
            &common::s(&fake),
            "--repo",
            &common::s(&other),
        ],
        1,
    );
    assert!(
        err.contains("0xD11A")
            && err.contains("newer than 18")
            && err.contains("nothing was archived"),
        "{err}"
    );
    let archived = walkdir_files(&other.join("wal"));
    assert!(archived.is_empty(), "{archived:?}");
}

fn walkdir_files(p: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().unwrap().is_dir() {
                out.extend(walkdir_files(&e.path()));
            } else {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// 1 MiB segments: 4096 per log id, so segment 0xFF is followed by 0x100 (16 MiB
/// arithmetic would ask for 000000010000000100000000, which never exists).
#[test]
fn one_mib_segments_back_up_across_0xff_and_restore_after_300_segments() {
    let dir = common::pg::postgres_dir("seg1");
    let repo = dir.join("repo");
    let pg = Pg::start_with(&PgOptions {
        checksums: true,
        archive: Some(push_cmd(&repo)),
        wal_segsize_mb: Some(1),
        ..PgOptions::default()
    });
    pg.pgbench_init(2);
    pg.sql("CREATE TABLE marks(id serial PRIMARY KEY)");
    let segno = |pg: &Pg| {
        let n = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())");
        u64::from_str_radix(&n[8..16], 16).unwrap() * 4096
            + u64::from_str_radix(&n[16..], 16).unwrap()
    };
    let now = segno(&pg);
    assert!(now < 0xFE, "{now}");
    segments(&pg, (0xFE - now) as u32);
    assert_eq!(segno(&pg), 0xFE);
    // A slow backup (zstd 19 on one thread) during which the WAL passes 0xFF.
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let child = std::process::Command::new(common::bin())
        .args(["backup", "--source", &url, "--repo", &common::s(&repo)])
        .args(["--compress", "zstd:19", "--threads", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !walkdir_files(&repo).iter().any(|f| f.ends_with(".partial")) {
        assert!(t0.elapsed().as_secs() < 60, "the backup wrote no stripe");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    segments(&pg, 3);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let h = common::json(&["history", "--repo", &common::s(&repo)]);
    let set = &h["sets"][0];
    let (start, stop) = (
        set["start_wal"].as_str().unwrap(),
        set["stop_wal"].as_str().unwrap(),
    );
    assert!(
        start <= "0000000100000000000000FF" && stop >= "000000010000000000000100",
        "the backup's WAL should cross 0xFF: {start} to {stop}"
    );
    // Over 300 segments of WAL in all, then a restore to the latest point.
    segments(&pg, 300 - (segno(&pg) as u32).min(300) + 20);
    assert!(segno(&pg) > 300);
    let last = pg.switch_and_wait();
    let marks = pg.sql("SELECT count(*) FROM marks");
    let (target, j) = common::pg::restore_repo(&common::s(&repo), &[]);
    assert_eq!(j["wal"]["ranges"][0]["last"].as_str().unwrap(), last, "{j}");
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(r.sql("SELECT count(*) FROM marks"), marks);
    common::pg::assert_pgbench_consistent(&r);
}

/// A server of `major` archiving through archive-push: a full backup, an incremental
/// read from pagevault's own block summaries (a database created and one dropped in
/// between), and a restore to a point in time that recovers, promotes and passes
/// pg_amcheck.
fn archives_backs_up_incrementally_and_restores(major: u32) {
    let dir = common::pg::postgres_dir(&format!("pg{major}"));
    let repo = common::s(&dir.join("repo"));
    let pg = Pg::start_with(&PgOptions {
        major,
        checksums: true,
        archive: Some(push_cmd(&repo)),
        ..PgOptions::default()
    });
    assert!(pg
        .sql("SHOW server_version_num")
        .starts_with(&major.to_string()));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 20000) g");
    pg.sql("CREATE DATABASE gone");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let backup = |ty: &str| {
        common::json(&[
            "backup",
            "--source",
            &url,
            "--repo",
            &repo,
            "--type",
            ty,
            "--compress",
            "lz4",
        ])
    };
    backup("full");
    pg.sql("UPDATE t SET v = 'changed' WHERE id % 100 = 0");
    pg.sql("CREATE DATABASE made");
    pg.sql("DROP DATABASE gone");
    let incr = backup("incr");
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    let blocks: u64 = pg.sql_num("SELECT pg_relation_size('t') / 8192");
    let listed = incr["change_map"]["listed_pages"].as_u64().unwrap();
    // The updated rows' pages and the new database's, not the whole table.
    assert!(
        listed > 0 && listed < blocks * 3,
        "{listed} of {blocks}: {incr}"
    );
    pg.sql("INSERT INTO t SELECT g, 'late' FROM generate_series(20001, 21000) g");
    let lsn = pg.sql("SELECT pg_current_wal_insert_lsn()");
    pg.sql("INSERT INTO t SELECT g, 'later' FROM generate_series(21001, 22000) g");
    let last = pg.switch_and_wait();
    // status: the segment just archived is the newest, and the server is at most a
    // segment ahead of the archive.
    // The source as a stanza names it, with pagevault's own ?pgdata=.
    let source = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let st = common::json(&["status", "--repo", &repo, "--source", &source]);
    let prom = common::ok(&[
        "status",
        "--repo",
        &repo,
        "--source",
        &source,
        "--prometheus",
    ]);
    assert!(prom.contains("pagevault_wal_archive_lag_bytes{"), "{prom}");
    assert_eq!(st["newest_wal"], last.as_str(), "{st}");
    assert!(
        st["newest_wal_age_seconds"].as_f64().unwrap() < 60.0,
        "{st}"
    );
    assert!(
        st["wal_archive_lag_bytes"].as_u64().unwrap() <= 16 << 20,
        "{st}"
    );
    assert!(st["newest_incr"]["set_id"].is_string(), "{st}");
    let (target, j) = common::pg::restore_repo(&repo, &["--until-lsn", &lsn]);
    assert_eq!(j["chain"].as_array().unwrap().len(), 2, "{j}");
    let r = Pg::adopt_with(&target, major);
    r.wait_promoted();
    assert_eq!(
        r.sql("SELECT count(*) || ':' || count(*) FILTER (WHERE v = 'changed') FROM t"),
        "21000:200"
    );
    assert_eq!(r.sql("SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE datname IN ('made', 'gone')"), "made");
    common::pg::check_database(&r);
}

#[test]
fn postgres_14_archives_backs_up_incrementally_and_restores() {
    archives_backs_up_incrementally_and_restores(14);
}

#[test]
fn postgres_16_archives_backs_up_incrementally_and_restores() {
    archives_backs_up_incrementally_and_restores(16);
}

/// A full and an incremental taken on a streaming standby of a primary under pgbench
/// load (issue 38, item 2): the files read from the standby, the primary's WAL switched
/// at each end (`--primary`) and its archive waited for; the chain restores and
/// recovers as one taken on the primary would.
#[test]
fn a_full_and_an_incremental_from_a_standby_under_load_restore() {
    let dir = postgres_dir("standby");
    let repo = s(&dir.join("repo"));
    let primary = Pg::start(true, Some(&push_cmd(&repo)));
    primary.pgbench_init(5);
    let sdata = dir.join("standby");
    as_postgres(
        &s(&primary.bin.join("pg_basebackup")),
        &[
            "-D",
            &s(&sdata),
            "-R",
            "-X",
            "stream",
            "-h",
            "127.0.0.1",
            "-p",
            &primary.port.to_string(),
            "-U",
            "postgres",
            "--no-sync",
            "--checkpoint=fast",
        ],
    );
    let standby = Pg::adopt(&sdata);
    assert_eq!(standby.sql("SELECT pg_is_in_recovery()"), "t");
    let surl = format!("{}?pgdata={}", standby.url(), s(&sdata));
    let purl = primary.url();
    let backup = |ty: &str| {
        json(&[
            "backup",
            "--source",
            &surl,
            "--primary",
            &purl,
            "--repo",
            &repo,
            "--type",
            ty,
            "--compress",
            "lz4",
            "--archive-timeout",
            "60",
        ])
    };
    let load = pgbench_load(&primary, 10, 300);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let full = backup("full");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let incr = backup("incr");
    let mut load = load;
    assert!(load.wait().unwrap().success());
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    // The sets name the standby's backup and the archive holds their stop segments.
    for set in [&full, &incr] {
        let id = set["set_id"].as_str().unwrap();
        let h = json(&["history", "--repo", &repo]);
        let e = (h["sets"].as_array().unwrap().iter())
            .find(|e| e["set_id"] == id)
            .unwrap()
            .clone();
        let stop = e["stop_wal"].as_str().unwrap();
        assert!(
            dir.join("repo/wal")
                .join(&stop[..8])
                .join(format!("{stop}.zst"))
                .exists(),
            "{stop} not archived: {e}"
        );
    }
    // A primary named for a server that is no standby is refused.
    let purl_data = format!("{}?pgdata={}", primary.url(), s(&primary.data));
    let e = fails(
        &[
            "backup",
            "--source",
            &purl_data,
            "--primary",
            &purl,
            "--to",
            "NUL",
        ],
        1,
    );
    assert!(e.contains("is not in recovery"), "{e}");

    let want = primary.sql("SELECT count(*) FROM pgbench_history");
    primary.switch_and_wait();
    drop(standby);
    let (target, j) = common::pg::restore_repo(&repo, &[]);
    assert_eq!(j["chain"].as_array().unwrap().len(), 2, "{j}");
    let label = std::fs::read_to_string(target.join("backup_label")).unwrap();
    assert!(label.contains("BACKUP FROM: standby"), "{label}");
    let r = Pg::adopt(&target);
    r.wait_promoted();
    assert_pgbench_consistent(&r);
    assert_eq!(r.sql("SELECT count(*) FROM pgbench_history"), want);
    common::pg::check_database(&r);
}
