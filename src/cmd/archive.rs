//! `pagevault archive-push` and `archive-get`: WAL archiving as log backups.

use anyhow::{bail, Result};
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

pub fn run_push(_a: PushArgs) -> Result<()> {
    bail!("archive-push is not implemented yet")
}

pub fn run_get(_a: GetArgs) -> Result<()> {
    bail!("archive-get is not implemented yet")
}
