//! A chain through every kind of change that moves, cuts, creates or drops relation
//! files (issue 21's test matrix), against a real PostgreSQL 15 under pgbench load:
//! a full, a differential and five incrementals between which tables are created,
//! dropped, truncated, rewritten (VACUUM FULL), cut by VACUUM, indexed, moved to
//! another tablespace, unlogged, and a relation past 1 GiB (segment `.1`) is updated
//! and cut; databases are created (FILE_COPY and WAL_LOG) and dropped. The chain
//! restores to the latest point and to an LSN inside it, is clean under pg_amcheck
//! --heapallindexed and pg_checksums, and holds the source's rows; merged, it restores
//! to the same rows; a damaged block summary is caught and the next incremental reads
//! every page instead, and still restores.

mod common;

use common::pg::{archiving_pgbench, check_restored_with, postgres_dir, restore_repo, Pg};
use common::*;
use serde_json::Value;

/// Every table the steps touch, by name; a table that does not exist (yet) counts as
/// `-`. Rows are hashed whole, so a changed value shows.
const TABLES: &str = "pgbench_accounts pgbench_branches pgbench_tellers pgbench_history \
                      big doomed cut packed tail moved grown late";

fn rows(pg: &Pg) -> String {
    let tables: Vec<String> = TABLES
        .split_whitespace()
        .map(|t| format!("'{t}'"))
        .collect();
    let main = pg.sql(&format!(
        "SELECT string_agg(n(t), ' ' ORDER BY t) || ' dbs:' || \
         (SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE datname LIKE 'd\\_%') \
         FROM unnest(ARRAY[{}]) t",
        tables.join(",")
    ));
    let has_wal_db = pg.sql("SELECT count(*) FROM pg_database WHERE datname = 'd_wal'") == "1";
    let other = if has_wal_db {
        pg.sql_db(
            "d_wal",
            "SELECT count(*) || '/' || sum(hashtext(w::text)) FROM w",
        )
    } else {
        "-".into()
    };
    format!("{main} d_wal.w:{other}")
}

/// A row count and hash per table, or `-` when it does not exist.
const COUNT_FN: &str = r#"
CREATE FUNCTION n(t text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
  IF to_regclass(t) IS NULL THEN RETURN t || ':-'; END IF;
  EXECUTE format('SELECT count(*) || ''/'' || coalesce(sum(hashtext(x::text)), 0) FROM %I x', t) INTO r;
  RETURN t || ':' || r;
END $$"#;

fn backup(url: &str, repo: &str, ty: &str) -> Value {
    json(&["backup", "--source", url, "--repo", repo, "--type", ty])
}

fn id(j: &Value) -> String {
    j["set_id"].as_str().unwrap().to_string()
}

fn chain_of(r: &Value) -> Vec<String> {
    (r["chain"].as_array().unwrap().iter())
        .map(|l| l["set_id"].as_str().unwrap().to_string())
        .collect()
}

/// Restores the repository with the tablespace relocated into a new directory, starts
/// the copy and checks rows, the unlogged table (there and empty), pg_amcheck and
/// pg_checksums; returns restore's JSON.
fn restore_and_check(repo: &str, ts_oid: &str, extra: &[&str], want: &str) -> Value {
    let ts = postgres_dir("ts-restored");
    let map = format!("{ts_oid}={}", s(&ts));
    let mut a = vec!["--tablespace-map", &map];
    a.extend_from_slice(extra);
    let (target, r) = restore_repo(repo, &a);
    check_restored_with(&target, want, rows, |pg| {
        let u = pg.sql("SELECT coalesce((SELECT count(*) FROM u)::text, 'none') FROM (SELECT to_regclass('u') IS NOT NULL AS has) x WHERE has");
        let created = pg.sql("SELECT to_regclass('u') IS NOT NULL");
        if created == "t" {
            assert_eq!(u, "0", "an unlogged table comes back empty");
        }
        // pg_amcheck ran in check_restored_with, with pg_visibility and index-only counts.
    });
    let _ = std::fs::remove_dir_all(&ts);
    r
}

#[test]
fn a_chain_through_every_kind_of_relation_change_restores_clean() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 5);
    let ts_dir = postgres_dir("ts");
    pg.sql(&format!("CREATE TABLESPACE ts LOCATION '{}'", s(&ts_dir)));
    let ts_oid = pg.sql("SELECT oid FROM pg_tablespace WHERE spcname = 'ts'");
    pg.sql(COUNT_FN);
    // One row per page (fillfactor 10, 700-byte rows): 140,000 pages, past the first
    // 1 GiB segment (131,072 pages).
    pg.sql("CREATE TABLE big (id int, v text) WITH (fillfactor = 10, autovacuum_enabled = off)");
    pg.sql("INSERT INTO big SELECT g, repeat(md5(g::text), 22) FROM generate_series(1, 140000) g");
    for t in ["doomed", "cut", "packed", "tail", "moved"] {
        pg.sql(&format!(
            "CREATE TABLE {t} (id int, v text) WITH (autovacuum_enabled = off); \
             INSERT INTO {t} SELECT g, md5(g::text) FROM generate_series(1, 20000) g"
        ));
    }
    pg.sql("CHECKPOINT");
    let seg1 = pg.sql("SELECT pg_relation_filepath('big')") + ".1";
    assert!(pg.data.join(&seg1).exists(), "big has a second segment");

    let load = || common::pg::pgbench_load(&pg, 3, 200);
    let steps: [(&str, &str); 6] = [
        ("full", ""),
        (
            "diff",
            "CREATE TABLE grown AS SELECT g AS id, md5(g::text) AS v FROM generate_series(1, 5000) g; \
             CREATE UNLOGGED TABLE u AS SELECT g AS id FROM generate_series(1, 1000) g; \
             DROP TABLE doomed; TRUNCATE cut; INSERT INTO cut VALUES (1, 'after truncate')",
        ),
        (
            "incr",
            "UPDATE packed SET v = 'p' || v WHERE id % 3 = 0; VACUUM FULL packed; \
             CREATE INDEX packed_v ON packed (v)",
        ),
        (
            "incr",
            "DELETE FROM tail WHERE id > 500; VACUUM tail; \
             UPDATE big SET v = 'second segment ' || id WHERE id > 132000 AND id % 100 = 0",
        ),
        (
            "incr",
            "ALTER TABLE moved SET TABLESPACE ts; \
             CREATE DATABASE d_copy STRATEGY FILE_COPY; CREATE DATABASE d_wal STRATEGY WAL_LOG",
        ),
        (
            "incr",
            "DROP DATABASE d_copy; DELETE FROM big WHERE id > 135000; VACUUM big; \
             UPDATE grown SET v = 'g' WHERE id % 7 = 0",
        ),
    ];
    let mut sets = vec![];
    let mut at_lsn = None;
    for (i, (ty, sql)) in steps.iter().enumerate() {
        let l = load();
        for stmt in sql.split("; ").filter(|x| !x.is_empty()) {
            pg.sql(stmt);
        }
        if sql.contains("d_wal") {
            pg.sql_db(
                "d_wal",
                "CREATE TABLE w AS SELECT g AS id FROM generate_series(1, 3000) g",
            );
        }
        let settle = std::time::Duration::from_millis(500);
        sets.push(common::pg::backup_during(l, settle, &url, &repo, ty));
        if i == 4 {
            at_lsn = Some((pg.sql("SELECT pg_current_wal_insert_lsn()"), rows(&pg)));
        }
    }
    // The last step: a table created in the tablespace, more load, then an incremental.
    let l = load();
    pg.sql("CREATE TABLE late TABLESPACE ts AS SELECT g AS id FROM generate_series(1, 2000) g");
    pg.sql_db(
        "d_wal",
        "INSERT INTO w SELECT g FROM generate_series(3001, 4000) g",
    );
    let settle = std::time::Duration::ZERO;
    sets.push(common::pg::backup_during(l, settle, &url, &repo, "incr"));
    pg.switch_and_wait();
    let want = rows(&pg);
    assert!(want.contains("dbs:d_wal d_wal.w:4000/"), "{want}");
    let ids: Vec<String> = sets.iter().map(id).collect();
    assert_eq!(ids.len(), 7);

    // The latest point: the whole chain, each link once.
    let r = restore_and_check(&repo, &ts_oid, &[], &want);
    assert_eq!(chain_of(&r), ids, "{r}");

    // An LSN after the fifth set (the third incremental): the chain ends there.
    let (lsn, want_then) = at_lsn.unwrap();
    assert!(want_then.contains("dbs:d_copy,d_wal"), "{want_then}");
    let r = restore_and_check(&repo, &ts_oid, &["--until-lsn", &lsn], &want_then);
    assert_eq!(chain_of(&r), ids[..5], "{r}");

    // Merged into one full: the same rows.
    let m = json(&["merge", "--repo", &repo]);
    let merged = id(&m);
    let r = restore_and_check(&repo, &ts_oid, &[], &want);
    assert_eq!(chain_of(&r), std::slice::from_ref(&merged), "{r}");

    // A damaged summary: the next incremental says so and reads every page instead.
    pg.sql("UPDATE big SET v = 'after damage' WHERE id % 5000 = 0");
    let seg = pg.switch_and_wait();
    let sum = std::path::Path::new(&repo).join(format!("wal/{}/{seg}.sum", &seg[..8]));
    let mut bytes = std::fs::read(&sum).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&sum, &bytes).unwrap();
    let j = backup(&url, &repo, "incr");
    assert_eq!(j["change_map"]["method"], "lsn_scan", "{j}");
    let reason = j["change_map"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(&seg),
        "the reason names the segment: {reason}"
    );
    pg.switch_and_wait();
    let want = rows(&pg);
    let r = restore_and_check(&repo, &ts_oid, &[], &want);
    assert_eq!(chain_of(&r), [merged, id(&j)], "{r}");
    let _ = std::fs::remove_dir_all(&ts_dir);
    drop(pg);
    let _ = std::fs::remove_dir_all(std::path::Path::new(&repo).parent().unwrap());
}

/// A failover between two sets: incrementals taken on timeline 1, the primary lost, a
/// copy promoted onto timeline 2 archiving into the same repository; the first
/// incremental there says why it reads every page (its base is on timeline 1), the next
/// one uses the summaries again, and the chain across both timelines restores.
#[test]
fn a_chain_across_a_promotion_restores() {
    let repo = s(&postgres_dir("repo").join("repo"));
    let (mut primary, url) = archiving_pgbench(&repo, 3);
    let pgbench_rows = |pg: &Pg| {
        pg.sql("SELECT count(*) || '/' || sum(abalance) || ' ' || (SELECT count(*) FROM pgbench_history) FROM pgbench_accounts")
    };
    let mut ids = vec![id(&backup(&url, &repo, "full"))];
    primary.pgbench_ok(&["-t", "300", "-c", "2", "-n"]);
    let j = backup(&url, &repo, "incr");
    assert_eq!(j["change_map"]["method"], "summaries", "{j}");
    ids.push(id(&j));
    primary.pgbench_ok(&["-t", "200", "-c", "2", "-n"]);
    primary.switch_and_wait();
    let before = pgbench_rows(&primary);
    primary.stop();

    let (b_data, _) = restore_repo(&repo, &[]);
    let b = Pg::adopt_archiving(&b_data, &common::pg::push_cmd(&repo));
    b.wait_promoted();
    assert_eq!(pgbench_rows(&b), before);
    let tli = b.sql("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)");
    assert_eq!(tli, "00000002", "{}", b.log());
    let b_url = format!("{}?pgdata={}", b.url(), s(&b.data));
    // The first incremental there reads every page (its base is on timeline 1).
    for method in ["lsn_scan", "summaries"] {
        b.pgbench_ok(&["-t", "200", "-c", "2", "-n"]);
        let j = backup(&b_url, &repo, "incr");
        assert_eq!(j["change_map"]["method"], method, "{j}");
        if method == "lsn_scan" {
            let reason = j["change_map"]["reason"].as_str().unwrap();
            assert!(reason.contains("timeline"), "{reason}");
        }
        ids.push(id(&j));
    }
    b.pgbench_ok(&["-t", "100", "-c", "2", "-n"]);
    b.switch_and_wait();
    let want = pgbench_rows(&b);

    let (target, r) = restore_repo(&repo, &[]);
    assert_eq!(chain_of(&r), ids, "{r}");
    check_restored_with(&target, &want, pgbench_rows, |_| {});
    drop(b);
    let _ = std::fs::remove_dir_all(std::path::Path::new(&repo).parent().unwrap());
}
