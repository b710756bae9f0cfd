//! The marker's tests: parsing, tags, ids, authentication of old markers.

use super::*;

const ID: &str = "00112233445566778899aabbccddeeff";

fn key(mode: KeyUse) -> (RepoKey, Master) {
    let master = Master::new([5; 32]);
    let k = RepoKey {
        key_id: master.id,
        kdf: Kdf::Raw,
        mode,
    };
    (k, master)
}

#[test]
fn a_tagged_marker_parses_and_its_tag_covers_every_line_before_it() {
    let (k, master) = key(KeyUse::Sign);
    let other = RepoKey {
        key_id: [9; 16],
        ..k
    };
    for rotating in [None, Some(&other)] {
        let text = k.marker_tagged(ID, rotating, &master);
        let m = Marker::parse(text.as_bytes()).unwrap();
        assert_eq!((m.key, m.rotating), (Some(k), rotating.copied()));
        assert_eq!(m.id.as_deref(), Some(ID));
        let (covered, tag) = m.tag.clone().unwrap();
        assert_eq!(&text[..covered], k.marker(Some(ID), rotating));
        assert!(master.marker_ok(&m.text[..covered], &tag));
        // Any other text, or another key, does not carry that tag.
        let swapped = k.marker(Some(ID), rotating).replace(MODE_SIGN, MODE_SEAL);
        assert!(!master.marker_ok(swapped.as_bytes(), &tag));
        assert!(!Master::new([6; 32]).marker_ok(&m.text[..covered], &tag));
    }
    // Untagged (as written before markers were tagged) and plain.
    let m = Marker::parse(k.marker(None, None).as_bytes()).unwrap();
    assert!(m.key.is_some() && m.tag.is_none() && m.id.is_none());
    let m = Marker::parse(MARKER_HEAD.as_bytes()).unwrap();
    assert!(m.key.is_none() && m.tag.is_none());
}

#[test]
fn an_immutable_marker_names_its_retention_under_its_tag() {
    let plain = format!("{MARKER_HEAD}{}", immutable_line(Some(86400)));
    let m = Marker::parse(plain.as_bytes()).unwrap();
    assert_eq!((m.immutable, m.key), (Some(86400), None));
    let (k, master) = key(KeyUse::Sign);
    let text = k.marker_tagged_of(Some(60), Some(ID), None, &master);
    let m = Marker::parse(text.as_bytes()).unwrap();
    assert_eq!((m.immutable, m.key), (Some(60), Some(k)));
    let (covered, tag) = m.tag.unwrap();
    assert!(master.marker_ok(&m.text[..covered], &tag));
    // The line dropped or changed: the tag no longer matches.
    for forged in [
        text.replace("immutable retain 60\n", ""),
        text.replace("retain 60", "retain 1"),
    ] {
        let f = Marker::parse(forged.as_bytes()).unwrap();
        let (covered, tag) = f.tag.unwrap();
        assert!(!master.marker_ok(&f.text[..covered], &tag), "{forged}");
    }
    for bad in [
        format!("{MARKER_HEAD}immutable retain x\n"),
        format!("{MARKER_HEAD}immutable retain {}\n", RETAIN_MAX + 1),
        format!("{MARKER_HEAD}immutable\n"),
        k.marker_tagged(ID, None, &master)
            .replace("kdf raw\n", "kdf raw\nimmutable retain 5\n"),
    ] {
        assert!(Marker::parse(bad.as_bytes()).is_err(), "{bad:?}");
    }
}

#[test]
fn a_marker_out_of_order_or_with_more_lines_is_refused() {
    let (k, master) = key(KeyUse::Seal);
    let text = k.marker_tagged(ID, None, &master);
    let bad = [
        format!("{text}extra\n"),
        text.trim_end().to_string(),
        text.replacen("pagevault repository 1", "pagevault repository 2", 1),
        text.replacen("key-id", "key-ids", 1),
        text.replacen("mac ", "mac 00", 1),
        format!("{}\n{text}", MODE_SEAL),
        String::new(),
        text.replacen(ID, "0123", 1),
        text.replacen(ID, &ID.to_uppercase(), 1),
        // The id after the rotation line, or twice.
        k.marker_tagged(ID, Some(&k), &master)
            .replacen(&format!("repository-id {ID}\n"), "", 1)
            .replacen("mac ", &format!("repository-id {ID}\nmac "), 1),
        text.replacen("kdf raw\n", &format!("kdf raw\nrepository-id {ID}\n"), 1),
    ];
    for b in bad {
        assert!(Marker::parse(b.as_bytes()).is_err(), "{b:?}");
    }
}

#[test]
fn the_repository_id_is_covered_by_the_tag() {
    let (k, master) = key(KeyUse::Sign);
    let text = k.marker_tagged(ID, None, &master);
    assert!(text.contains(&format!("\nrepository-id {ID}\nmac ")));
    let other = "ffeeddccbbaa99887766554433221100";
    // Another id (or none) under the same tag: the tag fails.
    for forged in [
        text.replacen(ID, other, 1),
        text.replacen(&format!("repository-id {ID}\n"), "", 1),
    ] {
        let f = Marker::parse(forged.as_bytes()).unwrap();
        let (covered, tag) = f.tag.unwrap();
        assert!(!master.marker_ok(&f.text[..covered], &tag), "{forged}");
    }
    // Ids are random and well formed.
    let (a, b) = (new_repo_id(), new_repo_id());
    assert!(is_repo_id(&a) && is_repo_id(&b) && a != b);
    assert!(!is_repo_id("../x") && !is_repo_id(&ID.to_uppercase()));
}

/// A keyed repository opened by path with key `seed`, as a write or a read.
fn open_keyed(path: &Path, seed: u8, write: bool) -> Result<Repo> {
    let options = crate::device::object::StoreOptions {
        key: Some(KeySource::key([seed; 32], "test key")),
        ..Default::default()
    };
    Repo::open(path.to_str().unwrap(), write, &options)
}

#[test]
fn a_keyed_repository_gets_an_id_and_an_older_tagged_marker_gets_one_on_a_write() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let source = KeySource::key([5; 32], "test key");
    let mut ids = vec![];
    for p in [&a, &b] {
        let r = open_keyed(p, 5, true).unwrap();
        assert_eq!(r.id(), None, "plain so far");
        r.key_for(&source, KeyUse::Sign).unwrap();
        let id = r.id().expect("an id with the key");
        assert_eq!(open_keyed(p, 5, false).unwrap().id(), Some(id.clone()));
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "each repository its own");
    // A tagged marker from before ids: a read takes it as it is, a write gives it
    // an id under the tag.
    let (k, master) = key(KeyUse::Sign);
    let old = k.marker_tagged_of(None, None, None, &master);
    std::fs::write(a.join(MARKER), &old).unwrap();
    assert_eq!(open_keyed(&a, 5, false).unwrap().id(), None);
    assert_eq!(std::fs::read_to_string(a.join(MARKER)).unwrap(), old);
    let id = open_keyed(&a, 5, true).unwrap().id().expect("given one");
    assert!(is_repo_id(&id) && id != ids[0]);
    let now = std::fs::read_to_string(a.join(MARKER)).unwrap();
    assert_eq!(now, k.marker_tagged(&id, None, &master));
    assert_eq!(open_keyed(&a, 5, false).unwrap().id(), Some(id.clone()));
    // The id changed under the tag: refused.
    std::fs::write(a.join(MARKER), now.replacen(&id, &ids[1], 1)).unwrap();
    let e = open_keyed(&a, 5, false).err().unwrap().to_string();
    assert!(e.contains("damaged or forged"), "{e}");
    // A marker from before tags (no id) is tagged with a new id by a write.
    std::fs::write(b.join(MARKER), key(KeyUse::Seal).0.marker(None, None)).unwrap();
    let id_b = open_keyed(&b, 5, true).unwrap().id().expect("given one");
    assert!(is_repo_id(&id_b) && id_b != ids[1]);
    assert_eq!(
        std::fs::read_to_string(b.join(MARKER)).unwrap(),
        key(KeyUse::Seal).0.marker_tagged(&id_b, None, &master)
    );
    // An untagged marker naming an id is no marker from before tags.
    std::fs::write(a.join(MARKER), k.marker(Some(&id), None)).unwrap();
    let e = open_keyed(&a, 5, true).err().unwrap().to_string();
    assert!(
        e.contains("names a repository id") && e.contains("forged"),
        "{e}"
    );
}

#[test]
fn key_rotate_keeps_the_id_and_gives_one_to_a_marker_without() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    let r = open_keyed(&a, 5, true).unwrap();
    let (k, master) = key(KeyUse::Seal);
    r.key_for(&KeySource::key([5; 32], "test key"), KeyUse::Seal)
        .unwrap();
    let id = r.id().unwrap();
    let new = Master::new([6; 32]);
    let k2 = RepoKey {
        key_id: new.id,
        ..k
    };
    r.set_key(k, Some(&k2), &master).unwrap();
    r.set_key(k2, None, &new).unwrap();
    assert_eq!(open_keyed(&a, 6, false).unwrap().id(), Some(id));
    std::fs::write(a.join(MARKER), k2.marker_tagged_of(None, None, None, &new)).unwrap();
    let r = open_keyed(&a, 6, false).unwrap();
    assert_eq!(r.id(), None);
    r.set_key(k2, None, &new).unwrap();
    assert!(open_keyed(&a, 6, false).unwrap().id().is_some());
}

/// Issue 53, item 5: a writer that opened the repository plain while another keyed
/// writer made it encrypted and stored a file under the key takes that key, instead
/// of refusing because the repository "holds files without a key".
#[test]
fn a_writer_takes_the_key_another_keyed_writer_gave_the_repository_meanwhile() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("r");
    let source = KeySource::key([7; 32], "test key");
    let late = open_keyed(&p, 7, true).unwrap();
    assert!(late.protection().is_none(), "plain when opened");
    let first = open_keyed(&p, 7, true).unwrap();
    let k = first.key_for(&source, KeyUse::Seal).unwrap();
    first
        .store()
        .put("wal/00000001/000000010000000000000001", b"x")
        .unwrap();
    let took = late.key_for(&source, KeyUse::Seal).unwrap();
    assert_eq!(took.key_id, k.key_id);
    assert_eq!(late.id(), first.id());
    // Another key is still refused.
    let other = open_keyed(&p, 7, true).unwrap();
    let e = other
        .key_for(&KeySource::key([8; 32], "other key"), KeyUse::Seal)
        .unwrap_err()
        .to_string();
    assert!(
        !e.contains("encryption starts with a new repository"),
        "{e}"
    );
}
