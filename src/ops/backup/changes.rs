//! Which pages a differential or incremental reads. When the block summaries beside the
//! archived WAL cover everything from the base's start to this backup's, only the pages
//! they list are read (and every page from a limit on, and whole files of a database
//! created or dropped); otherwise every page of the base's relation files is read and
//! those whose LSN moved are kept (the LSN scan). A file the map cannot speak for is
//! never skipped: it is read whole.

use crate::engine::backup::ReadFile;
use crate::pg::facts::PgFacts;
use crate::pg::page::{RelPath, FSM_FORK, INIT_FORK, MAIN_FORK, RELSEG_SIZE, VM_FORK};
use crate::pg::walrecord::RelFile;
use crate::pg::walsummary;
use crate::pg::{format_lsn, segment_name};
use crate::repo::wal::summary::{self, BlockMap};
use crate::repo::Repo;
use crate::source::SourceFile;
use roaring::RoaringBitmap;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the changed pages were found (the report's `change_map`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum ChangeMap {
    /// From the block summaries of `segments` archived WAL segments.
    Summaries {
        segments: u64,
        /// The last segment (this backup's start) summarized from the server's copy
        /// up to the start, not from the archive.
        live: bool,
        /// Relation files read page by page, and the pages listed for them.
        sparse_files: u64,
        listed_pages: u64,
        /// Why visibility-map forks were read whole, when they were: a summary in the
        /// range was made with older rules.
        #[serde(skip_serializing_if = "Option::is_none")]
        vm_read_whole: Option<String>,
    },
    /// Every page read; `reason` says why the summaries could not be used.
    LsnScan { reason: String },
}

/// What the plan is measured against: the base set's start and timeline, and the
/// paths it holds.
pub struct Base<'a> {
    pub start_lsn: u64,
    pub timeline: u32,
    pub files: &'a HashSet<String>,
}

/// Plans the pages of every base relation file in `plan` from the summaries since
/// `base`'s start up to `now`'s. With `live` (the segment holding `now`'s start as the
/// server wrote it up to there), the archived summaries before that segment and the
/// live one's; else the archived summaries up to that segment's, waited for (up to
/// `wait`). Files left with `pages: None` are read whole.
pub fn plan_pages(
    repo: &Repo,
    base: &Base,
    now: &PgFacts,
    live: Option<(String, Vec<u8>)>,
    entries: &[SourceFile],
    plan: &mut [ReadFile],
    wait: Duration,
) -> ChangeMap {
    let scan = |reason: String| ChangeMap::LsnScan { reason };
    if now.timeline != base.timeline {
        return scan(format!(
            "the base is of timeline {}, the server is on {}: summaries are followed on one timeline",
            base.timeline, now.timeline
        ));
    }
    if now.start_lsn < base.start_lsn {
        return scan("the server's WAL position is before the base's start".into());
    }
    let seg = now.wal_segment_size;
    let start_seg = segment_name(now.timeline, now.start_lsn, seg);
    let live = live.filter(|(name, _)| *name == start_seg);
    let segno = now.start_lsn / seg;
    // The last archived segment wanted: the one before the live one, or the start's.
    let wanted = match &live {
        Some(_) if segno == base.start_lsn / seg => None,
        Some(_) => Some(segment_name(now.timeline, now.start_lsn - seg, seg)),
        None => Some(start_seg.clone()),
    };
    let t0 = Instant::now();
    // The last archived summary wanted, once there (the live segment continues it).
    let mut last = None;
    while let Some(name) = &wanted {
        match summary::read(repo, name) {
            Ok(Some(s)) => {
                last = Some(s);
                break;
            }
            Ok(None) => {}
            Err(e) => return scan(format!("{e:#}")),
        }
        if t0.elapsed() > wait {
            return scan(format!(
                "WAL segment {name} (before this backup's start, {}) was not archived with its block summary within {} s",
                format_lsn(now.start_lsn),
                wait.as_secs()
            ));
        }
        // pg_backup_start switched segments just now: the archiver takes milliseconds
        // to tens of, so look often at first.
        let ms = (2 + t0.elapsed().as_millis() as u64 / 10).min(50);
        std::thread::sleep(Duration::from_millis(ms));
    }
    let from_server = live.is_some();
    let map = match live {
        Some((name, mut bytes)) => live_map(repo, base, now, last.as_ref(), &name, &mut bytes),
        None => summary::block_map(repo, now.timeline, base.start_lsn, now.start_lsn, seg),
    };
    let map = match map {
        Ok(m) => m,
        Err(e) => return scan(format!("{e:#}")),
    };
    if !map.complete() {
        let first = map.gaps.first().cloned().unwrap_or_default();
        return scan(format!(
            "the block summaries have {} gap(s): {first}",
            map.gaps.len()
        ));
    }
    let segments = now.start_lsn / seg - base.start_lsn / seg + 1;
    let vm_read_whole = map.old_rules.as_ref().map(|name| {
        format!(
            "the block summary of {name} was made by rules {} (before visibility-map pages were \
             marked for every heap change): visibility-map forks are read whole",
            walsummary::RULES - 1
        )
    });
    let (mut sparse_files, mut listed_pages) = (0, 0);
    for f in plan.iter_mut() {
        let e = &entries[f.id as usize];
        if let Some(pages) = file_pages(&map, base, &e.rel_path, f.size) {
            sparse_files += 1;
            listed_pages += pages.len();
            f.pages = Some(Arc::new(pages));
        }
    }
    ChangeMap::Summaries {
        segments,
        live: from_server,
        sparse_files,
        listed_pages,
        vm_read_whole,
    }
}

/// The summaries from `base`'s start: archived ones, then the live segment's up to
/// `now`'s start.
/// `prev`: the previous segment's summary, when read (its unfinished record
/// continues into the live one).
fn live_map(
    repo: &Repo,
    base: &Base,
    now: &PgFacts,
    prev: Option<&summary::Summary>,
    name: &str,
    bytes: &mut Vec<u8>,
) -> anyhow::Result<BlockMap> {
    let info = crate::pg::walpage::live_head(name, bytes, now.start_lsn)
        .map_err(|m| anyhow::anyhow!("the server's copy of {name}: {m}"))?;
    let seg = now.wal_segment_size;
    // When the base starts in the live segment too, its predecessor was not waited
    // for: its summary, if archived, still gives the carry.
    let read_prev;
    let prev = match prev {
        Some(p) => Some(p),
        None if now.start_lsn / seg > 0 => {
            read_prev = summary::read(repo, &segment_name(now.timeline, now.start_lsn - seg, seg))
                .ok()
                .flatten();
            read_prev.as_ref()
        }
        None => None,
    };
    let major = now.version_num / 10000;
    let live = summary::summarize_live(
        name,
        bytes,
        info.blcksz as usize,
        major,
        prev,
        now.start_lsn,
    );
    summary::block_map_until(repo, now.timeline, base.start_lsn, &live, seg)
}

/// The pages (from the file's start) to read of one file, or None to read it whole:
/// a file the base does not hold, a non-relation file, a free space map or init fork.
fn file_pages(map: &BlockMap, base: &Base, rel_path: &str, size: u64) -> Option<RoaringBitmap> {
    if !base.files.contains(rel_path) {
        return None;
    }
    rel_pages(map, rel_path, size)
}

/// The pages (from the file's start) of relation file `rel_path` (`size` bytes) that
/// `map` says may have changed, or None when it cannot say: not a relation file, a
/// free space map or init fork (not WAL-logged page by page), or a visibility map
/// across a summary of older rules.
pub(crate) fn rel_pages(map: &BlockMap, rel_path: &str, size: u64) -> Option<RoaringBitmap> {
    let r = RelPath::parse(rel_path)?;
    if r.fork == FSM_FORK || r.fork == INIT_FORK {
        return None;
    }
    let blocks = size.div_ceil(crate::pg::page::BLCKSZ as u64) as u32;
    let first = r.first_block();
    let file = RelFile {
        spc: r.spc,
        db: r.db,
        rel: r.rel,
    };
    if r.fork == VM_FORK && map.old_rules.is_some() {
        return None;
    }
    let c = map.changed(file, r.fork);
    let mut pages = RoaringBitmap::new();
    if c.whole {
        // A database created or dropped: every page, whatever its LSN.
        pages.insert_range(0..blocks);
        return Some(pages);
    }
    let end = first + blocks.min(RELSEG_SIZE);
    if let Some(b) = c.blocks {
        pages.extend(b.range(first..end).map(|b| b - first));
    }
    if let Some(limit) = c.limit {
        // Created or truncated since the base: every page from the limit on is new.
        pages.insert_range(limit.max(first) - first..blocks);
    }
    debug_assert!(r.fork == MAIN_FORK || r.fork == VM_FORK);
    Some(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::wal::summary::testing::rel;

    fn paths(p: &[&str]) -> HashSet<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pages_follow_marks_limits_and_databases() {
        let files = paths(&["base/5/16384", "base/5/16384.1", "base/5/16384_fsm"]);
        let base = Base {
            start_lsn: 0,
            timeline: 1,
            files: &files,
        };
        let mut map = BlockMap::new();
        let k = summary::RelFork {
            file: rel(16384),
            fork: MAIN_FORK,
        };
        let e = map.rels.entry(k).or_default();
        e.blocks.extend([3u32, 9, RELSEG_SIZE + 2]);
        let gib = (RELSEG_SIZE as u64) * 8192;
        let p = |m: &BlockMap, path: &str, size: u64| file_pages(m, &base, path, size);
        assert_eq!(
            p(&map, "base/5/16384", gib)
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            [3, 9]
        );
        assert_eq!(
            p(&map, "base/5/16384.1", 5 * 8192)
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            [2]
        );
        assert_eq!(
            p(&map, "base/5/16384_fsm", 8192),
            None,
            "free space maps are read whole"
        );
        assert_eq!(
            p(&map, "base/5/99999", 8192),
            None,
            "a file new since the base is read whole"
        );
        assert_eq!(p(&map, "base/5/PG_VERSION", 3), None);
        // A limit: every page from it on, in the segment that holds it.
        map.rels.get_mut(&k).unwrap().limit = Some(RELSEG_SIZE + 1);
        assert_eq!(
            p(&map, "base/5/16384.1", 4 * 8192)
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // A database created or dropped: every page.
        map.databases.insert((1663, 5));
        assert_eq!(p(&map, "base/5/16384", 3 * 8192).unwrap().len(), 3);
    }

    #[test]
    fn visibility_maps_are_read_whole_across_a_summary_of_older_rules() {
        let files = paths(&["base/5/16384", "base/5/16384_vm"]);
        let base = Base {
            start_lsn: 0,
            timeline: 1,
            files: &files,
        };
        let mut map = BlockMap::new();
        let vm = summary::RelFork {
            file: rel(16384),
            fork: VM_FORK,
        };
        map.rels.entry(vm).or_default().blocks.insert(0);
        let got = file_pages(&map, &base, "base/5/16384_vm", 2 * 8192).unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), [0]);
        map.old_rules = Some("000000010000000000000003".into());
        assert_eq!(file_pages(&map, &base, "base/5/16384_vm", 2 * 8192), None);
        assert!(file_pages(&map, &base, "base/5/16384", 2 * 8192).is_some());
    }
}
