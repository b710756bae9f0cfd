//! Keyed repositories: the marker and the WAL envelopes of a signed and an encrypted
//! repository, damaged. Read with the key, nothing but the genuine bytes is accepted,
//! and the marker's key and mode never change. Catalog records planted in them naming
//! another repository's set (same key), or a set of no repository outside them, by
//! an absolute path, a URL, a path through `..`, or copied in whole: refused by verify
//! and restore, never restored.

use super::*;

/// Files by relative path: (path, bytes).
pub(crate) type Files = Vec<(String, Vec<u8>)>;

pub(crate) struct Keyed {
    pub(crate) dir: tempfile::TempDir,
    /// Per repository: its path, its marker, its archived files.
    pub(crate) repos: Vec<(PathBuf, Vec<u8>, Files)>,
    pub(crate) segments: Vec<(String, Vec<u8>)>,
    /// Sets under the same key: in `repos[i]` (Some(i)), in another repository, or in
    /// none (None, with `bound` false).
    pub(crate) sets: Vec<KeyedSet>,
}

pub(crate) struct KeyedSet {
    pub(crate) repo: Option<usize>,
    /// Whether its manifest records a repository.
    pub(crate) bound: bool,
    pub(crate) id: String,
    /// Its one stripe, an absolute path.
    pub(crate) stripe: PathBuf,
    /// Its catalog record.
    pub(crate) record: Value,
}

pub(crate) fn fuzz_key() -> StoreOptions {
    StoreOptions {
        key: Some(pagevault::crypt::KeySource::key([7; 32], "fuzz key")),
        ..Default::default()
    }
}

pub(crate) fn keyed_corpus() -> &'static Keyed {
    static C: std::sync::OnceLock<Keyed> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<(String, Vec<u8>)> = (2..4u64)
            .map(|segno| {
                let name = pagevault::pg::segment_name_for(1, segno, 1 << 20);
                (name, synthetic_segment(1, segno))
            })
            .collect();
        let mut repos = vec![];
        for sign in [true, false] {
            let root = dir.path().join(if sign { "signed" } else { "sealed" });
            let repo = Repo::open(&s(&root), true, &fuzz_key()).unwrap();
            if sign {
                let k = fuzz_key().key.unwrap();
                repo.key_for(&k, pagevault::format::seal::KeyUse::Sign)
                    .unwrap();
            }
            for (name, b) in &segments {
                let p = dir.path().join(name);
                fs::write(&p, b).unwrap();
                wal::push(&repo, &p).unwrap();
            }
            let marker = fs::read(root.join("pagevault.repo")).unwrap();
            let archived = walkdir::WalkDir::new(root.join("wal"))
                .into_iter()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().is_file())
                .map(|e| {
                    let rel = e.path().strip_prefix(&root).unwrap().display().to_string();
                    (rel, fs::read(e.path()).unwrap())
                })
                .filter(|(rel, _)| rel.ends_with(".zst") || rel.ends_with(".sum"))
                .collect();
            repos.push((root, marker, archived));
        }
        let sets = keyed_sets(dir.path(), &repos);
        // Backups with the key may have given a marker its id.
        for (root, marker, _) in &mut repos {
            *marker = fs::read(root.join("pagevault.repo")).unwrap();
        }
        Keyed {
            dir,
            repos,
            segments,
            sets,
        }
    })
}

/// A set in each of `repos`, in two other repositories (signed, encrypted) and in
/// none (a signed and an encrypted one written with --to), all under the fuzz key.
fn keyed_sets(dir: &Path, repos: &[(PathBuf, Vec<u8>, Files)]) -> Vec<KeyedSet> {
    use std::os::unix::fs::PermissionsExt;
    let src = dir.join("src");
    small_tree(&src);
    let key = dir.join("key");
    fs::write(&key, [7; 32]).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let (key, files) = (s(&key), format!("files:{}", s(&src)));
    let record = |root: &Path, id: &str| -> Value {
        let b = fs::read(root.join(format!("catalog/{id}.json"))).unwrap();
        serde_json::from_slice(&b).unwrap()
    };
    let into = |root: &Path, repo: Option<usize>| {
        let r = s(root);
        let b = json(&[
            "backup",
            "--source",
            &files,
            "--repo",
            &r,
            "--key-file",
            &key,
        ]);
        let id = b["set_id"].as_str().unwrap().to_string();
        KeyedSet {
            repo,
            bound: true,
            stripe: root.join(format!("sets/{id}/1.pv")),
            record: record(root, &id),
            id,
        }
    };
    let mut sets: Vec<KeyedSet> = (repos.iter().enumerate())
        .map(|(i, (root, _, _))| into(root, Some(i)))
        .collect();
    for sign in [true, false] {
        let other = dir.join(if sign { "other-signed" } else { "other-sealed" });
        let o = s(&other);
        let mode = if sign { "--sign" } else { "--encrypt" };
        let mut init = vec!["init", "--repo", &o, "--key-file", &key];
        init.extend(sign.then_some("--sign"));
        ok(&init);
        sets.push(into(&other, None));
        let loose = dir.join(format!("loose-{sign}.pv"));
        let l = s(&loose);
        let b = json(&backup_args(&files, &[&l], &["--key-file", &key, mode]));
        let id = b["set_id"].as_str().unwrap().to_string();
        let mut rec = sets[0].record.clone();
        rec["set_id"] = id.clone().into();
        sets.push(KeyedSet {
            repo: None,
            bound: false,
            stripe: loose,
            record: rec,
            id,
        });
    }
    sets
}

/// Plants in `root`'s catalog, as its newest, a record of `set` (not its own) naming
/// its stripe in one of the ways a forger could; returns what to remove after.
fn plant_foreign(r: &mut Rng, root: &Path, set: &KeyedSet) -> Vec<PathBuf> {
    let mut rec = set.record.clone();
    rec["started"] = "9999-01-01T00:00:00Z".into();
    rec.as_object_mut().unwrap().remove("stripe_versions");
    let mut planted = vec![root.join(format!("catalog/{}.json", set.id))];
    let up = Path::new("..").join(set.stripe.strip_prefix(root.parent().unwrap()).unwrap());
    // A set of no repository copied inside would be taken as one from before ids.
    let ways = if set.bound { 5 } else { 4 };
    let stripe = match r.below(ways) {
        0 => s(&set.stripe),
        1 => format!("file://{}", s(&set.stripe)),
        2 => s(&up),
        3 => s(&root.join(&up)),
        _ => {
            let copy = root.join(format!("sets/{}", set.id));
            fs::create_dir_all(&copy).unwrap();
            fs::copy(&set.stripe, copy.join("1.pv")).unwrap();
            planted.push(copy);
            format!("sets/{}/1.pv", set.id)
        }
    };
    rec["stripes"] = serde_json::json!([stripe]);
    fs::write(&planted[0], serde_json::to_vec(&rec).unwrap()).unwrap();
    planted
}

/// A foreign record planted in repository `k`: verify and restore with the key refuse
/// it, naming the set; nothing is restored.
fn foreign_record(r: &mut Rng, c: &Keyed, k: usize, sandbox: &Sandbox) -> &'static str {
    let root = &c.repos[k].0;
    let foreign: Vec<&KeyedSet> = c.sets.iter().filter(|x| x.repo != Some(k)).collect();
    let set = *r.pick(&foreign);
    let planted = plant_foreign(r, root, set);
    let read = ReadOptions {
        repo: Some(s(root)),
        threads: Some(2),
        store: fuzz_key(),
        ..ReadOptions::default()
    };
    let v = verify(&VerifyOptions { read: read.clone() }, &quiet);
    let restored = restore(
        &RestoreOptions {
            read,
            to: sandbox.target(),
            stage_only: true,
            ..RestoreOptions::default()
        },
        &quiet,
    );
    let exists = sandbox.target().exists();
    sandbox.check("restore of a foreign record");
    for p in planted {
        let _ = fs::remove_file(&p);
        let _ = fs::remove_dir_all(&p);
    }
    match v {
        Ok(_) => panic!("verify took set {} named by a foreign record", set.id),
        Err(e) => assert!(format!("{e:#}").contains(&set.id), "{e:#}"),
    }
    assert!(
        restored.is_err() && !exists,
        "set {} named by a foreign record was restored",
        set.id
    );
    "foreign record refused"
}

/// One damage to a marker: its mode, key, rotation or tag line edited, dropped or
/// swapped, the marker made plain, or raw bytes.
pub(crate) fn mutate_marker(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    let text = String::from_utf8_lossy(b).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    let edited = match r.below(6) {
        0 => Some(match text.contains("signing keyed-blake3") {
            true => text.replace("signing keyed-blake3", "encryption aes-256-gcm"),
            false => text.replace("encryption aes-256-gcm", "signing keyed-blake3"),
        }),
        1 => Some("pagevault repository 1\n".to_string()),
        2 => Some(lines[..lines.len() - 1].join("\n") + "\n"),
        3 => {
            let mut l = lines.clone();
            let i = r.below(l.len());
            l.remove(i);
            Some(l.join("\n") + "\n")
        }
        4 => Some(text.replace(
            "kdf raw",
            "rotating-to 00112233445566778899aabbccddeeff raw\nkdf raw",
        )),
        _ => None,
    };
    match edited {
        Some(t) => *b = t.into_bytes(),
        None => mutate_bytes(r, b, other),
    }
}

#[test]
fn keyed() {
    let c = keyed_corpus();
    let got = c.dir.path().join("got");
    let sandbox = Sandbox::new();
    drive(6, 10, |r| {
        let k = r.below(c.repos.len());
        if r.chance(25) {
            return foreign_record(r, c, k, &sandbox);
        }
        let (root, marker, archived) = &c.repos[k];
        let genuine = Repo::open(&s(root), false, &fuzz_key())
            .unwrap()
            .protection();
        let on_marker = r.chance(50);
        let (path, good) = if on_marker {
            let mut b = marker.clone();
            mutate_marker(r, &mut b, &c.repos[1 - k].1);
            fs::write(root.join("pagevault.repo"), &b).unwrap();
            (root.join("pagevault.repo"), marker.clone())
        } else {
            let (rel, good) = &archived[r.below(archived.len())];
            let mut b = good.clone();
            let other = &archived[r.below(archived.len())].1;
            mutate_bytes(r, &mut b, other);
            fs::write(root.join(rel), &b).unwrap();
            (root.join(rel), good.clone())
        };
        let mut outcome = "refused on open";
        if let Ok(repo) = Repo::open(&s(root), false, &fuzz_key()) {
            assert_eq!(
                repo.protection(),
                genuine,
                "the marker's key or mode changed"
            );
            outcome = "opened, every fetch refused";
            for (name, want) in &c.segments {
                let _ = fs::remove_file(&got);
                if wal::fetch(&repo, name, &got).is_ok() {
                    assert_eq!(
                        &fs::read(&got).unwrap(),
                        want,
                        "a forged {name} was accepted"
                    );
                    outcome = "opened, genuine bytes fetched";
                }
                let _ = wal::summary::read(&repo, name);
            }
        }
        // Without the key: nothing may panic or hang (and nothing is authenticated).
        if let Ok(repo) = Repo::open(&s(root), false, &StoreOptions::default()) {
            for (name, _) in &c.segments {
                let _ = wal::fetch(&repo, name, &got);
            }
        }
        fs::write(&path, good).unwrap();
        outcome
    });
}
