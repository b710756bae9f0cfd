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
    let d = tempfile::tempdir().unwrap();
    let r = Repo::open(d.path().join("r").to_str().unwrap(), true).unwrap();
    (d, r)
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
            std::thread::spawn(move || push(&Repo::open(&root, true).unwrap(), &src).unwrap())
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
