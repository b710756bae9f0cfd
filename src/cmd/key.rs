//! `pagevault key rotate` (see ops::key).

use super::print_json;
use crate::crypt::load::{read_key_file, read_passphrase_file};
use crate::device::object::StoreOptions;
use crate::ops::key::{rotate, RotateOptions};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub action: KeyAction,
}

#[derive(Subcommand)]
pub enum KeyAction {
    /// Rewrap every data key of an encrypted repository (sets, archived WAL), or every
    /// MAC key of a signed one (sets), and its marker for a new master key, without
    /// re-encrypting data. On a filesystem each key block is rewritten in place; in an
    /// object store (S3, Azure), which has no write in place, every stripe and WAL file
    /// is written anew, its bytes copied through this host. Stop archiving meanwhile.
    Rotate(RotateArgs),
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pagevault key rotate --repo /backups/main --old-key-file old.key --new-key-file new.key\n  pagevault key rotate --repo s3://bucket/main --old-key-file old.key --new-passphrase-file phrase\n\nA rotation that stops halfway (an error, a signal) leaves every file readable with one of the two keys, and the repository names the new one: run the same command again to finish it."
)]
pub struct RotateArgs {
    /// The repository (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// The current key (default: --key-file / --passphrase-file or their variables).
    #[arg(long, value_name = "FILE")]
    pub old_key_file: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub old_passphrase_file: Option<PathBuf>,
    /// The new key: a key file or a passphrase file.
    #[arg(long, value_name = "FILE")]
    pub new_key_file: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub new_passphrase_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: KeyArgs, store: &StoreOptions) -> Result<()> {
    let KeyAction::Rotate(a) = a.action;
    // Both keys are loaded here, after main: no core dump may hold them.
    crate::sys::not_dumpable().context("cannot make the process not dumpable")?;
    let old = match (&a.old_key_file, &a.old_passphrase_file, &store.key) {
        (Some(_), Some(_), _) => bail!("give --old-key-file or --old-passphrase-file, not both"),
        (Some(f), None, _) => read_key_file(f)?,
        (None, Some(f), _) => read_passphrase_file(f)?,
        (None, None, Some(k)) => k.clone(),
        (None, None, None) => {
            bail!("give the current key: --old-key-file or --old-passphrase-file")
        }
    };
    let new = match (&a.new_key_file, &a.new_passphrase_file) {
        (Some(f), None) => read_key_file(f)?,
        (None, Some(f)) => read_passphrase_file(f)?,
        _ => bail!("give the new key: --new-key-file or --new-passphrase-file (one of them)"),
    };
    let r = rotate(&RotateOptions {
        repo: a.repo,
        old,
        new,
        store: store.clone(),
    })?;
    if a.json {
        print_json(&serde_json::to_value(&r)?);
        return Ok(());
    }
    println!(
        "Repository '{}' rotated from key id {} to key id {}: {} stripe key blocks and {} WAL files rewrapped ({} and {} were already).",
        r.repo, r.old_key_id, r.new_key_id, r.stripes, r.wal_files, r.stripes_already, r.wal_already
    );
    if r.stripes_plain > 0 {
        println!(
            "{} stripes are unsigned (sets from before the repository was signed): they have no key to rotate, and the repository refuses them.",
            r.stripes_plain
        );
    }
    println!(
        "Keep the old key until you no longer need stripes copied elsewhere before the rotation."
    );
    Ok(())
}
