//! Sources: what is backed up. A source lists its files (with the volume each
//! lives on) and brackets the read with whatever makes the copy consistent.

pub mod files;
pub mod postgres;
pub mod sqlite;

use crate::engine::backup::ChunkFilter;
use crate::format::manifest::{EntryKind, SourceInfo};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub struct SourceFile {
    /// Path inside the backup set ('/'-separated, relative).
    pub rel_path: String,
    pub abs_path: PathBuf,
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    pub mtime: i64,
    /// Device id of the volume holding the file.
    pub dev: u64,
    pub missing_ok: bool,
    pub link_target: Option<String>,
}

pub trait Source {
    fn info(&self) -> SourceInfo;
    fn page_size(&self) -> u32;
    /// Makes the source ready to be read consistently and lists what to read.
    fn prepare(&mut self) -> Result<Vec<SourceFile>>;
    /// Ends the backup on the source side: facts for the manifest, and files that
    /// exist only now (the WAL written during the backup), read in a second pass.
    fn finish(&mut self, ok: bool) -> Result<Finish>;
    /// A check run on every chunk read (page checksums); ids are entry indexes.
    fn filter(&self, _entries: &[SourceFile]) -> Option<Box<dyn ChunkFilter>> {
        None
    }
}

#[derive(Default)]
pub struct Finish {
    pub extra: BTreeMap<String, serde_json::Value>,
    pub late: Vec<SourceFile>,
}

pub struct Options {
    pub page_size: u32,
    pub spool: Option<PathBuf>,
    pub pgdata: Option<PathBuf>,
    pub label: String,
    pub continue_after_error: bool,
    pub archive_timeout: u64,
    /// Set for a differential backup of a PostgreSQL source.
    pub base: Option<postgres::DiffBase>,
}

/// Parses a SOURCE argument: `files:PATH` or `sqlite:PATH`.
pub fn parse(spec: &str, opts: &Options) -> Result<Box<dyn Source>> {
    match spec.split_once(':') {
        Some(("files", path)) if !path.is_empty() => {
            Ok(Box::new(files::Files::new(path.into(), opts.page_size)))
        }
        Some(("sqlite", path)) if !path.is_empty() => Ok(Box::new(sqlite::Sqlite::new(
            path.into(),
            opts.spool.clone(),
        ))),
        _ if spec.starts_with("postgres://") || spec.starts_with("postgresql://") => {
            let mut pg = postgres::Postgres::new(spec, opts.pgdata.clone(), opts.label.clone())?;
            pg.continue_after_error = opts.continue_after_error;
            pg.archive_timeout = opts.archive_timeout;
            pg.base = opts.base.clone();
            Ok(Box::new(pg))
        }
        _ => bail!("unknown source '{spec}': use files:PATH, sqlite:PATH or postgres://USER@HOST:PORT/DB?pgdata=DIR"),
    }
}
