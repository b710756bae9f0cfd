//! The frame index after a plain stripe's manifest (docs/FORMAT.md): every frame's
//! header in stripe order, counted and checked by the tail; verify checks it against
//! the frames; a stripe without one (written before it) still reads.

mod common;
use common::forge::{fix_tail, frames_of, index_of, put_u32, u32_at, u64_at, with_index_entry};
use common::*;

fn backup(tmp: &std::path::Path) -> (std::path::PathBuf, String) {
    let src = tmp.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Several frames of 64 KiB, some of them compressible.
    for i in 0..6u8 {
        let body: Vec<u8> = (0..300_000u32)
            .map(|k| {
                if i % 2 == 0 {
                    (k % 7) as u8
                } else {
                    (k.wrapping_mul(2_654_435_761) >> 13) as u8
                }
            })
            .collect();
        std::fs::write(src.join(format!("f{i}")), body).unwrap();
    }
    let stripe = tmp.join("set.pv");
    ok(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--to",
        &s(&stripe),
        "--max-transfer-size",
        "64K",
        "--compress",
        "lz4",
    ]);
    (src, s(&stripe))
}

/// Stripe `b` with index entry `i`'s sequence number changed, every CRC made valid.
fn disagreeing(b: &[u8], i: usize) -> Vec<u8> {
    with_index_entry(b, i, |e| e[64] ^= 1)
}

#[test]
fn a_plain_stripe_indexes_every_frame_header_and_verify_checks_it() {
    let t = tempfile::tempdir().unwrap();
    let (src, stripe) = backup(t.path());
    let b = std::fs::read(&stripe).unwrap();
    let frames = frames_of(&b);
    let tail = &b[b.len() - 64..];
    assert_eq!(u64_at(tail, 32) as usize, frames.len());
    assert!(frames.len() > 20, "{} frames", frames.len());
    let (at, len) = index_of(&b);
    assert_eq!(len, frames.len() * 80, "one header per frame");
    let index = &b[at..at + len];
    assert_eq!(crc32c::crc32c(index), u32_at(tail, 56));
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(&index[i * 80..i * 80 + 80], &b[*f..*f + 80], "frame {i}");
    }
    ok(&["verify", "--from", &stripe]);

    // An index entry that disagrees with its frame (CRCs made valid): verify names it,
    // and a restore that reads every frame is not misled by it.
    std::fs::write(&stripe, disagreeing(&b, 3)).unwrap();
    let err = fails(&["verify", "--from", &stripe], 1);
    assert!(err.contains("differs from its frame index entry"), "{err}");

    // A damaged index fails its CRC.
    let mut torn = b.clone();
    torn[at + 5] ^= 0x40;
    std::fs::write(&stripe, &torn).unwrap();
    let err = fails(&["verify", "--from", &stripe], 1);
    assert!(
        err.contains("frame index") && err.contains("damaged"),
        "{err}"
    );

    // A stripe without an index (as written before it) reads as before.
    let mut old = b.clone();
    let n = old.len();
    old[at..at + len].fill(0);
    put_u32(&mut old, n - 64 + 52, 0);
    put_u32(&mut old, n - 64 + 56, 0);
    fix_tail(&mut old);
    std::fs::write(&stripe, &old).unwrap();
    ok(&["verify", "--from", &stripe]);
    let to = t.path().join("out");
    ok(&["restore", "--from", &stripe, "--to", &s(&to)]);
    assert_same_tree(&src, &to);
}

#[test]
fn a_tail_counting_another_index_length_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (_, stripe) = backup(t.path());
    let mut b = std::fs::read(&stripe).unwrap();
    let (_, len) = index_of(&b);
    let n = b.len();
    put_u32(&mut b, n - 64 + 52, (len - 80) as u32);
    fix_tail(&mut b);
    std::fs::write(&stripe, &b).unwrap();
    let err = fails(&["verify", "--from", &stripe], 1);
    assert!(err.contains("frame index holds"), "{err}");
}

#[test]
fn a_copy_carries_the_index_and_refuses_one_that_disagrees() {
    let t = tempfile::tempdir().unwrap();
    let (src, _) = backup(t.path());
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    let j = json(&[
        "backup",
        "--source",
        &format!("files:{}", s(&src)),
        "--repo",
        &s(&a),
        "--max-transfer-size",
        "64K",
    ]);
    let id = j["set_id"].as_str().unwrap().to_string();
    ok(&["init", "--repo", &s(&b)]);
    ok(&["copy", "--repo", &s(&a), "--to-repo", &s(&b)]);
    let stripe = |r: &std::path::Path| r.join(format!("sets/{id}/1.pv"));
    let (from, to) = (
        std::fs::read(stripe(&a)).unwrap(),
        std::fs::read(stripe(&b)).unwrap(),
    );
    let ((fa, la), (ta, lb)) = (index_of(&from), index_of(&to));
    assert!(la > 20 * 80, "{la}");
    assert_eq!(&from[fa..fa + la], &to[ta..ta + lb], "the copy's index");
    ok(&["verify", "--repo", &s(&b)]);

    // An entry that disagrees with its frame (its CRCs valid) stops the copy.
    std::fs::write(stripe(&a), disagreeing(&from, 2)).unwrap();
    ok(&["init", "--repo", &s(&c)]);
    let err = fails(&["copy", "--repo", &s(&a), "--to-repo", &s(&c)], 1);
    assert!(err.contains("differs from its frame index entry"), "{err}");
    assert!(!stripe(&c).exists());
}
