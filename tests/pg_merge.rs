//! `pagevault merge` (issue 21, item 4), against a real PostgreSQL 15 archiving into the
//! repository: a chain of a full, incrementals and a differential (with a TRUNCATE and
//! a table created and dropped between them) becomes one full set that restores alone
//! to the same rows, bases the next incremental, and leaves the old chain to expire; a
//! chain with a missing stripe is refused and leaves nothing behind.

mod common;

use common::pg::{archiving_pgbench, check_restored, postgres_dir, restore_repo, Pg};
use common::*;
use serde_json::Value;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

fn id(j: &Value) -> String {
    j["set_id"].as_str().unwrap().to_string()
}

fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT count(*) FROM pgbench_history) || ' ' || \
         (SELECT count(*) FROM pg_class WHERE relname = 'gone')",
    )
}

/// The ids of the chain a restore used, oldest first.
fn chain_of(r: &Value) -> Vec<String> {
    (r["chain"].as_array().unwrap().iter())
        .map(|l| l["set_id"].as_str().unwrap().to_string())
        .collect()
}

fn history(repo: &str) -> Vec<Value> {
    json(&["history", "--repo", repo])["sets"]
        .as_array()
        .unwrap()
        .clone()
}

/// Names in the repository's top directory and in sets/.
fn repo_listing(repo: &str) -> Vec<String> {
    let root = std::path::Path::new(repo);
    let mut names: Vec<String> = [root.to_path_buf(), root.join("sets")]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every regular file under `dir`, by its path inside it.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let (p, t) = (e.path(), e.file_type().unwrap());
            if t.is_dir() {
                todo.push(p);
            } else if t.is_file() {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_merged_chain_restores_alone_and_bases_the_next_incremental() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 5);
    let mut ids = vec![id(&backup(&url, &repo, "full"))];
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid % 50 = 0");
    ids.push(id(&backup(&url, &repo, "incr")));
    pg.sql("TRUNCATE pgbench_history");
    pg.sql("CREATE TABLE gone(x int); INSERT INTO gone SELECT generate_series(1, 1000)");
    ids.push(id(&backup(&url, &repo, "diff")));
    pg.sql("DROP TABLE gone");
    pg.sql("INSERT INTO pgbench_history(tid, bid, aid, delta) SELECT 1, 1, g, g FROM generate_series(1, 500) g");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid % 70 = 0");
    ids.push(id(&backup(&url, &repo, "incr")));
    pg.switch_and_wait();
    let want = rows(&pg);
    // A time after the chain's end, before the merge.
    let before_merge = pg.sql("SELECT now()::text");
    std::thread::sleep(std::time::Duration::from_millis(1100));

    let m = json(&["merge", "--repo", &repo]);
    assert_eq!(m["command"], "merge");
    let merged = id(&m);
    let names: Vec<String> = (m["merged"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // The differential replaced the first incremental in the chain.
    assert_eq!(names, [&*ids[0], &*ids[2], &*ids[3]], "{m}");
    assert!(m["read_bytes"].as_u64().unwrap() > 0, "{m}");
    // The full's chunks no newer set changed are stored as they were (same codec).
    let kept = m["backup"]["kept_frames"].as_u64().unwrap();
    assert!(kept > 0, "{m}");
    assert!(
        !repo_listing(&repo).iter().any(|n| n.starts_with(".merge-")),
        "the scratch directory is gone"
    );
    let want_merged = want.clone();
    let h = history(&repo);
    let rec = h.iter().find(|s| s["set_id"] == merged.as_str()).unwrap();
    assert_eq!(rec["backup_type"], "full", "{rec}");
    let last = h.iter().find(|s| s["set_id"] == ids[3].as_str()).unwrap();
    assert_eq!(rec["stop_lsn"], last["stop_lsn"], "the chain's end: {rec}");
    assert_eq!(rec["start_lsn"], last["start_lsn"], "{rec}");
    // Its data is of the newest merged set's time, not the merge's.
    assert_eq!(rec["finished"], last["finished"], "{rec}");
    let v = json(&["verify", "--repo", &repo, "--set", &merged]);
    assert_eq!(v["valid"], true, "{v}");

    // Byte for byte what restoring the chain it replaced writes (its sets are still
    // in the repository): every file, grown, shrunk, new or untouched since the full.
    let (merged_copy, _) = restore_repo(&repo, &["--set", &merged]);
    let (chain_copy, r) = restore_repo(&repo, &["--set", &ids[3]]);
    assert_eq!(chain_of(&r), names, "{r}");
    let (a, b) = (tree(&chain_copy), tree(&merged_copy));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    assert!(a.len() > 100, "{} files", a.len());
    for (name, bytes) in &a {
        assert!(
            bytes == &b[name],
            "{name} differs between the chain and the merged set"
        );
    }

    // Restored alone (a chain of one), to the same rows.
    let (target, r) = restore_repo(&repo, &[]);
    assert_eq!(chain_of(&r), std::slice::from_ref(&merged), "{r}");
    check_restored(&target, &want, rows);

    // The next incremental bases on the merged full.
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid % 90 = 0");
    let next = backup(&url, &repo, "incr");
    assert_eq!(next["change_map"]["method"], "summaries", "{next}");
    pg.switch_and_wait();
    let want = rows(&pg);
    let (target, r) = restore_repo(&repo, &[]);
    assert_eq!(chain_of(&r), [merged.clone(), id(&next)], "{r}");
    check_restored(&target, &want, rows);

    // The old chain is an older full's: expire keeping one full removes it.
    let e = json(&["expire", "--repo", &repo, "--keep-full", "1"]);
    let mut expired: Vec<String> = (e["expired"].as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    expired.sort();
    let mut old = ids.clone();
    old.sort();
    assert_eq!(expired, old, "{e}");
    let left: Vec<String> = history(&repo)
        .iter()
        .map(|s| s["set_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, [merged.clone(), id(&next)]);

    // A time between the chain's end and the merge: the merged set, the old chain gone.
    let (target, r) = restore_repo(&repo, &["--until", &before_merge]);
    assert_eq!(chain_of(&r), std::slice::from_ref(&merged), "{r}");
    check_restored(&target, &want_merged, rows);
}

#[test]
fn a_chain_missing_a_stripe_is_refused_and_leaves_nothing() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 2);
    let full = id(&backup(&url, &repo, "full"));
    // A full alone: nothing to merge.
    let e = fails(&["merge", "--repo", &repo], 1);
    assert!(e.contains("nothing after it"), "{e}");
    pg.sql("UPDATE pgbench_accounts SET abalance = 1 WHERE aid % 10 = 0");
    let incr = id(&backup(&url, &repo, "incr"));
    pg.switch_and_wait();
    // An existing --scratch is never reused.
    let taken = postgres_dir("taken");
    let e = fails(&["merge", "--repo", &repo, "--scratch", &s(&taken)], 1);
    assert!(e.contains("must not exist yet"), "{e}");
    assert!(taken.exists());

    let dir = std::path::Path::new(&repo).join("sets").join(&incr);
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        std::fs::remove_file(f.path()).unwrap();
    }
    let before = repo_listing(&repo);
    let e = fails(&["merge", "--repo", &repo], 1);
    assert!(e.contains(&incr), "the missing link is named: {e}");
    assert_eq!(repo_listing(&repo), before, "no scratch, no new set left");
    let mut ids: Vec<String> = std::fs::read_dir(std::path::Path::new(&repo).join("catalog"))
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    ids.sort();
    let mut want = [full, incr];
    want.sort();
    assert_eq!(ids, want, "no new record");
}
