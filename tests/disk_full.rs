//! A repository on a disk that fills (a small tmpfs): a backup that runs out of space
//! while its stripe is written, while the set is committed (manifest, trailer) or while
//! its catalog record is written exits non-zero naming the file on the full device, and
//! leaves no set, stripe, partial stripe or record; a later backup to a bigger
//! repository works. A file system without O_DIRECT (ramfs) takes backups and restores
//! through the page cache, and the restore says why.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `kib` KiB (or a ramfs) mounted on a new directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None (with a message) where mounting is not permitted.
    fn mount(dir: &Path, kib: u64) -> Option<Tmpfs> {
        Self::mount_as(dir, "tmpfs", &format!("size={kib}k,mode=0700"))
    }

    fn mount_as(dir: &Path, fstype: &str, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", fstype, "-o", options])
            .arg(fstype)
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: cannot mount a {fstype} on {} ({})",
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

/// Backups of `source` into tmpfs repositories of each size in `kibs` (KiB), with
/// `extra` arguments: each either succeeds whole or fails naming the full device and
/// leaving nothing. Returns how many fit, and where the others ran out of space (while
/// writing the stripe, committing the set, recording it).
fn fill(work: &Path, source: &str, kibs: &[u64], extra: &[&str]) -> Option<[u32; 4]> {
    let (mut ok_runs, mut midway, mut committing, mut recording) = (0, 0, 0, 0);
    for &kib in kibs {
        let mnt = work.join(format!("small-{kib}"));
        let fs = Tmpfs::mount(&mnt, kib)?;
        let repo = s(&fs.0.join("repo"));
        let mut args = vec!["backup", "--source", source, "--repo", &repo];
        args.extend(extra);
        let r = run(&args);
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
        "{extra:?}: {ok_runs} backups fit; out of space while writing: {midway}, committing: {committing}, recording: {recording}"
    );
    Some([ok_runs, midway, committing, recording])
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
    // Through the page cache, from a disk too small for the data to one that holds it
    // all, 4 KiB apart.
    let kibs: Vec<u64> = (380..=470).step_by(4).collect();
    let Some([ok_runs, midway, committing, recording]) =
        fill(work.path(), &source, &kibs, &["--direct-writes", "off"])
    else {
        return;
    };
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

#[test]
fn a_stripe_written_with_o_direct_that_fills_the_disk_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Four of the stripe's 4 MiB staging buffers and more: the fourth is filled only
    // once the first is written, and a failure shows then (while writing); the disk
    // may also fill with the last, padded one (while committing).
    std::fs::write(src.join("big.bin"), bytes(7, 17 << 20, false)).unwrap();
    for i in 0..8 {
        std::fs::write(src.join(format!("small{i}.txt")), bytes(i, 3000, true)).unwrap();
    }
    let source = format!("files:{}", s(&src));
    let Some(fs) = Tmpfs::mount(&work.path().join("big"), 32 << 10) else {
        return;
    };
    let repo = s(&fs.0.join("repo"));
    ok(&["backup", "--source", &source, "--repo", &repo]);
    let used: u64 = files_under(&fs.0.join("repo"))
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    drop(fs);
    let kib = used >> 10;
    let mut kibs = vec![2 << 10, kib / 2];
    kibs.extend((kib - 40..=kib + 60).step_by(4));
    let [ok_runs, midway, committing, recording] = fill(work.path(), &source, &kibs, &[]).unwrap();
    assert!(ok_runs > 0 && midway > 0, "the sizes span the set's size");
    assert!(
        committing + recording > 0,
        "some run filled the disk after its stripe's body was written"
    );
}

#[test]
fn a_file_system_that_refuses_o_direct_takes_every_write_through_the_page_cache() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.bin"), bytes(3, 9 << 20, false)).unwrap();
    std::fs::write(src.join("small.txt"), bytes(4, 3000, true)).unwrap();
    // ramfs has no O_DIRECT: opening a file with it, or setting it, is EINVAL.
    let Some(fs) = Tmpfs::mount_as(&work.path().join("ram"), "ramfs", "mode=0700") else {
        return;
    };
    let set = s(&fs.0.join("set.pv"));
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--to", &set]);
    ok(&["verify", "--from", &set]);
    let to = fs.0.join("out");
    let r = json(&["restore", "--from", &set, "--to", &s(&to)]);
    let w = &r["writes"];
    assert_eq!(w["direct"], false, "{w}");
    assert!(
        w["why"].as_str().unwrap().contains("refused O_DIRECT"),
        "{w}"
    );
    assert_eq!(w["direct_bytes"], 0, "{w}");
    assert_eq!(w["buffered_bytes"], (9 << 20) + 3000, "{w}");
    assert_same_tree(&src, &to);
}
