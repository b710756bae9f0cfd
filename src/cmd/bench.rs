//! `pagevault bench`: the I/O patterns a database puts on storage, measured.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    /// Directory on the storage to measure (a test file is created there and removed).
    #[arg(long)]
    pub path: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_a: BenchArgs) -> Result<()> {
    bail!("bench is not implemented yet")
}
