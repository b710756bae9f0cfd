//! `pagevault expire`: retention (see ops::expire).

use super::print_json;
use crate::device::object::StoreOptions;
use crate::ops::expire::{expire, ExpireOptions};
use crate::units::human;
use anyhow::Result;
use clap::Args;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault expire --repo /backups/main --keep-full 2 --dry-run\n  pagevault expire --repo s3://bucket/main --keep-full 4"
)]
pub struct ExpireArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX or azure://CONTAINER/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// How many full backups to keep (the newest ones that are not damaged).
    #[arg(long, value_name = "N")]
    pub keep_full: u32,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ExpireArgs, store: &StoreOptions) -> Result<()> {
    let r = expire(&ExpireOptions {
        repo: a.repo,
        keep_full: a.keep_full,
        dry_run: a.dry_run,
        store: store.clone(),
    })?;
    if a.json {
        print_json(&serde_json::to_value(&r)?);
        return Ok(());
    }
    let verb = if r.dry_run { "Would expire" } else { "Expired" };
    for c in &r.expired_sets {
        println!(
            "{verb} set {} ({}, finished {}, {})",
            c.set_id,
            c.backup_type,
            c.finished,
            human(c.stored_bytes)
        );
    }
    if let (Some(first), Some(last)) = (r.wal_expired.first(), r.wal_expired.last()) {
        println!(
            "{verb} {} WAL file(s) from {first} to {last} (every kept set needs WAL from {} on).",
            r.wal_expired.len(),
            r.wal_needed_from.as_deref().unwrap_or("-")
        );
    }
    println!(
        "{} set(s) kept, {} expired, {} {}.",
        r.kept.len(),
        r.expired.len(),
        human(r.bytes_freed),
        if r.dry_run { "would be freed" } else { "freed" }
    );
    Ok(())
}
