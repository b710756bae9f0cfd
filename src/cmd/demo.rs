//! `pagevault demo`: the main job on the embedded default, a sample SQLite database.

use super::backup::Show;
use super::restore::{print_restore, print_verify, shower};
use crate::engine::stats::Progress;
use crate::ops::backup::{self as ops, BackupOptions};
use crate::ops::restore::{restore, RestoreOptions};
use crate::ops::verify::{verify, ReadOptions, VerifyOptions};
use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use std::path::Path;
use std::sync::Arc;

const WORDS: &[&str] = &[
    "invoice",
    "customer",
    "order",
    "shipped",
    "pending",
    "refund",
    "warehouse",
    "berlin",
    "lisbon",
    "osaka",
    "priority",
    "standard",
    "express",
    "returned",
    "paid",
    "overdue",
    "discount",
    "widget",
    "gadget",
    "sprocket",
    "account",
    "ledger",
    "balance",
    "credit",
];

/// Fills a SQLite database with order-like rows until it reaches `mb` MiB.
pub fn make_sample(path: &Path, mb: u64) -> Result<()> {
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;
         CREATE TABLE IF NOT EXISTS orders(id INTEGER PRIMARY KEY, customer TEXT, status TEXT,
           amount REAL, note TEXT, blob BLOB);
         CREATE INDEX IF NOT EXISTS orders_customer ON orders(customer);",
    )?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let target = mb << 20;
    let mut id: i64 = conn.query_row("SELECT coalesce(max(id),0) FROM orders", [], |r| r.get(0))?;
    while std::fs::metadata(path)?.len()
        + std::fs::metadata(path.with_extension("db-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
        < target
    {
        let tx = conn.unchecked_transaction()?;
        {
            let mut st = tx.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            for _ in 0..5000 {
                id += 1;
                let note: Vec<&str> = (0..rng.gen_range(8..40))
                    .map(|_| WORDS[rng.gen_range(0..WORDS.len())])
                    .collect();
                let blob: Vec<u8> = (0..rng.gen_range(64..256))
                    .map(|_| rng.gen::<u8>() & 0x3f)
                    .collect();
                st.execute(rusqlite::params![
                    id,
                    format!("customer-{:06}", rng.gen_range(0..100_000)),
                    WORDS[rng.gen_range(0..4)],
                    rng.gen_range(1.0..10_000.0f64),
                    note.join(" "),
                    blob
                ])?;
            }
        }
        tx.commit()?;
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    Ok(())
}

/// A backup of the sample, shown with STATS = 10.
fn backup(source: &str, to: Vec<String>, compress: &str, show_config: bool) -> Result<()> {
    let o = BackupOptions {
        source: source.into(),
        to,
        compress: compress.into(),
        name: Some("pagevault demo".into()),
        ..BackupOptions::default()
    };
    let show = Show {
        stats: Some(10),
        show_config,
        ..Show::default()
    };
    let progress = Arc::new(Progress::default());
    let r = ops::backup(&o, &progress, &mut show.watch(&progress))?;
    show.print(&r)
}

pub fn run(dir: &Path, size_mb: u64) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create '{}'", dir.display()))?;
    let db = dir.join("sample.db");
    if std::fs::metadata(&db)
        .map(|m| m.len() < size_mb << 20)
        .unwrap_or(true)
    {
        println!(
            "== Building a {size_mb} MiB sample SQLite database at {}",
            db.display()
        );
        make_sample(&db, size_mb)?;
    } else {
        println!("== Using the sample database at {}", db.display());
    }
    let source = format!("sqlite:{}", db.display());

    println!("\n== BACKUP DATABASE [sample] TO DISK = 'NUL' WITH STATS = 10");
    backup(&source, vec!["NUL".into()], "none", true)?;

    let s1 = dir.join("sample.1.pv").display().to_string();
    let s2 = dir.join("sample.2.pv").display().to_string();
    println!("\n== BACKUP DATABASE [sample] TO DISK = '{s1}', DISK = '{s2}' WITH COMPRESSION (zstd), STATS = 10");
    backup(&source, vec![s1.clone(), s2.clone()], "zstd", false)?;

    let read = ReadOptions {
        from: vec![s1.clone(), s2.clone()],
        ..ReadOptions::default()
    };
    let show = shower(Some(10), false);
    println!("\n== RESTORE VERIFYONLY");
    let o = VerifyOptions { read: read.clone() };
    print_verify(&verify(&o, &show)?, false);

    let target = dir.join("restored");
    println!(
        "\n== RESTORE DATABASE [sample] FROM both stripes TO {}",
        target.display()
    );
    let o = RestoreOptions {
        read,
        to: target.clone(),
        replace: true,
        ..RestoreOptions::default()
    };
    print_restore(&restore(&o, &show)?, false);

    let restored = target.join("sample.db");
    let conn = Connection::open(&restored)?;
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    let rows: i64 = conn.query_row("SELECT count(*) FROM orders", [], |r| r.get(0))?;
    let orig: i64 =
        Connection::open(&db)?.query_row("SELECT count(*) FROM orders", [], |r| r.get(0))?;
    println!("\nRestored database: PRAGMA integrity_check = {check}; {rows} rows (source {orig}).");
    if check != "ok" || rows != orig {
        bail!("the restored database does not match the source");
    }
    println!(
        "Demo complete: the stripes are in {}, the restored copy in {}.",
        dir.display(),
        target.display()
    );
    Ok(())
}
