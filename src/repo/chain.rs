//! Which sets a restore from a repository uses: a full set and the differential over
//! it, chosen from the catalog for a recovery target. Pure: no I/O, no server.

use super::CatalogEntry;
use crate::format::manifest::BackupType;
use crate::pg;
use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, FixedOffset};

/// What the user asked for.
#[derive(Default, Debug, Clone)]
pub struct Selector {
    /// A set id or an unambiguous prefix of one (`--set`).
    pub set: Option<String>,
    /// `--until`: only sets finished by then.
    pub until_time: Option<DateTime<FixedOffset>>,
    /// `--until-lsn`: only sets whose WAL ended by then.
    pub until_lsn: Option<u64>,
}

/// The sets to restore, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub full: CatalogEntry,
    pub diff: Option<CatalogEntry>,
}

impl Chain {
    /// The newest set applied: its backup_label starts recovery.
    pub fn last(&self) -> &CatalogEntry {
        self.diff.as_ref().unwrap_or(&self.full)
    }
}

/// A time as `--until` takes it (RFC 3339, or PostgreSQL's `2026-11-21 10:00:00+00`).
pub fn parse_time(t: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(t)
        .or_else(|_| DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f%#z"))
        .ok()
}

impl Selector {
    /// From the command line's strings; a target that does not parse is an error.
    pub fn parse(
        set: Option<&str>,
        until: Option<&str>,
        until_lsn: Option<&str>,
    ) -> Result<Selector> {
        let until_time = until
            .map(|t| {
                parse_time(t).ok_or_else(|| {
                    anyhow!("--until '{t}' is not a time like '2026-11-21 10:00:00+00' (a zone is required)")
                })
            })
            .transpose()?;
        let until_lsn = until_lsn
            .map(|l| {
                pg::parse_lsn(l)
                    .ok_or_else(|| anyhow!("--until-lsn '{l}' is not an LSN like 0/3000148"))
            })
            .transpose()?;
        Ok(Selector {
            set: set.map(str::to_string),
            until_time,
            until_lsn,
        })
    }

    /// Whether a set ended before the recovery target (always, without one).
    fn ends_before(&self, c: &CatalogEntry) -> bool {
        if let Some(t) = self.until_time {
            return DateTime::parse_from_rfc3339(&c.finished).is_ok_and(|f| f <= t);
        }
        if let Some(l) = self.until_lsn {
            return c
                .stop_lsn
                .as_deref()
                .and_then(pg::parse_lsn)
                .is_some_and(|s| s <= l);
        }
        true
    }
}

/// The set `id` names: itself, or the only set whose id starts with it.
pub fn find<'a>(catalog: &'a [CatalogEntry], id: &str) -> Result<&'a CatalogEntry> {
    if let Some(c) = catalog.iter().find(|c| c.set_id == id) {
        return Ok(c);
    }
    let hits: Vec<&CatalogEntry> = catalog
        .iter()
        .filter(|c| !id.is_empty() && c.set_id.starts_with(id))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => bail!("the repository has no set '{id}'"),
        many => bail!(
            "'{id}' names {} sets ({}): give more of the id",
            many.len(),
            many.iter()
                .map(|c| c.set_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The newest set of any kind (verify's default).
pub fn newest(catalog: &[CatalogEntry]) -> Result<&CatalogEntry> {
    catalog
        .last()
        .ok_or_else(|| anyhow!("the repository holds no backup sets"))
}

/// The chain to restore: the named set (a differential brings its base), or the
/// newest usable full set before the target and the newest usable differential over it.
pub fn select(catalog: &[CatalogEntry], sel: &Selector) -> Result<Chain> {
    if let Some(id) = &sel.set {
        let c = find(catalog, id)?;
        if c.backup_type != BackupType::Diff {
            return Ok(Chain {
                full: c.clone(),
                diff: None,
            });
        }
        let base = c.base_set.as_deref().unwrap_or("");
        let Some(full) = catalog.iter().find(|f| f.set_id == base) else {
            bail!(
                "differential {} needs its base full set {base}, which is no longer in the repository",
                c.set_id
            );
        };
        return Ok(Chain {
            full: full.clone(),
            diff: Some(c.clone()),
        });
    }
    let full = catalog
        .iter()
        .rev()
        .filter(|c| c.backup_type == BackupType::Full && !c.damaged)
        .find(|c| sel.ends_before(c))
        .ok_or_else(|| match catalog.is_empty() {
            true => anyhow!("the repository holds no backup sets"),
            false => {
                anyhow!("no full backup set in the repository ended before the recovery target")
            }
        })?;
    let diff = catalog
        .iter()
        .rev()
        .filter(|c| {
            c.backup_type == BackupType::Diff
                && !c.damaged
                && c.base_set.as_deref() == Some(full.set_id.as_str())
        })
        .find(|c| sel.ends_before(c));
    Ok(Chain {
        full: full.clone(),
        diff: diff.cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str, kind: &str, base: Option<&str>, finished: &str, stop: &str) -> CatalogEntry {
        CatalogEntry {
            set_id: id.into(),
            name: None,
            backup_type: kind.parse().unwrap(),
            copy_only: false,
            damaged: false,
            base_set: base.map(str::to_string),
            source_kind: crate::format::manifest::SourceKind::Postgres,
            database: "postgres".into(),
            system_identifier: None,
            timeline: Some(1),
            start_lsn: None,
            stop_lsn: Some(stop.into()),
            start_wal: None,
            stop_wal: None,
            started: finished.into(),
            finished: finished.into(),
            seconds: 1.0,
            read_bytes: None,
            raw_bytes: 0,
            stored_bytes: 0,
            codec: "none".into(),
            stripes: vec!["sets/x/1.pv".into()],
        }
    }

    fn catalog() -> Vec<CatalogEntry> {
        vec![
            set(
                "aaa1",
                "full",
                None,
                "2026-11-01T10:00:00+00:00",
                "0/2000100",
            ),
            set(
                "aaa2",
                "diff",
                Some("aaa1"),
                "2026-11-01T11:00:00+00:00",
                "0/4000100",
            ),
            set(
                "bbb1",
                "full",
                None,
                "2026-11-01T12:00:00+00:00",
                "0/6000100",
            ),
            set(
                "bbb2",
                "diff",
                Some("bbb1"),
                "2026-11-01T13:00:00+00:00",
                "0/8000100",
            ),
            set(
                "bbb3",
                "diff",
                Some("bbb1"),
                "2026-11-01T14:00:00+00:00",
                "0/A000100",
            ),
        ]
    }

    fn ids(c: &Chain) -> (String, Option<String>) {
        (
            c.full.set_id.clone(),
            c.diff.as_ref().map(|d| d.set_id.clone()),
        )
    }

    fn pick(
        set: Option<&str>,
        until: Option<&str>,
        lsn: Option<&str>,
    ) -> Result<(String, Option<String>)> {
        let cat = catalog();
        select(&cat, &Selector::parse(set, until, lsn)?).map(|c| ids(&c))
    }

    #[test]
    fn newest_full_and_diff_before_the_target() {
        assert_eq!(
            pick(None, None, None).unwrap(),
            ("bbb1".into(), Some("bbb3".into()))
        );
        assert_eq!(
            pick(None, Some("2026-11-01 13:30:00+00"), None).unwrap(),
            ("bbb1".into(), Some("bbb2".into()))
        );
        assert_eq!(
            pick(None, None, Some("0/5000000")).unwrap(),
            ("aaa1".into(), Some("aaa2".into()))
        );
        assert_eq!(
            pick(None, None, Some("0/3000000")).unwrap(),
            ("aaa1".into(), None)
        );
        let e = pick(None, None, Some("0/1000000")).unwrap_err().to_string();
        assert!(e.contains("no full backup set"), "{e}");
        // Damaged sets are passed over.
        let mut cat = catalog();
        cat[4].damaged = true;
        cat[2].damaged = true;
        let c = select(&cat, &Selector::default()).unwrap();
        assert_eq!(ids(&c), ("aaa1".into(), Some("aaa2".into())));
        assert!(select(&[], &Selector::default())
            .unwrap_err()
            .to_string()
            .contains("no backup sets"));
    }

    #[test]
    fn named_sets_prefixes_and_bad_targets() {
        assert_eq!(
            pick(Some("bbb2"), None, None).unwrap(),
            ("bbb1".into(), Some("bbb2".into()))
        );
        assert_eq!(
            pick(Some("aaa1"), None, None).unwrap(),
            ("aaa1".into(), None)
        );
        assert_eq!(
            pick(Some("aaa2"), None, None).unwrap(),
            ("aaa1".into(), Some("aaa2".into()))
        );
        let e = pick(Some("bbb"), None, None).unwrap_err().to_string();
        assert!(
            e.contains("names 3 sets") && e.contains("bbb1, bbb2, bbb3"),
            "{e}"
        );
        assert!(pick(Some("ccc"), None, None)
            .unwrap_err()
            .to_string()
            .contains("no set 'ccc'"));
        let mut cat = catalog();
        cat.remove(2);
        let e = select(&cat, &Selector::parse(Some("bbb2"), None, None).unwrap()).unwrap_err();
        assert!(e.to_string().contains("base full set bbb1"), "{e}");
        assert!(Selector::parse(None, Some("yesterday"), None).is_err());
        assert!(Selector::parse(None, Some("2026-11-01 10:00:00"), None).is_err());
        assert!(Selector::parse(None, None, Some("12")).is_err());
        assert_eq!(newest(&catalog()).unwrap().set_id, "bbb3");
    }
}
