//! What `--replace` must never delete and `--delta` never rewrite: the repository or a
//! stripe the restore reads, or the data directory of a running server anywhere beneath
//! the target.

use super::chain::Sets;
use crate::pg::{postmaster_pid, POSTMASTER_PID};
use anyhow::{bail, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Refuses to replace (or, `delta`, rewrite) `to` when that would delete what this
/// restore reads or a running server's files. Checked before anything is removed;
/// paths are compared resolved.
pub(super) fn check(to: &Path, sets: &Sets, delta: bool) -> Result<()> {
    let what = match delta {
        true => "--delta would rewrite",
        false => "--replace would delete",
    };
    // A target that does not exist yet has nothing to remove.
    let Ok(target) = to.canonicalize() else {
        return Ok(());
    };
    let mut read: Vec<(PathBuf, &str)> = vec![];
    if let Some(root) = sets.repo.as_ref().and_then(|r| r.store().local_path("")) {
        read.push((root, "the repository"));
    }
    for st in sets.links.iter().flat_map(|l| &l.set.stripes) {
        read.push((PathBuf::from(&st.name), "the stripe"));
    }
    for (p, it) in read {
        // An object store's name resolves to nothing local.
        let Ok(c) = p.canonicalize() else { continue };
        let how = if c == target {
            "is"
        } else if c.starts_with(&target) {
            "holds"
        } else if target.starts_with(&c) {
            "lies inside"
        } else {
            continue;
        };
        bail!(
            "{what} '{}', which {how} {it} '{}' this restore reads: restore elsewhere",
            to.display(),
            p.display()
        );
    }
    if let Some((pid_file, pid)) = running_server_beneath(to) {
        bail!(
            "{what} '{}', which holds '{}' of a running PostgreSQL server (pid {pid}): stop it first, or restore elsewhere (if no server runs there, that pid is another process's: remove the file)",
            to.display(),
            pid_file.display()
        );
    }
    Ok(())
}

/// The first `postmaster.pid` beneath `dir` naming a live process. Links are not
/// followed; directories that cannot be read are skipped.
fn running_server_beneath(dir: &Path) -> Option<(PathBuf, i32)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file() && e.file_name() == POSTMASTER_PID)
        .find_map(|e| {
            let mut text = String::new();
            let f = crate::sys::open_regular(e.path()).ok()?;
            f.take(64).read_to_string(&mut text).ok()?;
            let pid = postmaster_pid(&text)?;
            crate::sys::process_alive(pid).then(|| (e.into_path(), pid))
        })
}
