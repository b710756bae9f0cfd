//! `key rotate` on a stripe: its key block rewrapped for a new master key in place
//! (one write of the first 512 bytes, fsynced); the frames and the manifest, sealed
//! by the data key, are not touched.

use crate::crypt::{show_id, Kdf, Master};
use crate::format::media::{MediaHeader, MIN_BLOCK};
use crate::format::seal::KeyBlock;
use anyhow::{anyhow, bail, Context, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Rewraps the data key of the stripe at `path` from `old` to `new` (derivation
/// `kdf`): Ok(true) when rewritten, Ok(false) when it was `new`'s already (a rotation
/// run again).
pub fn rekey_stripe(path: &Path, old: &Master, new: &Master, kdf: Kdf) -> Result<bool> {
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
    let Some(kb) = h.key.clone() else {
        bail!("stripe '{shown}' is not encrypted: the repository's sets all should be");
    };
    if kb.key_id == new.id {
        return Ok(false);
    }
    if kb.key_id != old.id {
        bail!(
            "stripe '{shown}' is encrypted with key id {}, neither the old key's {} nor the new key's {}",
            show_id(&kb.key_id),
            show_id(&old.id),
            show_id(&new.id)
        );
    }
    let dek = kb
        .open_with(old, &h.set_id)
        .map_err(|e| anyhow!("stripe '{shown}': {e}"))?;
    h.key = Some(KeyBlock::new(new, kdf, &h.set_id, &dek));
    let block = h.encode();
    f.write_all_at(&block[..MIN_BLOCK], 0)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot rewrite the key block of stripe '{shown}'"))?;
    Ok(true)
}
