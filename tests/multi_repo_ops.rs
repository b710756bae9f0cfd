//! Several repositories per stanza (issue 54, 3-2-1), the commands that take one
//! repository: `expire --stanza` applies each repository's own retention and goes on past
//! one it cannot open, naming it; `verify --stanza` (or `--repo` repeated) verifies each
//! and names the one holding a damaged set; `drill --stanza` takes the chain from the first repository
//! holding it, naming the one passed over; `check --stanza` checks each repository.

mod common;
use common::pg::{postgres_dir, Pg};
use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn config(dir: &Path, text: &str) -> String {
    let p = dir.join("pagevault.toml");
    fs::write(&p, text).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    s(&p)
}

/// Two named repositories of stanza `main`, with `one` and `two` as their own settings.
fn two_repos(dir: &Path, stanza: &str, a: &str, one: &str, b: &str, two: &str) -> String {
    config(
        dir,
        &format!(
            "[stanza.main]\n{stanza}\n[[stanza.main.repo]]\nname = \"one\"\npath = \"{a}\"\n{one}\n\
             [[stanza.main.repo]]\nname = \"two\"\npath = \"{b}\"\n{two}\n"
        ),
    )
}

/// A small tree of incompressible files: frames worth damaging, backed up quickly.
fn small_tree(dir: &Path) -> String {
    let src = dir.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), bytes(7, 600_000, false)).unwrap();
    fs::write(src.join("b"), bytes(8, 5_000, true)).unwrap();
    format!("files:{}", s(&src))
}

/// A small tree's source and the paths of two repositories `a` and `b` beside it.
fn tree_and_repos(dir: &Path) -> (String, String, String) {
    let (a, b) = (s(&dir.join("a")), s(&dir.join("b")));
    (small_tree(dir), a, b)
}

/// Flips a byte in the middle of the first frame of 64 stored bytes or more of `stripe`.
fn damage(stripe: &Path) {
    let at = payload_byte(stripe);
    let mut bytes = fs::read(stripe).unwrap();
    bytes[at] ^= 0x5a;
    fs::write(stripe, bytes).unwrap();
}

/// `n` full backups of `source` into `repo`, opened with `key` when one is given: the
/// repository's set ids.
fn fulls(source: &str, repo: &str, key: &str, n: usize) -> Vec<String> {
    let mut a = vec!["backup", "--source", source, "--repo", repo];
    if !key.is_empty() {
        a.extend(["--key-file", key]);
    }
    for _ in 0..n {
        ok(&a);
    }
    let h = match key {
        "" => json(&["history", "--repo", repo]),
        k => json(&["history", "--repo", repo, "--key-file", k]),
    };
    (h["sets"].as_array().unwrap().iter())
        .map(|s| s["set_id"].as_str().unwrap().to_string())
        .collect()
}

fn strs(v: &Value) -> Vec<String> {
    (v.as_array().unwrap().iter())
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn expire_applies_each_repositorys_own_retention() {
    let d = tempfile::tempdir().unwrap();
    let (source, a, b) = tree_and_repos(d.path());
    // Each repository encrypted with a key of its own: the stanza's opens the first,
    // the second's table names its own.
    let (ka, kb) = (
        key_file(d.path(), "ka", 1, false),
        key_file(d.path(), "kb", 2, true),
    );
    ok(&["init", "--repo", &a, "--key-file", &ka]);
    ok(&["init", "--repo", &b, "--key-file", &kb]);
    let (sa, sb) = (fulls(&source, &a, &ka, 3), fulls(&source, &b, &kb, 3));
    assert_eq!((sa.len(), sb.len()), (3, 3));
    // The stanza's keep-full 2 is what neither repository keeps: each one's own wins.
    let cfg = two_repos(
        d.path(),
        &format!("keep-full = 2\nkey-file = \"{ka}\""),
        &a,
        "keep-full = 1",
        &b,
        &format!("keep-full = 3\nkey-file = \"{kb}\""),
    );
    let base = ["expire", "--config", &cfg, "--stanza", "main"];
    let dry = json(&[&base[..], &["--dry-run"]].concat());
    assert_eq!(dry["command"], "expire");
    let r = dry["repositories"].as_array().unwrap();
    assert_eq!(r.len(), 2, "{dry}");
    assert_eq!(
        (r[0]["repo"].as_str(), r[0]["name"].as_str()),
        (Some(&*a), Some("one"))
    );
    assert_eq!(
        (r[1]["repo"].as_str(), r[1]["name"].as_str()),
        (Some(&*b), Some("two"))
    );
    assert_eq!(strs(&r[0]["expired"]), sa[..2], "{dry}");
    assert!(strs(&r[1]["expired"]).is_empty(), "{dry}");
    assert_eq!(r[0]["dry_run"], true);
    assert_eq!(fulls(&source, &a, &ka, 0), sa);
    assert_eq!(fulls(&source, &b, &kb, 0), sb);
    // Text: a heading per repository, then its lines.
    let text = ok(&base);
    let (one, two) = (
        text.find(&format!("repository 'one' (1) {a}"))
            .expect(&text),
        text.find(&format!("repository 'two' (2) {b}"))
            .expect(&text),
    );
    assert!(one < two, "{text}");
    assert!(text[one..two].contains("2 expired"), "{text}");
    assert!(text[two..].contains("3 set(s) kept, 0 expired"), "{text}");
    assert_eq!(fulls(&source, &a, &ka, 0), sa[2..]);
    assert_eq!(fulls(&source, &b, &kb, 0), sb);
    // One repository, picked: the JSON of one repository, unchanged.
    let one = json(&[&base[..], &["--repo-index", "two"]].concat());
    assert!(
        one.get("repositories").is_none() && one["kept"].is_array(),
        "{one}"
    );
}

#[test]
fn expire_goes_on_past_a_repository_it_cannot_open_and_names_it() {
    let d = tempfile::tempdir().unwrap();
    let (source, a, b) = tree_and_repos(d.path());
    fulls(&source, &a, "", 1);
    let sb = fulls(&source, &b, "", 2);
    fs::remove_dir_all(&a).unwrap();
    let cfg = two_repos(d.path(), "", &a, "keep-full = 1", &b, "keep-full = 1");
    let args = ["expire", "--config", &cfg, "--stanza", "main", "--json"];
    let r = run(&args);
    failed_in_one(&r, "expire", &format!("'one' (1) {a}"), "'two' (2)");
    let j: Value = serde_json::from_str(&r.stdout).unwrap();
    let list = j["repositories"].as_array().unwrap();
    assert!(
        list[0]["error"].is_string() && list[0]["expired"].is_null(),
        "{j}"
    );
    assert_eq!(strs(&list[1]["expired"]), sb[..1], "{j}");
    assert_eq!(history_ids(&b), sb[1..]);
}

#[test]
fn expire_past_an_unreachable_object_store_exits_3_and_expires_the_other() {
    let d = tempfile::tempdir().unwrap();
    let source = small_tree(d.path());
    let b = s(&d.path().join("b"));
    let sb = fulls(&source, &b, "", 2);
    let s3 = "s3://pvtest/multi-ops-unreachable";
    // Its own endpoint, where nothing answers; the directory has none.
    let ep = format!("s3-endpoint = \"http://127.0.0.1:{}\"", free_port());
    let cfg = two_repos(d.path(), "keep-full = 1", s3, &ep, &b, "");
    let r = run_env(
        &["expire", "--config", &cfg, "--stanza", "main"],
        &[
            ("PAGEVAULT_RETRY_SECONDS", "1"),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "expire failed in 1 of 2 repositories: 'one' (1) {s3}"
        )),
        "{}",
        r.stderr
    );
    let two = r
        .stdout
        .find(&format!("repository 'two' (2) {b}"))
        .expect(&r.stdout);
    assert!(
        r.stdout[two..].contains("1 set(s) kept, 1 expired"),
        "{}",
        r.stdout
    );
    assert_eq!(fulls(&source, &b, "", 0), sb[1..]);
}

/// A byte in the middle of the first frame of 64 stored bytes or more of a stripe.
fn payload_byte(path: &Path) -> usize {
    let b = fs::read(path).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let block = u32_at(12);
    let mut at = block;
    while &b[at..at + 4] == b"PVFR" {
        let stored = u32_at(at + 12);
        if stored >= 64 {
            return at + 80 + stored / 2;
        }
        at += (80 + stored).div_ceil(block) * block;
    }
    panic!("no frame to damage in {}", path.display())
}

#[test]
fn verify_checks_each_repository_and_names_the_damaged_one() {
    let d = tempfile::tempdir().unwrap();
    let (source, a, b) = tree_and_repos(d.path());
    fulls(&source, &a, "", 1);
    let sb = fulls(&source, &b, "", 1);
    let cfg = two_repos(d.path(), "", &a, "", &b, "");
    let args = ["verify", "--config", &cfg, "--stanza", "main"];
    let text = ok(&args);
    assert_eq!(text.matches("every frame CRC").count(), 2, "{text}");
    damage(&Path::new(&b).join(format!("sets/{}/1.pv", sb[0])));
    let r = run(&args);
    failed_in_one(&r, "verify", &format!("'two' (2) {b}"), "'one' (1)");
    let one = r.stdout.find("repository 'one' (1)").expect(&r.stdout);
    let two = r.stdout.find("repository 'two' (2)").expect(&r.stdout);
    assert!(
        r.stdout[one..two].contains("every frame CRC"),
        "{}",
        r.stdout
    );
    let j: Value = serde_json::from_str(&run(&[&args[..], &["--json"]].concat()).stdout).unwrap();
    let list = j["repositories"].as_array().unwrap();
    assert_eq!(
        (list[0]["valid"].as_bool(), list[0]["name"].as_str()),
        (Some(true), Some("one"))
    );
    assert!(
        list[1]["error"].is_string() || list[1]["valid"] == false,
        "{j}"
    );
}

#[test]
fn verify_checks_each_repository_the_command_line_names() {
    let d = tempfile::tempdir().unwrap();
    let (source, a, b) = tree_and_repos(d.path());
    fulls(&source, &a, "", 1);
    let sb = fulls(&source, &b, "", 1);
    let args = ["verify", "--repo", &a, "--repo", &b];
    let text = ok(&args);
    assert_eq!(text.matches("every frame CRC").count(), 2, "{text}");
    damage(&Path::new(&b).join(format!("sets/{}/1.pv", sb[0])));
    failed_in_one(&run(&args), "verify", &format!("2 {b}"), &format!("1 {a}"));
    let j: Value = serde_json::from_str(&run(&[&args[..], &["--json"]].concat()).stdout).unwrap();
    let list = j["repositories"].as_array().unwrap();
    assert_eq!(
        (list[0]["valid"].as_bool(), list[0]["repo"].as_str()),
        (Some(true), Some(a.as_str()))
    );
    assert!(
        list[1]["error"].is_string() || list[1]["valid"] == false,
        "{j}"
    );
}

#[test]
fn drill_takes_the_chain_from_the_first_repository_holding_it_and_check_checks_each() {
    let d = tempfile::tempdir().unwrap();
    // Repositories the server's user writes into.
    let dir = postgres_dir("multi-ops");
    let (a, b) = (s(&dir.join("a")), s(&dir.join("b")));
    ok(&["init", "--repo", &a]);
    ok(&["init", "--repo", &b]);
    let push = format!("{} archive-push %p --repo {b}", bin());
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 100) g");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &b]);
    pg.switch_and_wait();
    let cfg = two_repos(d.path(), "", &a, "", &b, "");
    let j = json(&["drill", "--config", &cfg, "--stanza", "main"]);
    assert_eq!(j["outcome"], "ok", "{j}");
    assert!(j["repo"].as_str().unwrap().contains(&b), "{j}");
    let passed = strs(&j["passed_over"]);
    assert!(
        passed.len() == 1 && passed[0].contains(&format!("passed over {a}")),
        "{j}"
    );
    assert!(
        j["served_because"].as_str().unwrap().contains("first"),
        "{j}"
    );
    // Text: the repository that served and the one passed over.
    let text = ok(&["drill", "--config", &cfg, "--stanza", "main"]);
    assert!(
        text.contains(&format!("Drill of {b}")) && text.contains(&format!("passed over {a}")),
        "{text}"
    );
    // check: each repository's lines; the one the server does not archive into fails.
    let args = [
        "check",
        "--source",
        &url,
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--timeout",
        "5",
    ];
    let r = run(&args);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let line = |name: &str, check: &str| {
        (r.stdout.lines())
            .find(|l| l.contains(&format!("{name} {check}")))
            .map(str::to_string)
    };
    let (fa, fb) = (
        line("'one' (1)", "wal-archived"),
        line("'two' (2)", "wal-archived"),
    );
    assert!(fa.is_some_and(|l| l.starts_with("FAIL")), "{}", r.stdout);
    assert!(fb.is_some_and(|l| l.starts_with("ok")), "{}", r.stdout);
    assert!(
        line("'two' (2)", "restore_command").is_some_and(|l| l.starts_with("ok")),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains("check failed in 1 of 2 repositories"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(&format!("'one' (1) {a}")), "{}", r.stderr);
}

/// `r` exited 1 naming the repository `failed` (its label and path) and not `ok`.
fn failed_in_one(r: &Run, command: &str, failed: &str, ok: &str) {
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let said = format!("{command} failed in 1 of 2 repositories");
    assert!(
        r.stderr.contains(&said) && r.stderr.contains(failed),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains(ok), "{}", r.stderr);
}
