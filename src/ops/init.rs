//! `init`: a new repository, made before its first backup or push: plain, encrypted
//! or signed, and immutable (for a bucket with Object Lock or a container with an
//! immutability policy: nothing in it is ever overwritten or renamed, and expire
//! removes nothing the retention still holds).

use crate::device::object::StoreOptions;
use crate::format::seal::KeyUse;
use crate::repo::{Repo, RETAIN_MAX};
use anyhow::{bail, Result};
use serde::Serialize;

#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    pub repo: String,
    /// Immutable, with the store's retention in seconds.
    pub immutable: Option<u64>,
    /// Signed rather than encrypted, when a key is given.
    pub sign: bool,
    pub store: StoreOptions,
}

#[derive(Debug, Serialize)]
pub struct InitReport {
    pub command: &'static str,
    pub repo: String,
    pub immutable: bool,
    pub retain_seconds: Option<u64>,
    /// "plain", "encrypted" or "signed".
    pub protection: &'static str,
    pub key_id: Option<String>,
}

pub fn init(o: &InitOptions) -> Result<InitReport> {
    if o.sign && o.store.key.is_none() {
        bail!("--sign needs a key: {}", crate::crypt::load::GIVE_KEY);
    }
    if o.immutable.is_some_and(|s| s > RETAIN_MAX) {
        bail!("--retain: at most 100 years");
    }
    let mode = match o.sign {
        true => KeyUse::Sign,
        false => KeyUse::Seal,
    };
    let repo = Repo::init(&o.repo, &o.store, o.immutable, mode)?;
    let k = repo.protection();
    Ok(InitReport {
        command: "init",
        repo: repo.describe(),
        immutable: repo.immutable().is_some(),
        retain_seconds: repo.immutable(),
        protection: match k.map(|k| k.mode) {
            None => "plain",
            Some(KeyUse::Seal) => "encrypted",
            Some(KeyUse::Sign) => "signed",
        },
        key_id: k.map(|k| crate::crypt::show_id(&k.key_id)),
    })
}
