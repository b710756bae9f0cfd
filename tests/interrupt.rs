//! An interrupted backup (killed, disk full) leaves nothing that passes for a good set.

mod common;
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

fn big_source(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..6 {
        std::fs::write(src.join(format!("f{i}")), bytes(i, 40 << 20, false)).unwrap();
    }
    src
}

/// A backup of `src` over two stripes, stderr piped: zstd:19 on one thread is slow
/// enough that a kill or signal lands mid-backup.
fn slow_backup(
    src: &std::path::Path,
    a: &std::path::Path,
    b: &std::path::Path,
) -> std::process::Child {
    Command::new(bin())
        .args(["backup", "--source", &format!("files:{}", s(src))])
        .args(["--to", &s(a), "--to", &s(b)])
        .args(["--compress", "zstd:19", "--threads", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn killed_backup_leaves_only_partial_stripes_that_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let src = big_source(dir.path());
    let (a, b) = (dir.path().join("a.pv"), dir.path().join("b.pv"));
    let mut child = slow_backup(&src, &a, &b);
    let partial = dir.path().join("a.pv.partial");
    // Stripes are written a 4 MiB staging buffer at a time: on a loaded machine the
    // first one takes seconds. Killed only once the stripe holds frames.
    let started = std::time::Instant::now();
    let written = || std::fs::metadata(&partial).is_ok_and(|m| m.len() > 4096);
    while !written() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(written(), "the backup wrote no frame in 60 s");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !a.exists() && !b.exists(),
        "a killed backup must not leave a stripe under its final name"
    );
    assert!(partial.exists());
    let e = fails(&["verify", "--from", &s(&a), "--from", &s(&b)], 1);
    assert!(e.contains("interrupted backup"), "{e}");
    // Even renamed by hand, a partial stripe has no tail and is refused.
    std::fs::rename(&partial, &a).unwrap();
    std::fs::rename(dir.path().join("b.pv.partial"), &b).unwrap();
    let e = fails(
        &[
            "restore",
            "--from",
            &s(&a),
            "--from",
            &s(&b),
            "--to",
            &s(&dir.path().join("out")),
        ],
        1,
    );
    assert!(e.contains("incomplete"), "{e}");
}

#[test]
fn signals_stop_backup_and_restore_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let src = big_source(dir.path());
    let spawn = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    // Ctrl-C mid-backup: the partial stripes go, and the exit code says which signal.
    let (a, b) = (dir.path().join("a.pv"), dir.path().join("b.pv"));
    let partial = dir.path().join("a.pv.partial");
    let child = slow_backup(&src, &a, &b);
    let (r, _) = signal_when(child, "-INT", || {
        std::fs::metadata(&partial).is_ok_and(|m| m.len() > 4096)
    });
    let err = r.stderr;
    assert_eq!(r.code, 130, "{err}");
    assert!(err.contains("interrupted by SIGINT"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".pv") || n.ends_with(".partial"))
        .collect();
    assert!(left.is_empty(), "an interrupted backup left {left:?}");

    // SIGTERM mid-restore: the target keeps its incomplete marker and says so. One
    // file of 1 GiB is written by one thread at a time: the restore lasts about a second.
    let one = dir.path().join("one");
    std::fs::create_dir(&one).unwrap();
    std::fs::write(one.join("f0"), bytes(9, 1 << 30, false)).unwrap();
    let one_spec = format!("files:{}", s(&one));
    ok(&[
        "backup",
        "--source",
        &one_spec,
        "--to",
        &s(&a),
        "--compress",
        "none",
    ]);
    let out = dir.path().join("out");
    let child = spawn(&[
        "restore",
        "--from",
        &s(&a),
        "--to",
        &s(&out),
        "--threads",
        "1",
    ]);
    let started = || std::fs::metadata(out.join("f0")).is_ok_and(|m| m.blocks() > 0);
    let (r, _) = signal_when(child, "-TERM", started);
    let err = r.stderr;
    assert_eq!(r.code, 143, "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    assert!(err.contains("is incomplete"), "{err}");
    assert!(out.join(".pagevault-restore-incomplete").exists());
}

#[test]
fn full_disk_fails_cleanly() {
    // A small tmpfs stands in for a full disk; mounting needs root (CI runs as root).
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs", &s(&mnt)])
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        assert_ne!(unsafe { libc_geteuid() }, 0, "root could not mount a tmpfs");
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("data"), bytes(5, 30 << 20, false)).unwrap();
    let stripe = mnt.join("x.pv");
    let e = fails(
        &[
            "backup",
            "--source",
            &format!("files:{}", s(&src)),
            "--to",
            &s(&stripe),
        ],
        1,
    );
    let listing: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    Command::new("umount").arg(&mnt).status().unwrap();
    assert!(e.contains("No space left on device"), "{e}");
    assert!(
        listing.is_empty(),
        "a failed backup must remove its partial stripes: {listing:?}"
    );
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
