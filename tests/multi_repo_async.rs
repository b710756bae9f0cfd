//! `archive-push --async` into a stanza's directory and MinIO repositories (issue 54): a
//! real PostgreSQL archives through the spool into both; with MinIO down the directory
//! still gets every segment while the spool keeps what MinIO lacks, and `status` and
//! PostgreSQL's log name MinIO and its lag; MinIO back, the spool drains and both hold
//! every segment.

mod common;

use common::pg::{init_for_postgres, postgres_dir, Pg};
use common::stores::{shared, Minio};
use common::*;
use pagevault::device::object::StoreOptions;
use pagevault::repo::{wal, Repo};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The WAL files waiting in the spool, by name.
fn spooled(spool: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(spool.join("ready")).map_or(vec![], |d| {
        d.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| pagevault::pg::parse_name(n).is_some())
            .collect()
    });
    names.sort();
    names
}

fn pusher_state(spool: &Path) -> Value {
    serde_json::from_slice(&fs::read(spool.join("pusher.json")).unwrap_or_default())
        .unwrap_or(Value::Null)
}

/// Waits up to `secs` for `done`, showing the pusher's log when it does not come.
fn wait_for(spool: &Path, secs: u64, what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{what}: not after {secs} s; spooled {:?}; pusher log:\n{}",
            spooled(spool),
            fs::read_to_string(spool.join("pusher.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Switches to a new segment and waits until PostgreSQL archived the one it left.
fn switch(pg: &Pg) -> String {
    pg.sql("SELECT pg_logical_emit_message(false, 'pagevault-test', 'switch')");
    let seg = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
    pg.sql("SELECT pg_switch_wal()");
    pg.wait_archived(&seg);
    seg
}

/// Kills the spool's pusher when the test ends: it retries a dead store for ever.
struct StopPusher(PathBuf);

impl Drop for StopPusher {
    fn drop(&mut self) {
        let Some(pid) = pusher_state(&self.0)["pid"].as_u64() else {
            return;
        };
        // Only while that pid is still this spool's pusher (pids are reused).
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("--pusher") {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

#[test]
fn async_archiving_keeps_what_the_stopped_store_lacks_and_the_directory_gets_every_segment() {
    let _ = shared(); // the credentials in the environment
    let mut m = Minio::start();
    m.admin(&["mkbucket", "pvma"]);
    let ep = m.endpoint();
    let s3 = "s3://pvma/r";
    ok(&["init", "--repo", s3, "--s3-endpoint", &ep]);
    let dir = postgres_dir("asyncmany");
    let local = dir.join("local");
    init_for_postgres(&local);
    let local = s(&local);
    let spool = dir.join("spool");
    let _stop = StopPusher(spool.clone());
    let cfg = dir.join("pagevault.toml");
    fs::write(
        &cfg,
        format!(
            "s3-endpoint = \"{ep}\"\n\
             [[stanza.main.repo]]\nname = \"local\"\npath = \"{local}\"\n\
             [[stanza.main.repo]]\nname = \"offsite\"\npath = \"{s3}\"\n\
             [stanza.main.archive-push]\nasync = true\nspool = \"{}\"\n",
            s(&spool)
        ),
    )
    .unwrap();
    let cfg = s(&cfg);
    // A push into the dead store gives up after 1 s (then its worker backs off).
    std::env::set_var("PAGEVAULT_RETRY_SECONDS", "1");
    let push = format!("{} archive-push --config {cfg} --stanza main %p", bin());
    let pg = Pg::start(true, Some(&push));
    let opts = StoreOptions {
        s3_endpoint: Some(ep.clone()),
        key: None,
    };
    let holds = |spec: &str, name: &str| {
        Repo::open(spec, false, &opts).is_ok_and(|r| wal::has_segment(&r, name))
    };

    // Every segment up to `last`, from the first: PostgreSQL archives them in order.
    let upto = |last: &str| -> Vec<String> {
        let (tli, n) = pagevault::pg::parse_segment_name(last, 16 << 20).unwrap();
        (1..=n)
            .map(|k| pagevault::pg::segment_name_for(tli, k, 16 << 20))
            .collect()
    };

    // Both get each segment, and the spool lets it go.
    pg.sql("CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
    switch(&pg);
    let before = upto(&switch(&pg));
    wait_for(&spool, 60, "the spool empty", || spooled(&spool).is_empty());
    assert!(before.len() >= 2, "{before:?}");
    for n in &before {
        assert!(holds(&local, n) && holds(s3, n), "{n}");
    }

    // MinIO stops: PostgreSQL archives on into the spool, the directory gets every
    // segment, the spool keeps them for MinIO.
    m.kill();
    let down: Vec<String> = (0..3).map(|_| switch(&pg)).collect();
    assert_eq!(upto(&down[2]).len(), before.len() + 3);
    wait_for(&spool, 60, "the directory holds them", || {
        down.iter().all(|n| holds(&local, n))
    });
    wait_for(&spool, 60, "the pusher says MinIO fails", || {
        pusher_state(&spool)["repos"][1]["failing_since"].is_u64()
    });
    wait_for(&spool, 30, "the pusher counts what MinIO lacks", || {
        pusher_state(&spool)["repos"][1]["lacks"]["files"].as_u64() >= Some(3)
    });
    let kept = spooled(&spool);
    assert!(down.iter().all(|n| kept.contains(n)), "{kept:?} {down:?}");
    let st = pusher_state(&spool);
    assert!(st["repos"][0]["failing_since"].is_null(), "{st}");
    assert_eq!(st["repos"][1]["repo"], s3, "{st}");
    // PostgreSQL's log names the store and what it lacks.
    switch(&pg);
    let log = pg.log();
    assert!(
        log.contains(&format!(
            "WARNING: the pusher has failed to archive into {s3} for"
        )) && log.contains(&format!(
            "it lacks 4 files (64 MiB, the oldest {})",
            down[0]
        )),
        "{log}"
    );
    // status names MinIO as lagging by what the spool keeps for it.
    let r = run(&["status", "--config", &cfg, "--stanza", "main", "--json"]);
    let j: Value = serde_json::from_str(&r.stdout).expect(&r.stderr);
    let lag = j["wal_lagging"].as_array().unwrap();
    assert_eq!(lag.len(), 1, "{j}");
    assert_eq!(lag[0]["repo"], s3, "{j}");
    let why = lag[0]["why"].as_str().unwrap();
    assert!(
        why.contains("files") && why.contains(&format!("the oldest {}", down[0])),
        "{why}"
    );
    assert_eq!(j["repositories"][0]["spool"]["lacks"]["files"], 0, "{j}");
    let lacks = j["repositories"][1]["spool"]["lacks"]["files"].as_u64();
    assert!(lacks >= Some(4), "{j}");

    // Prometheus: what the spool keeps for each, and which lags.
    let r = run(&[
        "status",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--prometheus",
    ]);
    let prom = r.stdout;
    for line in [
        format!("pagevault_spool_files{{repo=\"{local}\"}} 0"),
        format!("pagevault_wal_lagging{{repo=\"{local}\"}} 0"),
        format!("pagevault_repository_up{{repo=\"{s3}\"}} 0"),
        format!("pagevault_wal_lagging{{repo=\"{s3}\"}} 1"),
    ] {
        assert!(
            prom.lines().any(|l| l == line),
            "{line}: {prom}\n{}",
            r.stderr
        );
    }
    let kept_for_s3 = format!("pagevault_spool_files{{repo=\"{s3}\"}} ");
    let kept_for_s3: Option<u64> =
        (prom.lines()).find_map(|l| l.strip_prefix(&kept_for_s3)?.parse().ok());
    assert!(kept_for_s3 >= Some(4), "{prom}");

    // MinIO back: the spool drains, both hold every segment.
    m.restart();
    let all = upto(&switch(&pg));
    wait_for(&spool, 90, "the spool empty again", || {
        spooled(&spool).is_empty()
    });
    for n in &all {
        assert!(holds(&local, n) && holds(s3, n), "{n}");
    }
    let st = pusher_state(&spool);
    assert!(st["last_error"].is_null(), "{st}");
    let marks = fs::read_dir(spool.join("ready"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".in-"))
        .count();
    assert_eq!(marks, 0);
}
