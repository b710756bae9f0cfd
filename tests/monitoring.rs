//! The monitoring files shipped in docs/ (issue 56): the Prometheus alert rules pass
//! `promtool check rules` and their unit tests `promtool test rules`; every pagevault
//! metric the rules and the Grafana dashboard name is one `status --prometheus` prints
//! for a real repository (PostgreSQL with archived WAL, a drill, an async spool, the
//! source's lag); the dashboard's picture is the one scripts/render-dashboard.py draws;
//! with several repositories each one's metrics carry its `repo` label and the Nagios
//! check takes the worst state.

mod common;

use common::pg::{init_for_postgres, postgres_dir, tools_dir, Pg};
use common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where scripts/setup.sh unpacks Debian's prometheus package.
fn promtool() -> PathBuf {
    let p = tools_dir().join("prometheus/usr/bin/promtool");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/setup.sh (it unpacks Debian's prometheus package \
         into the tools directory, $PAGEVAULT_TOOLS or /var/tmp/pagevault-tools)",
        p.display()
    );
    p
}

fn promtool_ok(args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root())
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The names starting with `pagevault_` in `text`.
fn pagevault_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = text;
    while let Some(at) = rest.find("pagevault_") {
        let before = rest[..at].chars().next_back();
        let name: String = rest[at..].chars().take_while(|&c| word(c)).collect();
        if !before.is_some_and(word) {
            names.insert(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    names
}

/// Every PromQL query of the dashboard: the panels' targets and the variables.
fn dashboard_queries(d: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = v["definition"].as_str() {
            out.push(q.to_string());
        }
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let check = promtool_ok(&["check", "rules", "docs/prometheus/pagevault-alerts.yml"]);
    assert!(check.contains("SUCCESS"), "{check}");
    let test = promtool_ok(&["test", "rules", "docs/prometheus/pagevault-alerts.test.yml"]);
    assert!(test.contains("SUCCESS"), "{test}");
}

#[test]
fn the_rules_and_the_dashboard_name_only_metrics_pagevault_prints() {
    let dir = postgres_dir("monitoring");
    let repo = s(&dir.join("repo"));
    let spool = s(&dir.join("spool"));
    init_for_postgres(Path::new(&repo));
    let push = format!("{} archive-push %p --repo {repo}", bin());
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 1000) g");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &repo]);
    // A commit after the backup: the drill's replay reaches a transaction, so it has an RPO.
    pg.sql("INSERT INTO t VALUES (0, 'after the backup')");
    pg.switch_and_wait();
    let drill = json(&["drill", "--repo", &repo]);
    assert_eq!(drill["outcome"], "ok", "{drill}");
    // From now on through the spool of archive-push --async.
    pg.sql(&format!(
        "ALTER SYSTEM SET archive_command = '{push} --async --spool {spool}'"
    ));
    pg.sql("SELECT pg_reload_conf()");
    pg.sql("INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1001, 2000) g");
    pg.switch_and_wait();

    let prom = ok(&[
        "status",
        "--repo",
        &repo,
        "--source",
        &pg.url(),
        "--spool",
        &spool,
        "--prometheus",
    ]);
    assert!(
        prom.contains(&format!("pagevault_status_errors{{repo=\"{repo}\"}} 0")),
        "status read everything: {prom}"
    );
    // PAGEVAULT_WRITE_SAMPLE=1: this run's output becomes the picture's sample.
    if std::env::var_os("PAGEVAULT_WRITE_SAMPLE").is_some() {
        let sample = prom.replace(&repo, "/backup/pagevault/main");
        std::fs::write(root().join("docs/grafana/sample.prom"), sample).unwrap();
    }
    let printed: BTreeSet<String> = (prom.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" gauge"))
        .map(str::to_string)
        .collect();

    let rules = std::fs::read_to_string(root().join("docs/prometheus/pagevault-alerts.yml"))
        .expect("docs/prometheus/pagevault-alerts.yml");
    let in_rules = pagevault_names(&rules);
    let path = root().join("docs/grafana/pagevault.json");
    let dashboard: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("docs/grafana/pagevault.json"))
            .expect("docs/grafana/pagevault.json is JSON");
    let in_dashboard = pagevault_names(&dashboard_queries(&dashboard).join("\n"));
    assert!(
        in_rules.len() >= 10 && in_dashboard.len() >= 15,
        "too few names found: {in_rules:?} {in_dashboard:?}"
    );
    for (file, names) in [
        ("docs/prometheus/pagevault-alerts.yml", &in_rules),
        ("docs/grafana/pagevault.json", &in_dashboard),
    ] {
        let unknown: Vec<&String> = names.difference(&printed).collect();
        assert!(
            unknown.is_empty(),
            "{file} names {unknown:?}, which status --prometheus does not print:\n{prom}"
        );
    }
    // The sample the picture is drawn from names the same metrics as this output.
    let sample = std::fs::read_to_string(root().join("docs/grafana/sample.prom")).unwrap();
    assert_eq!(pagevault_names(&sample), pagevault_names(&prom), "{sample}");
}

#[test]
fn several_repositories_give_each_its_labelled_metrics_and_the_nagios_check_the_worst() {
    let (d, src) = tree_in_tempdir();
    let (a, b) = (s(&d.path().join("a")), s(&d.path().join("b")));
    ok(&["init", "--repo", &a]);
    ok(&["init", "--repo", &b]);
    let source = format!("files:{}", s(&src));
    ok(&["backup", "--source", &source, "--repo", &a]);
    let both = |extra: &[&str]| {
        let mut args = vec!["status", "--repo", a.as_str(), "--repo", b.as_str()];
        args.extend_from_slice(extra);
        run(&args)
    };
    let r = both(&["--prometheus"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let prom = r.stdout;
    // promtool lints the exposition: a family's samples together, under one HELP and TYPE.
    let mut lint = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    lint.stdin
        .take()
        .unwrap()
        .write_all(prom.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}\n{prom}");
    for name in ["repository_up", "sets", "wal_lagging"] {
        let types = prom
            .matches(&format!("# TYPE pagevault_{name} gauge\n"))
            .count();
        assert_eq!(types, 1, "{name}: {prom}");
    }
    for line in [
        format!("pagevault_sets{{repo=\"{a}\"}} 1"),
        format!("pagevault_sets{{repo=\"{b}\"}} 0"),
        format!("pagevault_repository_up{{repo=\"{b}\"}} 1"),
        format!("pagevault_wal_lagging{{repo=\"{a}\"}} 0"),
    ] {
        assert!(prom.lines().any(|l| l == line), "{line}: {prom}");
    }
    assert!(
        prom.contains(&format!(
            "pagevault_newest_backup_age_seconds{{repo=\"{a}\",type=\"full\"}}"
        )),
        "{prom}"
    );

    // Nagios: `b` holds no backup set: CRITICAL, the worst, though `a` is fresh.
    let r = both(&["--warn-age", "1h", "--crit-age", "2h"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    let line = r.stdout.lines().next().unwrap();
    assert!(
        line.starts_with(&format!(
            "PAGEVAULT CRITICAL - {a}: OK, the newest backup finished"
        )) && line.contains(&format!("; {b}: CRITICAL, no backup set | age_1=")),
        "{line}"
    );
    // A set in each: OK, each one's age in the performance data.
    ok(&["backup", "--source", &source, "--repo", &b]);
    let r = both(&["--warn-age", "1h", "--crit-age", "2h"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let line = r.stdout.lines().next().unwrap();
    assert!(
        line.starts_with("PAGEVAULT OK - ") && line.contains(" age_2="),
        "{line}"
    );
    // Past the warning age in both, not the critical one: WARNING.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = both(&["--warn-age", "1s", "--crit-age", "1h"]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("PAGEVAULT WARNING - "), "{}", r.stdout);
}

#[test]
fn the_dashboard_picture_is_up_to_date() {
    let tmp = tempfile::tempdir().unwrap();
    let svg = tmp.path().join("pagevault.svg");
    let out = Command::new("python3")
        .arg(root().join("scripts/render-dashboard.py"))
        .arg(root().join("docs/grafana/sample.prom"))
        .arg(root().join("docs/grafana/pagevault.json"))
        .arg(&svg)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "scripts/render-dashboard.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let drawn = std::fs::read(&svg).unwrap();
    let committed = std::fs::read(root().join("docs/grafana/pagevault.svg")).unwrap();
    assert!(
        drawn == committed,
        "docs/grafana/pagevault.svg is not the picture of docs/grafana/pagevault.json: run \
         scripts/render-dashboard.py docs/grafana/sample.prom and commit docs/grafana/pagevault.svg"
    );
}
