use super::testing::*;
use super::*;

fn summary_of(segs: &[Vec<u8>], i: usize, prev: Option<&Summary>) -> Summary {
    let name = segment_name_for(1, 2 + i as u64, SEG as u64);
    summarize(&name, [i as u8; 32], &segs[i], BLK, 17, prev)
}

#[test]
fn rules_carry_and_round_trip() {
    let recs = vec![
        heap(100, &[1, 2, 3]),
        truncate(100, 2),
        heap(100, &[7]),
        create_db(16400),
        heap(200, &[0]),
        big(2 * SEG),
        heap(300, &[9, 10]),
    ];
    let segs = segments(&recs, 2, 3);
    let s0 = summary_of(&segs, 0, None);
    assert!(s0.usable(), "{}", s0.note);
    let e = &s0.rels[&RelFork {
        file: rel(100),
        fork: 0,
    }];
    // Truncated to 2: blocks 2 and 3 forgotten, 7 marked after it.
    assert_eq!(e.limit, Some(2));
    assert_eq!(e.blocks.iter().collect::<Vec<_>>(), [1, 7]);
    let vm = &s0.rels[&RelFork {
        file: rel(100),
        fork: 2,
    }];
    assert_eq!(vm.limit, Some(1));
    assert!(s0.databases.contains(&(1663, 16400)));
    let c = s0.carry.as_ref().expect("the big record is carried");
    assert_eq!(s0.end, c.lsn);
    // The big record runs through segment 1 and ends in 2, then relation 300.
    let s1 = summary_of(&segs, 1, Some(&s0));
    assert!(s1.usable() && s1.rels.is_empty(), "{s1:?}");
    assert!(s1.carry.as_ref().unwrap().bytes.len() > SEG);
    let s2 = summary_of(&segs, 2, Some(&s1));
    assert!(s2.usable() && s2.covered_from == s2.seg_start);
    assert!(s2.rels.contains_key(&RelFork {
        file: rel(300),
        fork: 0
    }));
    // Without the previous summary the head is not covered.
    let alone = summary_of(&segs, 2, None);
    assert!(!alone.usable() && alone.flags & HEAD_SKIPPED != 0);
    assert!(alone.covered_from > alone.seg_start);
    // With another segment's summary: its carry does not continue this record.
    let wrong = summary_of(&segs, 2, Some(&s0));
    assert!(
        !wrong.usable() && wrong.flags & HEAD_SKIPPED != 0,
        "{wrong:?}"
    );

    // The union: limits and marks in order, gaps named.
    let mut m = BlockMap::new();
    for s in [&s0, &s1, &s2] {
        m.add(s);
    }
    assert!(m.complete(), "{:?}", m.gaps);
    assert!(m.may_have_changed(rel(100), 0, 7) && m.may_have_changed(rel(100), 0, 2));
    assert!(!m.may_have_changed(rel(100), 0, 0) && !m.may_have_changed(rel(200), 0, 1));
    assert!(m.may_have_changed(rel(300), 0, 10));
    assert!(
        m.changed(
            RelFile {
                spc: 1663,
                db: 16400,
                rel: 1
            },
            0
        )
        .whole
    );
    let mut g = BlockMap::new();
    g.add(&s0);
    g.add(&s2);
    assert!(
        !g.complete() && g.gaps[0].contains("not summarized"),
        "{:?}",
        g.gaps
    );

    // Stored form: round trip, every header byte and the body checked.
    for s in [&s0, &s1, &s2] {
        assert_eq!(&Summary::decode(&s.encode()).unwrap(), s);
    }
    let b = s0.encode();
    for i in 0..HDR {
        let mut c = b.clone();
        c[i] ^= 0x04;
        assert!(Summary::decode(&c).is_err(), "header byte {i}");
    }
    let mut c = b.clone();
    let last = c.len() - 1;
    c[last] ^= 1;
    assert!(Summary::decode(&c).unwrap_err().contains("CRC32C"));
    assert!(Summary::decode(&b[..b.len() - 1]).is_err());
}

/// Re-wraps a body with a valid header and CRCs (a well-formed file whose content
/// lies).
fn wrap(s: &Summary, body: &[u8]) -> Vec<u8> {
    let mut b = s.encode();
    b.truncate(HDR);
    let stored = zstd::bulk::compress(body, 1).unwrap();
    b[108..116].copy_from_slice(&(body.len() as u64).to_le_bytes());
    b[116..124].copy_from_slice(&(stored.len() as u64).to_le_bytes());
    b[124..128].copy_from_slice(&crc32c::crc32c(&stored).to_le_bytes());
    let c = crc32c::crc32c(&b[..128]);
    b[128..132].copy_from_slice(&c.to_le_bytes());
    b.extend_from_slice(&stored);
    b
}

#[test]
fn lying_counts_are_refused_before_allocating() {
    let segs = segments(&[heap(100, &[1, 2])], 2, 1);
    let s = summary_of(&segs, 0, None);
    let enc = s.encode();
    let body = zstd::bulk::decompress(&enc[HDR..], 1 << 20).unwrap();
    assert_eq!(Summary::decode(&wrap(&s, &body)).unwrap(), s);
    // The relation fork count (after 4 u64, 2 u32, the note, the database count).
    let at = 40 + 4 + s.note.len() + 4;
    let mut lie = body.clone();
    lie[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = Summary::decode(&wrap(&s, &lie)).unwrap_err();
    assert!(
        e.contains("relation fork count") && e.contains(&format!("offset {at}")),
        "{e}"
    );
    // A bitmap length past the body.
    let mut lie = body.clone();
    let blen = at + 4 + 18;
    lie[blen..blen + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let e = Summary::decode(&wrap(&s, &lie)).unwrap_err();
    assert!(e.contains("bitmap length"), "{e}");
    // Trailing bytes.
    let mut lie = body.clone();
    lie.push(0);
    assert!(Summary::decode(&wrap(&s, &lie))
        .unwrap_err()
        .contains("after its end"));
    // A body size over the bound in the header.
    let mut b = enc.clone();
    b[108..116].copy_from_slice(&(BODY_MAX + 1).to_le_bytes());
    let c = crc32c::crc32c(&b[..128]);
    b[128..132].copy_from_slice(&c.to_le_bytes());
    assert!(Summary::decode(&b).unwrap_err().contains("over the"));
}

#[test]
fn minimal_wal_and_unknown_releases_are_unusable() {
    let mut pc: Vec<u8> = [100u32, 8, 10, 0, 64, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    pc.extend([0, 0]);
    let segs = segments(
        &[heap(1, &[1]), record(0, 0x60, &[], &pc), heap(1, &[2])],
        2,
        2,
    );
    let s0 = summary_of(&segs, 0, None);
    assert!(!s0.usable() && s0.flags & (MINIMAL | END_MINIMAL) == MINIMAL | END_MINIMAL);
    assert!(s0.note.contains("minimal"));
    // The next segment starts at minimal too.
    let s1 = summary_of(&segs, 1, Some(&s0));
    assert!(s1.flags & MINIMAL != 0);
    let old = summarize("000000010000000000000002", [0; 32], &segs[0], BLK, 13, None);
    assert!(!old.usable() && old.note.contains("PostgreSQL 13"));
}

#[test]
fn the_damage_warning_reads_as_one_sentence() {
    let segs = segments(&[heap(100, &[1])], 2, 1);
    let mut s = summary_of(&segs, 0, None);
    assert!(s.damage().is_none());
    s.flags |= UNDECODED;
    s.note = "the record at 0/2000060 fails its CRC".into();
    let w = s.damage().unwrap();
    assert!(!w.contains("  "), "{w}");
    assert!(w.contains(&s.segment) && w.contains(&s.note), "{w}");
}

#[test]
fn a_summary_completed_with_its_previous_one_is_the_summary_made_with_it() {
    // Bytes of WAL records segment 0 holds: pages less their headers.
    let room = SEG - (SEG / BLK) * 24 - 16;
    let long_heap = record(10, 0, &[(rel(7), 0, 5), (rel(7), 0, 35)], &[7; 20_000]);
    let heads = [
        long_heap,
        heap(7, &[36, 2]),
        truncate(7, 3),
        create_db(9),
        big(SEG + 100),
    ];
    let mut merged = 0;
    for head in &heads {
        for back in [8usize, 24, 40, 200, 5_000, 16_000] {
            // A filler ends `back` bytes before segment 0 ends; `head` starts there.
            let recs = vec![
                big(room - back - 29),
                head.clone(),
                truncate(7, 30),
                heap(8, &[1]),
                create_db(10),
            ];
            let segs = segments(&recs, 2, 3);
            let mut prev = summary_of(&segs, 0, None);
            for i in 1..3 {
                let serial = summary_of(&segs, i, Some(&prev));
                let alone = summary_of(&segs, i, None);
                if alone.flags & HEAD_SKIPPED != 0 && serial.usable() {
                    merged += 1;
                }
                let done = continue_from(alone, &segs[i], BLK, &prev);
                assert_eq!(
                    done,
                    serial,
                    "head {} bytes, {back} back, segment {i}",
                    head.len()
                );
                prev = serial;
            }
        }
    }
    // The merge itself was exercised, not only the summaries made again.
    assert!(merged >= 10, "{merged}");
}
