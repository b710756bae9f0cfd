//! `pagevault estimate` (issue 21): changed blocks since the newest full and the newest
//! set, from the block summaries archive-push wrote, against what PostgreSQL says moved.

mod common;

use common::pg::{postgres_dir, push_cmd, Pg};
use common::*;

#[test]
fn estimate_counts_the_blocks_the_wal_changed() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    // About 1,000 blocks of 8 KiB.
    pg.hot_table(30000, 100);
    pg.sql("CHECKPOINT");
    pg.switch_and_wait();
    let e = fails(&["estimate", "--repo", &repo], 1);
    assert!(e.contains("holds no full PostgreSQL set"), "{e}");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &repo]);

    // Rows of every 10th block change: about 10% of the table's blocks.
    let blocks: u64 = pg
        .sql("SELECT pg_relation_size('t') / 8192")
        .parse()
        .unwrap();
    pg.sql("UPDATE t SET v = repeat('y', 100) WHERE (ctid::text::point)[0]::bigint % 10 = 0");
    pg.switch_and_wait();
    let j = json(&["estimate", "--repo", &repo]);
    let since = &j["since_full"];
    assert_eq!(since["complete"], true, "{j}");
    let db: u64 = pg
        .sql("SELECT oid FROM pg_database WHERE datname = current_database()")
        .parse()
        .unwrap();
    let d = since["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["database"] == db)
        .unwrap_or_else(|| panic!("no database {db} in {j}"));
    // Issue 53, item 8: databases are named, not only numbered.
    let name = pg.sql("SELECT current_database()");
    assert_eq!(d["name"], name.as_str(), "{j}");
    let changed = d["changed_blocks"].as_u64().unwrap();
    // The updated heap blocks, their index leaf pages, the visibility map page; never
    // the whole table.
    assert!(
        changed >= blocks / 10 && changed <= blocks / 10 * 2 + 20,
        "changed {changed} of {blocks} blocks: {j}"
    );
    assert!(d["total_blocks"].as_u64().unwrap() >= blocks, "{j}");
    assert!(
        j["since_newest"].is_null(),
        "the newest set is the full: {j}"
    );

    // After a second full, nothing has changed since it yet.
    ok(&["backup", "--source", &url, "--repo", &repo]);
    // A record, so that the switch ends a segment.
    pg.sql("CHECKPOINT");
    pg.switch_and_wait();
    let j = json(&["estimate", "--repo", &repo]);
    let d = j["since_full"]["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["database"] == db)
        .cloned()
        .unwrap();
    assert!(
        d["changed_blocks"].as_u64().unwrap() < blocks / 20,
        "little changes since the second full: {j}"
    );
    let text = ok(&["estimate", "--repo", &repo]);
    assert!(text.contains("since the newest full"), "{text}");
    assert!(text.contains(&format!("database {name} ({db})")), "{text}");
    assert!(text.contains("shared catalogs"), "{text}");
}
