//! Damage markers: `wal/damaged/NAME`, written when a complete segment whose records
//! cannot be decoded is archived (its summary says UNDECODED), before that summary, so
//! no reader sees one without the other. A recovery replaying such a segment stops
//! there as if the WAL ended. Readers find every damaged segment with one listing of
//! `wal/damaged/` (never a request per archived segment); a marker's name counts only
//! when it is a segment name, and its body is bounded, opened like a summary in an
//! encrypted or signed repository, and checked to name that segment.

use super::summary::Summary;
use super::{seal, Envelope, Repo};
use crate::pg::{parse_name, Kind};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Where the markers live.
pub const DIR: &str = "wal/damaged";
/// A stored marker's plain body: a segment name, a note of at most NOTE_MAX bytes
/// (JSON escapes make at most 6 of each) and a BLAKE3, as JSON.
const BODY_MAX: u64 = 8192;
const NOTE_MAX: usize = 1024;
/// Markers whose note is read; past this many, the rest are listed without it.
const READ_MAX: usize = 100;

/// One damaged archived segment (what status, check, verify and restore report).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damaged {
    pub segment: String,
    /// Why its records could not be decoded (as archive-push found it).
    pub note: String,
}

#[derive(Serialize, Deserialize)]
struct Body {
    segment: String,
    note: String,
    /// Of the segment's bytes, hex (its archive header holds the same).
    blake3: String,
}

/// The marker of segment `name`, or None for a name that is not a segment's.
pub fn marker_rel(name: &str) -> Option<String> {
    parse_name(name).filter(|n| n.kind == Kind::Segment)?;
    Some(format!("{DIR}/{name}"))
}

/// The segment a listed marker (its name relative to `wal/damaged/`) names, or None:
/// anything but a bare segment name (a path, another kind of WAL file) is ignored.
pub fn segment_of(listed: &str) -> Option<&str> {
    marker_rel(listed).map(|_| listed)
}

/// Writes segment `s`'s marker when its records could not be decoded (see
/// [`Summary::damage`]); nothing otherwise.
pub(super) fn write(repo: &Repo, s: &Summary) -> Result<()> {
    if s.damage().is_none() {
        return Ok(());
    }
    let rel = marker_rel(&s.segment).expect("a segment name");
    let body = serde_json::to_vec(&Body {
        segment: s.segment.clone(),
        note: bounded(&s.note),
        blake3: hex::encode(s.segment_blake3),
    })?;
    let bytes = match repo.wal_master(false)? {
        Some(m) => seal::seal_bytes(&m, &s.segment, &body),
        None => body,
    };
    if repo.immutable().is_some() {
        // One written before stays: it says the same of the same segment.
        return repo.store().put_new(&rel, &bytes).map(|_| ());
    }
    repo.store().put(&rel, &bytes)
}

/// At most NOTE_MAX bytes of `note`, cut at a character boundary.
fn bounded(note: &str) -> String {
    let mut end = note.len().min(NOTE_MAX);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note[..end].to_string()
}

/// The segments marked damaged, sorted: one listing of `wal/damaged/`.
pub fn names(repo: &Repo) -> Result<Vec<String>> {
    let mut out: Vec<String> = (repo.store().list(DIR)?.into_iter())
        .filter_map(|(k, _)| segment_of(&k).map(str::to_string))
        .collect();
    out.sort();
    Ok(out)
}

/// Every segment marked damaged, with its note (the first READ_MAX read), sorted.
pub fn list(repo: &Repo) -> Result<Vec<Damaged>> {
    let names = names(repo)?;
    let master = repo.wal_master(false).map_err(|e| format!("{e:#}"));
    Ok((names.into_iter().enumerate())
        .map(|(i, segment)| {
            let note = match i < READ_MAX {
                true => note_of(repo, &master, &segment)
                    .unwrap_or_else(|m| format!("its damage marker cannot be read: {m}")),
                false => format!("not read (more than {READ_MAX} segments are marked damaged)"),
            };
            Damaged { segment, note }
        })
        .collect())
}

/// The note of segment `name`'s marker, checked: bounded, authentic where the
/// repository is keyed, and of that segment.
fn note_of(
    repo: &Repo,
    master: &Result<Option<super::WalKey>, String>,
    name: &str,
) -> Result<String, String> {
    let rel = marker_rel(name).expect("a segment name");
    let most = BODY_MAX + seal::overhead_max(BODY_MAX);
    let b = (repo.store().get(&rel, most))
        .map_err(|e| format!("{e:#}"))?
        .ok_or("it was removed while it was read")?;
    let body = match (master, Envelope::of(&b)) {
        (Ok(Some(m)), _) => seal::open_bytes(m, name, &b, BODY_MAX)?,
        (Ok(None), None) => b,
        (Ok(None), Some(e)) => {
            return Err(format!("it is {}, but its repository is not", e.word()))
        }
        (Err(e), _) => return Err(e.clone()),
    };
    let body: Body =
        serde_json::from_slice(&body).map_err(|e| format!("it is not a damage marker: {e}"))?;
    if body.segment != name {
        return Err(format!("it names segment {}", bounded(&body.segment)));
    }
    Ok(bounded(&body.note))
}

/// Where a damaged segment lies against the WAL a set needs to be consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// Between the set's start and stop segments: recovery cannot make it consistent.
    Inside,
    /// Past its stop: point-in-time recovery from it stops there.
    After,
    /// Before its start, or on an older timeline: of no concern to it.
    Before,
}

/// Where segment `name` lies against segments `first..=last` of timeline `tli`
/// (`seg_size`-byte segments). A later timeline's segment from `last` on is after it.
pub fn position(name: &str, tli: u32, first: u64, last: u64, seg_size: u64) -> Position {
    match crate::pg::parse_segment_name(name, seg_size) {
        Some((t, s)) if t == tli && (first..=last).contains(&s) => Position::Inside,
        Some((t, s)) if (t == tli && s > last) || (t > tli && s >= last) => Position::After,
        _ => Position::Before,
    }
}

/// Removes segment `name`'s marker, if any (retention).
pub fn remove(repo: &Repo, name: &str) -> Result<()> {
    match marker_rel(name) {
        Some(rel) => repo.store().delete(&rel),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bare_segment_name_names_a_marker() {
        let seg = "000000010000000000000001";
        assert_eq!(segment_of(seg), Some(seg));
        assert_eq!(marker_rel(seg).unwrap(), format!("wal/damaged/{seg}"));
        for hostile in [
            "../x",
            "wal/damaged/000000010000000000000001/../../y",
            "000000010000000000000001/../../y",
            "sub/000000010000000000000001",
            "000000010000000000000001.zst",
            "000000010000000000000001.partial",
            "00000002.history",
            "00000001000000000000000G",
            "",
            ".000000010000000000000001.1.2.tmp",
        ] {
            assert_eq!(segment_of(hostile), None, "{hostile}");
            assert_eq!(marker_rel(hostile), None, "{hostile}");
        }
    }

    fn damaged_summary(name: &str) -> Summary {
        Summary {
            segment: name.into(),
            segment_blake3: [3; 32],
            major: 15,
            rules: crate::pg::walsummary::RULES,
            seg_start: 0,
            seg_end: 0,
            covered_from: 0,
            end: 0,
            flags: super::super::summary::UNDECODED,
            note: "the record at 0/2000060 fails its CRC".into(),
            rels: Default::default(),
            databases: Default::default(),
            carry: None,
        }
    }

    #[test]
    fn markers_are_written_listed_checked_and_removed() {
        let (d, repo) = crate::repo::temp_repo();
        let root = d.path().join("r");
        let (a, b) = ("000000010000000000000002", "000000010000000000000005");
        let mut fine = damaged_summary(a);
        fine.flags = 0;
        write(&repo, &fine).unwrap();
        assert!(names(&repo).unwrap().is_empty());
        write(&repo, &damaged_summary(a)).unwrap();
        // Hostile names beside it are never read; a marker naming another segment is
        // still a damaged segment, its note not trusted.
        let dir = root.join(DIR);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub").join(a), b"{}").unwrap();
        std::fs::write(dir.join("x"), b"{}").unwrap();
        let other = serde_json::json!({"segment": a, "note": "forged", "blake3": ""});
        std::fs::write(dir.join(b), other.to_string()).unwrap();
        let got = list(&repo).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].segment, a);
        assert_eq!(got[0].note, "the record at 0/2000060 fails its CRC");
        assert_eq!(got[1].segment, b);
        assert!(got[1].note.contains("cannot be read") && got[1].note.contains(a));
        // The longest note, all escapes, still fits its bound.
        let c = "000000010000000000000009";
        let mut long = damaged_summary(c);
        long.note = "\u{1}".repeat(4 * NOTE_MAX);
        write(&repo, &long).unwrap();
        let got = list(&repo).unwrap();
        assert_eq!(got[2].note, "\u{1}".repeat(NOTE_MAX));
        remove(&repo, c).unwrap();
        remove(&repo, a).unwrap();
        remove(&repo, "../x").unwrap();
        assert_eq!(names(&repo).unwrap(), [b]);
        assert!(dir.join("x").exists());
    }

    #[test]
    fn an_encrypted_repository_seals_its_markers() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("r");
        let o = crate::device::object::StoreOptions {
            key: Some(crate::crypt::KeySource::key([9; 32], "test key")),
            ..Default::default()
        };
        let repo = Repo::open(root.to_str().unwrap(), true, &o).unwrap();
        let wal = d.path().join("pg_wal");
        std::fs::create_dir(&wal).unwrap();
        super::super::testing::push_segment(&repo, &wal, 1, 3);
        assert!(repo.encryption().is_some());
        let name = "000000010000000000000007";
        write(&repo, &damaged_summary(name)).unwrap();
        let stored = std::fs::read(root.join(DIR).join(name)).unwrap();
        assert!(stored.starts_with(seal::ENV_MAGIC));
        assert!(!stored.windows(3).any(|w| w == b"CRC"));
        let got = list(&repo).unwrap();
        assert!(got
            .iter()
            .any(|d| d.segment == name && d.note.ends_with("CRC")));
        // Without the key the segment is still named; its note is not read.
        let plain = Repo::open(root.to_str().unwrap(), false, &Default::default()).unwrap();
        let got = list(&plain).unwrap();
        let d = got.iter().find(|d| d.segment == name).unwrap();
        assert!(d.note.contains("cannot be read"), "{}", d.note);
        // Moved under another segment's name, it does not open.
        let other = "000000010000000000000008";
        std::fs::copy(root.join(DIR).join(name), root.join(DIR).join(other)).unwrap();
        let got = list(&repo).unwrap();
        let d = got.iter().find(|d| d.segment == other).unwrap();
        assert!(d.note.contains("cannot be read"), "{}", d.note);
        // key rotate rewraps markers with the rest (a renamed one stops it, as a
        // renamed segment does): they open under the new key.
        std::fs::remove_file(root.join(DIR).join(other)).unwrap();
        let (old, new) = (
            crate::crypt::Master::new([9; 32]),
            crate::crypt::Master::new([4; 32]),
        );
        super::super::rekey(&repo, &old, &new).unwrap();
        let k = crate::repo::RepoKey {
            key_id: new.id,
            kdf: crate::crypt::Kdf::Raw,
            mode: crate::format::seal::KeyUse::Seal,
        };
        repo.set_key(k, None, &new).unwrap();
        let o = crate::device::object::StoreOptions {
            key: Some(crate::crypt::KeySource::key([4; 32], "new key")),
            ..Default::default()
        };
        let rotated = Repo::open(root.to_str().unwrap(), false, &o).unwrap();
        let got = list(&rotated).unwrap();
        let d = got.iter().find(|d| d.segment == name).unwrap();
        assert!(d.note.ends_with("CRC"), "{}", d.note);
    }

    #[test]
    fn positions_against_a_set_s_wal() {
        let seg = 16 << 20;
        let at = |n: &str| position(n, 2, 0x10, 0x12, seg);
        assert_eq!(at("000000020000000000000010"), Position::Inside);
        assert_eq!(at("000000020000000000000012"), Position::Inside);
        assert_eq!(at("000000020000000000000013"), Position::After);
        assert_eq!(at("000000030000000000000012"), Position::After);
        assert_eq!(at("000000020000000000000001"), Position::Before);
        assert_eq!(at("000000010000000000000011"), Position::Before);
        assert_eq!(at("000000010000000000000020"), Position::Before);
        assert_eq!(at("../x"), Position::Before);
    }

    #[test]
    fn a_note_is_cut_at_a_character_boundary() {
        let long = "é".repeat(NOTE_MAX);
        let cut = bounded(&long);
        assert!(cut.len() <= NOTE_MAX && cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded("short"), "short");
    }
}
