//! `restore --delta wal`: which pages of a stale copy of the cluster can differ from the
//! chain's, read from WAL instead of from the copy.
//!
//! The copy's pages are what they were at its last checkpoint's redo point `S` (or its
//! backup_label's start), plus what its own WAL changed after. The chain's pages are
//! the cluster's at the newest set's end `E`, except pages changed since that set's
//! start. Both histories agree up to `P`, where the copy's timeline left the set's.
//! So the pages changed along the set's history from `X = min(S, P, newest start)` to
//! `E` (the archive's block summaries) and those the copy's WAL changed from
//! `C = min(P, E)` to its end (its own `pg_wal`, as pg_rewind reads it) cover every page
//! that can differ; every other page of a relation file in place is the set's, and is
//! neither read nor written. Whatever cannot be proven so is refused, by name, and the
//! compare mode (`--delta`) is the answer then.

use crate::format::manifest::Manifest;
use crate::ops::backup::changes::rel_pages;
use crate::pg::control::{self, State};
use crate::pg::facts::PgFacts;
use crate::pg::history::{self, Span};
use crate::pg::walname::{Kind, WalName};
use crate::pg::{format_lsn, parse_name, segment_name_for, walpage};
use crate::repo::wal::summary::{self, BlockMap};
use crate::repo::Repo;
use anyhow::{anyhow, Result};
use roaring::RoaringBitmap;
use serde::Serialize;
use std::io::Read;
use std::path::Path;

/// What `--delta wal` read to know the pages (`restore --json`'s `delta_wal`).
#[derive(Debug, Clone, Serialize)]
pub struct ByWal {
    /// The copy's control file: its state and last checkpoint's redo point.
    pub copy_state: String,
    pub copy_redo: String,
    pub copy_timeline: u32,
    /// Pages changed along the set's history from here to the set's end, by the
    /// archive's block summaries.
    pub from_lsn: String,
    pub to_lsn: String,
    pub summaries: u64,
    /// The copy's own WAL read from its pg_wal: from, to, and segments.
    pub copy_wal_from: String,
    pub copy_wal_to: String,
    pub copy_segments: u64,
}

/// The pages to write of each relation file in place.
pub struct WalPlan {
    pub report: ByWal,
    archive: BlockMap,
    copy: BlockMap,
}

impl WalPlan {
    /// The pages of `rel_path` (`size` bytes in the set) that can differ from the copy's,
    /// or None when the file is to be compared whole (not a relation's main or
    /// visibility-map fork).
    pub fn pages(&self, rel_path: &str, size: u64) -> Option<RoaringBitmap> {
        let a = rel_pages(&self.archive, rel_path, size)?;
        let b = rel_pages(&self.copy, rel_path, size)?;
        Some(a | b)
    }
}

fn refuse(to: &Path, why: String) -> anyhow::Error {
    anyhow!(
        "--delta wal cannot tell which pages of '{}' differ from the set: {why}. Nothing was \
         written; `--delta` (compare) restores over it by reading every file instead",
        to.display()
    )
}

/// Plans the delta over `to` (a stopped copy of the cluster) for the chain whose newest
/// set is `newest`, from `repo`'s summaries and the copy's own WAL.
pub fn plan(to: &Path, repo: Option<&Repo>, newest: &Manifest) -> Result<WalPlan> {
    let no = |why: String| refuse(to, why);
    let repo = repo.ok_or_else(|| {
        no("it reads the repository's WAL block summaries: give --repo, not --from".into())
    })?;
    let facts = PgFacts::from_extra(&newest.extra)
        .map_err(|e| no(format!("set {}: {e}", newest.set_id)))?
        .ok_or_else(|| no(format!("set {} is not of PostgreSQL", newest.set_id)))?;
    let stop = (facts.stop.as_ref()).ok_or_else(|| no("the set records no end".into()))?;
    let seg = facts.wal_segment_size;
    let end = stop.lsn;
    let set_tli = parse_name(&stop.wal).map_or(facts.timeline, |n| n.tli);
    let sysid: u64 = facts.system_identifier.parse().unwrap_or(0);
    let major = facts.version_num / 10000;

    let c = read_control(to).map_err(no)?;
    if c.system_identifier != sysid {
        return Err(no(format!(
            "its global/pg_control is of system {}, the set of {sysid}",
            c.system_identifier
        )));
    }
    let label = std::fs::read_to_string(to.join("backup_label")).ok();
    let redo = (label.as_deref().and_then(crate::pg::facts::label_start_lsn))
        .map_or(c.redo, |l| l.min(c.redo));
    let text = crate::repo::wal::read_history(repo, set_tli)?;
    let set_hist = history::parse(set_tli, text.as_deref())
        .map_err(|e| no(format!("the archive's history of timeline {set_tli}: {e}")))?;
    let copy_tli = copy_timeline(to, &c);
    let copy_hist = match set_hist.iter().position(|s| s.tli == copy_tli) {
        Some(i) => {
            let mut h = set_hist[..=i].to_vec();
            h[i].end = None;
            h
        }
        None => {
            let p = to.join(format!("pg_wal/{copy_tli:08X}.history"));
            let text = read_small(&p).map_err(|e| {
                no(format!("the copy is on timeline {copy_tli}, which the set's history does not hold, and its '{}' cannot be read: {e}", p.display()))
            })?;
            history::parse(copy_tli, Some(&text))
                .map_err(|e| no(format!("'{}': {e}", p.display())))?
        }
    };
    let parted = parting(&set_hist, &copy_hist);
    let from = redo.min(parted).min(facts.start_lsn);
    let copy_from = parted.min(end);

    // Where the copy's own WAL is read from: where it can leave the set's history, or,
    // when its pg_wal no longer holds that and its history is still the set's up to its
    // redo point, from there (the archive's summaries then cover the WAL up to it).
    let wal = to.join("pg_wal");
    let name_of = |segno: u64| {
        segment_name_for(
            history::timeline_of_segment(&copy_hist, segno, seg),
            segno,
            seg,
        )
    };
    let holds = |segno: u64| holds_segment(&wal.join(name_of(segno)), segno * seg);
    let must_hold = redo >= copy_from || c.checkpoint >= copy_from;
    let (scan_from, archive_last) = if !must_hold || holds(copy_from / seg) {
        (copy_from / seg, end / seg)
    } else if redo < parted && redo / seg > copy_from / seg && holds(redo / seg) {
        (redo / seg, (end / seg).max(redo / seg - 1))
    } else {
        return Err(no(format!(
            "the copy wrote WAL past {} (where {}), but its pg_wal no longer holds {}: the pages it changed there are unknown",
            format_lsn(copy_from),
            match parted < end {
                true => "its timeline left the set's",
                false => "the set ends",
            },
            name_of(copy_from / seg)
        )));
    };

    // The set's history, from `from` on: every segment summarized.
    let mut archive = BlockMap::new();
    // The summary before the copy's first segment: a record it leaves unfinished is
    // completed (and summarized) in the copy's.
    let mut prev: Option<summary::Summary> = None;
    for segno in from / seg..=archive_last {
        let name = segment_name_for(
            history::timeline_of_segment(&set_hist, segno, seg),
            segno,
            seg,
        );
        match summary::read(repo, &name)? {
            Some(s) => {
                archive.add(&s);
                if segno + 1 == scan_from {
                    prev = Some(s);
                }
            }
            None => archive.gaps.push(format!("{name}: no block summary")),
        }
    }
    if !archive.complete() {
        return Err(no(format!(
            "the archive's WAL from {} (the copy's redo point {}, or the set's start) to {} is not all summarized: {}",
            format_lsn(from),
            format_lsn(redo),
            format_lsn((archive_last + 1) * seg),
            archive.gaps[0]
        )));
    }

    // The copy's own WAL, to its end.
    let mut copy = BlockMap::new();
    let (mut copy_end, mut segments) = (scan_from * seg, 0u64);
    for segno in scan_from.. {
        let name = name_of(segno);
        let (s, full) =
            match copy_segment(&wal.join(&name), &name, seg, sysid, major, prev.as_ref()) {
                Ok(Some(s)) => s,
                Ok(None) => break,
                Err(e) => {
                    return Err(no(format!(
                        "the copy's '{}': {e}",
                        wal.join(&name).display()
                    )))
                }
            };
        let head_lost = segments > 0 && s.flags & summary::HEAD_SKIPPED != 0;
        if s.flags & (summary::MINIMAL | summary::UNSUPPORTED) != 0 || head_lost {
            return Err(no(format!("the copy's {name}: {}", s.note)));
        }
        copy.add(&s);
        segments += 1;
        copy_end = s.end;
        // The WAL goes on into the next segment only from a whole one walked to its end
        // (a record it cannot decode, or a stale page, is where the copy's WAL ends).
        let decoded = s.flags & summary::UNDECODED == 0;
        let on = full && decoded && (s.end == s.seg_end || s.carry.is_some());
        prev = Some(s);
        if !on {
            break;
        }
    }
    if c.checkpoint >= scan_from * seg && copy_end <= c.checkpoint {
        return Err(no(format!(
            "its pg_wal ends at {}, before its own last checkpoint at {}",
            format_lsn(copy_end),
            format_lsn(c.checkpoint)
        )));
    }
    let in_recovery = matches!(
        c.state,
        State::InArchiveRecovery | State::ShutDownInRecovery
    );
    if in_recovery && c.min_recovery_point > copy_end.max(copy_from) {
        return Err(no(format!(
            "the copy was in recovery and replayed WAL up to {}, past what its pg_wal holds ({}) and past {}",
            format_lsn(c.min_recovery_point),
            format_lsn(copy_end),
            format_lsn(copy_from)
        )));
    }
    let report = ByWal {
        copy_state: c.state.words().into(),
        copy_redo: format_lsn(redo),
        copy_timeline: copy_tli,
        from_lsn: format_lsn(from),
        to_lsn: format_lsn(end.max(archive_last * seg)),
        summaries: archive_last - from / seg + 1,
        copy_wal_from: format_lsn(scan_from * seg),
        copy_wal_to: format_lsn(copy_end.max(copy_from)),
        copy_segments: segments,
    };
    Ok(WalPlan {
        report,
        archive,
        copy,
    })
}

/// The control file of the copy, checked.
fn read_control(to: &Path) -> Result<control::Control, String> {
    let p = to.join(crate::pg::PG_CONTROL);
    let mut b = vec![];
    let f = crate::sys::open_regular_nofollow(&p)
        .map_err(|e| format!("cannot read '{}': {e}", p.display()))?;
    f.take(1 << 16)
        .read_to_end(&mut b)
        .map_err(|e| format!("cannot read '{}': {e}", p.display()))?;
    control::parse(&b).map_err(|e| format!("'{}': {e}", p.display()))
}

/// The copy's newest timeline: its checkpoint's, its recovery's, or a newer one its
/// pg_wal holds a history file of (a promotion writes that file first).
fn copy_timeline(to: &Path, c: &control::Control) -> u32 {
    let mut tli = c.timeline.max(c.min_recovery_timeline);
    if let Ok(d) = std::fs::read_dir(to.join("pg_wal")) {
        for e in d.flatten() {
            let name = e.file_name();
            let history = parse_name(&name.to_string_lossy()).filter(|n| n.kind == Kind::History);
            if let Some(n) = history {
                tli = tli.max(n.tli);
            }
        }
    }
    tli
}

/// Where two histories part: the end of the last timeline they share from the same
/// point (the earlier end of the two), or the end of time if one continues the other.
fn parting(a: &[Span], b: &[Span]) -> u64 {
    let mut at = 0;
    for (x, y) in a.iter().zip(b) {
        if x.tli != y.tli || x.begin != y.begin {
            return at;
        }
        at = match (x.end, y.end) {
            (Some(p), Some(q)) => p.min(q),
            (Some(p), None) | (None, Some(p)) => p,
            (None, None) => u64::MAX,
        };
        if x.end != y.end {
            return at;
        }
    }
    at
}

/// Whether `p` is a segment of the copy starting at `start` (not a file recycled ahead).
fn holds_segment(p: &Path, start: u64) -> bool {
    let mut head = [0u8; 16];
    let read = crate::sys::open_regular_nofollow(p).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && read_u64(&head, 8) == start
}

/// A small text file of the copy, never through a link.
fn read_small(p: &Path) -> std::io::Result<String> {
    let mut s = String::new();
    crate::sys::open_regular_nofollow(p)?
        .take(1 << 20)
        .read_to_string(&mut s)?;
    Ok(s)
}

/// The summary of one segment of the copy's pg_wal, up to its last page of this segment
/// (a recycled file's stale pages end it), and whether every page was; None when there
/// is no such segment there.
fn copy_segment(
    p: &Path,
    name: &str,
    seg_size: u64,
    sysid: u64,
    major: u32,
    prev: Option<&summary::Summary>,
) -> Result<Option<(summary::Summary, bool)>, String> {
    let f = match crate::sys::open_regular_nofollow(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let n: WalName = parse_name(name).expect("a segment name");
    let mut bytes = vec![];
    f.take(seg_size + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let len = bytes.len() as u64;
    if len != seg_size {
        return Err(format!(
            "it is {len} bytes, a segment of this cluster {seg_size}"
        ));
    }
    let info = match walpage::check_first_page(name, &n, len, &bytes) {
        Ok(i) => i,
        // A file recycled ahead of use: nothing of this segment yet.
        Err(_) if bytes.len() >= 40 && read_u64(&bytes, 8) != seg_start_of(name, len) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    if info.sysid != sysid {
        return Err(format!(
            "it is WAL of system {}, the set's is {sysid}",
            info.sysid
        ));
    }
    let blcksz = info.blcksz as usize;
    let mut valid = blcksz;
    while valid + blcksz <= bytes.len() {
        let h = &bytes[valid..valid + blcksz];
        // Zeroed pages pass (a switch's tail, a segment not yet written to its end).
        if walpage::check_page(&info, valid as u64, h).is_err() {
            break;
        }
        valid += blcksz;
    }
    let s = summary::summarize(name, [0; 32], &bytes[..valid], blcksz, major, prev);
    Ok(Some((s, valid == bytes.len())))
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The LSN a segment file named `name` starts at, for a file of `len` bytes.
fn seg_start_of(name: &str, len: u64) -> u64 {
    crate::pg::parse_segment_name(name, len).map_or(u64::MAX, |(_, segno)| segno * len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(tli: u32, begin: u64, end: Option<u64>) -> Span {
        Span { tli, begin, end }
    }

    #[test]
    fn histories_part_where_a_timeline_ends_in_one() {
        let one = [span(1, 0, None)];
        let two = [span(1, 0, Some(500)), span(2, 500, None)];
        let three = [span(1, 0, Some(300)), span(3, 300, None)];
        assert_eq!(parting(&one, &one), u64::MAX);
        assert_eq!(parting(&two, &one), 500, "the copy stayed on 1 past 500");
        assert_eq!(parting(&one, &two), 500);
        assert_eq!(parting(&two, &two), u64::MAX);
        assert_eq!(parting(&two, &three), 300);
        let other = [span(4, 0, None)];
        assert_eq!(parting(&two, &other), 0, "nothing shared");
    }
}
