//! `pagevault history`: the sets a repository holds, oldest first.

use super::print_json;
use crate::device::object::StoreOptions;
use crate::repo::Repo;
use crate::units::human;
use anyhow::Result;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct HistoryArgs {
    /// The repository.
    #[arg(long)]
    pub repo: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: HistoryArgs, store: &StoreOptions) -> Result<()> {
    let repo = Repo::open(&a.repo, false, store)?;
    let sets = repo.catalog()?;
    if a.json {
        print_json(&json!({ "sets": sets }));
        return Ok(());
    }
    println!(
        "{:<32} {:<5} {:<9} {:<25} {:>10} {:>10} {:<18} {:<18} base",
        "set", "type", "copy-only", "finished", "size", "stored", "start lsn", "stop lsn"
    );
    for s in &sets {
        println!(
            "{:<32} {:<5} {:<9} {:<25} {:>10} {:>10} {:<18} {:<18} {}",
            s.set_id,
            s.backup_type,
            if s.copy_only { "yes" } else { "no" },
            &s.finished[..s.finished.len().min(25)],
            human(s.raw_bytes),
            human(s.stored_bytes),
            s.start_lsn.as_deref().unwrap_or("-"),
            s.stop_lsn.as_deref().unwrap_or("-"),
            s.base_set.as_deref().unwrap_or("-")
        );
    }
    if sets.is_empty() {
        println!("(no backup sets yet)");
    }
    Ok(())
}
