//! Runs at once on one repository (docs/PROGRAMS.md, "Concurrent runs"): two expires on
//! a directory and on MinIO leave a consistent repository (one may be refused by the
//! repository lock, exit 3, naming its holder); an incremental whose base an expire
//! removes while it runs is not kept (exit 3) against a real PostgreSQL.

mod common;
use common::pg::{postgres_dir, push_cmd, Pg};
use common::stores::{shared, unique};
use common::*;
use std::process::{Command, Stdio};

fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_expires_at_once_leave_a_consistent_repository() {
    let _st = shared();
    let (dir, src) = tree_in_tempdir();
    let source = format!("files:{}", s(&src));
    let repos = [
        s(&dir.path().join("repo")),
        format!("s3://pvtest/{}", unique("expire2")),
    ];
    for repo in &repos {
        for _ in 0..6 {
            ok(&[
                "backup",
                "--source",
                &source,
                "--repo",
                repo,
                "--stripes",
                "3",
            ]);
        }
        let sets = history_ids(repo);
        let keep = ["expire", "--repo", repo, "--keep-full", "2", "--json"];
        let (a, b) = (spawn(&keep), spawn(&keep));
        let mut done = 0;
        for c in [a, b] {
            let out = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => done += 1,
                Some(3) => assert!(
                    err.contains("is locked by `expire` (pid") && err.contains("run again"),
                    "{repo}: {err}"
                ),
                c => panic!("{repo}: expire exited {c:?}: {err}"),
            }
        }
        assert!(done >= 1, "{repo}: one expire ran");
        assert_eq!(
            history_ids(repo),
            sets[4..],
            "{repo}: the two newest fulls kept"
        );
        ok(&["verify", "--repo", repo]);
        // Nothing of the removed sets is left, nor the lock.
        let ls = json(&["status", "--repo", repo]);
        assert_eq!(ls["sets"], 2, "{ls:#}");
        if let Some(local) = repo.strip_prefix('/') {
            let root = std::path::Path::new("/").join(local);
            let mut held: Vec<String> = std::fs::read_dir(root.join("sets"))
                .unwrap()
                .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            held.sort();
            let mut kept = sets[4..].to_vec();
            kept.sort();
            assert_eq!(held, kept);
            assert!(!root.join("locks/retention.json").exists());
        }
        // The lock refuses a second run while a live holder has it, and names it.
        let pid1 = format!(
            r#"{{"command":"merge","pid":1,"host":"{}","since":"{}"}}"#,
            hostname(),
            chrono::Utc::now().to_rfc3339()
        );
        put_object(repo, "locks/retention.json", &pid1);
        let e = fails(&keep[..5], 3);
        assert!(
            e.contains("is locked by `merge` (pid 1 on") && e.contains("locks/retention.json"),
            "{e}"
        );
        let m = fails(&["merge", "--repo", repo], 3);
        assert!(m.contains("is locked by `merge`"), "{m}");
        remove_object(repo, "locks/retention.json");
        ok(&keep[..5]);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn put_object(repo: &str, rel: &str, text: &str) {
    match repo.strip_prefix("s3://pvtest/") {
        Some(prefix) => {
            let key = format!("{prefix}/{rel}");
            shared().minio.admin(&["put", "pvtest", &key, text]);
        }
        None => {
            let p = std::path::Path::new(repo).join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }
}

fn remove_object(repo: &str, rel: &str) {
    match repo.strip_prefix("s3://pvtest/") {
        Some(prefix) => {
            shared()
                .minio
                .admin(&["rm", "pvtest", &format!("{prefix}/{rel}")]);
        }
        None => std::fs::remove_file(std::path::Path::new(repo).join(rel)).unwrap(),
    }
}

/// An incremental reads its base's chain at its start; a full taken meanwhile and an
/// expire keeping one full remove that base before the incremental is recorded: it
/// finds its base gone once recorded, removes itself and exits 3; the repository holds
/// the new full only and verifies.
#[test]
fn an_incremental_whose_base_is_expired_while_it_runs_is_not_kept() {
    let repo = s(&postgres_dir("race").join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.pgbench_init(5);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let base = json(&["backup", "--source", &url, "--repo", &repo])["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Every page of the accounts changed: the incremental reads some 65 MB, slowly.
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 1");
    let incr = spawn(&[
        "backup",
        "--source",
        &url,
        "--repo",
        &repo,
        "--type",
        "incr",
        "--max-rate",
        "8M",
    ]);
    let running = || {
        !json(&["status", "--repo", &repo])["running"]
            .as_array()
            .unwrap()
            .is_empty()
    };
    let t0 = std::time::Instant::now();
    while !running() {
        assert!(t0.elapsed().as_secs() < 30, "the incremental never started");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let full = json(&["backup", "--source", &url, "--repo", &repo])["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    let e = json(&["expire", "--repo", &repo, "--keep-full", "1"]);
    assert_eq!(e["expired"], serde_json::json!([base]), "{e:#}");
    let mut incr = incr;
    assert!(
        incr.try_wait().unwrap().is_none(),
        "the incremental ended before the expire: slow it further"
    );
    let out = incr.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("its base set {base} was removed"))
            && err.contains("run the backup again"),
        "{err}"
    );
    assert_eq!(history_ids(&repo), std::slice::from_ref(&full));
    let sets: Vec<String> = std::fs::read_dir(std::path::Path::new(&repo).join("sets"))
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        sets,
        std::slice::from_ref(&full),
        "no stripe of the incremental is left"
    );
    ok(&["verify", "--repo", &repo]);
    // Run again, it takes the new full as its base.
    let again = json(&[
        "backup", "--source", &url, "--repo", &repo, "--type", "incr",
    ]);
    let h = json(&["history", "--repo", &repo]);
    assert_eq!(h["sets"][1]["set_id"], again["set_id"], "{h:#}");
    assert_eq!(h["sets"][1]["base_set"], full.as_str(), "{h:#}");
    ok(&["verify", "--repo", &repo]);
    drop(pg);
}
