//! How a set is guarded before its backup starts: encrypted or signed under a new
//! data key wrapped by the master key, or plain; a plain backup into an encrypted or
//! signed repository, and --encrypt or --sign without a key, are refused.

use super::*;
use crate::engine::Seal;
use crate::format::seal::{KeyBlock, KeyUse};

/// How a set is guarded: its key block, and the data key (encrypted) or MAC keys
/// (signed) its frames and manifest use; what the backup says about it.
#[derive(Default)]
pub(super) struct Guarded {
    pub(super) block: Option<KeyBlock>,
    pub(super) seal: Option<Seal>,
    pub(super) sign: Option<crate::crypt::SetMac>,
    pub(super) note: Option<String>,
}

impl Guarded {
    pub(super) fn version(&self) -> u16 {
        match (&self.seal, &self.sign) {
            (Some(_), _) => SEALED_VERSION,
            (None, Some(_)) => SIGNED_VERSION,
            (None, None) => FORMAT_VERSION,
        }
    }
}

/// The set's guard when the options give a key: a new random key wrapped by the master
/// key (a repository's derivation, else a new one), bound to the set id and its use. A
/// key encrypts, or with `--sign` signs; an encrypted repository's sets are encrypted
/// (`--sign` then asks nothing more: they are authenticated), a signed repository's
/// signed unless `--encrypt`.
pub(super) fn guarding(o: &BackupOptions, dest: &Dest, set_id: [u8; 16]) -> Result<Guarded> {
    let Some(source) = &o.store.key else {
        if o.encrypt {
            bail!("--encrypt needs a key: {}", crate::crypt::load::GIVE_KEY);
        }
        if o.sign {
            bail!("--sign needs a key: {}", crate::crypt::load::GIVE_KEY);
        }
        if let Some(repo) = &dest.repo {
            repo.refuse_plain()?;
        }
        return Ok(Guarded::default());
    };
    let asked = match o.sign && !o.encrypt {
        true => KeyUse::Sign,
        false => KeyUse::Seal,
    };
    let mut note = None;
    let (kdf, u) = match &dest.repo {
        Some(repo) => {
            let was = repo.protection();
            let k = repo.key_for(source, asked)?;
            let old = match (was, k.mode) {
                (None, KeyUse::Sign) => repo.catalog()?.len(),
                _ => 0,
            };
            if old > 0 {
                note = Some(format!(
                    "repository '{}' is signed from now on: its {old} unsigned sets are refused (`pagevault verify --repo` lists them); take a new full backup",
                    repo.describe()
                ));
            }
            let u = match (k.mode, o.encrypt) {
                (KeyUse::Sign, false) => KeyUse::Sign,
                _ => KeyUse::Seal,
            };
            (k.kdf, u)
        }
        None => (source.new_kdf(), asked),
    };
    let master = source
        .master(&kdf)
        .map_err(|e| anyhow::anyhow!("{}: {e}", source.origin()))?;
    let key = crate::crypt::DataKey::random();
    let block = Some(KeyBlock::new(&master, kdf, &set_id, &key, u));
    Ok(match u {
        KeyUse::Seal => Guarded {
            block,
            seal: Some(Seal {
                dek: key,
                set_id,
                crc: false,
            }),
            sign: None,
            note,
        },
        KeyUse::Sign => Guarded {
            block,
            seal: None,
            sign: Some(crate::crypt::SetMac::new(&key, set_id)),
            note,
        },
    })
}
