//! The log chain a restore needs: the WAL segments recovery will replay after a set,
//! on each timeline of the target's history, and whether the archive holds every one
//! intact. Checked before anything is written, as recovery itself would walk it.

use super::{wal, Repo};
use crate::pg::{self, format_lsn, history, segment_name_for};
use anyhow::{anyhow, bail, Result};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// More segments than any archive holds between a set and its target (16 TiB of
/// 16 MiB segments): a bigger range is a mistaken target or a forged file name.
const MAX_SEGMENTS: u64 = 1 << 20;

/// Where recovery ends.
#[derive(Clone, Copy, Debug)]
pub enum End {
    /// At this LSN (`--until-lsn`).
    Lsn(u64),
    /// At the end of the archive (no target, or a time, xid or name that only replay finds).
    Latest,
}

/// Segments `first..=last` (numbers) that recovery reads from timeline `tli`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub tli: u32,
    pub first: u64,
    pub last: u64,
}

/// What recovery will replay from the archive.
#[derive(Debug)]
pub struct WalChain {
    pub target_tli: u32,
    pub seg_size: u64,
    pub ranges: Vec<Range>,
    /// Every archived file recovery fetches: the target's history file, then segments.
    pub files: Vec<String>,
}

/// The set a chain starts from.
pub struct From<'a> {
    pub set_id: &'a str,
    pub tli: u32,
    pub stop_lsn: u64,
    pub seg_size: u64,
}

impl WalChain {
    /// "timeline 1 segments A to B, then timeline 2 segments C to D".
    pub fn describe(&self) -> String {
        if self.ranges.is_empty() {
            return "no archived WAL beyond the set's own".into();
        }
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|r| {
                let (a, b) = (
                    segment_name_for(r.tli, r.first, self.seg_size),
                    segment_name_for(r.tli, r.last, self.seg_size),
                );
                let n = r.last - r.first + 1;
                match n {
                    1 => format!("timeline {} segment {a}", r.tli),
                    _ => format!("timeline {} segments {a} to {b} ({n})", r.tli),
                }
            })
            .collect();
        parts.join(", then ")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "target_timeline": self.target_tli,
            "files": self.files.len(),
            "ranges": self.ranges.iter().map(|r| serde_json::json!({
                "timeline": r.tli,
                "first": segment_name_for(r.tli, r.first, self.seg_size),
                "last": segment_name_for(r.tli, r.last, self.seg_size),
            })).collect::<Vec<_>>(),
        })
    }
}

/// The newest timeline recovery would pick (`recovery_target_timeline = latest`):
/// from the set's timeline, up while the archive holds the next history file.
fn newest_timeline(repo: &Repo, from: u32) -> u32 {
    let mut t = from;
    while t < u32::MAX && wal::has_segment(repo, &format!("{:08X}.history", t + 1)) {
        t += 1;
    }
    t
}

/// Plans the WAL recovery replays after set `from` up to `end`, on `timeline` (None:
/// the latest, as PostgreSQL picks it), and refuses a chain with a gap, naming what is
/// missing. Writes nothing.
pub fn plan(repo: &Repo, from: &From, end: End, timeline: Option<u32>) -> Result<WalChain> {
    let seg = from.seg_size;
    if !pg::valid_seg_size(seg) {
        bail!(
            "set {} records a WAL segment size of {seg} bytes, which PostgreSQL never uses",
            from.set_id
        );
    }
    let target = match timeline {
        Some(t) if t < from.tli => bail!(
            "--timeline {t} is older than timeline {} of set {}: recovery cannot go back to it",
            from.tli,
            from.set_id
        ),
        Some(t) => t,
        None => newest_timeline(repo, from.tli),
    };
    let text = match target {
        1 => None,
        t => wal::read_history(repo, t)?,
    };
    if target != from.tli && text.is_none() {
        bail!(
            "the archive of '{}' holds no {target:08X}.history: recovery cannot follow timeline {target}",
            repo.describe()
        );
    }
    let spans = history::parse(target, text.as_deref())
        .map_err(|m| anyhow!("archived {target:08X}.history is not a timeline history: {m}"))?;
    let Some(own) = spans.iter().find(|s| s.tli == from.tli) else {
        bail!(
            "timeline {target} does not descend from timeline {} of set {} (its history: {}); \
             restore a set of one of those timelines, or name --timeline {}",
            from.tli,
            from.set_id,
            spans
                .iter()
                .map(|s| s.tli.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            from.tli
        );
    };
    if let Some(fork) = own.end.filter(|&e| e < from.stop_lsn) {
        bail!(
            "timeline {target} branched off timeline {} at {}, before set {} was consistent (its \
             stop LSN {}): recovery cannot follow it from this set; restore with --timeline {} or \
             pick a set taken before the switch",
            from.tli,
            format_lsn(fork),
            from.set_id,
            format_lsn(from.stop_lsn),
            from.tli
        );
    }
    let first = from.stop_lsn / seg + 1; // the set holds the WAL up to its stop segment
                                         // Each timeline's complete segments, listed once.
    let mut listed: HashMap<u32, HashSet<String>> = HashMap::new();
    let last = match end {
        End::Lsn(l) => l / seg,
        End::Latest => {
            let newest = listed_once(repo, &mut listed, target)?
                .iter()
                .filter_map(|n| pg::parse_segment_name(n, seg))
                .map(|(_, s)| s)
                .max();
            // A new timeline's first segment holds the old one's WAL up to the switch.
            let switch = (target != from.tli).then(|| spans.last().unwrap().begin / seg);
            match newest.max(switch) {
                Some(s) => s,
                None => first.saturating_sub(1),
            }
        }
    };
    let count = (last + 1).saturating_sub(first);
    if count > MAX_SEGMENTS {
        bail!(
            "recovery from set {} would replay {count} WAL segments (more than {MAX_SEGMENTS}) to \
             reach {}: check --until-lsn, or the archive for a file named far past its WAL",
            from.set_id,
            format_lsn(last * seg)
        );
    }
    let ranges = by_timeline(&spans, first, last, seg);
    let mut missing = vec![];
    let mut files = vec![];
    if target > 1 && text.is_some() {
        files.push(format!("{target:08X}.history"));
    }
    for r in &ranges {
        let have = listed_once(repo, &mut listed, r.tli)?;
        for segno in r.first..=r.last {
            let name = segment_name_for(r.tli, segno, seg);
            if !have.contains(&name) {
                missing.push((r.tli, segno, name.clone()));
            }
            files.push(name);
        }
    }
    if let Some((tli, segno, _)) = missing.first() {
        let shown: Vec<String> = missing
            .iter()
            .take(5)
            .map(|(t, _, n)| format!("{n} (timeline {t})"))
            .collect();
        let more = match missing.len() {
            n if n > 5 => format!(" and {} more", n - 5),
            _ => String::new(),
        };
        let starts = spans.iter().find(|s| s.tli == *tli).map(|s| s.begin / seg);
        let hint = if *tli != from.tli && starts == Some(*segno) {
            format!(
                "; timeline {tli}'s first segment is archived once the promoted server fills or \
                 switches it (SELECT pg_switch_wal() on it)"
            )
        } else {
            String::new()
        };
        bail!(
            "the log chain is broken: WAL segment(s) {}{more} are missing from the archive of '{}', \
             and recovery from set {} to {} needs them; nothing was written (restore to an LSN \
             before {} with --until-lsn, or bring the segments back{hint})",
            shown.join(", "),
            repo.describe(),
            from.set_id,
            match end {
                End::Lsn(l) => format!("LSN {} on timeline {target}", format_lsn(l)),
                End::Latest => format!("the end of timeline {target}"),
            },
            format_lsn(segno * seg)
        );
    }
    Ok(WalChain {
        target_tli: target,
        seg_size: seg,
        ranges,
        files,
    })
}

/// Timeline `tli`'s complete archived segments, listed on first use.
fn listed_once<'a>(
    repo: &Repo,
    listed: &'a mut HashMap<u32, HashSet<String>>,
    tli: u32,
) -> Result<&'a HashSet<String>> {
    Ok(match listed.entry(tli) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(wal::list(repo, tli)?.into_iter().collect())
        }
    })
}

/// Segments `first..=last` grouped by the timeline recovery reads each from.
fn by_timeline(spans: &[history::Span], first: u64, last: u64, seg: u64) -> Vec<Range> {
    let mut out = vec![];
    for (i, s) in spans.iter().enumerate() {
        // A timeline serves from its first segment until the next one begins.
        let from = (s.begin / seg).max(first);
        let until = spans
            .get(i + 1)
            .map_or(last + 1, |n| (n.begin / seg).min(last + 1));
        if from < until {
            out.push(Range {
                tli: s.tli,
                first: from,
                last: until - 1,
            });
        }
    }
    out
}

/// Reads and checks every file of the chain as archive-get will (header, CRC32C of the
/// stored bytes, size and BLAKE3 of the WAL), on `threads` threads. Refuses the
/// chain if any fails, naming each. Returns how long it took.
pub fn verify(repo: &Repo, chain: &WalChain, threads: usize) -> Result<Duration> {
    verify_with(repo, &[], chain, threads, &|_| {}).map(|(took, _)| took)
}

/// [`verify`], a file that fails in `repo` checked in `others` in turn: one intact there
/// is what recovery's restore_command reads (it falls back the same way), and is told in
/// the notes returned. `checked` is told each file's name after it, whatever its outcome.
pub fn verify_with(
    repo: &Repo,
    others: &[Repo],
    chain: &WalChain,
    threads: usize,
    checked: &(dyn Fn(&str) + Sync),
) -> Result<(Duration, Vec<String>)> {
    let t0 = Instant::now();
    let failed = std::sync::Mutex::new(vec![]);
    let served = std::sync::Mutex::new(vec![]);
    crate::par::each_index(chain.files.len(), threads, |i| {
        if crate::interrupt::received().is_some() {
            return;
        }
        let name = &chain.files[i];
        if let Err(e) = wal::verify(repo, name) {
            let e = format!("{e:#}");
            match others.iter().find(|o| wal::verify(o, name).is_ok()) {
                Some(o) => served.lock().unwrap().push((
                    i,
                    format!(
                        "WAL file {name} fails its checks in {} ({e}); recovery reads the intact copy in {}",
                        repo.describe(),
                        o.describe()
                    ),
                )),
                None => failed.lock().unwrap().push((i, e)),
            }
        }
        checked(name);
    });
    if let Some(sig) = crate::interrupt::received() {
        return Err(crate::interrupt::error(sig));
    }
    let mut failed = failed.into_inner().unwrap();
    failed.sort();
    if !failed.is_empty() {
        let shown: Vec<&str> = failed.iter().take(5).map(|(_, m)| m.as_str()).collect();
        bail!(
            "the log chain is damaged: {} of the {} WAL files recovery needs fail their checks \
             ({}); nothing was written (restore to an LSN before the first, or push an intact \
             copy of each from the server's pg_wal with archive-push)",
            failed.len(),
            chain.files.len(),
            shown.join("; ")
        );
    }
    let mut served = served.into_inner().unwrap();
    served.sort();
    Ok((t0.elapsed(), served.into_iter().map(|(_, m)| m).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::wal::testing::{push_segment, SEG};
    use std::fs;

    /// Timeline 1 segments 2..=6; timeline 2 branched off at 0/5000100 (in segment 5)
    /// and holds segments 5..=8. A set on timeline 1 ended at 0/2000100.
    fn archive() -> (tempfile::TempDir, Repo) {
        let (d, r) = crate::repo::temp_repo();
        for s in 2..=6 {
            push_segment(&r, d.path(), 1, s);
        }
        for s in 5..=8 {
            push_segment(&r, d.path(), 2, s);
        }
        let h = d.path().join("00000002.history");
        fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
        wal::push(&r, &h).unwrap();
        (d, r)
    }

    fn set(stop: u64) -> From<'static> {
        From {
            set_id: "s1",
            tli: 1,
            stop_lsn: stop,
            seg_size: SEG,
        }
    }

    fn ranges(c: &WalChain) -> Vec<(u32, u64, u64)> {
        c.ranges.iter().map(|r| (r.tli, r.first, r.last)).collect()
    }

    #[test]
    fn ranges_agree_with_the_timeline_of_each_segment() {
        let text = "1\t0/5000100\tx\n2\t0/5000200\ty\n3\t0/9000000\tz\n";
        let spans = history::parse(4, Some(text)).unwrap();
        for (first, last) in [(0, 12), (3, 4), (5, 5), (6, 8), (9, 9), (10, 3)] {
            let mut want: Vec<(u32, u64, u64)> = vec![];
            for s in first..=last {
                let t = history::timeline_of_segment(&spans, s, SEG);
                match want.last_mut() {
                    Some(w) if w.0 == t => w.2 = s,
                    _ => want.push((t, s, s)),
                }
            }
            let got: Vec<(u32, u64, u64)> = by_timeline(&spans, first, last, SEG)
                .iter()
                .map(|r| (r.tli, r.first, r.last))
                .collect();
            assert_eq!(got, want, "{first}..={last}");
        }
    }

    #[test]
    fn follows_the_history_to_the_newest_timeline() {
        let (_d, r) = archive();
        let c = plan(&r, &set(0x200_0100), End::Latest, None).unwrap();
        assert_eq!(c.target_tli, 2);
        assert_eq!(ranges(&c), [(1, 3, 4), (2, 5, 8)]);
        assert_eq!(c.files[0], "00000002.history");
        assert_eq!(c.files.len(), 1 + 2 + 4);
        assert!(c
            .describe()
            .contains("then timeline 2 segments 000000020000000000000005"));
        verify(&r, &c, 2).unwrap();
        // An LSN before the switch stays on timeline 1; one after crosses it.
        let c = plan(&r, &set(0x200_0100), End::Lsn(0x400_0010), None).unwrap();
        assert_eq!(ranges(&c), [(1, 3, 4)]);
        let c = plan(&r, &set(0x200_0100), End::Lsn(0x600_0000), None).unwrap();
        assert_eq!(ranges(&c), [(1, 3, 4), (2, 5, 6)]);
        // Timeline 1 named: its own segments past the switch point.
        let c = plan(&r, &set(0x200_0100), End::Latest, Some(1)).unwrap();
        assert_eq!((c.target_tli, ranges(&c)), (1, vec![(1, 3, 6)]));
        // A target far past any archive is refused, not enumerated.
        let e = plan(&r, &set(0x200_0100), End::Lsn(u64::MAX >> 1), None).unwrap_err();
        assert!(format!("{e:#}").contains("would replay"), "{e:#}");
        // Nothing after the set's own WAL.
        let c = plan(&r, &set(0x800_0000), End::Lsn(0x800_0100), Some(1)).unwrap();
        assert!(c.ranges.is_empty() && c.files.is_empty());
    }

    #[test]
    fn refuses_gaps_damage_and_sets_past_the_fork() {
        let (d, r) = archive();
        // A set that ended after timeline 2 branched off cannot follow it.
        let e = plan(&r, &set(0x500_0200), End::Latest, None).unwrap_err();
        assert!(
            format!("{e:#}").contains("branched off timeline 1 at 0/5000100"),
            "{e:#}"
        );
        assert!(plan(&r, &set(0x500_0200), End::Latest, Some(1)).is_ok());
        // A timeline older than the set's.
        assert!(plan(&r, &set(0x200_0100), End::Latest, Some(0)).is_err());
        let mut s = set(0x200_0100);
        s.tli = 2;
        assert!(plan(&r, &s, End::Latest, Some(1)).is_err());
        // Damage, then a gap, on timeline 2.
        let p = wal::archived_path(&r, "000000020000000000000008").unwrap();
        let good = fs::read(&p).unwrap();
        let mut bad = good.clone();
        let at = bad.len() - 5;
        bad[at] ^= 1;
        fs::write(&p, &bad).unwrap();
        let c = plan(&r, &set(0x200_0100), End::Latest, None).unwrap();
        // Each file counted as it is checked, the damaged one too (the progress shown).
        let counted = std::sync::Mutex::new(vec![]);
        let count = |name: &str| counted.lock().unwrap().push(name.to_string());
        let e = format!("{:#}", verify_with(&r, &[], &c, 2, &count).unwrap_err());
        let mut counted = counted.into_inner().unwrap();
        counted.sort();
        let mut want = c.files.clone();
        want.sort();
        assert_eq!(counted, want);
        assert!(
            e.contains("000000020000000000000008") && e.contains("1 of the 7"),
            "{e}"
        );
        fs::write(&p, &good).unwrap();
        fs::remove_file(wal::archived_path(&r, "000000020000000000000007").unwrap()).unwrap();
        let latest = || {
            format!(
                "{:#}",
                plan(&r, &set(0x200_0100), End::Latest, None).unwrap_err()
            )
        };
        let e = latest();
        assert!(
            e.contains("000000020000000000000007 (timeline 2)") && e.contains("0/7000000"),
            "{e}"
        );
        assert!(plan(&r, &set(0x200_0100), End::Lsn(0x6FF_FFFF), None).is_ok());
        // A new timeline whose first segment is not archived yet.
        let h = d.path().join("00000003.history");
        fs::write(&h, "1\t0/5000100\tx\n2\t0/9000000\ty\n").unwrap();
        wal::push(&r, &h).unwrap();
        let e = format!(
            "{:?}",
            plan(&r, &set(0x200_0100), End::Lsn(0x600_0000), None).unwrap()
        );
        assert!(e.contains("target_tli: 3"), "{e}");
        push_segment(&r, d.path(), 2, 7);
        let e = latest();
        assert!(
            e.contains("000000030000000000000009 (timeline 3)") && e.contains("pg_switch_wal"),
            "{e}"
        );
    }
}
