use super::plan::{parse_duration, window_start};
use super::*;
use chrono::{DateTime, Duration, Utc};

fn t0() -> DateTime<Utc> {
    // A Wednesday.
    DateTime::parse_from_rfc3339("2026-05-13T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A set that ran for an hour, ending `hours` after t0.
fn set(id: &str, ty: &str, base: Option<&str>, hours: i64, wal: &str) -> CatalogEntry {
    let end = t0() + Duration::hours(hours);
    CatalogEntry {
        set_id: id.into(),
        name: None,
        backup_type: ty.parse().unwrap(),
        copy_only: false,
        damaged: false,
        base_set: base.map(Into::into),
        source_kind: crate::format::manifest::SourceKind::Postgres,
        database: "db".into(),
        system_identifier: None,
        timeline: Some(1),
        start_lsn: None,
        stop_lsn: None,
        start_wal: Some(wal.into()),
        stop_wal: None,
        started: (end - Duration::hours(1)).to_rfc3339(),
        finished: end.to_rfc3339(),
        seconds: 3600.0,
        read_bytes: None,
        raw_bytes: 10,
        stored_bytes: 10,
        codec: "none".into(),
        stripes: vec![],
        stripe_versions: vec![],
        base_version: None,
        change_rules: None,
    }
}

fn keep_full(n: u32) -> Rules {
    Rules {
        keep_full: n,
        ..Rules::default()
    }
}

#[test]
fn keeps_newest_fulls_and_their_diffs() {
    let sets = vec![
        set("f1", "full", None, 1, "000000010000000000000002"),
        set("d1", "diff", Some("f1"), 2, "000000010000000000000004"),
        set("f2", "full", None, 3, "000000010000000000000006"),
        set("d2", "diff", Some("f2"), 4, "000000010000000000000008"),
        set("f3", "full", None, 5, "00000001000000000000000A"),
    ];
    let p = plan(&sets, &keep_full(2), t0());
    assert_eq!(p.keep, vec!["f2", "d2", "f3"]);
    assert_eq!(p.expire, vec!["f1", "d1"]);
    assert_eq!(p.wal_from.as_deref(), Some("000000010000000000000006"));
    assert_eq!(p.window_set.as_deref(), Some("f2"));
    assert!(
        p.decisions[2].why.contains("--keep-full 2"),
        "{:?}",
        p.decisions
    );
    assert!(
        p.decisions[1].why.contains("older than f2"),
        "{:?}",
        p.decisions
    );
    assert!(wal_expired(
        "000000010000000000000005",
        "000000010000000000000006"
    ));
    assert!(!wal_expired(
        "000000010000000000000006",
        "000000010000000000000006"
    ));
    assert!(!wal_expired("00000001.history", "000000010000000000000006"));
    // A later timeline's old-numbered segment may still be needed.
    assert!(!wal_expired(
        "000000020000000000000005",
        "000000010000000000000006"
    ));
    let all = plan(&sets, &keep_full(5), t0());
    assert!(all.expire.is_empty());
}

#[test]
fn damaged_full_does_not_count() {
    let mut sets = vec![
        set("f1", "full", None, 1, "000000010000000000000002"),
        set("f2", "full", None, 3, "000000010000000000000006"),
    ];
    sets[1].damaged = true;
    let p = plan(&sets, &keep_full(1), t0());
    assert_eq!(p.keep, vec!["f1", "f2"]);
    assert!(p.expire.is_empty());
    // Without a good full nothing goes.
    sets[0].damaged = true;
    let p = plan(&sets, &keep_full(1), t0());
    assert!(p.expire.is_empty() && p.window_set.is_none());
}

#[test]
fn keep_within_keeps_the_full_before_the_window() {
    // Fulls ending day 0, 2, 4, 6 (hours 0, 48, ...), an incr after each.
    let mut sets = vec![];
    for d in 0..4 {
        let f = format!("f{d}");
        sets.push(set(
            &f,
            "full",
            None,
            d * 48,
            &format!("0000000100000000000000{:02X}", d * 8 + 2),
        ));
        sets.push(set(
            &format!("i{d}"),
            "incr",
            Some(&f),
            d * 48 + 24,
            &format!("0000000100000000000000{:02X}", d * 8 + 5),
        ));
    }
    let now = t0() + Duration::hours(6 * 24 + 1);
    // 3 days back lands between f1 (day 2) and f2 (day 4): f1 is the window's first.
    let r = Rules {
        keep_within: Some(parse_duration("3d").unwrap()),
        ..Rules::default()
    };
    let p = plan(&sets, &r, now);
    assert_eq!(p.keep, vec!["f1", "i1", "f2", "i2", "f3", "i3"]);
    assert_eq!(p.window_set.as_deref(), Some("f1"));
    assert_eq!(p.window_start.as_deref(), Some(sets[2].finished.as_str()));
    assert_eq!(p.wal_from.as_deref(), Some("00000001000000000000000A"));
    assert!(
        p.decisions[2].why.contains("--keep-within"),
        "{:?}",
        p.decisions[2]
    );
    // At exactly the end of f1 it still is the window's first; a second earlier, f0.
    let at = super::plan::finished(&sets[2]).unwrap() + Duration::days(3);
    assert_eq!(plan(&sets, &r, at).window_set.as_deref(), Some("f1"));
    let before = at - Duration::seconds(1);
    assert_eq!(plan(&sets, &r, before).window_set.as_deref(), Some("f0"));
    // Inside the window everything: the oldest full is the first.
    let all = plan(
        &sets,
        &Rules {
            keep_within: Some(100 * 86400),
            ..Rules::default()
        },
        now,
    );
    assert!(all.expire.is_empty());
    // The union with --keep-full: the older of the two firsts.
    let both = Rules {
        keep_full: 4,
        ..r.clone()
    };
    assert_eq!(plan(&sets, &both, now).window_set.as_deref(), Some("f0"));
}

#[test]
fn grandfather_father_son() {
    // A full every day at noon for 70 days up to t0 + 69 days (a Tuesday, 2026-07-21).
    let sets: Vec<CatalogEntry> = (0..70)
        .map(|d| {
            set(
                &format!("f{d:02}"),
                "full",
                None,
                d * 24,
                &format!("000000010000000{d:09X}"),
            )
        })
        .collect();
    let now = t0() + Duration::days(69) + Duration::hours(1);
    let r = Rules {
        keep_daily: 3,
        keep_weekly: 2,
        keep_monthly: 3,
        ..Rules::default()
    };
    let p = plan(&sets, &r, now);
    // Days: 07-21, 07-20, 07-19; weeks: this one (newest: today), the week of 07-13..19
    // (07-19, Sunday); months: July (today), June (06-30), May (05-31).
    let want = ["f18", "f48", "f67", "f68", "f69"];
    let mut kept = p.keep.clone();
    kept.sort();
    let mut want: Vec<&str> = want.to_vec();
    want.sort();
    assert_eq!(
        kept,
        want,
        "{:?}",
        p.decisions.iter().filter(|d| d.keep).collect::<Vec<_>>()
    );
    let f48 = p.decisions.iter().find(|d| d.set_id == "f48").unwrap();
    assert!(f48.why.contains("month 2026-06"), "{f48:?}");
    let f67 = p.decisions.iter().find(|d| d.set_id == "f67").unwrap();
    assert!(f67.why.contains("day 2026-07-19"), "{f67:?}");
    // Only the newest full's WAL is kept: the others restore to their end alone.
    assert_eq!(p.window_set.as_deref(), Some("f69"));
    assert_eq!(p.wal_from, sets[69].start_wal);
}

#[test]
fn durations() {
    assert_eq!(parse_duration("14d"), Ok(14 * 86400));
    assert_eq!(parse_duration("2w"), Ok(14 * 86400));
    assert_eq!(parse_duration("90m"), Ok(5400));
    assert!(parse_duration("14").is_err());
    assert!(parse_duration("d").is_err());
    assert!(parse_duration("99999999999999999d").is_err());
}

#[test]
fn window_starts_where_the_archive_holds_the_wal() {
    let sets = vec![
        set("f1", "full", None, 1, "000000010000000000000002"),
        set("f2", "full", None, 3, "000000010000000000000006"),
    ];
    let holds = |n: &str| n >= "000000010000000000000005";
    assert_eq!(window_start(&sets, true, holds).unwrap().set_id, "f2");
    assert_eq!(window_start(&sets, false, holds).unwrap().set_id, "f1");
    assert_eq!(window_start(&sets, true, |_| true).unwrap().set_id, "f1");
}

#[test]
fn an_immutable_repository_keeps_what_its_retention_and_its_held_sets_need() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("r").display().to_string();
    let o = crate::device::object::StoreOptions::default();
    let repo = Repo::init(&spec, &o, Some(3600), crate::format::seal::KeyUse::Seal).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    let age = |rel: &str| {
        let p = d.path().join("r").join(rel);
        let f = std::fs::File::options().write(true).open(p).unwrap();
        f.set_modified(old).unwrap();
    };
    // WAL 1..6, all past the retention; a set held by it (fresh) starting at 3, and
    // the newest full at 6.
    for seg in 1..=6 {
        let rel = format!("wal/00000001/0000000100000000000000{seg:02}.zst");
        repo.store().put_new(&rel, b"x").unwrap();
        age(&rel);
    }
    // Segments 1 and 4 were archived damaged: their markers go with them.
    let marker = |seg: u32| format!("wal/damaged/0000000100000000000000{seg:02}");
    for seg in [1, 4] {
        repo.store().put_new(&marker(seg), b"{}").unwrap();
        age(&marker(seg));
    }
    let (f1, f2) = ("1".repeat(32), "2".repeat(32));
    for (id, h, wal) in [(&f1, 1, 3), (&f2, 3, 6)] {
        let mut e = set(
            id,
            "full",
            None,
            h,
            &format!("0000000100000000000000{wal:02}"),
        );
        e.stripes = vec![format!("sets/{id}/1.pv")];
        repo.store().put_new(&e.stripes[0], b"stripe").unwrap();
        repo.record(&e).unwrap();
    }
    let opts = ExpireOptions {
        repo: spec.clone(),
        rules: keep_full(1),
        dry_run: false,
        store: o,
    };
    let r = expire(&opts).unwrap();
    assert!(r.expired.is_empty(), "{r:?}");
    assert_eq!(r.locked[0].set_id, f1);
    assert!(r.locked[0].locked_until.is_some());
    // 1 and 2 go; 3..5 stay, set f1 (still listed) needs them.
    assert_eq!(r.wal_expired.len(), 2, "{r:?}");
    assert_eq!(
        (r.wal_locked, &r.wal_locked_until),
        (3, &r.locked[0].locked_until)
    );
    assert_eq!(repo.catalog().unwrap().len(), 2);
    assert!(repo.store().exists(&format!("sets/{f1}/1.pv")).unwrap());
    assert!(!repo
        .store()
        .exists("wal/00000001/000000010000000000000002.zst")
        .unwrap());
    assert!(repo
        .store()
        .exists("wal/00000001/000000010000000000000003.zst")
        .unwrap());
    assert!(!repo.store().exists(&marker(1)).unwrap());
    assert!(repo.store().exists(&marker(4)).unwrap());
    // Once the set's objects are past it too, the set and its WAL go.
    age(&format!("sets/{f1}/1.pv"));
    age(&format!("catalog/{f1}.json"));
    let r = expire(&opts).unwrap();
    assert_eq!(r.expired, std::slice::from_ref(&f1), "{r:?}");
    assert_eq!((r.wal_expired.len(), r.wal_locked), (3, 0), "{r:?}");
    assert_eq!(repo.catalog().unwrap().len(), 1);
    assert!(!repo.store().exists(&marker(4)).unwrap());
}

#[test]
fn a_set_recorded_while_expire_ran_keeps_its_chain() {
    let (_d, repo) = crate::repo::temp_repo();
    let id = |c: char| c.to_string().repeat(32);
    let (f1, i1, f2, n) = (id('a'), id('b'), id('c'), id('d'));
    let rec = |id: &str, ty, base: Option<&str>, h, wal| CatalogEntry {
        stripes: vec![format!("sets/{id}/1.pv")],
        stripe_versions: vec![],
        base_version: None,
        change_rules: None,
        ..set(id, ty, base, h, wal)
    };
    let sets = vec![
        rec(&f1, "full", None, 0, "000000010000000000000002"),
        rec(&i1, "incr", Some(&f1), 1, "000000010000000000000004"),
        rec(&f2, "full", None, 2, "000000010000000000000006"),
    ];
    for s in &sets {
        repo.record(s).unwrap();
    }
    let expired = sets[..2].to_vec();
    assert!(chains_of_new(&repo, &sets, &expired).unwrap().is_empty());
    // An incr on i1 recorded after the catalog was read: i1 and its base f1 stay.
    let new = rec(&n, "incr", Some(&i1), 3, "000000010000000000000008");
    repo.record(&new).unwrap();
    assert_eq!(chains_of_new(&repo, &sets, &expired).unwrap(), [i1, f1]);
}
