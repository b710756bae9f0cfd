//! The options each repository of a stanza opens with: its own `key-file` or
//! `passphrase-file` and `s3-endpoint` when its table gives them, else the run's. A key
//! or endpoint given on the command line or in a variable wins for every repository, as
//! any option given there wins over the file.

use super::{Effective, RepoEntry};
use crate::device::object::StoreOptions;
use crate::ops::restore::ConfigRef;
use crate::repo::many::{identity, RepoStore};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// What resolves each repository's options; empty (every repository the run's) without
/// a configuration file.
#[derive(Debug, Clone, Default)]
pub struct RepoOptions {
    repos: Vec<RepoEntry>,
    /// The key came from the command line or a variable.
    key_given: bool,
    /// `--s3-endpoint` came from the command line or a variable.
    endpoint_given: bool,
    /// The uid of the server a restore is for (its key files are accepted too).
    server: Option<u32>,
    config_file: Option<PathBuf>,
    stanza: Option<String>,
}

fn given(e: &Effective, option: &str) -> bool {
    (e.settings.iter())
        .any(|s| s.option == option && (s.origin == "cli" || s.origin.starts_with("env:")))
}

impl RepoOptions {
    pub fn new(e: &Effective, server: Option<u32>) -> RepoOptions {
        RepoOptions {
            repos: e.repositories.clone(),
            key_given: given(e, "key-file")
                || given(e, "passphrase-file")
                || crate::crypt::load::key_in_env(),
            endpoint_given: given(e, "s3-endpoint"),
            server,
            config_file: (e.config_file.as_deref())
                .map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| PathBuf::from(f))),
            stanza: e.stanza.clone(),
        }
    }

    /// The stanza's repository `spec` names, by what it is (not how it is spelled).
    pub fn entry_of(&self, spec: &str) -> Option<&RepoEntry> {
        let id = identity(spec);
        self.repos.iter().find(|e| identity(&e.path) == id)
    }

    /// The options repository `spec` opens with: `base` (the run's) with the key and
    /// endpoint of its own table. A key file that does not load names the repository.
    pub fn store_of(&self, spec: &str, base: &StoreOptions) -> Result<StoreOptions> {
        self.resolve(spec, base, true)
    }

    /// As [`store_of`](Self::store_of), its own key and endpoint winning over those of
    /// the command line too: `copy`'s destination, whose --key-file is the source's.
    pub fn own_store(&self, spec: &str, base: &StoreOptions) -> Result<StoreOptions> {
        self.resolve(spec, base, false)
    }

    fn resolve(&self, spec: &str, base: &StoreOptions, cli_wins: bool) -> Result<StoreOptions> {
        let mut out = base.clone();
        let Some(e) = self.entry_of(spec) else {
            return Ok(out);
        };
        let path = |k: &str| e.get(k).and_then(|v| v.as_str()).map(Path::new);
        let (kf, pf) = (path("key-file"), path("passphrase-file"));
        if !(cli_wins && self.key_given) && (kf.is_some() || pf.is_some()) {
            let key = crate::crypt::load::key_source(kf, pf, self.server)
                .with_context(|| format!("repository {} ({}): its key", e.label(), e.path))?;
            if key.is_some() {
                crate::sys::not_dumpable().context("cannot make the process not dumpable")?;
            }
            out.key = key;
        }
        if let (false, Some(u)) = (cli_wins && self.endpoint_given, e.get("s3-endpoint")) {
            out.s3_endpoint = u.as_str().map(str::to_string);
        }
        Ok(out)
    }

    /// Each of `specs` with its options, in order.
    pub fn stores(&self, specs: &[String], base: &StoreOptions) -> Result<Vec<RepoStore>> {
        (specs.iter())
            .map(|s| {
                Ok(RepoStore {
                    spec: s.clone(),
                    store: self.store_of(s, base)?,
                })
            })
            .collect()
    }

    /// Where archive-get finds each repository's options (a restore_command over
    /// repositories that do not share them), with what the command line gave that
    /// the file does not hold.
    pub fn config_ref(&self, base: &StoreOptions) -> Option<ConfigRef> {
        let file = self.config_file.clone()?;
        let mut options = vec![];
        if self.key_given {
            if let Some((flag, f)) = base.key.as_ref().and_then(|k| k.command_option()) {
                options.extend([flag.to_string(), f.display().to_string()]);
            }
        }
        if let (true, Some(u)) = (self.endpoint_given, &base.s3_endpoint) {
            options.extend(["--s3-endpoint".to_string(), u.clone()]);
        }
        Some(ConfigRef {
            file,
            stanza: self.stanza.clone(),
            options,
        })
    }
}
