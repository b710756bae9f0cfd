//! The union of consecutive summaries, and its query per relation fork.

use super::*;

/// What changed in one relation fork over a [`BlockMap`]'s range.
#[derive(Debug, PartialEq)]
pub struct Changed<'a> {
    /// Blocks modified (below the limit, if any).
    pub blocks: Option<&'a RoaringBitmap>,
    /// Created or truncated: every block from here on is new.
    pub limit: Option<u32>,
    /// Its database was created or dropped: read the whole file.
    pub whole: bool,
}

/// The union of consecutive summaries: what changed from `from` to `end`.
#[derive(Debug, Default)]
pub struct BlockMap {
    pub rels: HashMap<RelFork, Entry>,
    pub databases: BTreeSet<(u32, u32)>,
    /// Covered range: every record starting in [from, end).
    pub from: u64,
    pub end: u64,
    /// Why the union cannot be trusted (an unusable summary, a gap), if so.
    pub gaps: Vec<String>,
    /// The first summary made with rules older than [`walsummary::RULES`], if any: its
    /// visibility-map marks are not complete, so map forks are read whole.
    pub old_rules: Option<String>,
    added: usize,
    next_seg: u64,
}

impl BlockMap {
    pub fn new() -> BlockMap {
        BlockMap::default()
    }

    /// Adds the next summary, in WAL order: its limits drop earlier marks beyond them.
    pub fn add(&mut self, s: &Summary) {
        if self.added == 0 {
            self.from = s.covered_from;
        } else if s.seg_start != self.next_seg {
            self.gaps.push(format!(
                "{}: WAL from {} to {} is not summarized",
                s.segment,
                crate::pg::format_lsn(self.next_seg),
                crate::pg::format_lsn(s.seg_start)
            ));
        }
        self.next_seg = s.seg_end;
        // The first summary may start at its first record boundary: the range starts there.
        let head_only_first = self.added == 0 && s.flags & UNUSABLE == HEAD_SKIPPED;
        if !s.usable() && !head_only_first {
            self.gaps.push(format!("{}: {}", s.segment, s.note));
        }
        if s.rules < walsummary::RULES && self.old_rules.is_none() {
            self.old_rules = Some(s.segment.clone());
        }
        self.added += 1;
        self.end = s.end;
        self.databases.extend(s.databases.iter().copied());
        for (k, e) in &s.rels {
            let m = self.rels.entry(*k).or_default();
            if let Some(l) = e.limit {
                m.set_limit(l);
            }
            m.blocks |= &e.blocks;
        }
    }

    /// Whether every record in [from, end) is summarized by usable summaries.
    pub fn complete(&self) -> bool {
        self.added > 0 && self.gaps.is_empty()
    }

    /// What changed in fork `fork` of relation file `file`.
    pub fn changed(&self, file: RelFile, fork: u8) -> Changed<'_> {
        let e = self.rels.get(&RelFork { file, fork });
        Changed {
            blocks: e.map(|e| &e.blocks),
            limit: e.and_then(|e| e.limit),
            whole: self.databases.contains(&(file.spc, file.db)),
        }
    }

    /// Whether block `block` of the fork may have changed: marked, at or past a limit,
    /// or in a database created or dropped.
    pub fn may_have_changed(&self, file: RelFile, fork: u8, block: u32) -> bool {
        let c = self.changed(file, fork);
        c.whole
            || c.limit.is_some_and(|l| block >= l)
            || c.blocks.is_some_and(|b| b.contains(block))
    }
}

/// The union of the summaries of timeline `tli`'s segments holding `from`..=`to`.
/// Missing or refused summaries are gaps in it (see [`BlockMap::complete`]).
pub fn block_map(repo: &Repo, tli: u32, from: u64, to: u64, seg_size: u64) -> Result<BlockMap> {
    archived_map(repo, tli, from / seg_size, to / seg_size + 1, seg_size)
}

/// [`block_map`] from `from` to the end of `live`, the summary of a segment the
/// server still writes ([`summarize_live`]): archived summaries up to it, then it.
pub fn block_map_until(
    repo: &Repo,
    tli: u32,
    from: u64,
    live: &Summary,
    seg_size: u64,
) -> Result<BlockMap> {
    let last = live.seg_start / seg_size;
    let mut m = archived_map(repo, tli, from / seg_size, last, seg_size)?;
    m.add(live);
    Ok(m)
}

/// The union of the archived summaries of segments `first..end` (numbers).
fn archived_map(repo: &Repo, tli: u32, first: u64, end: u64, seg_size: u64) -> Result<BlockMap> {
    if !valid_seg_size(seg_size) {
        bail!("{seg_size} is not a WAL segment size PostgreSQL uses");
    }
    let mut m = BlockMap::new();
    for segno in first..end {
        let name = segment_name_for(tli, segno, seg_size);
        match read(repo, &name) {
            Ok(Some(s)) => m.add(&s),
            Ok(None) => m.gaps.push(format!("{name}: no block summary")),
            Err(e) => m.gaps.push(format!("{e:#}")),
        }
    }
    Ok(m)
}
