//! The verify use case (RESTORE VERIFYONLY): reads a set as a restore would, every
//! frame, digest and file checksum, and writes nothing. What it shares with restore
//! (choosing the set, the pipeline's parameters, the checksum check) lives here.

use crate::device::object::{retry_stats, RetryStats};
use crate::engine::restore::{self, FileIn};
use crate::engine::stats::{Progress, WaitStats};
use crate::format::manifest::{Checksum, EntryKind, IdIndex, Manifest, SourceKind};
use crate::format::ContentHash;
use crate::pg::{self, facts::PgFacts};
use crate::repo::wal::{self, damaged::Position};
use crate::repo::{chain, CatalogEntry, Repo};
use crate::set::read::{self as set, OpenSet};
use crate::units::mb_per_sec;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::sync::Arc;

/// Shows a pipeline's progress while it runs: called as each pipeline starts, with
/// its counters and a verb; the display ends when the returned value is dropped.
pub type Show<'a> = &'a dyn Fn(Arc<Progress>, &'static str) -> Box<dyn std::any::Any>;

/// Shows nothing.
pub fn quiet(_: Arc<Progress>, _: &'static str) -> Box<dyn std::any::Any> {
    Box::new(())
}

/// Which set to read and how (restore and verify alike).
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Every stripe of the set, in any order (or empty with `repo`).
    pub from: Vec<String>,
    /// Take the set (and the WAL) from this repository instead of `from`.
    pub repo: Option<String>,
    /// Restore: repositories after `repo`, asked in order when it cannot serve the
    /// chain, and named after it in the restore_command written; each with its own
    /// options.
    pub fallback: Vec<crate::repo::many::RepoStore>,
    /// The set of `repo` (an id or its first characters; default: the newest usable).
    pub set: Option<String>,
    /// Decompression threads (default: one per core).
    pub threads: Option<usize>,
    /// Buffers in the pool (default: 4 per stripe + 2 per thread).
    pub buffer_count: Option<usize>,
    /// Object-store options (`--s3-endpoint`).
    pub store: crate::device::object::StoreOptions,
}

#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    pub read: ReadOptions,
}

/// What `verify --json` prints.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub command: &'static str,
    pub valid: bool,
    pub set_id: String,
    pub damaged_flag: bool,
    pub files: usize,
    pub frames: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub seconds: f64,
    pub mb_per_sec: f64,
    pub waits: WaitStats,
    pub object_store: RetryStats,
    /// `--repo` of an encrypted or signed repository: every recorded set was checked
    /// to be encrypted or signed with its key (its manifest opened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_sets_checked: Option<usize>,
    /// Stripes overwritten or deleted after the backup (read at their pinned
    /// versions): a finding, verify exits 1 naming each.
    pub overwritten: Vec<set::Overwritten>,
    /// Catalog records overwritten or deleted since a later record named their
    /// version (read at that version): a finding too.
    pub records_overwritten: Vec<String>,
    /// `--repo`: archived segments marked damaged, each with where it lies against the
    /// WAL the set needs to be consistent; one `inside` makes the set invalid.
    pub damaged_wal: Vec<DamagedWal>,
    /// `--repo`: the block summaries the next differential or incremental would use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summaries: Option<SummaryCheck>,
    /// A restore of the set (or of a set it is built on) may hold stale visibility maps.
    pub stale_visibility_map: bool,
    /// `--repo`: the set's stripes its record names outside the repository (written
    /// with `--to`, or a forged record's: a plain repository cannot tell).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_repository: Vec<String>,
    /// For the text summary.
    #[serde(skip)]
    pub pages: u64,
}

/// The block summaries of the archived segments from the newest full set's start on
/// (what a differential or incremental would read): each intact and of its segment, or
/// named. A summary that is missing is no finding (the change map then reads every page).
#[derive(Debug, Serialize, Default)]
pub struct SummaryCheck {
    pub checked: usize,
    pub missing: usize,
    /// Made with change rules older than today's: the next backup reads
    /// visibility-map forks whole across them.
    pub old_rules: usize,
    /// Summaries present but refused, with why: a finding.
    pub damaged: Vec<DamagedSummary>,
}

#[derive(Debug, Serialize)]
pub struct DamagedSummary {
    pub segment: String,
    pub error: String,
}

/// Reads every summary a differential or incremental of the repository's newest
/// full PostgreSQL set would use.
fn check_summaries(repo: &Repo, catalog: &[CatalogEntry]) -> Result<Option<SummaryCheck>> {
    let full = (catalog.iter().rev()).find(|e| {
        e.backup_type == crate::format::manifest::BackupType::Full
            && !e.damaged
            && e.source_kind == SourceKind::Postgres
    });
    let Some((tli, first)) = full.and_then(|f| Some((f.timeline?, f.start_wal.clone()?))) else {
        return Ok(None);
    };
    let mut c = SummaryCheck::default();
    for (name, _) in wal::all_archived(repo)? {
        let seg = pg::parse_name(&name);
        if !seg.is_some_and(|n| n.kind == pg::Kind::Segment && n.tli == tli) || name < first {
            continue;
        }
        match wal::summary::read(repo, &name) {
            Ok(Some(s)) => {
                c.checked += 1;
                c.old_rules += (s.rules < pg::walsummary::RULES) as usize;
            }
            Ok(None) => c.missing += 1,
            Err(e) => c.damaged.push(DamagedSummary {
                segment: name,
                error: format!("{e:#}"),
            }),
        }
    }
    Ok(Some(c))
}

/// A damaged archived segment, as verify reports it.
#[derive(Debug, Serialize)]
pub struct DamagedWal {
    pub segment: String,
    pub note: String,
    pub position: Position,
}

/// The repository's damaged segments against set `m`'s WAL (its start to its stop
/// segment); every one `before` for a set of no PostgreSQL WAL.
fn damaged_wal(repo: &Repo, m: &Manifest) -> Result<Vec<DamagedWal>> {
    let facts = PgFacts::from_extra(&m.extra).ok().flatten();
    let range = facts.map(|f| {
        let seg = f.wal_segment_size;
        let stop = f.stop.as_ref().map_or(f.start_lsn, |s| s.lsn);
        (f.timeline, f.start_lsn / seg, stop / seg, seg)
    });
    Ok((wal::damaged::list(repo)?.into_iter())
        .map(|d| DamagedWal {
            position: match range {
                Some((tli, first, last, seg)) => {
                    wal::damaged::position(&d.segment, tli, first, last, seg)
                }
                None => Position::Before,
            },
            segment: d.segment,
            note: d.note,
        })
        .collect())
}

pub fn verify(o: &VerifyOptions, show: Show) -> Result<VerifyReport> {
    let retries = retry_stats();
    let repo = open_repo(&o.read)?;
    let repo_sets = match &repo {
        Some((repo, catalog)) => every_set_authenticated(repo, catalog)?,
        None => None,
    };
    let (set, outside) = match &repo {
        Some((repo, catalog)) => {
            let e = match &o.read.set {
                Some(id) => chain::find(catalog, id),
                None => chain::newest(catalog),
            };
            let e = e.map_err(|e| with_history_hint(e, repo))?;
            let set = open_recorded(repo, e)?;
            crate::ops::authenticated_in(repo, e, &set.manifest)?;
            // Where a record sends a read out of the repository is said (a plain
            // repository's record may name any stripe).
            let outside = (e.stripes.iter())
                .filter(|s| !repo.inside(s))
                .map(|s| repo.stripe_path(s))
                .collect();
            (set, outside)
        }
        None => (set::open(&o.read.from, &o.read.store)?, vec![]),
    };
    let m = &set.manifest;
    check_source_facts(m)?;
    let damaged = match &repo {
        Some((repo, _)) => damaged_wal(repo, m)?,
        None => vec![],
    };
    let summaries = match &repo {
        Some((repo, catalog)) => check_summaries(repo, catalog)?,
        None => None,
    };
    let stale_visibility_map = crate::ops::vm_may_be_stale(m)
        || repo
            .as_ref()
            .is_some_and(|(_, catalog)| chain::stale_vm_sets(catalog).contains(&m.set_id));
    let mut params = engine_params(&o.read, &set);
    // Every header read is checked against the frame index too.
    params.use_index = true;
    let ids = regular_files(m);
    let progress = Arc::new(Progress::default());
    let shown = show(progress.clone(), "verify");
    let sums = Checksums::new(m, &ids);
    let out = restore::run(&set.stripes, &ids, &params, None, &progress, &|i, got| {
        sums.check(i, got)
    });
    drop(shown);
    let out = out.context("the backup set is damaged")?;
    let secs = out.wall.as_secs_f64();
    let notes = repo
        .as_ref()
        .map(|(r, _)| r.record_notes())
        .unwrap_or_default();
    Ok(VerifyReport {
        command: "verify",
        // The set read intact at its pinned versions; a stripe's name now holding
        // something else is a finding all the same.
        valid: set.overwritten.is_empty()
            && notes.is_empty()
            && !damaged.iter().any(|d| d.position == Position::Inside)
            && summaries.as_ref().is_none_or(|s| s.damaged.is_empty()),
        damaged_wal: damaged,
        summaries,
        stale_visibility_map,
        outside_repository: outside,
        overwritten: set.overwritten.clone(),
        records_overwritten: notes,
        set_id: m.set_id.clone(),
        damaged_flag: m.damaged,
        files: ids.len(),
        frames: out.frames,
        raw_bytes: out.raw_bytes,
        stored_bytes: out.stored_bytes,
        seconds: secs,
        mb_per_sec: mb_per_sec(out.raw_bytes, secs),
        waits: out.waits,
        object_store: retry_stats().since(retries),
        repo_sets_checked: repo_sets,
        pages: m.totals.pages,
    })
}

/// In an encrypted or signed repository, every recorded set must be encrypted or
/// signed with its key: each one's manifest is opened (its tag checked), and any that
/// is not fails the verify, named. Returns how many were checked (None in a plain
/// repository).
fn every_set_authenticated(repo: &Repo, catalog: &[CatalogEntry]) -> Result<Option<usize>> {
    let Some(k) = repo.protection() else {
        return Ok(None);
    };
    if repo.options().key.is_none() {
        bail!(
            "repository '{}' is {}: {} (key id {})",
            repo.describe(),
            k.mode.verb(),
            crate::crypt::load::GIVE_KEY,
            crate::crypt::show_id(&k.key_id)
        );
    }
    let bad: Vec<String> = catalog
        .iter()
        .filter_map(|e| {
            crate::ops::set_manifest(repo, e)
                .err()
                .map(|err| format!("set {}: {err:#}", e.set_id))
        })
        .collect();
    if !bad.is_empty() {
        bail!(
            "repository '{}' is {} (key id {}), and {} of its {} sets are not, or fail their check: {}",
            repo.describe(),
            k.mode.verb(),
            crate::crypt::show_id(&k.key_id),
            bad.len(),
            catalog.len(),
            bad.join("; ")
        );
    }
    Ok(Some(catalog.len()))
}

/// A PostgreSQL set's page size and facts (segment size, LSNs, WAL names ...), checked
/// as a restore relies on them.
pub(crate) fn check_source_facts(m: &Manifest) -> Result<()> {
    if m.source.kind != SourceKind::Postgres {
        return Ok(());
    }
    if !pg::valid_page_size(m.page_size as u64) {
        bail!(
            "set {}: page size {} is not one PostgreSQL is built with (a power of two from {} to {}): the set is damaged or forged",
            m.set_id,
            m.page_size,
            pg::BLCKSZ_MIN,
            pg::BLCKSZ_MAX
        );
    }
    PgFacts::from_extra(&m.extra).map_err(|e| {
        anyhow!(
            "set {}: its manifest's PostgreSQL facts: {e}: the set is damaged or forged",
            m.set_id
        )
    })?;
    Ok(())
}

/// Every file's checksum, recomputed from the frames, must match the manifest: the
/// restore engine's `Done` for a run over `ids` (`regular_files` of `m`).
pub(crate) struct Checksums<'a> {
    m: &'a Manifest,
    ids: &'a [FileIn],
    index: IdIndex,
}

impl<'a> Checksums<'a> {
    pub(crate) fn new(m: &'a Manifest, ids: &'a [FileIn]) -> Checksums<'a> {
        let index = IdIndex::new(m.files.iter().map(|f| f.id));
        Checksums { m, ids, index }
    }

    /// File `i` of `ids`, its checksum recomputed (or what is missing).
    pub(crate) fn check(&self, i: usize, got: Result<Checksum, String>) -> Result<()> {
        let id = self.ids[i].id;
        let k = (self.index.get(id)).ok_or_else(|| anyhow!("file {id} is not in the manifest"))?;
        let f = &self.m.files[k];
        match got {
            Err(e) => bail!("file '{}' is incomplete in the set: {e}", f.path),
            Ok(c) if Some(c) != f.checksum => bail!(
                "file '{}' does not match its manifest checksum (restored {}, expected {})",
                f.path,
                c,
                f.checksum.map(|c| c.to_string()).unwrap_or_default()
            ),
            Ok(_) => Ok(()),
        }
    }
}

/// The pipeline's parameters: sizes from the set's validated header, threads and
/// buffers as asked.
pub(crate) fn engine_params(o: &ReadOptions, set: &OpenSet) -> restore::Params {
    let threads = o.threads.unwrap_or_else(crate::engine::default_threads);
    restore::Params {
        transfer_size: set.manifest.transfer_size as usize,
        page_size: set.page_size(),
        block_size: set.block_size(),
        buffer_count: o
            .buffer_count
            .unwrap_or(set.stripes.len() * 4 + threads * 2),
        threads,
        write_depth: 0,
        hash: ContentHash::of_version(set.manifest.format_version),
        seal: set.seal.clone(),
        sign: set.sign.clone(),
        left_out: Default::default(),
        use_index: false,
    }
}

/// Every regular file: manifest id, size, whether sparse.
pub(crate) fn regular_files(m: &Manifest) -> Vec<FileIn> {
    let files = m.files.iter().filter(|f| f.kind == EntryKind::File);
    let mut v = Vec::with_capacity(files.clone().count());
    v.extend(files.map(|f| FileIn {
        id: f.id,
        size: f.size,
        sparse: f.sparse,
    }));
    v
}

/// The repository `repo` names and its catalog (None with `from`).
pub(crate) fn open_repo(o: &ReadOptions) -> Result<Option<(Repo, Vec<CatalogEntry>)>> {
    let Some(r) = &o.repo else {
        return Ok(None);
    };
    if !o.from.is_empty() {
        bail!("name either --from stripes or --repo, not both");
    }
    let repo = Repo::open(r, false, &o.store)?;
    let catalog = repo.catalog()?;
    Ok(Some((repo, catalog)))
}

/// Says where the sets are listed when a named one is not found.
pub(crate) fn with_history_hint(e: anyhow::Error, repo: &Repo) -> anyhow::Error {
    anyhow!(
        "{e:#}; `pagevault history --repo {}` lists them",
        repo.describe()
    )
}

/// A recorded set opened: every stripe at the version its record pins (if any).
pub(crate) fn open_recorded(repo: &Repo, e: &CatalogEntry) -> Result<OpenSet> {
    let (specs, pins) = repo.stripes_of(e);
    set::open_pinned(&specs, &pins, repo.options())
}
