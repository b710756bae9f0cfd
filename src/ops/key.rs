//! `key rotate`: an encrypted repository's data keys (each set's, each archived WAL
//! file's), or a signed one's MAC keys (each set's), rewrapped from the old master key
//! to a new one, and its marker, without re-encrypting any data: on a filesystem each
//! key block is rewritten in place; in an object store, which has no write in place,
//! each stripe and WAL file is written anew (its bytes copied within the store through
//! this host). The marker records the new key first ("rotating-to"), so a rotation
//! that stops halfway is finished by running it again with the same keys.

use crate::crypt::{show_id, KeySource};
use crate::device::object::StoreOptions;
use crate::format::seal::KeyUse;
use crate::repo::store::DirStore;
use crate::repo::{wal, Repo, RepoKey};
use crate::set::rekey::{rekey_check, rekey_stripe, Rekeyed};
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct RotateOptions {
    pub repo: String,
    pub old: KeySource,
    pub new: KeySource,
    /// Object-store options (the key in it is not used).
    pub store: StoreOptions,
}

#[derive(Debug, Clone, Serialize)]
pub struct RotateReport {
    pub command: &'static str,
    pub repo: String,
    pub old_key_id: String,
    pub new_key_id: String,
    /// Stripes rewrapped, and those a previous run had rewrapped.
    pub stripes: u64,
    pub stripes_already: u64,
    /// Stripes of a signed repository's sets from before it was signed: no key block.
    pub stripes_plain: u64,
    /// Archived WAL files and summaries rewrapped, and those already done.
    pub wal_files: u64,
    pub wal_already: u64,
}

pub fn rotate(o: &RotateOptions) -> Result<RotateReport> {
    let store = StoreOptions {
        key: None,
        ..o.store.clone()
    };
    let repo = Repo::open(&o.repo, false, &store)?;
    repo.refuse_rewrite("its key cannot be rotated (its marker and key blocks are never rewritten); copy its sets into a new repository made with the new key")?;
    let Some(cur) = repo.protection() else {
        bail!(
            "repository '{}' is neither encrypted nor signed: there is no key to rotate",
            repo.describe()
        );
    };
    let signed = cur.mode == KeyUse::Sign;
    let old = o
        .old
        .master(&cur.kdf)
        .map_err(|e| anyhow!("the old key: {e}"))?;
    if old.id != cur.key_id {
        bail!(
            "repository '{}' is {} with key id {}, and {} gives key id {}: wrong old key",
            repo.describe(),
            cur.mode.verb(),
            show_id(&cur.key_id),
            o.old.origin(),
            show_id(&old.id)
        );
    }
    // A rotation that stopped halfway goes on to the key it recorded.
    let target = match repo.rotating()? {
        Some(t) => t,
        None => {
            let kdf = o.new.new_kdf();
            let m = o
                .new
                .master(&kdf)
                .map_err(|e| anyhow!("the new key: {e}"))?;
            RepoKey {
                key_id: m.id,
                kdf,
                mode: cur.mode,
            }
        }
    };
    let new = o
        .new
        .master(&target.kdf)
        .map_err(|e| anyhow!("the new key: {e}"))?;
    if new.id != target.key_id {
        bail!(
            "a rotation of repository '{}' to key id {} was left halfway, and {} gives key id {}: give that rotation's new key",
            repo.describe(),
            show_id(&target.key_id),
            o.new.origin(),
            show_id(&new.id)
        );
    }
    repo.check_marker(&old)?;
    if new.id == old.id {
        // The same key: only the marker is authenticated (one written before markers
        // were, on the word of whoever holds the key).
        if repo.rotating()?.is_some() {
            bail!(
                "a rotation of repository '{}' was left halfway: give the key it rotates to as the new key to finish it",
                repo.describe()
            );
        }
        repo.set_key(cur, None, &old)?;
        return Ok(RotateReport {
            command: "key rotate",
            repo: repo.describe(),
            old_key_id: show_id(&old.id),
            new_key_id: show_id(&new.id),
            stripes: 0,
            stripes_already: 0,
            stripes_plain: 0,
            wal_files: 0,
            wal_already: 0,
        });
    }
    // Every record read and every stripe checked before the marker says anything: a
    // damaged or forged one stops the rotation before it starts.
    let catalog = repo.catalog()?;
    for e in &catalog {
        for st in &e.stripes {
            let checked = match stripe_store(&repo, st) {
                Some((dir, name)) => rekey_check(&dir, &name, &old, &new, target.kdf, signed),
                None if st.contains("://") => Err(anyhow!(
                    "stripe '{st}' is in an object store outside the repository, which key rotate does not rewrite"
                )),
                None => rekey_check(repo.store(), st, &old, &new, target.kdf, signed),
            };
            checked.map_err(|err| {
                err.context(format!(
                    "set {}: nothing was rotated (the marker and every stripe are as they were)",
                    e.set_id
                ))
            })?;
        }
    }
    // A stripe rewritten in a versioned bucket is a new version: the records' pins
    // (to the stripes' and base records' versions) are dropped first, so that a
    // rotation stopped halfway reads as one without them. (An immutable repository,
    // where they matter most, is never rotated.)
    for e in catalog.iter() {
        if !e.stripe_versions.is_empty() || e.base_version.is_some() {
            let mut e = e.clone();
            e.stripe_versions.clear();
            e.base_version = None;
            repo.record(&e)?;
        }
    }
    repo.set_key(cur, Some(&target), &old)?;
    // A signal stops it between files (an object's upload is aborted): run it again.
    let _signals = crate::interrupt::catch();
    let stopped = |done: u64| {
        match crate::interrupt::received() {
        Some(sig) => Err(anyhow!(
            "{}: {done} stripes rotated; the rest still open with the old key: run key rotate again with the same keys to finish",
            crate::interrupt::error(sig)
        )),
        None => Ok(()),
    }
    };
    let (mut stripes, mut stripes_already, mut stripes_plain) = (0, 0, 0);
    for e in catalog {
        for st in &e.stripes {
            stopped(stripes)?;
            let done = match stripe_store(&repo, st) {
                Some((dir, name)) => rekey_stripe(&dir, &name, &old, &new, target.kdf, signed),
                None if st.contains("://") => bail!(
                    "set {}: stripe '{st}' is in an object store outside the repository, which key rotate does not rewrite; the stripes before it were rotated, and running key rotate again with the same keys goes on",
                    e.set_id
                ),
                None => rekey_stripe(repo.store(), st, &old, &new, target.kdf, signed),
            };
            let done = done.map_err(|e| match crate::interrupt::received() {
                Some(_) => e.context(format!(
                    "{stripes} stripes rotated; run key rotate again with the same keys to finish"
                )),
                None => e,
            });
            match done? {
                Rekeyed::Done => stripes += 1,
                Rekeyed::Already => stripes_already += 1,
                Rekeyed::Plain => stripes_plain += 1,
            }
        }
    }
    // Sealed or signed WAL envelopes (a signed repository's plain files from before
    // its signing stay as they are).
    let (wal_files, wal_already) = wal::rekey(&repo, &old, &new)?;
    repo.set_key(target, None, &new)?;
    Ok(RotateReport {
        command: "key rotate",
        repo: repo.describe(),
        old_key_id: show_id(&old.id),
        new_key_id: show_id(&new.id),
        stripes,
        stripes_already,
        stripes_plain,
        wal_files,
        wal_already,
    })
}

/// A stripe recorded by an absolute path (outside the repository): its directory as a
/// store, and its name. None for one inside the repository (or an object URL).
fn stripe_store(repo: &Repo, recorded: &str) -> Option<(DirStore, String)> {
    if recorded.contains("://") || !Path::new(recorded).is_absolute() {
        return None;
    }
    let spec = repo.stripe_path(recorded);
    let p = Path::new(&spec);
    let name = p.file_name()?.to_string_lossy().into_owned();
    Some((DirStore::new(p.parent()?.to_path_buf()), name))
}
