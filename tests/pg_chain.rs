//! Chains restored in one pass (issue 21, item 3), against a real PostgreSQL 15 that
//! archives into the repository with archive-push: a full and a differential, and a
//! full, a differential and incrementals taken under pgbench load, restored to the
//! latest and to an LSN inside the chain; each restored cluster starts, holds the
//! source's rows and passes pg_checksums --check.

mod common;

use common::pg::{archiving_pgbench, check_restored, postgres_dir, restore_repo, Pg};
use common::*;
use serde_json::Value;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

/// Rows and the sum of a column of each pgbench table that changes.
fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT count(*) || '/' || coalesce(sum(delta), 0) FROM pgbench_history)",
    )
}

/// Bytes of the regular files of set `id`.
fn file_bytes(repo: &str, id: &str) -> u64 {
    let f = json(&["files", "--repo", repo, "--set", id]);
    (f["files"].as_array().unwrap().iter())
        .filter(|e| e["kind"] == "file")
        .map(|e| e["size"].as_u64().unwrap())
        .sum()
}

/// The chain the restore reports: set ids and types, oldest first.
fn chain_of(r: &Value) -> Vec<(String, String)> {
    (r["chain"].as_array().unwrap().iter())
        .map(|l| {
            (
                l["set_id"].as_str().unwrap().to_string(),
                l["backup_type"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_full_and_a_differential_restore_in_one_pass() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 5);
    let full = backup(&url, &repo, "full");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid % 100 = 0");
    let diff = backup(&url, &repo, "diff");
    pg.switch_and_wait();
    let want = rows(&pg);

    let (target, r) = restore_repo(&repo, &[]);
    let ids = [&full, &diff].map(|j| j["set_id"].as_str().unwrap().to_string());
    assert_eq!(
        chain_of(&r),
        [
            (ids[0].clone(), "full".into()),
            (ids[1].clone(), "diff".into())
        ]
    );
    let (f, d) = (&r["chain"][0], &r["chain"][1]);
    // The diff's pages were written once, from the diff: the full's copies skipped.
    assert_eq!(d["skipped_pages"], 0, "{r}");
    let skipped = f["skipped_pages"].as_u64().unwrap();
    assert!(skipped >= 500, "{r}");
    // Each page of the full's frames was written or skipped, not both.
    let (fw, fr) = (
        f["written_bytes"].as_u64().unwrap(),
        f["raw_bytes"].as_u64().unwrap(),
    );
    assert!(fw < fr && fr <= fw + skipped * 8192, "{r}");
    // Every byte of the restored files written at most once.
    let written: u64 = (r["chain"].as_array().unwrap().iter())
        .map(|l| l["written_bytes"].as_u64().unwrap())
        .sum();
    assert!(written <= file_bytes(&repo, &ids[1]), "{r}");
    assert_eq!(r["set"], ids[0].as_str());
    check_restored(&target, &want, rows);
}

#[test]
fn a_chain_of_incrementals_under_load_restores_to_the_latest_and_to_an_lsn() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 5);
    let load = |secs: u32| common::pg::pgbench_load(&pg, secs, 300);
    let mut sets = vec![backup(&url, &repo, "full")];
    let mut at_lsn = None;
    for (i, ty) in ["diff", "incr", "incr", "incr", "incr"].iter().enumerate() {
        let settle = std::time::Duration::from_secs(1);
        sets.push(common::pg::backup_during(load(4), settle, &url, &repo, ty));
        if i == 2 {
            // Quiet: the rows at this LSN are the ones a restore to it must hold.
            at_lsn = Some((pg.sql("SELECT pg_current_wal_insert_lsn()"), rows(&pg)));
        }
    }
    pg.switch_and_wait();
    let want = rows(&pg);
    let ids: Vec<String> = (sets.iter())
        .map(|j| j["set_id"].as_str().unwrap().to_string())
        .collect();
    // Each incremental's frames (sparse files included) verify on their own.
    for id in &ids[2..] {
        let v = json(&["verify", "--repo", &repo, "--set", id]);
        assert_eq!(v["valid"], true, "{v}");
    }

    let (target, r) = restore_repo(&repo, &[]);
    let chain: Vec<String> = chain_of(&r).into_iter().map(|(id, _)| id).collect();
    assert_eq!(chain, ids, "{r}");
    let written: u64 = (r["chain"].as_array().unwrap().iter())
        .map(|l| l["written_bytes"].as_u64().unwrap())
        .sum();
    assert!(written <= file_bytes(&repo, &ids[5]), "{r}");
    assert!(r["chain"][0]["skipped_pages"].as_u64().unwrap() > 0, "{r}");
    check_restored(&target, &want, rows);

    // To an LSN after the fourth set (the second incremental): the chain ends there.
    let (lsn, want) = at_lsn.unwrap();
    let (target, r) = restore_repo(&repo, &["--until-lsn", &lsn]);
    let chain: Vec<String> = chain_of(&r).into_iter().map(|(id, _)| id).collect();
    assert_eq!(chain, ids[..4], "{r}");
    check_restored(&target, &want, rows);

    // --set names a link: the chain ending at it.
    let (target, r) = restore_repo(&repo, &["--set", &ids[3]]);
    let chain: Vec<String> = chain_of(&r).into_iter().map(|(id, _)| id).collect();
    assert_eq!(chain, ids[..4], "{r}");
    let _ = std::fs::remove_dir_all(target.parent().unwrap());

    // A link without its stripes: refused by name before anything is written.
    let dir = std::path::Path::new(&repo).join("sets").join(&ids[3]);
    let stripe = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&stripe).unwrap();
    let target = postgres_dir("broken").join("data");
    let e = fails(&["restore", "--repo", &repo, "--to", &s(&target)], 1);
    assert!(e.contains(&format!("set {} of the chain", ids[3])), "{e}");
    assert!(!target.exists(), "nothing is written");
}
