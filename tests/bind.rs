//! Every set of a keyed repository is bound to it (issue 52, item 5): its manifest
//! records the repository's id, which the marker's tag covers. A catalog record naming
//! another repository's set (copied with its stripes, or naming them where they are)
//! is refused by restore and verify even when both repositories share one key, and so
//! is a record naming a stripe outside the repository that records no repository.

mod common;
use common::*;
use std::fs;
use std::path::Path;

/// The record of set `id` in `repo`, parsed.
fn record(repo: &Path, id: &str) -> serde_json::Value {
    let b = fs::read(repo.join("catalog").join(format!("{id}.json"))).unwrap();
    serde_json::from_slice(&b).unwrap()
}

/// Puts `rec` into `repo`'s catalog under its set id.
fn plant(repo: &Path, rec: &serde_json::Value) {
    let id = rec["set_id"].as_str().unwrap();
    let p = repo.join("catalog").join(format!("{id}.json"));
    fs::write(p, serde_json::to_vec_pretty(rec).unwrap()).unwrap();
}

/// The repository id a marker names.
fn repo_id(repo: &Path) -> String {
    let m = fs::read_to_string(repo.join("pagevault.repo")).unwrap();
    let line = m.lines().find_map(|l| l.strip_prefix("repository-id "));
    line.expect("a repository id").to_string()
}

/// Restore and verify of `repo` (its newest set, or `set`) both refuse, naming `set`
/// and `says`; nothing is restored.
fn refused(repo: &Path, key: &str, out: &Path, set: &str, says: &[&str]) {
    let (repos, outs) = (s(repo), s(out));
    for args in [
        vec![
            "restore",
            "--repo",
            &repos,
            "--to",
            &outs,
            "--key-file",
            key,
        ],
        vec!["verify", "--repo", &repos, "--key-file", key],
        vec!["verify", "--repo", &repos, "--key-file", key, "--set", set],
    ] {
        let e = fails(&args, 1);
        assert!(e.contains(&format!("set {set}")), "{args:?}: {e}");
        for w in says {
            assert!(e.contains(w), "{args:?}: no '{w}' in {e}");
        }
        assert!(!out.exists(), "{args:?}: nothing restored");
    }
}

/// Two keyed repositories, one key (`mode`: `--sign`, or none: encrypted): B's set
/// named in A's catalog is refused, however it is named.
fn foreign_sets_are_refused(sign: bool) {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key", 1, false);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let (src_a, src_b) = (dir.path().join("src_a"), dir.path().join("src_b"));
    make_tree(&src_a);
    make_tree(&src_b);
    fs::write(src_b.join("one_byte"), b"B").unwrap();
    let mode: &[&str] = if sign { &["--sign"] } else { &[] };
    for r in [&a, &b] {
        let rs = s(r);
        let mut init = vec!["init", "--repo", &rs, "--key-file", &key];
        init.extend_from_slice(mode);
        ok(&init);
    }
    let backup = |src: &Path, repo: &Path, extra: &[&str]| -> String {
        let source = format!("files:{}", s(src));
        let repos = s(repo);
        let mut args = vec!["backup", "--source", &source, "--repo", &repos];
        args.extend_from_slice(&["--key-file", &key]);
        args.extend_from_slice(extra);
        json(&args)["set_id"].as_str().unwrap().to_string()
    };
    let mine = backup(&src_a, &a, &[]);
    let theirs = backup(&src_b, &b, &[]);
    let out = dir.path().join("out");

    // B's record copied into A, its stripe named where it lies in B.
    let mut rec = record(&b, &theirs);
    rec["stripes"] = serde_json::json!([s(&b.join(format!("sets/{theirs}/1.pv")))]);
    plant(&a, &rec);
    refused(
        &a,
        &key,
        &out,
        &theirs,
        &["belongs to repository", "catalog/"],
    );
    let (id_a, id_b) = (repo_id(&a), repo_id(&b));
    assert_ne!(id_a, id_b);
    refused(&a, &key, &out, &theirs, &[&id_b]);
    // Its stripe written at another path, or reached by `..`.
    fs::copy(
        b.join(format!("sets/{theirs}/1.pv")),
        dir.path().join("x.pv"),
    )
    .unwrap();
    for st in [
        s(&dir.path().join("x.pv")),
        format!("../b/sets/{theirs}/1.pv"),
    ] {
        rec["stripes"] = serde_json::json!([st]);
        plant(&a, &rec);
        refused(&a, &key, &out, &theirs, &["belongs to repository", &id_b]);
    }
    // B's set copied into A whole, stripes and record.
    fs::create_dir_all(a.join(format!("sets/{theirs}"))).unwrap();
    fs::copy(
        b.join(format!("sets/{theirs}/1.pv")),
        a.join(format!("sets/{theirs}/1.pv")),
    )
    .unwrap();
    plant(&a, &record(&b, &theirs));
    refused(&a, &key, &out, &theirs, &["belongs to repository", &id_b]);
    fs::remove_file(a.join(format!("catalog/{theirs}.json"))).unwrap();

    // A set of no repository (written with --to, the same key) named by a record.
    let loose = dir.path().join("loose.pv");
    let source = format!("files:{}", s(&src_b));
    let mut args = backup_args(&source, &[loose.to_str().unwrap()], &["--key-file", &key]);
    args.extend_from_slice(mode);
    let loose_id = json(&args)["set_id"].as_str().unwrap().to_string();
    let mut rec = record(&a, &mine);
    rec["set_id"] = loose_id.clone().into();
    rec["started"] = "9999-01-01T00:00:00Z".into();
    rec["stripes"] = serde_json::json!([s(&loose)]);
    plant(&a, &rec);
    refused(
        &a,
        &key,
        &out,
        &loose_id,
        &["records no repository", &s(&loose), "lies outside"],
    );
    fs::remove_file(a.join(format!("catalog/{loose_id}.json"))).unwrap();

    // A's own sets read, also one written into it with a stripe elsewhere (--to).
    let to = dir.path().join("elsewhere.pv");
    let tos = s(&to);
    let split = backup(&src_a, &a, &["--stripes", "1", "--to", &tos]);
    let v = json(&[
        "verify",
        "--repo",
        &s(&a),
        "--key-file",
        &key,
        "--set",
        &split,
    ]);
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["repo_sets_checked"], 2, "{v}");
    assert_eq!(v["outside_repository"], serde_json::json!([tos]), "{v}");
    let outs = s(&out);
    ok(&[
        "restore",
        "--repo",
        &s(&a),
        "--to",
        &outs,
        "--key-file",
        &key,
        "--set",
        &mine,
    ]);
    assert_same_tree(&src_a, &out);
}

#[test]
fn a_signed_repository_refuses_another_repositorys_set() {
    foreign_sets_are_refused(true);
}

#[test]
fn an_encrypted_repository_refuses_another_repositorys_set() {
    foreign_sets_are_refused(false);
}

/// A plain repository binds nothing (whoever writes it can forge any set), but verify
/// says where a record sends its reads.
#[test]
fn a_plain_repository_says_where_a_stripe_lies() {
    let (dir, src) = tree_in_tempdir();
    let repo = dir.path().join("r");
    let to = s(&dir.path().join("elsewhere.pv"));
    let source = format!("files:{}", s(&src));
    let repos = s(&repo);
    ok(&[
        "backup",
        "--source",
        &source,
        "--repo",
        &repos,
        "--stripes",
        "1",
        "--to",
        &to,
    ]);
    let marker = fs::read_to_string(repo.join("pagevault.repo")).unwrap();
    assert!(!marker.contains("repository-id"), "{marker}");
    let v = json(&["verify", "--repo", &repos]);
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["outside_repository"], serde_json::json!([to]), "{v}");
    assert!(ok(&["verify", "--repo", &repos]).contains(&format!("stripe '{to}' lies outside")));
}
