//! Several repositories named together (a stanza's `repo` list, `--repo` repeated): each
//! must be a different one, told apart by what it is, not by how it is spelled.

use crate::device::object::StoreOptions;
use anyhow::{bail, Result};
use std::path::{Component, Path, PathBuf};

/// One repository of several and the options it opens with: its own key and endpoint
/// when its configuration gives them, else the run's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepoStore {
    pub spec: String,
    pub store: StoreOptions,
}

impl RepoStore {
    pub fn new(spec: &str, store: &StoreOptions) -> RepoStore {
        RepoStore {
            spec: spec.to_string(),
            store: store.clone(),
        }
    }

    /// Every one of `specs` with the same options.
    pub fn all(specs: &[String], store: &StoreOptions) -> Vec<RepoStore> {
        specs.iter().map(|s| RepoStore::new(s, store)).collect()
    }
}

/// The specifications of `list`, in order.
pub fn specs(list: &[RepoStore]) -> Vec<String> {
    list.iter().map(|r| r.spec.clone()).collect()
}

/// What a repository specification names: an object store's URL with its scheme in lower
/// case and no empty or trailing path parts; a directory's absolute path, `.` and `..`
/// resolved (through the file system when it exists, so a link names its target).
pub fn identity(spec: &str) -> String {
    if let Some((scheme, rest)) = spec.split_once("://") {
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        return format!("{}://{}", scheme.to_ascii_lowercase(), parts.join("/"));
    }
    let p = Path::new(spec);
    if let Ok(c) = std::fs::canonicalize(p) {
        return c.display().to_string();
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out.display().to_string()
}

/// Refuses a list naming one repository twice: every write would land there twice and
/// the copy the list promises would not exist.
pub fn refuse_repeats(specs: &[String]) -> Result<()> {
    for (i, a) in specs.iter().enumerate() {
        let id = identity(a);
        if let Some(b) = specs[..i].iter().find(|b| identity(b) == id) {
            bail!(
                "repositories '{b}' and '{a}' are the same repository ({id}): each repository \
                 of a list must be another copy; remove one of them"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_repository_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("repo").display().to_string();
        let twice = |b: &str| refuse_repeats(&[a.clone(), b.to_string()]);
        assert!(twice(&format!("{a}/")).is_err());
        assert!(twice(&format!("{a}/../repo/.")).is_err());
        std::fs::create_dir(&a).unwrap();
        std::os::unix::fs::symlink(&a, d.path().join("link")).unwrap();
        let e = twice(&d.path().join("link").display().to_string()).unwrap_err();
        assert!(e.to_string().contains("same repository"), "{e}");
        assert!(twice(&d.path().join("other").display().to_string()).is_ok());
        let s3 = |b: &str| refuse_repeats(&["s3://bucket/main".into(), b.to_string()]);
        assert!(s3("S3://bucket//main/").is_err());
        assert!(s3("s3://bucket/main2").is_ok());
        assert!(s3("azure://bucket/main").is_ok());
    }
}
