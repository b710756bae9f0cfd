//! The catalog target: records of a repository, mutated, read by every command that
//! lists, chooses, verifies, restores or expires sets.

use super::*;

pub(crate) struct Catalog {
    pub(crate) dir: tempfile::TempDir,
    /// The repository whose sets the records name.
    pub(crate) repo: PathBuf,
    /// The sets of the records of a chain (a full, a diff, an incr).
    pub(crate) chain_sets: PathBuf,
    pub(crate) records: Vec<Vec<u8>>,
}

pub(crate) fn catalog_corpus() -> &'static Catalog {
    static C: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        small_tree(&src);
        let repo = dir.path().join("repo");
        let source = format!("files:{}", s(&src));
        for _ in 0..3 {
            ok(&[
                "backup",
                "--source",
                &source,
                "--repo",
                &s(&repo),
                "--max-transfer-size",
                "64K",
            ]);
        }
        let mut records: Vec<Vec<u8>> = fs::read_dir(repo.join("catalog"))
            .unwrap()
            .map(|e| fs::read(e.unwrap().path()).unwrap())
            .collect();
        records.sort();
        // The same sets recorded as a chain of a PostgreSQL cluster: WAL names, LSNs,
        // a timeline, bases.
        let mut chain = vec![];
        for (i, b) in records.iter().enumerate() {
            let mut v: Value = serde_json::from_slice(b).unwrap();
            let seg = format!("0000000100000000000000{:02X}", 2 + i);
            v["timeline"] = 1.into();
            v["start_wal"] = seg.clone().into();
            v["stop_wal"] = seg.into();
            v["start_lsn"] = format!("0/{}000028", 2 + i).into();
            v["stop_lsn"] = format!("0/{}000100", 2 + i).into();
            v["system_identifier"] = "7301234567890123456".into();
            if i > 0 {
                v["backup_type"] = ["diff", "incr"][i % 2].into();
                let base: Value = serde_json::from_slice(&records[i - 1]).unwrap();
                v["base_set"] = base["set_id"].clone();
            }
            chain.push(serde_json::to_vec_pretty(&v).unwrap());
        }
        records.extend(chain);
        // The chain's sets: the full as it is, the diff and the incr made of some of
        // their frames (pages frames, a sparse file missing a chunk), checksums whole.
        let chain_sets = dir.path().join("chain-sets");
        let mut r = Rng(1);
        for (i, b) in records[..records.len() / 2].iter().enumerate() {
            let v: Value = serde_json::from_slice(b).unwrap();
            let rel = v["stripes"][0].as_str().unwrap();
            let stripe = fs::read(repo.join(rel)).unwrap();
            let to = chain_sets.join(rel.strip_prefix("sets/").unwrap());
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            if i == 0 {
                fs::write(&to, stripe).unwrap();
                continue;
            }
            let mut parts = vec![parse_stripe(&stripe)];
            let p = &mut parts[0];
            p.manifest["backup_type"] = ["diff", "incr"][i % 2].into();
            let page = p.manifest["page_size"].as_u64().unwrap() as usize;
            for f in p.frames.iter_mut().filter(|f| f.kind() == 1) {
                let raw = f.raw().unwrap();
                if r.chance(50) {
                    let pages = raw.len().div_ceil(page);
                    let mut out = vec![0u8; pages.div_ceil(8)];
                    let mut body = vec![];
                    for k in (0..pages).filter(|k| k % 3 != i % 3) {
                        out[k / 8] |= 1 << (k % 8);
                        body.extend_from_slice(&raw[k * page..((k + 1) * page).min(raw.len())]);
                    }
                    out.extend(body);
                    f.set_raw(3, &out);
                }
            }
            // A sparse file: a chunk without a frame is the base's.
            let text = p.manifest["files"]
                .as_array()
                .unwrap()
                .iter()
                .position(|f| f["path"] == "text")
                .unwrap();
            p.manifest["files"][text]["sparse"] = true.into();
            let id = p.manifest["files"][text]["id"].as_u64().unwrap() as u32;
            let first = p.frames.iter().position(|f| f.file() == id).unwrap();
            p.frames.remove(first);
            fix_checksums(&mut parts);
            fs::write(&to, &build_set(&parts)[0]).unwrap();
        }
        Catalog {
            dir,
            repo,
            chain_sets,
            records,
        }
    })
}

/// One change of meaning to a record, its fields kept well formed: another set's id,
/// base, type, stripes, times, WAL names or LSNs, the damaged flag.
pub(crate) fn mutate_record(r: &mut Rng, recs: &mut [Vec<u8>], i: usize) {
    let vals: Vec<Value> = recs
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect();
    let (Ok(mut v), false) = (serde_json::from_slice::<Value>(&recs[i]), vals.is_empty()) else {
        return;
    };
    let other = vals[r.below(vals.len())].clone();
    if !v.is_object() || !other.is_object() {
        return;
    }
    match r.below(9) {
        0 => v["set_id"] = other["set_id"].clone(),
        1 => {
            v["base_set"] = if r.chance(80) {
                other["set_id"].clone()
            } else {
                Value::Null
            }
        }
        2 => v["backup_type"] = (*r.pick(&["full", "diff", "incr"])).into(),
        3 => v["damaged"] = Value::Bool(r.chance(50)),
        4 => {
            let mut st = v["stripes"].as_array().cloned().unwrap_or_default();
            let theirs = other["stripes"].as_array().cloned().unwrap_or_default();
            match r.below(3) {
                0 => st.extend(theirs),
                1 => st = theirs,
                _ => st.extend(st.clone()),
            }
            v["stripes"] = st.into();
        }
        5 => {
            let k = *r.pick(&["started", "finished"]);
            v[k] = (*r.pick(&[
                "2001-01-01T00:00:00+00:00",
                "2999-01-01T00:00:00+00:00",
                "",
                "yesterday",
            ]))
            .into();
        }
        6 => {
            let k = *r.pick(&["start_wal", "stop_wal"]);
            v[k] = (*r.pick(&[
                "000000010000000000000001",
                "000000020000000000000009",
                "FFFFFFFFFFFFFFFFFFFFFFFF",
            ]))
            .into();
        }
        7 => {
            let k = *r.pick(&["start_lsn", "stop_lsn"]);
            v[k] = (*r.pick(&["0/0", "FFFFFFFF/FFFFFFFF", "1/2", "0/9000000"])).into();
        }
        _ => v["timeline"] = (*r.pick(&[1u64, 2, u32::MAX as u64])).into(),
    }
    recs[i] = serde_json::to_vec(&v).unwrap();
}

/// A scratch repository: `records` as its catalog, and the corpus's sets (those of the
/// chain with `chain`).
pub(crate) fn scratch_repo(c: &Catalog, at: &Path, records: &[Vec<u8>], chain: bool) {
    let _ = fs::remove_dir_all(at);
    fs::create_dir_all(at.join("catalog")).unwrap();
    fs::create_dir_all(at.join("wal")).unwrap();
    fs::write(at.join("pagevault.repo"), b"pagevault repository 1\n").unwrap();
    // Each set linked: what a merge writes stays in the scratch repository.
    let sets = if chain {
        c.chain_sets.clone()
    } else {
        c.repo.join("sets")
    };
    fs::create_dir_all(at.join("sets")).unwrap();
    for e in fs::read_dir(&sets).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), at.join("sets").join(e.file_name())).unwrap();
    }
    for (i, r) in records.iter().enumerate() {
        fs::write(at.join(format!("catalog/{i:02}.json")), r).unwrap();
    }
}

#[test]
fn catalog() {
    let c = catalog_corpus();
    let work = c.dir.path().join("scratch");
    let sandbox = Sandbox::new();
    drive(2, 15, |r| {
        // Some records of one kind (files, or the PostgreSQL chain), one of them damaged.
        let half = c.records.len() / 2;
        let base = if r.chance(50) { 0 } else { half };
        let mut recs: Vec<Vec<u8>> = c.records[base..base + half].to_vec();
        recs.truncate(1 + r.below(half));
        let i = r.below(recs.len());
        for _ in 0..1 + r.below(3) {
            match serde_json::from_slice::<Value>(&recs[i]) {
                Ok(_) if r.chance(60) => mutate_record(r, &mut recs, i),
                Ok(mut v) if r.chance(70) => {
                    mutate_json(r, &mut v);
                    recs[i] = serde_json::to_vec(&v).unwrap();
                }
                _ => {
                    let other = c.records[r.below(c.records.len())].clone();
                    mutate_bytes(r, &mut recs[i], &other);
                }
            }
        }
        let _ = repo::parse_record(&recs[i]);
        scratch_repo(c, &work, &recs, base > 0);
        let spec = s(&work);
        let Ok(repo) = Repo::open(&spec, false, &StoreOptions::default()) else {
            return "no repository";
        };
        let Ok(cat) = repo.catalog() else {
            return "catalog refused";
        };
        let _ = chain::select(&cat, &chain::Selector::default());
        for e in &cat {
            let prefix: String = e.set_id.chars().take(r.below(33)).collect();
            let _ = chain::find(&cat, &prefix);
            let sel = chain::Selector {
                set: Some(e.set_id.clone()),
                ..chain::Selector::default()
            };
            let _ = chain::select(&cat, &sel);
        }
        let rules = pagevault::ops::expire::Rules {
            keep_full: r.below(3) as u32,
            keep_within: Some(r.below(4) as u64 * 86400),
            keep_daily: r.below(3) as u32,
            keep_weekly: r.below(2) as u32,
            keep_monthly: r.below(2) as u32,
        };
        let _ = pagevault::ops::expire::plan(&cat, &rules, chrono::Utc::now());
        let _ = pagevault::ops::expire::expire(&pagevault::ops::expire::ExpireOptions {
            repo: spec.clone(),
            rules,
            dry_run: true,
            store: StoreOptions::default(),
        });
        let read = ReadOptions {
            repo: Some(spec.clone()),
            threads: Some(2),
            ..ReadOptions::default()
        };
        if r.chance(50) {
            match verify(&VerifyOptions { read: read.clone() }, &quiet) {
                Ok(_) => "verified",
                Err(_) => "refused by verify",
            }
        } else {
            let ro = RestoreOptions {
                read,
                to: sandbox.target(),
                stage_only: true,
                ..RestoreOptions::default()
            };
            let restored = restore(&ro, &quiet).is_ok();
            sandbox.check("restore of a repository");
            if restored {
                "restored"
            } else {
                "refused by restore"
            }
        }
    });
}
