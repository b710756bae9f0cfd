//! The restore options a DBA uses (issue 53): `--standby` with `--primary-conninfo`
//! builds a replica that streams, `--recovery-option` lines take effect, and a restored
//! copy archives nothing unless `--archive-mode preserve` says so.

mod common;

use common::pg::{check_database, postgres_dir, push_cmd, Pg};
use common::*;
use std::time::{Duration, Instant};

/// Polls `f` until it is true, for at most 60 s.
fn wait(what: &str, pg: &Pg, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}:\n{}",
            pg.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_standby_streams_from_the_primary_and_a_copy_archives_nothing() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &repo]);
    pg.sql("INSERT INTO t SELECT g, 'after' FROM generate_series(1001, 2000) g");
    pg.switch_and_wait();

    // Refusals, before anything is written.
    let to = s(&postgres_dir("refused").join("data"));
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            &to,
            "--standby",
            "--until-lsn",
            "0/1",
        ],
        2,
    );
    assert!(e.contains("cannot be used with"), "{e}");
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            &to,
            "--recovery-option",
            "x=1\nrestore_command=sh",
        ],
        1,
    );
    assert!(e.contains("one line"), "{e}");
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            &to,
            "--primary-conninfo",
            "host=x",
        ],
        2,
    );
    assert!(e.contains("--standby"), "{e}");

    // A replica: standby.signal, primary_conninfo, a --recovery-option that wins.
    let standby = postgres_dir("standby").join("data");
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres application_name=pv's",
        pg.port
    );
    let j = json(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&standby),
        "--owner",
        "postgres",
        "--standby",
        "--primary-conninfo",
        &conninfo,
        "--recovery-option",
        "work_mem=7MB",
    ]);
    let notes = j["postgres"].to_string();
    assert!(
        notes.contains("standby.signal") && notes.contains("streams"),
        "{j}"
    );
    assert!(standby.join("standby.signal").exists() && !standby.join("recovery.signal").exists());
    let auto = std::fs::read_to_string(standby.join("postgresql.auto.conf")).unwrap();
    assert!(
        auto.contains("primary_conninfo = 'host=127.0.0.1") && auto.contains("pv''s'"),
        "{auto}"
    );
    assert!(
        !auto.contains("archive_mode = 'off'"),
        "a standby keeps its setting: {auto}"
    );
    let mut r = Pg::adopt(&standby);
    wait("the standby streams", &r, || {
        r.sql("SELECT coalesce((SELECT status FROM pg_stat_wal_receiver), '')") == "streaming"
    });
    assert_eq!(r.sql("SELECT pg_is_in_recovery()"), "t");
    assert_eq!(r.sql("SHOW work_mem"), "7MB");
    pg.sql("INSERT INTO t VALUES (5000, 'streamed')");
    wait("the row reaches the standby", &r, || {
        r.sql("SELECT count(*) FROM t WHERE id = 5000") == "1"
    });
    // Promoted, it is a database its own checkers pass.
    r.sql("SELECT pg_promote()");
    r.wait_promoted();
    assert_eq!(r.sql("SELECT count(*) FROM t"), "2001");
    check_database(&r);
    r.stop();

    // A copy: archive_mode off by default, so nothing of its new timeline reaches the
    // repository; --archive-mode preserve keeps the set's setting.
    let copy = postgres_dir("copy").join("data");
    let j = json(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&copy),
        "--owner",
        "postgres",
    ]);
    assert!(
        j["postgres"].to_string().contains("archive_mode = off"),
        "{j}"
    );
    let mut c = Pg::adopt_as_restored(&copy);
    c.wait_promoted();
    assert_eq!(c.sql("SHOW archive_mode"), "off");
    c.sql("SELECT pg_switch_wal()");
    c.sql("CHECKPOINT");
    std::thread::sleep(Duration::from_secs(2));
    let tl2 = std::path::Path::new(&repo).join("wal/00000002");
    assert!(!tl2.exists(), "the copy archived into the repository");
    check_database(&c);
    c.stop();
    let kept = postgres_dir("kept").join("data");
    ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&kept),
        "--owner",
        "postgres",
        "--archive-mode",
        "preserve",
        "--recovery-option",
        "archive_command=/bin/true",
    ]);
    let mut k = Pg::adopt_as_restored(&kept);
    k.wait_promoted();
    assert_eq!(k.sql("SHOW archive_mode"), "on");
    assert_eq!(k.sql("SHOW archive_command"), "/bin/true");
    k.stop();
}
