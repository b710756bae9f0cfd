//! `restore --db-include` / `--db-exclude` (issue 53): one database of a cluster
//! restored, the others' relation files left empty and sparse, nothing of them read;
//! the restored cluster recovers, its kept database passes PostgreSQL's checkers, and
//! the ones left out are dropped after it.

mod common;

use common::forge;
use common::pg::{bin_dir, check_database, connect_args, postgres_dir, push_cmd, Pg};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

/// The other database's size in MiB (`PAGEVAULT_TEST_BIG_MB`, default 256).
fn big_mb() -> u64 {
    std::env::var("PAGEVAULT_TEST_BIG_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

#[test]
fn one_database_is_restored_and_the_other_is_neither_read_nor_written() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.sql("CREATE DATABASE app");
    pg.sql("CREATE DATABASE big");
    // The database kept: pgbench's tables, and one of its own.
    let init = Command::new(pg.bin.join("pgbench"))
        .args(connect_args(pg.port))
        .args(["-i", "-q", "-s", "2", "app"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    pg.sql_db(
        "app",
        "CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT i, md5(i::text) FROM generate_series(1, 20000) i",
    );
    // Rows of about 930 bytes, 8 a page: a little over big_mb() MiB of heap.
    let rows = big_mb() * 1024 * 9 / 8;
    pg.sql_db(
        "big",
        &format!("CREATE TABLE b (id bigint PRIMARY KEY, v text); INSERT INTO b SELECT i, (SELECT string_agg(md5(i::text || j::text), '') FROM generate_series(1, 28) j) FROM generate_series(1, {rows}) i"),
    );
    let big_bytes: u64 = pg.sql("SELECT pg_database_size('big')").parse().unwrap();
    assert!(big_bytes > big_mb() << 20, "big is {big_bytes} bytes");
    // Hint bits set now: the incremental holds only the pages the update changes.
    pg.sql_db("big", "VACUUM (FREEZE) b");
    pg.sql("CHECKPOINT");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--compress",
        "none",
    ]);
    // An incremental over it changes both databases: the chain's newer set is stepped
    // over too.
    pg.sql_db("app", "UPDATE a SET v = 'changed' WHERE id % 10 = 0");
    pg.sql_db("big", "UPDATE b SET v = 'changed' WHERE id % 1000 = 0");
    pg.switch_and_wait();
    ok(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--compress",
        "none",
        "--type",
        "incr",
    ]);
    pg.sql_db("app", "INSERT INTO a VALUES (0, 'after the backups')");
    pg.switch_and_wait();
    let big_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = 'big'");

    // header names the databases; files says what --db-include would leave out.
    let h = ok(&["header", "--repo", &repo]);
    assert!(
        h.contains(&format!("big ({big_oid})")) && h.contains("app ("),
        "{h}"
    );
    let f = json(&["files", "--repo", &repo, "--db-include", "app"]);
    let marked: Vec<&str> = (f["files"].as_array().unwrap().iter())
        .filter(|f| f["left_out"] == true)
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(!marked.is_empty(), "{f}");
    assert!(
        marked
            .iter()
            .all(|p| p.starts_with(&format!("base/{big_oid}/"))),
        "{marked:?}"
    );
    assert_eq!(f["left_out"]["files"], marked.len(), "{f}");

    // Refusals name what to do, before anything is written.
    let target = postgres_dir("only").join("data");
    let to = s(&target);
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            &to,
            "--db-include",
            "nosuch",
        ],
        1,
    );
    assert!(
        e.contains("holds no database 'nosuch'") && e.contains("app ("),
        "{e}"
    );
    let e = fails(
        &[
            "restore",
            "--repo",
            &repo,
            "--to",
            &to,
            "--db-exclude",
            "postgres",
        ],
        1,
    );
    assert!(e.contains("built in"), "{e}");
    assert!(!target.exists(), "a refused restore wrote nothing");

    // A frame of the database left out, damaged in its header, in a run of such frames
    // too long to read through (over 256 KiB from the frame read before it to the next
    // one read: the reader's rule): the restore steps over it by the frame index, never
    // reading it, and so has nothing to tell of it.
    let full = &history_ids(&repo)[0];
    let dir = std::path::Path::new(&repo).join("sets").join(full);
    let stripe = (std::fs::read_dir(&dir).unwrap().flatten())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "pv"))
        .unwrap();
    let mut b = std::fs::read(&stripe).unwrap();
    let m: serde_json::Value = serde_json::from_slice(&forge::manifest_json(&b)).unwrap();
    let left_ids: std::collections::HashSet<u64> = (m["files"].as_array().unwrap().iter())
        .filter(|f| (f["path"].as_str().unwrap()).starts_with(&format!("base/{big_oid}/")))
        .map(|f| f["id"].as_u64().unwrap())
        .collect();
    let frames = forge::frames_of(&b);
    let left = |at: usize| left_ids.contains(&(forge::u32_at(&b, at + 8) as u64));
    let hit = (1..frames.len() - 1)
        .find(|&i| {
            let run_start = (0..i)
                .rev()
                .find(|&j| !left(frames[j]))
                .map_or(0, |j| j + 1);
            let next_read = (i + 1..frames.len()).find(|&k| !left(frames[k]));
            let far =
                next_read.is_none_or(|k| frames[k] - frames[run_start] > forge::READ_THROUGH_GAP);
            left(frames[i - 1]) && left(frames[i]) && left(frames[i + 1]) && far
        })
        .map(|i| frames[i])
        .expect("three frames of the database left out in a run of over 256 KiB");
    b[hit + 40] ^= 0xff;
    std::fs::write(&stripe, &b).unwrap();
    let j = json(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &to,
        "--owner",
        "postgres",
        "--db-include",
        "app",
    ]);
    let told = (j["warnings"].as_array().unwrap().iter())
        .filter_map(|w| w.as_str())
        .find(|w| w.contains("not needed by this restore"));
    assert!(told.is_none(), "{j}");
    let left = &j["left_out"];
    assert_eq!(left["databases"][0]["name"], "big", "{j}");
    assert_eq!(left["databases"].as_array().unwrap().len(), 1, "{j}");
    let read: u64 = (j["chain"].as_array().unwrap().iter())
        .map(|l| l["read_bytes"].as_u64().unwrap())
        .sum();
    let skipped = left["stored_bytes_not_read"].as_u64().unwrap();
    // Every stored byte of the chain is read or stepped over; of the left-out
    // database's (held by the full, a few pages by the incremental), under 10% are
    // read (here: none of its frames).
    let h = json(&["history", "--repo", &repo]);
    let stored: u64 = (h["sets"].as_array().unwrap().iter())
        .map(|s| s["stored_bytes"].as_u64().unwrap())
        .sum();
    eprintln!("db-include: big {big_bytes} bytes, chain stored {stored}, read {read}, stepped over {skipped}");
    assert!(
        read + skipped <= stored,
        "read {read} + skipped {skipped} of {stored}: {j}"
    );
    assert!(
        skipped >= big_bytes * 9 / 10,
        "stepped over {skipped} of {big_bytes}: {j}"
    );
    assert!(
        read <= stored - big_bytes * 9 / 10,
        "read {read} bytes of {stored} stored, big is {big_bytes}: {j}"
    );
    assert!(
        (j["postgres"].as_array().unwrap().iter())
            .any(|n| n.as_str().unwrap().contains("DROP DATABASE")),
        "{j}"
    );
    // Its files are there, at their size, and hold no block.
    let mut sizes = 0;
    for f in std::fs::read_dir(target.join("base").join(&big_oid)).unwrap() {
        let m = f.unwrap().metadata().unwrap();
        if m.len() > 0 && m.blocks() == 0 {
            sizes += m.len();
        }
    }
    assert!(sizes >= big_bytes * 9 / 10, "{sizes} bytes of sparse files");

    let mut r = Pg::adopt(&target);
    r.wait_promoted();
    assert_eq!(
        r.sql_db(
            "app",
            "SELECT count(*), count(*) FILTER (WHERE v = 'changed') FROM a"
        ),
        "20001|2000"
    );
    assert_eq!(
        r.sql_db("app", "SELECT count(*) FROM pgbench_accounts"),
        "200000"
    );
    let amcheck = Command::new(bin_dir(15).join("pg_amcheck"))
        .args(connect_args(r.port))
        .args(["--install-missing", "--heapallindexed", "--database", "app"])
        .output()
        .unwrap();
    assert!(amcheck.status.success(), "{amcheck:?}");
    r.sql("DROP DATABASE big");
    check_database(&r);
    r.stop();
}

#[test]
fn db_include_refuses_delta_and_both_forms() {
    let refused = |more: [&str; 2]| {
        let mut a = vec!["restore", "--repo", "/nonexistent", "--to", "/tmp/x"];
        a.extend(["--db-include", "a"]);
        a.extend(more);
        let e = fails(&a, 2);
        assert!(e.contains("cannot be used with"), "{more:?}: {e}");
    };
    refused(["--delta", "--force"]);
    refused(["--db-exclude", "b"]);
}
