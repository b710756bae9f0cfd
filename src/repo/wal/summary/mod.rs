//! Block summaries (issue 21): which blocks of which relation forks the records of one
//! archived segment change, stored beside it as `NAME.sum` (layout in docs/FORMAT.md),
//! and [`BlockMap`], their union over a range of segments.
//!
//! A summary covers the records that end in its segment: with the previous segment's
//! summary at hand, also the record continued from it (its first bytes, the carry, are
//! stored in that summary). Without it, the bytes up to the first record boundary are
//! not covered and the summary says so.

use super::*;
use crate::pg::walrecord::{continued_record, walk_segment, Carry, Head, RelFile};
use crate::pg::walsummary::{self, Changes};
use roaring::RoaringBitmap;
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod codec;
mod map;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub use map::*;

/// Suffix of a summary beside its segment (`wal/TTTTTTTT/NAME.sum`).
pub const SUFFIX: &str = ".sum";
/// The unfinished record's bytes kept for the next segment; a larger one is not kept
/// (the next summary's head is then not covered).
pub const CARRY_MAX: usize = 64 << 20;

const MAGIC: &[u8; 8] = b"PVWALSUM";
/// The stored form's version is the version of the rules that made it
/// ([`walsummary::RULES`]): 1 and 2 share one layout.
const VERSION: u16 = walsummary::RULES as u16;
const OLDEST_VERSION: u16 = 1;
const HDR: usize = 132;
/// Bounds checked before anything is allocated.
const BODY_MAX: u64 = 1 << 30;
pub const FILE_MAX: u64 = 1 << 30;
const NOTE_MAX: usize = 4096;
const ZSTD_LEVEL: i32 = 1;

/// The bytes before the segment's first record boundary are not covered.
pub const HEAD_SKIPPED: u32 = 1 << 0;
/// Some of the segment's WAL was written at wal_level=minimal.
pub const MINIMAL: u32 = 1 << 1;
/// A record could not be decoded (the note says which): the rest is not covered.
pub const UNDECODED: u32 = 1 << 2;
/// WAL of a PostgreSQL release whose record layouts these rules do not know.
pub const UNSUPPORTED: u32 = 1 << 3;
/// wal_level was minimal at the segment's end (the next summary starts so).
pub const END_MINIMAL: u32 = 1 << 4;
/// The record unfinished at the end was too large to carry.
pub const CARRY_LOST: u32 = 1 << 5;
const UNUSABLE: u32 = HEAD_SKIPPED | MINIMAL | UNDECODED | UNSUPPORTED;
const KNOWN_FLAGS: u32 = (1 << 6) - 1;

/// A relation fork: its file and fork number (0 main, 2 visibility map, 3 init).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelFork {
    pub file: RelFile,
    pub fork: u8,
}

/// What changed in one relation fork.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// Created (0) or truncated to this many blocks: blocks from here on are new.
    pub limit: Option<u32>,
    pub blocks: RoaringBitmap,
}

impl Entry {
    /// A lower limit forgets the blocks marked at or past it (they were cut off); a
    /// limit not below the current one changes nothing (blkreftable.c's rule).
    fn set_limit(&mut self, limit: u32) {
        if self.limit.is_none_or(|l| limit < l) {
            self.limit = Some(limit);
            self.blocks.remove_range(limit..);
        }
    }
}

/// One segment's summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub segment: String,
    /// BLAKE3 of the segment's bytes: a summary is refused for any other segment.
    pub segment_blake3: [u8; 32],
    pub major: u32,
    /// The rules it was made with ([`walsummary::RULES`] for a new one).
    pub rules: u32,
    /// LSNs of the segment's first byte and of the byte after its last.
    pub seg_start: u64,
    pub seg_end: u64,
    /// Every record starting at or after this LSN and before `end` is summarized.
    pub covered_from: u64,
    /// Where the record left unfinished starts, else the segment's end.
    pub end: u64,
    pub flags: u32,
    /// Why the summary is not usable, when it is not.
    pub note: String,
    pub rels: BTreeMap<RelFork, Entry>,
    /// (tablespace, database) pairs created or dropped: read every file of them.
    pub databases: BTreeSet<(u32, u32)>,
    pub carry: Option<Carry>,
}

impl Summary {
    /// Usable for change tracking: the head covered, nothing at wal_level=minimal,
    /// every record decoded, a known release.
    pub fn usable(&self) -> bool {
        self.flags & UNUSABLE == 0
    }

    /// What PostgreSQL's log must show when a record of this complete segment could not
    /// be decoded: a recovery replaying it may stop there as if the WAL ended.
    pub fn damage(&self) -> Option<String> {
        (self.flags & UNDECODED != 0).then(|| {
            format!(
                "{} was archived as the server handed it over, but {}: a recovery that replays \
                 it stops there as if the WAL ended, unless PostgreSQL reads it; check the \
                 server's storage, and take a new full backup",
                self.segment, self.note
            )
        })
    }
}

/// The rules' output for one segment: entries in a Vec with an index, the last one
/// looked up kept (consecutive references mostly name the same fork).
#[derive(Default)]
struct Builder {
    entries: Vec<(RelFork, Entry)>,
    index: HashMap<RelFork, usize>,
    last: Option<(RelFork, usize)>,
    databases: BTreeSet<(u32, u32)>,
    minimal_now: bool,
    minimal_seen: bool,
}

impl Builder {
    fn entry(&mut self, key: RelFork) -> &mut Entry {
        let i = match self.last {
            Some((k, i)) if k == key => i,
            _ => {
                let n = self.entries.len();
                let i = *self.index.entry(key).or_insert(n);
                if i == n {
                    self.entries.push((key, Entry::default()));
                }
                self.last = Some((key, i));
                i
            }
        };
        &mut self.entries[i].1
    }
}

impl Changes for Builder {
    fn block(&mut self, file: RelFile, fork: u8, block: u32) {
        self.entry(RelFork { file, fork }).blocks.insert(block);
    }
    fn limit(&mut self, file: RelFile, fork: u8, limit: u32) {
        self.entry(RelFork { file, fork }).set_limit(limit);
    }
    fn database(&mut self, spc: u32, db: u32) {
        self.databases.insert((spc, db));
    }
    fn wal_level_minimal(&mut self, minimal: bool) {
        self.minimal_now = minimal;
        self.minimal_seen |= minimal;
    }
}

/// Summarizes segment `name` (its bytes, `blcksz`-byte pages, WAL of PostgreSQL `major`).
/// `prev` is the previous segment's summary, if the archive holds it intact.
pub fn summarize(
    name: &str,
    blake3: [u8; 32],
    seg: &[u8],
    blcksz: usize,
    major: u32,
    prev: Option<&Summary>,
) -> Summary {
    let seg_start = get_u64(seg, 8);
    let seg_end = seg_start + seg.len() as u64;
    let mut s = Summary {
        segment: name.to_string(),
        segment_blake3: blake3,
        major,
        rules: walsummary::RULES,
        seg_start,
        seg_end,
        covered_from: seg_start,
        end: seg_end,
        flags: 0,
        note: String::new(),
        rels: BTreeMap::new(),
        databases: BTreeSet::new(),
        carry: None,
    };
    if !(walsummary::MIN_MAJOR..=walsummary::MAX_MAJOR).contains(&major) {
        s.flags |= UNSUPPORTED;
        s.note = format!(
            "WAL of PostgreSQL {major}: block summaries know the records of PostgreSQL {}-{}",
            walsummary::MIN_MAJOR,
            walsummary::MAX_MAJOR
        );
        return s;
    }
    // wal_level=minimal at the previous segment's end holds until a record says otherwise.
    let start_minimal = prev.is_some_and(|p| p.flags & END_MINIMAL != 0);
    let fresh = || Builder {
        minimal_now: start_minimal,
        minimal_seen: start_minimal,
        ..Builder::default()
    };
    let mut b = fresh();
    let mut failed: Option<String> = None;
    let carry = prev.and_then(|p| p.carry.as_ref());
    let walk = |carry: Option<&Carry>, b: &mut Builder, failed: &mut Option<String>| {
        walk_segment(seg, blcksz, carry, CARRY_MAX, |r| {
            if failed.is_none() {
                if let Err(e) = walsummary::summarize(major, r, b) {
                    *failed = Some(e);
                }
            }
        })
    };
    let mut res = walk(carry, &mut b, &mut failed);
    if res.is_err() && carry.is_some() {
        // A carry that does not complete a valid record (a foreign or stale summary):
        // summarize without it.
        b = fresh();
        failed = None;
        res = walk(None, &mut b, &mut failed).map(|mut w| {
            w.head = Head::Skipped;
            w
        });
    }
    match res {
        Ok(w) => {
            if w.head == Head::Skipped {
                s.flags |= HEAD_SKIPPED;
                s.covered_from = w.first_record.unwrap_or(seg_end);
                if s.note.is_empty() {
                    s.note = "the record continued from the previous segment is not covered \
                              (its summary is missing or does not continue it)"
                        .into();
                }
            }
            s.end = w.unfinished_at.unwrap_or(seg_end);
            if w.unfinished_at.is_some() && w.carry.is_none() {
                s.flags |= CARRY_LOST;
            }
            s.carry = w.carry;
        }
        Err(e) => {
            s.flags |= UNDECODED;
            s.note = e;
        }
    }
    if let Some(e) = failed {
        s.flags |= UNDECODED;
        s.note = e;
    }
    if b.minimal_seen {
        s.flags |= MINIMAL;
        s.note = "WAL written at wal_level=minimal does not log every change".into();
    }
    if b.minimal_now {
        s.flags |= END_MINIMAL;
    }
    s.databases = b.databases;
    s.rels = b.entries.into_iter().collect();
    s
}

/// Completes `s`, the summary of `seg` made without its previous segment's (as the
/// segments of a batch are summarized at once), with `prev`, that one: the same summary
/// as [`summarize`] with `prev` gives. The record continued from `prev` is merged in;
/// where a merge could differ from a walk in order (a limit or wal_level in that record,
/// wal_level=minimal before it, anything not decoded), the segment is summarized again.
pub fn continue_from(s: Summary, seg: &[u8], blcksz: usize, prev: &Summary) -> Summary {
    let again = |s: &Summary| {
        summarize(
            &s.segment,
            s.segment_blake3,
            seg,
            blcksz,
            s.major,
            Some(prev),
        )
    };
    if prev.flags & END_MINIMAL != 0 {
        return again(&s);
    }
    // The head is covered already, or nothing can cover it: the walk is the same.
    let Some(carry) = prev.carry.as_ref().filter(|_| s.flags & HEAD_SKIPPED != 0) else {
        return s;
    };
    if s.flags & !(HEAD_SKIPPED | CARRY_LOST) != 0 {
        return again(&s);
    }
    let mut h = Builder::default();
    let mut failed = false;
    let done = continued_record(seg, blcksz, carry, |r| {
        failed |= walsummary::summarize(s.major, r, &mut h).is_err();
    });
    if done != Ok(true)
        || failed
        || h.minimal_seen
        || h.entries.iter().any(|(_, e)| e.limit.is_some())
    {
        return again(&s);
    }
    let mut s = s;
    // The record came first: what a later limit cut off is forgotten.
    for (k, e) in h.entries {
        let t = s.rels.entry(k).or_default();
        let mut add = e.blocks;
        if let Some(l) = t.limit {
            add.remove_range(l..);
        }
        t.blocks |= add;
    }
    s.databases.extend(h.databases);
    s.flags &= !HEAD_SKIPPED;
    s.covered_from = s.seg_start;
    s.note.clear();
    s
}

/// The summary of segment `name` while the server still writes it: `seg` holds its
/// records up to `upto` and zeros after ([`crate::pg::walpage::live_head`]). It covers
/// the records starting before `upto`; it is never stored.
pub fn summarize_live(
    name: &str,
    seg: &[u8],
    blcksz: usize,
    major: u32,
    prev: Option<&Summary>,
    upto: u64,
) -> Summary {
    let mut s = summarize(name, [0; 32], seg, blcksz, major, prev);
    s.end = s.end.min(upto);
    s.carry = None;
    s
}

/// Where the summary of segment `name` lives.
pub fn summary_rel(name: &str) -> Option<String> {
    let n = parse_name(name).filter(|n| n.kind == Kind::Segment)?;
    Some(format!("wal/{:08X}/{name}{SUFFIX}", n.tli))
}

fn refused(repo: &Repo, rel: &str, what: &str) -> anyhow::Error {
    anyhow!(
        "block summary '{}' is refused: {what}",
        repo.store().describe(rel)
    )
}

/// Reads and checks the summary of archived segment `name` as a raw file: its own
/// checks, and that it names `name`. None when absent.
fn read_unbound(repo: &Repo, name: &str) -> Result<Option<(String, Summary)>> {
    let rel = summary_rel(name).ok_or_else(|| anyhow!("'{name}' is not a WAL segment name"))?;
    let Some(b) = repo
        .store()
        .get(&rel, FILE_MAX + super::seal::overhead_max(FILE_MAX))?
    else {
        return Ok(None);
    };
    let b = match repo.wal_master(false)? {
        Some(m) => super::seal::open_bytes(&m, object_of(&rel), &b, FILE_MAX)
            .map_err(|m| refused(repo, &rel, &m))?,
        None => match super::Envelope::of(&b) {
            Some(e) => return Err(refused(repo, &rel, &unkeyed(repo, e, &b))),
            None => b,
        },
    };
    let s = Summary::decode(&b).map_err(|m| refused(repo, &rel, &m))?;
    if s.segment != name {
        return Err(refused(
            repo,
            &rel,
            &format!("it summarizes {}, not {name}", s.segment),
        ));
    }
    Ok(Some((rel, s)))
}

/// The summary of archived segment `name`, checked: intact, and of the segment the
/// archive holds under that name (the BLAKE3 in the segment's archive header). None
/// when there is no summary; an error names the file and what is wrong.
pub fn read(repo: &Repo, name: &str) -> Result<Option<Summary>> {
    let Some((rel, s)) = read_unbound(repo, name)? else {
        return Ok(None);
    };
    let seg_rel = archived_rel(name).expect("a segment name");
    let master = repo.wal_master(false)?;
    let want = match master {
        Some(_) => super::seal::HEAD_FETCH,
        None => HDR_LEN as u64,
    };
    let head = repo.store().get_head(&seg_rel, want)?;
    let head = match (head, &master) {
        (Some(h), None) if super::Envelope::of(&h).is_some() => {
            let e = super::Envelope::of(&h).expect("an envelope");
            let m = unkeyed(repo, e, &h);
            return Err(refused(
                repo,
                &rel,
                &format!("its segment's archived copy: {m}"),
            ));
        }
        (Some(h), Some(m)) => Some(
            super::seal::open_head(m, object_of(&seg_rel), &h, HDR_LEN)
                .map_err(|e| refused(repo, &rel, &format!("its segment's archived copy: {e}")))?,
        ),
        (h, _) => h,
    };
    let Some(head) = head else {
        return Err(refused(
            repo,
            &rel,
            &format!("the archive does not hold its segment {name}"),
        ));
    };
    let hdr = Header::decode(&head).map_err(|m| {
        refused(
            repo,
            &rel,
            &format!("its segment's archived copy is damaged: {m}"),
        )
    })?;
    if hdr.blake3 != s.segment_blake3 {
        return Err(refused(
            repo,
            &rel,
            &format!(
                "it summarizes a segment with BLAKE3 {}, but the archived {name} has BLAKE3 {}",
                &hex::encode(s.segment_blake3)[..16],
                &hex::encode(hdr.blake3)[..16]
            ),
        ));
    }
    Ok(Some(s))
}

/// The previous segment's summary for a push of `name`, when one can be used: intact
/// and of that name. Its carry is checked by the continued record's own CRC32C. A new
/// timeline's first segment continues its parent's WAL: the previous segment is then
/// the parent's, as the timeline's archived history file says.
pub(super) fn previous(repo: &Repo, name: &str, seg_size: u64) -> Option<Summary> {
    let (tli, segno) = crate::pg::parse_segment_name(name, seg_size)?;
    let prev = segno.checked_sub(1)?;
    let read = |t: u32| {
        read_unbound(repo, &segment_name_for(t, prev, seg_size))
            .ok()
            .flatten()
            .map(|(_, s)| s)
    };
    if let Some(s) = read(tli) {
        return Some(s);
    }
    let text = read_history(repo, tli).ok().flatten()?;
    let spans = crate::pg::history::parse(tli, Some(&text)).ok()?;
    let parent = crate::pg::history::timeline_of_segment(&spans, prev, seg_size);
    (parent != tli).then(|| read(parent)).flatten()
}

/// Writes the summary of a segment just archived (or found archived without one);
/// a damaged segment's marker first, so no reader sees an UNDECODED summary without it.
pub(super) fn store(repo: &Repo, s: &Summary) -> Result<()> {
    super::damaged::write(repo, s)?;
    let rel = summary_rel(&s.segment).expect("a segment name");
    let bytes = match repo.wal_master(false)? {
        Some(m) => super::seal::seal_bytes(&m, object_of(&rel), &s.encode()),
        None => s.encode(),
    };
    if repo.immutable().is_some() {
        // Never rewritten: one stored before stays (a reader counts it a gap if unfit).
        return repo.store().put_new(&rel, &bytes).map(|_| ());
    }
    repo.store().put(&rel, &bytes)
}

/// Why an envelope cannot be read without a key.
fn unkeyed(repo: &Repo, e: super::Envelope, b: &[u8]) -> String {
    match (e, repo.signing()) {
        (super::Envelope::Sign, Some(_)) => format!(
            "it is signed with key id {}, and no key was given to check it: {}",
            super::seal::key_id_of(b).unwrap_or_default(),
            crate::crypt::load::GIVE_KEY
        ),
        _ => format!("it is {}, but its repository is not", e.word()),
    }
}

/// The object name an archived file is sealed under: its file name.
fn object_of(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// Whether a push of an already archived segment should (re)write its summary: none
/// intact of this segment is stored, or it left the head uncovered and the previous
/// segment's summary is there now.
pub(super) fn wanted(repo: &Repo, name: &str, blake3: &[u8; 32], seg_size: u64) -> bool {
    if repo.immutable().is_some() {
        let rel = summary_rel(name).expect("a segment name");
        return !repo.store().exists(&rel).unwrap_or(true);
    }
    match read_unbound(repo, name) {
        Ok(Some((_, s))) if &s.segment_blake3 == blake3 => {
            s.rules < walsummary::RULES
                || s.flags & HEAD_SKIPPED != 0 && previous(repo, name, seg_size).is_some()
        }
        _ => true,
    }
}

/// Removes the summary of segment `name`, if any (retention).
pub fn remove(repo: &Repo, name: &str) -> Result<()> {
    match summary_rel(name) {
        Some(rel) => repo.store().delete(&rel),
        None => Ok(()),
    }
}
