//! The sets a restore reads, every one opened and checked before anything is written,
//! and the chain written in one pass: the newest set first, each page of a restored
//! file written once, from the newest set that holds it (`engine::restore::layers`).

use super::super::verify::{
    check_source_facts, engine_params, open_recorded, open_repo, regular_files, with_history_hint,
    Checksums,
};
use super::{run_into, LeftOut, Phases, RestoreOptions};
use crate::engine::restore::layers::{LayerSink, Written};
use crate::engine::restore::merge::{ChunkOut, MergeSink};
use crate::engine::restore::FrameSink;
use crate::engine::restore::{self, Outcome};
use crate::engine::stats::{Live, Progress};
use crate::format::manifest::{BackupType, EntryKind, Manifest};
use crate::ops::verify::Show;
use crate::repo::many::RepoStore;
use crate::repo::{chain, CatalogEntry, Repo};
use crate::set::read::{self as set, OpenSet};
use crate::target::Target;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One set of the chain: its catalog record (None with stripes named) and its stripes.
pub(super) struct Link {
    pub entry: Option<CatalogEntry>,
    pub set: OpenSet,
}

/// The sets a restore reads, oldest first: a full set, then the differentials and
/// incrementals over it (from a repository).
pub(super) struct Sets {
    pub repo: Option<Repo>,
    pub links: Vec<Link>,
    /// The other repositories, in order, after the one the chain comes from.
    pub others: Vec<RepoStore>,
    /// The repositories passed over before it, and why.
    pub passed_over: Vec<String>,
}

impl Sets {
    pub fn full(&self) -> &OpenSet {
        &self.links[0].set
    }

    /// The newest set: its file list, sizes and facts are the restored cluster's.
    pub fn newest(&self) -> &Link {
        self.links.last().expect("a chain holds its full set")
    }
}

/// Chooses the chain and opens every stripe of every set (headers, tails, manifests).
pub(super) fn open_sets(o: &RestoreOptions) -> Result<Sets> {
    let sel = chain::Selector::parse(
        o.read.set.as_deref(),
        o.until.as_deref(),
        o.until_lsn.as_deref(),
    )?;
    let sets = match &o.read.repo {
        Some(_) => {
            let (all, i, (repo, links), passed_over) = first_holding(o, &sel)?;
            let mut others = all;
            others.remove(i);
            Sets {
                repo: Some(repo),
                links,
                others,
                passed_over,
            }
        }
        None => Sets {
            repo: None,
            links: vec![Link {
                entry: None,
                set: set::open(&o.read.from, &o.read.store)?,
            }],
            others: vec![],
            passed_over: vec![],
        },
    };
    check_links(&sets.links)?;
    Ok(sets)
}

/// Every repository named (`--repo`, then the fallbacks), the place of the first holding
/// the chain `sel` picks with that chain opened, and those passed over before it, why.
#[allow(clippy::type_complexity)]
fn first_holding(
    o: &RestoreOptions,
    sel: &chain::Selector,
) -> Result<(Vec<RepoStore>, usize, (Repo, Vec<Link>), Vec<String>)> {
    let first = o.read.repo.as_deref().unwrap_or_default();
    let all: Vec<RepoStore> = std::iter::once(RepoStore::new(first, &o.read.store))
        .chain(o.read.fallback.iter().cloned())
        .collect();
    crate::repo::many::refuse_repeats(&crate::repo::many::specs(&all))?;
    let mut passed_over = vec![];
    for (i, r) in all.iter().enumerate() {
        let spec = &r.spec;
        match chain_in(o, r, sel) {
            Ok(x) => return Ok((all, i, x, passed_over)),
            Err(e) if i + 1 == all.len() => {
                let before = passed_over.join("; ");
                return Err(match passed_over.is_empty() {
                    true => e,
                    false => e.context(format!("{before}; and {spec}")),
                });
            }
            Err(e) => passed_over.push(format!("passed over {spec}: {e:#}")),
        }
    }
    unreachable!("the last repository returns")
}

/// The repository a restore with `o` takes its chain from (its place among `--repo`
/// and the fallbacks) and those it passes over, why: what `drill` restores from.
pub fn chain_repository(o: &RestoreOptions) -> Result<(usize, Vec<String>)> {
    let sel = chain::Selector::parse(
        o.read.set.as_deref(),
        o.until.as_deref(),
        o.until_lsn.as_deref(),
    )?;
    let (_, i, _, passed_over) = first_holding(o, &sel)?;
    Ok((i, passed_over))
}

/// The chain `sel` picks in repository `spec`, every set of it opened and checked.
fn chain_in(o: &RestoreOptions, r: &RepoStore, sel: &chain::Selector) -> Result<(Repo, Vec<Link>)> {
    let read = crate::ops::verify::ReadOptions {
        repo: Some(r.spec.clone()),
        store: r.store.clone(),
        ..o.read.clone()
    };
    let (repo, catalog) = open_repo(&read)?.expect("a repository named");
    let c = chain::select(&catalog, sel).map_err(|e| with_history_hint(e, &repo))?;
    let mut links = vec![];
    for e in c.links {
        let set =
            open_recorded(&repo, &e).with_context(|| format!("set {} of the chain", e.set_id))?;
        crate::ops::authenticated_in(&repo, &e, &set.manifest)?;
        links.push(Link {
            entry: Some(e),
            set,
        });
    }
    Ok((repo, links))
}

/// Each set must be the one its record names, the first a full, and all of one source
/// with one page size.
fn check_links(links: &[Link]) -> Result<()> {
    let first = &links[0].set.manifest;
    if first.backup_type != BackupType::Full {
        bail!("set {} is a {}: it holds only changed pages; restore it with --repo (and --set {}) so its base chain is restored with it", first.set_id, match first.backup_type { BackupType::Incr => "incremental", _ => "differential" }, first.set_id);
    }
    for l in links {
        let m = &l.set.manifest;
        check_source_facts(m)?;
        if let Some(e) = &l.entry {
            if m.set_id != e.set_id || m.backup_type != e.backup_type {
                bail!(
                    "set {}: its stripes hold {} set {}, not the {} the catalog records",
                    e.set_id,
                    m.backup_type,
                    m.set_id,
                    e.backup_type
                );
            }
        }
        let same = m.source.kind == first.source.kind
            && m.source.identity == first.source.identity
            && l.set.page_size() == links[0].set.page_size();
        if !same {
            bail!(
                "set {} is not of the source (or page size) of full set {}: the chain is broken",
                m.set_id,
                first.set_id
            );
        }
    }
    Ok(())
}

/// What one set of the chain gave the restore (`restore --json`'s `chain`).
#[derive(Debug, Clone, Serialize)]
pub struct LinkReport {
    pub set_id: String,
    pub backup_type: BackupType,
    pub frames: u64,
    /// Stored bytes read from its stripes.
    pub read_bytes: u64,
    /// Raw bytes its frames hold.
    pub raw_bytes: u64,
    /// Bytes it supplied to the restored files.
    pub written_bytes: u64,
    /// Pages of its frames a newer set supplied (or dropped, or cut).
    pub skipped_pages: u64,
    /// Bytes of its chunks a delta restore found in place by digest: neither
    /// decompressed nor written.
    pub held_bytes: u64,
}

/// Writes the chain into `target` (laid out from the newest set), newest set first;
/// every set's frames and file checksums are checked. Returns the outcome of all sets
/// (waits and pool of the largest) and what each gave, oldest first.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_chain(
    sets: &Sets,
    o: &RestoreOptions,
    left_out: Option<&LeftOut>,
    target: &Target,
    merge: Option<&dyn ChunkOut>,
    live: &Arc<Live>,
    show: Show,
    phases: &mut Phases,
) -> Result<(Outcome, Vec<LinkReport>)> {
    let newest = &sets.newest().set.manifest;
    let page = sets.full().page_size() as u64;
    let last = sets.links.len() - 1;
    // A set restored alone with no delta has nothing to layer: no page is tracked.
    let layered = last > 0 || o.delta;
    let restored = (newest.files.iter())
        .filter(|f| layered && f.kind == EntryKind::File)
        .map(|f| (f.id, f.size));
    let written = Written::new(restored, page)?;
    // Older sets' files are mapped to the restored ones by path; the newest set's ids
    // are the restored files' own.
    let by_path: HashMap<&str, u32> = match last {
        0 => HashMap::new(),
        _ => (newest.files.iter())
            .filter(|f| f.kind == EntryKind::File)
            .map(|f| (&*f.path, f.id))
            .collect(),
    };
    let mut total: Option<Outcome> = None;
    let mut reports = vec![];
    for (n, link) in sets.links.iter().rev().enumerate() {
        let m = &link.set.manifest;
        let map = |m: &Manifest| -> HashMap<u32, u32> {
            (m.files.iter())
                .filter_map(|f| Some((f.id, *by_path.get(&*f.path)?)))
                .collect()
        };
        // A merge's full: its chunks, with the newer sets' pages, go to the new set.
        let merging = merge.filter(|_| n == last && n > 0).map(|out| {
            let t = m.transfer_size as u64;
            MergeSink::new(out, target, &written, map(m), t)
        });
        let sink = match n {
            0 if !layered => LayerSink::alone(target),
            0 => LayerSink::same_ids(target, &written),
            _ => LayerSink::new(target, &written, map(m)),
        };
        let into: &dyn FrameSink = match &merging {
            Some(m) => m,
            None => &sink,
        };
        let progress = Arc::new(Progress {
            live: live.clone(),
            ..Progress::default()
        });
        let mut ids = regular_files(m);
        let mut params = engine_params(&o.read, &link.set);
        params.write_depth = o.write_depth(params.threads);
        if o.read.buffer_count.is_none() {
            // A buffer queued for each writer, and one each is writing.
            params.buffer_count += 2 * params.write_depth;
        }
        // Frames are stepped over: the index spares reading their headers.
        params.use_index = left_out.is_some() || o.delta_wal;
        if let Some(l) = left_out {
            let skip = l.ids(m);
            ids.retain(|f| !skip.contains(&f.id));
            params.left_out = Arc::new(skip);
        }
        let shown = show(progress.clone(), "restore");
        let sums = Checksums::new(m, &ids);
        let done = |i, got| sums.check(i, got);
        // The newest set's run creates the files (all of them, at the newest sizes).
        let out = match n {
            0 => run_into(
                &link.set, &ids, &params, target, into, &progress, &done, phases,
            ),
            _ => restore::run(
                &link.set.stripes,
                &ids,
                &params,
                Some(into),
                &progress,
                &done,
            ),
        };
        drop(shown);
        let out = out
            .and_then(|out| {
                // What the full held no frame of, once its frames all checked.
                if let Some(m) = &merging {
                    m.finish()?;
                }
                Ok(out)
            })
            .with_context(|| format!("set {} ({})", m.set_id, m.backup_type))?;
        let mut out = out;
        for d in &mut out.unneeded_damage {
            *d = format!("set {} ({}): {d}", m.set_id, m.backup_type);
        }
        if n > 0 {
            phases.mark("read, check and write older sets");
        }
        reports.push(link_report(m, &out, &sink));
        total = Some(match total {
            None => out,
            Some(t) => add(t, out),
        });
    }
    reports.reverse();
    if o.delta {
        // A fresh file reads as zeros where no set wrote; a file kept in place must.
        for (id, r) in written.unwritten_ranges() {
            target
                .write_zeros(id, r.start, (r.end - r.start) as usize)
                .with_context(|| format!("--delta: cannot zero file {id} at {}", r.start))?;
        }
    }
    Ok((total.expect("a chain holds its full set"), reports))
}

fn link_report(m: &Manifest, out: &Outcome, sink: &LayerSink) -> LinkReport {
    LinkReport {
        set_id: m.set_id.clone(),
        backup_type: m.backup_type,
        frames: out.frames,
        read_bytes: out.stored_bytes,
        raw_bytes: out.raw_bytes,
        written_bytes: sink.stats.written_bytes.load(Relaxed),
        skipped_pages: sink.stats.skipped_pages.load(Relaxed),
        held_bytes: sink.stats.held_bytes.load(Relaxed),
    }
}

/// Two sets' outcomes as one: counts added; the waits and pool of the larger run.
fn add(a: Outcome, b: Outcome) -> Outcome {
    let (big, small) = if b.raw_bytes > a.raw_bytes {
        (b, a)
    } else {
        (a, b)
    };
    Outcome {
        raw_bytes: big.raw_bytes + small.raw_bytes,
        stored_bytes: big.stored_bytes + small.stored_bytes,
        frames: big.frames + small.frames,
        wall: big.wall + small.wall,
        waits: big.waits,
        pool_bytes: big.pool_bytes.max(small.pool_bytes),
        left_out_bytes: big.left_out_bytes + small.left_out_bytes,
        proven_bytes: big.proven_bytes + small.proven_bytes,
        partial_frames: big.partial_frames + small.partial_frames,
        unneeded_damage: [big.unneeded_damage, small.unneeded_damage].concat(),
    }
}
