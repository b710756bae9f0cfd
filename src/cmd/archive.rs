//! `pagevault archive-push` and `archive-get`: WAL archiving as log backups, for
//! PostgreSQL's `archive_command` and `restore_command`:
//!
//! ```text
//! archive_command = 'pagevault archive-push %p --repo /backup/repo'
//! restore_command = 'pagevault archive-get %f %p --repo /backup/repo'
//! ```
//!
//! Exit 0 only when the file is durable in the repository (push) or complete at its
//! destination (get). Any failure is exit 1 with one line on stderr; for archive-get
//! that includes "not in the archive", which PostgreSQL expects for files that may not
//! exist (e.g. the next timeline's history file).

use crate::repo::{wal, Repo};
use crate::units::human;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct PushArgs {
    /// The segment to archive (%p in archive_command).
    pub path: PathBuf,
    /// The repository to archive into.
    #[arg(long)]
    pub repo: String,
}

#[derive(Args)]
pub struct GetArgs {
    /// The segment name wanted (%f in restore_command).
    pub name: String,
    /// Where to write it (%p in restore_command).
    pub dest: PathBuf,
    /// The repository to fetch from.
    #[arg(long)]
    pub repo: String,
}

pub fn run_push(a: PushArgs) -> Result<()> {
    let repo = Repo::open(&a.repo, true)?;
    let p = wal::push(&repo, &a.path)?;
    match p.outcome {
        wal::Outcome::Archived => println!(
            "pagevault: archived {} ({} -> {}) in {:.3} s",
            p.name,
            human(p.raw_bytes),
            human(p.stored_bytes),
            p.seconds
        ),
        wal::Outcome::AlreadyArchived => println!(
            "pagevault: {} was already archived with identical content: nothing to do",
            p.name
        ),
        wal::Outcome::Repaired => println!(
            "pagevault: {} was archived before but that copy was damaged: replaced it with this identical file",
            p.name
        ),
    }
    Ok(())
}

pub fn run_get(a: GetArgs) -> Result<()> {
    let repo = Repo::open(&a.repo, false)?;
    wal::fetch(&repo, &a.name, &a.dest)?;
    Ok(())
}
