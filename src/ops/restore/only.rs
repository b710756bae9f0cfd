//! `restore --db-include` / `--db-exclude`: the databases whose relation files are
//! left out (created at their size as sparse, empty files; nothing of them read from
//! the set), chosen by name (the set's recorded `databases`) or OID.

use crate::format::manifest::{EntryKind, Manifest};
use crate::pg::facts::PgFacts;
use crate::pg::page::RelPath;
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// The databases left out of a restore, and what of them.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    pub databases: Vec<LeftOutDb>,
    /// Relation files of them in the restored set: created empty, at their size.
    pub files: u64,
    /// Their size in bytes (the set's raw bytes not restored).
    pub bytes: u64,
    /// Stored bytes of their frames, stepped over unread (every set of the chain).
    pub stored_bytes_not_read: u64,
    #[serde(skip)]
    oids: HashSet<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeftOutDb {
    pub oid: u32,
    /// None when the set records no names (sets of older releases).
    pub name: Option<String>,
}

impl LeftOut {
    /// What `--db-include` and `--db-exclude` leave out of `newest` (the set whose
    /// files are restored), or None when neither is given.
    pub fn choose(
        include: &[String],
        exclude: &[String],
        newest: &Manifest,
    ) -> Result<Option<LeftOut>> {
        choose(include, exclude, newest)
    }
}

fn choose(include: &[String], exclude: &[String], newest: &Manifest) -> Result<Option<LeftOut>> {
    if include.is_empty() && exclude.is_empty() {
        return Ok(None);
    }
    if !include.is_empty() && !exclude.is_empty() {
        bail!("--db-include and --db-exclude exclude each other: name the databases to keep, or those to leave out");
    }
    let facts = PgFacts::from_extra(&newest.extra)
        .map_err(|e| anyhow!("set {}: {e}", newest.set_id))?
        .ok_or_else(|| anyhow!("--db-include and --db-exclude apply to PostgreSQL sets only; set {} is of a {} source", newest.set_id, newest.source.kind))?;
    let names = &facts.databases;
    // The databases the set holds files of; the built-in ones (template0, template1,
    // postgres: below the first normal OID) are always restored.
    let held: BTreeSet<u32> = (newest.files.iter())
        .filter(|f| f.kind == EntryKind::File)
        .filter_map(|f| RelPath::parse(&f.path))
        .map(|r| r.db)
        .chain(names.keys().copied())
        .filter(|&db| db >= crate::pg::FIRST_NORMAL_OID)
        .collect();
    let resolve = |given: &String| -> Result<u32> {
        let by_name = names.iter().find(|(_, n)| *n == given).map(|(o, _)| *o);
        let oid = by_name
            .or_else(|| {
                given
                    .parse::<u32>()
                    .ok()
                    .filter(|o| held.contains(o) || names.contains_key(o))
            })
            .ok_or_else(|| unknown(given, names, &newest.set_id))?;
        if oid < crate::pg::FIRST_NORMAL_OID {
            match include.is_empty() {
                true => bail!("database '{given}' is built in (template0, template1, postgres): it is always restored, and cannot be left out"),
                false => return Ok(oid),
            }
        }
        Ok(oid)
    };
    let oids: HashSet<u32> = match include.is_empty() {
        false => {
            let keep: HashSet<u32> = include.iter().map(resolve).collect::<Result<_>>()?;
            held.iter().copied().filter(|o| !keep.contains(o)).collect()
        }
        true => exclude.iter().map(resolve).collect::<Result<_>>()?,
    };
    let (mut files, mut bytes) = (0, 0);
    for f in newest.files.iter().filter(|f| f.kind == EntryKind::File) {
        if RelPath::parse(&f.path).is_some_and(|r| oids.contains(&r.db)) {
            files += 1;
            bytes += f.size;
        }
    }
    let mut databases: Vec<LeftOutDb> = (oids.iter())
        .map(|&oid| LeftOutDb {
            oid,
            name: names.get(&oid).cloned(),
        })
        .collect();
    databases.sort_by_key(|d| d.oid);
    Ok(Some(LeftOut {
        databases,
        files,
        bytes,
        stored_bytes_not_read: 0,
        oids,
    }))
}

fn unknown(given: &str, names: &BTreeMap<u32, String>, set: &str) -> anyhow::Error {
    match names.is_empty() {
        true => anyhow!("set {set} records no database names (it was written by an older release): give the database's OID (its directory under base/) instead of '{given}'"),
        false => anyhow!(
            "set {set} holds no database '{}': it holds {}",
            given.escape_debug(),
            names.iter().map(|(o, n)| format!("{} ({o})", n.escape_debug())).collect::<Vec<_>>().join(", ")
        ),
    }
}

impl LeftOut {
    /// The manifest ids of `m`'s files left out (`m` any set of the chain).
    pub fn ids(&self, m: &Manifest) -> HashSet<u32> {
        (m.files.iter())
            .filter(|f| f.kind == EntryKind::File)
            .filter(|f| RelPath::parse(&f.path).is_some_and(|r| self.oids.contains(&r.db)))
            .map(|f| f.id)
            .collect()
    }

    /// The databases, by name and OID.
    fn names(&self) -> String {
        let names: Vec<String> = (self.databases.iter())
            .map(|d| match &d.name {
                Some(n) => format!("{} ({})", n.escape_debug(), d.oid),
                None => d.oid.to_string(),
            })
            .collect();
        names.join(", ")
    }

    /// What would be left out (`files`).
    pub fn summary(&self) -> String {
        format!(
            "Left out: database(s) {}, {} relation file(s), {} bytes.",
            self.names(),
            self.files,
            self.bytes
        )
    }

    /// The restore summary's sentence.
    pub fn note(&self) -> String {
        format!(
            "database(s) {} left out: their {} relation file(s) ({} bytes) are empty sparse files, nothing of them read ({} stored bytes stepped over); once recovery ends, DROP DATABASE each of them (they cannot be read)",
            self.names(),
            self.files,
            self.bytes,
            self.stored_bytes_not_read
        )
    }
}
