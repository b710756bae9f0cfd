//! `key rotate` on a stripe: its key block rewrapped for a new master key in place
//! (one write of the first 512 bytes, fsynced); the frames and the manifest, sealed
//! by the data key or tagged with the MAC key, are not touched.

use crate::crypt::{show_id, Kdf, Master};
use crate::format::media::{MediaHeader, MIN_BLOCK};
use crate::format::seal::KeyBlock;
use anyhow::{anyhow, bail, Context, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// What `rekey_stripe` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Rekeyed {
    Done,
    /// It was the new key's already (a rotation run again).
    Already,
    /// A plain stripe in a signed repository (a set from before its signing).
    Plain,
}

/// Rewraps the data or MAC key of the stripe at `path` from `old` to `new` (derivation
/// `kdf`). A plain stripe is an error in an encrypted repository, skipped in a signed
/// one (`signed`).
pub fn rekey_stripe(
    path: &Path,
    old: &Master,
    new: &Master,
    kdf: Kdf,
    signed: bool,
) -> Result<Rekeyed> {
    let shown = path.display();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open stripe '{shown}' to rewrite its key block"))?;
    let mut b = vec![0u8; MIN_BLOCK];
    f.read_exact_at(&mut b, 0)
        .with_context(|| format!("cannot read stripe '{shown}'"))?;
    let mut h = MediaHeader::decode(&b).map_err(|e| anyhow!("stripe '{shown}': {e}"))?;
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
    let block = h.encode();
    f.write_all_at(&block[..MIN_BLOCK], 0)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot rewrite the key block of stripe '{shown}'"))?;
    Ok(Rekeyed::Done)
}
