//! Immutable repositories on a MinIO bucket made with Object Lock and a default
//! retention (GOVERNANCE, 1 day): backups, restores, archiving and drills go on;
//! expire keeps and names what the retention holds; a delete or an overwrite with the
//! same credentials leaves every original version readable.

mod common;
use common::pg::{give_to_postgres, postgres_dir, Pg};
use common::stores::Minio;
use common::*;
use std::sync::OnceLock;

const BUCKET: &str = "pvlock";

/// One MinIO for the binary with the locked bucket, and the environment pagevault
/// reads set for it.
fn minio() -> &'static Minio {
    static M: OnceLock<Minio> = OnceLock::new();
    M.get_or_init(|| {
        let m = Minio::start();
        m.admin(&["mklocked", BUCKET, "GOVERNANCE:1"]);
        m.export_env();
        m
    })
}

fn s3(args: &[&str]) -> Result<String, String> {
    minio().admin_try(args)
}

/// Every version of the objects under `prefix`: (key, version id, size or
/// "delete-marker").
fn versions(prefix: &str) -> Vec<(String, String, String)> {
    s3(&["versions", BUCKET, prefix])
        .unwrap()
        .lines()
        .map(|l| {
            let v: Vec<&str> = l.split('\t').collect();
            (v[0].to_string(), v[1].to_string(), v[2].to_string())
        })
        .collect()
}

/// `backup --source files:SRC --repo REPO`: the set's id.
fn backup(src: &std::path::Path, repo: &str) -> String {
    let source = format!("files:{}", s(src));
    let j = json(&["backup", "--source", &source, "--repo", repo]);
    j["set_id"].as_str().unwrap().to_string()
}

fn restore_and_compare(repo: &str, set: &str, want: &std::path::Path) {
    let target = want.parent().unwrap().join(format!("restored-{set}"));
    ok(&["restore", "--repo", repo, "--set", set, "--to", &s(&target)]);
    assert_same_tree(want, &target);
    std::fs::remove_dir_all(&target).unwrap();
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    let st = std::process::Command::new("cp")
        .args(["-a", &s(from), &s(to)])
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn backups_on_a_locked_bucket_go_on_while_deletes_and_overwrites_fail() {
    minio();
    let (dir, src) = tree_in_tempdir();
    let repo = format!("s3://{BUCKET}/files");
    let prefix = "files/";
    let made = json(&["init", "--repo", &repo, "--immutable", "--retain", "1d"]);
    assert_eq!(made["immutable"], true, "{made}");
    assert_eq!(made["retain_seconds"], 86400, "{made}");
    let again = fails(
        &["init", "--repo", &repo, "--immutable", "--retain", "1d"],
        1,
    );
    assert!(again.contains("a repository already"), "{again}");
    let st = json(&["status", "--repo", &repo]);
    assert_eq!(st["immutable_retain_seconds"], 86400, "{st}");
    // The store honours pagevault's create-only PUT (If-None-Match: *).
    let e = s3(&["putnew", BUCKET, "files/pagevault.repo", "forged"]).unwrap_err();
    assert!(e.contains("PreconditionFailed"), "{e}");

    // Two backups, restored each as it was.
    let a = backup(&src, &repo);
    let at_a = dir.path().join("at-a");
    copy_tree(&src, &at_a);
    std::fs::write(src.join("base/random"), bytes(9, 700_001, false)).unwrap();
    std::fs::write(src.join("new_file"), b"after the first set").unwrap();
    let b = backup(&src, &repo);
    assert_eq!(history_ids(&repo), [a.clone(), b.clone()]);
    restore_and_compare(&repo, &a, &at_a);
    restore_and_compare(&repo, &b, &src);
    // pagevault's own create-only writes over an existing key are refused by the store
    // (If-None-Match: *), and a record is never written twice.
    let r = pagevault::repo::Repo::open(&repo, false, &Default::default()).unwrap();
    let rec = format!("catalog/{a}.json");
    assert!(!r.store().put_new(&rec, b"forged").unwrap());
    let e = r.catalog().unwrap().into_iter().find(|e| e.set_id == a);
    let twice = format!("{:#}", r.record(&e.unwrap()).unwrap_err());
    assert!(twice.contains("never overwritten"), "{twice}");
    // Nothing was ever written twice: one version per object.
    let v = versions(prefix);
    let mut keys: Vec<&str> = v.iter().map(|x| x.0.as_str()).collect();
    keys.dedup();
    assert_eq!(keys.len(), v.len(), "{v:?}");
    assert!(v.iter().all(|x| x.2 != "delete-marker"), "{v:?}");

    // Retention: the first set is expired by the rules, but the retention holds it:
    // kept, listed, named with until when; nothing removed.
    let e = json(&["expire", "--repo", &repo, "--keep-full", "1"]);
    assert_eq!(e["expired"], serde_json::json!([]), "{e}");
    assert_eq!(e["locked"][0]["set_id"], a.as_str(), "{e}");
    let until = e["locked"][0]["locked_until"].as_str().unwrap();
    let until = chrono::DateTime::parse_from_rfc3339(until).unwrap();
    let left = until
        .signed_duration_since(chrono::Utc::now())
        .num_seconds();
    assert!(left > 86000 && left <= 86400, "{e}");
    assert_eq!(e["bytes_freed"], 0, "{e}");
    let text = ok(&["expire", "--repo", &repo, "--keep-full", "1"]);
    assert!(
        text.contains(&format!("set {a} ")) && text.contains("locked until"),
        "{text}"
    );
    assert_eq!(history_ids(&repo), [a.clone(), b.clone()]);
    assert_eq!(versions(prefix), v, "expire removed nothing");

    // An attacker with the same credentials: a versioned delete (what erases an
    // object for good) fails on every kind of object, and so does one of the marker.
    let stripe = format!("files/sets/{a}/1.pv");
    for key in [
        stripe.clone(),
        format!("files/catalog/{a}.json"),
        "files/pagevault.repo".to_string(),
    ] {
        let e = s3(&["rmversion", BUCKET, &key]).unwrap_err();
        assert!(
            e.contains("WORM") || e.contains("AccessDenied"),
            "{key}: {e}"
        );
    }
    // An overwrite only adds a version: the original stays readable by its id.
    let original = v.iter().find(|x| x.0 == stripe).unwrap().1.clone();
    let sha = s3(&["shaversion", BUCKET, &stripe, &original]).unwrap();
    s3(&["put", BUCKET, &stripe, "ransomware was here"]).unwrap();
    let r = run(&["verify", "--repo", &repo, "--set", &a]);
    assert_ne!(r.code, 0, "a replaced stripe is refused: {}", r.stdout);
    assert!(r.stderr.contains(&a), "{}", r.stderr);
    assert_eq!(
        s3(&["shaversion", BUCKET, &stripe, &original]).unwrap(),
        sha
    );
    // A plain delete only hides an object behind a delete marker: the set is gone
    // from the listing, but its version stays and cannot be erased.
    s3(&["rm", BUCKET, &format!("files/catalog/{a}.json")]).unwrap();
    assert_eq!(history_ids(&repo), std::slice::from_ref(&b));
    // A hidden marker is not made anew (that would drop the repository's rules).
    s3(&["rm", BUCKET, "files/pagevault.repo"]).unwrap();
    let e = fails(
        &[
            "backup",
            "--source",
            &format!("files:{}", s(&src)),
            "--repo",
            &repo,
        ],
        1,
    );
    assert!(e.contains("marker was removed"), "{e}");
    let hidden = versions("files/pagevault.repo");
    let dm = hidden.iter().find(|x| x.2 == "delete-marker").unwrap();
    s3(&["rmversion", BUCKET, "files/pagevault.repo", &dm.1]).unwrap();
    // Backups go on meanwhile, and the newest set restores.
    let c = backup(&src, &repo);
    restore_and_compare(&repo, &c, &src);
    ok(&["verify", "--repo", &repo, "--set", &b]);

    // Recovery: the owner removes the delete marker and the forged version (a
    // governance bypass: under COMPLIANCE nobody could, and the forgery stays until
    // its retention ends); the first set restores as it was.
    let now = versions(prefix);
    let marker = now
        .iter()
        .find(|x| x.0 == format!("files/catalog/{a}.json") && x.2 == "delete-marker")
        .unwrap();
    s3(&["rmversion", BUCKET, &marker.0, &marker.1]).unwrap();
    let forged = now
        .iter()
        .find(|x| x.0 == stripe && x.1 != original)
        .unwrap();
    s3(&[
        "rmversion",
        BUCKET,
        &stripe,
        &format!("{}:bypass", forged.1),
    ])
    .unwrap();
    assert_eq!(history_ids(&repo), [a.clone(), b, c]);
    restore_and_compare(&repo, &a, &at_a);
}

#[test]
fn expire_removes_what_the_retention_allows_and_keeps_a_set_whose_removal_is_refused() {
    minio();
    let (_dir, src) = tree_in_tempdir();
    let repo = format!("s3://{BUCKET}/short");
    ok(&["init", "--repo", &repo, "--immutable", "--retain", "1s"]);
    let mut ids = vec![];
    for i in 0..3u8 {
        std::fs::write(src.join("one_byte"), [b'a' + i]).unwrap();
        ids.push(backup(&src, &repo));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // Credentials that may do everything but delete (as a bucket policy may say):
    // the refusal keeps the set whole and listed.
    let denied = s3(&["denying", "s3:DeleteObject,s3:DeleteObjectVersion"]).unwrap();
    let d: Vec<&str> = denied.trim().split('\t').collect();
    let env = [
        ("AWS_ACCESS_KEY_ID", d[0]),
        ("AWS_SECRET_ACCESS_KEY", d[1]),
        ("AWS_SESSION_TOKEN", d[2]),
    ];
    let r = run_env(
        &["expire", "--repo", &repo, "--keep-full", "2", "--json"],
        &env,
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let e: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(e["expired"], serde_json::json!([]), "{e}");
    assert_eq!(e["locked"][0]["set_id"], ids[0].as_str(), "{e}");
    let why = e["locked"][0]["refused"].as_str().unwrap();
    assert!(why.contains(&format!("sets/{}/1.pv", ids[0])), "{why}");
    assert_eq!(
        history_ids(&repo),
        ids,
        "a refused removal keeps the set listed"
    );
    restore_and_compare_after(&repo, &ids[0]);

    // Past the retention, with the owner's credentials: removed (in a versioned
    // bucket, behind delete markers; the bucket keeps the versions until its own
    // retention ends, and refuses to erase them before).
    let e = json(&["expire", "--repo", &repo, "--keep-full", "2"]);
    assert_eq!(e["expired"], serde_json::json!([ids[0]]), "{e}");
    assert_eq!(e["locked"], serde_json::json!([]), "{e}");
    assert_eq!(history_ids(&repo), ids[1..]);
    let stripe = format!("short/sets/{}/1.pv", ids[0]);
    let v = versions(&stripe);
    assert!(v.iter().any(|x| x.2 == "delete-marker"), "{v:?}");
    let kept = v.iter().find(|x| x.2 != "delete-marker").unwrap();
    let e = s3(&["rmversion", BUCKET, &stripe, &kept.1]).unwrap_err();
    assert!(e.contains("WORM") || e.contains("AccessDenied"), "{e}");
    ok(&["verify", "--repo", &repo]);
}

/// The set restores (every frame and file checked) into a scratch directory.
fn restore_and_compare_after(repo: &str, set: &str) {
    let t = tempfile::tempdir().unwrap();
    let target = t.path().join("r");
    ok(&["restore", "--repo", repo, "--set", set, "--to", &s(&target)]);
    assert!(target.join("base/random").exists());
}

#[test]
fn postgres_backups_archiving_restore_and_drill_in_an_immutable_signed_repository() {
    let m = minio();
    let dir = postgres_dir("immutable");
    let key = key_file(&dir, "k", 41, false);
    // archive_command runs as the server's user, with its own copy; so do check, drill
    // and restore --owner postgres (whose restore_command reads it).
    let pg_key = key_file(&dir, "pk", 41, false);
    give_to_postgres(std::path::Path::new(&pg_key));
    let repo = format!("s3://{BUCKET}/pg");
    let kf = ["--key-file", key.as_str()];
    let pk = ["--key-file", pg_key.as_str()];
    let mut init = vec!["init", "--repo", &repo, "--immutable", "--retain", "1d"];
    init.extend(["--sign", kf[0], kf[1]]);
    assert!(ok(&init).contains("signed"));
    let push = format!(
        "{} archive-push %p --repo {repo} --key-file {pg_key} --s3-endpoint {}",
        bin(),
        m.endpoint()
    );
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let timeout = ["--archive-timeout", "60"];
    ok(&[
        "backup", "--source", &url, "--repo", &repo, kf[0], kf[1], timeout[0], timeout[1],
    ]);
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1001, 2000) g");
    pg.switch_and_wait();
    ok(&[
        "backup", "--source", &url, "--repo", &repo, "--type", "incr", kf[0], kf[1],
    ]);
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(2001, 3000) g");
    let seg = pg.switch_and_wait();
    assert_eq!(pg.sql("SELECT failed_count FROM pg_stat_archiver"), "0");
    // A push again of an archived segment (PostgreSQL retries) changes nothing.
    let wal_dir = pg.data.join("pg_wal");
    ok(&[
        "archive-push",
        &s(&wal_dir.join(&seg)),
        "--repo",
        &repo,
        kf[0],
        kf[1],
    ]);
    let v = versions("pg/");
    let mut keys: Vec<&str> = v.iter().map(|x| x.0.as_str()).collect();
    keys.dedup();
    assert_eq!(keys.len(), v.len(), "an object written twice: {v:?}");
    assert!(
        keys.iter().any(|k| k.ends_with(&format!("{seg}.zst"))),
        "{v:?}"
    );
    assert!(keys.iter().any(|k| k.ends_with(".sum")), "{v:?}");

    // check's probe object is written once and left to the retention.
    let r = run(&[
        "check", "--source", &url, "--repo", &repo, pk[0], pk[1], "--json",
    ]);
    let c: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let probe = c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "repository-writable")
        .unwrap();
    assert_eq!(probe["ok"], true, "{c}");
    assert!(
        probe["detail"]
            .as_str()
            .unwrap()
            .contains("left to the retention"),
        "{c}"
    );
    // A drill restores the chain, replays the archived WAL and records its result as
    // a new object.
    let j = json(&["drill", "--repo", &repo, pk[0], pk[1]]);
    assert_eq!(j["outcome"], "ok", "{j}");
    // Its record is tagged with the key: status shows it passed.
    let st = json(&["status", "--repo", &repo, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "ok", "{st}");
    // Every stripe is pinned to its version, and the incr's record to its base's.
    let r = pagevault::repo::Repo::open(&repo, false, &Default::default()).unwrap();
    let cat = r.catalog().unwrap();
    assert_eq!(cat.len(), 2);
    for e in &cat {
        assert!(!e.stripe_versions.is_empty(), "{e:?}");
        assert!(e.stripe_versions.iter().all(Option::is_some), "{e:?}");
    }
    assert!(cat[1].base_version.is_some(), "{:?}", cat[1]);
    assert_eq!(cat[1].base_version, r.record_version(&cat[0].set_id));
    assert!(r.record_notes().is_empty());
    let target = dir.join("restored");
    let t = s(&target);
    let mut r = vec![
        "restore", "--repo", &repo, "--to", &t, "--owner", "postgres",
    ];
    r.extend(pk);
    ok(&r);
    let restored = Pg::adopt(&target);
    restored.wait_promoted();
    assert_eq!(restored.sql("SELECT count(*) FROM t"), "3000");
    drop(restored);

    // Nothing can be rewritten: the key is never rotated, the marker never replaced.
    let k2 = key_file(&dir, "k2", 42, false);
    let new = ["--new-key-file", k2.as_str()];
    rotate_refused(&repo, &key, new, &["immutable", "rotated"], &[]);
    // A second full: retention expires the first chain and the WAL before the new
    // full, and the retention holds them all: named, nothing removed.
    ok(&["backup", "--source", &url, "--repo", &repo, kf[0], kf[1]]);
    drop(pg);
    let e = json(&["expire", "--repo", &repo, "--keep-full", "1", kf[0], kf[1]]);
    assert_eq!(e["expired"], serde_json::json!([]), "{e}");
    assert_eq!(e["locked"].as_array().unwrap().len(), 2, "{e}");
    assert_eq!(e["wal_expired"], serde_json::json!([]), "{e}");
    assert!(e["wal_locked"].as_u64().unwrap() > 0, "{e}");
    assert!(e["wal_locked_until"].as_str().is_some(), "{e}");
    assert_eq!(history_ids(&repo).len(), 3);
    let before = v.len();
    assert!(
        versions("pg/").len() > before,
        "the drill's record was added"
    );
    assert!(
        versions("pg/").iter().all(|x| x.2 != "delete-marker"),
        "nothing removed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
