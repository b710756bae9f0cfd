//! What a backup or restore creates is private, and a link planted where it writes is
//! never written through.

mod common;
use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Every entry under `root` (not `root` itself) whose mode differs from what is
/// expected of its kind.
fn not_private(root: &Path, file: u32, dir: u32) -> Vec<String> {
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| !e.path_is_symlink())
        .filter_map(|e| {
            let mode = e.metadata().unwrap().mode() & 0o7777;
            let want = if e.file_type().is_dir() { dir } else { file };
            (mode != want).then(|| format!("{} {mode:o}", e.path().display()))
        })
        .collect()
}

#[test]
fn repositories_and_stripes_are_private_or_group_readable() {
    let (dir, src) = tree_in_tempdir();
    let source = format!("files:{}", s(&src));
    for (flag, file, d) in [(None, 0o600, 0o700), (Some("--group-read"), 0o640, 0o750)] {
        let repo = dir.path().join(format!("repo{}", flag.is_some()));
        let stripe = dir.path().join(format!("x{}.pv", flag.is_some()));
        let (r, st) = (s(&repo), s(&stripe));
        for to in [["--repo", r.as_str()], ["--to", st.as_str()]] {
            let mut a = vec!["backup", "--source", &source];
            a.extend(to);
            a.extend(flag);
            ok(&a);
        }
        assert_eq!(fs::metadata(&stripe).unwrap().mode() & 0o777, file);
        assert_eq!(fs::metadata(&repo).unwrap().mode() & 0o777, d);
        let wrong = not_private(&repo, file, d);
        assert!(wrong.is_empty(), "modes {flag:?}: {wrong:?}");
        assert!(fs::read_dir(repo.join("catalog")).unwrap().count() > 0);
    }
}

#[test]
fn a_link_planted_at_the_partial_stripe_name_is_not_written_through() {
    let (dir, src) = tree_in_tempdir();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"keep me").unwrap();
    let stripe = dir.path().join("x.pv");
    std::os::unix::fs::symlink(&victim, dir.path().join("x.pv.partial")).unwrap();
    backup_files(&src, &s(&stripe), &[]);
    assert_eq!(fs::read(&victim).unwrap(), b"keep me");
    assert!(!dir.path().join("x.pv.partial").exists());
    ok(&["verify", "--from", &s(&stripe)]);
}

#[test]
fn a_restore_target_is_private_until_done_and_keeps_its_own_mode() {
    let (dir, src) = tree_in_tempdir();
    let stripe = s(&dir.path().join("x.pv"));
    backup_files(&src, &stripe, &["--compress", "none"]);
    // Done: the directory the user made keeps its mode, the files get the set's.
    let to = dir.path().join("to");
    fs::create_dir(&to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
    ok(&["restore", "--from", &stripe, "--to", &s(&to)]);
    assert_eq!(fs::metadata(&to).unwrap().mode() & 0o777, 0o755);
    assert_same_tree(&src, &to);
    // Failed half way (a damaged frame): nothing in the target readable by others.
    let mut b = fs::read(&stripe).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x5a;
    fs::write(&stripe, b).unwrap();
    let to = dir.path().join("failed");
    fs::create_dir(&to).unwrap();
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
    fails(&["restore", "--from", &stripe, "--to", &s(&to)], 1);
    assert_eq!(fs::metadata(&to).unwrap().mode() & 0o777, 0o700);
    assert!(to.join(".pagevault-restore-incomplete").exists());
    let readable: Vec<_> = walkdir::WalkDir::new(&to)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .filter(|e| e.metadata().unwrap().mode() & 0o077 != 0)
        .map(|e| e.path().display().to_string())
        .collect();
    assert!(readable.is_empty(), "readable by others: {readable:?}");
}

/// A target the user names through a link (a data directory on another disk) is
/// restored into as before: the link the user chose is followed, nothing below it.
#[test]
fn a_target_named_through_a_link_restores() {
    let (dir, src) = tree_in_tempdir();
    let set = s(&dir.path().join("s.pv"));
    backup_files(&src, &set, &["--compress", "lz4"]);
    let real = dir.path().join("real");
    fs::create_dir(&real).unwrap();
    let via = dir.path().join("via");
    std::os::unix::fs::symlink(&real, &via).unwrap();
    ok(&["restore", "--from", &set, "--to", &s(&via)]);
    assert_same_tree(&src, &real);
}
