//! WAL archiving as log backups: `archive-push` stores one file PostgreSQL hands to
//! `archive_command`, `archive-get` restores one for `restore_command`.

use crate::format::seal::KeyUse;
use crate::repo::{wal, Repo};
use anyhow::{bail, Result};
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// The file to archive (`%p`).
    pub path: PathBuf,
    pub repo: String,
    /// Archive a segment without its block summary (incrementals over it read every page).
    pub no_summaries: bool,
    /// `--sign`: the key makes a new or plain repository signed, not encrypted.
    pub sign: bool,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// The WAL file name wanted (`%f`).
    pub name: String,
    /// Where it goes (`%p`).
    pub dest: PathBuf,
    pub repo: String,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

/// Archives one file: durable in the repository when this returns Ok.
pub fn push(o: &PushOptions) -> Result<wal::Pushed> {
    if o.sign && o.store.key.is_none() {
        bail!("--sign needs a key: {}", crate::crypt::load::GIVE_KEY);
    }
    let repo = Repo::open(&o.repo, true, &o.store)?;
    if let (true, Some(source), None) = (o.sign, &o.store.key, repo.protection()) {
        repo.key_for(source, KeyUse::Sign)?;
    }
    wal::push_with(&repo, &o.path, !o.no_summaries)
}

/// Restores one file, every byte checked; complete at `dest` or not there at all.
/// `wal::NotArchived` (downcast) means the archive does not hold it; any other error
/// means it is there but cannot be used, or the archive cannot be read.
pub fn get(o: &GetOptions) -> Result<u64> {
    let repo = Repo::open(&o.repo, false, &o.store)?;
    wal::fetch(&repo, &o.name, &o.dest)
}
