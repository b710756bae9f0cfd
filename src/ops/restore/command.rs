//! The `restore_command` a restore writes: `archive-get` from the repository the chain
//! came from, then the others, with the key and endpoint they open with.

use crate::repo::many::RepoStore;
use crate::repo::Repo;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// The configuration archive-get reads each repository's own key and endpoint from,
/// when the repositories do not share them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigRef {
    /// The configuration file, absolute.
    pub file: PathBuf,
    pub stanza: Option<String>,
    /// Options the restore was given on its command line or in its environment, which
    /// the file does not hold (`--key-file F`, `--s3-endpoint URL`).
    pub options: Vec<String>,
}

fn exe() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "pagevault".into())
}

/// The `restore_command` a restored cluster fetches its WAL with: `archive-get` from
/// the same repository, with the key this restore was given (its file, or
/// PAGEVAULT_PASSPHRASE in the server's environment). Every word is quoted for the
/// shell: a path with a space or a quote must not split it, or every fetch fails.
pub(crate) fn restore_command(repo: &Repo) -> String {
    plain(repo, &[])
}

/// The restore_command for `repo`, then `others` to fall back on in that order. One key
/// and endpoint for all: they are written out. Repositories with keys or endpoints of
/// their own: archive-get reads them from `config`; without it, refused.
pub(crate) fn restore_command_with(
    repo: &Repo,
    others: &[RepoStore],
    config: Option<&ConfigRef>,
) -> Result<String> {
    let specs: Vec<String> = others.iter().map(|r| r.spec.clone()).collect();
    if others.iter().all(|r| &r.store == repo.options()) {
        return Ok(plain(repo, &specs));
    }
    let Some(c) = config else {
        bail!(
            "the repositories do not share one key and endpoint, and no configuration file \
             names each one's: the restore_command written could open only some of them; \
             restore with --stanza NAME (each repository's key-file, passphrase-file and \
             s3-endpoint in its [[stanza.NAME.repo]] table), or restore from one repository"
        );
    };
    let q = crate::units::sh_quote;
    let stanza = (c.stanza.as_deref())
        .map(|s| format!(" --stanza {}", q(s)))
        .unwrap_or_default();
    let repos: String = std::iter::once(repo.spec_for_command())
        .chain(specs)
        .map(|r| format!(" --repo {}", q(&r)))
        .collect();
    let options: String = c.options.iter().map(|o| format!(" {}", q(o))).collect();
    Ok(format!(
        "{} archive-get %f \"%p\" --config {}{stanza}{repos}{options}",
        q(&exe()),
        q(&c.file.display().to_string()),
    ))
}

/// archive-get with the key and endpoint of `repo` for every repository.
fn plain(repo: &Repo, others: &[String]) -> String {
    let q = crate::units::sh_quote;
    let endpoint = (repo.options().s3_endpoint.as_deref())
        .map(|e| format!(" --s3-endpoint {}", q(e)))
        .unwrap_or_default();
    // A key given means authentication demanded: the server's fetches get it too,
    // whatever the repository's marker says.
    let key = (repo.options().key.as_ref())
        .and_then(|k| k.command_option())
        .map(|(flag, f)| format!(" {flag} {}", q(&f.display().to_string())))
        .unwrap_or_default();
    let more: String = others.iter().map(|r| format!(" --repo {}", q(r))).collect();
    format!(
        "{} archive-get %f \"%p\" --repo {}{more}{endpoint}{key}",
        q(&exe()),
        q(&repo.spec_for_command()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::object::StoreOptions;

    /// The repository the chain came from first, then the others, each quoted.
    #[test]
    fn the_restore_command_falls_back_on_the_other_repositories() {
        let d = tempfile::tempdir().unwrap();
        let spec = d.path().join("repo").display().to_string();
        let repo = Repo::open(&spec, true, &Default::default()).unwrap();
        let others = ["s3://b/main".to_string(), "/other repo".to_string()];
        let c = restore_command_with(&repo, &RepoStore::all(&others, &Default::default()), None)
            .unwrap();
        let tail = format!(" --repo {spec} --repo s3://b/main --repo '/other repo'");
        assert!(c.ends_with(&tail), "{c}");
    }

    /// Repositories opened with other options: archive-get reads them from the file,
    /// or the restore is refused.
    #[test]
    fn repositories_of_their_own_keys_are_fetched_through_the_configuration() {
        let d = tempfile::tempdir().unwrap();
        let spec = d.path().join("repo").display().to_string();
        let repo = Repo::open(&spec, true, &Default::default()).unwrap();
        let own = StoreOptions {
            s3_endpoint: Some("http://127.0.0.1:9".into()),
            key: None,
        };
        let others = vec![RepoStore::new("s3://b/main", &own)];
        let e = restore_command_with(&repo, &others, None).unwrap_err();
        assert!(format!("{e}").contains("--stanza NAME"), "{e}");
        let c = ConfigRef {
            file: "/etc/pagevault/my file.toml".into(),
            stanza: Some("main".into()),
            options: vec!["--key-file".into(), "/k".into()],
        };
        let cmd = restore_command_with(&repo, &others, Some(&c)).unwrap();
        let tail = format!(
            " archive-get %f \"%p\" --config '/etc/pagevault/my file.toml' --stanza main --repo {spec} --repo s3://b/main --key-file /k"
        );
        assert!(cmd.ends_with(&tail), "{cmd}");
    }
}
