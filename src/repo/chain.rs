//! Which sets a restore from a repository uses: a chain of a full set, the newest
//! differential over it and the incrementals after that, chosen from the catalog for a
//! recovery target. Pure: no I/O, no server.
//!
//! Rules: without `--set`, the chain is the newest usable (not damaged) full that ended
//! before the target, then the newest usable differential whose base is that full and
//! that ended before the target, then, in catalog order, every usable incremental that
//! ended before the target and whose base is a link of the chain (a newer incremental
//! based on an earlier link replaces the links after it: the newest line wins). An
//! incremental of another line (its base older than the full) is left out; one whose
//! base is damaged or no longer recorded is refused by name. `--set ID` restores the
//! chain ending at that set, walked back by `base_set`: each link must be recorded,
//! undamaged, older than the one after it, and a differential's base must be a full.

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

/// The sets to restore, oldest first: a full, then differentials and incrementals, each
/// based on the one before it.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub links: Vec<CatalogEntry>,
}

impl Chain {
    /// The full set the chain starts from.
    pub fn full(&self) -> &CatalogEntry {
        &self.links[0]
    }

    /// The newest set applied: its backup_label starts recovery.
    pub fn last(&self) -> &CatalogEntry {
        self.links.last().expect("a chain holds its full set")
    }

    /// The links whose visibility maps may be stale ([`CatalogEntry::vm_may_be_stale`]):
    /// the chain restores such maps when there is one.
    pub fn stale_vm(&self) -> Vec<&str> {
        (self.links.iter())
            .filter(|l| l.vm_may_be_stale())
            .map(|l| l.set_id.as_str())
            .collect()
    }
}

/// The sets of `catalog` whose restore may hold stale visibility maps: each that is so
/// itself or has such a set among the bases it is built on.
pub fn stale_vm_sets(catalog: &[CatalogEntry]) -> Vec<String> {
    let by_id: std::collections::HashMap<&str, &CatalogEntry> =
        catalog.iter().map(|e| (e.set_id.as_str(), e)).collect();
    let stale = |start: &CatalogEntry| {
        let mut e = start;
        // A chain is a handful of links; the bound only guards a cycle of forged records.
        for _ in 0..=catalog.len() {
            if e.vm_may_be_stale() {
                return true;
            }
            match e.base_set.as_deref().and_then(|b| by_id.get(b).copied()) {
                Some(b) => e = b,
                None => return false,
            }
        }
        false
    };
    (catalog.iter())
        .filter(|e| stale(e))
        .map(|e| e.set_id.clone())
        .collect()
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

/// The chain to restore for `sel` (the module's rules).
pub fn select(catalog: &[CatalogEntry], sel: &Selector) -> Result<Chain> {
    if let Some(id) = &sel.set {
        return ending_at(catalog, find(catalog, id)?);
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
    let mut links = vec![full.clone()];
    let diff = catalog.iter().rev().find(|c| {
        c.backup_type == BackupType::Diff
            && !c.damaged
            && c.base_set.as_deref() == Some(full.set_id.as_str())
            && sel.ends_before(c)
    });
    links.extend(diff.cloned());
    let after = position(catalog, links.last().unwrap()) + 1;
    for c in &catalog[after..] {
        if c.backup_type != BackupType::Incr || c.damaged || !sel.ends_before(c) {
            continue;
        }
        let base = c.base_set.as_deref().unwrap_or("");
        if let Some(at) = links.iter().position(|l| l.set_id == base) {
            links.truncate(at + 1);
            links.push(c.clone());
            continue;
        }
        match catalog.iter().find(|b| b.set_id == base) {
            None => bail!(
                "incremental {} needs its base set {base}, which is no longer in the repository; restore an older set with --set",
                c.set_id
            ),
            Some(b) if b.damaged => bail!(
                "incremental {} is based on set {base}, which is damaged; restore an older set with --set",
                c.set_id
            ),
            // Another line (based on a set before the chain's full).
            Some(_) => {}
        }
    }
    Ok(Chain { links })
}

/// Where `c` is in the catalog (it is one of its entries).
fn position(catalog: &[CatalogEntry], c: &CatalogEntry) -> usize {
    catalog
        .iter()
        .position(|x| x.set_id == c.set_id)
        .unwrap_or(0)
}

/// The chain ending at the named set, walked back by `base_set` to a full set.
fn ending_at(catalog: &[CatalogEntry], last: &CatalogEntry) -> Result<Chain> {
    let mut links = vec![last.clone()];
    while links[0].backup_type != BackupType::Full {
        let c = &links[0];
        let what = match c.backup_type {
            BackupType::Diff => "differential",
            _ => "incremental",
        };
        let base = c.base_set.as_deref().unwrap_or("");
        let Some(b) = catalog.iter().find(|b| b.set_id == base) else {
            bail!(
                "{what} {} needs its base set {base}, which is no longer in the repository",
                c.set_id
            );
        };
        if b.damaged {
            bail!(
                "{what} {} is based on set {base}, which is damaged",
                c.set_id
            );
        }
        if position(catalog, b) >= position(catalog, c) {
            bail!(
                "{what} {} names base set {base}, which is not older than it",
                c.set_id
            );
        }
        if c.backup_type == BackupType::Diff && b.backup_type != BackupType::Full {
            bail!(
                "differential {} is based on {} {base}: a differential's base must be a full set",
                c.set_id,
                b.backup_type
            );
        }
        links.insert(0, b.clone());
    }
    Ok(Chain { links })
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
            stripe_versions: vec![],
            base_version: None,
            change_rules: None,
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

    #[test]
    fn sets_built_on_a_stale_map_are_named() {
        let mut cat = with_incrs();
        for e in cat.iter_mut() {
            e.source_kind = crate::format::manifest::SourceKind::Postgres;
            e.change_rules = Some(crate::pg::walsummary::RULES);
        }
        assert!(stale_vm_sets(&cat).is_empty());
        // One incremental of the old rules: it and every set built on it.
        let i = cat
            .iter()
            .position(|e| e.backup_type == BackupType::Incr)
            .unwrap();
        cat[i].change_rules = Some(1);
        let stale = stale_vm_sets(&cat);
        assert!(stale.contains(&cat[i].set_id), "{stale:?}");
        for e in &cat {
            let on_it = stale.contains(&e.set_id);
            let mut b = Some(e);
            let mut via = false;
            while let Some(x) = b {
                via |= x.set_id == cat[i].set_id;
                b = x
                    .base_set
                    .as_deref()
                    .and_then(|id| cat.iter().find(|c| c.set_id == id));
            }
            assert_eq!(on_it, via, "{}", e.set_id);
        }
        // A record from before rules were recorded: a diff, an incr or a merge counts.
        let mut old = cat[0].clone();
        old.change_rules = None;
        assert!(!old.vm_may_be_stale(), "a full");
        old.name = Some(format!("{}abc (2 sets)", crate::repo::MERGE_NAME));
        assert!(old.vm_may_be_stale(), "a merged full");
        old.name = None;
        old.backup_type = BackupType::Diff;
        assert!(old.vm_may_be_stale());
        old.source_kind = crate::format::manifest::SourceKind::Files;
        assert!(!old.vm_may_be_stale(), "not PostgreSQL");
    }

    fn ids(c: &Chain) -> Vec<String> {
        c.links.iter().map(|l| l.set_id.clone()).collect()
    }

    fn pick(set: Option<&str>, until: Option<&str>, lsn: Option<&str>) -> Result<Vec<String>> {
        let cat = catalog();
        select(&cat, &Selector::parse(set, until, lsn)?).map(|c| ids(&c))
    }

    fn v(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn newest_full_and_diff_before_the_target() {
        assert_eq!(pick(None, None, None).unwrap(), v(&["bbb1", "bbb3"]));
        assert_eq!(
            pick(None, Some("2026-11-01 13:30:00+00"), None).unwrap(),
            v(&["bbb1", "bbb2"])
        );
        assert_eq!(
            pick(None, None, Some("0/5000000")).unwrap(),
            v(&["aaa1", "aaa2"])
        );
        assert_eq!(pick(None, None, Some("0/3000000")).unwrap(), v(&["aaa1"]));
        let e = pick(None, None, Some("0/1000000")).unwrap_err().to_string();
        assert!(e.contains("no full backup set"), "{e}");
        // Damaged sets are passed over.
        let mut cat = catalog();
        cat[4].damaged = true;
        cat[2].damaged = true;
        let c = select(&cat, &Selector::default()).unwrap();
        assert_eq!(ids(&c), v(&["aaa1", "aaa2"]));
        assert_eq!(c.full().set_id, "aaa1");
        assert_eq!(c.last().set_id, "aaa2");
        assert!(select(&[], &Selector::default())
            .unwrap_err()
            .to_string()
            .contains("no backup sets"));
    }

    #[test]
    fn named_sets_prefixes_and_bad_targets() {
        assert_eq!(
            pick(Some("bbb2"), None, None).unwrap(),
            v(&["bbb1", "bbb2"])
        );
        assert_eq!(pick(Some("aaa1"), None, None).unwrap(), v(&["aaa1"]));
        assert_eq!(
            pick(Some("aaa2"), None, None).unwrap(),
            v(&["aaa1", "aaa2"])
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
        assert!(
            e.to_string()
                .contains("differential bbb2 needs its base set bbb1"),
            "{e}"
        );
        assert!(Selector::parse(None, Some("yesterday"), None).is_err());
        assert!(Selector::parse(None, Some("2026-11-01 10:00:00"), None).is_err());
        assert!(Selector::parse(None, None, Some("12")).is_err());
        assert_eq!(newest(&catalog()).unwrap().set_id, "bbb3");
    }

    /// bbb1 full, bbb3 diff, then incrementals each based on the one before.
    fn with_incrs() -> Vec<CatalogEntry> {
        let mut cat = catalog();
        let mut base = "bbb3".to_string();
        for (i, h) in ["15", "16", "17", "18"].iter().enumerate() {
            let id = format!("ccc{i}");
            let stop = format!("0/{:X}000100", 0xB + i);
            let at = format!("2026-11-01T{h}:00:00+00:00");
            cat.push(set(&id, "incr", Some(&base), &at, &stop));
            base = id;
        }
        cat
    }

    fn chain_of(cat: &[CatalogEntry], set: Option<&str>, lsn: Option<&str>) -> Result<Vec<String>> {
        select(cat, &Selector::parse(set, None, lsn)?).map(|c| ids(&c))
    }

    #[test]
    fn incrementals_extend_the_chain_up_to_the_target() {
        let cat = with_incrs();
        let all = v(&["bbb1", "bbb3", "ccc0", "ccc1", "ccc2", "ccc3"]);
        assert_eq!(chain_of(&cat, None, None).unwrap(), all);
        // By LSN and by time: the newest link that ended before the target.
        assert_eq!(chain_of(&cat, None, Some("0/D000200")).unwrap(), all[..5]);
        assert_eq!(chain_of(&cat, None, Some("0/C000200")).unwrap(), all[..4]);
        assert_eq!(chain_of(&cat, None, Some("0/C000000")).unwrap(), all[..3]);
        let t = Selector::parse(None, Some("2026-11-01 16:30:00+00"), None).unwrap();
        assert_eq!(ids(&select(&cat, &t).unwrap()), all[..4]);
        // --set names any link: the chain ending at it.
        assert_eq!(chain_of(&cat, Some("ccc1"), None).unwrap(), all[..4]);
        assert_eq!(chain_of(&cat, Some("ccc3"), None).unwrap(), all);
        // An incremental based on an earlier link replaces the links after it.
        let mut cat2 = cat.clone();
        cat2.push(set(
            "ddd",
            "incr",
            Some("ccc0"),
            "2026-11-01T19:00:00+00:00",
            "0/F000100",
        ));
        assert_eq!(
            chain_of(&cat2, None, None).unwrap(),
            v(&["bbb1", "bbb3", "ccc0", "ddd"])
        );
        // A damaged incremental is passed over at the end of the chain ...
        let mut cat3 = cat.clone();
        cat3[8].damaged = true;
        assert_eq!(chain_of(&cat3, None, None).unwrap(), all[..5]);
        // ... and refused by name in the middle of one.
        let mut cat4 = cat.clone();
        cat4[6].damaged = true;
        refused(
            &cat4,
            None,
            "incremental ccc2 is based on set ccc1, which is damaged",
        );
        refused(
            &cat4,
            Some("ccc3"),
            "incremental ccc2 is based on set ccc1, which is damaged",
        );
    }

    /// The chain of `cat` ending at `set` is refused with an error saying `want`.
    fn refused(cat: &[CatalogEntry], set: Option<&str>, want: &str) {
        let e = chain_of(cat, set, None).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }

    #[test]
    fn broken_links_are_refused_by_name() {
        // A missing link.
        let mut cat = with_incrs();
        cat.remove(6);
        refused(
            &cat,
            None,
            "incremental ccc2 needs its base set ccc1, which is no longer",
        );
        refused(
            &cat,
            Some("ccc3"),
            "incremental ccc2 needs its base set ccc1",
        );
        // A base that is newer than the set, and a differential over an incremental.
        let mut cat = with_incrs();
        cat[6].base_set = Some("ccc3".into());
        refused(
            &cat,
            Some("ccc1"),
            "ccc1 names base set ccc3, which is not older",
        );
        let mut cat = with_incrs();
        cat.push(set(
            "eee",
            "diff",
            Some("ccc0"),
            "2026-11-01T20:00:00+00:00",
            "0/F000100",
        ));
        refused(&cat, Some("eee"), "differential eee is based on incr ccc0");
        // An incremental of another line (based on a set before the full) is left out.
        let mut cat = with_incrs();
        cat[5].base_set = Some("aaa2".into());
        assert_eq!(chain_of(&cat, None, None).unwrap(), v(&["bbb1", "bbb3"]));
    }
}
