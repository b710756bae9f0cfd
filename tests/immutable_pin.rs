//! Version pinning on MinIO: a set written to a versioned (Object Lock) bucket records
//! each stripe's version id, and every read asks for exactly it. A PUT over a stripe
//! with the same credentials (a new version) or a delete (a delete marker) leaves the
//! restore byte-for-byte, says so, and makes verify fail naming the stripe. A bucket
//! without versions records none, as sets from before did, and restores as they did.

mod common;
use common::stores::Minio;
use common::*;
use pagevault::ops::drill::record::{self, DrillRecord};
use pagevault::repo::Repo;
use std::sync::OnceLock;

const BUCKET: &str = "pvpin";
const PLAIN: &str = "pvpinplain";

fn minio() -> &'static Minio {
    static M: OnceLock<Minio> = OnceLock::new();
    M.get_or_init(|| {
        let m = Minio::start();
        m.admin(&["mklocked", BUCKET, "GOVERNANCE:1"]);
        m.admin(&["mkbucket", PLAIN]);
        m.export_env();
        m
    })
}

fn s3(args: &[&str]) -> Result<String, String> {
    minio().admin_try(args)
}

/// The version ids the store lists for `key` (delete markers left out).
fn versions_of(key: &str) -> Vec<String> {
    s3(&["versions", BUCKET, key])
        .unwrap()
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|v| v[0] == key && v[2] != "delete-marker")
        .map(|v| v[1].to_string())
        .collect()
}

fn backup(src: &std::path::Path, repo: &str, extra: &[&str]) -> String {
    let source = format!("files:{}", s(src));
    let mut a = vec!["backup", "--source", &source, "--repo", repo];
    a.extend(extra);
    json(&a)["set_id"].as_str().unwrap().to_string()
}

fn entry(repo: &str, set: &str) -> pagevault::repo::CatalogEntry {
    let r = Repo::open(repo, false, &Default::default()).unwrap();
    let e = r.catalog().unwrap().into_iter().find(|e| e.set_id == set);
    e.unwrap()
}

#[test]
fn a_stripe_put_over_or_deleted_after_the_backup_is_not_what_restores() {
    minio();
    let (dir, src) = tree_in_tempdir();
    let repo = format!("s3://{BUCKET}/files");
    ok(&["init", "--repo", &repo, "--immutable", "--retain", "1d"]);
    let a = backup(&src, &repo, &["--stripes", "2"]);
    // The record pins each stripe to the version the store gave it.
    let e = entry(&repo, &a);
    assert_eq!(e.stripe_versions.len(), 2, "{e:?}");
    let key = format!("files/sets/{a}/2.pv");
    let pinned = e.stripe_versions[1].clone().expect("a version id");
    assert_eq!(versions_of(&key), std::slice::from_ref(&pinned));
    assert_eq!(
        versions_of(&format!("files/sets/{a}/1.pv")),
        [e.stripe_versions[0].clone().unwrap()]
    );

    // An attacker's plain PUT over stripe 2: a new version in front of the backup's.
    s3(&["put", BUCKET, &key, "ransomware was here"]).unwrap();
    let now: Vec<String> = versions_of(&key)
        .into_iter()
        .filter(|v| *v != pinned)
        .collect();
    assert_eq!(now.len(), 1);
    let target = dir.path().join("r1");
    let out = ok(&["restore", "--repo", &repo, "--set", &a, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    let want = format!(
        "stripe s3://{BUCKET}/{key} was overwritten after the backup (version {pinned} written by the backup, now {}); the backup's version is read",
        now[0]
    );
    assert!(out.contains(&want), "{out}");
    let target = dir.path().join("r2");
    let j = json(&["restore", "--repo", &repo, "--set", &a, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    assert_eq!(j["overwritten"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["overwritten"][0]["version"], pinned.as_str(), "{j}");
    assert_eq!(j["overwritten"][0]["now"], now[0].as_str(), "{j}");
    assert!(j["warnings"][0].as_str().unwrap().contains(&key), "{j}");
    // verify reads it intact, and fails on the finding, naming the stripe.
    let r = run(&["verify", "--repo", &repo, "--set", &a]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("Finding: stripe") && r.stdout.contains("intact"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(&format!("s3://{BUCKET}/{key}")),
        "{}",
        r.stderr
    );
    let r = run(&["verify", "--repo", &repo, "--set", &a, "--json"]);
    assert_eq!(r.code, 1);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["valid"], false, "{v}");
    assert!(v["overwritten"][0]["stripe"]
        .as_str()
        .unwrap()
        .ends_with(&key));
    // header and files read the pinned version too.
    let h = json(&["header", "--repo", &repo, "--set", &a]);
    assert!(h.to_string().contains(&a), "{h}");
    let f = run(&["files", "--repo", &repo, "--set", &a]);
    assert_eq!(f.code, 0, "{}", f.stderr);

    // A delete hides stripe 1 behind a delete marker: still restored, and said so.
    let one = format!("files/sets/{a}/1.pv");
    s3(&["rm", BUCKET, &one]).unwrap();
    let target = dir.path().join("r3");
    let out = ok(&["restore", "--repo", &repo, "--set", &a, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    assert!(
        out.contains(&format!(
            "stripe s3://{BUCKET}/{one} was deleted after the backup"
        )),
        "{out}"
    );
    let r = run(&["verify", "--repo", &repo, "--set", &a]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&one) && r.stderr.contains(&key),
        "{}",
        r.stderr
    );

    // The retention holds expired drill records as it holds sets.
    let repo_r = Repo::open(&repo, false, &Default::default()).unwrap();
    for t in ["2001-01-01T00:00:00Z", "2001-01-02T00:00:00Z"] {
        record::write(&repo_r, &drill_record(t), None).unwrap();
    }
    backup(&src, &repo, &[]);
    let e = json(&["expire", "--repo", &repo, "--keep-full", "1"]);
    assert_eq!(e["drills"]["removed"], serde_json::json!([]), "{e}");
    assert_eq!(e["drills"]["locked"], 1, "{e}");
    assert!(e["drills"]["locked_until"].as_str().is_some(), "{e}");
}

fn drill_record(time: &str) -> DrillRecord {
    DrillRecord {
        time: time.into(),
        outcome: "ok".into(),
        rto_seconds: 1.0,
        restore_seconds: Some(0.5),
        replay_seconds: Some(0.5),
        rpo_seconds: None,
        set_id: None,
        reached_lsn: None,
        failed: vec![],
        key_id: None,
        tag: None,
    }
}

#[test]
fn a_bucket_without_versions_records_none_and_restores_as_before() {
    minio();
    let (dir, src) = tree_in_tempdir();
    let repo = format!("s3://{PLAIN}/old");
    let a = backup(&src, &repo, &[]);
    let rec = format!("old/catalog/{a}.json");
    let r = Repo::open(&repo, false, &Default::default()).unwrap();
    let text = r
        .store()
        .get(&format!("catalog/{a}.json"), 1 << 20)
        .unwrap();
    let text = String::from_utf8(text.unwrap()).unwrap();
    assert!(!text.contains("stripe_versions"), "{text}");
    let target = dir.path().join("r");
    ok(&["restore", "--repo", &repo, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    ok(&["verify", "--repo", &repo]);

    // A version id in a record is data: one out of its charset is refused by name.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["stripe_versions"] = serde_json::json!(["../x?versionId=y&z"]);
    s3(&["put", PLAIN, &rec, &v.to_string()]).unwrap();
    let e = fails(&["history", "--repo", &repo], 1);
    assert!(
        e.contains("damaged or forged") && e.contains("stripe_versions"),
        "{e}"
    );
    v["stripe_versions"] = serde_json::json!(["a", "b"]);
    s3(&["put", PLAIN, &rec, &v.to_string()]).unwrap();
    let e = fails(&["history", "--repo", &repo], 1);
    assert!(e.contains("2 versions for 1 stripes"), "{e}");
    s3(&["put", PLAIN, &rec, &text]).unwrap();
    ok(&["verify", "--repo", &repo]);
}

#[test]
fn a_base_record_put_over_or_deleted_is_read_at_the_version_its_child_names() {
    minio();
    let (dir, src) = tree_in_tempdir();
    let repo = format!("s3://{BUCKET}/chain");
    ok(&["init", "--repo", &repo, "--immutable", "--retain", "1d"]);
    let a = backup(&src, &repo, &[]);
    let r = Repo::open(&repo, false, &Default::default()).unwrap();
    let full = r.catalog().unwrap().pop().unwrap();
    let v = r.record_version(&a).expect("the record's version id");
    // A child's record as a diff's backup writes it (a files source takes fulls only).
    let mut child = full.clone();
    child.set_id = "ab".repeat(16);
    child.base_set = Some(a.clone());
    child.base_version = Some(v.clone());
    child.started = chrono::Utc::now().to_rfc3339();
    child.stripes = vec![format!("sets/{}/1.pv", child.set_id)];
    child.stripe_versions = vec![];
    r.record(&child).unwrap();

    // The base record put over (its stripes pointed elsewhere): the child's version is
    // read, and said so.
    let mut forged = full.clone();
    forged.name = Some("forged".into());
    forged.stripes = vec![format!("sets/{}/1.pv", child.set_id)];
    let rec = format!("chain/catalog/{a}.json");
    s3(&[
        "put",
        BUCKET,
        &rec,
        &serde_json::to_string(&forged).unwrap(),
    ])
    .unwrap();
    let listed = r.catalog().unwrap();
    assert_eq!(listed.iter().find(|e| e.set_id == a), Some(&full));
    let notes = r.record_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(&format!(
            "was overwritten after set {} was based on it",
            child.set_id
        )) && notes[0].contains(&v),
        "{notes:?}"
    );
    let h = json(&["history", "--repo", &repo]);
    assert!(
        h["warnings"][0]
            .as_str()
            .unwrap()
            .contains("was overwritten"),
        "{h}"
    );
    assert_eq!(h["sets"][0]["name"], serde_json::Value::Null, "{h}");
    let target = dir.path().join("r1");
    let out = ok(&["restore", "--repo", &repo, "--set", &a, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
    assert!(
        out.contains(&format!(
            "catalog record s3://{BUCKET}/{rec} was overwritten"
        )),
        "{out}"
    );
    let r2 = run(&["verify", "--repo", &repo, "--set", &a, "--json"]);
    assert_eq!(r2.code, 1, "{}", r2.stderr);
    let j: serde_json::Value = serde_json::from_str(&r2.stdout).unwrap();
    assert_eq!(j["records_overwritten"].as_array().unwrap().len(), 1, "{j}");

    // Deleted (a delete marker): still listed, from the version the child names.
    s3(&["rm", BUCKET, &rec]).unwrap();
    let listed = r.catalog().unwrap();
    assert_eq!(listed.iter().find(|e| e.set_id == a), Some(&full));
    assert!(
        r.record_notes()[0].contains("was deleted"),
        "{:?}",
        r.record_notes()
    );
    let target = dir.path().join("r2");
    ok(&["restore", "--repo", &repo, "--set", &a, "--to", &s(&target)]);
    assert_same_tree(&src, &target);
}

#[test]
fn key_rotate_in_a_versioned_bucket_drops_the_pins_it_would_break() {
    minio();
    let (dir, src) = tree_in_tempdir();
    // A repository that is not immutable, in a versioned bucket: rotation rewrites its
    // stripes (new versions).
    let repo = format!("s3://{BUCKET}/rotated");
    let key = key_file(dir.path(), "k", 3, false);
    let new_key = key_file(dir.path(), "k2", 4, false);
    let a = backup(&src, &repo, &["--key-file", &key, "--stripes", "2"]);
    assert_eq!(entry(&repo, &a).stripe_versions.len(), 2);
    let r = rotate(&repo, &key, ["--new-key-file", &new_key]);
    assert_eq!(r["stripes"], 2, "{r}");
    assert_eq!(
        entry(&repo, &a).stripe_versions,
        Vec::<Option<String>>::new()
    );
    let target = dir.path().join("r");
    let out = ok(&[
        "restore",
        "--repo",
        &repo,
        "--to",
        &s(&target),
        "--key-file",
        &new_key,
    ]);
    assert_same_tree(&src, &target);
    assert!(!out.contains("Warning"), "{out}");
}
