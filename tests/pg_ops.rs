//! Operating a fleet against real PostgreSQL 15, MinIO and Azurite: `check` passes on
//! a good setup and fails naming the cause (a broken archive_command, an unreachable
//! store, a key that does not load, a key the server's user cannot read); `expire
//! --keep-within` keeps exactly what a restore to the window's oldest point needs,
//! and `status` reports the window expire kept; `status` lists backups running now
//! with their percent complete.

mod common;
use common::pg::{give_to_postgres, postgres_dir, push_cmd, restore_repo, Pg};
use common::stores::shared;
use common::*;
use serde_json::Value;
use std::sync::Mutex;

/// One cluster at a time: the machine has 2 cores.
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `check --json` with `args` and `env`: its exit status and report.
fn check(args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut a = vec!["check"];
    a.extend_from_slice(args);
    a.push("--json");
    let r = run_env(&a, env);
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("check {args:?}: {e}\n{}\n{}", r.stdout, r.stderr));
    (r.code, v)
}

/// The status of check `name` in report `v`.
fn status<'a>(v: &'a Value, name: &str) -> &'a str {
    (v["checks"].as_array().unwrap().iter())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {v}"))["status"]
        .as_str()
        .unwrap()
}

fn failed(v: &Value) -> Vec<String> {
    (v["checks"].as_array().unwrap().iter())
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn assert_all_ok(code: i32, v: &Value) {
    assert_eq!(code, 0, "{v:#}");
    for c in v["checks"].as_array().unwrap() {
        assert_eq!(c["status"], "ok", "{v:#}");
    }
}

#[test]
fn check_passes_and_names_what_is_broken() {
    let _g = lock();
    let repo = postgres_dir("check-repo").join("r");
    let r = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.sql("CREATE TABLE t(id int)");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    // The first push creates the repository.
    pg.switch_and_wait();
    ok(&["backup", "--source", &url, "--repo", &r]);

    let (code, v) = check(&["--source", &url, "--repo", &r], &[]);
    assert_all_ok(code, &v);
    let text = ok(&["check", "--source", &url, "--repo", &r]);
    assert!(
        text.contains("restore_command") && text.contains("as user 'postgres'"),
        "{text}"
    );
    assert!(
        text.contains("wal-archived") && text.contains("reached the repository"),
        "{text}"
    );
    // The probe object left nothing behind.
    let left: Vec<_> = std::fs::read_dir(repo.join("catalog"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter().all(|n| n.to_string_lossy().ends_with(".json")),
        "{left:?}"
    );

    // A broken archive_command: the switched segment never arrives.
    pg.sql("ALTER SYSTEM SET archive_command = 'exit 1'");
    pg.sql("SELECT pg_reload_conf()");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, v) = check(&["--source", &url, "--repo", &r, "--timeout", "3"], &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(failed(&v), ["wal-archived"], "{v:#}");
    assert_eq!(status(&v, "archive_command"), "warn", "{v:#}");
    let w = &v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "wal-archived")
        .unwrap();
    assert!(
        w["detail"].as_str().unwrap().contains("did not reach"),
        "{w}"
    );
    assert!(
        w["fix"].as_str().unwrap().contains("archive_command"),
        "{w}"
    );
    // The restore_command still fetches what the archive holds.
    assert_eq!(status(&v, "restore_command"), "ok", "{v:#}");
    pg.sql("ALTER SYSTEM RESET archive_command");
    pg.sql("SELECT pg_reload_conf()");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, v) = check(&["--source", &url, "--repo", &r], &[]);
    assert_all_ok(code, &v);

    // A key that does not load (others may read it): named, the rest still runs.
    let keys = tempfile::tempdir().unwrap();
    let key = key_file(keys.path(), "k", 7, true);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let (code, v) = check(&["--source", &url, "--repo", &r, "--key-file", &key], &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(failed(&v), ["key"], "{v:#}");
    assert_eq!(status(&v, "wal-archived"), "ok", "{v:#}");

    // A key of another repository: it does not match the marker.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (code, v) = check(&["--source", &url, "--repo", &r, "--key-file", &key], &[]);
    assert_eq!(code, 1, "{v:#}");
    assert!(failed(&v).contains(&"key".to_string()), "{v:#}");

    // Another cluster's repository.
    let other = postgres_dir("check-other").join("r");
    let pg2 = Pg::start(false, Some(&push_cmd(&other)));
    pg2.switch_and_wait();
    let (code, v) = check(
        &["--source", &url, "--repo", &s(&other), "--timeout", "3"],
        &[],
    );
    assert_eq!(code, 1, "{v:#}");
    assert!(failed(&v).contains(&"identity".to_string()), "{v:#}");
    drop(pg2);

    // No server there.
    let dead = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let (code, v) = check(&["--source", &dead, "--repo", &r], &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(failed(&v), ["connect"], "{v:#}");
    assert_eq!(status(&v, "wal-archived"), "skip", "{v:#}");
    assert_eq!(status(&v, "repository-writable"), "ok", "{v:#}");

    // An object store nobody answers at.
    let st = shared();
    let _ = st;
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (code, v) = check(
        &[
            "--source",
            &url,
            "--repo",
            "s3://pvtest/nowhere",
            "--s3-endpoint",
            &closed,
        ],
        &[("PAGEVAULT_RETRY_SECONDS", "2")],
    );
    assert_eq!(code, 1, "{v:#}");
    assert!(failed(&v).contains(&"repository".to_string()), "{v:#}");
    let repo_check = &v["checks"][0];
    assert!(
        repo_check["fix"].as_str().unwrap().contains("AWS_"),
        "{repo_check}"
    );
}

/// check on an encrypted repository in MinIO and in Azurite: passes when the server's
/// user reads the key, and names the restore_command when it cannot.
#[test]
fn check_on_object_stores_with_a_key() {
    let _g = lock();
    let st = shared();
    let keys = postgres_dir("check-keys");
    let key = key_file(&keys, "k", 11, true);
    give_to_postgres(&keys);
    // A copy only root reads: what a restore given it would write fails as postgres.
    let root_key = tempfile::tempdir().unwrap();
    let root_copy = root_key.path().join("k");
    std::fs::copy(&key, &root_copy).unwrap();
    for repo in [
        format!("s3://pvtest/{}", stores::unique("check")),
        format!("azure://pvtest/{}", stores::unique("check")),
    ] {
        // A repository is made on purpose: plain here, keyed by the first push.
        ok(&[
            "init",
            "--repo",
            &repo,
            "--s3-endpoint",
            &st.minio.endpoint(),
        ]);
        let archive = format!(
            "{} archive-push %p --repo {repo} --s3-endpoint {} --key-file {key}",
            bin(),
            st.minio.endpoint()
        );
        let pg = Pg::start(false, Some(&archive));
        let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
        let endpoint = st.minio.endpoint();
        let with_key = [
            "--source",
            &url,
            "--repo",
            &repo,
            "--key-file",
            &key,
            "--s3-endpoint",
            &endpoint,
        ];
        // Root's backup reads root's copy (a key file of another user is refused).
        ok(&[
            "backup",
            "--source",
            &url,
            "--repo",
            &repo,
            "--key-file",
            &s(&root_copy),
            "--s3-endpoint",
            &endpoint,
        ]);
        let (code, v) = check(&with_key, &[]);
        assert_all_ok(code, &v);
        let space = (v["checks"].as_array().unwrap().iter())
            .find(|c| c["name"] == "free-space")
            .unwrap();
        assert!(
            space["detail"].as_str().unwrap().contains("not known"),
            "{space}"
        );

        // No key: the repository is encrypted.
        let (code, v) = check(
            &[
                "--source",
                &url,
                "--repo",
                &repo,
                "--s3-endpoint",
                &endpoint,
            ],
            &[],
        );
        assert_eq!(code, 1, "{v:#}");
        assert!(failed(&v).contains(&"key".to_string()), "{v:#}");

        let rc = s(&root_copy);
        let (code, v) = check(
            &[
                "--source",
                &url,
                "--repo",
                &repo,
                "--key-file",
                &rc,
                "--s3-endpoint",
                &endpoint,
            ],
            &[],
        );
        assert_eq!(code, 1, "{v:#}");
        assert_eq!(failed(&v), ["restore_command"], "{v:#}");
        let c = (v["checks"].as_array().unwrap().iter())
            .find(|c| c["name"] == "restore_command")
            .unwrap();
        assert!(
            c["detail"].as_str().unwrap().contains("user 'postgres'"),
            "{c}"
        );
    }
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// Three fulls seconds apart; the clock (PAGEVAULT_NOW) set a day after the second
/// ended: `--keep-within 1d` keeps the second, the third and the WAL from the second's
/// start, removes the first and the WAL before; status's window starts where expire's
/// does, and a restore to that point holds exactly the rows there were then.
#[test]
fn expire_keep_within_keeps_what_the_window_needs() {
    let _g = lock();
    let repo = postgres_dir("expire-repo").join("r");
    let r = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY)");
    let insert = |from: u32| {
        pg.sql(&format!(
            "INSERT INTO t SELECT g FROM generate_series({from}, {}) g",
            from + 99
        ));
    };
    let mut ids = vec![];
    for batch in 0..3 {
        insert(batch * 100 + 1);
        let b = json(&["backup", "--source", &url, "--repo", &r]);
        ids.push(b["set_id"].as_str().unwrap().to_string());
        // The next rows come after this set ended, by the second.
        std::thread::sleep(std::time::Duration::from_millis(2100));
    }
    insert(301);
    pg.switch_and_wait();
    let hist = json(&["history", "--repo", &r]);
    let sets = hist
        .as_array()
        .unwrap_or_else(|| hist["sets"].as_array().unwrap())
        .clone();
    assert_eq!(sets.len(), 3, "{hist}");
    let second = &sets[1];
    assert_eq!(second["set_id"], ids[1].as_str());
    let second_end = time(&second["finished"]);
    // A day and at most a second after the second set ended: before the third did.
    let now = chrono::DateTime::from_timestamp(second_end.timestamp() + 1 + 86400, 0).unwrap();
    assert!(now - chrono::Duration::days(1) < time(&sets[2]["finished"]));
    let env_now = now.to_rfc3339();
    let env = [("PAGEVAULT_NOW", env_now.as_str())];
    let expire = |extra: &[&str]| -> Value {
        let mut a = vec![
            "expire",
            "--repo",
            r.as_str(),
            "--keep-within",
            "1d",
            "--json",
        ];
        a.extend_from_slice(extra);
        let out = run_env(&a, &env);
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    };

    let dry = expire(&["--dry-run"]);
    assert_eq!(dry["expired"], serde_json::json!([ids[0]]), "{dry:#}");
    assert_eq!(dry["sets"][0]["keep"], false);
    assert!(
        dry["sets"][0]["why"]
            .as_str()
            .unwrap()
            .contains("older than"),
        "{dry:#}"
    );
    assert!(
        dry["sets"][1]["why"]
            .as_str()
            .unwrap()
            .contains("--keep-within"),
        "{dry:#}"
    );
    assert_eq!(dry["wal_needed_from"], second["start_wal"], "{dry:#}");
    assert!(dry["wal"]["removed"].as_u64().unwrap() > 0, "{dry:#}");
    let text = String::from_utf8(
        std::process::Command::new(bin())
            .args(["expire", "--repo", &r, "--keep-within", "1d", "--dry-run"])
            .env("PAGEVAULT_NOW", &env_now)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        text.contains(&format!("set {} (full", ids[0]))
            && text.contains("would be removed because"),
        "{text}"
    );
    assert_eq!(
        json(&["history", "--repo", &r]).to_string(),
        hist.to_string(),
        "a dry run removes nothing"
    );

    let e = expire(&[]);
    assert_eq!(e["expired"], dry["expired"]);
    assert_eq!(e["wal_expired"], dry["wal_expired"]);
    assert_eq!(e["recovery_window_set"], ids[1].as_str());
    assert_eq!(time(&e["recovery_window_start"]), second_end);
    // Exactly: the oldest segment left is the one the second set starts in.
    let mut left: Vec<String> = std::fs::read_dir(repo.join("wal/00000001"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 28 && n.ends_with(".zst"))
        .collect();
    left.sort();
    assert_eq!(
        left[0],
        format!("{}.zst", second["start_wal"].as_str().unwrap()),
        "{left:?}"
    );

    let st = run_env(&["status", "--repo", &r, "--json"], &env);
    let st: Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(
        st["recovery_window_start"], e["recovery_window_start"],
        "{st:#}"
    );
    // Expiring again changes nothing.
    assert_eq!(expire(&[])["expired"], serde_json::json!([]));

    // The window's oldest point: the rows of the first two batches, not the third's.
    let until = e["recovery_window_start"].as_str().unwrap();
    let (target, j) = restore_repo(&r, &["--until", until]);
    assert_eq!(j["chain"][0]["set_id"], ids[1].as_str(), "{j}");
    common::pg::check_restored(&target, "200", |p| p.sql("SELECT count(*) FROM t"));
    // Before it, nothing is left to restore from.
    let before = (second_end - chrono::Duration::seconds(1)).to_rfc3339();
    let target = postgres_dir("expire-none").join("data");
    let out = run(&[
        "restore",
        "--repo",
        &r,
        "--to",
        &s(&target),
        "--until",
        &before,
    ]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    drop(pg);
}

/// A backup of a real cluster slowed by --max-rate: `status --json` lists it with a
/// percent complete that rises; it is gone once the backup ends; a killed backup's
/// record is reported stale.
#[test]
fn status_lists_running_backups_with_percent_complete() {
    let _g = lock();
    let repo = postgres_dir("running-repo").join("r");
    let r = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.pgbench_init(2);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &r]);
    give_to_postgres(&repo);
    let size: u64 = pg
        .sql("SELECT sum(size) FROM pg_ls_dir('base') d, pg_stat_file('base/' || d) s")
        .parse()
        .unwrap_or(0);
    let slow = |rate: &str| {
        std::process::Command::new(bin())
            .args(["backup", "--source", &url, "--repo", &r, "--max-rate", rate])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let status = || json(&["status", "--repo", &r]);
    // About 8 seconds at 6M a second (the cluster holds some 50 MB).
    let mut child = slow("6M");
    let mut seen: Vec<(f64, u64)> = vec![];
    let mut prometheus = String::new();
    while child.try_wait().unwrap().is_none() {
        let st = status();
        let running = st["running"].as_array().unwrap();
        if let [b] = &running[..] {
            assert_eq!(b["pid"], child.id(), "{st:#}");
            assert_eq!(b["kind"], "full");
            let p = b["percent_complete"].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&p), "{st:#}");
            let done = b["bytes_done"].as_u64().unwrap();
            assert!(done <= b["bytes_total"].as_u64().unwrap(), "{st:#}");
            seen.push((p, done));
            if prometheus.is_empty() && p > 0.0 {
                prometheus = ok(&["status", "--repo", &r, "--prometheus"]);
                let text = ok(&["status", "--repo", &r]);
                assert!(text.contains("running           full"), "{text}");
            }
        } else {
            assert!(running.is_empty(), "one backup runs: {st:#}");
        }
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        seen.windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
        "percent complete never falls: {seen:?}"
    );
    let distinct: std::collections::BTreeSet<u64> =
        seen.iter().map(|(p, _)| (p * 10.0) as u64).collect();
    assert!(
        distinct.len() >= 3 && seen.iter().any(|&(p, _)| p > 0.0 && p < 100.0),
        "the percent rose while it ran (base is {size} bytes): {seen:?}"
    );
    assert!(
        prometheus.contains("pagevault_backup_running_percent{repo=")
            && prometheus.contains("pagevault_backups_running{repo=")
            && prometheus.contains(",type=\"full\"} "),
        "{prometheus}"
    );
    let st = status();
    assert_eq!(st["running"], serde_json::json!([]), "{st:#}");
    assert_eq!(st["stale_running"], serde_json::json!([]), "{st:#}");
    assert_eq!(st["sets"], 2);

    // A backup killed outright leaves its record: status names it stale, not running.
    let child = slow("2M");
    let (_, _) = signal_when(child, "-KILL", || {
        !status()["running"].as_array().unwrap().is_empty()
    });
    let st = status();
    assert_eq!(st["running"], serde_json::json!([]), "{st:#}");
    let stale = st["stale_running"].as_array().unwrap();
    assert_eq!(stale.len(), 1, "{st:#}");
    assert!(
        stale[0]["why"].as_str().unwrap().contains("is gone"),
        "{st:#}"
    );
    assert_eq!(stale[0]["dead"], true, "{st:#}");
    let text = ok(&["status", "--repo", &r]);
    assert!(text.contains("stale record      running/"), "{text}");
    // The next backup on this host removes it.
    ok(&["backup", "--source", &url, "--repo", &r]);
    let st = status();
    assert_eq!(st["stale_running"], serde_json::json!([]), "{st:#}");
    assert!(std::fs::read_dir(repo.join("running"))
        .unwrap()
        .next()
        .is_none());
    drop(pg);
    let _ = std::fs::remove_dir_all(repo.parent().unwrap());
}

/// Issue 53, item 2: a repository whose wal/ this user cannot read is not "damaged"
/// (put back a copy) nor "empty" (restore_command skipped): check says it cannot read
/// it and that the fix is access.
#[test]
fn check_says_an_unreadable_archive_is_unreadable() {
    let repo = postgres_dir("repo").join("repo");
    let r = s(&repo);
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    pg.switch_and_wait();
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let wal = repo.join("wal");
    let mode = |m: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(0o000);
    let out = common::pg::run_as_postgres(&[
        "check",
        "--source",
        &url,
        "--repo",
        &r,
        "--timeout",
        "2",
        "--json",
    ]);
    mode(0o700);
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", out.stdout, out.stderr));
    let item = |name: &str| {
        (v["checks"].as_array().unwrap().iter())
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {v}"))
    };
    let id = item("identity");
    assert_eq!(id["status"], "fail", "{v}");
    assert!(id["fix"].as_str().unwrap().contains("read access"), "{id}");
    let rc = item("restore_command");
    assert_eq!(rc["status"], "fail", "{v}");
    assert!(
        rc["detail"].as_str().unwrap().contains("cannot be listed"),
        "{rc}"
    );
}
