//! The sealed target: encrypted stripes (AES-256-GCM frames and manifest, a key block)
//! and signed ones (keyed BLAKE3 tags on frames and manifest), damaged anywhere (CRCs made valid where mutate_stripe makes them), opened and read
//! with the right key: refused cleanly, never a panic, never a write outside the target.

use super::*;

pub(crate) struct Sealed {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) sets: Vec<Vec<Vec<u8>>>,
    pub(crate) key: String,
}

pub(crate) fn sealed_corpus() -> &'static Sealed {
    static C: std::sync::OnceLock<Sealed> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        small_tree(&src);
        let key = dir.path().join("key");
        fs::write(&key, [0x5a; 32]).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
        let key = s(&key);
        let files = format!("files:{}", s(&src));
        let mut sets = vec![];
        // Encrypted sets, then signed ones (keyed BLAKE3 tags on plain frames).
        let kinds = [
            (1, "none", false),
            (2, "zstd", false),
            (1, "lz4", false),
            (1, "none", true),
            (2, "lz4", true),
        ];
        for (i, (stripes, codec, sign)) in kinds.into_iter().enumerate() {
            let paths: Vec<String> = (0..stripes)
                .map(|k| s(&dir.path().join(format!("sealed{i}-{k}.pv"))))
                .collect();
            let to: Vec<&str> = paths.iter().map(String::as_str).collect();
            let extra = [
                "--compress",
                codec,
                "--max-transfer-size",
                "64K",
                "--key-file",
                &key,
                if sign { "--sign" } else { "--encrypt" },
            ];
            ok(&backup_args(&files, &to, &extra));
            sets.push(paths.iter().map(|p| fs::read(p).unwrap()).collect());
        }
        Sealed {
            _dir: dir,
            sets,
            key,
        }
    })
}

#[test]
fn sealed() {
    let corpus = sealed_corpus();
    let work = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new();
    let store = StoreOptions {
        key: Some(pagevault::crypt::load::read_key_file(Path::new(&corpus.key)).unwrap()),
        ..StoreOptions::default()
    };
    drive(5, 15, |r| {
        let which = r.below(corpus.sets.len());
        let mut set = corpus.sets[which].clone();
        let other = corpus.sets[r.below(corpus.sets.len())][0].clone();
        for _ in 0..1 + r.below(2) {
            let i = r.below(set.len());
            mutate_stripe(r, &mut set[i], &other);
        }
        let paths: Vec<String> = (0..set.len())
            .map(|i| s(&work.path().join(format!("{i}.pv"))))
            .collect();
        for (p, b) in paths.iter().zip(&set) {
            fs::write(p, b).unwrap();
        }
        let _ = pagevault::set::read::describe(&paths, &store);
        if pagevault::set::read::open(&paths, &store).is_err() {
            return "refused when opened";
        }
        let read = ReadOptions {
            store: store.clone(),
            ..read_options(&paths)
        };
        if r.chance(30) {
            let ro = RestoreOptions {
                read,
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
        match verify(&VerifyOptions { read }, &quiet).is_ok() {
            true => "verified",
            false => "refused by verify",
        }
    });
}
