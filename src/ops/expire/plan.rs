//! What retention keeps, and why: the catalog, the rules and the time in, one decision
//! per set out (pure).
//!
//! The kept window: every set from its first full on, and the WAL from that full's
//! start, so a restore reaches any point from that full's end to the newest archived
//! WAL. Its first full is the oldest of those the rules name: the N-th newest full
//! (`--keep-full N`), and the newest full that ended at or before now minus D
//! (`--keep-within D`; the oldest full when none did). The newest full always is in it.
//! Grandfather-father-son (`--keep-daily/--keep-weekly/--keep-monthly N`) also keeps the
//! newest full of each of the last N calendar days, ISO weeks (Monday to Sunday) or
//! months, in UTC, the current one included: such a full restores to its own end (it
//! holds the WAL it needs), not to a point in time. What the rules keep is their union.

use crate::format::manifest::BackupType;
use crate::repo::CatalogEntry;
use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde::Serialize;
use std::collections::HashMap;

/// What to keep; zero or None: the rule is not given.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub keep_full: u32,
    /// Seconds.
    pub keep_within: Option<u64>,
    pub keep_daily: u32,
    pub keep_weekly: u32,
    pub keep_monthly: u32,
}

impl Rules {
    pub fn any(&self) -> bool {
        self.keep_full > 0
            || self.keep_within.is_some()
            || self.keep_daily + self.keep_weekly + self.keep_monthly > 0
    }
}

/// One set's fate.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Decision {
    pub set_id: String,
    #[serde(rename = "type")]
    pub backup_type: BackupType,
    pub finished: String,
    pub keep: bool,
    /// "kept because ..." or "removed because ..." without those words.
    pub why: String,
}

/// What retention keeps and removes.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub keep: Vec<String>,
    pub expire: Vec<String>,
    /// WAL needed from this segment on (None: no kept set names its WAL).
    pub wal_from: Option<String>,
    /// The set whose start `wal_from` is.
    pub wal_from_set: Option<String>,
    /// The kept window's first full, and its end: the oldest point a restore reaches.
    pub window_set: Option<String>,
    pub window_start: Option<String>,
}

/// When a set ended (a record's time is checked RFC 3339 when read).
pub fn finished(e: &CatalogEntry) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&e.finished)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// "14d", "36h", "90m", "3600s", "2w" (a number and s, m, h, d or w) in seconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(at);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not a duration: give a number and s, m, h, d or w (14d)"))?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => return Err(format!("'{s}': the unit is s, m, h, d or w (14d)")),
    };
    n.checked_mul(mult)
        .filter(|&v| v <= 100 * 365 * 86400)
        .ok_or_else(|| format!("'{s}' is more than 100 years"))
}

/// A calendar period a full falls in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Period {
    Day(NaiveDate),
    Week(i32, u32),
    Month(i32, u32),
}

impl Period {
    fn of(unit: u8, d: NaiveDate) -> Period {
        match unit {
            b'd' => Period::Day(d),
            b'w' => Period::Week(d.iso_week().year(), d.iso_week().week()),
            _ => Period::Month(d.year(), d.month()),
        }
    }

    /// The period `k` before the one holding `today`.
    fn back(unit: u8, today: NaiveDate, k: u32) -> Period {
        match unit {
            b'd' => Period::Day(today - Duration::days(k as i64)),
            b'w' => Period::of(b'w', today - Duration::days(7 * k as i64)),
            _ => {
                let m = today.year() * 12 + today.month0() as i32 - k as i32;
                Period::Month(m.div_euclid(12), m.rem_euclid(12) as u32 + 1)
            }
        }
    }

    fn describe(self) -> String {
        match self {
            Period::Day(d) => format!("day {d}"),
            Period::Week(y, w) => format!("ISO week {y}-W{w:02}"),
            Period::Month(y, m) => format!("month {y}-{m:02}"),
        }
    }
}

/// The fulls grandfather-father-son keeps (catalog index -> why).
fn gfs(
    sets: &[CatalogEntry],
    fulls: &[usize],
    r: &Rules,
    now: DateTime<Utc>,
) -> HashMap<usize, String> {
    let mut out: HashMap<usize, String> = HashMap::new();
    let today = now.date_naive();
    for (n, unit, flag) in [
        (r.keep_daily, b'd', "--keep-daily"),
        (r.keep_weekly, b'w', "--keep-weekly"),
        (r.keep_monthly, b'm', "--keep-monthly"),
    ] {
        for k in 0..n {
            let p = Period::back(unit, today, k);
            let newest = (fulls.iter().rev()).find(|&&i| {
                finished(&sets[i])
                    .is_some_and(|t| t <= now && Period::of(unit, t.date_naive()) == p)
            });
            if let Some(&i) = newest {
                out.entry(i).or_insert_with(|| {
                    format!("it is the newest full of {} ({flag} {n})", p.describe())
                });
            }
        }
    }
    out
}

/// Decides each set's fate (`sets` oldest first, as the catalog lists them).
pub fn plan(sets: &[CatalogEntry], r: &Rules, now: DateTime<Utc>) -> Plan {
    let fulls: Vec<usize> = (0..sets.len())
        .filter(|&i| sets[i].backup_type == BackupType::Full && !sets[i].damaged)
        .collect();
    let Some(&newest) = fulls.last() else {
        // Nothing restores alone: nothing may go.
        let decisions: Vec<Decision> = (sets.iter())
            .map(|c| {
                decide(
                    c,
                    true,
                    "the repository holds no full set that is not damaged".into(),
                )
            })
            .collect();
        return Plan {
            keep: sets.iter().map(|c| c.set_id.clone()).collect(),
            expire: vec![],
            wal_from: None,
            wal_from_set: None,
            window_set: None,
            window_start: None,
            decisions,
        };
    };
    // The window's first full, as an index into `fulls`, and why.
    let mut first = (fulls.len() - 1, "it is the newest full".to_string());
    if r.keep_full > 0 {
        let at = fulls.len().saturating_sub(r.keep_full as usize);
        if at < first.0 {
            first = (
                at,
                format!(
                    "it is the oldest of the {} newest fulls (--keep-full {})",
                    r.keep_full, r.keep_full
                ),
            );
        }
    }
    if let Some(d) = r.keep_within {
        let cutoff = now - Duration::seconds(d as i64);
        let (at, why) = match (fulls.iter()).rposition(|&i| finished(&sets[i]).is_some_and(|t| t <= cutoff)) {
            Some(at) => (at, format!("it is the newest full that ended at or before {} (--keep-within): a restore reaches any point from its end on", cutoff.to_rfc3339())),
            None => (0, format!("it is the oldest full, and every full ended after {} (--keep-within)", cutoff.to_rfc3339())),
        };
        if at < first.0 {
            first = (at, why);
        }
    }
    let anchor = &sets[fulls[first.0]];
    let kept_by_gfs = gfs(sets, &fulls, r, now);
    let mut decisions: Vec<Decision> = vec![];
    for (i, c) in sets.iter().enumerate() {
        let in_window = c.started >= anchor.started;
        let kept = |id: &str| decisions.iter().any(|d| d.keep && d.set_id == id);
        let (keep, why) = match c.backup_type {
            _ if i == fulls[first.0] => (true, first.1.clone()),
            BackupType::Full if in_window => (true, format!("it is newer than {}, the first full of the kept window", anchor.set_id)),
            BackupType::Diff | BackupType::Incr if in_window => match c.base_set.as_deref() {
                Some(b) if kept(b) => (true, format!("it is newer than {}, the first full of the kept window, and its base {b} is kept", anchor.set_id)),
                Some(b) => (false, format!("its base {b} is removed")),
                None => (false, "it names no base set".into()),
            },
            _ => match kept_by_gfs.get(&i) {
                Some(why) => (true, why.clone()),
                None => (false, format!(
                    "it is older than {}, the first full of the kept window, and no rule keeps it",
                    anchor.set_id
                )),
            },
        };
        decisions.push(decide(c, keep, why));
    }
    debug_assert!(decisions
        .iter()
        .any(|d| d.keep && d.set_id == sets[newest].set_id));
    let wal = (sets.iter().zip(&decisions))
        .filter(|(c, d)| d.keep && c.started >= anchor.started)
        .filter_map(|(c, _)| c.start_wal.clone().map(|w| (w, c.set_id.clone())))
        .min_by(|a, b| a.0.get(8..).cmp(&b.0.get(8..)));
    Plan {
        keep: (decisions.iter())
            .filter(|d| d.keep)
            .map(|d| d.set_id.clone())
            .collect(),
        expire: (decisions.iter())
            .filter(|d| !d.keep)
            .map(|d| d.set_id.clone())
            .collect(),
        wal_from: wal.as_ref().map(|w| w.0.clone()),
        wal_from_set: wal.map(|w| w.1),
        window_set: Some(anchor.set_id.clone()),
        window_start: finished(anchor).map(|t| t.to_rfc3339()),
        decisions,
    }
}

fn decide(c: &CatalogEntry, keep: bool, why: String) -> Decision {
    Decision {
        set_id: c.set_id.clone(),
        backup_type: c.backup_type,
        finished: c.finished.clone(),
        keep,
        why,
    }
}

/// The oldest point a restore can reach to any later point: the end of the oldest full
/// that is not damaged and from whose start the archive holds the WAL (it holds the
/// full's first segment, or archives no WAL at all, or the full names none). `fulls`
/// oldest first; `holds` says whether the archive holds a segment.
pub fn window_start(
    catalog: &[CatalogEntry],
    archives_wal: bool,
    holds: impl Fn(&str) -> bool,
) -> Option<&CatalogEntry> {
    let mut fulls: Vec<&CatalogEntry> = (catalog.iter())
        .filter(|c| c.backup_type == BackupType::Full && !c.damaged && finished(c).is_some())
        .collect();
    fulls.sort_by_key(|c| finished(c));
    (fulls.iter())
        .find(|c| !archives_wal || c.start_wal.as_deref().is_none_or(&holds))
        .copied()
}
