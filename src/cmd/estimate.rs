//! `pagevault estimate`: how much changed since the newest full and newest set, from
//! the block summaries alone (see ops::estimate).

use super::printed_json;
use crate::device::object::StoreOptions;
use crate::ops::estimate::{estimate, EstimateOptions, Since};
use anyhow::Result;
use clap::Args;

#[derive(Args)]
#[command(
    after_help = "Reads the block summaries archive-push writes beside each WAL segment, never the database.\n\nExamples:\n  pagevault estimate --repo /backups/main\n  pagevault estimate --repo s3://bucket/main --json"
)]
pub struct EstimateArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: EstimateArgs, store: &StoreOptions) -> Result<()> {
    let r = estimate(&EstimateOptions {
        repo: a.repo,
        store: store.clone(),
    })?;
    if printed_json(&r, a.json) {
        return Ok(());
    }
    println!("Changed blocks through WAL {}:", r.through_wal);
    show("the newest full", &r.since_full);
    if let Some(s) = &r.since_newest {
        show("the newest set", s);
    }
    Ok(())
}

fn show(what: &str, s: &Since) {
    println!(
        "  since {what} ({} {}, start {}): {} of {} blocks ({:.1}%){}",
        s.backup_type,
        s.set_id,
        s.start_lsn,
        s.changed_blocks,
        s.total_blocks,
        s.percent,
        match s.complete {
            true => String::new(),
            false => format!(
                "; NOT complete, {} gap(s) in the summaries: {}",
                s.gap_count,
                s.gaps.join("; ")
            ),
        }
    );
    for d in &s.databases {
        // A recorded name is data: shown escaped.
        let db = match (&d.name, d.database) {
            (_, 0) => "shared catalogs".to_string(),
            (Some(n), oid) => format!("database {} ({oid})", super::shown(n)),
            (None, oid) => format!("database {oid}"),
        };
        println!(
            "    tablespace {} {db}: {} of {} blocks ({:.1}%){}",
            d.tablespace,
            d.changed_blocks,
            d.total_blocks,
            d.percent,
            if d.whole {
                ", created or dropped since"
            } else {
                ""
            }
        );
    }
}
