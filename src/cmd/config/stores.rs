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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::config::{repos, Setting};

    fn effective(text: &str, origin: &str) -> Effective {
        let v: toml::Table = toml::from_str(text).unwrap();
        let setting = |o: &str| Setting {
            option: o.into(),
            values: vec![],
            origin: origin.into(),
        };
        Effective {
            command: "status".into(),
            config_file: None,
            stanza: Some("main".into()),
            settings: vec![setting("key-file"), setting("s3-endpoint")],
            repositories: repos::entries(&v["repo"]).unwrap(),
        }
    }

    #[test]
    fn each_repository_takes_its_own_key_and_endpoint_unless_the_command_line_gives_them() {
        let d = tempfile::tempdir().unwrap();
        let key = d.path().join("k");
        std::fs::write(&key, [7u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let text = format!(
            "[[repo]]\npath = \"/b/one\"\n[[repo]]\nname = \"off\"\npath = \"s3://b/two\"\n\
             key-file = \"{}\"\ns3-endpoint = \"https://s3.example.net\"\n",
            key.display()
        );
        let base = StoreOptions {
            s3_endpoint: Some("https://base.example.net".into()),
            key: None,
        };
        let file = RepoOptions::new(&effective(&text, "file:main"), None);
        let all = file
            .stores(&["/b/one/".into(), "S3://b//two".into()], &base)
            .unwrap();
        assert_eq!(all[0].store, base);
        assert!(all[1].store.key.is_some());
        assert_eq!(
            all[1].store.s3_endpoint.as_deref(),
            Some("https://s3.example.net")
        );
        // Given on the command line: the same for every repository, except copy's
        // destination, which keeps its own.
        let cli = RepoOptions::new(&effective(&text, "cli"), None);
        assert_eq!(cli.store_of("s3://b/two", &base).unwrap(), base);
        assert!(cli.own_store("s3://b/two", &base).unwrap().key.is_some());
        // A key file that cannot be used names its repository and the file.
        std::fs::remove_file(&key).unwrap();
        let e = format!("{:#}", file.store_of("s3://b/two", &base).unwrap_err());
        assert!(
            e.contains("repository 'off' (2)") && e.contains(&key.display().to_string()),
            "{e}"
        );
    }
}
