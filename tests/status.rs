//! `status`: the newest sets' ages, damaged sets, the repository's size, Prometheus's
//! text format and the Nagios exit statuses, on a repository of files-source sets.

mod common;
use common::*;
use std::fs;

#[test]
fn status_reports_ages_damage_metrics_and_nagios_codes() {
    let (dir, src) = tree_in_tempdir();
    let repo_dir = dir.path().join("repo");
    let repo = s(&repo_dir);
    let source = format!("files:{}", s(&src));
    // An empty repository: no backup, so any age limit is crossed.
    ok(&["backup", "--source", &source, "--repo", &repo]);
    let first = json(&["history", "--repo", &repo])["sets"][0]["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    ok(&["backup", "--source", &source, "--repo", &repo]);
    let j = json(&["status", "--repo", &repo]);
    assert_eq!(j["sets"], 2, "{j}");
    let age = j["newest_full_age_seconds"].as_f64().unwrap();
    assert!((0.0..60.0).contains(&age), "{j}");
    assert_ne!(
        j["newest_full"]["set_id"],
        first.as_str(),
        "the newest: {j}"
    );
    assert!(j["newest_incr"].is_null() && j["wal_files"] == 0, "{j}");
    let on_disk: u64 = walkdir::WalkDir::new(&repo_dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(j["repository_bytes"].as_u64(), Some(on_disk), "{j}");
    assert!(j["recovery_window_start"].is_string(), "{j}");

    // A set recorded as damaged is named, and is not the newest good one.
    let rec = repo_dir.join("catalog").join(format!("{first}.json"));
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&rec).unwrap()).unwrap();
    v["damaged"] = true.into();
    fs::write(&rec, serde_json::to_vec(&v).unwrap()).unwrap();
    let j = json(&["status", "--repo", &repo]);
    assert_eq!(j["damaged_sets"], serde_json::json!([first]), "{j}");

    // Prometheus's text format: HELP, TYPE and samples, the repository as a label.
    let p = ok(&["status", "--repo", &repo, "--prometheus"]);
    assert!(
        p.contains("# TYPE pagevault_newest_backup_age_seconds gauge"),
        "{p}"
    );
    let sample = (p.lines())
        .find(|l| l.starts_with("pagevault_newest_backup_age_seconds{"))
        .unwrap_or_else(|| panic!("{p}"));
    assert!(
        sample.contains("type=\"full\"") && sample.contains(&repo),
        "{sample}"
    );
    let v: f64 = sample.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((0.0..60.0).contains(&v), "{sample}");
    assert!(
        p.contains("pagevault_damaged_sets{")
            && p.lines()
                .any(|l| l.starts_with("pagevault_damaged_sets{") && l.ends_with(" 1")),
        "{p}"
    );

    // Nagios: within the limits 0, past the warning 1, past the critical 2.
    assert_eq!(
        run(&[
            "status",
            "--repo",
            &repo,
            "--warn-age",
            "1d",
            "--crit-age",
            "2d"
        ])
        .code,
        0
    );
    let r = run(&[
        "status",
        "--repo",
        &repo,
        "--warn-age",
        "0s",
        "--crit-age",
        "1d",
    ]);
    assert!(r.code == 1 && r.stderr.contains("WARNING"), "{}", r.stderr);
    let r = run(&["status", "--repo", &repo, "--crit-age", "0"]);
    assert!(r.code == 2 && r.stderr.contains("CRITICAL"), "{}", r.stderr);
    let r = run(&["status", "--repo", &repo, "--warn-age", "2w"]);
    assert_eq!(r.code, 2, "a usage error: {}", r.stderr);
    let text = ok(&["status", "--repo", &repo]);
    assert!(
        text.contains("newest full") && text.contains("damaged set"),
        "{text}"
    );
}
