//! What a backup or restore creates is private, and a link planted where it writes is
//! never written through; what it reads is a regular file (a FIFO never blocks it);
//! `--replace` never removes what a restore reads or a running server uses; a process
//! holding a key is not dumpable; a manifest cannot inflate far past its stored size.

mod common;
use common::forge::*;
use common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Runs pagevault, killing it and failing if it has not ended within 20 s.
fn run_timed(args: &[&str]) -> Run {
    let child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().unwrap());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("pagevault {args:?} blocked for 20 s and was killed");
    };
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

fn refused_timed(args: &[&str], code: i32, says: &[&str]) {
    let r = run_timed(args);
    assert_eq!(
        r.code, code,
        "pagevault {args:?}:\n{}\n{}",
        r.stdout, r.stderr
    );
    for s in says {
        assert!(r.stderr.contains(s), "expected '{s}' in: {}", r.stderr);
    }
}

#[test]
fn a_fifo_as_the_repository_marker_fails_archive_get_without_blocking() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--repo", &s(&repo)]);
    let marker = repo.join("pagevault.repo");
    fs::remove_file(&marker).unwrap();
    mkfifo(&marker);
    let dest = s(&dir.path().join("seg"));
    refused_timed(
        &[
            "archive-get",
            "000000010000000000000001",
            &dest,
            "--repo",
            &s(&repo),
        ],
        126,
        &[&s(&marker), "is a FIFO, not a regular file"],
    );
}

#[test]
fn a_fifo_as_a_stripe_or_a_key_file_is_refused_without_blocking() {
    let (dir, src) = tree_in_tempdir();
    let fifo = dir.path().join("x.pv");
    mkfifo(&fifo);
    let f = s(&fifo);
    let says = [f.as_str(), "is a FIFO, not a regular file"];
    let to = s(&dir.path().join("out"));
    refused_timed(&["restore", "--from", &f, "--to", &to], 1, &says);
    refused_timed(&["verify", "--from", &f], 1, &says);

    let set = s(&dir.path().join("set.pv"));
    backup_files(&src, &set, &[]);
    refused_timed(&["verify", "--from", &set, "--key-file", &f], 1, &says);
}

/// A files backup of the sample tree into DIR/repo.
fn repo_set() -> (tempfile::TempDir, String) {
    let (dir, src) = tree_in_tempdir();
    let repo = s(&dir.path().join("repo"));
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--repo", &repo]);
    (dir, repo)
}

#[test]
fn replace_refuses_a_target_holding_or_inside_the_repository() {
    let (dir, repo) = repo_set();
    for to in [s(dir.path()), repo.clone()] {
        let e = fails(&["restore", "--repo", &repo, "--to", &to, "--replace"], 1);
        assert!(e.contains("--replace") && e.contains(&repo), "{e}");
        let out = s(&dir.path().join("out"));
        ok(&["restore", "--repo", &repo, "--to", &out]);
        assert_same_tree(&dir.path().join("src"), Path::new(&out));
        fs::remove_dir_all(&out).unwrap();
    }
}

#[test]
fn replace_refuses_a_target_holding_a_stripe_read() {
    let (dir, src) = tree_in_tempdir();
    let set = s(&dir.path().join("x.pv"));
    backup_files(&src, &set, &[]);
    let before = fs::read(&set).unwrap();
    let e = fails(
        &[
            "restore",
            "--from",
            &set,
            "--to",
            &s(dir.path()),
            "--replace",
        ],
        1,
    );
    assert!(e.contains("--replace") && e.contains(&set), "{e}");
    assert!(fs::read(&set).unwrap() == before);
    ok(&["verify", "--from", &set]);
}

#[test]
fn replace_refuses_a_target_holding_a_running_server_and_not_a_stopped_one() {
    let (dir, src) = tree_in_tempdir();
    let set = s(&dir.path().join("x.pv"));
    backup_files(&src, &set, &[]);
    let t = dir.path().join("t");
    let data = t.join("sub/data");
    fs::create_dir_all(&data).unwrap();
    let pid_file = data.join("postmaster.pid");
    fs::write(&pid_file, format!("{}\n/some/data\n", std::process::id())).unwrap();
    let e = fails(&["restore", "--from", &set, "--to", &s(&t), "--replace"], 1);
    assert!(e.contains(&s(&pid_file)) && e.contains("running"), "{e}");
    assert!(pid_file.exists());

    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    fs::write(&pid_file, format!("{dead}\n/some/data\n")).unwrap();
    ok(&["restore", "--from", &set, "--to", &s(&t), "--replace"]);
    assert!(!data.exists());
    assert_same_tree(&src, &t);
}

/// A set of the sample tree whose manifest lists `entries` directories more, its
/// checksums valid.
fn with_dirs(set: &str, entries: u32) -> Vec<u8> {
    let b = fs::read(set).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&manifest_json(&b)).unwrap();
    let files = v["files"].as_array_mut().unwrap();
    let last = files
        .iter()
        .map(|f| f["id"].as_u64().unwrap())
        .max()
        .unwrap();
    for i in 1..=entries as u64 {
        files.push(serde_json::json!({
            "id": last + i, "path": format!("many/directories/of/one/tree/d{i}"),
            "kind": "dir", "size": 0, "mode": 0o700, "mtime": 0, "pages": 0
        }));
    }
    with_manifest(&b, &serde_json::to_vec(&v).unwrap())
}

#[test]
fn a_manifest_inflating_far_past_its_stored_size_is_refused() {
    let (dir, src) = tree_in_tempdir();
    let set = s(&dir.path().join("x.pv"));
    backup_files(&src, &set, &[]);
    let forged = with_dirs(&set, 1_000_000);
    let bad = s(&dir.path().join("forged.pv"));
    fs::write(&bad, &forged).unwrap();
    refused_capped(
        &["verify", "--from", &bad],
        1,
        &["manifest raw length", "64 times the stored length"],
    );
    // A thousand more directories inflate it as a real tree does: still read.
    let fine = s(&dir.path().join("fine.pv"));
    fs::write(&fine, with_dirs(&set, 1000)).unwrap();
    ok(&["verify", "--from", &fine]);
    // And a set of many small files with similar names, as backup writes it.
    let many = dir.path().join("many");
    for d in 0..20 {
        let p = many.join(format!("dir{d:02}"));
        fs::create_dir_all(&p).unwrap();
        for i in 0..500 {
            fs::write(
                p.join(format!("file_{i:05}")),
                bytes(i, (i % 300) as usize, true),
            )
            .unwrap();
        }
    }
    let set = s(&dir.path().join("many.pv"));
    backup_files(&many, &set, &[]);
    ok(&["verify", "--from", &set]);
}

/// The owner of /proc/PID/environ: the process's user while it is dumpable, root once
/// it is not (the directory itself stays the user's).
fn proc_owner(pid: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}/environ")).unwrap().uid()
}

/// `files` of a set of many files, as user nobody, its output left unread so it blocks
/// once the pipe is full: /proc/PID/environ's owner then says whether it is dumpable.
fn owner_while_listing(set: &str, extra: &[&str]) -> u32 {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(bin())
        .args(["files", "--from", set])
        .args(extra)
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Its first bytes come after the key is loaded.
    let mut first = [0u8; 1];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    let owner = proc_owner(child.id());
    let still = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(still, "it ended before it was looked at: list more files");
    owner
}

#[test]
fn a_process_holding_a_key_is_not_dumpable() {
    if !pagevault::sys::is_root() {
        eprintln!("skipped: runs pagevault as another user, which only root can");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..3000 {
        fs::write(src.join(format!("a_rather_long_file_name_{i:06}")), b"x").unwrap();
    }
    let key = key_file(dir.path(), "key", 7, false);
    let (plain, sealed) = (s(&dir.path().join("p.pv")), s(&dir.path().join("k.pv")));
    backup_files(&src, &plain, &[]);
    backup_files(&src, &sealed, &["--key-file", &key]);
    for f in [&plain, &sealed] {
        fs::set_permissions(f, fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::os::unix::fs::chown(&key, Some(65534), Some(65534)).unwrap();
    // Without a key the process stays its user's: the check sees the difference.
    assert_eq!(owner_while_listing(&plain, &[]), 65534);
    assert_eq!(owner_while_listing(&sealed, &["--key-file", &key]), 0);
}

/// Every file of the spool, the prefetch directory and the drill's scratch is opened
/// through `private_dir` (checked directory, relative opens, no link followed): the
/// modules that use them hold no path-based write, make or listing of their own, outside
/// their tests. A line that must stay says why with `// confined: REASON` on it or on the
/// line above.
#[test]
fn the_private_directories_are_opened_only_through_their_rule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = [
        "ops/archive/mod.rs",
        "ops/archive/spool.rs",
        "ops/archive/prefetch.rs",
        "ops/archive/pusher.rs",
        "repo/wal/spooled.rs",
        "cmd/archive.rs",
        "ops/drill/mod.rs",
        "ops/drill/config.rs",
        "ops/drill/server.rs",
    ];
    let stray = [
        "fs::write(",
        "File::create(",
        "OpenOptions::new()",
        "create_dir_all(",
        "create_dir(",
        "DirBuilder::new()",
        "fs::read_dir(",
        "lock_file(",
        "fs::copy(",
    ];
    let mut found = vec![];
    for f in files {
        let text = fs::read_to_string(root.join(f)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let said = |l: &str| l.contains("// confined:");
            let marked = said(line) || i > 0 && said(lines[i - 1]);
            if stray.iter().any(|s| line.contains(s)) && !marked {
                found.push(format!("src/{f}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "open these through private_dir::PrivateDir:\n{}",
        found.join("\n")
    );
}
