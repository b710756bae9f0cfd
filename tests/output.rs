//! What a user sees: SQL Server's lines, --show-config, --json, header/files, usage
//! errors, and `status` (ages, damaged sets, Prometheus's text format, Nagios codes).

mod common;
use common::*;
use std::fs;

#[test]
fn nul_backup_prints_sql_server_lines_and_is_copy_only() {
    let (_dir, src) = tree_in_tempdir();
    let src_arg = format!("files:{}", s(&src));
    let out = ok(&[
        "backup",
        "--source",
        &src_arg,
        "--to",
        "NUL",
        "--stats",
        "25",
        "--show-config",
    ]);
    for line in [
        "25 percent processed.",
        "50 percent processed.",
        "75 percent processed.",
        "100 percent processed.",
    ] {
        assert!(out.lines().any(|l| l == line), "missing '{line}' in\n{out}");
    }
    assert!(
        out.contains("BufferCount:")
            && out.contains("MaxTransferSize:")
            && out.contains("Total buffer memory:")
    );
    let pages: u64 = [3 * 8192 + 17u64, 2_500_000, 1_300_001, 5 << 20, 1, 0]
        .iter()
        .map(|s| s.div_ceil(8192))
        .sum();
    let processed = format!("Processed {pages} pages for database 'src', file ");
    assert!(out.contains(&processed), "expected '{processed}' in\n{out}");
    let last = out
        .lines()
        .find(|l| l.starts_with("BACKUP DATABASE successfully processed"))
        .expect("summary line");
    let re = format!("BACKUP DATABASE successfully processed {pages} pages in ");
    assert!(
        last.starts_with(&re) && last.ends_with(" MB/sec)."),
        "{last}"
    );
    assert!(out.contains("Wait statistics:") && out.contains("Bottleneck:"));

    let j = json(&["backup", "--source", &src_arg, "--to", "nul:"]);
    assert_eq!(j["copy_only"], true);
    assert_eq!(j["discarded"], true);
    assert_eq!(j["pages"], pages);
    assert!(j["waits"]["stages"].as_array().unwrap().len() == 3);
    assert!(j["mb_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn header_and_files_describe_the_set() {
    let (dir, src) = tree_in_tempdir();
    let (a, b) = (s(&dir.path().join("a.pv")), s(&dir.path().join("b.pv")));
    let source = format!("files:{}", s(&src));
    let named = ["--compress", "lz4", "--name", "nightly", "--copy-only"];
    ok(&backup_args(&source, &[&a, &b], &named));
    let h = json(&["header", "--from", &a]);
    let set = &h["sets"][0];
    assert_eq!(set["name"], "nightly");
    assert_eq!(set["copy_only"], true);
    assert_eq!(set["codec"], "lz4");
    assert_eq!(set["stripes"].as_array().unwrap().len(), 2);
    let text = ok(&["header", "--from", &b]);
    assert!(text.contains("IsCopyOnly") && text.contains("true"));
    let f = json(&["files", "--from", &a, "--from", &b]);
    let files = f["files"].as_array().unwrap();
    let one = files
        .iter()
        .find(|x| x["path"] == "base/16384/1259")
        .unwrap();
    assert_eq!(one["size"], 3 * 8192 + 17);
    assert_eq!(one["pages"], 4);
    assert!(files
        .iter()
        .any(|x| x["path"] == "link" && x["kind"] == "link"));
}

#[test]
fn bad_arguments_are_usage_errors_with_the_range() {
    let e = backup_fails("files:/tmp", "NUL", &["--max-transfer-size", "32K"], 2);
    assert!(e.contains("64 KiB") && e.contains("16 MiB"), "{e}");
    let e = backup_fails("files:/tmp", "NUL", &["--max-transfer-size", "100K"], 2);
    assert!(e.contains("multiple of 64 KiB"), "{e}");
    let e = backup_fails("files:/tmp", "NUL", &["--block-size", "3000"], 2);
    assert!(e.contains("power of two"), "{e}");
    backup_fails("files:/tmp", "NUL", &["--block-size", "2M"], 2);
    source_fails("backup", "files:/tmp", &[], 2);
    let e = backup_fails("oracle:x", "NUL", &[], 1);
    assert!(e.contains("files:PATH, sqlite:PATH or postgres://"), "{e}");
    let e = backup_fails("files:/tmp", "NUL", &["--compress", "gzip"], 1);
    assert!(e.contains("unknown codec"), "{e}");
    let e = backup_fails("files:/nonexistent/dir", "NUL", &[], 1);
    assert!(e.contains("/nonexistent/dir"), "{e}");
    let e = backup_fails("files:/tmp", "NUL", &["--to", "/tmp/x.pv"], 1);
    assert!(e.contains("NUL cannot be striped"), "{e}");
    let e = fails(&["restore", "--from", "NUL", "--to", "/tmp/nothing"], 1);
    assert!(e.contains("cannot be restored"), "{e}");
}

#[test]
fn restore_refuses_a_non_empty_target_without_replace() {
    let (dir, src) = tree_in_tempdir();
    let st = s(&dir.path().join("x.pv"));
    backup_files(&src, &st, &[]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"precious").unwrap();
    let e = fails(&["restore", "--from", &st, "--to", &s(&out)], 1);
    assert!(e.contains("not empty") && e.contains("--replace"), "{e}");
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"precious");
    ok(&["restore", "--from", &st, "--to", &s(&out), "--replace"]);
    assert!(!out.join("keep.txt").exists());
    assert_same_tree(&src, &out);
}

#[test]
fn sql_statements_map_to_the_engine() {
    let (dir, src) = tree_in_tempdir();
    let source = format!("files:{}", s(&src));
    let out = ok(&[
        "sql",
        "--source",
        &source,
        "BACKUP DATABASE [src] TO DISK = 'NUL' WITH STATS = 50, COMPRESSION",
    ]);
    assert!(
        out.contains("50 percent processed.")
            && out.contains("BACKUP DATABASE successfully processed"),
        "{out}"
    );
    let (a, b) = (s(&dir.path().join("a.pv")), s(&dir.path().join("b.pv")));
    let stmt = format!(
        "BACKUP DATABASE src TO DISK = '{a}', DISK = N'{b}' WITH BUFFERCOUNT = 9, MAXTRANSFERSIZE = 131072, BLOCKSIZE = 65536, COPY_ONLY, NAME = 'it''s'; \
         RESTORE VERIFYONLY FROM DISK = '{a}', DISK = '{b}'"
    );
    let out = ok(&["sql", "--source", &source, &stmt]);
    assert!(out.contains("The backup set on file 1 is valid."), "{out}");
    let h = json(&["header", "--from", &a]);
    assert_eq!(h["sets"][0]["transfer_size"], 131072);
    assert_eq!(h["sets"][0]["block_size"], 65536);
    assert_eq!(h["sets"][0]["copy_only"], true);
    assert_eq!(h["sets"][0]["name"], "it's");
    let out = ok(&[
        "sql",
        &format!("RESTORE FILELISTONLY FROM DISK = '{a}', DISK = '{b}'"),
    ]);
    assert!(out.contains("base/16384/1259"), "{out}");
    let e = source_fails(
        "sql",
        &source,
        &["BACKUP DATABASE src TO DISK = 'NUL' WITH MIRROR_TO, ENCRYPTION"],
        1,
    );
    assert!(e.contains("MIRROR_TO") && e.contains("ENCRYPTION"), "{e}");
    let e = source_fails(
        "sql",
        &source,
        &["BACKUP DATABASE src TO DISK = 'NUL' WITH MAXTRANSFERSIZE = 1000"],
        1,
    );
    assert!(e.contains("multiple of 65536"), "{e}");
    let e = source_fails(
        "sql",
        &source,
        &["BACKUP DATABASE src TO URL = 'https://x'"],
        1,
    );
    assert!(e.contains("URL is not supported"), "{e}");
    let e = fails(&["sql", "SELECT 1"], 1);
    assert!(e.contains("only BACKUP and RESTORE"), "{e}");
}

#[test]
fn restore_says_where_its_time_went_outside_the_pipeline() {
    let (dir, src) = tree_in_tempdir();
    // Stored as they are or with lz4, files are created alongside the pipeline; with
    // zstd, before.
    let alongside = ["create directories", "create files, read, check and write"];
    for (codec, creation) in [
        ("none", alongside),
        ("lz4", alongside),
        ("zstd", ["create files", "read, check and write"]),
    ] {
        let set = s(&dir.path().join(format!("{codec}.pv")));
        backup_files(&src, &set, &["--compress", codec]);
        let to = s(&dir.path().join(format!("{codec}-1")));
        let j = json(&["restore", "--from", &set, "--to", &to]);
        let phases = j["phases"].as_array().expect("phases in the summary");
        let names: Vec<&str> = phases
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        let mut want = vec!["open and check", "prepare target"];
        want.extend(creation);
        want.extend([
            "links, owners, modes, times",
            "sync to disk",
            "recovery settings, owner",
        ]);
        assert_eq!(names, want, "{codec}");
        // The phases split the command's seconds: together they are all of it (to rounding).
        let sum: f64 = phases.iter().map(|p| p["seconds"].as_f64().unwrap()).sum();
        let secs = j["seconds"].as_f64().unwrap();
        assert!(
            sum <= secs + 1e-9 && sum >= secs * 0.95 - 0.001,
            "{codec}: phases {sum} s of {secs} s"
        );
        let to = s(&dir.path().join(format!("{codec}-2")));
        let text = ok(&["restore", "--from", &set, "--to", &to]);
        let line = text
            .lines()
            .find(|l| l.starts_with("Where the time went: open and check "))
            .unwrap_or_else(|| panic!("no phase line in\n{text}"));
        assert!(
            line.contains(&format!(", {} ", creation[0])) && line.contains(", sync to disk "),
            "{line}"
        );
    }
}

#[test]
fn a_reader_that_closes_the_pipe_ends_files_quietly_as_sigpipe_would() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    // More listing than a pipe holds (64 KiB), so printing meets the closed pipe.
    for i in 0..3000 {
        std::fs::write(src.join(format!("file-with-a-long-name-{i:05}")), b"x").unwrap();
    }
    let stripe = s(&dir.path().join("s.pv"));
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &stripe,
    ]);
    let mut child = std::process::Command::new(bin())
        .args(["files", "--from", &stripe])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take()); // `| head -c 16`
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

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
    assert!(
        r.stdout
            .starts_with("PAGEVAULT WARNING - the newest backup finished ")
            && r.stdout.lines().next().unwrap().contains(" | age="),
        "{}",
        r.stdout
    );
    let r = run(&["status", "--repo", &repo, "--crit-age", "0"]);
    assert!(r.code == 2 && r.stderr.contains("CRITICAL"), "{}", r.stderr);
    assert!(
        r.stdout.starts_with("PAGEVAULT CRITICAL - "),
        "{}",
        r.stdout
    );
    let r = run(&[
        "status",
        "--repo",
        &repo,
        "--warn-age",
        "1d",
        "--crit-age",
        "2d",
    ]);
    let first = r.stdout.lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("PAGEVAULT OK - the newest backup finished ")
            && first.ends_with(";86400;172800;0"),
        "{}",
        r.stdout
    );
    // Issue 53: a monitor never goes blind. A repository that is gone (a share not
    // mounted) or that this user cannot read is CRITICAL (2), said on stdout's first
    // line; Prometheus still gets its metrics, with pagevault_repository_up 0; --json
    // says why in errors[].
    let gone = s(&std::path::Path::new(&repo).join("no-such-repository"));
    let r = run(&["status", "--repo", &gone, "--warn-age", "1d"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("PAGEVAULT CRITICAL - the repository cannot be read: ")
            && r.stdout.contains("no pagevault.repo"),
        "{}",
        r.stdout
    );
    let r = run(&["status", "--repo", &gone, "--prometheus"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains(&format!("pagevault_repository_up{{repo=\"{gone}\"}} 0"))
            && r.stdout.contains("# TYPE pagevault_repository_up gauge")
            && r.stdout.contains("pagevault_status_errors{"),
        "{}",
        r.stdout
    );
    let r = run(&["status", "--repo", &gone, "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["repository_up"], false, "{j}");
    assert!(
        j["errors"][0].as_str().unwrap().contains("cannot be read"),
        "{j}"
    );
    // Another user (the monitoring agent's) cannot read this root-only repository.
    let r = common::pg::run_as_postgres(&["status", "--repo", &repo, "--warn-age", "1d"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .starts_with("PAGEVAULT CRITICAL - the repository cannot be read: "),
        "{}",
        r.stdout
    );
    let r = common::pg::run_as_postgres(&["status", "--repo", &repo, "--prometheus"]);
    assert!(
        r.code == 0 && r.stdout.contains("pagevault_repository_up{") && r.stdout.contains("} 0\n"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let p = ok(&["status", "--repo", &repo, "--prometheus"]);
    assert!(
        p.contains(&format!("pagevault_repository_up{{repo=\"{repo}\"}} 1")),
        "{p}"
    );
    assert_eq!(
        run(&["status", "--repo", &repo, "--warn-age", "2w"]).code,
        0
    );
    let r = run(&["status", "--repo", &repo, "--warn-age", "2y"]);
    assert_eq!(r.code, 2, "a usage error: {}", r.stderr);
    let text = ok(&["status", "--repo", &repo]);
    assert!(
        text.contains("newest full") && text.contains("damaged set"),
        "{text}"
    );
}
