//! The merge use case (a synthetic full): the newest chain of a repository (or the chain
//! ending at a chosen set), a full and the differentials and incrementals after it,
//! becomes one new full set without touching the database. The new set's pipeline runs
//! the chain's restore in place of its readers: the newer sets are restored into a
//! private scratch directory (their changed pages and new files only), then each of the
//! full's chunks, checked and decompressed, takes the newer pages from there and goes
//! straight to the compressors (`engine::restore::merge`); what the full held no frame
//! of is read from the scratch copy last. The new set carries the newest set's facts
//! (its LSNs, backup_label, tablespace_map) and is committed only once every frame and
//! file of the chain was checked. The scratch directory is removed whatever happens.

use super::backup::{backup_of, BackupOptions, BackupReport, Watch, REPO_STRIPES_MAX};
use super::restore::{restore_merged, RestoreOptions, RestoreReport};
use super::verify::{quiet, ReadOptions};
use crate::engine::backup::{Feed, Feeder};
use crate::engine::codec::CodecSpec;
use crate::engine::pool::Buf;
use crate::engine::restore::merge::ChunkOut;
use crate::engine::stats::Progress;
use crate::format::manifest::{BackupType, Manifest};
use crate::pg::facts::PgFacts;
use crate::repo::chain::{self, Selector};
use crate::repo::Repo;
use crate::source::{self, staged::Staged, SourceFile};
use crate::units::mb_per_sec;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    pub repo: String,
    /// The chain ending at this set (an id or its first characters; default: the newest).
    pub set: Option<String>,
    /// Where the newer sets are restored first (default: a private directory inside a
    /// repository on disk, or in $TMPDIR (/var/tmp) for an object store).
    pub scratch: Option<PathBuf>,
    /// none, lz4, zstd or zstd:LEVEL (default: the full set's).
    pub compress: Option<String>,
    /// Threads of each pipeline (default: one per core).
    pub threads: Option<u32>,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

/// What `merge --json` prints.
#[derive(Debug, Serialize)]
pub struct MergeReport {
    pub command: &'static str,
    /// The new full set.
    pub set_id: String,
    /// The sets merged, oldest first.
    pub merged: Vec<String>,
    /// Stored bytes read from the chain's stripes.
    pub read_bytes: u64,
    /// Raw and stored bytes of the new set.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// The restore into the scratch directory, and the backup of it (they overlap).
    pub stage_seconds: f64,
    pub backup_seconds: f64,
    pub seconds: f64,
    /// Raw bytes of the new set per second of the whole merge.
    pub mb_per_sec: f64,
    pub scratch: PathBuf,
    pub backup: BackupReport,
}

/// Removes the scratch directory when the merge ends, in success or failure.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn merge(
    o: &MergeOptions,
    progress: &Arc<Progress>,
    watch: &mut dyn Watch,
) -> Result<MergeReport> {
    let t0 = Instant::now();
    let repo = Repo::open(&o.repo, false, &o.store)?;
    // Never while an expire removes sets (nor beside another merge).
    let _lock = repo.lock("merge")?;
    let catalog = repo.catalog()?;
    let chain = chain::select(&catalog, &Selector::parse(o.set.as_deref(), None, None)?)?;
    let (full, newest) = (chain.full(), chain.last());
    if chain.links.len() < 2 {
        bail!(
            "set {} is a full set with nothing after it: a merge makes one full set of a full and the differentials and incrementals after it",
            full.set_id
        );
    }
    let mut m = super::set_manifest(&repo, newest)?;
    // The new full holds the chain's visibility maps: as exact as its least exact set.
    let rules = chain.links.iter().map(|l| l.rules()).min().unwrap_or(1);
    m.extra
        .insert(super::backup::CHANGE_RULES.to_string(), rules.into());
    // Room for what the newer sets hold, raw: the most the scratch copy takes.
    let need: u64 = chain.links[1..].iter().map(|l| l.raw_bytes).sum();
    let scratch = Scratch(make_scratch(o, need)?);
    let data = scratch.0.join("data");
    let tablespaces = tablespace_map(&m, &scratch.0)?;

    let names: Vec<String> = chain.links.iter().map(|l| l.set_id.clone()).collect();
    let restore_options = RestoreOptions {
        read: ReadOptions {
            repo: Some(o.repo.clone()),
            set: Some(newest.set_id.clone()),
            threads: o.threads.map(|t| t as usize),
            store: o.store.clone(),
            ..ReadOptions::default()
        },
        to: data.clone(),
        tablespace_map: tablespaces.clone(),
        stage_only: true,
        ..RestoreOptions::default()
    };
    let done = Arc::new(Mutex::new(None));
    // Another codec or level than the full's: every chunk is compressed again.
    let full_codec = CodecSpec::parse(&full.codec)
        .with_context(|| format!("set {}: its codec '{}'", full.set_id, full.codec))?;
    let recompress = match &o.compress {
        Some(c) => CodecSpec::parse(c)? != full_codec,
        None => false,
    };
    let feed = Restoring {
        options: restore_options,
        done: done.clone(),
        t0,
        recompress,
    };
    let src = staged_source(&m, &data, &tablespaces, feed)?;
    // Chunks are the full's: its transfer size is the new set's.
    let transfer = super::set_manifest(&repo, full)?.transfer_size;
    let backup_options = BackupOptions {
        source: src.info.location.clone(),
        repo: Some(o.repo.clone()),
        // As many as the full's (a count from its record: at most a backup's).
        stripes: Some(full.stripes.len().clamp(1, REPO_STRIPES_MAX as usize) as u32),
        backup_type: BackupType::Full,
        compress: o.compress.clone().unwrap_or_else(|| full.codec.clone()),
        threads: o.threads,
        max_transfer_size: transfer as u64,
        page_size: m.page_size as u64,
        store: o.store.clone(),
        // Its chunks are fed, not read from files.
        direct_io: super::backup::DirectIo::Off,
        // Restores to a time pick it as they would the newest merged set.
        data_finished: Some(newest.finished.clone()),
        name: Some(format!(
            "{}{} ({} sets, {} to {})",
            crate::repo::MERGE_NAME,
            short(&full.set_id),
            names.len(),
            short(&full.set_id),
            short(&newest.set_id)
        )),
        ..BackupOptions::default()
    };
    let b = backup_of(&backup_options, Some(Box::new(src)), progress, watch);
    let backup_seconds = t0.elapsed().as_secs_f64();
    let b = b.context("merge: writing the new full set")?;
    let (staged, stage_seconds) = done
        .lock()
        .unwrap()
        .take()
        .ok_or_else(|| anyhow!("merge: the chain's restore did not run"))?;
    let seconds = t0.elapsed().as_secs_f64();
    Ok(MergeReport {
        command: "merge",
        set_id: b.set_id.clone(),
        merged: names,
        read_bytes: staged.stored_bytes,
        raw_bytes: b.raw_bytes,
        stored_bytes: b.stored_bytes,
        stage_seconds,
        backup_seconds,
        seconds,
        mb_per_sec: mb_per_sec(b.raw_bytes, seconds),
        scratch: scratch.0.clone(),
        backup: b,
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A new private (0700) directory: `--scratch`, or `.merge-PID-NANOS` in a repository
/// on disk, or `pagevault-merge-PID-NANOS` in `$TMPDIR` (default /var/tmp: on disk, where
/// /tmp may be memory) for an object store. An existing path is refused, never reused;
/// a file system with less than `need` bytes free is refused before anything is read.
fn make_scratch(o: &MergeOptions, need: u64) -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("merge-{}-{nanos}", std::process::id());
    let dir = match &o.scratch {
        Some(d) => d.clone(),
        None if o.repo.contains("://") => {
            let tmp = std::env::var_os("TMPDIR").unwrap_or_else(|| "/var/tmp".into());
            Path::new(&tmp).join(format!("pagevault-{name}"))
        }
        None => Path::new(&o.repo).join(format!(".{name}")),
    };
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some((_, free)) = crate::sys::fs_space(parent.unwrap_or(Path::new("."))) {
        if free < need {
            bail!(
                "the scratch directory '{}' needs up to {} free for the newer sets' pages and files, and its file system has {}: free space there, or give --scratch DIR on a larger one",
                dir.display(),
                crate::units::human(need),
                crate::units::human(free)
            );
        }
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| {
            format!(
                "cannot create the scratch directory '{}' (it must not exist yet)",
                dir.display()
            )
        })?;
    Ok(dir)
}

/// PostgreSQL: every tablespace of the set restored under `scratch/tblspc/OID`, never
/// where the set says it lived. The OIDs come from the set: digits only.
fn tablespace_map(m: &Manifest, scratch: &Path) -> Result<Vec<String>> {
    let facts = PgFacts::from_extra(&m.extra).map_err(|e| anyhow!("set {}: {e}", m.set_id))?;
    let Some(facts) = facts else {
        return Ok(vec![]);
    };
    facts
        .tablespaces()
        .into_iter()
        .map(|(oid, _)| {
            if oid.is_empty() || !oid.bytes().all(|c| c.is_ascii_digit()) {
                bail!(
                    "set {}: tablespace OID '{oid}' in its tablespace_map is not a number",
                    m.set_id
                );
            }
            Ok(format!(
                "{oid}={}",
                scratch.join("tblspc").join(oid).display()
            ))
        })
        .collect()
}

/// The chain's restore, run by the new set's pipeline in place of its readers: its
/// report and when it ended, once it ran.
struct Restoring {
    options: RestoreOptions,
    done: Arc<Mutex<Option<(RestoreReport, f64)>>>,
    t0: Instant,
    /// No chunk kept as the full stored it.
    recompress: bool,
}

impl Feed for Restoring {
    fn feed(&self, out: &Feeder) -> Result<()> {
        let all = Recompress(out);
        let out: &dyn ChunkOut = match self.recompress {
            true => &all,
            false => out,
        };
        // Its errors say "restoring the chain failed" already.
        let r = restore_merged(&self.options, &quiet, out)?;
        *self.done.lock().unwrap() = Some((r, self.t0.elapsed().as_secs_f64()));
        Ok(())
    }
}

/// The new set's side, taking no stored chunk: each is compressed again.
struct Recompress<'a>(&'a dyn ChunkOut);

impl ChunkOut for Recompress<'_> {
    fn buffer(&self) -> std::io::Result<Buf> {
        self.0.buffer()
    }
    fn send(&self, file: u32, offset: u64, buf: Buf) -> std::io::Result<()> {
        self.0.send(file, offset, buf)
    }
}

/// The newest set's entries, their chunks sent by `feed` (their places in the
/// scratch directory name them in messages).
fn staged_source(
    m: &Manifest,
    data: &Path,
    tablespaces: &[String],
    feed: Restoring,
) -> Result<Staged> {
    let mut restorer = source::restorer(m.source.kind, tablespaces, false);
    restorer.plan(&m.extra)?;
    let dev = std::fs::metadata(data.parent().unwrap_or(data))
        .with_context(|| format!("cannot stat '{}'", data.display()))?
        .dev();
    let mut entries = vec![];
    for f in &m.files {
        let abs = restorer.place(data, &f.path);
        entries.push(SourceFile {
            rel_path: f.path.to_string(),
            abs_path: abs.into(),
            kind: f.kind,
            size: f.size,
            mode: f.mode,
            mtime: f.mtime,
            dev,
            missing_ok: false,
            link_target: f.link_target.clone(),
        });
    }
    let facts = PgFacts::from_extra(&m.extra).map_err(|e| anyhow!("set {}: {e}", m.set_id))?;
    Ok(Staged {
        info: source::postgres::scrub_recorded(&m.source),
        page_size: m.page_size,
        entries,
        extra: m.extra.clone(),
        page_check: facts.map(|f| (f.data_checksums, f.start_lsn)),
        feed: Some(Box::new(feed)),
    })
}
