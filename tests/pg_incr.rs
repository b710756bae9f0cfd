//! Differential and incremental backups that read only the pages the WAL's block
//! summaries list (issue 21, item 2), against a real PostgreSQL 15 archiving with
//! archive-push; and the LSN scan an incremental falls back to, with the reason, when the
//! summaries do not cover the range.

mod common;

use common::pg::{postgres_dir, push_cmd, Pg};
use common::*;

/// Bytes of the set's files under pg_wal/ (the WAL of the backup, copied whole).
fn wal_bytes(repo: &str, set: &serde_json::Value) -> u64 {
    let f = json(&[
        "files",
        "--repo",
        repo,
        "--set",
        set["set_id"].as_str().unwrap(),
    ]);
    f["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["path"].as_str().unwrap().starts_with("pg_wal/"))
        .map(|e| e["size"].as_u64().unwrap())
        .sum()
}

fn backup(url: &str, repo: &str, ty: &str) -> serde_json::Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

#[test]
fn an_incremental_reads_the_changed_pages_only() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.hot_table(60000, 200);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let full = backup(&url, &repo, "full");
    let blocks: u64 = pg
        .sql("SELECT pg_relation_size('t') / 8192")
        .parse()
        .unwrap();
    assert!(blocks > 3000, "{blocks}");

    // Rows of every 50th block: 2% of the table's pages.
    pg.sql("UPDATE t SET v = repeat('y', 200) WHERE (ctid::text::point)[0]::bigint % 50 = 0");
    let incr = backup(&url, &repo, "incr");
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    // The start's segment is read from the server's pg_wal, not waited for.
    assert_eq!(incr["change_map"]["live"], true, "{incr}");
    let listed = incr["change_map"]["listed_pages"].as_u64().unwrap();
    assert!(
        listed >= blocks / 50 && listed < blocks / 10,
        "{listed} pages listed for {blocks} blocks changed 2%: {incr}"
    );
    // Beside the WAL of the backup, which every set holds whole.
    let (read, full_read) = (
        incr["read_bytes"].as_u64().unwrap() - wal_bytes(&repo, &incr),
        full["read_bytes"].as_u64().unwrap() - wal_bytes(&repo, &full),
    );
    assert!(
        read < full_read / 5,
        "the incr read {read} bytes, the full {full_read}"
    );
    let (raw, all_read) = (
        incr["raw_bytes"].as_u64().unwrap(),
        incr["read_bytes"].as_u64().unwrap(),
    );
    assert!(raw <= all_read + (1 << 20), "raw {raw}, read {all_read}");
    let hist = json(&["history", "--repo", &repo]);
    let last = hist["sets"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["backup_type"], "incr");
    assert_eq!(last["base_set"], full["set_id"]);
    assert_eq!(last["read_bytes"], incr["read_bytes"]);

    // The next incremental is based on the previous one, and reads almost nothing.
    let incr2 = backup(&url, &repo, "incr");
    let hist = json(&["history", "--repo", &repo]);
    let last = hist["sets"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["base_set"], incr["set_id"]);
    assert!(
        incr2["change_map"]["listed_pages"].as_u64().unwrap() < listed / 2,
        "{incr2}"
    );

    // A differential goes back to the full: it lists at least what the first incr did.
    let diff = backup(&url, &repo, "diff");
    assert_eq!(diff["change_map"]["method"], "summaries", "{diff}");
    assert!(
        diff["change_map"]["listed_pages"].as_u64().unwrap() >= listed,
        "{diff}"
    );
}

#[test]
fn without_summaries_an_incremental_reads_every_page_and_says_why() {
    let repo = s(&postgres_dir("repo").join("repo"));
    // WAL archived by something else: no block summaries in the repository.
    let elsewhere = postgres_dir("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let copy = format!("cp %p {}/%f", s(&elsewhere));
    let pg = Pg::start(true, Some(&copy));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 20000) g");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let full = json(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--archive-timeout",
        "5",
    ]);
    pg.sql("UPDATE t SET v = 'z' WHERE id <= 100");
    let incr = json(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--type",
        "incr",
        "--archive-timeout",
        "5",
    ]);
    assert_eq!(incr["change_map"]["method"], "lsn_scan", "{incr}");
    let reason = incr["change_map"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("was not archived with its block summary"),
        "{reason}"
    );
    // Every page of the base's relation files was read.
    assert!(
        incr["read_bytes"].as_u64().unwrap() * 10 >= full["read_bytes"].as_u64().unwrap() * 9,
        "{incr}"
    );
}
