//! Block summaries (issue 21): which blocks of which relation forks the records of one
//! archived segment change, stored beside it as `NAME.sum` (layout in docs/FORMAT.md),
//! and [`BlockMap`], their union over a range of segments.
//!
//! A summary covers the records that end in its segment: with the previous segment's
//! summary at hand, also the record continued from it (its first bytes, the carry, are
//! stored in that summary). Without it, the bytes up to the first record boundary are
//! not covered and the summary says so.

use super::*;
use crate::pg::walrecord::{walk_segment, Carry, Head, RelFile};
use crate::pg::walsummary::{self, Changes};
use roaring::RoaringBitmap;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Suffix of a summary beside its segment (`wal/TTTTTTTT/NAME.sum`).
pub const SUFFIX: &str = ".sum";
/// The unfinished record's bytes kept for the next segment; a larger one is not kept
/// (the next summary's head is then not covered).
pub const CARRY_MAX: usize = 64 << 20;

const MAGIC: &[u8; 8] = b"PVWALSUM";
const VERSION: u16 = 1;
const HDR: usize = 132;
/// Bounds checked before anything is allocated.
const BODY_MAX: u64 = 1 << 30;
const FILE_MAX: u64 = 1 << 30;
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

/// Where the summary of segment `name` lives.
pub fn summary_rel(name: &str) -> Option<String> {
    let n = parse_name(name).filter(|n| n.kind == Kind::Segment)?;
    Some(format!("wal/{:08X}/{name}{SUFFIX}", n.tli))
}

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

impl Summary {
    /// The stored form: header, then the zstd-compressed body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4096);
        put_u64(&mut body, self.seg_start);
        put_u64(&mut body, self.seg_end);
        put_u64(&mut body, self.covered_from);
        put_u64(&mut body, self.end);
        put_u32(&mut body, self.flags);
        put_u32(&mut body, self.major);
        let note = &self.note.as_bytes()[..self.note.len().min(NOTE_MAX)];
        put_u32(&mut body, note.len() as u32);
        body.extend_from_slice(note);
        put_u32(&mut body, self.databases.len() as u32);
        for &(spc, db) in &self.databases {
            put_u32(&mut body, spc);
            put_u32(&mut body, db);
        }
        put_u32(&mut body, self.rels.len() as u32);
        for (k, e) in &self.rels {
            put_u32(&mut body, k.file.spc);
            put_u32(&mut body, k.file.db);
            put_u32(&mut body, k.file.rel);
            body.push(k.fork);
            body.push(e.limit.is_some() as u8);
            put_u32(&mut body, e.limit.unwrap_or(0));
            put_u32(&mut body, e.blocks.serialized_size() as u32);
            e.blocks
                .serialize_into(&mut body)
                .expect("writing to a Vec");
        }
        match &self.carry {
            Some(c) => {
                body.push(1);
                put_u64(&mut body, c.lsn);
                put_u32(&mut body, c.total);
                put_u32(&mut body, c.bytes.len() as u32);
                body.extend_from_slice(&c.bytes);
            }
            None => body.push(0),
        }
        let stored = zstd::bulk::compress(&body, ZSTD_LEVEL).expect("zstd compresses a buffer");
        let mut out = Vec::with_capacity(HDR + stored.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let name = self.segment.as_bytes();
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        let mut padded = [0u8; NAME_MAX];
        padded[..name.len()].copy_from_slice(name);
        out.extend_from_slice(&padded);
        out.extend_from_slice(&self.segment_blake3);
        put_u64(&mut out, body.len() as u64);
        put_u64(&mut out, stored.len() as u64);
        put_u32(&mut out, crc32c::crc32c(&stored));
        let c = crc32c::crc32c(&out[..128]);
        put_u32(&mut out, c);
        out.extend_from_slice(&stored);
        out
    }

    /// Parses a stored summary, every count and length bounded before it is used. The
    /// error says what is wrong and where (header field or body offset).
    pub fn decode(b: &[u8]) -> Result<Summary, String> {
        if b.len() < HDR {
            return Err(format!(
                "it is {} bytes, shorter than its {HDR}-byte header",
                b.len()
            ));
        }
        if &b[..8] != MAGIC {
            return Err("it does not start with a pagevault block summary header".into());
        }
        if crc32c::crc32c(&b[..128]) != get_u32(b, 128) {
            return Err("its header fails its CRC32C".into());
        }
        let ver = get_u16(b, 8);
        if ver != VERSION {
            return Err(format!(
                "it has format version {ver}, which this pagevault does not read"
            ));
        }
        let nl = get_u16(b, 10) as usize;
        let segment = match std::str::from_utf8(&b[12..12 + nl.min(NAME_MAX)]) {
            Ok(n) if nl <= NAME_MAX => n.to_string(),
            _ => return Err("its header holds no valid segment name".into()),
        };
        let segment_blake3: [u8; 32] = b[76..108].try_into().unwrap();
        let (raw, stored) = (get_u64(b, 108), get_u64(b, 116));
        if raw > BODY_MAX {
            return Err(format!(
                "its header gives a body of {raw} bytes, over the {BODY_MAX} allowed"
            ));
        }
        if b.len() as u64 != HDR as u64 + stored {
            return Err(format!(
                "it is {} bytes, but its header says {}",
                b.len(),
                HDR as u64 + stored
            ));
        }
        let st = &b[HDR..];
        if crc32c::crc32c(st) != get_u32(b, 124) {
            return Err("its stored bytes fail their CRC32C".into());
        }
        let body = zstd::bulk::decompress(st, raw as usize)
            .map_err(|e| format!("its body does not decompress ({e})"))?;
        if body.len() as u64 != raw {
            return Err(format!(
                "its body decompresses to {} bytes, its header says {raw}",
                body.len()
            ));
        }
        let mut r = Reader { b: &body, at: 0 };
        let seg_start = r.u64()?;
        let seg_end = r.u64()?;
        let covered_from = r.u64()?;
        let end = r.u64()?;
        let flags = r.u32()?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(format!(
                "its body gives unknown flags {flags:#x} (offset 32)"
            ));
        }
        let major = r.u32()?;
        let nlen = r.count(NOTE_MAX, 1, "note length")?;
        let note = String::from_utf8_lossy(r.bytes(nlen)?).into_owned();
        let ndb = r.count(usize::MAX, 8, "database count")?;
        let mut databases = BTreeSet::new();
        for _ in 0..ndb {
            databases.insert((r.u32()?, r.u32()?));
        }
        let nrel = r.count(usize::MAX, 22, "relation fork count")?;
        let mut rels = BTreeMap::new();
        let mut last: Option<RelFork> = None;
        for _ in 0..nrel {
            let at = r.at;
            let key = RelFork {
                file: RelFile {
                    spc: r.u32()?,
                    db: r.u32()?,
                    rel: r.u32()?,
                },
                fork: r.u8()?,
            };
            if last.is_some_and(|l| l >= key) {
                return Err(format!(
                    "its relation forks are not sorted (body offset {at})"
                ));
            }
            last = Some(key);
            let has_limit = r.u8()?;
            let limit = r.u32()?;
            let blen = r.count(usize::MAX, 1, "bitmap length")?;
            let at = r.at;
            let bytes = r.bytes(blen)?;
            let blocks = RoaringBitmap::deserialize_from(bytes)
                .map_err(|e| format!("its block bitmap at body offset {at} is invalid ({e})"))?;
            if blocks.serialized_size() != blen {
                return Err(format!(
                    "its block bitmap at body offset {at} does not fill its {blen} bytes"
                ));
            }
            rels.insert(
                key,
                Entry {
                    limit: (has_limit != 0).then_some(limit),
                    blocks,
                },
            );
        }
        let carry = match r.u8()? {
            0 => None,
            1 => {
                let lsn = r.u64()?;
                let total = r.u32()?;
                let n = r.count(CARRY_MAX, 1, "carry length")?;
                if n as u64 >= total as u64 {
                    return Err(format!(
                        "its carry holds {n} bytes of a {total}-byte record (body offset {})",
                        r.at
                    ));
                }
                Some(Carry {
                    lsn,
                    total,
                    bytes: r.bytes(n)?.to_vec(),
                })
            }
            k => {
                return Err(format!(
                    "its carry marker is {k} (body offset {})",
                    r.at - 1
                ))
            }
        };
        if r.at != body.len() {
            return Err(format!(
                "its body has {} bytes after its end (body offset {})",
                body.len() - r.at,
                r.at
            ));
        }
        Ok(Summary {
            segment,
            segment_blake3,
            major,
            seg_start,
            seg_end,
            covered_from,
            end,
            flags,
            note,
            rels,
            databases,
            carry,
        })
    }
}

/// Bounded reads of a summary's body.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() - self.at < n {
            return Err(format!(
                "its body ends at offset {} inside a field of {n} bytes at offset {}",
                self.b.len(),
                self.at
            ));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(get_u32(self.bytes(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(get_u64(self.bytes(8)?, 0))
    }
    /// A count of items of at least `unit` bytes each: at most `max`, and no more than
    /// the rest of the body can hold.
    fn count(&mut self, max: usize, unit: usize, what: &str) -> Result<usize, String> {
        let at = self.at;
        let n = self.u32()? as usize;
        let room = (self.b.len() - self.at) / unit;
        if n > max || n > room {
            return Err(format!(
                "its {what} at body offset {at} is {n}, more than {}",
                max.min(room)
            ));
        }
        Ok(n)
    }
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
    let Some(b) = repo.store().get(&rel, FILE_MAX)? else {
        return Ok(None);
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
    let head = repo.store().get_head(&seg_rel, HDR_LEN as u64)?;
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

/// Writes the summary of a segment just archived (or found archived without one).
pub(super) fn store(repo: &Repo, s: &Summary) -> Result<()> {
    let rel = summary_rel(&s.segment).expect("a segment name");
    repo.store().put(&rel, &s.encode())
}

/// Whether a push of an already archived segment should (re)write its summary: none
/// intact of this segment is stored, or it left the head uncovered and the previous
/// segment's summary is there now.
pub(super) fn wanted(repo: &Repo, name: &str, blake3: &[u8; 32], seg_size: u64) -> bool {
    match read_unbound(repo, name) {
        Ok(Some((_, s))) if &s.segment_blake3 == blake3 => {
            s.flags & HEAD_SKIPPED != 0 && previous(repo, name, seg_size).is_some()
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
    if !valid_seg_size(seg_size) {
        bail!("{seg_size} is not a WAL segment size PostgreSQL uses");
    }
    let mut m = BlockMap::new();
    for segno in from / seg_size..=to / seg_size {
        let name = segment_name_for(tli, segno, seg_size);
        match read(repo, &name) {
            Ok(Some(s)) => m.add(&s),
            Ok(None) => m.gaps.push(format!("{name}: no block summary")),
            Err(e) => m.gaps.push(format!("{e:#}")),
        }
    }
    Ok(m)
}

/// Synthetic WAL with real records, for unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::pg::walrecord::RelFile;

    pub const SEG: usize = 16 << 20;
    pub const BLK: usize = 8192;

    /// A record of `rmid`/`info` referencing `blocks` (main fork unless given), with
    /// `main` as its main data, CRC'd as PostgreSQL does.
    pub fn record(rmid: u8, info: u8, blocks: &[(RelFile, u8, u32)], main: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; 24];
        for (i, (f, fork, b)) in blocks.iter().enumerate() {
            r.push(i as u8);
            r.push(*fork);
            r.extend_from_slice(&0u16.to_le_bytes());
            for v in [f.spc, f.db, f.rel, *b] {
                r.extend_from_slice(&v.to_le_bytes());
            }
        }
        if !main.is_empty() {
            if main.len() < 256 {
                r.push(255);
                r.push(main.len() as u8);
            } else {
                r.push(254);
                r.extend_from_slice(&(main.len() as u32).to_le_bytes());
            }
            r.extend_from_slice(main);
        }
        let tot = r.len() as u32;
        r[0..4].copy_from_slice(&tot.to_le_bytes());
        r[16] = info;
        r[17] = rmid;
        let mut c = crc32c::crc32c(&r[24..]);
        c = crc32c::crc32c_append(c, &r[..20]);
        r[20..24].copy_from_slice(&c.to_le_bytes());
        r
    }

    /// Lays `records` out as PostgreSQL 17 does over `n` 16 MiB segments of cluster 5
    /// from segment `first` of timeline 1: page headers, continuation flags, alignment;
    /// pages after the last record are zero.
    pub fn segments(records: &[Vec<u8>], first: u64, n: usize) -> Vec<Vec<u8>> {
        let mut stream = vec![];
        let mut bounds = vec![];
        for r in records {
            bounds.push((stream.len(), stream.len() + r.len()));
            stream.extend_from_slice(r);
            while stream.len() % 8 != 0 {
                stream.push(0);
            }
        }
        let mut all = vec![0u8; SEG * n];
        let (mut pos, mut i) = (0usize, 0usize);
        while pos < all.len() && i < stream.len() {
            let long = pos % SEG == 0;
            let hdr = if long { 40 } else { 24 };
            let inside = bounds.iter().find(|(a, e)| *a < i && i < *e);
            let mut info: u16 = if long { 2 } else { 0 };
            if inside.is_some() {
                info |= 1;
            }
            let h = &mut all[pos..];
            h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
            h[2..4].copy_from_slice(&info.to_le_bytes());
            h[4..8].copy_from_slice(&1u32.to_le_bytes());
            h[8..16].copy_from_slice(&((first as usize * SEG + pos) as u64).to_le_bytes());
            let rem = inside.map_or(0, |(_, e)| (e - i) as u32);
            h[16..20].copy_from_slice(&rem.to_le_bytes());
            if long {
                h[24..32].copy_from_slice(&5u64.to_le_bytes());
                h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
                h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
            }
            let k = (BLK - hdr).min(stream.len() - i);
            all[pos + hdr..pos + hdr + k].copy_from_slice(&stream[i..i + k]);
            i += k;
            pos += BLK;
        }
        // Segments the stream did not reach still get their first page's long header.
        for s in 0..n {
            let h = &mut all[s * SEG..];
            if h[0] == 0 {
                h[0..2].copy_from_slice(&0xD116u16.to_le_bytes());
                h[2..4].copy_from_slice(&2u16.to_le_bytes());
                h[4..8].copy_from_slice(&1u32.to_le_bytes());
                h[8..16].copy_from_slice(&(((first as usize + s) * SEG) as u64).to_le_bytes());
                h[24..32].copy_from_slice(&5u64.to_le_bytes());
                h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
                h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
            }
        }
        all.chunks(SEG).map(<[u8]>::to_vec).collect()
    }

    pub fn rel(n: u32) -> RelFile {
        RelFile {
            spc: 1663,
            db: 5,
            rel: n,
        }
    }

    /// A heap record touching blocks `b` of relation `n`.
    pub fn heap(n: u32, b: &[u32]) -> Vec<u8> {
        let blocks: Vec<_> = b.iter().map(|&b| (rel(n), 0u8, b)).collect();
        record(10, 0, &blocks, &[1, 2, 3])
    }

    /// smgr truncate of relation `n` to `len` blocks (main fork and VM).
    pub fn truncate(n: u32, len: u32) -> Vec<u8> {
        let d: Vec<u8> = [len, 1663, 5, n, 3]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        record(2, 0x20, &[], &d)
    }

    /// dbase create (WAL_LOG) of database `db` in pg_default.
    pub fn create_db(db: u32) -> Vec<u8> {
        let d: Vec<u8> = [db, 1663].iter().flat_map(|w| w.to_le_bytes()).collect();
        record(4, 0x10, &[], &d)
    }

    /// A logical message of `n` bytes (no blocks): a record as long as needed.
    pub fn big(n: usize) -> Vec<u8> {
        record(21, 0, &[], &vec![b'x'; n])
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn summary_of(segs: &[Vec<u8>], i: usize, prev: Option<&Summary>) -> Summary {
        let name = segment_name_for(1, 2 + i as u64, SEG as u64);
        summarize(&name, [i as u8; 32], &segs[i], BLK, 17, prev)
    }

    #[test]
    fn rules_carry_and_round_trip() {
        let recs = vec![
            heap(100, &[1, 2, 3]),
            truncate(100, 2),
            heap(100, &[7]),
            create_db(16400),
            heap(200, &[0]),
            big(2 * SEG),
            heap(300, &[9, 10]),
        ];
        let segs = segments(&recs, 2, 3);
        let s0 = summary_of(&segs, 0, None);
        assert!(s0.usable(), "{}", s0.note);
        let e = &s0.rels[&RelFork {
            file: rel(100),
            fork: 0,
        }];
        // Truncated to 2: blocks 2 and 3 forgotten, 7 marked after it.
        assert_eq!(e.limit, Some(2));
        assert_eq!(e.blocks.iter().collect::<Vec<_>>(), [1, 7]);
        let vm = &s0.rels[&RelFork {
            file: rel(100),
            fork: 2,
        }];
        assert_eq!(vm.limit, Some(1));
        assert!(s0.databases.contains(&(1663, 16400)));
        let c = s0.carry.as_ref().expect("the big record is carried");
        assert_eq!(s0.end, c.lsn);
        // The big record runs through segment 1 and ends in 2, then relation 300.
        let s1 = summary_of(&segs, 1, Some(&s0));
        assert!(s1.usable() && s1.rels.is_empty(), "{s1:?}");
        assert!(s1.carry.as_ref().unwrap().bytes.len() > SEG);
        let s2 = summary_of(&segs, 2, Some(&s1));
        assert!(s2.usable() && s2.covered_from == s2.seg_start);
        assert!(s2.rels.contains_key(&RelFork {
            file: rel(300),
            fork: 0
        }));
        // Without the previous summary the head is not covered.
        let alone = summary_of(&segs, 2, None);
        assert!(!alone.usable() && alone.flags & HEAD_SKIPPED != 0);
        assert!(alone.covered_from > alone.seg_start);
        // With another segment's summary: its carry does not continue this record.
        let wrong = summary_of(&segs, 2, Some(&s0));
        assert!(
            !wrong.usable() && wrong.flags & HEAD_SKIPPED != 0,
            "{wrong:?}"
        );

        // The union: limits and marks in order, gaps named.
        let mut m = BlockMap::new();
        for s in [&s0, &s1, &s2] {
            m.add(s);
        }
        assert!(m.complete(), "{:?}", m.gaps);
        assert!(m.may_have_changed(rel(100), 0, 7) && m.may_have_changed(rel(100), 0, 2));
        assert!(!m.may_have_changed(rel(100), 0, 0) && !m.may_have_changed(rel(200), 0, 1));
        assert!(m.may_have_changed(rel(300), 0, 10));
        assert!(
            m.changed(
                RelFile {
                    spc: 1663,
                    db: 16400,
                    rel: 1
                },
                0
            )
            .whole
        );
        let mut g = BlockMap::new();
        g.add(&s0);
        g.add(&s2);
        assert!(
            !g.complete() && g.gaps[0].contains("not summarized"),
            "{:?}",
            g.gaps
        );

        // Stored form: round trip, every header byte and the body checked.
        for s in [&s0, &s1, &s2] {
            assert_eq!(&Summary::decode(&s.encode()).unwrap(), s);
        }
        let b = s0.encode();
        for i in 0..HDR {
            let mut c = b.clone();
            c[i] ^= 0x04;
            assert!(Summary::decode(&c).is_err(), "header byte {i}");
        }
        let mut c = b.clone();
        let last = c.len() - 1;
        c[last] ^= 1;
        assert!(Summary::decode(&c).unwrap_err().contains("CRC32C"));
        assert!(Summary::decode(&b[..b.len() - 1]).is_err());
    }

    /// Re-wraps a body with a valid header and CRCs (a well-formed file whose content
    /// lies).
    fn wrap(s: &Summary, body: &[u8]) -> Vec<u8> {
        let mut b = s.encode();
        b.truncate(HDR);
        let stored = zstd::bulk::compress(body, 1).unwrap();
        b[108..116].copy_from_slice(&(body.len() as u64).to_le_bytes());
        b[116..124].copy_from_slice(&(stored.len() as u64).to_le_bytes());
        b[124..128].copy_from_slice(&crc32c::crc32c(&stored).to_le_bytes());
        let c = crc32c::crc32c(&b[..128]);
        b[128..132].copy_from_slice(&c.to_le_bytes());
        b.extend_from_slice(&stored);
        b
    }

    #[test]
    fn lying_counts_are_refused_before_allocating() {
        let segs = segments(&[heap(100, &[1, 2])], 2, 1);
        let s = summary_of(&segs, 0, None);
        let enc = s.encode();
        let body = zstd::bulk::decompress(&enc[HDR..], 1 << 20).unwrap();
        assert_eq!(Summary::decode(&wrap(&s, &body)).unwrap(), s);
        // The relation fork count (after 4 u64, 2 u32, the note, the database count).
        let at = 40 + 4 + s.note.len() + 4;
        let mut lie = body.clone();
        lie[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = Summary::decode(&wrap(&s, &lie)).unwrap_err();
        assert!(
            e.contains("relation fork count") && e.contains(&format!("offset {at}")),
            "{e}"
        );
        // A bitmap length past the body.
        let mut lie = body.clone();
        let blen = at + 4 + 18;
        lie[blen..blen + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
        let e = Summary::decode(&wrap(&s, &lie)).unwrap_err();
        assert!(e.contains("bitmap length"), "{e}");
        // Trailing bytes.
        let mut lie = body.clone();
        lie.push(0);
        assert!(Summary::decode(&wrap(&s, &lie))
            .unwrap_err()
            .contains("after its end"));
        // A body size over the bound in the header.
        let mut b = enc.clone();
        b[108..116].copy_from_slice(&(BODY_MAX + 1).to_le_bytes());
        let c = crc32c::crc32c(&b[..128]);
        b[128..132].copy_from_slice(&c.to_le_bytes());
        assert!(Summary::decode(&b).unwrap_err().contains("over the"));
    }

    #[test]
    fn minimal_wal_and_unknown_releases_are_unusable() {
        let mut pc: Vec<u8> = [100u32, 8, 10, 0, 64, 0]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        pc.extend([0, 0]);
        let segs = segments(
            &[heap(1, &[1]), record(0, 0x60, &[], &pc), heap(1, &[2])],
            2,
            2,
        );
        let s0 = summary_of(&segs, 0, None);
        assert!(!s0.usable() && s0.flags & (MINIMAL | END_MINIMAL) == MINIMAL | END_MINIMAL);
        assert!(s0.note.contains("minimal"));
        // The next segment starts at minimal too.
        let s1 = summary_of(&segs, 1, Some(&s0));
        assert!(s1.flags & MINIMAL != 0);
        let old = summarize("000000010000000000000002", [0; 32], &segs[0], BLK, 14, None);
        assert!(!old.usable() && old.note.contains("PostgreSQL 14"));
    }
}
