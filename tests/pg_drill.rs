//! `drill` (issue 41): a good repository's drill passes, reports its times and is
//! what `status` shows; the source cluster's files are the same after it; a damaged or
//! missing WAL segment and a damaged set fail the drill naming them; a drill of an S3
//! repository passes; a chain restored with a stale visibility map fails the
//! `visibility` check naming the table; a drill of `--set S` reports S, and one to an
//! `--until` time measures its RPO to that time. The set's own commands and libraries
//! never run in a drill, a set of another cluster is refused, and so is a scratch
//! others can write or a link planted in it.

mod common;

use common::pg::{postgres_dir, push_cmd, Pg, PgOptions};
use common::stores::{shared, unique};
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

fn insert(pg: &Pg, from: u32, to: u32) {
    pg.sql(&format!(
        "INSERT INTO t SELECT g, md5(g::text) FROM generate_series({from}, {to}) g"
    ));
}

/// A cluster archiving into `repo`, a full set of rows 1..100, then rows up to 300 in
/// two more archived segments; returns the server and the segments switched.
fn archiving(repo: &str, ep: &[&str]) -> (Pg, Vec<String>) {
    ok(&[&["init", "--repo", repo][..], ep].concat());
    let push = format!("{} archive-push %p --repo {repo} {}", bin(), ep.join(" "));
    let pg = Pg::start(true, Some(&push));
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    insert(&pg, 1, 100);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let mut a = vec!["backup", "--source", &url, "--repo", repo];
    a.extend_from_slice(ep);
    ok(&a);
    insert(&pg, 101, 200);
    let first = pg.switch_and_wait();
    insert(&pg, 201, 300);
    let second = pg.switch_and_wait();
    (pg, vec![first, second])
}

/// Every file under `dir`: relative path -> (size, hash of its content).
fn files(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                fs::read(&p).unwrap().hash(&mut h);
                out.insert(p.strip_prefix(dir).unwrap().into(), (m.len(), h.finish()));
            }
        }
    }
    out
}

/// A drill that fails: exit 1; its stdout (the report) and stderr.
fn drill_run_fails(repo: &str, extra: &[&str]) -> Run {
    let mut a = vec!["drill", "--repo", repo];
    a.extend_from_slice(extra);
    let r = run(&a);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    r
}

fn drill_fails(repo: &str, extra: &[&str]) -> String {
    let r = drill_run_fails(repo, extra);
    format!("{}{}", r.stdout, r.stderr)
}

fn check<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    (j["checks"].as_array().unwrap().iter())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {j}"))
}

/// A directory of root's for a --scratch (the drill runs as root here: one of postgres's
/// above its scratch is refused), which the server, as postgres, may enter.
fn scratch_base() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    base
}
#[test]
fn a_good_repository_drills_and_the_source_is_untouched() {
    let dir = postgres_dir("drill");
    let repo = s(&dir.join("repo"));
    let (mut pg, segs) = archiving(&repo, &[]);
    pg.stop();
    let before = files(&pg.data);
    let sql = dir.join("checks.sql");
    fs::write(
        &sql,
        "SELECT 'rows=' || count(*) FROM t;\n\
         DO $$ BEGIN IF (SELECT count(*) FROM t) <> 300 THEN RAISE EXCEPTION 'rows lost'; END IF; END $$;\n",
    )
    .unwrap();

    let j = json(&["drill", "--repo", &repo, "--sql", &s(&sql)]);
    assert_eq!(j["outcome"], "ok", "{j}");
    for f in ["restore_seconds", "replay_seconds", "rto_seconds"] {
        assert!(j[f].as_f64().is_some_and(|v| v > 0.0), "{f}: {j}");
    }
    assert!(j["rpo_seconds"].as_f64().is_some_and(|v| v >= 0.0), "{j}");
    assert!(
        j["rto_seconds"].as_f64() > j["replay_seconds"].as_f64(),
        "{j}"
    );
    assert_eq!(j["newest_wal"], segs[1].as_str(), "{j}");
    for c in ["restore", "replay", "pg_amcheck", "visibility", "sql"] {
        assert_eq!(check(&j, c)["status"], "ok", "{j}");
    }
    let names: Vec<&str> = (j["checks"].as_array().unwrap().iter())
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["restore", "replay", "pg_amcheck", "visibility", "sql"],
        "{j}"
    );
    assert_eq!(j["rpo_to"], "newest_wal", "{j}");
    assert!(
        check(&j, "sql")["detail"]
            .as_str()
            .unwrap()
            .contains("rows=300"),
        "{j}"
    );
    assert!(!Path::new(j["scratch"].as_str().unwrap()).exists(), "{j}");
    // The source cluster is as it was, file for file.
    assert_eq!(files(&pg.data), before);

    // status shows it.
    let st = json(&["status", "--repo", &repo]);
    let last = &st["last_drill"];
    assert_eq!(last["outcome"], "ok", "{st}");
    assert_eq!(last["rto_seconds"], j["rto_seconds"], "{st}");
    let text = ok(&["status", "--repo", &repo]);
    assert!(
        text.contains("last drill") && text.contains(", ok, RTO"),
        "{text}"
    );
    let prom = ok(&["status", "--repo", &repo, "--prometheus"]);
    assert!(prom.contains("pagevault_last_drill_ok{"), "{prom}");

    // A check of the user's that fails fails the drill, naming it; recorded too.
    fs::write(&sql, "SELECT 1/0;\n").unwrap();
    let out = drill_fails(&repo, &["--sql", &s(&sql)]);
    assert!(
        out.contains("FAIL sql") && out.contains("division by zero"),
        "{out}"
    );
    assert!(out.contains("the drill failed: sql"), "{out}");
    let st = json(&["status", "--repo", &repo]);
    assert_eq!(st["last_drill"]["outcome"], "failed", "{st}");
    assert_eq!(st["last_drill"]["failed"][0], "sql", "{st}");

    // A newest record that is not one (hostile data): status says so, escaped.
    let forged = Path::new(&repo).join("drills/29991231T000000.000Z.json");
    fs::write(
        &forged,
        r#"{"time": "\u001b[2J", "outcome": "ok", "rto_seconds": -1, "failed": []}"#,
    )
    .unwrap();
    let st = json(&["status", "--repo", &repo]);
    assert_eq!(st["last_drill"]["outcome"], "damaged", "{st}");
    let text = ok(&["status", "--repo", &repo]);
    assert!(
        text.contains("is damaged") && !text.contains('\u{1b}'),
        "{text}"
    );
    fs::remove_file(&forged).unwrap();

    // SIGTERM while the scratch server runs: it is stopped, the scratch removed, the
    // drill not recorded; ends as a process killed by the signal would.
    let records = fs::read_dir(Path::new(&repo).join("drills"))
        .unwrap()
        .count();
    let base = scratch_base();
    let scratch = base.path().join("scratch");
    let child = std::process::Command::new(bin())
        .args(["drill", "--repo", &repo, "--scratch", &s(&scratch)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = scratch.join("server.log");
    let (r, _) = signal_when(child, "-TERM", || log.exists());
    assert_eq!(r.code, 143, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("interrupted by SIGTERM"), "{}", r.stderr);
    assert!(!scratch.exists(), "{}", r.stderr);
    let running = fs::read_dir("/proc").unwrap().any(|e| {
        fs::read(e.unwrap().path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&s(&scratch)))
    });
    assert!(!running, "a process of the drill's scratch still runs");
    let after = fs::read_dir(Path::new(&repo).join("drills"))
        .unwrap()
        .count();
    assert_eq!(after, records);

    // Refused before anything: a non-empty scratch, a port in use.
    let busy = base.path().join("busy");
    fs::create_dir(&busy).unwrap();
    fs::write(busy.join("PG_VERSION"), "15\n").unwrap();
    let e = drill_fails(&repo, &["--scratch", &s(&busy)]);
    assert!(e.contains("not empty"), "{e}");
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let e = drill_fails(&repo, &["--port", &port]);
    assert!(e.contains("in use"), "{e}");
    assert_eq!(files(&pg.data), before);
}

#[test]
fn damaged_or_missing_wal_and_a_damaged_set_fail_naming_them() {
    let dir = postgres_dir("drillbad");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    let (pg, segs) = archiving(&repo, &[]);
    drop(pg);
    let stored = repo_dir.join(format!("wal/00000001/{}.zst", segs[0]));
    let good = fs::read(&stored).unwrap();

    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x20;
    fs::write(&stored, &bad).unwrap();
    let r = drill_run_fails(&repo, &["--json"]);
    let j: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    assert!(
        r.stderr.contains("the drill failed: restore"),
        "{}",
        r.stderr
    );
    assert_eq!(j["outcome"], "failed", "{j}");
    let d = check(&j, "restore")["detail"].as_str().unwrap();
    assert!(d.contains(&segs[0]) && d.contains("damaged"), "{j}");
    assert_eq!(check(&j, "replay")["status"], "skip", "{j}");
    assert!(!Path::new(j["scratch"].as_str().unwrap()).exists(), "{j}");
    let st = json(&["status", "--repo", &repo]);
    assert_eq!(st["last_drill"]["outcome"], "failed", "{st}");

    fs::remove_file(&stored).unwrap();
    let out = drill_fails(&repo, &[]);
    assert!(out.contains(&segs[0]) && out.contains("missing"), "{out}");
    fs::write(&stored, &good).unwrap();

    // A byte flipped in the middle of the set's stripe.
    let set = json(&["history", "--repo", &repo])["sets"][0]["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    let stripe = files(&repo_dir)
        .into_iter()
        .filter(|(p, _)| p.to_str().unwrap().contains(&set) && !p.starts_with("catalog"))
        .max_by_key(|(_, (len, _))| *len)
        .map(|(p, _)| repo_dir.join(p))
        .unwrap();
    let mut b = fs::read(&stripe).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x55;
    fs::write(&stripe, &b).unwrap();
    let out = drill_fails(&repo, &[]);
    assert!(out.contains("FAIL restore"), "{out}");
    let name = stripe.file_name().unwrap().to_str().unwrap();
    assert!(out.contains(name) || out.contains(&set), "{out}");
}

#[test]
fn an_s3_repository_drills() {
    let sh = shared();
    let ep_url = sh.minio.endpoint();
    let ep = ["--s3-endpoint", ep_url.as_str()];
    let repo = format!("s3://pvtest/{}", unique("drill"));
    let (pg, _) = archiving(&repo, &ep);
    drop(pg);
    let j = json(&["drill", "--repo", &repo, ep[0], ep[1]]);
    assert_eq!(j["outcome"], "ok", "{j}");
    assert!(j["rpo_seconds"].as_f64().is_some(), "{j}");
    assert!(j["recorded"].as_str().unwrap().starts_with("s3://"), "{j}");
    let st = json(&["status", "--repo", &repo, ep[0], ep[1]]);
    assert_eq!(st["last_drill"]["outcome"], "ok", "{st}");
}

/// The newest drill record written in the repository.
fn newest_record(repo: &Path) -> serde_json::Value {
    let newest = (fs::read_dir(repo.join("drills")).unwrap())
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    serde_json::from_slice(&fs::read(newest).unwrap()).unwrap()
}

fn epoch_of(pg_time: &str) -> f64 {
    let t = chrono::DateTime::parse_from_str(pg_time, "%Y-%m-%d %H:%M:%S%.f%#z")
        .unwrap_or_else(|e| panic!("{pg_time}: {e}"));
    t.timestamp_micros() as f64 / 1e6
}

#[test]
fn a_stale_visibility_map_fails_the_drill_and_targets_are_reported() {
    let dir = postgres_dir("drillvm");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    let pg = Pg::start_with(&PgOptions {
        checksums: true,
        archive: Some(push_cmd(&repo)),
        extra_conf: "autovacuum = off".into(),
        ..PgOptions::default()
    });
    pg.pgbench_init(3);
    pg.sql("VACUUM (FREEZE)");
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    let full = json(&["backup", "--source", &url, "--repo", &repo])["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    // A transaction, then the targets a second after it, then the changes.
    pg.sql("CREATE TABLE marker AS SELECT 1 AS x");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let until = pg.sql("SELECT clock_timestamp()::text");
    let until_lsn = pg.sql("SELECT pg_current_wal_lsn()::text");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 50 = 0");
    pg.switch_and_wait();
    assert!(common::summaries::strip_vm_marks(&repo_dir) > 0);
    let incr = json(&[
        "backup", "--source", &url, "--repo", &repo, "--type", "incr",
    ]);
    assert_eq!(incr["change_map"]["method"], "summaries", "{incr}");
    let incr = incr["set_id"].as_str().unwrap().to_string();

    // The incremental kept the full's map: pages it calls all-visible hold the updated
    // rows' old versions.
    let r = drill_run_fails(&repo, &["--set", &incr, "--json"]);
    let j: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    assert!(
        r.stderr.contains("the drill failed: visibility"),
        "{}",
        r.stderr
    );
    assert_eq!(j["set_id"], incr.as_str(), "{j}");
    assert_eq!(check(&j, "replay")["status"], "ok", "{j}");
    let v = check(&j, "visibility");
    assert_eq!(v["status"], "fail", "{j}");
    let d = v["detail"].as_str().unwrap();
    assert!(
        d.contains("postgres.public.pgbench_accounts: ")
            && d.contains("tuple(s) on all-visible pages not visible")
            && d.contains("an index-only scan counts"),
        "{d}"
    );
    let rec = newest_record(&repo_dir);
    assert_eq!(rec["set_id"], incr.as_str(), "{rec}");
    assert_eq!(rec["failed"], serde_json::json!(["visibility"]), "{rec}");

    // The full alone, the WAL replayed over it: the map is right; the text names the set.
    let out = ok(&["drill", "--repo", &repo, "--set", &full]);
    assert!(
        out.contains(&format!(", set {full}: PASSED")) && out.contains("ok   visibility"),
        "{out}"
    );
    assert_eq!(newest_record(&repo_dir)["set_id"], full.as_str());

    // To a time: RPO is that time minus the last transaction replayed (the marker's).
    let j = json(&["drill", "--repo", &repo, "--until", &until]);
    assert_eq!(j["set_id"], full.as_str(), "{j}");
    assert_eq!(check(&j, "visibility")["status"], "ok", "{j}");
    assert_eq!(j["rpo_to"], "target_time", "{j}");
    let reached = epoch_of(j["reached_time"].as_str().unwrap());
    let want = epoch_of(&until) - reached;
    let rpo = j["rpo_seconds"].as_f64().unwrap();
    assert!(want >= 1.0 && (rpo - want).abs() < 0.01, "{want}: {j}");

    // To an LSN: stopped before it; its time unknown, so no RPO.
    let j = json(&["drill", "--repo", &repo, "--until-lsn", &until_lsn]);
    assert_eq!(j["outcome"], "ok", "{j}");
    assert!(j["rpo_seconds"].is_null() && j["rpo_to"].is_null(), "{j}");
    let lsn = |t: &str| {
        let (hi, lo) = t.split_once('/').unwrap();
        u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
    };
    let reached = lsn(j["reached_lsn"].as_str().unwrap());
    assert!(reached <= lsn(&until_lsn), "{until_lsn}: {j}");
}

#[test]
fn a_sets_own_commands_and_libraries_never_run_in_a_drill() {
    let dir = postgres_dir("drillconf");
    let repo = s(&dir.join("repo"));
    let pg = Pg::start(true, Some(&push_cmd(&repo)));
    // Harmless on the source, a primary: it neither recovers nor restarts here.
    let (touched, cleaned) = (dir.join("touched"), dir.join("cleaned"));
    for set in [
        format!("recovery_end_command = 'touch {}'", s(&touched)),
        format!("archive_cleanup_command = 'touch {}'", s(&cleaned)),
        "shared_preload_libraries = 'nonexistent'".into(),
        "work_mem = '7MB'".into(),
    ] {
        pg.sql(&format!("ALTER SYSTEM SET {set}"));
    }
    pg.sql("CREATE TABLE t(id int PRIMARY KEY, v text)");
    insert(&pg, 1, 100);
    let url = format!("{}?pgdata={}", pg.url(), s(&pg.data));
    ok(&["backup", "--source", &url, "--repo", &repo]);
    insert(&pg, 101, 200);
    pg.switch_and_wait();
    let sql = dir.join("checks.sql");
    fs::write(
        &sql,
        "SELECT 'work_mem=' || current_setting('work_mem');\n\
         SELECT 'libraries=[' || current_setting('shared_preload_libraries') || ']';\n",
    )
    .unwrap();
    let base = scratch_base();
    let scratch = base.path().join("scratch");
    let j = json(&[
        "drill",
        "--repo",
        &repo,
        "--sql",
        &s(&sql),
        "--scratch",
        &s(&scratch),
        "--keep",
    ]);
    assert_eq!(j["outcome"], "ok", "{j}");
    assert!(!touched.exists() && !cleaned.exists(), "{j}");
    let out = check(&j, "sql")["detail"].as_str().unwrap();
    assert!(
        out.contains("work_mem=7MB") && out.contains("libraries=[]"),
        "{j}"
    );
    // The set's own files are kept aside; the server read the drill's.
    let aside = fs::read_to_string(scratch.join("set-config/postgresql.auto.conf")).unwrap();
    assert!(aside.contains("recovery_end_command"), "{aside}");
    let conf = fs::read_to_string(scratch.join("data/postgresql.conf")).unwrap();
    let auto = fs::read_to_string(scratch.join("data/postgresql.auto.conf")).unwrap();
    assert!(conf.contains("work_mem = '7MB'"), "{conf}");
    for text in [&conf, &auto] {
        assert!(
            !text.contains("touch") && !text.contains("nonexistent") && !text.contains("\nport"),
            "{text}"
        );
    }
    assert!(auto.contains("restore_command = "), "{auto}");
    fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn a_set_of_another_cluster_is_refused_naming_both() {
    let dir = postgres_dir("drillforeign");
    let repo_dir = dir.join("repo");
    let repo = s(&repo_dir);
    let (pg, _) = archiving(&repo, &[]);
    let other_dir = dir.join("other");
    let other = Pg::start(true, Some(&push_cmd(&other_dir)));
    let url = format!("{}?pgdata={}", other.url(), s(&other.data));
    let set = json(&["backup", "--source", &url, "--repo", &s(&other_dir)])["set_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Its set and record copied in: the newest chain of the repository.
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(other_dir.join("sets").join(&set))
        .arg(repo_dir.join("sets"))
        .status()
        .unwrap();
    assert!(copied.success());
    let rec = format!("catalog/{set}.json");
    fs::copy(other_dir.join(&rec), repo_dir.join(&rec)).unwrap();
    let ids = |p: &Pg| p.sql("SELECT system_identifier FROM pg_control_system()");
    let (ours, theirs) = (ids(&pg), ids(&other));
    assert_ne!(ours, theirs);

    let r = drill_run_fails(&repo, &["--json"]);
    let j: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", r.stdout, r.stderr));
    let c = check(&j, "restore");
    assert_eq!(c["status"], "fail", "{j}");
    let d = c["detail"].as_str().unwrap();
    assert!(
        d.contains(&format!("set {set} is of cluster {theirs}"))
            && d.contains(&format!("WAL is of cluster {ours}")),
        "{d}"
    );
    assert_eq!(check(&j, "replay")["status"], "skip", "{j}");
    assert!(!Path::new(j["scratch"].as_str().unwrap()).exists(), "{j}");
}

#[test]
fn a_scratch_others_can_write_or_a_link_planted_in_it_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = postgres_dir("drillscratch");
    let repo = s(&dir.join("repo"));
    let (_pg, _) = archiving(&repo, &[]);
    let mode = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();

    let open = dir.join("open");
    fs::create_dir(&open).unwrap();
    mode(&open, 0o777);
    let e = drill_fails(&repo, &["--scratch", &s(&open)]);
    assert!(e.contains("mode 0777") && e.contains("chmod 700"), "{e}");
    let theirs = dir.join("theirs");
    fs::create_dir(&theirs).unwrap();
    mode(&theirs, 0o700);
    let chown = std::process::Command::new("chown")
        .arg("nobody")
        .arg(&theirs)
        .status();
    assert!(chown.unwrap().success());
    let e = drill_fails(&repo, &["--scratch", &s(&theirs)]);
    assert!(e.contains("owned by uid 65534"), "{e}");
    let link = dir.join("link");
    let mine = dir.join("mine");
    fs::create_dir(&mine).unwrap();
    mode(&mine, 0o700);
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let e = drill_fails(&repo, &["--scratch", &s(&link)]);
    assert!(e.contains("is a symbolic link"), "{e}");

    // A link planted where the drill writes its pg_hba while the set restores.
    let victim = dir.join("victim");
    fs::write(&victim, "mine\n").unwrap();
    let base = scratch_base();
    let scratch = base.path().join("scratch");
    let planter = {
        let (scratch, victim) = (scratch.clone(), victim.clone());
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while !scratch.join("data").exists() && t.elapsed().as_secs() < 120 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            std::os::unix::fs::symlink(&victim, scratch.join("drill_hba.conf")).unwrap();
        })
    };
    let e = drill_fails(&repo, &["--scratch", &s(&scratch)]);
    planter.join().unwrap();
    assert!(e.contains("drill_hba.conf"), "{e}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "mine\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(&victim).unwrap().uid(), 0);
}
