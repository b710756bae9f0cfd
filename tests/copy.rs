//! `pagevault copy` (issue 54, 3-2-1): a chain of a real PostgreSQL 15 copied from a
//! directory repository to MinIO restores from MinIO alone to a point in time; a copy
//! killed mid-way leaves nothing the destination takes for a set, and the next one
//! completes; a damaged frame stops the copy naming the set and the stripe; sets
//! encrypted or signed with one key are copied into a repository of another key.

mod common;
use common::forge::frames_of;
use common::pg::{archiving_pgbench, check_restored, postgres_dir, restore_repo, Pg};
use common::stores::{shared, unique};
use common::*;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// Rows and the sum of a column of each pgbench table that changes.
fn rows(pg: &Pg) -> String {
    pg.sql(
        "SELECT (SELECT count(*) || '/' || sum(abalance) FROM pgbench_accounts) || ' ' || \
         (SELECT count(*) || '/' || coalesce(sum(delta), 0) FROM pgbench_history)",
    )
}

fn id_of(j: &Value) -> String {
    j["set_id"].as_str().unwrap().to_string()
}

fn copied_ids(j: &Value) -> Vec<String> {
    j["sets"].as_array().unwrap().iter().map(id_of).collect()
}

/// The `.pv` files (and partial ones) under a repository directory's sets/.
fn stripe_files(repo: &Path) -> Vec<String> {
    let mut out = vec![];
    for d in fs::read_dir(repo.join("sets"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in fs::read_dir(d.path()).into_iter().flatten().flatten() {
            out.push(s(&f.path()));
        }
    }
    out
}

#[test]
fn a_chain_copied_to_minio_restores_from_it_after_the_directory_is_gone() {
    let _ = shared();
    let dir = postgres_dir("repo");
    let repo = s(&dir.join("repo"));
    let (pg, url) = archiving_pgbench(&repo, 3);
    let backup = |ty: &str| json(&["backup", "--source", &url, "--repo", &repo, "--type", ty]);
    let full = backup("full");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid % 50 = 0");
    let i1 = backup("incr");
    pg.sql("INSERT INTO pgbench_history SELECT 1, 1, aid, 7, now() FROM pgbench_accounts WHERE aid < 500");
    let i2 = backup("incr");
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid % 7 = 0");
    let want = rows(&pg);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let until = pg.sql("SELECT now()::text");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // After the target: a restore to it must not hold this.
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 1000 WHERE aid < 100");
    pg.switch_and_wait();
    assert_ne!(rows(&pg), want);
    drop(pg);
    let ids = [&full, &i1, &i2].map(id_of).to_vec();

    let s3 = format!("s3://pvtest/{}", unique("copy"));
    ok(&["init", "--repo", &s3]);
    let j = json(&["copy", "--repo", &repo, "--to-repo", &s3]);
    assert_eq!(copied_ids(&j), ids, "{j}");
    assert_eq!(j["sets_copied"], 3, "{j}");
    assert!(j["wal_copied"].as_u64().unwrap() >= 3, "{j}");
    for s in j["sets"].as_array().unwrap() {
        assert_eq!(s["frames_went"], "as stored", "{j}");
        assert!(s["wal_copied"].as_u64().unwrap() >= 1, "{j}");
    }
    assert!(j["bytes"].as_u64().unwrap() > 0 && j["mb_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(history_ids(&s3), ids);
    // Again: nothing to do, and it says so.
    let again = json(&["copy", "--repo", &repo, "--to-repo", &s3]);
    assert_eq!(again["sets_copied"], 0, "{again}");
    assert_eq!(again["wal_copied"], 0, "{again}");
    let skipped = again["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 3, "{again}");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("holds it already"),
        "{again}"
    );
    let text = ok(&["copy", "--repo", &repo, "--to-repo", &s3]);
    assert!(
        text.contains("Skipped set") && text.contains("holds it already"),
        "{text}"
    );

    // The directory repository is gone: MinIO alone restores the chain to the target.
    fs::remove_dir_all(&dir).unwrap();
    let v = json(&["verify", "--repo", &s3]);
    assert_eq!(v["valid"], true, "{v}");
    let (target, r) = restore_repo(&s3, &["--until", &until]);
    let chain: Vec<String> = r["chain"].as_array().unwrap().iter().map(id_of).collect();
    assert_eq!(chain, ids, "{r}");
    check_restored(&target, &want, rows);
}

/// A files source of `n` files of 40 MiB of random bytes.
fn big_source(dir: &Path, n: u64) -> std::path::PathBuf {
    let src = dir.join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..n {
        fs::write(src.join(format!("f{i}")), bytes(i, 40 << 20, false)).unwrap();
    }
    src
}

#[test]
fn a_killed_copy_leaves_no_set_and_the_next_one_completes() {
    let dir = tempfile::tempdir().unwrap();
    let src = big_source(dir.path(), 8);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let source = format!("files:{}", s(&src));
    let id = id_of(&json(&["backup", "--source", &source, "--repo", &s(&a)]));
    ok(&["init", "--repo", &s(&b)]);
    let child = Command::new(bin())
        .args([
            "copy",
            "--repo",
            &s(&a),
            "--to-repo",
            &s(&b),
            "--threads",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed once the first stripe has bytes in the destination.
    let partial = b.join(format!("sets/{id}/1.pv.partial"));
    let (run, _) = signal_when(child, "-KILL", || {
        fs::metadata(&partial).is_ok_and(|m| m.len() > (8 << 20))
    });
    assert_ne!(run.code, 0);
    assert!(history_ids(&s(&b)).is_empty());
    let e = fails(
        &[
            "restore",
            "--repo",
            &s(&b),
            "--to",
            &s(&dir.path().join("r0")),
        ],
        1,
    );
    assert!(e.contains("no backup sets"), "{e}");
    assert!(!dir.path().join("r0").join("f0").exists());

    // Run again: the set whole, nothing of the killed run left beside it.
    let j = json(&["copy", "--repo", &s(&a), "--to-repo", &s(&b)]);
    assert_eq!(copied_ids(&j), vec![id.clone()], "{j}");
    assert_eq!(history_ids(&s(&b)), vec![id.clone()]);
    assert_eq!(stripe_files(&b), [s(&b.join(format!("sets/{id}/1.pv")))]);
    let out = dir.path().join("r1");
    ok(&["restore", "--repo", &s(&b), "--to", &s(&out)]);
    assert_same_tree(&src, &out);
}

#[test]
fn a_damaged_frame_stops_the_copy_naming_the_set_and_the_stripe() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let src = dir.path().join("src");
    make_tree(&src);
    fs::write(src.join("big"), bytes(9, 6 << 20, true)).unwrap();
    let source = format!("files:{}", s(&src));
    let id = id_of(&json(&["backup", "--source", &source, "--repo", &s(&a)]));
    ok(&["init", "--repo", &s(&b)]);
    let stripe = a.join(format!("sets/{id}/1.pv"));
    let mut st = fs::read(&stripe).unwrap();
    // A byte of the stored payload of a frame that stores bytes (not a zero chunk's).
    let at = (frames_of(&st).into_iter())
        .find(|&f| common::forge::u32_at(&st, f + 12) > 1000)
        .unwrap();
    st[at + 80 + 100] ^= 0x40;
    fs::write(&stripe, &st).unwrap();

    let e = fails(&["copy", "--repo", &s(&a), "--to-repo", &s(&b)], 1);
    assert!(e.contains(&id) && e.contains(&s(&stripe)), "{e}");
    assert!(e.contains("damaged") && e.contains("verify"), "{e}");
    assert!(history_ids(&s(&b)).is_empty());
    assert!(stripe_files(&b).is_empty(), "{:?}", stripe_files(&b));
}

#[test]
fn sets_of_one_key_are_copied_into_a_repository_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    make_tree(&src);
    fs::write(src.join("big"), bytes(3, 5 << 20, true)).unwrap();
    let (k1, k2) = (key_file(d, "k1", 1, false), key_file(d, "k2", 2, true));
    let source = format!("files:{}", s(&src));
    for (how, sign) in [("sealed again", false), ("key block rewrapped", true)] {
        let (a, b) = (
            s(&d.join(format!("a{sign}"))),
            s(&d.join(format!("b{sign}"))),
        );
        let mut args = vec![
            "backup",
            "--source",
            &source,
            "--repo",
            &a,
            "--key-file",
            &k1,
        ];
        let mut init = vec!["init", "--repo", &b, "--key-file", &k2];
        if sign {
            args.push("--sign");
            init.push("--sign");
        }
        let id = id_of(&json(&args));
        ok(&init);
        let j = json(&[
            "copy",
            "--repo",
            &a,
            "--key-file",
            &k1,
            "--to-repo",
            &b,
            "--to-key-file",
            &k2,
        ]);
        assert_eq!(copied_ids(&j), vec![id.clone()], "{j}");
        assert_eq!(j["sets"][0]["frames_went"], how, "{j}");
        let v = json(&["verify", "--repo", &b, "--key-file", &k2]);
        assert_eq!(v["valid"], true, "{v}");
        let out = d.join(format!("out{sign}"));
        ok(&["restore", "--repo", &b, "--key-file", &k2, "--to", &s(&out)]);
        assert_same_tree(&src, &out);
        // The copy opens with the destination's key only.
        let e = fails(&["verify", "--repo", &b, "--key-file", &k1], 1);
        assert!(e.contains("wrong key"), "{e}");
    }
    // A plain set is not copied into an encrypted repository: nothing written.
    let (p, b) = (s(&d.join("plain")), s(&d.join("bfalse")));
    let id = id_of(&json(&["backup", "--source", &source, "--repo", &p]));
    let e = fails(
        &["copy", "--repo", &p, "--to-repo", &b, "--to-key-file", &k2],
        1,
    );
    assert!(e.contains(&id) && e.contains("not authenticated"), "{e}");
    assert_eq!(history_ids_keyed(&b, &k2).len(), 1);
}

fn history_ids_keyed(repo: &str, key: &str) -> Vec<String> {
    json(&["history", "--repo", repo, "--key-file", key])["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(id_of)
        .collect()
}
