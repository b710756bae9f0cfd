//! Unit tests of the WAL archive, and synthetic WAL for other modules' tests.

use super::*;

/// Synthetic WAL for unit tests.
pub(crate) mod testing {
    use super::*;
    use crate::pg::walpage::XLP_LONG_HEADER;

    pub const SEG: u64 = 16 << 20;
    pub const BLK: usize = 8192;

    /// A synthetic 16 MiB PostgreSQL 15 segment: a long header on page 0, short headers
    /// on the pages that hold WAL, zeroed pages after a "switch".
    pub fn segment(tli: u32, segno: u64, sysid: u64, used_pages: usize) -> Vec<u8> {
        let mut v = vec![0u8; SEG as usize];
        let start = segno * SEG;
        for p in 0..used_pages {
            let h = &mut v[p * BLK..];
            h[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
            let info: u16 = if p == 0 { XLP_LONG_HEADER } else { 1 };
            h[2..4].copy_from_slice(&info.to_le_bytes());
            h[4..8].copy_from_slice(&tli.to_le_bytes());
            h[8..16].copy_from_slice(&(start + (p * BLK) as u64).to_le_bytes());
            if p == 0 {
                h[24..32].copy_from_slice(&sysid.to_le_bytes());
                h[32..36].copy_from_slice(&(SEG as u32).to_le_bytes());
                h[36..40].copy_from_slice(&(BLK as u32).to_le_bytes());
            }
            for (i, b) in h[40..200].iter_mut().enumerate() {
                *b = (p + i) as u8;
            }
        }
        v
    }

    /// Pushes a synthetic segment of cluster 5 into `repo`.
    pub fn push_segment(repo: &Repo, dir: &Path, tli: u32, segno: u64) {
        let p = dir.join(segment_name_for(tli, segno, SEG));
        fs::write(&p, segment(tli, segno, 5, 3)).unwrap();
        push(repo, &p).unwrap();
        fs::remove_file(p).unwrap();
    }
}

use testing::*;

fn repo() -> (tempfile::TempDir, Repo) {
    crate::repo::temp_repo()
}

#[test]
fn header_round_trip_and_damage() {
    let h = Header {
        kind: Kind::Backup,
        name: "000000010000000000000002.00000028.backup".into(),
        raw: 1234,
        stored: 99,
        blake3: [7; 32],
        sysid: 42,
        crc: 0xDEAD_BEEF,
    };
    let b = h.encode();
    assert_eq!(Header::decode(&b).unwrap(), h);
    for i in 0..HDR_LEN {
        let mut c = b;
        c[i] ^= 0x10;
        assert!(Header::decode(&c).is_err(), "byte {i}");
    }
    assert!(Header::decode(&b[..100]).is_err());
}

#[test]
fn push_get_idempotent_and_refusals() {
    let (d, r) = repo();
    let wal = d.path().join("pg_wal");
    fs::create_dir(&wal).unwrap();
    let name = "000000010000000000000003";
    let src = wal.join(name);
    let seg = segment(1, 3, 77, 700);
    fs::write(&src, &seg).unwrap();
    let p = push(&r, &src).unwrap();
    assert_eq!(p.outcome, Outcome::Archived);
    assert!(p.stored_bytes < p.raw_bytes / 10);
    assert_eq!(system_identifier(&r).unwrap(), Some(77));
    assert_eq!(push(&r, &src).unwrap().outcome, Outcome::AlreadyArchived);
    assert!(has_segment(&r, name));
    assert_eq!(list(&r, 1).unwrap(), vec![name.to_string()]);
    assert!(list(&r, 2).unwrap().is_empty());
    let out = d.path().join("RECOVERYXLOG");
    fetch(&r, name, &out).unwrap();
    assert!(fs::read(&out).unwrap() == seg);
    // The archived file is a plain zstd file too (skippable frame first).
    let stored = fs::read(archived_path(&r, name).unwrap()).unwrap();
    assert!(zstd::stream::decode_all(&stored[..]).unwrap() == seg);

    // Different content under the same name: refused, nothing changed.
    let mut other = seg.clone();
    other[5000] ^= 1;
    fs::write(&src, &other).unwrap();
    let e = format!("{:#}", push(&r, &src).unwrap_err());
    assert!(e.contains("different content"), "{e}");
    assert!(fs::read(archived_path(&r, name).unwrap()).unwrap() == stored);

    // Corrupt segments.
    let bad = |bytes: &[u8], fname: &str, want: &str| {
        let p = wal.join(fname);
        fs::write(&p, bytes).unwrap();
        let e = format!("{:#}", push(&r, &p).unwrap_err());
        assert!(e.contains(want) && e.contains(fname), "{e}");
        assert!(!has_segment(&r, fname));
    };
    let mut m = segment(1, 4, 77, 10);
    m[0] ^= 0xFF;
    bad(&m, "000000010000000000000004", "magic");
    bad(
        &segment(1, 4, 77, 10)[..SEG as usize / 2],
        "000000010000000000000004",
        "truncated",
    );
    bad(
        &segment(1, 4, 77, 10),
        "000000010000000000000005",
        "WAL position 0/4000000",
    );
    bad(
        &segment(2, 4, 77, 10),
        "000000010000000000000004",
        "timeline 2",
    );
    bad(
        &segment(1, 4, 99, 10),
        "000000010000000000000004",
        "system identifier 99",
    );
    let mut stale = segment(1, 4, 77, 10);
    stale[5 * BLK + 8..5 * BLK + 16].copy_from_slice(&0x0100_0000u64.to_le_bytes());
    bad(&stale, "000000010000000000000004", "page 5");
    bad(b"x", "000000010000000000000004", "only 1 bytes");
    bad(b"1\t0/3000000\tx\n\0", "00000002.history", "NUL");

    // History and backup history files.
    let hist = wal.join("00000002.history");
    fs::write(&hist, "1\t0/3000000\tno recovery target specified\n").unwrap();
    push(&r, &hist).unwrap();
    let got = d.path().join("h");
    fetch(&r, "00000002.history", &got).unwrap();
    assert_eq!(fs::read(&got).unwrap(), fs::read(&hist).unwrap());
    assert!(list(&r, 2).unwrap().is_empty());

    // Not archived, and damage.
    let e = fetch(&r, "00000003.history", &got).unwrap_err();
    assert!(e.downcast_ref::<NotArchived>().is_some());
    let ap = archived_path(&r, name).unwrap();
    let mut dmg = stored.clone();
    dmg[HDR_LEN + 1000] ^= 0x40;
    fs::write(&ap, &dmg).unwrap();
    let e = format!("{:#}", fetch(&r, name, &out).unwrap_err());
    assert!(e.contains("damaged") && e.contains(name), "{e}");
    // Pushing the good file again repairs the damaged copy.
    fs::write(&src, &seg).unwrap();
    assert_eq!(push(&r, &src).unwrap().outcome, Outcome::Repaired);
    assert_eq!(verify(&r, name).unwrap(), SEG);
    // No temp files left behind.
    let left: Vec<_> = fs::read_dir(ap.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn concurrent_pushes_of_one_segment() {
    let (d, r) = repo();
    let src = d.path().join("000000010000000000000009");
    fs::write(&src, segment(1, 9, 5, 2048)).unwrap();
    let root = r.describe();
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let (src, root) = (src.clone(), root.clone());
            std::thread::spawn(move || {
                push(&Repo::open(&root, true, &Default::default()).unwrap(), &src).unwrap()
            })
        })
        .collect();
    let outs: Vec<Outcome> = hs.into_iter().map(|h| h.join().unwrap().outcome).collect();
    assert_eq!(outs.iter().filter(|&&o| o == Outcome::Archived).count(), 1);
    assert_eq!(verify(&r, "000000010000000000000009").unwrap(), SEG);
}

#[test]
fn missing_segments_between_lsns() {
    let (d, r) = repo();
    for s in [2u64, 3, 5] {
        let p = d.path().join(segment_name_for(1, s, SEG));
        fs::write(&p, segment(1, s, 5, 3)).unwrap();
        push(&r, &p).unwrap();
    }
    assert_eq!(
        missing_segments(&r, 1, 0x0200_0028, 0x0500_0100, SEG).unwrap(),
        vec!["000000010000000000000004".to_string()]
    );
    assert!(missing_segments(&r, 1, 0x0200_0028, 0x03FF_FFFF, SEG)
        .unwrap()
        .is_empty());
}

#[test]
fn push_stores_a_summary_beside_each_segment() {
    use super::summary::{self, testing as t};
    let (d, r) = repo();
    let recs = vec![t::heap(100, &[1]), t::big(t::SEG), t::heap(200, &[4, 5])];
    let segs = t::segments(&recs, 2, 3);
    let names: Vec<String> = (2..5).map(|s| segment_name_for(1, s, SEG)).collect();
    let path = |i: usize| d.path().join(&names[i]);
    for (i, s) in segs.iter().enumerate() {
        fs::write(path(i), s).unwrap();
    }
    let sum_path = |i: usize| archived_path(&r, &names[i]).unwrap().with_extension("sum");
    // Segment 1 pushed before segment 0: its head (the big record's rest) is not covered.
    push(&r, &path(1)).unwrap();
    let s1 = summary::read(&r, &names[1]).unwrap().unwrap();
    assert!(!s1.usable() && s1.flags & summary::HEAD_SKIPPED != 0);
    // In order: every summary usable, the record that ends in segment 1 and the blocks
    // after it found through the carry.
    for i in 0..3 {
        push(&r, &path(i)).unwrap();
    }
    // Segment 1 was already archived: its push again rewrote the summary, now that
    // segment 0's carry is there.
    assert!(summary::read(&r, &names[1]).unwrap().unwrap().usable());
    fs::remove_file(sum_path(1)).unwrap();
    assert_eq!(
        push(&r, &path(1)).unwrap().outcome,
        Outcome::AlreadyArchived
    );
    assert!(
        sum_path(1).is_file(),
        "a retried push writes the missing summary"
    );
    push(&r, &path(2)).unwrap();
    fs::remove_file(sum_path(2)).unwrap();
    push(&r, &path(2)).unwrap();
    let m = summary::block_map(&r, 1, 0x0200_0000, 0x04FF_FFFF, SEG).unwrap();
    assert!(m.complete(), "{:?}", m.gaps);
    assert!(m.may_have_changed(t::rel(200), 0, 5) && m.may_have_changed(t::rel(100), 0, 1));
    assert_eq!(
        summary::read(&r, &names[0]).unwrap().unwrap().segment,
        names[0]
    );
    // Listing ignores summaries; archive-get does not serve them.
    assert_eq!(list(&r, 1).unwrap(), names);
    assert!(all_archived(&r)
        .unwrap()
        .iter()
        .all(|(n, _)| !n.contains(".sum")));
    let e = format!(
        "{:#}",
        fetch(&r, &format!("{}.sum", names[0]), &d.path().join("x")).unwrap_err()
    );
    assert!(e.contains("not a WAL file name"), "{e}");
    // History files get none.
    let hist = d.path().join("00000002.history");
    fs::write(&hist, "1\t0/3000000\tno recovery target specified\n").unwrap();
    push(&r, &hist).unwrap();
    let dir2 = archived_path(&r, "00000002.history").unwrap();
    let files: Vec<String> = fs::read_dir(dir2.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, ["00000002.history.zst"]);
    // Retention removes a segment's summary with it.
    remove_archived(&r, &names[0]).unwrap();
    assert!(!sum_path(0).exists() && sum_path(1).exists());
    assert!(summary::read(&r, &names[0]).unwrap().is_none());
}

#[test]
fn a_new_timelines_first_segment_continues_its_parents_carry() {
    use super::summary::{self, testing as t};
    let (d, r) = repo();
    // A record starts in segment 2 of timeline 1 and ends in segment 3, where timeline
    // 2 branches off (its first segment holds timeline 1's WAL up to the switch).
    let recs = vec![t::heap(100, &[1]), t::big(t::SEG), t::heap(200, &[4])];
    let segs = t::segments(&recs, 2, 2);
    let p2 = d.path().join("000000010000000000000002");
    fs::write(&p2, &segs[0]).unwrap();
    push(&r, &p2).unwrap();
    let hist = d.path().join("00000002.history");
    fs::write(&hist, "1\t0/3F00000\tno recovery target specified\n").unwrap();
    push(&r, &hist).unwrap();
    let p3 = d.path().join("000000020000000000000003");
    fs::write(&p3, &segs[1]).unwrap();
    push(&r, &p3).unwrap();
    let s = summary::read(&r, "000000020000000000000003")
        .unwrap()
        .unwrap();
    assert!(s.usable(), "{}", s.note);
    assert!(s.rels.contains_key(&summary::RelFork {
        file: t::rel(200),
        fork: 0
    }));
}

#[test]
fn a_live_head_is_checked_up_to_the_start_and_zeroed_after() {
    use crate::pg::walpage::live_head;
    use testing::{segment, BLK, SEG};
    let name = segment_name_for(1, 7, SEG);
    let start = 7 * SEG;
    // Three pages written; the start is inside the third.
    let upto = start + 2 * BLK as u64 + 300;
    let mut head = segment(1, 7, 5, 3)[..(upto - start) as usize].to_vec();
    let s = live_head(&name, &mut head, upto).unwrap();
    assert_eq!((s.seg_start, head.len() as u64), (start, SEG));
    assert!(head[(upto - start) as usize..].iter().all(|&b| b == 0));
    assert_eq!(head[2 * BLK + 299], segment(1, 7, 5, 3)[2 * BLK + 299]);

    // A page before the start not written yet, a stale page, too little read, another name.
    let mut short = segment(1, 7, 5, 2)[..(upto - start) as usize].to_vec();
    let e = live_head(&name, &mut short, upto).unwrap_err();
    assert!(e.contains("page 2") && e.contains("not written"), "{e}");
    let mut stale = segment(1, 7, 5, 3)[..(upto - start) as usize].to_vec();
    stale[BLK + 8..BLK + 16].copy_from_slice(&(3 * SEG + BLK as u64).to_le_bytes());
    let e = live_head(&name, &mut stale, upto).unwrap_err();
    assert!(e.contains("recycled"), "{e}");
    let mut cut = segment(1, 7, 5, 3)[..BLK].to_vec();
    assert!(live_head(&name, &mut cut, upto)
        .unwrap_err()
        .contains("could be read"));
    let mut other = segment(1, 7, 5, 3)[..(upto - start) as usize].to_vec();
    assert!(live_head(&segment_name_for(1, 8, SEG), &mut other, upto).is_err());
}

/// A repository opened with a key (a new one is made encrypted by its first push).
fn keyed(path: &Path, key: u8) -> Repo {
    let o = crate::device::object::StoreOptions {
        key: Some(crate::crypt::KeySource::key([key; 32], "test key")),
        ..Default::default()
    };
    Repo::open(path.to_str().unwrap(), true, &o).unwrap()
}

#[test]
fn an_encrypted_archive_seals_every_file_and_refuses_plain_and_other_keys() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("r");
    let r = keyed(&root, 1);
    let wal = d.path().join("pg_wal");
    fs::create_dir(&wal).unwrap();
    let name = segment_name_for(1, 3, SEG);
    let seg = segment(1, 3, 77, 700);
    fs::write(wal.join(&name), &seg).unwrap();
    let p = push(&r, &wal.join(&name)).unwrap();
    assert_eq!(p.outcome, Outcome::Archived);
    assert!(r.encryption().is_some());
    // Neither the segment nor its summary holds plaintext, and both open again.
    let stored = fs::read(archived_path(&r, &name).unwrap()).unwrap();
    assert!(stored.starts_with(seal::ENV_MAGIC));
    assert!(!stored.windows(8).any(|w| w == &seg[8192 + 40..8192 + 48]));
    let sum_rel = summary::summary_rel(&name).unwrap();
    assert!(fs::read(root.join(&sum_rel))
        .unwrap()
        .starts_with(seal::ENV_MAGIC));
    assert!(summary::read(&r, &name).unwrap().is_some());
    let out = d.path().join("got");
    assert_eq!(fetch(&r, &name, &out).unwrap(), SEG);
    assert_eq!(fs::read(&out).unwrap(), seg);
    // Pushed again: the same bytes.
    assert_eq!(
        push(&r, &wal.join(&name)).unwrap().outcome,
        Outcome::AlreadyArchived
    );

    // Without a key: a push is refused, a fetch asks for the key.
    let plain = Repo::open(root.to_str().unwrap(), false, &Default::default()).unwrap();
    let e = format!("{:#}", push(&plain, &wal.join(&name)).unwrap_err());
    assert!(e.contains("is encrypted") && e.contains("refused"), "{e}");
    let e = format!("{:#}", fetch(&plain, &name, &out).unwrap_err());
    assert!(e.contains("--key-file"), "{e}");
    // Another key is refused when the repository is opened.
    let o = crate::device::object::StoreOptions {
        key: Some(crate::crypt::KeySource::key([2; 32], "other key")),
        ..Default::default()
    };
    let e = Repo::open(root.to_str().unwrap(), false, &o).err().unwrap();
    assert!(format!("{e:#}").contains("wrong key"), "{e:#}");

    // An archived segment copied under another name does not open.
    let other = segment_name_for(1, 4, SEG);
    let other_path = archived_path(&r, &other).unwrap();
    fs::copy(archived_path(&r, &name).unwrap(), &other_path).unwrap();
    let e = format!("{:#}", fetch(&r, &other, &out).unwrap_err());
    assert!(e.contains("renamed or forged"), "{e}");
    // A plain file put in its place is refused.
    fs::remove_file(&other_path).unwrap();
    let (_pd, pr) = repo();
    fs::write(wal.join(&other), segment(1, 4, 77, 10)).unwrap();
    push(&pr, &wal.join(&other)).unwrap();
    fs::copy(archived_path(&pr, &other).unwrap(), &other_path).unwrap();
    let e = format!("{:#}", fetch(&r, &other, &out).unwrap_err());
    assert!(e.contains("not encrypted"), "{e}");
}

#[test]
fn rekey_rewraps_archived_files_in_place() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("r");
    let r = keyed(&root, 1);
    let wal = d.path().join("pg_wal");
    fs::create_dir(&wal).unwrap();
    let name = segment_name_for(1, 3, SEG);
    fs::write(wal.join(&name), segment(1, 3, 77, 50)).unwrap();
    push(&r, &wal.join(&name)).unwrap();
    let (old, new) = (
        crate::crypt::Master::new([1; 32]),
        crate::crypt::Master::new([9; 32]),
    );
    assert_eq!(
        rekey(&r, &old, &new).unwrap(),
        (2, 0),
        "segment and summary"
    );
    assert_eq!(
        rekey(&r, &old, &new).unwrap(),
        (0, 2),
        "a second run finds them done"
    );
    r.set_key(
        crate::repo::RepoKey {
            key_id: new.id,
            kdf: crate::crypt::Kdf::Raw,
            mode: crate::format::seal::KeyUse::Seal,
        },
        None,
        &new,
    )
    .unwrap();
    let r2 = keyed(&root, 9);
    let out = d.path().join("got");
    fetch(&r2, &name, &out).unwrap();
    assert!(summary::read(&r2, &name).unwrap().is_some());
}

#[test]
fn a_signed_archive_signs_every_file_and_refuses_forgeries() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("r");
    let r = keyed(&root, 1);
    let source = r.options().key.clone().unwrap();
    r.key_for(&source, crate::format::seal::KeyUse::Sign)
        .unwrap();
    assert!(r.signing().is_some());
    let wal = d.path().join("pg_wal");
    fs::create_dir(&wal).unwrap();
    let name = segment_name_for(1, 3, SEG);
    let seg = segment(1, 3, 77, 700);
    fs::write(wal.join(&name), &seg).unwrap();
    assert_eq!(
        push(&r, &wal.join(&name)).unwrap().outcome,
        Outcome::Archived
    );
    let path = archived_path(&r, &name).unwrap();
    let stored = fs::read(&path).unwrap();
    assert!(stored.starts_with(seal::SIG_MAGIC));
    let sum_rel = summary::summary_rel(&name).unwrap();
    assert!(fs::read(root.join(&sum_rel))
        .unwrap()
        .starts_with(seal::SIG_MAGIC));
    assert!(summary::read(&r, &name).unwrap().is_some());
    let out = d.path().join("got");
    assert_eq!(fetch(&r, &name, &out).unwrap(), SEG);
    assert_eq!(fs::read(&out).unwrap(), seg);
    verify(&r, &name).unwrap();
    assert_eq!(
        push(&r, &wal.join(&name)).unwrap().outcome,
        Outcome::AlreadyArchived
    );

    // Without a key: a push is refused, a fetch names the key id it needs.
    let nokey = Repo::open(root.to_str().unwrap(), false, &Default::default()).unwrap();
    let id = crate::crypt::show_id(&crate::crypt::Master::new([1; 32]).id);
    let e = format!("{:#}", push(&nokey, &wal.join(&name)).unwrap_err());
    assert!(e.contains("is signed") && e.contains("--key-file"), "{e}");
    let e = format!("{:#}", fetch(&nokey, &name, &out).unwrap_err());
    assert!(e.contains(&id) && e.contains("--key-file"), "{e}");
    let e = format!("{:#}", summary::read(&nokey, &name).unwrap_err());
    assert!(e.contains(&id), "{e}");

    // A byte of a chunk edited, its tag left: refused by fetch and verify.
    let mut forged = stored.clone();
    forged[seal::ENV_HDR + 200] ^= 1;
    fs::write(&path, &forged).unwrap();
    let e = format!("{:#}", fetch(&r, &name, &out).unwrap_err());
    assert!(
        e.contains("does not authenticate") && e.contains(&name),
        "{e}"
    );
    assert!(verify(&r, &name).is_err());
    // Renamed: refused.
    fs::write(&path, &stored).unwrap();
    let other = segment_name_for(1, 4, SEG);
    let other_path = archived_path(&r, &other).unwrap();
    fs::copy(&path, &other_path).unwrap();
    let e = format!("{:#}", fetch(&r, &other, &out).unwrap_err());
    assert!(e.contains("renamed or forged"), "{e}");
    // A plain archived file in its place: refused.
    let (_pd, pr) = repo();
    fs::write(wal.join(&other), segment(1, 4, 77, 10)).unwrap();
    push(&pr, &wal.join(&other)).unwrap();
    fs::copy(archived_path(&pr, &other).unwrap(), &other_path).unwrap();
    let e = format!("{:#}", fetch(&r, &other, &out).unwrap_err());
    assert!(e.contains("not signed"), "{e}");
    assert!(verify(&r, &other).is_err());
    fs::remove_file(&other_path).unwrap();

    // key rotate rewraps the signed files' keys.
    let (old, new) = (
        crate::crypt::Master::new([1; 32]),
        crate::crypt::Master::new([9; 32]),
    );
    assert_eq!(rekey(&r, &old, &new).unwrap(), (2, 0));
    assert_eq!(rekey(&r, &old, &new).unwrap(), (0, 2));
    r.set_key(
        crate::repo::RepoKey {
            key_id: new.id,
            kdf: crate::crypt::Kdf::Raw,
            mode: crate::format::seal::KeyUse::Sign,
        },
        None,
        &new,
    )
    .unwrap();
    let r2 = keyed(&root, 9);
    fetch(&r2, &name, &out).unwrap();
    assert!(summary::read(&r2, &name).unwrap().is_some());
}

/// A plain push whose repository handle predates a first keyed write (it checked the
/// marker before the swap) and writes after it: refused, its file removed, the
/// repository encrypted and holding nothing plain.
#[test]
fn a_plain_push_racing_the_first_encryption_is_refused_and_removed() {
    let (dir, plain) = repo();
    let source = crate::crypt::KeySource::key([7; 32], "test key");
    let options = crate::device::object::StoreOptions {
        key: Some(source.clone()),
        ..Default::default()
    };
    let keyed = Repo::open(dir.path().join("r").to_str().unwrap(), true, &options).unwrap();
    keyed
        .key_for(&source, crate::format::seal::KeyUse::Seal)
        .unwrap();
    let p = dir.path().join(segment_name_for(1, 1, SEG));
    fs::write(&p, segment(1, 1, 5, 3)).unwrap();
    let e = push(&plain, &p).unwrap_err().to_string();
    assert!(e.contains("is encrypted") && e.contains("removed"), "{e}");
    let left: Vec<_> = (plain.store().list("wal").unwrap().into_iter())
        .filter(|(k, _)| k.contains('/'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(keyed.encryption().is_some());
}

#[test]
fn a_spooled_file_is_known_by_its_source_identity_until_that_changes() {
    let d = tempfile::tempdir().unwrap();
    let (wal, spool) = (d.path().join("pg_wal"), d.path().join("ready"));
    fs::create_dir(&wal).unwrap();
    fs::create_dir(&spool).unwrap();
    let name = segment_name_for(1, 3, SEG);
    let src = wal.join(&name);
    fs::write(&src, segment(1, 3, 5, 40)).unwrap();
    let first = spooled::spool_copy(&src, &spool, None, true).unwrap();
    assert!(!first.already);
    assert!(spool
        .join(format!("{name}{}", spooled::SRC_SUFFIX))
        .exists());
    // The same unchanged file: known by identity, its bytes not read again. The spooled
    // copy is damaged here (and its summary, which names its hash, removed) to tell the
    // two paths apart: a scan would refuse it.
    fs::remove_file(spool.join(format!("{name}{}", spooled::SUM_SUFFIX))).unwrap();
    let spooled_copy = spool.join(&name);
    let mut damaged = fs::read(&spooled_copy).unwrap();
    damaged[100] ^= 1;
    fs::write(&spooled_copy, &damaged).unwrap();
    assert!(
        spooled::spool_copy(&src, &spool, None, true)
            .unwrap()
            .already
    );
    // The source written again (same bytes, new change time): scanned, and the damaged
    // copy refused, never trusted by name.
    fs::write(&src, segment(1, 3, 5, 40)).unwrap();
    let e = spooled::spool_copy(&src, &spool, None, true).unwrap_err();
    assert!(format!("{e:#}").contains("other content"), "{e:#}");
    // Stored by the pusher and removed from the spool: the call returns at once, once.
    fs::write(&spooled_copy, segment(1, 3, 5, 40)).unwrap();
    let id = spool.join(format!("{name}{}", spooled::SRC_SUFFIX));
    fs::write(&id, spooled::identity_of(&src).unwrap()).unwrap();
    spooled::mark_done(&spool, &name);
    fs::remove_file(&spooled_copy).unwrap();
    assert!(
        spooled::spool_copy(&src, &spool, None, true)
            .unwrap()
            .already
    );
    assert!(!spooled_copy.exists());
    assert!(!spool
        .join(format!("{name}{}", spooled::DONE_SUFFIX))
        .exists());
    // Asked again after that: copied again.
    assert!(
        !spooled::spool_copy(&src, &spool, None, true)
            .unwrap()
            .already
    );
    assert!(spooled_copy.exists());
}

#[test]
fn a_batch_pushed_plain_goes_when_a_keyed_write_made_the_repository_encrypted_meanwhile() {
    let d = tempfile::tempdir().unwrap();
    let wal = d.path().join("pg_wal");
    fs::create_dir(&wal).unwrap();
    let put = |segno| {
        let p = wal.join(segment_name_for(1, segno, SEG));
        fs::write(&p, segment(1, segno, 77, 3)).unwrap();
        p
    };
    let open = |name: &str| {
        let spec = d.path().join(name);
        Repo::open(spec.to_str().unwrap(), true, &Default::default()).unwrap()
    };
    // Left to the caller, the check passes while the repository stays plain.
    let a = open("a");
    let p = spooled::push_spooled(&a, &put(2), None, false).unwrap();
    assert!(p.unchecked_plain);
    check_still_plain(&a, [&p]).unwrap();
    assert!(archived_path(&a, &p.name).unwrap().exists());
    assert!(!push(&a, &put(3)).unwrap().unchecked_plain);
    // A keyed handle makes an empty repository encrypted; a plain handle opened before
    // still believes it plain, and what its batch stored goes again.
    let b = open("b");
    let k = keyed(&d.path().join("b"), 1);
    k.key_for(
        k.options().key.as_ref().unwrap(),
        crate::format::seal::KeyUse::Seal,
    )
    .unwrap();
    let p = spooled::push_spooled(&b, &put(4), None, false).unwrap();
    let stored = archived_path(&b, &p.name).unwrap();
    assert!(stored.exists());
    let e = format!("{:#}", check_still_plain(&b, [&p]).unwrap_err());
    assert!(e.contains("is encrypted") && e.contains("removed"), "{e}");
    assert!(!stored.exists());
}

#[test]
fn a_spooled_file_damaged_after_it_was_spooled_is_refused_and_stays() {
    let (d, r) = repo();
    let wal = d.path().join("pg_wal");
    let spool = d.path().join("spool");
    fs::create_dir(&wal).unwrap();
    fs::create_dir(&spool).unwrap();
    let name = segment_name_for(1, 3, SEG);
    fs::write(wal.join(&name), segment(1, 3, 77, 700)).unwrap();
    spooled::spool_copy(&wal.join(&name), &spool, None, true).unwrap();
    let copy = spool.join(&name);
    let sum = || spooled::read_spooled_summary(&spool.join(format!("{name}.sum")));
    assert!(sum().is_some());
    // One byte of record data in page 2 (its page header intact).
    let mut b = fs::read(&copy).unwrap();
    b[2 * 8192 + 100] ^= 1;
    fs::write(&copy, &b).unwrap();
    let e = format!(
        "{:#}",
        spooled::push_spooled(&r, &copy, sum(), true).unwrap_err()
    );
    assert!(e.contains("changed since it was copied"), "{e}");
    assert!(!archived_path(&r, &name).unwrap().exists());
    assert!(copy.exists());
    // Put right from pg_wal, it is archived.
    fs::copy(wal.join(&name), &copy).unwrap();
    let p = spooled::push_spooled(&r, &copy, sum(), true).unwrap();
    assert_eq!(p.outcome, Outcome::Archived);
}
