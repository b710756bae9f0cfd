//! `key rotate` on a stripe: its key block rewrapped for a new master key (the first
//! 512 bytes rewritten: in place on a filesystem, the object written anew in an object
//! store); the frames and the manifest, sealed by the data key or tagged with the MAC
//! key, are not changed.

use crate::crypt::{show_id, Kdf, Master};
use crate::format::media::{MediaHeader, MIN_BLOCK};
use crate::format::seal::KeyBlock;
use crate::repo::store::Store;
use anyhow::{anyhow, bail, Result};

/// What `rekey_stripe` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rekeyed {
    Done,
    /// It was the new key's already (a rotation run again).
    Already,
    /// A plain stripe in a signed repository (a set from before its signing).
    Plain,
}

/// Rewraps the data or MAC key of stripe `rel` in `store` from `old` to `new`
/// (derivation `kdf`). A plain stripe is an error in an encrypted repository, skipped
/// in a signed one (`signed`).
pub fn rekey_stripe(
    store: &dyn Store,
    rel: &str,
    old: &Master,
    new: &Master,
    kdf: Kdf,
    signed: bool,
) -> Result<Rekeyed> {
    let shown = store.describe(rel);
    let mut did = Rekeyed::Done;
    store.patch_head(rel, MIN_BLOCK as u64, &mut |b| {
        did = rekey_block(b, &shown, old, new, kdf, signed)?;
        Ok(did == Rekeyed::Done)
    })?;
    Ok(did)
}

/// What `rekey_stripe` would do, writing nothing: a rotation checks every stripe first
/// and records nothing when one cannot be rewrapped.
pub fn rekey_check(
    store: &dyn Store,
    rel: &str,
    old: &Master,
    new: &Master,
    kdf: Kdf,
    signed: bool,
) -> Result<Rekeyed> {
    let shown = store.describe(rel);
    let mut b = store
        .get_head(rel, MIN_BLOCK as u64)?
        .ok_or_else(|| anyhow!("stripe '{shown}' is missing"))?;
    rekey_block(&mut b, &shown, old, new, kdf, signed)
}

/// Rewraps the key block in `b`, a stripe's first bytes, in place.
fn rekey_block(
    b: &mut [u8],
    shown: &str,
    old: &Master,
    new: &Master,
    kdf: Kdf,
    signed: bool,
) -> Result<Rekeyed> {
    if b.len() < MIN_BLOCK {
        bail!(
            "stripe '{shown}' is shorter than a header block ({} bytes)",
            b.len()
        );
    }
    let mut h = MediaHeader::decode(b).map_err(|e| anyhow!("stripe '{shown}': {e}"))?;
    let (Some(kb), Some(u)) = (h.key.clone(), h.key_use()) else {
        if signed {
            return Ok(Rekeyed::Plain);
        }
        bail!("stripe '{shown}' is not encrypted: the repository's sets all should be");
    };
    if kb.key_id == new.id {
        return Ok(Rekeyed::Already);
    }
    if kb.key_id != old.id {
        bail!(
            "stripe '{shown}' is {} with key id {}, neither the old key's {} nor the new key's {}",
            u.verb(),
            show_id(&kb.key_id),
            show_id(&old.id),
            show_id(&new.id)
        );
    }
    let key = kb
        .open_with(old, &h.set_id, u)
        .map_err(|e| anyhow!("stripe '{shown}': {e}"))?;
    h.key = Some(KeyBlock::new(new, kdf, &h.set_id, &key, u));
    b[..MIN_BLOCK].copy_from_slice(&h.encode()[..MIN_BLOCK]);
    Ok(Rekeyed::Done)
}
