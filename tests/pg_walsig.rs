//! A signed PostgreSQL repository: archive-push signs every WAL file and its block
//! summary (PVWALSIG envelopes), a signed backup is taken, and it restores and recovers
//! through archive-get with the key; a forged WAL file (a chunk's byte edited, its tag
//! left) and a plain file dropped in its place are refused by archive-get and by the
//! restore's WAL check; key rotate rewraps the signed WAL files' keys.

mod common;

use common::pg::{
    check_restored, give_to_postgres, keys_for_postgres, postgres_dir, push_cmd, restore_repo, Pg,
};
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn rows(pg: &Pg) -> String {
    pg.sql("SELECT count(*) || '/' || sum(g) FROM t")
}

/// Every archived file of the repository: (path, bytes).
fn archived(repo: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = vec![];
    for t in fs::read_dir(repo.join("wal")).unwrap() {
        let t = t.unwrap().path();
        if !t.is_dir() {
            continue;
        }
        for f in fs::read_dir(&t).unwrap() {
            let p = f.unwrap().path();
            let b = fs::read(&p).unwrap();
            out.push((p, b));
        }
    }
    out.sort();
    out
}

#[test]
fn a_signed_repository_signs_its_wal_and_refuses_forged_wal() {
    let dir = postgres_dir("walsig");
    let (key, pg_key) = keys_for_postgres(&dir, b"q83vEjRWeJASNFZ4kBI0VniQEjRWeJASNFZ4kBI0Vng=\n");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    // The first push signs the new repository (`--sign`: a key alone would encrypt it).
    fs::create_dir(&repo_dir).unwrap();
    give_to_postgres(&repo_dir);
    let pg = Pg::start(
        true,
        Some(&format!("{} --key-file {pg_key} --sign", push_cmd(&repo))),
    );
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 20000) g");
    // Archived before any backup: the push made the repository signed.
    pg.switch_and_wait();
    assert!(fs::read_to_string(repo_dir.join("pagevault.repo"))
        .unwrap()
        .contains("signing keyed-blake3"));
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let signed_backup = |ty: &str| {
        ok(&[
            "backup",
            "--source",
            &url,
            "--repo",
            &repo,
            "--type",
            ty,
            "--key-file",
            &key,
            "--sign",
        ])
    };
    signed_backup("full");
    pg.sql("UPDATE t SET g = g WHERE g <= 100");
    signed_backup("diff");
    pg.sql("INSERT INTO t SELECT g FROM generate_series(20001, 30000) g");
    let last = pg.switch_and_wait();
    let want = rows(&pg);
    drop(pg);

    // Every archived file, segments and summaries, is signed.
    let files = archived(&repo_dir);
    assert!(files.len() >= 4, "{} archived files", files.len());
    for (p, b) in &files {
        assert!(b.starts_with(b"PVWALSIG"), "{}", p.display());
    }

    // Restored with the key, recovering through archive-get with the key.
    let (target, _) = restore_repo(&repo, &["--key-file", &pg_key]);
    let conf = fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    assert!(
        conf.contains("archive-get") && conf.contains("--key-file"),
        "{conf}"
    );
    check_restored(&target, &want, rows);

    // Merged with the key: the full's unchanged chunks keep their bytes, tagged again
    // for the new set, which verifies and restores alone.
    let m = json(&["merge", "--repo", &repo, "--key-file", &key]);
    assert!(m["backup"]["kept_frames"].as_u64().unwrap() > 0, "{m}");
    let merged = m["set_id"].as_str().unwrap();
    let v = json(&[
        "verify",
        "--repo",
        &repo,
        "--set",
        merged,
        "--key-file",
        &key,
    ]);
    assert_eq!(v["valid"], true, "{v}");
    let (target, r) = restore_repo(&repo, &["--key-file", &pg_key]);
    assert_eq!(r["chain"].as_array().unwrap().len(), 1, "{r}");
    check_restored(&target, &want, rows);

    // The last archived segment: forged, then replaced by a plain file.
    let seg = repo_dir
        .join("wal")
        .join(&last[..8])
        .join(format!("{last}.zst"));
    let pristine = fs::read(&seg).unwrap();
    let got_dir = dir.join("got");
    fs::create_dir(&got_dir).unwrap();
    let got = got_dir.join(&last);
    let get = |with_key: bool| {
        let g = s(&got);
        let mut a = vec!["archive-get", &last, &g, "--repo", &repo];
        if with_key {
            a.extend_from_slice(&["--key-file", &key]);
        }
        run(&a)
    };
    let r = get(true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Without the key: refused, naming the key id.
    let r = get(false);
    assert!(
        r.code != 0 && r.stderr.contains("key id") && r.stderr.contains("--key-file"),
        "{}",
        r.stderr
    );

    let restore_fails = |says: &str| {
        let to = s(&dir.join("bad").join("data"));
        let r = run(&["restore", "--repo", &repo, "--to", &to, "--key-file", &key]);
        let e = r.stderr;
        assert!(r.code != 0 && e.contains(&last) && e.contains(says), "{e}");
    };
    // A byte of a chunk edited, its tag left.
    let mut forged = pristine.clone();
    let mid = 164 + (forged.len() - 164 - 32) / 2;
    forged[mid] ^= 1;
    fs::write(&seg, &forged).unwrap();
    let _ = fs::remove_file(&got);
    let r = get(true);
    assert_eq!(r.code, 126, "{}", r.stderr);
    assert!(
        r.stderr.contains(&last) && r.stderr.contains("does not authenticate"),
        "{}",
        r.stderr
    );
    assert!(!got.exists());
    restore_fails("does not authenticate");

    // A plain archived copy of the same segment dropped in its place.
    let plain_repo = s(&dir.join("plain"));
    fs::write(&seg, &pristine).unwrap();
    assert_eq!(get(true).code, 0);
    ok(&["init", "--repo", &plain_repo]);
    ok(&["archive-push", &s(&got), "--repo", &plain_repo]);
    fs::copy(
        dir.join("plain/wal")
            .join(&last[..8])
            .join(format!("{last}.zst")),
        &seg,
    )
    .unwrap();
    let _ = fs::remove_file(&got);
    let r = get(true);
    assert_eq!(r.code, 126, "{}", r.stderr);
    assert!(
        r.stderr.contains(&last) && r.stderr.contains("not signed"),
        "{}",
        r.stderr
    );
    restore_fails("not signed");
    // Without a key, the plain file is refused too (exit 126): a signed repository's
    // WAL is read only with its key.
    let _ = fs::remove_file(&got);
    let r = get(false);
    assert_eq!(r.code, 126, "{}", r.stderr);
    assert!(
        r.stderr.contains("--key-file") && !got.exists(),
        "{}",
        r.stderr
    );

    // The marker, edited by someone without the key (the plain file still planted):
    // made plain, its tag dropped, its mode swapped. With the key every one is refused
    // (archive-get with 126), and a restore writes nothing.
    let marker = repo_dir.join("pagevault.repo");
    let genuine = fs::read_to_string(&marker).unwrap();
    assert!(
        genuine.lines().last().unwrap().starts_with("mac "),
        "{genuine}"
    );
    let untagged: String = (genuine.lines())
        .filter(|l| !l.starts_with("mac "))
        .map(|l| format!("{l}\n"))
        .collect();
    for (edit, says) in [
        (
            "pagevault repository 1\n".to_string(),
            "neither encrypted nor signed",
        ),
        (untagged, "not authenticated"),
        (
            genuine.replace("signing keyed-blake3", "encryption aes-256-gcm"),
            "damaged or forged",
        ),
    ] {
        fs::write(&marker, &edit).unwrap();
        let _ = fs::remove_file(&got);
        let r = get(true);
        assert_eq!(r.code, 126, "{edit}: {}", r.stderr);
        assert!(r.stderr.contains(says) && !got.exists(), "{}", r.stderr);
        let to = dir.join("forged").join("data");
        let r = run(&[
            "restore",
            "--repo",
            &repo,
            "--to",
            &s(&to),
            "--key-file",
            &key,
        ]);
        assert!(
            r.code == 1 && r.stderr.contains(says),
            "{edit}: {}",
            r.stderr
        );
        assert!(!to.exists(), "{edit}: the restore wrote");
    }
    fs::write(&marker, &genuine).unwrap();
    fs::write(&seg, &pristine).unwrap();

    // A key the server cannot load fails archive-get with 126, never 1 ("not
    // archived", which ends recovery early): missing, or readable by others.
    let as_pg = |args: &[&str]| {
        let out = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", bin()])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let loose = dir.join("loose-key");
    fs::copy(&key, &loose).unwrap();
    fs::set_permissions(&loose, fs::Permissions::from_mode(0o644)).unwrap();
    let pg_got = s(&dir.join("pg-got"));
    for k in [s(&dir.join("no-such-key")), s(&loose)] {
        let (code, err) = as_pg(&[
            "archive-get",
            &last,
            &pg_got,
            "--repo",
            &repo,
            "--key-file",
            &k,
        ]);
        assert_eq!(code, Some(126), "{k}: {err}");
    }
    // restore --owner postgres with a key only root reads: refused before anything is
    // written (the server's archive-get could not load it).
    let root_key = dir.join("root-key");
    fs::copy(&key, &root_key).unwrap();
    std::os::unix::fs::chown(&root_key, Some(0), Some(0)).unwrap();
    fs::set_permissions(&root_key, fs::Permissions::from_mode(0o600)).unwrap();
    let to = dir.join("owned").join("data");
    let r = run(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&to),
        "--key-file",
        &s(&root_key),
        "--owner",
        "postgres",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("restore_command") && r.stderr.contains("'postgres'"),
        "{}",
        r.stderr
    );
    assert!(!to.exists(), "the restore wrote");

    // key rotate rewraps every signed WAL file's MAC key: the new key reads them.
    fs::write(&seg, &pristine).unwrap();
    let new_key = dir.join("new-key");
    fs::write(&new_key, b"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n").unwrap();
    fs::set_permissions(&new_key, fs::Permissions::from_mode(0o600)).unwrap();
    let new_key = s(&new_key);
    let r = rotate(&repo, &key, ["--new-key-file", &new_key]);
    assert_eq!(r["wal_files"].as_u64(), Some(files.len() as u64), "{r}");
    let g = s(&got);
    let _ = fs::remove_file(&got);
    ok(&[
        "archive-get",
        &last,
        &g,
        "--repo",
        &repo,
        "--key-file",
        &new_key,
    ]);
    let _ = fs::remove_dir_all(&dir);
}
