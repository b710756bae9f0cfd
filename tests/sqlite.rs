//! The SQLite source under a concurrent writer, in rollback-journal and WAL mode:
//! the restored copy passes integrity_check and holds a committed prefix of the rows.

mod common;
use common::*;
use rusqlite::Connection;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn live_backup(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    {
        let c = Connection::open(&db).unwrap();
        c.pragma_update(None, "journal_mode", mode).unwrap();
        c.execute_batch(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL); CREATE INDEX tv ON t(v);",
        )
        .unwrap();
        let tx = c.unchecked_transaction().unwrap();
        for i in 1..=40_000i64 {
            tx.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                rusqlite::params![i, format!("row {i} {}", "x".repeat(200))],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicI64::new(40_000));
    let writer = {
        let (db, stop, committed) = (db.clone(), stop.clone(), committed.clone());
        std::thread::spawn(move || {
            let c = Connection::open(&db).unwrap();
            c.busy_timeout(Duration::from_secs(30)).unwrap();
            let mut i = 40_000i64;
            while !stop.load(Ordering::Relaxed) {
                // Small transactions, each committed before the next begins.
                let tx = c.unchecked_transaction().unwrap();
                for _ in 0..50 {
                    i += 1;
                    tx.execute(
                        "INSERT INTO t VALUES (?1, ?2)",
                        rusqlite::params![i, format!("row {i} {}", "y".repeat(200))],
                    )
                    .unwrap();
                }
                tx.commit().unwrap();
                committed.store(i, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let before = committed.load(Ordering::Relaxed);
    let st = s(&dir.path().join("db.pv"));
    let b = json(&[
        "backup",
        "--source",
        &format!("sqlite:{}", s(&db)),
        "--to",
        &st,
        "--compress",
        "zstd",
    ]);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let after = committed.load(Ordering::Relaxed);
    assert!(
        after > before,
        "the writer made no progress during the backup"
    );
    assert_eq!(b["source"]["kind"], "sqlite");

    let out = dir.path().join("out");
    ok(&["restore", "--from", &st, "--to", &s(&out)]);
    let c = Connection::open(out.join("live.db")).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let (n, max): (i64, i64) = c
        .query_row("SELECT count(*), max(id) FROM t", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(n, max, "rows must be a prefix 1..N without gaps");
    assert!(
        n >= before,
        "restored {n} rows, but {before} were committed before the backup began"
    );
    assert!(
        n <= after,
        "restored {n} rows, more than were ever committed ({after})"
    );
    assert_eq!(n % 50, 0, "a partial transaction was restored ({n} rows)");
    // No spool file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("spool"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn wal_mode_under_a_writer() {
    live_backup("wal");
}

#[test]
fn rollback_journal_mode_under_a_writer() {
    live_backup("delete");
}

#[test]
fn not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.db");
    std::fs::write(&f, vec![7u8; 5000]).unwrap();
    let e = backup_fails(&format!("sqlite:{}", s(&f)), "NUL", &[], 1);
    assert!(e.contains("is not a SQLite database"), "{e}");
}
