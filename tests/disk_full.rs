//! A repository on a disk that fills (a small tmpfs): a backup that runs out of space
//! while its stripe is written, while the set is committed (manifest, trailer) or while
//! its catalog record is written exits non-zero naming the file on the full device, and
//! leaves no set, stripe, partial stripe or record; a later backup to a bigger
//! repository works.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `kib` KiB mounted on a new directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None (with a message) where mounting is not permitted.
    fn mount(dir: &Path, kib: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k,mode=0700")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs on {} ({})",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        match e.file_type().unwrap().is_dir() {
            true => out.extend(files_under(&e.path())),
            false => out.push(e.path()),
        }
    }
    out
}

#[test]
fn a_full_disk_leaves_no_set_and_a_bigger_repository_takes_the_backup() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Some 400 KiB that does not compress, and a few small files.
    std::fs::write(src.join("big.bin"), bytes(7, 400 << 10, false)).unwrap();
    for i in 0..8 {
        std::fs::write(src.join(format!("small{i}.txt")), bytes(i, 3000, true)).unwrap();
    }
    let source = format!("files:{}", s(&src));
    // From a disk too small for the data to one that holds it all, 4 KiB apart: each
    // backup either succeeds whole or fails leaving nothing.
    let (mut ok_runs, mut midway, mut committing, mut recording) = (0, 0, 0, 0);
    for kib in (380..=470).step_by(4) {
        let mnt = work.path().join(format!("small-{kib}"));
        let Some(fs) = Tmpfs::mount(&mnt, kib) else {
            return;
        };
        let repo = s(&fs.0.join("repo"));
        let r = run(&["backup", "--source", &source, "--repo", &repo]);
        if r.code == 0 {
            ok_runs += 1;
            ok(&["verify", "--repo", &repo]);
            continue;
        }
        let e = &r.stderr;
        assert_eq!(r.code, 1, "{kib} KiB: {e}");
        assert!(
            e.contains("No space left on device") && e.contains(&s(&fs.0)),
            "{kib} KiB: the message names the full device: {e}"
        );
        if e.contains("catalog record could not be written") {
            recording += 1;
        } else if e.contains("the backup set was not completed") {
            committing += 1;
        } else {
            assert!(e.contains("partial stripes were removed"), "{kib} KiB: {e}");
            midway += 1;
        }
        let left: Vec<PathBuf> = files_under(&fs.0.join("repo/sets"))
            .into_iter()
            .chain(files_under(&fs.0.join("repo/catalog")))
            .collect();
        assert_eq!(left, Vec::<PathBuf>::new(), "{kib} KiB: {e}");
        let h = json(&["history", "--repo", &repo]);
        assert_eq!(h["sets"], serde_json::json!([]), "{kib} KiB: {h:#}");
    }
    eprintln!(
        "{ok_runs} backups fit; out of space while writing: {midway}, committing: {committing}, recording: {recording}"
    );
    assert!(ok_runs > 0 && midway > 0, "the sizes span the set's size");
    assert!(
        committing + recording > 0,
        "some run filled the disk after its stripe's body was written"
    );

    // A bigger repository takes the same backup.
    let big = work.path().join("big");
    let Some(fs) = Tmpfs::mount(&big, 2048) else {
        return;
    };
    let repo = s(&fs.0.join("repo"));
    ok(&["backup", "--source", &source, "--repo", &repo]);
    ok(&["verify", "--repo", &repo]);
    let out = work.path().join("out");
    ok(&["restore", "--repo", &repo, "--to", &s(&out)]);
    assert_same_tree(&src, &out);
}
