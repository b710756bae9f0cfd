//! A stanza's repositories with keys of their own (issue 54): PostgreSQL 15 archives
//! through `--stanza` into two encrypted directory repositories, each sealed with its
//! own key; a backup goes to each; `--repo-index` picks one; a key file that cannot be
//! used names its repository; and once the first repository is lost (made again,
//! empty), a restore takes the chain from the second and the restored server's
//! restore_command opens each repository with its own key through the configuration.
//! A repository in MinIO is reached at the endpoint of its own table; `copy` between a
//! stanza's repositories seals with the destination's own key.

mod common;

use common::pg::{check_restored, postgres_dir, run_as_postgres, Pg};
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn rows(pg: &Pg) -> String {
    pg.sql("SELECT count(*) || ':' || sum(g) FROM t")
}

/// pagevault as the postgres user (the key files are its own), which must succeed.
fn pg_ok(args: &[&str]) -> String {
    let r = run_as_postgres(args);
    assert_eq!(r.code, 0, "{args:?}:\n{}\n{}", r.stdout, r.stderr);
    r.stdout
}

fn pg_json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&pg_ok(&a)).expect("valid JSON")
}

/// A key file of the postgres user: 32 bytes from `seed`, mode 0600.
fn pg_key(dir: &Path, name: &str, seed: u64) -> String {
    let k = key_file(dir, name, seed, true);
    common::pg::give_to_postgres(Path::new(&k));
    k
}

/// A configuration file root owns (mode 0644, so the server reads it), stanza `main`
/// with repositories `first` and `second`, each with its key file.
fn config(dir: &Path, name: &str, a: &str, ka: &str, b: &str, kb: &str) -> String {
    let p = dir.join(name);
    fs::write(
        &p,
        format!(
            "[stanza.main]\n\n[[stanza.main.repo]]\nname = \"first\"\npath = \"{a}\"\nkey-file = \"{ka}\"\n\n\
             [[stanza.main.repo]]\nname = \"second\"\npath = \"{b}\"\nkey-file = \"{kb}\"\nkeep-full = 4\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    s(&p)
}

/// The archived copy of WAL file `name` in directory repository `repo`.
fn archived(repo: &str, name: &str) -> bool {
    let dir = Path::new(repo).join("wal").join(&name[..8]);
    fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(name))
    })
}

#[test]
fn repositories_with_keys_of_their_own_archive_back_up_and_recover() {
    let dir = postgres_dir("keys");
    let (ka, kb) = (
        pg_key(&dir, "first.key", 11),
        pg_key(&dir, "second.key", 22),
    );
    let a = s(&postgres_dir("first").join("repo"));
    let b = s(&postgres_dir("second").join("repo"));
    pg_ok(&["init", "--repo", &a, "--key-file", &ka]);
    pg_ok(&["init", "--repo", &b, "--key-file", &kb]);
    let cfg = config(&dir, "pagevault.toml", &a, &ka, &b, &kb);
    let st = ["--config", &cfg, "--stanza", "main"];

    // --show-config names each repository's key file and its settings.
    let shown = ok(&[
        "history",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--repo-index",
        "second",
        "--show-config",
    ]);
    assert!(shown.contains(&format!("key-file={kb}")), "{shown}");
    assert!(
        shown.lines().any(|l| l.contains(&b) && l.contains("used")),
        "{shown}"
    );
    assert!(
        !shown.lines().any(|l| l.contains(&a) && l.contains("used")),
        "{shown}"
    );

    let push = format!("{} archive-push %p --config {cfg} --stanza main", bin());
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), pg.data.display());
    let mut backup = vec!["backup", "--source", &url];
    backup.extend_from_slice(&st);
    pg_json(&backup);
    backup.extend_from_slice(&["--to-repo", "2"]);
    pg_json(&backup);
    pg.sql("INSERT INTO t SELECT g FROM generate_series(1001, 30000) g");
    let seg = pg.switch_and_wait();
    pg.sql("SELECT pg_create_restore_point('newest')");
    let want = rows(&pg);
    pg.switch_and_wait();

    // Each repository holds the segment, sealed with its own key: the second's copy
    // does not open with the first's key, and opens with its own.
    assert!(archived(&a, &seg) && archived(&b, &seg), "{seg}");
    let get = |repo: &str, key: &str, out: &str| {
        let out = s(&dir.join(out));
        let r = run_as_postgres(&["archive-get", &seg, &out, "--repo", repo, "--key-file", key]);
        (r, Path::new(&out).exists())
    };
    let (wrong, there) = get(&b, &ka, "wrong");
    assert!(
        wrong.code != 0 && !there && wrong.stderr.contains("wrong key"),
        "{}",
        wrong.stderr
    );
    let (r, there) = get(&b, &kb, "second");
    assert!(r.code == 0 && there, "{}", r.stderr);
    let (r, there) = get(&a, &ka, "first");
    assert!(r.code == 0 && there, "{}", r.stderr);

    // --repo-index picks one: each lists its own set only.
    let ids = |sel: &str| -> Vec<String> {
        let mut h = vec!["history", "--repo-index", sel];
        h.extend_from_slice(&st);
        (pg_json(&h)["sets"].as_array().unwrap().iter())
            .map(|s| s["set_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (first, second) = (ids("first"), ids("2"));
    assert_eq!((first.len(), second.len()), (1, 1), "{first:?} {second:?}");
    assert_ne!(first, second);
    let mut v = vec!["verify", "--repo-index", "2"];
    v.extend_from_slice(&st);
    let verified = pg_json(&v);
    assert_eq!(verified["valid"], true, "{verified}");
    let mut one = vec!["status", "--repo-index", "second"];
    one.extend_from_slice(&st);
    let status = pg_json(&one);
    assert_eq!(status["repo"].as_str(), Some(b.as_str()), "{status}");

    // A key file of the second that cannot be read names the second.
    let missing = s(&dir.join("absent.key"));
    let bad = config(&dir, "bad.toml", &a, &ka, &b, &missing);
    let r = run_as_postgres(&[
        "history",
        "--config",
        &bad,
        "--stanza",
        "main",
        "--repo-index",
        "2",
    ]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("repository 'second' (2)") && r.stderr.contains(&missing),
        "{}",
        r.stderr
    );
    let r = run_as_postgres(&["status", "--config", &bad, "--stanza", "main"]);
    assert!(
        r.code != 0 && r.stderr.contains("repository 'second' (2)") && r.stderr.contains(&missing),
        "{}",
        r.stderr
    );
    // The first's key for the second: refused by the second (its path named).
    let swapped = config(&dir, "swapped.toml", &a, &ka, &b, &ka);
    let r = run_as_postgres(&[
        "history",
        "--config",
        &swapped,
        "--stanza",
        "main",
        "--repo-index",
        "2",
    ]);
    assert!(r.code != 0 && r.stderr.contains(&b), "{}", r.stderr);

    // The first is lost and made again, empty: the chain comes from the second, and the
    // restore_command reads each repository with its own key from the configuration.
    fs::remove_dir_all(&a).unwrap();
    pg_ok(&["init", "--repo", &a, "--key-file", &ka]);
    let target = postgres_dir("restored").join("data");
    let to = s(&target);
    let mut restore = restore_args(&to, &["--json"]);
    restore.extend_from_slice(&st);
    // A configuration the server's user cannot read: refused before anything is written.
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o600)).unwrap();
    let e = fails(&restore, 1);
    assert!(
        e.contains("restore_command this restore would write fails")
            && e.contains("configuration file"),
        "{e}"
    );
    assert!(fs::read_dir(&target).map_or(true, |mut d| d.next().is_none()));
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o644)).unwrap();
    let r: serde_json::Value = serde_json::from_str(&ok(&restore)).unwrap();
    let warnings = r["warnings"].to_string();
    assert!(warnings.contains(&a), "{r}");
    let line = restore_command_in(&target);
    assert!(
        line.contains(&format!("--config {cfg}"))
            && line.contains("--stanza main")
            && line.contains(&format!("--repo {b} --repo {a}"))
            && !line.contains("--key-file"),
        "{line}"
    );
    drop(pg);
    check_restored(&target, &want, rows);

    // The first removed for good: a restore from the second alone writes its key.
    fs::remove_dir_all(&a).unwrap();
    let target = postgres_dir("alone").join("data");
    let to = s(&target);
    let mut restore = restore_args(&to, &["--repo-index", "2"]);
    restore.extend_from_slice(&st);
    ok(&restore);
    let line = restore_command_in(&target);
    assert!(
        line.contains(&format!("--repo {b} --key-file {kb}")) && !line.contains(&a),
        "{line}"
    );
    check_restored(&target, &want, rows);
}

/// A restore of the stanza's newest point into `to` as the server's user, with `extra`.
fn restore_args<'a>(to: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "restore",
        "--to",
        to,
        "--owner",
        "postgres",
        "--until-name",
        "newest",
    ];
    v.extend_from_slice(extra);
    v
}

/// The restore_command a restore wrote into `target`'s postgresql.auto.conf.
fn restore_command_in(target: &std::path::Path) -> String {
    let conf = fs::read_to_string(target.join("postgresql.auto.conf")).unwrap();
    let line = conf.lines().find(|l| l.starts_with("restore_command"));
    line.expect("a restore_command").to_string()
}

/// --repo-index is refused beside --repo, and a place or name the stanza lacks lists
/// its repositories; a repository's key settings are checked when the file is read.
#[test]
fn repo_index_and_repository_keys_are_checked() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (s(&d.path().join("a")), s(&d.path().join("b")));
    let k = key_file(d.path(), "k", 1, false);
    let cfg = config(d.path(), "c.toml", &a, &k, &b, &k);
    let e = fails(
        &[
            "history",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--repo-index",
            "2",
            "--repo",
            &a,
        ],
        2,
    );
    assert!(e.contains("--repo-index picks one"), "{e}");
    let e = fails(
        &[
            "expire",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--repo-index",
            "offsite",
        ],
        2,
    );
    assert!(
        e.contains("--repo-index offsite")
            && e.contains("'first' (1)")
            && e.contains("'second' (2)"),
        "{e}"
    );
    let e = fails(
        &[
            "key",
            "rotate",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--repo-index",
            "9",
            "--new-key-file",
            &k,
        ],
        2,
    );
    assert!(
        e.contains("--repo-index 9") && e.contains("'second' (2)"),
        "{e}"
    );
    let e = fails(&["history", "--repo-index", "1", "--repo", &a], 2);
    assert!(e.contains("--repo-index"), "{e}");
    let p = d.path().join("both.toml");
    fs::write(
        &p,
        format!("[stanza.main]\n[[stanza.main.repo]]\npath = \"{a}\"\nkey-file = \"{k}\"\npassphrase-file = \"{k}\"\n"),
    )
    .unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    let e = fails(&["history", "--config", &s(&p), "--stanza", "main"], 2);
    assert!(e.contains("not both") && e.contains("both.toml"), "{e}");
    // The stanza's passphrase for the first, the second's own key file: each repository
    // opens with its own, one by one and together.
    let phrase = d.path().join("phrase");
    fs::write(&phrase, "correct horse battery staple\n").unwrap();
    fs::set_permissions(&phrase, fs::Permissions::from_mode(0o600)).unwrap();
    ok(&["init", "--repo", &a, "--passphrase-file", &s(&phrase)]);
    ok(&["init", "--repo", &b, "--key-file", &k]);
    let mixed = d.path().join("mixed.toml");
    fs::write(
        &mixed,
        format!(
            "[stanza.main]\npassphrase-file = \"{}\"\n[[stanza.main.repo]]\npath = \"{a}\"\n\
             [[stanza.main.repo]]\npath = \"{b}\"\nkey-file = \"{k}\"\n",
            s(&phrase)
        ),
    )
    .unwrap();
    fs::set_permissions(&mixed, fs::Permissions::from_mode(0o600)).unwrap();
    let m = ["--config", mixed.to_str().unwrap(), "--stanza", "main"];
    for sel in ["1", "2"] {
        let mut h = vec!["history", "--repo-index", sel];
        h.extend_from_slice(&m);
        ok(&h);
    }
    let mut st = vec!["status"];
    st.extend_from_slice(&m);
    let all = json(&st);
    let up: Vec<bool> = (all["repositories"].as_array().unwrap().iter())
        .map(|r| r["repository_up"].as_bool().unwrap())
        .collect();
    assert_eq!(up, [true, true], "{all}");
}

/// `copy --stanza main --repo A --to-repo B`: each opens with its own key, B's from its
/// table unless --to-key-file names another; restore --repo-index reads B with its key.
#[test]
fn a_copy_between_repositories_of_a_stanza_opens_each_with_its_own_key() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let src = d.join("src");
    make_tree(&src);
    let (a, b) = (s(&d.join("a")), s(&d.join("b")));
    let (ka, kb) = (key_file(d, "ka", 1, false), key_file(d, "kb", 2, true));
    let cfg = config(d, "c.toml", &a, &ka, &b, &kb);
    let st = ["--config", cfg.as_str(), "--stanza", "main"];
    // init makes each with its own key.
    for sel in ["1", "second"] {
        let mut init = vec!["init", "--repo-index", sel];
        init.extend_from_slice(&st);
        ok(&init);
    }
    let e = fails(&["history", "--repo", &b, "--key-file", &ka], 1);
    assert!(e.contains("wrong key"), "{e}");
    let source = format!("files:{}", s(&src));
    let mut backup = vec!["backup", "--source", &source];
    backup.extend_from_slice(&st);
    let id = json(&backup)["set_id"].as_str().unwrap().to_string();
    let mut copy = vec!["copy", "--repo", &a, "--to-repo", &b];
    copy.extend_from_slice(&st);
    let j = json(&copy);
    assert_eq!(j["sets"][0]["set_id"].as_str(), Some(id.as_str()), "{j}");
    // Sealed with B's key: it opens with that key alone.
    let v = json(&["verify", "--repo", &b, "--key-file", &kb]);
    assert_eq!(v["valid"], true, "{v}");
    let e = fails(&["verify", "--repo", &b, "--key-file", &ka], 1);
    assert!(e.contains("wrong key"), "{e}");
    // The source's key given on the command line stays the source's: B opens with its
    // own (nothing left to copy); --to-key-file still wins: A's key, refused by B.
    let mut given = copy.clone();
    given.extend_from_slice(&["--key-file", &ka]);
    let j = json(&given);
    assert_eq!(j["sets_copied"], 0, "{j}");
    copy.extend_from_slice(&["--to-key-file", &ka, "--all"]);
    let e = fails(&copy, 1);
    assert!(e.contains("wrong key"), "{e}");
    let out = s(&d.join("out"));
    let mut restore = vec!["restore", "--repo-index", "second", "--to", &out];
    restore.extend_from_slice(&st);
    ok(&restore);
    assert_same_tree(&src, Path::new(&out));
    // A stanza of one repository with its own key: status opens it with that key.
    let one = d.join("one.toml");
    fs::write(
        &one,
        format!("[stanza.main]\n[[stanza.main.repo]]\npath = \"{b}\"\nkey-file = \"{kb}\"\n"),
    )
    .unwrap();
    fs::set_permissions(&one, fs::Permissions::from_mode(0o600)).unwrap();
    let st = json(&["status", "--config", &s(&one), "--stanza", "main"]);
    assert_eq!(
        (st["repo"].as_str(), st["sets"].as_u64()),
        (Some(b.as_str()), Some(1)),
        "{st}"
    );
}

/// A repository in MinIO reached at the endpoint of its own table, sealed with its own
/// key, beside a directory that takes the stanza's key; the stanza's endpoint (and
/// AWS_ENDPOINT_URL) lead nowhere.
#[test]
fn a_repository_in_minio_is_reached_at_its_own_endpoint_with_its_own_key() {
    let minio = common::stores::shared().minio.endpoint();
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let dir = s(&d.join("local"));
    let s3 = format!("s3://pvtest/{}", common::stores::unique("keys"));
    let (kd, ks) = (key_file(d, "kd", 5, false), key_file(d, "ks", 6, true));
    ok(&["init", "--repo", &dir, "--key-file", &kd]);
    ok(&[
        "init",
        "--repo",
        &s3,
        "--key-file",
        &ks,
        "--s3-endpoint",
        &minio,
    ]);
    let dead = format!("http://127.0.0.1:{}", free_port());
    let cfg = d.join("pagevault.toml");
    fs::write(
        &cfg,
        format!(
            "[stanza.main]\nkey-file = \"{kd}\"\ns3-endpoint = \"{dead}\"\n\
             [[stanza.main.repo]]\nname = \"local\"\npath = \"{dir}\"\n\
             [[stanza.main.repo]]\nname = \"offsite\"\npath = \"{s3}\"\n\
             key-file = \"{ks}\"\ns3-endpoint = \"{minio}\"\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&cfg, fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = s(&cfg);
    let env = [
        ("AWS_ENDPOINT_URL", dead.as_str()),
        ("PAGEVAULT_RETRY_SECONDS", "1"),
    ];
    let pg = Pg::start(false, None);
    let name = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    let seg = d.join(&name);
    fs::copy(pg.data.join("pg_wal").join(&name), &seg).unwrap();
    drop(pg);
    let st = ["--config", cfg.as_str(), "--stanza", "main"];
    let mut push = vec!["archive-push", seg.to_str().unwrap(), "--json"];
    push.extend_from_slice(&st);
    let r = run_env(&push, &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let each = j["repositories"].as_array().unwrap();
    assert!(each.iter().all(|r| r["outcome"] == "archived"), "{j}");
    // The copy in MinIO opens with its own key only.
    let get = |key: &str, out: &str| {
        let out = s(&d.join(out));
        let a = [
            "archive-get",
            &name,
            &out,
            "--repo",
            &s3,
            "--key-file",
            key,
            "--s3-endpoint",
            &minio,
        ];
        (run_env(&a, &env), Path::new(&out).exists())
    };
    let (r, there) = get(&kd, "wrong");
    assert!(
        r.code != 0 && !there && r.stderr.contains("wrong key"),
        "{}",
        r.stderr
    );
    let (r, there) = get(&ks, "right");
    assert!(r.code == 0 && there, "{}", r.stderr);
    assert_eq!(fs::read(d.join("right")).unwrap(), fs::read(&seg).unwrap());
    // status reads both, each with its own key at its own endpoint.
    let mut status = vec!["status", "--json"];
    status.extend_from_slice(&st);
    let r = run_env(&status, &env);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let up: Vec<bool> = (j["repositories"].as_array().unwrap().iter())
        .map(|r| r["repository_up"].as_bool().unwrap())
        .collect();
    assert_eq!(up, [true, true], "{j}");
    assert_eq!(j["wal_lagging"].as_array().unwrap().len(), 0, "{j}");
}
