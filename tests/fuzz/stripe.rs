//! The stripe target: sets of files and SQLite sources, mutated, read as verify and
//! a restore read them.

use super::*;

pub(crate) struct Corpus {
    pub(crate) _dir: tempfile::TempDir,
    /// Each set: its stripes' bytes.
    pub(crate) sets: Vec<Vec<Vec<u8>>>,
    /// Each set taken apart.
    pub(crate) parts: Vec<Vec<Parts>>,
}

/// A small tree: empty, tiny, random, compressible and all-zero files (frames of every
/// kind and codec outcome), nesting, an empty directory and a link.
pub(crate) fn small_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::create_dir_all(root.join("emptydir")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("tiny"), b"seventeen bytes!!").unwrap();
    fs::write(root.join("rand"), bytes(7, 150_000, false)).unwrap();
    fs::write(root.join("text"), bytes(8, 300_000, true)).unwrap();
    fs::write(root.join("zeros"), vec![0u8; 200_000]).unwrap();
    fs::write(root.join("d/e/f"), bytes(9, 70_000, false)).unwrap();
    std::os::unix::fs::symlink("rand", root.join("ln")).unwrap();
}

pub(crate) fn stripe_corpus() -> &'static Corpus {
    static C: std::sync::OnceLock<Corpus> = std::sync::OnceLock::new();
    C.get_or_init(make_stripe_corpus)
}

pub(crate) fn make_stripe_corpus() -> Corpus {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    small_tree(&src);
    let db = dir.path().join("db.sqlite");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); \
             WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 2000) \
             INSERT INTO t(b) SELECT 'row ' || i || substr(hex(randomblob(60)), 1, i % 100) FROM g;",
        )
        .unwrap();
    }
    let files = format!("files:{}", s(&src));
    let sqlite = format!("sqlite:{}", s(&db));
    let mut sets = vec![];
    for (i, (source, stripes, extra)) in [
        (&files, 1, &["--compress", "none"][..]),
        (&files, 2, &["--compress", "zstd"]),
        (&files, 1, &["--compress", "lz4", "--block-size", "512"]),
        (&sqlite, 1, &["--compress", "lz4"]),
    ]
    .into_iter()
    .enumerate()
    {
        let paths: Vec<String> = (0..stripes)
            .map(|k| s(&dir.path().join(format!("set{i}-{k}.pv"))))
            .collect();
        let to: Vec<&str> = paths.iter().map(String::as_str).collect();
        let mut extra = extra.to_vec();
        extra.extend(["--max-transfer-size", "64K"]);
        ok(&backup_args(source, &to, &extra));
        sets.push(paths.iter().map(|p| fs::read(p).unwrap()).collect());
    }
    let parts = sets
        .iter()
        .map(|set: &Vec<Vec<u8>>| set.iter().map(|b| parse_stripe(b)).collect())
        .collect();
    Corpus {
        _dir: dir,
        sets,
        parts,
    }
}

/// One structural damage to one stripe: a field of the media header, the tail or a
/// frame header rewritten with its CRC made valid, a frame's payload damaged with its
/// CRC made valid, or raw bytes anywhere.
pub(crate) fn mutate_stripe(r: &mut Rng, b: &mut Vec<u8>, other: &[u8]) {
    if b.len() < 1024 {
        return mutate_bytes(r, b, other);
    }
    let n = b.len();
    match r.below(6) {
        0 => {
            let (at, w) = *r.pick(&[
                (8, 2),
                (10, 2),
                (12, 4),
                (16, 8),
                (32, 4),
                (36, 4),
                (40, 1),
                (41, 1),
                (44, 4),
                (48, 4),
                (52, 8),
            ]);
            let v = r.interesting(uint_at(b, at, w));
            b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            fix_header(b);
        }
        1 => {
            let at = n - 64 + *r.pick(&[8, 16, 24, 32, 40, 48]);
            let v = r.interesting(u64_at(b, at));
            put_u64(b, at, v);
            fix_tail(b);
        }
        2 | 3 => {
            let frames = frames_of(b);
            if frames.is_empty() {
                return mutate_bytes(r, b, other);
            }
            let f = *r.pick(&frames);
            if r.chance(50) {
                let (at, w) = *r.pick(&[
                    (4, 1),
                    (5, 1),
                    (8, 4),
                    (12, 4),
                    (16, 8),
                    (24, 4),
                    (28, 4),
                    (64, 8),
                ]);
                let v = r.interesting(uint_at(b, f + at, w));
                b[f + at..f + at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            } else {
                // Payload bytes, the stored CRC made valid again.
                let stored = u32_at(b, f + 12) as usize;
                if stored > 0 && f + 80 + stored <= n {
                    for _ in 0..1 + r.below(4) {
                        let i = f + 80 + r.below(stored);
                        b[i] ^= 1 << r.below(8);
                    }
                    let c = crc32c::crc32c(&b[f + 80..f + 80 + stored]);
                    put_u32(b, f + 28, c);
                }
            }
            fix_frame(b, f);
        }
        _ => mutate_bytes(r, b, other),
    }
}

/// One change of meaning to a set taken apart, its bytes kept well formed: a frame's
/// content, kind (pages with a bitmap, zero), file or offset changed with a valid
/// digest; frames dropped, repeated or moved between stripes; the manifest's type,
/// sizes, kinds, sparse flags, modes and times changed. Checksums are made whole again
/// most of the time, so that a restore gets to write.
pub(crate) fn mutate_parts(r: &mut Rng, parts: &mut [Parts]) {
    let page = parts[0].manifest["page_size"]
        .as_u64()
        .unwrap_or(8192)
        .max(1) as usize;
    let t = parts[0].manifest["transfer_size"]
        .as_u64()
        .unwrap_or(1 << 16)
        .max(1);
    let files: Vec<(u64, u64)> = parts[0].manifest["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| Some((f["id"].as_u64()?, f["size"].as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    for _ in 0..1 + r.below(3) {
        let si = r.below(parts.len());
        let n = parts[si].frames.len();
        match r.below(9) {
            0..=2 if n > 0 => {
                let f = &mut parts[si].frames[r.below(n)];
                let Some(mut raw) = f.raw() else { continue };
                match r.below(4) {
                    // Content changed.
                    0 if !raw.is_empty() => {
                        for _ in 0..1 + r.below(8) {
                            let i = r.below(raw.len());
                            raw[i] = r.next() as u8;
                        }
                        f.set_raw(1, &raw);
                    }
                    // Some pages of the chunk: bitmap, then those pages.
                    1 => {
                        let pages = raw.len().div_ceil(page);
                        let mut out = vec![0u8; pages.div_ceil(8)];
                        let mut body = vec![];
                        for i in 0..pages {
                            if r.chance(50) {
                                out[i / 8] |= 1 << (i % 8);
                                body.extend_from_slice(
                                    &raw[i * page..((i + 1) * page).min(raw.len())],
                                );
                            }
                        }
                        out.extend(body);
                        if r.chance(20) {
                            out.truncate(r.below(out.len() + 1));
                        }
                        f.set_raw(3, &out);
                    }
                    2 => f.set_raw(2, &vec![0; raw.len()]),
                    // Raw bytes cut or grown.
                    _ => {
                        raw.resize(r.below(raw.len() * 2 + 2), 7);
                        f.set_raw(1, &raw);
                    }
                }
            }
            3 if n > 0 && !files.is_empty() => {
                let f = &mut parts[si].frames[r.below(n)];
                let (id, size) = *r.pick(&files);
                if r.chance(50) {
                    put_u32(&mut f.hdr, 8, id as u32);
                }
                let chunk = r.below(size.div_ceil(t) as usize + 2) as u64;
                put_u64(&mut f.hdr, 16, chunk * t);
            }
            4 if n > 0 => {
                let f = parts[si].frames.remove(r.below(n));
                if r.chance(70) {
                    let to = r.below(parts.len());
                    let at = r.below(parts[to].frames.len() + 1);
                    parts[to].frames.insert(at, f.clone());
                    if r.chance(50) {
                        parts[si].frames.push(f);
                    }
                }
            }
            _ => {
                // The manifest, the same change in every stripe's.
                let k = r.below(files.len().max(1));
                let ty = *r.pick(&["full", "diff", "incr"]);
                let (key, v): (&str, Value) = match r.below(8) {
                    0 => ("backup_type", ty.into()),
                    1 => ("sparse", Value::Bool(r.chance(70))),
                    2 => {
                        let size = files.get(r.below(files.len().max(1))).map_or(0, |f| f.1);
                        ("size", r.interesting(size).min(1 << 40).into())
                    }
                    3 => ("kind", (*r.pick(&["file", "dir", "link"])).into()),
                    4 => (
                        "link_target",
                        (*r.pick(&["/", "..", "../../x", "a"])).into(),
                    ),
                    5 => (
                        "mode",
                        (*r.pick(&[0u64, 0o7777, 0o170777, u32::MAX as u64])).into(),
                    ),
                    6 => (
                        "mtime",
                        (*r.pick(&[i64::MIN, -1, 0, i64::MAX, 1 << 40])).into(),
                    ),
                    _ => ("id", (r.interesting(k as u64) % (1 << 32)).into()),
                };
                for p in parts.iter_mut() {
                    if key == "backup_type" {
                        p.manifest[key] = v.clone();
                    } else if let Some(e) = p.manifest["files"].get_mut(k) {
                        e[key] = v.clone();
                    }
                }
            }
        }
    }
    if r.chance(80) {
        fix_checksums(parts);
    }
}

/// Whether a (possibly damaged) stripe still has a manifest to replace.
pub(crate) fn can_rewrite(b: &[u8]) -> bool {
    b.len() >= 1024
        && (512..=1 << 20).contains(&block_of(b))
        && block_of(b).is_power_of_two()
        && try_manifest_json(b).is_some()
}

/// A manifest damaged in its JSON, put back into every stripe of the set as a forger
/// would (every stripe carries the manifest; they must be equal).
pub(crate) fn mutate_manifest(r: &mut Rng, set: &mut [Vec<u8>]) {
    let Some(json) = try_manifest_json(&set[0]) else {
        return;
    };
    let raw = match serde_json::from_slice::<Value>(&json) {
        Ok(mut v) if r.chance(85) => {
            for _ in 0..1 + r.below(3) {
                mutate_json(r, &mut v);
            }
            serde_json::to_vec(&v).unwrap()
        }
        _ => {
            let mut j = json.clone();
            mutate_bytes(r, &mut j, b"{}[]\":,");
            j
        }
    };
    for (i, b) in set.iter_mut().enumerate() {
        let mut v: Value = match serde_json::from_slice(&raw) {
            Ok(v) => v,
            Err(_) if can_rewrite(b) => {
                *b = with_manifest(b, &raw);
                continue;
            }
            Err(_) => continue,
        };
        // Each stripe's own entry keeps its tail's counts unless the damage was there.
        let mine = try_manifest_json(b).and_then(|j| serde_json::from_slice::<Value>(&j).ok());
        if let (Some(m), true) = (mine, r.chance(90)) {
            let mine = m.get("stripes").and_then(Value::as_array);
            if let (Some(a), Some(o)) = (v.get_mut("stripes").and_then(Value::as_array_mut), mine) {
                if let (Some(x), Some(y)) = (a.get_mut(i), o.get(i)) {
                    if x.get("index").is_some() && y.get("index").is_some() {
                        x["frames"] = y["frames"].clone();
                        x["body_end"] = y["body_end"].clone();
                    }
                }
            }
        }
        if can_rewrite(b) {
            *b = with_manifest(b, &serde_json::to_vec(&v).unwrap());
        }
    }
}

/// Every path under `root` (not following links), relative.
pub(crate) fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in walkdir::WalkDir::new(root).min_depth(1) {
        let e = e.unwrap();
        out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
    }
    out.sort();
    out
}

/// A sandbox for restores: the target four levels down, so a path climbing out of it
/// lands inside; a canary beside it.
pub(crate) struct Sandbox {
    pub(crate) dir: tempfile::TempDir,
}

impl Sandbox {
    pub(crate) fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        fs::write(dir.path().join("canary"), b"canary").unwrap();
        Sandbox { dir }
    }
    pub(crate) fn target(&self) -> PathBuf {
        self.dir.path().join("a/b/c/out")
    }
    /// Nothing but the target's own tree and the canary.
    pub(crate) fn check(&self, what: &str) {
        assert_eq!(
            fs::read(self.dir.path().join("canary")).unwrap(),
            b"canary",
            "{what}"
        );
        for p in listing(self.dir.path()) {
            let ok = p.starts_with("a/b/c/out")
                || ["a", "a/b", "a/b/c", "canary"]
                    .iter()
                    .any(|k| p == Path::new(k));
            assert!(ok, "{what} wrote '{}' outside its target", p.display());
        }
        let _ = fs::remove_dir_all(self.target());
    }
}

pub(crate) fn read_options(paths: &[String]) -> ReadOptions {
    ReadOptions {
        from: paths.to_vec(),
        threads: Some(2),
        store: StoreOptions::default(),
        ..ReadOptions::default()
    }
}

#[test]
fn stripe() {
    let corpus = stripe_corpus();
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    drive(1, 35, |r| {
        let which = r.below(corpus.sets.len());
        let mut set = corpus.sets[which].clone();
        let other = corpus.sets[r.below(corpus.sets.len())][0].clone();
        if r.chance(50) {
            let mut parts = corpus.parts[which].clone();
            mutate_parts(r, &mut parts);
            set = build_set(&parts);
        }
        for _ in 0..r.below(3) {
            if r.chance(30) {
                mutate_manifest(r, &mut set);
            } else {
                let i = r.below(set.len());
                mutate_stripe(r, &mut set[i], &other);
            }
        }
        let paths: Vec<String> = (0..set.len())
            .map(|i| s(&work.path().join(format!("{i}.pv"))))
            .collect();
        for (p, b) in paths.iter().zip(&set) {
            fs::write(p, b).unwrap();
        }
        // The parsers alone.
        for b in &set {
            use pagevault::format::{frame::FrameHeader, manifest::Manifest, media};
            let _ = media::MediaHeader::decode(&b[..b.len().min(512)]);
            if b.len() >= 64 {
                let _ = media::Tail::decode(&b[b.len() - 64..], b.len() as u64);
            }
            let mut at = 512;
            while at + 80 <= b.len() && at < 1 << 20 {
                let _ = FrameHeader::decode(&b[at..], at as u64);
                at += 512;
            }
            if let Some(j) = try_manifest_json(b) {
                let _ = Manifest::from_bytes(&j);
            }
        }
        let o = StoreOptions::default();
        let _ = pagevault::set::read::describe(&paths, &o);
        if pagevault::set::read::open(&paths, &o).is_err() {
            return "refused when opened";
        }
        let v = VerifyOptions {
            read: read_options(&paths),
        };
        let verified = verify(&v, &quiet).is_ok();
        if r.chance(30) {
            let ro = RestoreOptions {
                read: read_options(&paths),
                to: sandbox.target(),
                stage_only: true,
                ..RestoreOptions::default()
            };
            let restored = restore(&ro, &quiet).is_ok();
            sandbox.check("restore");
            return if restored {
                "restored"
            } else {
                "refused by restore"
            };
        }
        if verified {
            "verified"
        } else {
            "refused by verify"
        }
    });
}
