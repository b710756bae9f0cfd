//! Drill records in the repository (drills/TIME.json): in a signed repository each
//! carries the key's tag, and status names one without it, with another name or text,
//! forged (and one read without the key unverified), never passed. expire removes the
//! records older than the oldest set it keeps, never the newest.

mod common;
use common::*;
use pagevault::ops::drill::record::{self, DrillRecord};
use pagevault::repo::Repo;
use std::path::Path;

fn drill_record(time: &str, outcome: &str) -> DrillRecord {
    DrillRecord {
        time: time.into(),
        outcome: outcome.into(),
        rto_seconds: 12.5,
        restore_seconds: Some(10.0),
        replay_seconds: Some(2.0),
        rpo_seconds: Some(3.0),
        set_id: None,
        reached_lsn: None,
        failed: match outcome {
            "ok" => vec![],
            _ => vec!["sql".into()],
        },
        key_id: None,
        tag: None,
    }
}

fn drills(repo: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo.join("drills"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_forged_drill_record_in_a_signed_repository_is_shown_forged_not_passed() {
    let (dir, src) = tree_in_tempdir();
    let key = key_file(dir.path(), "k", 7, false);
    let repo = dir.path().join("repo");
    let rs = s(&repo);
    let kf = ["--key-file", key.as_str()];
    ok(&["init", "--repo", &rs, "--sign", kf[0], kf[1]]);
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--repo", &rs, kf[0], kf[1]]);
    let opts = pagevault::device::object::StoreOptions {
        key: Some(pagevault::crypt::load::read_key_file(Path::new(&key)).unwrap()),
        ..Default::default()
    };
    let r = Repo::open(&rs, false, &opts).unwrap();
    let m = r.record_master().unwrap().expect("the repository's key");
    let name = record::write(
        &r,
        &drill_record("2026-01-02T03:04:05Z", "failed"),
        Some(&m),
    )
    .unwrap();
    assert_eq!(name, "drills/20260102T030405.000Z.json");
    let genuine = std::fs::read_to_string(repo.join(&name)).unwrap();
    assert!(genuine.contains("\"tag\""), "{genuine}");

    // The genuine record: shown as it is, with the key.
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "failed", "{st}");
    assert_eq!(st["last_drill"]["rto_seconds"], 12.5, "{st}");
    // Without the key it cannot be told genuine.
    let st = json(&["status", "--repo", &rs]);
    assert_eq!(st["last_drill"]["outcome"], "unverified", "{st}");

    // Its text changed to "passed", its tag kept: forged.
    let changed = genuine
        .replace("\"failed\",", "\"ok\",")
        .replace("\"sql\"", "");
    assert_ne!(changed, genuine);
    std::fs::write(repo.join(&name), &changed).unwrap();
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "forged", "{st}");
    let text = ok(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert!(
        text.contains("is forged")
            && text.contains("tag does not match")
            && !text.contains(", ok, RTO"),
        "{text}"
    );
    std::fs::write(repo.join(&name), &genuine).unwrap();

    // A newer record planted: untagged, or a genuine record's bytes under a newer name
    // (a passed drill replayed): forged both.
    let planted = repo.join("drills/29991231T000000.000Z.json");
    let ok_rec = serde_json::to_string(&drill_record("2999-12-31T00:00:00Z", "ok")).unwrap();
    std::fs::write(&planted, ok_rec).unwrap();
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "forged", "{st}");
    assert!(
        st["last_drill"]["error"]
            .as_str()
            .unwrap()
            .contains("no tag"),
        "{st}"
    );
    let passed = record::write(&r, &drill_record("2026-01-03T00:00:00Z", "ok"), Some(&m)).unwrap();
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "forged", "{st}");
    std::fs::copy(repo.join(&passed), &planted).unwrap();
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "forged", "{st}");
    let prom = ok(&["status", "--repo", &rs, kf[0], kf[1], "--prometheus"]);
    assert!(!prom.contains("pagevault_last_drill_ok{"), "{prom}");
    std::fs::remove_file(&planted).unwrap();
    let st = json(&["status", "--repo", &rs, kf[0], kf[1]]);
    assert_eq!(st["last_drill"]["outcome"], "ok", "{st}");
}

#[test]
fn expire_removes_drill_records_older_than_the_oldest_set_kept_but_never_the_newest() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let rs = s(&repo);
    let source = format!("files:{}", s(&src));
    let first = json(&["backup", "--source", &source, "--repo", &rs]);
    let r = Repo::open(&rs, false, &Default::default()).unwrap();
    // Before any set, between the sets, and the newest (older than the kept set).
    let between = chrono::Utc::now().to_rfc3339();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for t in ["2001-01-01T00:00:00Z", "2001-01-02T00:00:00Z", &between] {
        record::write(&r, &drill_record(t, "ok"), None).unwrap();
    }
    let second = json(&["backup", "--source", &source, "--repo", &rs]);
    assert_ne!(first["set_id"], second["set_id"]);
    assert_eq!(drills(&repo).len(), 3);

    // Dry run: says which, removes none.
    let e = json(&["expire", "--repo", &rs, "--keep-full", "2", "--dry-run"]);
    assert_eq!(e["drills"]["removed"].as_array().unwrap().len(), 2, "{e}");
    assert_eq!(drills(&repo).len(), 3);

    // Both sets kept: the records older than the first go.
    let e = json(&["expire", "--repo", &rs, "--keep-full", "2"]);
    assert_eq!(
        e["drills"]["removed"],
        serde_json::json!([
            "drills/20010101T000000.000Z.json",
            "drills/20010102T000000.000Z.json"
        ]),
        "{e}"
    );
    assert_eq!(drills(&repo).len(), 1);
    // The second set alone kept: the record left is older, but the newest: it stays.
    let e = json(&["expire", "--repo", &rs, "--keep-full", "1"]);
    assert_eq!(e["drills"]["removed"], serde_json::json!([]), "{e}");
    assert_eq!(drills(&repo).len(), 1);
    // A newer one written: the older goes.
    let newest = record::write(
        &r,
        &drill_record(&chrono::Utc::now().to_rfc3339(), "ok"),
        None,
    )
    .unwrap();
    let text = ok(&["expire", "--repo", &rs, "--keep-full", "1"]);
    assert!(text.contains("1 drill record(s) removed"), "{text}");
    assert_eq!(drills(&repo), [newest.trim_start_matches("drills/")]);
    let st = json(&["status", "--repo", &rs]);
    assert_eq!(st["last_drill"]["outcome"], "ok", "{st}");
}
