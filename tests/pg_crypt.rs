//! An encrypted PostgreSQL repository (issue 20): archive-push seals every WAL file and
//! its block summary, a full and an incremental (from the sealed summaries) are taken,
//! and the chain restores and recovers through archive-get with the key; the restored
//! cluster starts and holds the source's rows.

mod common;

use common::pg::{check_restored, keys_for_postgres, postgres_dir, push_cmd, restore_repo, Pg};
use common::*;
use std::fs;

fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT count(*) || '/' || coalesce(sum(delta), 0) FROM pgbench_history)",
    )
}

#[test]
fn an_encrypted_repository_backs_up_archives_and_recovers() {
    let dir = postgres_dir("crypt");
    let (key, pg_key) = keys_for_postgres(&dir, b"q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0Vng=\n");
    let repo = s(&dir.join("repo"));
    let pg = Pg::start(
        true,
        Some(&format!("{} --key-file {pg_key}", push_cmd(&repo))),
    );
    pg.pgbench_init(3);
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let full = json(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--key-file",
        &key,
        "--compress",
        "lz4",
    ]);
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid % 50 = 0");
    pg.switch_and_wait();
    let incr = json(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--key-file",
        &key,
        "--type",
        "incr",
    ]);
    // The incremental read the changed blocks from the sealed summaries.
    assert_eq!(
        incr["change_map"]["method"], "summaries",
        "{}",
        incr["change_map"]
    );
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid % 70 = 0");
    pg.switch_and_wait();
    let want = rows(&pg);

    // Every archived file is sealed.
    let mut sealed = 0;
    for t in fs::read_dir(dir.join("repo/wal")).unwrap() {
        let t = t.unwrap().path();
        if !t.is_dir() {
            continue;
        }
        for f in fs::read_dir(&t).unwrap() {
            let b = fs::read(f.unwrap().path()).unwrap();
            assert!(b.starts_with(b"PVWALENC"));
            sealed += 1;
        }
    }
    assert!(sealed >= 4, "{sealed} archived files");
    // Without the key, a restore is one clear error.
    let e = fails(
        &["restore", "--repo", &repo, "--to", &s(&dir.join("nokey"))],
        1,
    );
    assert!(
        e.contains("is encrypted") && e.contains("--key-file"),
        "{e}"
    );

    let (target, r) = restore_repo(&repo, &["--key-file", &pg_key]);
    let ids: Vec<&str> = (r["chain"].as_array().unwrap().iter())
        .map(|l| l["set_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            full["set_id"].as_str().unwrap(),
            incr["set_id"].as_str().unwrap()
        ]
    );
    let conf = fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(conf.contains("--key-file"), "{conf}");
    check_restored(&target, &want, rows);

    // A merge needs the key, and its new full set is encrypted and restores alone.
    let e = fails(&["merge", "--repo", &repo], 1);
    assert!(e.contains("is encrypted"), "{e}");
    let m = json(&["merge", "--repo", &repo, "--key-file", &key]);
    let merged = m["set_id"].as_str().unwrap().to_string();
    // Unchanged chunks are opened, checked and sealed again under the new set's key.
    assert!(m["backup"]["kept_frames"].as_u64().unwrap() > 0, "{m}");
    let h = json(&[
        "header",
        "--repo",
        &repo,
        "--set",
        &merged,
        "--key-file",
        &key,
    ]);
    assert_eq!(h["sets"][0]["format_version"], 3, "{h}");
    let (target, r) = restore_repo(&repo, &["--key-file", &pg_key]);
    assert_eq!(r["chain"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["chain"][0]["set_id"], merged.as_str());
    check_restored(&target, &want, rows);
    drop(pg);
    let _ = fs::remove_dir_all(&dir);
}
