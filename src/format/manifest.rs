//! The manifest: the contract between backup and restore, stored (zstd-compressed
//! JSON) at the end of every stripe.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::FormatError;

/// What a set holds: the whole source, what changed since the newest full (diff), or
/// what changed since the newest set of any type (incr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackupType {
    Full,
    Diff,
    Incr,
}

impl BackupType {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupType::Full => "full",
            BackupType::Diff => "diff",
            BackupType::Incr => "incr",
        }
    }
}

impl std::str::FromStr for BackupType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(BackupType::Full),
            "diff" => Ok(BackupType::Diff),
            "incr" => Ok(BackupType::Incr),
            _ => Err(format!("'{s}' is not a set type (full, diff or incr)")),
        }
    }
}

impl std::fmt::Display for BackupType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of source a set was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Files,
    Sqlite,
    Postgres,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Files => "files",
            SourceKind::Sqlite => "sqlite",
            SourceKind::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format_version: u16,
    pub set_id: String,
    pub name: Option<String>,
    pub backup_type: BackupType,
    pub copy_only: bool,
    /// Set when the set was written with `--continue-after-error` and holds known damage.
    #[serde(default)]
    pub damaged: bool,
    pub source: SourceInfo,
    pub codec: String,
    pub block_size: u32,
    pub transfer_size: u32,
    pub page_size: u32,
    pub started: String,
    pub finished: String,
    pub seconds: f64,
    pub stripes: Vec<StripeInfo>,
    pub totals: Totals,
    pub files: Vec<FileEntry>,
    /// Source-specific facts (LSNs, backup_label ...), kept as the source gave them.
    #[serde(default)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceInfo {
    pub kind: SourceKind,
    pub location: String,
    pub database: String,
    #[serde(default)]
    pub identity: BTreeMap<String, String>,
}

impl SourceInfo {
    /// A source with no identity beyond its location (files, sqlite).
    pub fn plain(kind: SourceKind, location: String, database: String) -> SourceInfo {
        SourceInfo {
            kind,
            location,
            database,
            identity: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StripeInfo {
    pub index: u32,
    pub device: String,
    pub frames: u64,
    /// Offset where the stripe's frames end (start of its manifest).
    pub body_end: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Totals {
    pub files: u64,
    /// Bytes read from the source (0 in sets written before it was recorded).
    #[serde(default)]
    pub read_bytes: u64,
    /// Bytes the frames hold before compression.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub pages: u64,
    pub frames: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Link,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    /// Strictly increasing; frames name files by id.
    pub id: u32,
    /// Relative, '/'-separated, never absolute and never with '..'.
    pub path: Box<str>,
    pub kind: EntryKind,
    pub size: u64,
    pub mode: u32,
    pub mtime: i64,
    pub pages: u64,
    /// BLAKE3 over the digests of the file's frames in offset order (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// Frames hold only the changed chunks of the file (a diff or incr that knew them
    /// from the WAL); every other byte is the base chain's. The checksum is then over
    /// the frames present.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<Box<str>>,
}

/// A file's checksum: 32 bytes in memory, 64 hex digits in the manifest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Checksum(pub [u8; 32]);

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl std::fmt::Debug for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Serialize for Checksum {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 64];
        hex::encode_to_slice(self.0, &mut buf).expect("64 hex digits");
        s.serialize_str(std::str::from_utf8(&buf).expect("hex is ASCII"))
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t: std::borrow::Cow<'de, str> = Deserialize::deserialize(d)?;
        let mut b = [0u8; 32];
        match t.len() == 64 && hex::decode_to_slice(t.as_bytes(), &mut b).is_ok() {
            true => Ok(Checksum(b)),
            false => Err(serde::de::Error::custom(
                "a checksum that is not 64 hex digits",
            )),
        }
    }
}

/// The checksum of a file from the digests of its chunks, in offset order.
pub fn file_checksum<'a>(size: u64, chunk_digests: impl Iterator<Item = &'a [u8; 32]>) -> Checksum {
    let mut h = blake3::Hasher::new();
    h.update(&size.to_le_bytes());
    for d in chunk_digests {
        h.update(d);
    }
    Checksum(*h.finalize().as_bytes())
}

/// Where an item of a list is, by its manifest id: the ids sorted and searched, so a
/// lookup costs four bytes an item. A manifest's ids are strictly increasing (checked by
/// `Manifest::validate`), so a list in manifest order needs nothing more; another order
/// keeps each sorted id's position beside it.
#[derive(Debug, Default)]
pub struct IdIndex {
    ids: Vec<u32>,
    /// Sorted position -> the item's position, when the list was not in id order.
    at: Option<Vec<usize>>,
}

impl IdIndex {
    /// The index of a list whose items have these ids, in the list's order.
    pub fn new(ids: impl IntoIterator<Item = u32>) -> IdIndex {
        let mut ids: Vec<u32> = ids.into_iter().collect();
        ids.shrink_to_fit();
        if ids.is_sorted_by(|a, b| a < b) {
            return IdIndex { ids, at: None };
        }
        let mut at: Vec<usize> = (0..ids.len()).collect();
        at.sort_by_key(|&i| ids[i]);
        let sorted = at.iter().map(|&i| ids[i]).collect();
        IdIndex {
            ids: sorted,
            at: Some(at),
        }
    }

    /// The position in the list of the item with id `id`.
    pub fn get(&self, id: u32) -> Option<usize> {
        let k = self.ids.binary_search(&id).ok()?;
        Some(self.at.as_ref().map_or(k, |at| at[k]))
    }

    /// Every id, increasing, with its item's position.
    pub fn iter(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        let at = |k: usize| self.at.as_ref().map_or(k, |at| at[k]);
        self.ids.iter().enumerate().map(move |(k, &id)| (id, at(k)))
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Checks that a manifest path stays inside the directory it is restored to.
pub fn check_relative_path(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("empty path".into());
    }
    if p.starts_with('/') || p.starts_with('\\') || p.contains('\0') || p.contains('\\') {
        return Err(format!("'{p}' is absolute or has a forbidden character"));
    }
    for part in p.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!("'{p}' has an empty, '.' or '..' component"));
        }
    }
    Ok(())
}

impl Manifest {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("manifest serializes")
    }

    /// The manifest's JSON compressed as a stripe stores it, and the JSON's length: the
    /// JSON streams into zstd, so memory holds only the compressed bytes.
    pub fn compressed(&self) -> std::io::Result<(Vec<u8>, u64)> {
        struct Counted<W>(W, u64);
        impl<W: std::io::Write> std::io::Write for Counted<W> {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let n = self.0.write(b)?;
                self.1 += n as u64;
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.0.flush()
            }
        }
        // Readers want a frame that names its size: a first pass counts it.
        let mut count = Counted(std::io::sink(), 0);
        serde_json::to_writer(std::io::BufWriter::new(&mut count), self)?;
        let raw_len = count.1;
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3)?;
        enc.set_pledged_src_size(Some(raw_len))?;
        enc.include_contentsize(true)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 17, Counted(enc, 0));
        serde_json::to_writer(&mut w, self)?;
        let Counted(enc, written) = w.into_inner().map_err(|e| e.into_error())?;
        debug_assert_eq!(written, raw_len);
        Ok((enc.finish()?, raw_len))
    }

    /// Parses and validates a manifest as it is read (decompressed): an error of the
    /// reader is returned apart, as the reader says it.
    pub fn from_reader(r: impl std::io::Read) -> Result<Manifest, Result<FormatError, String>> {
        let r = std::io::BufReader::with_capacity(1 << 16, r);
        let m: Manifest = serde_json::from_reader(r).map_err(|e| match e.is_io() {
            true => Err(std::io::Error::from(e).to_string()),
            false => Ok(FormatError::Manifest(e.to_string())),
        })?;
        m.validate().map_err(Ok)?;
        Ok(m)
    }

    /// Parses and validates a manifest: everything restore relies on is checked here.
    pub fn from_bytes(b: &[u8]) -> Result<Manifest, FormatError> {
        let m: Manifest =
            serde_json::from_slice(b).map_err(|e| FormatError::Manifest(e.to_string()))?;
        m.validate()?;
        Ok(m)
    }

    pub fn validate(&self) -> Result<(), FormatError> {
        let bad = |s: String| Err(FormatError::Manifest(s));
        if !(super::OLDEST_VERSION..=super::NEWEST_VERSION).contains(&self.format_version) {
            return Err(FormatError::Version(self.format_version));
        }
        if !super::valid_transfer_size(self.transfer_size) {
            return bad(format!("transfer size {} out of range", self.transfer_size));
        }
        if !super::valid_block_size(self.block_size) {
            return bad(format!(
                "block size {} is not a power of two from 512 to 1 MiB",
                self.block_size
            ));
        }
        if !super::valid_page_size(self.page_size) {
            return bad(format!(
                "page size {} is not a power of two from {} to {}",
                self.page_size,
                super::PAGE_MIN,
                super::PAGE_MAX
            ));
        }
        if self.stripes.is_empty() || self.stripes.len() > super::STRIPES_MAX as usize {
            return bad(format!("{} stripes", self.stripes.len()));
        }
        for (i, s) in self.stripes.iter().enumerate() {
            if s.index as usize != i {
                return bad(format!("stripe list out of order at {i}"));
            }
        }
        let mut paths = std::collections::HashSet::new();
        let mut links = std::collections::HashSet::new();
        let mut last_id = None;
        for f in &self.files {
            if last_id.is_some_and(|l| f.id <= l) {
                return bad(format!("file ids out of order at '{}'", f.path));
            }
            last_id = Some(f.id);
            check_relative_path(&f.path).or_else(|e| bad(format!("file {}: {e}", f.id)))?;
            if !paths.insert(&*f.path) {
                return bad(format!("file '{}' listed twice", f.path));
            }
            match f.kind {
                EntryKind::Link => {
                    if f.link_target.as_deref().is_none_or(str::is_empty) {
                        return bad(format!("link '{}' has no target", f.path));
                    }
                    links.insert(&*f.path);
                }
                EntryKind::File => {
                    if f.sparse && self.backup_type == BackupType::Full {
                        return bad(format!(
                            "file '{}' is sparse in a full set (a full set holds every chunk)",
                            f.path
                        ));
                    }
                    if f.checksum.is_none() {
                        return bad(format!("file '{}' has no valid checksum", f.path));
                    }
                }
                EntryKind::Dir => {}
            }
        }
        // A path under a restored link could land outside the target.
        for f in &self.files {
            let mut prefix = &*f.path;
            while let Some(cut) = prefix.rfind('/') {
                prefix = &prefix[..cut];
                if links.contains(prefix) {
                    return bad(format!("'{}' lies under the link '{prefix}'", f.path));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A link entry `path` -> `target`.
    pub(crate) fn link(id: u32, path: &str, target: &str) -> FileEntry {
        FileEntry {
            id,
            path: path.into(),
            kind: EntryKind::Link,
            size: 0,
            mode: 0o777,
            mtime: 0,
            pages: 0,
            checksum: None,
            sparse: false,
            link_target: Some(target.into()),
        }
    }

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format_version: 1,
            set_id: "00".repeat(16),
            name: None,
            backup_type: BackupType::Full,
            copy_only: false,
            damaged: false,
            source: SourceInfo {
                kind: SourceKind::Files,
                location: "/x".into(),
                database: "x".into(),
                identity: BTreeMap::new(),
            },
            codec: "none".into(),
            block_size: 512,
            transfer_size: 1 << 20,
            page_size: 8192,
            started: String::new(),
            finished: String::new(),
            seconds: 0.0,
            stripes: vec![StripeInfo {
                index: 0,
                device: "a".into(),
                frames: 0,
                body_end: 0,
            }],
            totals: Totals::default(),
            files: vec![FileEntry {
                id: 0,
                path: "a/b".into(),
                kind: EntryKind::File,
                size: 0,
                mode: 0o644,
                mtime: 0,
                pages: 0,
                checksum: Some(file_checksum(0, std::iter::empty())),
                sparse: false,
                link_target: None,
            }],
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn an_id_index_finds_items_in_any_order() {
        let sorted = IdIndex::new([2, 5, 9]);
        assert_eq!(
            (sorted.get(5), sorted.get(9), sorted.get(4)),
            (Some(1), Some(2), None)
        );
        let shuffled = IdIndex::new([9, 2, 5]);
        assert_eq!(
            (shuffled.get(9), shuffled.get(2), shuffled.get(5)),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!((shuffled.get(3), shuffled.len()), (None, 3));
        let all: Vec<_> = shuffled.iter().collect();
        assert_eq!(all, [(2, 1), (5, 2), (9, 0)]);
        assert!(IdIndex::new([]).is_empty());
    }

    #[test]
    fn paths_that_escape_are_rejected() {
        for p in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "",
            "a\\..\\b",
        ] {
            let mut m = sample();
            m.files[0].path = p.into();
            assert!(m.validate().is_err(), "{p} accepted");
        }
        assert!(sample().validate().is_ok());
    }

    #[test]
    fn file_under_a_link_is_rejected() {
        let mut m = sample();
        m.files.insert(0, link(0, "a", "/tmp"));
        m.files[1].id = 1;
        assert!(m
            .validate()
            .unwrap_err()
            .to_string()
            .contains("under the link"));
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Manifest::from_bytes(&bytes);
        }

        #[test]
        fn mutated_json_never_panics(pos in 0usize..2000, byte in any::<u8>()) {
            let mut b = sample().to_bytes();
            let p = pos % b.len();
            b[p] = byte;
            let _ = Manifest::from_bytes(&b);
        }
    }
}
