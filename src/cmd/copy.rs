//! `pagevault copy`: sets and archived WAL from one repository into another (see
//! ops::copy).

use super::printed_json;
use super::restore::shower;
use crate::cmd::config::RepoOptions;
use crate::crypt::load::{read_key_file, read_passphrase_file};
use crate::device::object::StoreOptions;
use crate::ops::copy::{copy, CopyOptions};
use crate::units::human;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
#[command(
    long_about = "Copies backup sets and their archived WAL from one repository (--repo) into another (--to-repo) without the database: a second copy in another place (3-2-1). Each set's stripes are read once and written as they are read; every frame is checked on the way as verify checks it (CRC, digest, tag, every file's checksum), and the set is recorded in the destination only once its stripes and the WAL from its start to its end are there: a copy that stops (an error, a signal, a kill) leaves nothing the destination takes for a set, and running it again copies the set whole.\n\nBy default the newest chain is copied (its full set and the differential and incrementals the newest set needs), with --set the chain ending at that set, with --all every set the destination lacks; then the archived WAL the destination lacks from the oldest copied set's start on (with --all: all of it), so that a restore from the destination reaches the newest point. A set the destination holds already is skipped and said so.\n\nA plain set goes byte for byte. A signed set's frames go as stored: its key block is rewrapped for the destination's key and its manifest, which names its repository, tagged again. An encrypted set's frames are opened and sealed again under a new data key wrapped by the destination's key. A plain set is not copied into an encrypted or signed repository, nor a signed set into an encrypted one (take a new backup there).\n\nThe destination is made first: `pagevault init --repo DEST` (with its key options). Its key: --to-key-file or --to-passphrase-file, else the source's --key-file / --passphrase-file.",
    after_help = "Examples:\n  pagevault copy --repo /backup/repo --to-repo s3://bucket/main --s3-endpoint https://minio:9000\n  pagevault copy --repo /backup/repo --to-repo /mnt/offsite/repo --all --json\n  pagevault copy --repo /backup/repo --to-repo s3://bucket/main --set 3f2a\n  pagevault copy --repo /backup/repo --key-file /etc/pagevault/local.key --to-repo s3://bucket/main --to-key-file /etc/pagevault/offsite.key\n\nExit status 1 names the set or WAL file and what to do; nothing of that set is recorded in the destination. 3: a store did not answer: run it again."
)]
pub struct CopyArgs {
    /// The repository copied from (a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// The repository copied into, made before with `pagevault init` (same forms as --repo).
    #[arg(long, value_name = "REPO")]
    pub to_repo: String,
    /// Copy the chain ending at this set (an id or its first characters): the set and
    /// the sets it is built on. Default: the newest chain.
    #[arg(long, conflicts_with = "all")]
    pub set: Option<String>,
    /// Copy every set the destination lacks, and all the archived WAL it lacks.
    #[arg(long)]
    pub all: bool,
    /// The destination's key file (default: the destination's own key-file when it is
    /// one of the stanza's repositories with one, else the source's key).
    #[arg(long, value_name = "FILE")]
    pub to_key_file: Option<PathBuf>,
    /// The destination's passphrase file (default as --to-key-file's).
    #[arg(long, value_name = "FILE")]
    pub to_passphrase_file: Option<PathBuf>,
    /// Endpoint of the destination's S3-compatible server (default: the destination's
    /// own s3-endpoint when the stanza gives it one, else --s3-endpoint).
    #[arg(long, value_name = "URL")]
    pub to_s3_endpoint: Option<String>,
    /// Threads checking frames (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Progress every N percent (default: a bar on a terminal).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub stats: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The destination opens with --to-key-file / --to-passphrase-file / --to-s3-endpoint,
/// else with its own key and endpoint when it is one of the stanza's repositories
/// (`repos`), else with the source's.
pub fn run(a: CopyArgs, store: &StoreOptions, repos: &RepoOptions) -> Result<()> {
    let own = repos.own_store(&a.to_repo, store)?;
    let key = match (&a.to_key_file, &a.to_passphrase_file) {
        (Some(_), Some(_)) => bail!("give --to-key-file or --to-passphrase-file, not both"),
        (Some(f), None) => Some(read_key_file(f)?),
        (None, Some(f)) => Some(read_passphrase_file(f)?),
        (None, None) => own.key.clone(),
    };
    if key.is_some() {
        crate::sys::not_dumpable().context("cannot make the process not dumpable")?;
    }
    let to_store = StoreOptions {
        s3_endpoint: a.to_s3_endpoint.clone().or(own.s3_endpoint.clone()),
        key,
    };
    let o = CopyOptions {
        from: a.repo,
        from_store: store.clone(),
        to: a.to_repo,
        to_store,
        set: a.set,
        all: a.all,
        threads: a.threads.map(|t| t as usize),
    };
    let r = copy(&o, &shower(a.stats, a.json))?;
    if printed_json(&r, a.json) {
        return Ok(());
    }
    for s in &r.sets {
        println!(
            "Copied {} set {} ({} stripes, {} frames, {}; frames {}) in {:.3} seconds ({:.3} MB/sec), with {} archived WAL files.",
            s.backup_type,
            s.set_id,
            s.stripes,
            s.frames,
            human(s.bytes),
            s.frames_went,
            s.seconds,
            s.mb_per_sec,
            s.wal_copied
        );
    }
    for s in &r.skipped {
        println!("Skipped set {}: {}.", s.set_id, s.reason);
    }
    println!(
        "COPY successfully copied {} sets and {} archived WAL files ({} held already) from '{}' to '{}': {} in {:.3} seconds ({:.3} MB/sec).",
        r.sets_copied,
        r.wal_copied,
        r.wal_skipped,
        r.from,
        r.to,
        human(r.bytes),
        r.seconds,
        r.mb_per_sec
    );
    super::print_retries();
    Ok(())
}
