//! Several repositories per stanza (issue 54, 3-2-1): a directory and MinIO named in one
//! stanza's repo list; archive-push stores a real PostgreSQL segment into both, fails
//! naming an unreachable one while the other still gets it; archive-get passes over a
//! damaged copy in the first and serves the second's, saying so; status names the
//! repository whose WAL lags; a restore takes the chain from the first repository holding
//! it; a list naming one repository twice is refused, by the async spool too.

mod common;
use common::pg::Pg;
use common::stores::{shared, unique};
use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `n` finished WAL segments of a fresh PostgreSQL 15, copied out of its pg_wal: their
/// names and paths under `dir`.
fn segments(dir: &Path, n: usize) -> Vec<(String, PathBuf)> {
    let pg = Pg::start(false, None);
    (0..n)
        .map(|_| {
            pg.sql("SELECT pg_logical_emit_message(false, 'pagevault-test', 'multi')");
            let name = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
            pg.sql("SELECT pg_switch_wal()");
            let to = dir.join(&name);
            fs::copy(pg.data.join("pg_wal").join(&name), &to).unwrap();
            (name, to)
        })
        .collect()
}

fn segment(dir: &Path) -> (String, PathBuf) {
    segments(dir, 1).remove(0)
}

fn config(dir: &Path, text: &str) -> String {
    let p = dir.join("pagevault.toml");
    fs::write(&p, text).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    s(&p)
}

/// Fetches `name` from `repo` alone and returns its bytes.
fn get_from(repo: &str, name: &str, dir: &Path) -> Vec<u8> {
    let out = dir.join(format!("got-{}", unique("one")));
    ok(&["archive-get", "--repo", repo, name, &s(&out)]);
    fs::read(out).unwrap()
}

#[test]
fn a_segment_goes_into_the_directory_and_minio_repositories_of_a_stanza() {
    let st = shared();
    let d = tempfile::tempdir().unwrap();
    let dir = s(&d.path().join("local"));
    let s3 = format!("s3://pvtest/{}", unique("multi"));
    ok(&["init", "--repo", &dir]);
    ok(&["init", "--repo", &s3]);
    let cfg = config(
        d.path(),
        &format!(
            "s3-endpoint = \"{}\"\n[stanza.main.backup]\nsource = \"files:/nonexistent\"\n\
             [[stanza.main.repo]]\nname = \"local\"\npath = \"{dir}\"\n\
             [[stanza.main.repo]]\nname = \"offsite\"\npath = \"{s3}\"\ncompress = \"zstd:5\"\n",
            st.minio.endpoint()
        ),
    );
    let mut two = segments(d.path(), 2);
    let (next, next_seg) = two.pop().unwrap();
    let (name, seg) = two.pop().unwrap();
    let want = fs::read(&seg).unwrap();
    let j: Value = serde_json::from_str(&ok(&[
        "archive-push",
        "--config",
        &cfg,
        "--stanza",
        "main",
        &s(&seg),
        "--json",
    ]))
    .unwrap();
    assert_eq!(j["name"], name.as_str(), "{j}");
    let each = j["repositories"].as_array().unwrap();
    let repos: Vec<&str> = each.iter().map(|r| r["repo"].as_str().unwrap()).collect();
    assert_eq!(repos, [dir.as_str(), s3.as_str()], "{j}");
    assert!(each.iter().all(|r| r["outcome"] == "archived"), "{j}");
    // Each repository alone holds the very bytes.
    assert_eq!(get_from(&dir, &name, d.path()), want);
    assert_eq!(get_from(&s3, &name, d.path()), want);
    // Pushed again: both find it identical.
    let j: Value = serde_json::from_str(&ok(&[
        "archive-push",
        "--config",
        &cfg,
        "--stanza",
        "main",
        &s(&seg),
        "--json",
    ]))
    .unwrap();
    let again = j["repositories"].as_array().unwrap();
    assert!(
        again.iter().all(|r| r["outcome"] == "already_archived"),
        "{j}"
    );

    // status names both; once the directory alone holds the next segment, MinIO lags.
    let status = |cfg: &str| -> Value {
        serde_json::from_str(&ok(&[
            "status", "--config", cfg, "--stanza", "main", "--json",
        ]))
        .unwrap()
    };
    let j = status(&cfg);
    assert_eq!(j["repositories"].as_array().unwrap().len(), 2, "{j}");
    assert_eq!(j["newest_wal"], name.as_str(), "{j}");
    assert_eq!(j["wal_lagging"].as_array().unwrap().len(), 0, "{j}");
    ok(&["archive-push", "--repo", &dir, &s(&next_seg)]);
    let j = status(&cfg);
    assert_eq!(j["newest_wal"], next.as_str(), "{j}");
    assert_eq!(j["newest_wal_repo"], dir.as_str(), "{j}");
    let lag = j["wal_lagging"].as_array().unwrap();
    assert_eq!(lag.len(), 1, "{j}");
    assert_eq!(lag[0]["repo"], s3.as_str(), "{j}");
    assert_eq!(lag[0]["newest_wal"], name.as_str(), "{j}");
    let text = ok(&["status", "--config", &cfg, "--stanza", "main"]);
    assert!(
        text.contains(&format!(
            "WAL lags          {s3}: its newest segment is {name}; {dir} holds up to {next}"
        )),
        "{text}"
    );
    // MinIO first: it lacks the newest segment, is passed over, and the directory serves.
    let d2 = tempfile::tempdir().unwrap();
    let cfg2 = config(
        d2.path(),
        &format!(
            "s3-endpoint = \"{}\"\n[stanza.main]\nrepo = [\"{s3}\", \"{dir}\"]\n",
            st.minio.endpoint()
        ),
    );
    let out = d.path().join("next");
    let r = run(&[
        "archive-get",
        "--config",
        &cfg2,
        "--stanza",
        "main",
        &next,
        &s(&out),
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(fs::read(&out).unwrap(), fs::read(&next_seg).unwrap());
    assert!(
        r.stderr
            .contains(&format!("{next}: passed over {s3}: it does not hold it"))
            && r.stderr.contains(&format!("{next} served by {dir}")),
        "{}",
        r.stderr
    );

    // --show-config names both; a backup writes to the first, or the one --to-repo picks,
    // with that repository's own settings.
    let show = |extra: &[&str]| -> Value {
        let mut a = vec![
            "backup",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--show-config",
            "--json",
        ];
        a.extend_from_slice(extra);
        serde_json::from_str(&ok(&a)).unwrap()
    };
    let setting = |v: &Value, o: &str| {
        let s = v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["option"] == o)
            .unwrap();
        (
            s["values"][0].as_str().unwrap_or("").to_string(),
            s["origin"].as_str().unwrap().to_string(),
        )
    };
    let first = show(&[]);
    assert_eq!(setting(&first, "repo").0, dir, "{first}");
    assert_eq!(setting(&first, "compress").1, "default", "{first}");
    let used: Vec<bool> = (first["repositories"].as_array().unwrap().iter())
        .map(|r| r["used"].as_bool().unwrap())
        .collect();
    assert_eq!(used, [true, false], "{first}");
    for pick in ["offsite", "2"] {
        let second = show(&["--to-repo", pick]);
        assert_eq!(setting(&second, "repo").0, s3, "{second}");
        assert_eq!(
            setting(&second, "compress"),
            ("zstd:5".to_string(), "file:main.repo.offsite".to_string()),
            "{second}"
        );
    }
    let text = ok(&[
        "archive-push",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--show-config",
        "x",
    ]);
    assert!(text.contains(&dir) && text.contains(&s3), "{text}");
    let e = fails(
        &[
            "backup",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--to-repo",
            "3",
        ],
        2,
    );
    assert!(
        e.contains("no such repository") && e.contains("'offsite' (2)"),
        "{e}"
    );
}

#[test]
fn an_unreachable_repository_fails_the_push_by_name_and_the_others_still_get_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = s(&d.path().join("local"));
    ok(&["init", "--repo", &dir]);
    // An S3 endpoint nobody listens on.
    let s3 = format!("s3://pvtest/{}", unique("down"));
    let cfg = config(
        d.path(),
        &format!(
            "[stanza.main]\nrepo = [\"{dir}\", \"{s3}\"]\ns3-endpoint = \"http://127.0.0.1:{}\"\n",
            free_port()
        ),
    );
    let (name, seg) = segment(d.path());
    let r = run_env(
        &[
            "archive-push",
            "--config",
            &cfg,
            "--stanza",
            "main",
            &s(&seg),
        ],
        &[
            ("PAGEVAULT_RETRY_SECONDS", "1"),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!("make {s3} reachable"))
            && r.stderr.contains(&format!("it is archived in {dir}")),
        "{}",
        r.stderr
    );
    assert_eq!(get_from(&dir, &name, d.path()), fs::read(&seg).unwrap());
    // Fetched with the unreachable store first: passed over, named, the directory serves.
    let d2 = tempfile::tempdir().unwrap();
    let cfg2 = config(
        d2.path(),
        &format!(
            "[stanza.main]\nrepo = [\"{s3}\", \"{dir}\"]\ns3-endpoint = \"http://127.0.0.1:{}\"\n",
            free_port()
        ),
    );
    let out = d.path().join("got");
    let r = run_env(
        &[
            "archive-get",
            "--config",
            &cfg2,
            "--stanza",
            "main",
            &name,
            &s(&out),
        ],
        &[
            ("PAGEVAULT_RETRY_SECONDS", "1"),
            ("AWS_ACCESS_KEY_ID", "x"),
            ("AWS_SECRET_ACCESS_KEY", "y"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(fs::read(&out).unwrap(), fs::read(&seg).unwrap());
    assert!(
        r.stderr.contains(&format!("{name}: passed over {s3}"))
            && !r.stderr.contains("does not hold it")
            && r.stderr.contains(&format!("{name} served by {dir}")),
        "{}",
        r.stderr
    );
}

/// The archived copy of `name` in a directory repository.
fn archived(repo: &str, name: &str) -> PathBuf {
    Path::new(repo).join(format!("wal/{}/{name}.zst", &name[..8]))
}

#[test]
fn a_damaged_copy_in_the_first_repository_is_passed_over_for_the_second() {
    let st = shared();
    let d = tempfile::tempdir().unwrap();
    let dir = s(&d.path().join("local"));
    let s3 = format!("s3://pvtest/{}", unique("fallback"));
    ok(&["init", "--repo", &dir]);
    ok(&["init", "--repo", &s3]);
    let cfg = config(
        d.path(),
        &format!(
            "[stanza.main]\nrepo = [\"{dir}\", \"{s3}\"]\ns3-endpoint = \"{}\"\n",
            st.minio.endpoint()
        ),
    );
    let (name, seg) = segment(d.path());
    let want = fs::read(&seg).unwrap();
    ok(&[
        "archive-push",
        "--config",
        &cfg,
        "--stanza",
        "main",
        &s(&seg),
    ]);
    // Bytes flipped in the middle of the first repository's copy.
    let copy = archived(&dir, &name);
    let mut b = fs::read(&copy).unwrap();
    let mid = b.len() / 2;
    for x in &mut b[mid..mid + 8] {
        *x ^= 0x5a;
    }
    fs::write(&copy, &b).unwrap();
    let alone = fails(
        &[
            "archive-get",
            "--repo",
            &dir,
            &name,
            &s(&d.path().join("no")),
        ],
        126,
    );
    assert!(alone.contains("damaged"), "{alone}");

    let out = d.path().join("restored");
    let r = run(&[
        "archive-get",
        "--config",
        &cfg,
        "--stanza",
        "main",
        &name,
        &s(&out),
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let got = fs::read(&out).unwrap();
    assert_eq!(blake3::hash(&got), blake3::hash(&want));
    assert!(
        r.stderr.contains(&format!("passed over {dir}"))
            && r.stderr.contains("damaged")
            && r.stderr.contains(&format!("{name} served by {s3}")),
        "{}",
        r.stderr
    );
    // Held by neither: the end of the archive (1).
    let next = format!(
        "{}{:08X}",
        &name[..16],
        u32::from_str_radix(&name[16..], 16).unwrap() + 7
    );
    let e = fails(
        &[
            "archive-get",
            "--config",
            &cfg,
            "--stanza",
            "main",
            &next,
            &s(&out),
        ],
        1,
    );
    assert!(e.contains("none of the repositories"), "{e}");
}

#[test]
fn a_list_naming_one_repository_twice_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = s(&d.path().join("local"));
    ok(&["init", "--repo", &dir]);
    let cfg = config(
        d.path(),
        &format!("[stanza.main]\nrepo = [\"{dir}\", \"{dir}/./\"]\n"),
    );
    let e = fails(
        &["archive-push", "--config", &cfg, "--stanza", "main", "x"],
        2,
    );
    assert!(e.contains("same repository") && e.contains("'repo'"), "{e}");
    let h = d.path().join("00000002.history");
    fs::write(&h, "1\t0/5000100\tno recovery target specified\n").unwrap();
    let e = fails(
        &[
            "archive-push",
            "--repo",
            &dir,
            "--repo",
            &format!("{dir}//"),
            &s(&h),
        ],
        1,
    );
    assert!(e.contains("same repository"), "{e}");
    let e = fails(
        &[
            "archive-get",
            "--repo",
            &dir,
            "--repo",
            &format!("{dir}/"),
            "00000002.history",
            &s(&d.path().join("o")),
        ],
        126,
    );
    assert!(e.contains("same repository"), "{e}");
    // Nor does the async spool, before it takes the file.
    let spool = d.path().join("spool");
    let e = fails(
        &[
            "archive-push",
            "--repo",
            &dir,
            "--repo",
            &format!("{dir}//"),
            "--async",
            "--spool",
            &s(&spool),
            &s(&h),
        ],
        1,
    );
    assert!(e.contains("same repository"), "{e}");
    assert!(!spool.join("ready/00000002.history").exists());
    let other = s(&d.path().join("other"));
    ok(&["init", "--repo", &other]);
    // --to-repo picks among the stanza's repositories, never beside --repo.
    let cfg = config(
        d.path(),
        &format!("[stanza.main]\nrepo = [\"{dir}\", \"{other}\"]\n"),
    );
    let e = fails(
        &[
            "backup",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--source",
            "files:/x",
            "--to-repo",
            "2",
            "--repo",
            &dir,
        ],
        2,
    );
    assert!(e.contains("give one of them"), "{e}");
    let to = s(&d.path().join("set.pv"));
    let e = fails(
        &[
            "backup",
            "--config",
            &cfg,
            "--stanza",
            "main",
            "--source",
            "files:/x",
            "--to-repo",
            "2",
            "--to",
            &to,
        ],
        2,
    );
    assert!(e.contains("--to names devices"), "{e}");
}

#[test]
fn a_restore_takes_the_set_from_the_first_repository_that_holds_it() {
    let (d, src) = tree_in_tempdir();
    let (empty, full) = (
        s(&d.path().join("empty-repo")),
        s(&d.path().join("full-repo")),
    );
    ok(&["init", "--repo", &empty]);
    ok(&["init", "--repo", &full]);
    let cfg = config(
        d.path(),
        &format!(
            "[stanza.main]\nrepo = [\"{empty}\", \"{full}\"]\n[stanza.main.backup]\nsource = \"files:{}\"\n",
            s(&src)
        ),
    );
    // The second repository, by its place.
    let set = json(&[
        "backup",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--to-repo",
        "2",
    ]);
    let id = set["set_id"].as_str().unwrap().to_string();
    assert_eq!(history_ids(&full), std::slice::from_ref(&id));
    assert!(history_ids(&empty).is_empty());
    let to = d.path().join("restored");
    let j = json(&[
        "restore",
        "--config",
        &cfg,
        "--stanza",
        "main",
        "--to",
        &s(&to),
    ]);
    assert_eq!(j["set_id"], id.as_str(), "{j}");
    let warned: Vec<&str> = (j["warnings"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .collect();
    assert!(
        warned
            .iter()
            .any(|w| w.starts_with(&format!("passed over {empty}: "))),
        "{j}"
    );
    assert_same_tree(&src, &to);
    // Neither holds a set: the error names both.
    let e = fails(
        &[
            "restore",
            "--repo",
            &empty,
            "--repo",
            &full,
            "--set",
            "ffffffff",
            "--to",
            &s(&d.path().join("no")),
        ],
        1,
    );
    assert!(
        e.contains(&format!("passed over {empty}")) && e.contains(&format!("and {full}")),
        "{e}"
    );
}
