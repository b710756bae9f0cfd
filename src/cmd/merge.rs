//! `pagevault merge`: a synthetic full set made of a chain (see ops::merge).

use super::backup::Show;
use super::printed_json;
use super::waits::PrintWaits;
use crate::device::object::StoreOptions;
use crate::engine::stats::Progress;
use crate::ops::merge::{merge, MergeOptions};
use crate::units::human;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
#[command(
    long_about = "Makes one new full set of a chain (a full set and the differentials and incrementals after it) without touching the database: the sets after the full are restored into a scratch directory, then each chunk of the full takes their pages and goes straight into the new set, every frame and file checked (a chunk no newer set changed is stored as the full stored it, not compressed again, when the codec stays the same); the new set carries the newest set's LSNs and backup_label. The new set restores on its own with the WAL after its end; the sets it replaced stay until expire removes them as an older full's chain.\n\nRun it when the chain has grown long or the changes since the full are large (pagevault estimate tells): the next incrementals then base on the new full. The scratch directory needs room for the pages the newer sets changed and the files they added, not for the cluster; it is private (0700) and removed whatever happens.",
    after_help = "Examples:\n  pagevault merge --repo /backups/main\n  pagevault merge --repo /backups/main --set 3f2a --compress zstd --json\n  pagevault merge --repo s3://bucket/main\n  pagevault merge --repo s3://bucket/main --scratch /data/pv-merge"
)]
pub struct MergeArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Merge the chain ending at this set (an id or its first characters; default: the newest).
    #[arg(long)]
    pub set: Option<String>,
    /// A directory that does not exist yet, for the newer sets' pages and files
    /// (default: inside a repository on disk; for an object store, in $TMPDIR or
    /// /var/tmp). It needs room for what the newer sets hold, not for the cluster.
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
    /// Codec of the new set: none, lz4, zstd or zstd:LEVEL (default: the full set's).
    #[arg(long)]
    pub compress: Option<String>,
    /// Threads of each pipeline (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Progress every N percent (default: a bar on a terminal).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub stats: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: MergeArgs, store: &StoreOptions) -> Result<()> {
    let show = Show {
        stats: a.stats,
        json: a.json,
        ..Show::default()
    };
    let progress = Arc::new(Progress::default());
    let r = merge(
        &MergeOptions {
            repo: a.repo,
            set: a.set,
            scratch: a.scratch,
            compress: a.compress,
            threads: a.threads,
            store: store.clone(),
        },
        &progress,
        &mut show.watch(&progress),
    )?;
    if printed_json(&r, a.json) {
        return Ok(());
    }
    println!(
        "MERGE successfully made full set {} of {} sets ({}) in {:.3} seconds ({:.3} MB/sec).",
        r.set_id,
        r.merged.len(),
        r.merged.join(", "),
        r.seconds,
        r.mb_per_sec
    );
    println!(
        "Read {} from the chain's stripes in {:.3} s; wrote {} ({} stored) in {:.3} s.",
        human(r.read_bytes),
        r.stage_seconds,
        human(r.raw_bytes),
        human(r.stored_bytes),
        r.backup_seconds
    );
    if r.backup.kept_frames > 0 {
        println!(
            "{} of the full's chunks no newer set changed were stored as they were, not compressed again.",
            r.backup.kept_frames
        );
    }
    r.backup.waits.print();
    Ok(())
}
