//! Making a repository (`pagevault init`), and the immutable repository's rules:
//! nothing in it is overwritten or renamed in place (its marker is written once, with
//! its key; catalog records, WAL files and summaries are created only where absent),
//! and nothing is removed while the store's retention may still hold it.

use super::marker::{immutable_line, MARKER_HEAD};
use super::store::{DirStore, Store};
use super::{own_stripe, CatalogEntry, Repo, MARKER};
use crate::device::object::StoreOptions;
use crate::format::seal::KeyUse;
use anyhow::{anyhow, bail, Context, Result};
use std::time::{Duration, SystemTime};

/// Why objects are kept: the retention the marker names covers them until `until`,
/// or the store refused their removal.
#[derive(Debug, Clone)]
pub struct Lock {
    pub until: Option<SystemTime>,
    /// The store's refusal, when it refused.
    pub refusal: Option<String>,
}

impl Repo {
    /// Makes a new repository at `spec`: its marker written once (create-only), keyed
    /// when `options` give a key (`mode`: encrypted or signed); immutable with
    /// `retain` seconds. Refused where a repository or anything else already is.
    pub fn init(
        spec: &str,
        options: &StoreOptions,
        retain: Option<u64>,
        mode: KeyUse,
    ) -> Result<Repo> {
        let text = match &options.key {
            Some(source) => {
                let kdf = source.new_kdf();
                let master = source
                    .master(&kdf)
                    .map_err(|e| anyhow!("{}: {e}", source.origin()))?;
                let k = super::RepoKey {
                    key_id: master.id,
                    kdf,
                    mode,
                };
                k.marker_tagged_of(retain, Some(&super::marker::new_repo_id()), None, &master)
            }
            None => format!("{MARKER_HEAD}{}", immutable_line(retain)),
        };
        let made = match crate::device::object::parse(spec, options)? {
            Some(loc) => {
                let held: Vec<String> = loc.list()?.into_iter().map(|(k, _)| k).collect();
                if held.iter().any(|k| k == MARKER) {
                    bail!("'{}' is a repository already", loc.describe());
                }
                if let Some(k) = held.first() {
                    bail!(
                        "'{}' is not empty ('{k}'): a repository is made in an empty prefix",
                        loc.describe()
                    );
                }
                loc.join(MARKER).put_new(text.into_bytes())?
            }
            None if spec.contains("://") => {
                bail!("repository '{spec}': use a directory, s3://BUCKET/PREFIX, azure://CONTAINER/PREFIX or gs://BUCKET/PREFIX")
            }
            None => {
                let root = std::path::PathBuf::from(spec);
                if root.join(MARKER).exists() {
                    bail!("'{}' is a repository already", root.display());
                }
                if root.exists()
                    && std::fs::read_dir(&root)
                        .with_context(|| format!("cannot read '{}'", root.display()))?
                        .next()
                        .is_some()
                {
                    bail!(
                        "'{}' is not empty: a repository is made in an empty or new directory",
                        root.display()
                    );
                }
                for d in ["sets", "catalog", "wal"] {
                    super::create_dir(&root.join(d))?;
                }
                DirStore::new(root).put_new(MARKER, text.as_bytes())?
            }
        };
        if !made {
            bail!("'{spec}' is a repository already (another process made it meanwhile)");
        }
        Repo::open(spec, false, options)
    }

    /// An immutable repository's retention in seconds (None: not immutable).
    pub fn immutable(&self) -> Option<u64> {
        self.immutable
    }

    /// Refuses, in an immutable repository, a write that would rewrite an object.
    pub fn refuse_rewrite(&self, why: &str) -> Result<()> {
        match self.immutable {
            Some(_) => bail!("repository '{}' is immutable: {why}", self.describe()),
            None => Ok(()),
        }
    }

    /// Writes `rel`, an object rewritten as work goes on (a running backup's record).
    /// An immutable repository skips it (Ok(false)): each rewrite would be a version its
    /// retention keeps. Its writers need not know which kind of repository this is.
    pub fn put_rewritable(&self, rel: &str, bytes: &[u8]) -> Result<bool> {
        match self.immutable {
            Some(_) => Ok(false),
            None => self.store.put(rel, bytes).map(|()| true),
        }
    }

    /// Removes an object `put_rewritable` wrote; in an immutable repository nothing
    /// (it wrote none, and a versioned store keeps a delete as a marker).
    pub fn delete_rewritable(&self, rel: &str) -> Result<()> {
        match self.immutable {
            Some(_) => Ok(()),
            None => self.store.delete(rel),
        }
    }

    /// The objects of a set inside the repository: its own stripes, then its record.
    pub fn set_objects(&self, e: &CatalogEntry) -> Vec<String> {
        let mut out: Vec<String> = (e.stripes.iter())
            .map(|s| self.relative(&self.stripe_path(s)))
            .filter(|rel| own_stripe(&e.set_id, rel))
            .collect();
        out.push(format!("catalog/{}.json", e.set_id));
        out
    }

    /// Until when the retention an immutable repository's marker names holds `rels`
    /// (the newest of them counts); None when it holds none of them any longer, or
    /// the repository is not immutable.
    pub fn locked_until(&self, rels: &[String], now: SystemTime) -> Result<Option<SystemTime>> {
        let Some(retain) = self.immutable else {
            return Ok(None);
        };
        let mut until = None;
        for rel in rels {
            if let Some(t) = self.store.modified(rel)? {
                let u = t + Duration::from_secs(retain);
                until = until.max(Some(u));
            }
        }
        Ok(until.filter(|u| *u > now))
    }

    /// Removes an expired set of an immutable repository: its stripes first, its record
    /// last, so a set stays listed until every object of it is gone. Ok(Some) when the
    /// retention still holds it (nothing removed) or the store refused a removal.
    pub fn remove_set_unless_locked(
        &self,
        e: &CatalogEntry,
        now: SystemTime,
    ) -> Result<Option<Lock>> {
        let objects = self.set_objects(e);
        if let Some(until) = self.locked_until(&objects, now)? {
            return Ok(Some(Lock {
                until: Some(until),
                refusal: None,
            }));
        }
        let removed = self
            .remove_set_files(e)
            .and_then(|()| self.unrecord(&e.set_id));
        Ok(removed.err().map(|err| Lock {
            until: None,
            refusal: Some(format!("{err:#}")),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::manifest::{BackupType, SourceKind};

    fn entry(id: &str) -> CatalogEntry {
        CatalogEntry {
            set_id: id.into(),
            name: None,
            backup_type: BackupType::Full,
            copy_only: false,
            damaged: false,
            base_set: None,
            source_kind: SourceKind::Files,
            database: "x".into(),
            system_identifier: None,
            timeline: None,
            start_lsn: None,
            stop_lsn: None,
            start_wal: None,
            stop_wal: None,
            started: "2026-11-27T00:00:00Z".into(),
            finished: "2026-11-27T00:00:01Z".into(),
            seconds: 1.0,
            read_bytes: None,
            raw_bytes: 1,
            stored_bytes: 1,
            codec: "none".into(),
            stripes: vec![format!("sets/{id}/1.pv"), "/elsewhere/2.pv".into()],
            stripe_versions: vec![],
            base_version: None,
            change_rules: None,
        }
    }

    #[test]
    fn an_immutable_repository_writes_once_and_keeps_what_its_retention_holds() {
        let d = tempfile::tempdir().unwrap();
        let spec = d.path().join("r").display().to_string();
        let o = StoreOptions::default();
        let r = Repo::init(&spec, &o, Some(3600), KeyUse::Seal).unwrap();
        assert_eq!(r.immutable(), Some(3600));
        let again = Repo::init(&spec, &o, None, KeyUse::Seal).err().unwrap();
        assert!(format!("{again:#}").contains("a repository already"));
        assert_eq!(Repo::open(&spec, true, &o).unwrap().immutable(), Some(3600));

        let id = "0123456789abcdef0123456789abcdef";
        let e = entry(id);
        r.record(&e).unwrap();
        let twice = format!("{:#}", r.record(&e).unwrap_err());
        assert!(twice.contains("never overwritten"), "{twice}");
        r.store()
            .put_new(&format!("sets/{id}/1.pv"), b"stripe")
            .unwrap();
        // Its own stripe and its record; a stripe elsewhere is the user's.
        let objects = r.set_objects(&e);
        assert_eq!(
            objects,
            [format!("sets/{id}/1.pv"), format!("catalog/{id}.json")]
        );

        let now = SystemTime::now();
        let until = r.locked_until(&objects, now).unwrap().unwrap();
        assert!(until > now + Duration::from_secs(3500), "{until:?}");
        let lock = r.remove_set_unless_locked(&e, now).unwrap().unwrap();
        assert_eq!(lock.until, Some(until));
        assert_eq!(r.catalog().unwrap().len(), 1, "nothing removed");
        assert!(r.store().exists(&format!("sets/{id}/1.pv")).unwrap());
        // Past the retention: stripes, then the record.
        let later = now + Duration::from_secs(3700);
        assert_eq!(r.locked_until(&objects, later).unwrap(), None);
        assert!(r.remove_set_unless_locked(&e, later).unwrap().is_none());
        assert!(r.catalog().unwrap().is_empty());
        assert!(!r.store().exists(&format!("sets/{id}/1.pv")).unwrap());

        // The marker is never rewritten: no key taken up later.
        let k = crate::crypt::KeySource::key([7; 32], "a test key");
        let e = format!("{:#}", r.key_for(&k, KeyUse::Sign).unwrap_err());
        assert!(e.contains("immutable") && e.contains("takes no key"), "{e}");
        assert!(r.refuse_rewrite("x").is_err());
        // A rewritable object is skipped, and so is its removal.
        assert!(!r.put_rewritable("running/x.json", b"{}").unwrap());
        assert!(!r.store().exists("running/x.json").unwrap());
        r.delete_rewritable("running/x.json").unwrap();
        let (_d, plain) = crate::repo::temp_repo();
        assert!(plain.put_rewritable("running/x.json", b"{}").unwrap());
        assert!(plain.store().exists("running/x.json").unwrap());
        plain.delete_rewritable("running/x.json").unwrap();
        assert!(!plain.store().exists("running/x.json").unwrap());
    }
}
