//! The configuration file, PAGEVAULT_* variables and their precedence (--show-config),
//! refusals of a file that holds a secret or an unknown key, exit statuses (retry later
//! against fatal), and --log-format json / --log-file.

mod common;
use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn write_config(path: &Path, text: &str) -> String {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    s(path)
}

/// The effective settings of a command: option -> (first value, origin).
fn settings(
    args: &[&str],
    env: &[(&str, &str)],
) -> std::collections::HashMap<String, (String, String)> {
    let mut a = args.to_vec();
    a.extend(["--show-config", "--json"]);
    let r = run_env(&a, env);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    v["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let first = x["values"][0].as_str().unwrap_or("").to_string();
            (
                x["option"].as_str().unwrap().to_string(),
                (first, x["origin"].as_str().unwrap().to_string()),
            )
        })
        .collect()
}

#[test]
fn precedence_is_cli_then_env_then_stanza_then_top_level_then_default() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        &dir.path().join("pv.toml"),
        "compress = \"lz4\"\nreaders = 3\nthreads = 2\n\n[stanza.main]\nsource = \"files:/data\"\nrepo = \"/bk/main\"\nreaders = 4\nmax_transfer_size = \"256K\"\nspool = \"/var/tmp\"\n\n[stanza.main.archive-push]\nspool = \"/var/spool/pv\"\nasync = true\n",
    );
    let base = ["backup", "--config", cfg.as_str(), "--stanza", "main"];
    let m = settings(&base, &[]);
    assert_eq!(m["source"], ("files:/data".into(), "file:main".into()));
    assert_eq!(m["repo"], ("/bk/main".into(), "file:main".into()));
    assert_eq!(m["compress"], ("lz4".into(), "file:global".into()));
    assert_eq!(
        m["readers"],
        ("4".into(), "file:main".into()),
        "the stanza over the top level"
    );
    assert_eq!(m["max-transfer-size"], ("256K".into(), "file:main".into()));
    assert_eq!(m["block-size"], ("4K".into(), "default".into()));
    assert_eq!(m["spool"], ("/var/tmp".into(), "file:main".into()));
    // A command's own table: only that command takes it.
    // (archive-push has no --json: its text, one line per option.)
    let out = ok(&[
        "archive-push",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "x",
        "--show-config",
    ]);
    let line = |o: &str| {
        let l = out.lines().find(|l| l.split_whitespace().next() == Some(o));
        l.unwrap_or_else(|| panic!("no {o} in {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        line("spool"),
        ["spool", "/var/spool/pv", "file:main.archive-push"]
    );
    assert_eq!(line("async"), ["async", "true", "file:main.archive-push"]);
    assert_eq!(line("repo"), ["repo", "/bk/main", "file:main"]);

    // The environment over the file, the command line over both.
    let env = [
        ("PAGEVAULT_COMPRESS", "zstd"),
        ("PAGEVAULT_READERS", "5"),
        ("PAGEVAULT_THREADS", "7"),
    ];
    let mut a = base.to_vec();
    a.extend(["--readers", "6"]);
    let m = settings(&a, &env);
    assert_eq!(
        m["compress"],
        ("zstd".into(), "env:PAGEVAULT_COMPRESS".into())
    );
    assert_eq!(m["threads"], ("7".into(), "env:PAGEVAULT_THREADS".into()));
    assert_eq!(m["readers"], ("6".into(), "cli".into()));
    assert_eq!(m["source"].1, "file:main");

    // The stanza and the file from the environment; another command takes what it has.
    let env = [
        ("PAGEVAULT_CONFIG", cfg.as_str()),
        ("PAGEVAULT_STANZA", "main"),
    ];
    let m = settings(&["history"], &env);
    assert_eq!(m["repo"], ("/bk/main".into(), "file:main".into()));
    assert!(!m.contains_key("source"), "history takes no source");
    // Stripes named on the command line replace the stanza's repository.
    let m = settings(&["verify", "--from", "/bk/a.pv"], &env);
    assert_eq!(m["repo"].1, "unset");

    // Text: one line per option with its origin.
    let out = ok(&[
        "history",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--show-config",
    ]);
    assert!(
        out.lines()
            .any(|l| l.contains("repo") && l.contains("/bk/main") && l.ends_with("file:main")),
        "{out}"
    );
}

#[test]
fn a_stanza_backs_up_and_restores_a_tree() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("repo");
    let cfg = write_config(
        &dir.path().join("pv.toml"),
        &format!(
            "[stanza.files]\nsource = \"files:{}\"\nrepo = \"{}\"\ncompress = \"zstd\"\nmax-transfer-size = \"256K\"\n",
            s(&src),
            s(&repo)
        ),
    );
    let c = ["--config", cfg.as_str(), "--stanza", "files"];
    let mut a = vec!["backup"];
    a.extend(c);
    let v = json(&a);
    assert_eq!(v["config"]["codec"], "zstd:3", "{v}");
    assert_eq!(v["config"]["max_transfer_size"], 256 << 10, "{v}");
    let mut a = vec!["history"];
    a.extend(c);
    let h = json(&a);
    assert_eq!(h["sets"].as_array().unwrap().len(), 1, "{h}");
    // history --json's documented fields (docs/PROGRAMS.md).
    assert_eq!(h["version"], 1);
    let set = &h["sets"][0];
    for f in [
        "set_id",
        "name",
        "backup_type",
        "copy_only",
        "damaged",
        "base_set",
        "source_kind",
        "database",
        "system_identifier",
        "timeline",
        "start_lsn",
        "stop_lsn",
        "start_wal",
        "stop_wal",
        "started",
        "finished",
        "seconds",
        "read_bytes",
        "raw_bytes",
        "stored_bytes",
        "codec",
        "stripes",
    ] {
        assert!(set.get(f).is_some(), "no '{f}' in {set}");
    }
    assert_eq!(
        (set["backup_type"].as_str(), set["source_kind"].as_str()),
        (Some("full"), Some("files"))
    );
    assert_eq!(set["codec"], "zstd:3");
    let target = dir.path().join("restored");
    let t = s(&target);
    let mut a = vec!["restore", "--to", t.as_str()];
    a.extend(c);
    ok(&a);
    assert_same_tree(&src, &target);
}

#[test]
fn secrets_unknown_keys_and_writable_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |name: &str, text: &str, says: &[&str]| {
        let cfg = write_config(&dir.path().join(name), text);
        let r = run(&["history", "--config", &cfg, "--stanza", "main"]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        for w in says.iter().chain([&cfg.as_str()]) {
            assert!(r.stderr.contains(w), "no '{w}' in {}", r.stderr);
        }
        cfg
    };
    refused(
        "typo.toml",
        "[stanza.main]\nrepo = \"/r\"\ncompres = \"lz4\"\n",
        &[":3:", "'compres'", "did you mean 'compress'"],
    );
    refused(
        "cmd.toml",
        "[stanza.main]\nrepo = \"/r\"\n[stanza.main.history]\ncompress = \"lz4\"\n",
        &[
            ":4:",
            "[stanza.main.history] 'compress'",
            "not an option of this command",
        ],
    );
    refused(
        "key.toml",
        "[stanza.main]\nrepo = \"/r\"\nkey = \"c2VjcmV0\"\n",
        &["'key'", "never written", "key-file ="],
    );
    refused(
        "s3.toml",
        "secret_access_key = \"abc\"\n[stanza.main]\nrepo = \"/r\"\n",
        &["'secret_access_key'", "credentials-env"],
    );
    let r = run(&[
        "history",
        "--config",
        &s(&dir.path().join("s3.toml")),
        "--stanza",
        "main",
    ]);
    assert!(
        !r.stderr.contains("abc\""),
        "the secret is never shown: {}",
        r.stderr
    );
    refused(
        "url.toml",
        "[stanza.main]\nrepo = \"/r\"\nsource = \"postgres://u:hunter2@db/postgres\"\n",
        &["'source'", "password-file"],
    );
    refused(
        "nostanza.toml",
        "[stanza.other]\nrepo = \"/r\"\n",
        &["no [stanza.main]", "other"],
    );
    let cfg = dir.path().join("open.toml");
    write_config(&cfg, "[stanza.main]\nrepo = \"/r\"\n");
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o620)).unwrap();
    let r = run(&["history", "--config", &s(&cfg), "--stanza", "main"]);
    assert!(
        r.code == 2 && r.stderr.contains("chmod go-w"),
        "{}",
        r.stderr
    );
    // archive-get (restore_command) exits 126 for a configuration fault: recovery stops.
    let r = run(&[
        "archive-get",
        "000000010000000000000001",
        "/tmp/x",
        "--config",
        &s(&cfg),
        "--stanza",
        "main",
    ]);
    assert_eq!(r.code, 126, "{}", r.stderr);
    // A value clap refuses is named with the file's line.
    let cfg = write_config(
        &dir.path().join("bad.toml"),
        "[stanza.main]\nrepo = \"/r\"\nsource = \"files:/x\"\nreaders = \"many\"\n",
    );
    let r = run(&["backup", "--config", &cfg, "--stanza", "main"]);
    assert!(
        r.code == 2 && r.stderr.contains("'readers'") && r.stderr.contains(":4:"),
        "{}",
        r.stderr
    );
}

#[test]
fn unreachable_store_is_retryable_and_a_damaged_set_is_fatal() {
    let (dir, src) = tree_in_tempdir();
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let env = [
        ("AWS_ACCESS_KEY_ID", "pvtest"),
        ("AWS_SECRET_ACCESS_KEY", "pvtest-secret"),
        ("PAGEVAULT_RETRY_SECONDS", "1"),
    ];
    let src_arg = format!("files:{}", s(&src));
    let r = run_env(
        &[
            "backup",
            "--source",
            &src_arg,
            "--repo",
            "s3://nowhere/main",
            "--s3-endpoint",
            &endpoint,
        ],
        &env,
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("did not answer"), "{}", r.stderr);

    let set = dir.path().join("a.pv");
    backup_files(&src, &s(&set), &[]);
    let mut b = fs::read(&set).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x55;
    fs::write(&set, b).unwrap();
    let r = run(&["verify", "--from", &s(&set)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
}

#[test]
fn json_log_lines_parse_and_the_log_file_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("pv.log");
    let l = s(&log);
    let repo = s(&dir.path().join("none"));
    // A failure: start and error events, each one JSON object per line on stderr.
    let r = run(&[
        "history",
        "--repo",
        &repo,
        "--log-format",
        "json",
        "--log-file",
        &l,
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let events: Vec<Value> = r
        .stderr
        .lines()
        .map(|x| serde_json::from_str(x).unwrap_or_else(|e| panic!("{e}: {x}")))
        .collect();
    assert_eq!(events.len(), 2, "{}", r.stderr);
    assert_eq!(events[0]["msg"], "started");
    let e = &events[1];
    assert_eq!(
        (e["level"].as_str(), e["command"].as_str()),
        (Some("error"), Some("history"))
    );
    assert!(e["msg"].as_str().unwrap().contains(&repo), "{e}");
    assert_eq!(e["fields"]["exit_code"], 1);
    assert_eq!(e["fields"]["kind"], "fatal");
    assert!(e["ts"].as_str().unwrap().ends_with('Z'));

    // Text: the same events appended; stderr keeps its one error line.
    let (tdir, src) = tree_in_tempdir();
    let set = s(&tdir.path().join("a.pv"));
    let src_arg = format!("files:{}", s(&src));
    let r = run_env(
        &["backup", "--source", &src_arg, "--to", &set],
        &[("PAGEVAULT_LOG_FILE", &l)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = fs::read_to_string(&log).unwrap();
    let mode = fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the log file is private");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(serde_json::from_str::<Value>(lines[1]).is_ok());
    assert!(lines[2].contains(" INFO backup: started"), "{text}");
    assert!(
        lines[3].contains(" INFO backup: finished") && lines[3].contains("exit_code=0"),
        "{text}"
    );
}

/// archive_command and restore_command stay short with a stanza: PostgreSQL archives
/// through `archive-push --stanza main %p`, and a backup and restore of the cluster take
/// the source and repository from the same file.
#[test]
fn postgres_archives_backs_up_and_restores_through_a_stanza() {
    use common::pg::{check_restored, postgres_dir, Pg};
    let dir = postgres_dir("config");
    let repo = dir.join("repo");
    let cfg = dir.join("pagevault.toml");
    let stanza = |source: &str| {
        let text = format!(
            "compress = \"lz4\"\n[stanza.main]\nrepo = \"{}\"\n{source}",
            s(&repo)
        );
        write_config(&cfg, &text);
        // Read by the server's user too, written by no one else.
        fs::set_permissions(&cfg, fs::Permissions::from_mode(0o644)).unwrap();
    };
    stanza("");
    let c = s(&cfg);
    ok(&["init", "--repo", &s(&repo)]);
    let push = format!("{} archive-push --config {c} --stanza main %p", bin());
    let pg = Pg::start(true, Some(&push));
    let seg = pg.switch_and_wait();

    let got = dir.join("got");
    let r = run(&[
        "archive-get",
        &seg,
        &s(&got),
        "--config",
        &c,
        "--stanza",
        "main",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(fs::metadata(&got).unwrap().len(), 16 << 20);
    let r = run(&[
        "archive-get",
        "00000001000000FF000000FE",
        &s(&got),
        "--config",
        &c,
        "--stanza",
        "main",
    ]);
    assert_eq!(r.code, 1, "not archived: {}", r.stderr);

    stanza(&format!(
        "source = \"{}?pgdata={}\"\n",
        pg.url(),
        s(&pg.data)
    ));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let env = [
        ("PAGEVAULT_CONFIG", c.as_str()),
        ("PAGEVAULT_STANZA", "main"),
    ];
    let r = run_env(&["backup"], &env);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // Issue 53, item 3: check reads the stanza the archive_command names and finds it
    // pushing into the checked repository.
    let r = run_env(&["check", "--json"], &env);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_default();
    let item = (j["checks"].as_array().into_iter().flatten())
        .find(|k| k["name"] == "archive_command")
        .cloned()
        .unwrap_or_default();
    assert_eq!(item["status"], "ok", "{}{}", r.stdout, r.stderr);
    let target = postgres_dir("config-restored").join("data");
    let r = run_env(
        &["restore", "--to", &s(&target), "--owner", "postgres"],
        &env,
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    check_restored(&target, "1000", |p| p.sql("SELECT count(*) FROM t"));
}

#[test]
fn show_config_never_prints_a_password_and_files_never_hold_one() {
    let secret = "s3cr3t";
    let urls = [
        "postgres://u:s3cr3t@h/db",
        "postgres://u:ab/s3cr3t@h/db",
        "postgres://u:a?s3cr3t@h/db",
        "postgres://u@h/db?sslmode=require&password=s3cr3t",
        "postgres://u@h/db?pass%77ord=s3cr3t&pgdata=/d",
    ];
    for url in urls {
        // From the command line and from PAGEVAULT_SOURCE.
        let cli = run(&[
            "backup",
            "--source",
            url,
            "--to",
            "NUL",
            "--show-config",
            "--json",
        ]);
        let env = run_env(
            &["backup", "--to", "NUL", "--show-config", "--json"],
            &[("PAGEVAULT_SOURCE", url)],
        );
        for r in [cli, env] {
            assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
            assert!(
                !r.stdout.contains(secret) && !r.stderr.contains(secret),
                "{url}: {}",
                r.stdout
            );
            assert!(r.stdout.contains("***"), "{url}: {}", r.stdout);
        }
        // Never in a configuration file, however it is spelled.
        let dir = tempfile::tempdir().unwrap();
        let cfg = write_config(
            &dir.path().join("pv.toml"),
            &format!("[stanza.main]\nsource = \"{url}\"\nrepo = \"/bk\"\n"),
        );
        let r = run(&[
            "backup",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--show-config",
            "--json",
        ]);
        assert_eq!(r.code, 2, "{url}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("holds a password") && !r.stderr.contains(secret),
            "{}",
            r.stderr
        );
    }
}

/// Issue 53, item 7: `status --stanza` reads the spool of the stanza's archive-push
/// table, so a failing pusher shows without `--spool` given by hand; a `spool` of the
/// stanza itself (a backup's SQLite spool) is not taken for it.
#[test]
fn status_finds_the_stanzas_async_spool() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, spool) = (dir.path().join("repo"), dir.path().join("spool"));
    ok(&["init", "--repo", &s(&repo)]);
    fs::create_dir_all(spool.join("ready")).unwrap();
    fs::set_permissions(&spool, fs::Permissions::from_mode(0o700)).unwrap();
    let cfg = dir.path().join("pagevault.toml");
    let c = write_config(
        &cfg,
        &format!(
            "[stanza.main]\nrepo = \"{}\"\nspool = \"/var/tmp\"\n[stanza.main.archive-push]\nasync = true\nspool = \"{}\"\n",
            s(&repo),
            s(&spool)
        ),
    );
    let j = json(&["status", "--config", &c, "--stanza", "main"]);
    assert_eq!(j["spool"]["dir"], s(&spool).as_str(), "{j}");
    assert_eq!(j["errors"], serde_json::json!([]), "{j}");
    write_config(
        &cfg,
        &format!(
            "[stanza.main]\nrepo = \"{}\"\nspool = \"/var/tmp\"\n",
            s(&repo)
        ),
    );
    let j = json(&["status", "--config", &c, "--stanza", "main"]);
    assert!(j["spool"].is_null(), "{j}");
}
