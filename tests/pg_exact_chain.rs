//! Exact chains (issue 51): an incremental, a differential, a merged full and a delta
//! restore hold visibility maps equal to what the source's WAL made of them. On 14-16 a
//! heap update clears map bits with no block reference to the map page; a chain that
//! kept the base's map answered index-only scans with deleted and old rows. Each restore
//! is checked by PostgreSQL's own checkers (pg_amcheck, pg_visibility) and by index-only
//! against sequential counts; a repository whose summaries or sets were made by the old
//! rules reads visibility maps whole and names the sets that may be stale.

mod common;

use common::pg::{
    bin_dir, check_database, check_restored, postgres_dir, push_cmd, restore_repo, Pg, PgOptions,
};
use common::*;
use serde_json::Value;
use std::path::Path;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

/// pgbench at scale 5 on PostgreSQL `major` with checksums, archiving into `repo`.
fn pgbench_on(major: u32, repo: &str) -> (Pg, String) {
    let pg = Pg::start_with(&PgOptions {
        major,
        checksums: true,
        archive: Some(push_cmd(repo)),
        // No vacuum of its own between the sets: the map changes only as the updates do.
        extra_conf: "autovacuum = off\n".into(),
        ..PgOptions::default()
    });
    pg.pgbench_init(5);
    pg.sql("VACUUM (FREEZE) pgbench_accounts");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    (pg, url)
}

/// The reproduction: every 50th account updated after the full.
fn update_fiftieth(pg: &Pg, by: u32) {
    pg.sql(&format!(
        "UPDATE pgbench_accounts SET abalance = abalance + {by} WHERE aid % 50 = 0"
    ));
}

/// Rows as an index-only scan counts them, and as a sequential scan sums them.
fn rows(pg: &Pg) -> String {
    pg.sql(
        "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = off; \
         SELECT count(*) || '/' || (SELECT sum(abalance) FROM pgbench_accounts) FROM pgbench_accounts",
    )
}

/// Restores the newest chain of `repo` (with `extra`), starts it with PostgreSQL
/// `major`, and checks rows and every checker.
fn restored_right(repo: &str, major: u32, want: &str, extra: &[&str]) -> Value {
    let (target, r) = restore_repo(repo, extra);
    if major == 15 {
        check_restored(&target, want, rows);
    } else {
        let mut c = Pg::adopt_with(&target, major);
        c.wait_promoted();
        assert_eq!(rows(&c), want, "{}", c.log());
        check_database(&c);
        c.stop();
        drop(c);
        let _ = std::fs::remove_dir_all(target.parent().unwrap());
    }
    r
}

fn incr_and_diff_on(major: u32) {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = pgbench_on(major, &repo);
    backup(&url, &repo, "full");
    update_fiftieth(&pg, 1);
    let incr = backup(&url, &repo, "incr");
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    assert!(incr["change_map"].get("vm_read_whole").is_none(), "{incr}");
    pg.switch_and_wait();
    let want = rows(&pg);
    assert!(want.starts_with("500000/"), "{want}");
    restored_right(&repo, major, &want, &[]);

    // Two differentials after the full: the second holds every map page changed since.
    update_fiftieth(&pg, 2);
    backup(&url, &repo, "diff");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid % 70 = 0");
    pg.sql("DELETE FROM pgbench_history");
    let diff = backup(&url, &repo, "diff");
    assert_eq!(diff["change_map"]["method"], "summaries", "{diff}");
    pg.switch_and_wait();
    let want = rows(&pg);
    restored_right(&repo, major, &want, &[]);
    let hist = json(&["history", "--repo", &repo]);
    assert!(
        (hist["sets"].as_array().unwrap().iter())
            .all(|s| s["visibility_map_may_be_stale"] == false && s["change_rules"] == 2),
        "{hist}"
    );
}

#[test]
fn an_incremental_and_differentials_restore_the_visibility_map_on_15() {
    incr_and_diff_on(15);
}

#[test]
fn an_incremental_and_differentials_restore_the_visibility_map_on_14() {
    incr_and_diff_on(14);
}

#[test]
fn an_incremental_and_differentials_restore_the_visibility_map_on_17() {
    incr_and_diff_on(17);
}

#[test]
fn a_merged_full_and_a_delta_restore_hold_the_source_map() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = pgbench_on(15, &repo);
    backup(&url, &repo, "full");
    // An old copy for the delta restore: the full alone.
    let (old, _) = restore_repo(&repo, &[]);
    update_fiftieth(&pg, 1);
    backup(&url, &repo, "incr");
    pg.sql("DELETE FROM pgbench_accounts WHERE aid % 97 = 0");
    backup(&url, &repo, "incr");
    pg.switch_and_wait();
    let want = rows(&pg);

    // The delta restore over the full's copy writes what differs, the map included.
    let to = s(&old);
    let d = json(&[
        "restore", "--repo", &repo, "--to", &to, "--owner", "postgres", "--delta",
    ]);
    assert!(d["delta"].is_object(), "{d}");
    check_restored(&old, &want, rows);

    let m = json(&["merge", "--repo", &repo]);
    let merged = m["set_id"].as_str().unwrap().to_string();
    let hist = json(&["history", "--repo", &repo]);
    let rec = (hist["sets"].as_array().unwrap().iter())
        .find(|s| s["set_id"] == merged.as_str())
        .unwrap()
        .clone();
    assert_eq!(rec["change_rules"], 2, "{rec}");
    assert_eq!(rec["visibility_map_may_be_stale"], false, "{rec}");
    restored_right(&repo, 15, &want, &["--set", &merged]);
}

/// The stored summaries of `repo` labelled as the old rules labelled them (rules 1).
fn age_summaries(repo: &str) -> usize {
    common::summaries::rewrite(Path::new(repo), |s| {
        s.rules = 1;
        true
    })
}

#[test]
fn summaries_and_sets_of_the_old_rules_read_maps_whole_and_are_named() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = pgbench_on(15, &repo);
    let full = backup(&url, &repo, "full");
    update_fiftieth(&pg, 1);
    pg.switch_and_wait();
    assert!(age_summaries(&repo) > 0);
    // Across a summary of rules 1 the map forks are read whole, and the report says why.
    let incr = backup(&url, &repo, "incr");
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    let why = incr["change_map"]["vm_read_whole"].as_str().unwrap();
    assert!(why.contains("rules 1"), "{why}");
    let vm: Vec<Value> = json(&[
        "files",
        "--repo",
        &repo,
        "--set",
        incr["set_id"].as_str().unwrap(),
    ])["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"].as_str().unwrap().ends_with("_vm"))
        .cloned()
        .collect();
    assert!(
        !vm.is_empty() && vm.iter().all(|f| f["sparse"] != true),
        "{vm:?}"
    );
    pg.switch_and_wait();
    let want = rows(&pg);
    restored_right(&repo, 15, &want, &[]);
    // verify --repo counts the old summaries, and finds none damaged.
    let v = json(&["verify", "--repo", &repo]);
    assert_eq!(v["valid"], true, "{v}");
    assert!(v["summaries"]["old_rules"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["stale_visibility_map"], false, "{v}");

    // A set recorded by the old code: its record has no change rules. It and every set
    // built on it are named by history, status and verify.
    let id = incr["set_id"].as_str().unwrap();
    let rec = Path::new(&repo).join("catalog").join(format!("{id}.json"));
    let text = std::fs::read_to_string(&rec).unwrap();
    let mut j: Value = serde_json::from_str(&text).unwrap();
    j.as_object_mut().unwrap().remove("change_rules");
    std::fs::write(&rec, serde_json::to_string(&j).unwrap()).unwrap();
    update_fiftieth(&pg, 3);
    let next = backup(&url, &repo, "incr");
    let next_id = next["set_id"].as_str().unwrap();
    let hist = json(&["history", "--repo", &repo]);
    let stale: Vec<&str> = (hist["sets"].as_array().unwrap().iter())
        .filter(|s| s["visibility_map_may_be_stale"] == true)
        .map(|s| s["set_id"].as_str().unwrap())
        .collect();
    assert_eq!(stale, [id, next_id], "{hist}");
    let w = hist["warnings"].to_string();
    assert!(
        w.contains("visibility map may be stale: take a new full backup"),
        "{w}"
    );
    assert!(!w.contains(full["set_id"].as_str().unwrap()), "{w}");
    let st = json(&["status", "--repo", &repo]);
    assert_eq!(
        st["stale_vm_sets"],
        serde_json::json!([id, next_id]),
        "{st}"
    );
    let prom = ok(&["status", "--repo", &repo, "--prometheus"]);
    assert!(
        prom.lines()
            .any(|l| l.starts_with("pagevault_stale_visibility_map_sets{") && l.ends_with("} 2")),
        "{prom}"
    );
    // The Nagios check warns while such a set is kept, though the backups are fresh.
    let e = fails(&["status", "--repo", &repo, "--warn-age", "1w"], 1);
    assert!(e.contains("WARNING") && e.contains("may be stale"), "{e}");
    let v = json(&["verify", "--repo", &repo]);
    assert_eq!(v["stale_visibility_map"], true, "{v}");
    let text = ok(&["verify", "--repo", &repo]);
    assert!(text.contains("visibility map may be stale"), "{text}");
    // The restore of that chain says so once.
    let (target, r) = restore_repo(&repo, &[]);
    let warnings = r["warnings"].to_string();
    assert_eq!(warnings.matches("may be stale").count(), 1, "{warnings}");
    let _ = std::fs::remove_dir_all(target.parent().unwrap());

    // A damaged summary is named by verify, which fails.
    let sum = std::fs::read_dir(Path::new(&repo).join("wal").join("00000001"))
        .unwrap()
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sum"))
        .max()
        .unwrap();
    let mut b = std::fs::read(&sum).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0x55;
    std::fs::write(&sum, b).unwrap();
    let out = fails(&["verify", "--repo", &repo], 1);
    let name = sum.file_stem().unwrap().to_string_lossy().to_string();
    assert!(out.contains(&name) && out.contains("refused"), "{out}");
    let _ = bin_dir(15);
}
