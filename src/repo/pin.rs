//! Catalog records pinned to versions. In a versioned store each record of a diff or
//! incr names the version id of its base's record as it read it (`base_version`): a
//! base record put over (or deleted) later is read at that version, and said so. The
//! newest record of a chain names nothing above it: only signing protects it.

use super::{parse_record, CatalogEntry, Repo, RECORD_MAX};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the last read of the catalog saw.
#[derive(Default)]
pub(super) struct Pins {
    /// The version id each record was read at (set id -> version).
    read: Mutex<HashMap<String, String>>,
    /// Records read at the version a later record names, one sentence each.
    notes: Mutex<Vec<String>>,
}

impl Pins {
    pub(super) fn set_read(&self, read: HashMap<String, String>) {
        *self.read.lock().unwrap() = read;
    }
}

impl Repo {
    /// The version id the store named set `id`'s record by when the catalog was last
    /// read (None: not read, or a store without versions).
    pub fn record_version(&self, id: &str) -> Option<String> {
        self.pins.read.lock().unwrap().get(id).cloned()
    }

    /// The records the last read of the catalog found overwritten or deleted since a
    /// later record named their version, and read at that version.
    pub fn record_notes(&self) -> Vec<String> {
        self.pins.notes.lock().unwrap().clone()
    }

    /// Puts back, in `out` (oldest first), every base record whose newest version is
    /// not the one its oldest child names: that version is read instead. A version
    /// that cannot be read, or does not hold the base's record, leaves `out` as it is,
    /// said in the notes.
    pub(super) fn pin_bases(&self, out: &mut Vec<CatalogEntry>) {
        let read = self.pins.read.lock().unwrap().clone();
        let mut notes = vec![];
        let pinned: Vec<(String, String, String)> = (out.iter())
            .filter_map(|e| {
                Some((
                    e.base_set.clone()?,
                    e.base_version.clone()?,
                    e.set_id.clone(),
                ))
            })
            .collect();
        let mut done = std::collections::HashSet::new();
        for (base, version, child) in pinned {
            if !done.insert(base.clone()) || read.get(&base) == Some(&version) {
                continue;
            }
            let rel = format!("catalog/{base}.json");
            let shown = self.store.describe(&rel);
            let got = self.store.get_versioned(&rel, RECORD_MAX, Some(&version));
            let e = match got.map(|b| b.map(|(b, _)| parse_record(&b))) {
                Ok(Some(Ok(e))) if e.set_id == base => e,
                Ok(Some(Ok(_))) => {
                    notes.push(format!("catalog record {shown}: version {version}, which set {child} names, holds another set's record; the newest is read"));
                    continue;
                }
                Ok(Some(Err(e))) => {
                    notes.push(format!("catalog record {shown}: version {version}, which set {child} names, is damaged ({e}); the newest is read"));
                    continue;
                }
                Ok(None) => {
                    notes.push(format!("catalog record {shown}: version {version}, which set {child} names, is gone; the newest is read"));
                    continue;
                }
                Err(e) => {
                    notes.push(format!("catalog record {shown}: version {version}, which set {child} names, cannot be read ({e:#}); the newest is read"));
                    continue;
                }
            };
            match out.iter().position(|x| x.set_id == base) {
                // Written again with the same content (an expire's record put back).
                Some(i) if out[i] == e => {}
                Some(i) => {
                    out[i] = e;
                    notes.push(format!(
                        "catalog record {shown} was overwritten after set {child} was based on it (version {version} named by set {child}, now {}); version {version} is read",
                        read.get(&base).map_or("unnamed", String::as_str)
                    ));
                }
                None => {
                    out.push(e);
                    notes.push(format!(
                        "catalog record {shown} was deleted after set {child} was based on it; version {version}, which set {child} names, is read"
                    ));
                }
            }
        }
        out.sort_by(|a, b| a.started.cmp(&b.started));
        *self.pins.notes.lock().unwrap() = notes;
    }
}
