//! `pagevault archive-push` and `archive-get`: WAL archiving as log backups, for
//! PostgreSQL's `archive_command` and `restore_command`:
//!
//! ```text
//! archive_command = 'pagevault archive-push %p --repo /backup/repo'
//! restore_command = 'pagevault archive-get %f %p --repo /backup/repo'
//! ```
//!
//! Exit 0 only when the file is durable in the repository (push) or complete at its
//! destination (get). archive-push fails with exit 1 (PostgreSQL retries it).
//! archive-get exits 1 only when the archive does not hold the file, which PostgreSQL
//! reads as "the end of the archive" (expected for files that may not exist, such as
//! the next timeline's history file). A file that is there but damaged, or an archive
//! that cannot be read, exits 126: PostgreSQL treats a status above 125 as fatal and
//! stops recovery with an error, instead of ending it early and promoting.

use crate::device::object::StoreOptions;
use crate::ops::archive;
use crate::repo::wal;
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
    /// Store each segment's block summary beside it (which blocks its records change):
    /// what lets `backup --type incr` and `diff` read only the changed pages, and
    /// `estimate` count them. Off saves the summarizing CPU; those backups then read
    /// every page of the cluster.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub summaries: String,
    /// With a key (--key-file, --passphrase-file or their variables): make a new or
    /// plain repository signed rather than encrypted. Its WAL files and sets are then
    /// stored readable and authenticated by keyed BLAKE3 tags, and it refuses unsigned
    /// writes from then on. Into a repository already signed or encrypted, a key alone
    /// does what it says.
    #[arg(long)]
    pub sign: bool,
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

pub fn run_push(a: PushArgs, store: &StoreOptions) -> Result<()> {
    let p = archive::push(&archive::PushOptions {
        path: a.path,
        repo: a.repo,
        no_summaries: a.summaries == "off",
        sign: a.sign,
        store: store.clone(),
    })?;
    match p.outcome {
        wal::Outcome::Archived => println!(
            "pagevault: archived {} ({} -> {}) in {:.3} s, {:.3} s CPU (summary {:.3} s CPU)",
            p.name,
            human(p.raw_bytes),
            human(p.stored_bytes),
            p.seconds,
            p.cpu_seconds,
            p.summary_cpu_seconds
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
    if let Some(s) = &p.summary {
        println!("pagevault: {}: {s}", p.name);
    }
    Ok(())
}

/// archive-get's status for a file that is there but cannot be used: above 125.
pub const GET_FATAL: u8 = 126;

/// archive-get's status for an error: 1 only when the archive does not hold the file.
pub fn get_status(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<wal::NotArchived>() {
        Some(_) => 1,
        None => GET_FATAL,
    }
}

pub fn run_get(a: GetArgs, store: &StoreOptions) -> Result<()> {
    let fetched = archive::get(&archive::GetOptions {
        name: a.name.clone(),
        dest: a.dest,
        repo: a.repo,
        store: store.clone(),
    });
    match fetched {
        Ok(_) => Ok(()),
        Err(e) if e.downcast_ref::<wal::NotArchived>().is_some() => {
            Err(e.context("exit 1: PostgreSQL takes this as the end of the archive"))
        }
        Err(e) => Err(super::Exit {
            code: GET_FATAL,
            error: e.context(format!(
                "{} could not be restored, and recovery must not end here: exit {GET_FATAL} stops \
                 it with an error (fix the archive or its access, then start the server again)",
                a.name
            )),
        }
        .into()),
    }
}
