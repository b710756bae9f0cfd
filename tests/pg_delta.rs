//! `restore --delta` (issue 39, item 3) against a real PostgreSQL 15 archiving into the
//! repository: a full and an incremental of a pgbench cluster, then the cluster drifts
//! (1% of the accounts' pages changed, a table dropped, one added, links planted); the
//! delta restore over its stopped data directory writes a small part of it, removes
//! what the chain does not hold, follows no link out, and starts with the rows of a
//! fresh restore of the same chain (pg_checksums and pg_amcheck clean). A running
//! server's directory and a directory that is not a data directory are refused.

mod common;

use common::pg::{amcheck, archiving_pgbench, check_restored, check_restored_with, postgres_dir};
use common::pg::{restore_repo, Pg};
use common::*;
use serde_json::Value;
use std::path::Path;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

/// The accounts' rows and balances, and which of the two tables exist.
fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT md5(string_agg(aid || ':' || abalance, ',' ORDER BY aid)) FROM pgbench_accounts) || ' ' || \
         (to_regclass('dropped_later') IS NOT NULL)::text || ' ' || (to_regclass('added_later') IS NOT NULL)::text",
    )
}

/// Bytes of the regular files of set `id`: all, and those under pg_wal/.
fn file_bytes(repo: &str, id: &str) -> (u64, u64) {
    let f = json(&["files", "--repo", repo, "--set", id]);
    let files = f["files"].as_array().unwrap().iter();
    let files: Vec<&Value> = files.filter(|e| e["kind"] == "file").collect();
    let size = |e: &&Value| e["size"].as_u64().unwrap();
    let wal = (files.iter())
        .filter(|e| e["path"].as_str().unwrap().starts_with("pg_wal/"))
        .map(size)
        .sum();
    (files.iter().map(size).sum(), wal)
}

/// Changes the rows of every `n`th page of pgbench_accounts.
fn change_pages(pg: &Pg, n: u32) {
    pg.sql(&format!(
        "UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE (ctid::text::point)[0]::bigint % {n} = 0"
    ));
}

#[test]
fn a_delta_restore_rewrites_only_what_changed_and_starts_like_a_fresh_one() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (mut pg, url) = archiving_pgbench(&repo, 5);
    pg.sql("CREATE TABLE dropped_later AS SELECT g FROM generate_series(1, 50000) g");
    backup(&url, &repo, "full");
    change_pages(&pg, 200);
    let incr = backup(&url, &repo, "incr");
    pg.sql("SELECT pg_create_restore_point('delta_point')");
    let want = rows(&pg);
    assert!(want.ends_with("true false"), "{want}");
    pg.switch_and_wait();

    // The cluster goes on: 1% of the accounts' pages, a table dropped, one added.
    let file_of = |t: &str| pg.sql(&format!("SELECT pg_relation_filepath('{t}')"));
    let (dropped, branches) = (file_of("dropped_later"), file_of("pgbench_branches"));
    pg.sql("DROP TABLE dropped_later");
    pg.sql("CREATE TABLE added_later AS SELECT g FROM generate_series(1, 50000) g");
    let added = file_of("added_later");
    change_pages(&pg, 100);
    pg.sql("CHECKPOINT");
    let data = pg.data.clone();
    let to = s(&data);
    let delta: Vec<&str> = vec![
        "restore",
        "--repo",
        &repo,
        "--to",
        &to,
        "--owner",
        "postgres",
        "--delta",
        "--until-name",
        "delta_point",
    ];

    // A running server's directory is refused, untouched.
    let e = fails(&delta, 1);
    assert!(e.contains("running PostgreSQL server"), "{e}");
    assert!(data.join(&added).exists());
    let sysid = pg.sql("SELECT system_identifier FROM pg_control_system()");
    pg.stop();

    // Another cluster's directory (another system identifier in its pg_control) is
    // refused, naming both, untouched; --force lifts that refusal (issue 52, item 9b).
    let control = data.join("global/pg_control");
    let mut c = std::fs::read(&control).unwrap();
    let other = sysid.parse::<u64>().unwrap() ^ 1;
    c[..8].copy_from_slice(&other.to_le_bytes());
    std::fs::write(&control, &c).unwrap();
    let e = fails(&delta, 1);
    let other_s = other.to_string();
    for w in [sysid.as_str(), &other_s, &to, "another cluster", "--force"] {
        assert!(e.contains(w), "{w}: {e}");
    }
    assert_eq!(std::fs::read(&control).unwrap(), c);
    assert!(data.join(&added).exists());
    let delta = [&delta[..], &["--force"]].concat();

    // Links planted in the data directory: a relation file and a directory pointing out.
    let outside = postgres_dir("outside");
    std::fs::write(outside.join("victim"), b"precious").unwrap();
    std::fs::remove_file(data.join(&branches)).unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), data.join(&branches)).unwrap();
    std::os::unix::fs::symlink(&outside, data.join("base/evil")).unwrap();

    let r = json(&delta);
    assert_eq!(r["chain"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert!(!data.join("base/evil").exists());
    assert!(!data.join(&added).exists(), "{added}: not in the chain");
    assert!(data.join(&dropped).is_file(), "{dropped}: in the chain");
    assert!(data.join(&branches).is_file());
    assert!(!data.join("postmaster.pid").exists());
    assert!(!data.join(".pagevault-restore-incomplete").exists());
    // What went was moved aside, then removed while the set was written; what was
    // left then, by a process of its own after the restore.
    wait_removed(&r);
    assert!(!data.join(".pagevault-swept").exists(), "{r}");
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"precious");
    let d = &r["delta"];
    let n = |k: &str| d[k].as_u64().unwrap();
    assert!(n("kept") > 500, "{r}");
    assert!(n("rewritten") >= 3, "{r}");
    assert!(n("created") >= 2, "{dropped} and {branches}: {r}");
    assert!(n("removed") >= 2, "{added} and base/evil: {r}");
    // The relation files (the WAL of the set aside, which a fresh directory needs
    // whole): far less than the cluster written.
    let (total, wal) = file_bytes(&repo, incr["set_id"].as_str().unwrap());
    let written = n("written_bytes");
    assert!(
        written < (total - wal) / 5 + wal,
        "{written} of {total}: {r}"
    );
    assert!(n("compared_bytes") > (total - wal) / 2, "{r}");
    // Chunks no page of which changed (since the full, then since the incr) were found
    // in place by their frames' digests, neither decompressed nor written.
    let held: u64 = (r["chain"].as_array().unwrap().iter())
        .map(|l| l["held_bytes"].as_u64().unwrap())
        .sum();
    assert!(held > (total - wal) / 10, "{r}");

    // A directory that is not a data directory is refused, untouched.
    let other = postgres_dir("other");
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let o = s(&other);
    let e = fails(&["restore", "--repo", &repo, "--to", &o, "--delta"], 1);
    assert!(e.contains("no PG_VERSION"), "{e}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"mine");

    // The delta-restored cluster holds what a fresh restore of the same chain holds.
    let (fresh, _) = restore_repo(&repo, &["--until-name", "delta_point"]);
    check_restored(&fresh, &want, rows);
    check_restored_with(Path::new(&data), &want, rows, amcheck);
}
