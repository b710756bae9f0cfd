//! `pagevault init` (see ops::init).

use super::print_json;
use crate::device::object::StoreOptions;
use crate::ops::expire::plan::parse_duration;
use crate::ops::init::{init, InitOptions};
use anyhow::Result;
use clap::Args;

#[derive(Args)]
#[command(after_help = "\
Examples:
  # An S3 bucket made with Object Lock and a default retention of 30 days:
  pagevault init --repo s3://locked-bucket/main --immutable --retain 30d
  # The same, signed (give the key to every later command too):
  pagevault init --repo s3://locked-bucket/main --immutable --retain 30d --sign --key-file k

A repository is otherwise made by its first backup or archive-push. An immutable one
never overwrites, renames or rewrites an object: its marker is written once (with its
key: it takes no key later, and `key rotate` is refused), catalog records, WAL files
and block summaries are created only where absent. `expire` removes nothing younger
than --retain (the bucket's default retention: the same or longer), removes a set's
stripes before its record, and names the sets and WAL still held and until when.")]
pub struct InitArgs {
    /// The repository to make (an empty directory or prefix: s3://BUCKET/PREFIX,
    /// azure://CONTAINER/PREFIX, gs://BUCKET/PREFIX).
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), make this one: its name or its place N
    /// (1 the first), with its own key (key-file or passphrase-file) and endpoint.
    /// Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Never overwrite or rename anything in it (for S3 Object Lock, Azure immutable
    /// storage). Needs --retain.
    #[arg(long, requires = "retain")]
    pub immutable: bool,
    /// The store's retention of every object (14d, 36h, 2w): expire removes nothing
    /// younger. Set it to the bucket's default retention, or longer.
    #[arg(long, value_name = "D", value_parser = parse_duration, requires = "immutable")]
    pub retain: Option<u64>,
    /// With a key: a signed repository (readable without the key) instead of an
    /// encrypted one.
    #[arg(long)]
    pub sign: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: InitArgs, store: &StoreOptions) -> Result<()> {
    let r = init(&InitOptions {
        repo: a.repo,
        immutable: a.retain.filter(|_| a.immutable),
        sign: a.sign,
        store: store.clone(),
    })?;
    if a.json {
        print_json(&serde_json::to_value(&r)?);
        return Ok(());
    }
    let key = r
        .key_id
        .as_deref()
        .map(|k| format!(" with key id {k}"))
        .unwrap_or_default();
    let imm = match r.retain_seconds {
        Some(s) => format!(", immutable (objects held {})", held(s)),
        None => String::new(),
    };
    println!("repository {} made: {}{key}{imm}", r.repo, r.protection);
    Ok(())
}

/// Seconds as the largest whole unit: 30d, 36h, 90m, 45s.
fn held(s: u64) -> String {
    match s {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
