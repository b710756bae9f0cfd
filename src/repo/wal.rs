//! The WAL archive of a repository: log backups pushed by `archive_command` and
//! fetched by `restore_command`.
//!
//! ```text
//! REPO/wal/system_identifier             the cluster whose WAL this is (decimal), set by the first segment
//! REPO/wal/TTTTTTTT/NAME.zst             one archived file: a segment (NAME = 24 hex digits), a
//!                                        NAME.partial, TTTTTTTT.history or NAME.XXXXXXXX.backup
//! REPO/wal/TTTTTTTT/.NAME.PID.N.tmp      a push in progress (never read; removed when it ends)
//! ```
//!
//! `TTTTTTTT` is the timeline: the first 8 hex digits of the file name.
//!
//! Every archived file is a valid zstd file (`zstd -d` restores the WAL file without
//! pagevault): a zstd *skippable frame* holding the pagevault header, then one zstd frame
//! (level 1, content size and zstd checksum included). The header, little-endian:
//!
//! ```text
//!   0  u32  0x184D2A5A             zstd skippable frame magic
//!   4  u32  144                    skippable frame length (header size - 8)
//!   8  [8]  "PVWALARC"             pagevault magic
//!  16  u16  1                      format version
//!  18  u8   kind                   1 segment, 2 partial segment, 3 timeline history, 4 backup history
//!  19  u8   codec                  1 zstd
//!  20  u16  name length
//!  22  [64] name                   the WAL file name, zero padded
//!  86  u16  0                      reserved
//!  88  u64  raw size               bytes of the WAL file
//!  96  u64  stored size            bytes of the zstd frame that follows the header
//! 104  [32] BLAKE3                 of the raw bytes
//! 136  u64  system identifier      from the segment's long page header (0 for other kinds)
//! 144  u32  CRC32C                 of the stored bytes
//! 148  u32  CRC32C                 of header bytes 0..148
//! ```
//!
//! A push writes a hidden temp file beside its final name, fsyncs it, links it to the
//! final name only if that name is still free (so a crash or a concurrent push never
//! leaves a half file or overwrites an archived one), then fsyncs the directory.

use super::store::{temp_beside, Temp};
use super::Repo;
use crate::format::{get_u16, get_u32, get_u64};
use crate::pg::{
    format_lsn, parse_name, segment_name, segment_name_for, valid_seg_size, Kind, WalName,
};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// zstd level for archived WAL: fastest useful level, so pg_wal never piles up.
const ZSTD_LEVEL: i32 = 1;
/// Read and decompress in pieces of this size: memory stays bounded for 1 GiB segments.
const CHUNK: usize = 1 << 20;
const SKIP_MAGIC: u32 = 0x184D_2A5A;
const MAGIC: &[u8; 8] = b"PVWALARC";
const VERSION: u16 = 1;
const CODEC_ZSTD: u8 = 1;
const HDR_LEN: usize = 152;
const NAME_MAX: usize = 64;
/// History and backup history files are small text files; refuse anything absurd.
const SMALL_MAX: u64 = 16 << 20;
const SYSID_FILE: &str = "system_identifier";
/// A decimal u64 and a newline; more is damage.
const SYSID_MAX: u64 = 64;

const XLP_LONG_HEADER: u16 = 0x0002;
const XLP_ALL_FLAGS: u16 = 0x0007;
/// sizeof(XLogPageHeaderData) after MAXALIGN, and of the long variant.
const SHORT_PHD: usize = 24;
const LONG_PHD: usize = 40;

/// Where an archived file lives relative to the repository, or None for a name that
/// is not a WAL file name.
fn archived_rel(name: &str) -> Option<String> {
    let n = parse_name(name)?;
    Some(format!("wal/{:08X}/{name}.zst", n.tli))
}

/// The local path of an archived file (whether or not it is there).
#[cfg(test)]
pub fn archived_path(repo: &Repo, name: &str) -> Option<PathBuf> {
    repo.store().local_path(&archived_rel(name)?)
}

/// Whether the archive holds `name` (a segment, or any other archived WAL file).
#[allow(dead_code)] // API for restore and verify (issue 3)
pub fn has_segment(repo: &Repo, name: &str) -> bool {
    archived_rel(name).is_some_and(|r| repo.store().exists(&r).unwrap_or(false))
}

/// Errors about a downloaded copy name the object, not the temp file.
fn relabel(e: anyhow::Error, tmp: &Path, url: &str) -> anyhow::Error {
    anyhow!(
        "{}",
        format!("{e:#}").replace(&tmp.display().to_string(), url)
    )
}

/// Reads archived `rel` from a local file (the archived file itself, or a download
/// into `dir`): `f` gets its path, and its errors name the archived file. None when
/// the archive does not hold it.
fn with_archived<T>(
    repo: &Repo,
    rel: &str,
    dir: &Path,
    f: impl FnOnce(&Path) -> Result<T>,
) -> Result<Option<T>> {
    let Some(local) = repo.store().fetch_to(rel, dir)? else {
        return Ok(None);
    };
    let url = repo.store().describe(rel);
    f(&local.path)
        .map(Some)
        .map_err(|e| relabel(e, &local.path, &url))
}

/// The complete segments archived for `timeline`, sorted (= in WAL order).
#[allow(dead_code)] // API for restore and verify (issue 3)
pub fn list(repo: &Repo, timeline: u32) -> Result<Vec<String>> {
    let mut out: Vec<String> = repo
        .store()
        .list(&format!("wal/{timeline:08X}"))?
        .into_iter()
        .filter_map(|(k, _)| k.strip_suffix(".zst").map(str::to_string))
        .filter(|stem| {
            parse_name(stem).is_some_and(|n| n.kind == Kind::Segment && n.tli == timeline)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Every archived file of every timeline: (WAL file name, stored bytes).
pub fn all_archived(repo: &Repo) -> Result<Vec<(String, u64)>> {
    let mut out = vec![];
    for (rel, size) in repo.store().list("wal")? {
        let (dir, file) = rel.split_once('/').unwrap_or(("", &rel));
        if let Some(stem) = file.strip_suffix(".zst") {
            if parse_name(stem).is_some_and(|n| format!("{:08X}", n.tli) == dir) {
                out.push((stem.to_string(), size));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Removes one archived file (retention).
pub fn remove_archived(repo: &Repo, name: &str) -> Result<()> {
    let rel = archived_rel(name).ok_or_else(|| anyhow!("'{name}' is not a WAL file name"))?;
    repo.store().delete(&rel)
}

/// The segments of `timeline` from the one holding `start_lsn` to the one holding
/// `end_lsn` (both included) that the archive does not hold, in WAL order. Empty when
/// the archive can replay that range (on one timeline; history files are separate).
#[allow(dead_code)] // API for restore and verify (issue 3)
pub fn missing_segments(
    repo: &Repo,
    timeline: u32,
    start_lsn: u64,
    end_lsn: u64,
    seg_size: u64,
) -> Result<Vec<String>> {
    if !valid_seg_size(seg_size) {
        bail!("{seg_size} is not a WAL segment size PostgreSQL uses");
    }
    let have: HashSet<String> = list(repo, timeline)?.into_iter().collect();
    let (first, last) = (start_lsn / seg_size, end_lsn / seg_size);
    Ok((first..=last)
        .map(|s| segment_name_for(timeline, s, seg_size))
        .filter(|n| !have.contains(n))
        .collect())
}

/// The system identifier of the cluster whose WAL the repository archives, once a
/// segment was pushed.
pub fn system_identifier(repo: &Repo) -> Result<Option<u64>> {
    let rel = format!("wal/{SYSID_FILE}");
    let Some(b) = repo.store().get(&rel, SYSID_MAX)? else {
        return Ok(None);
    };
    String::from_utf8_lossy(&b)
        .trim()
        .parse()
        .map(Some)
        .map_err(|_| {
            anyhow!(
                "'{}' is damaged: it should hold the cluster's system identifier",
                repo.store().describe(&rel)
            )
        })
}

// ---------------------------------------------------------------------------------
// The archived file header.

#[derive(Debug, Clone, PartialEq)]
struct Header {
    kind: Kind,
    name: String,
    raw: u64,
    stored: u64,
    blake3: [u8; 32],
    sysid: u64,
    crc: u32,
}

impl Header {
    fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&SKIP_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&((HDR_LEN - 8) as u32).to_le_bytes());
        b[8..16].copy_from_slice(MAGIC);
        b[16..18].copy_from_slice(&VERSION.to_le_bytes());
        b[18] = self.kind.code();
        b[19] = CODEC_ZSTD;
        let name = self.name.as_bytes();
        b[20..22].copy_from_slice(&(name.len() as u16).to_le_bytes());
        b[22..22 + name.len()].copy_from_slice(name);
        b[88..96].copy_from_slice(&self.raw.to_le_bytes());
        b[96..104].copy_from_slice(&self.stored.to_le_bytes());
        b[104..136].copy_from_slice(&self.blake3);
        b[136..144].copy_from_slice(&self.sysid.to_le_bytes());
        b[144..148].copy_from_slice(&self.crc.to_le_bytes());
        let c = crc32c::crc32c(&b[..148]);
        b[148..152].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HDR_LEN {
            return Err(format!(
                "it is {} bytes, shorter than its {HDR_LEN}-byte header",
                b.len()
            ));
        }
        if get_u32(b, 0) != SKIP_MAGIC || &b[8..16] != MAGIC {
            return Err("it does not start with a pagevault WAL archive header".into());
        }
        if crc32c::crc32c(&b[..148]) != get_u32(b, 148) {
            return Err("its header fails its CRC32C".into());
        }
        let ver = get_u16(b, 16);
        if ver != VERSION || get_u32(b, 4) as usize != HDR_LEN - 8 {
            return Err(format!(
                "it has format version {ver}, which this pagevault does not read"
            ));
        }
        let kind = Kind::from_code(b[18]).ok_or("its header names an unknown kind")?;
        if b[19] != CODEC_ZSTD {
            return Err(format!("its header names unknown codec {}", b[19]));
        }
        let nl = get_u16(b, 20) as usize;
        let name = match std::str::from_utf8(&b[22..22 + nl.min(NAME_MAX)]) {
            Ok(n) if nl <= NAME_MAX => n.to_string(),
            _ => return Err("its header holds no valid name".into()),
        };
        Ok(Header {
            kind,
            name,
            raw: get_u64(b, 88),
            stored: get_u64(b, 96),
            blake3: b[104..136].try_into().unwrap(),
            sysid: get_u64(b, 136),
            crc: get_u32(b, 144),
        })
    }
}

// ---------------------------------------------------------------------------------
// WAL page checks.

/// What the first page of a segment says about it.
#[derive(Debug, Clone, Copy)]
struct SegInfo {
    magic: u16,
    sysid: u64,
    blcksz: u64,
    seg_start: u64,
    name_tli: u32,
}

/// Checks the long page header of a segment's first page against the file's name and
/// size. The error says what is wrong, for "'PATH' is not a valid WAL segment: ...".
fn check_first_page(name: &str, n: &WalName, len: u64, page: &[u8]) -> Result<SegInfo, String> {
    if page.len() < LONG_PHD {
        return Err(format!(
            "it is only {len} bytes (a WAL segment is 16 MiB unless initdb chose another size)"
        ));
    }
    let magic = get_u16(page, 0);
    if crate::pg::version_of_wal_magic(magic).is_none() {
        return Err(crate::pg::unknown_wal_magic(magic));
    }
    let info = get_u16(page, 2);
    if info & !XLP_ALL_FLAGS != 0 || info & XLP_LONG_HEADER == 0 {
        return Err(format!(
            "its first page has flags 0x{info:04X}, not a segment's first page (long header)"
        ));
    }
    let tli = get_u32(page, 4);
    let pageaddr = get_u64(page, 8);
    let sysid = get_u64(page, 24);
    let seg_size = get_u32(page, 32) as u64;
    let blcksz = get_u32(page, 36) as u64;
    if !valid_seg_size(seg_size) {
        return Err(format!(
            "its first page gives a segment size of {seg_size} bytes, which PostgreSQL never uses"
        ));
    }
    if !blcksz.is_power_of_two() || !(1024..=65536).contains(&blcksz) {
        return Err(format!(
            "its first page gives a WAL block size of {blcksz} bytes, which PostgreSQL never uses"
        ));
    }
    if len != seg_size {
        let how = if len < seg_size {
            "truncated"
        } else {
            "too long"
        };
        return Err(format!(
            "it is {how}: {len} bytes, but its first page says segments are {seg_size} bytes"
        ));
    }
    let per_id = 0x1_0000_0000 / seg_size;
    if n.seg as u64 >= per_id {
        return Err(format!(
            "its name is not one PostgreSQL gives a segment of {} MiB (last part {:08X} must be \
             below {per_id:08X})",
            seg_size >> 20,
            n.seg
        ));
    }
    let seg_start = (n.log as u64 * per_id + n.seg as u64) * seg_size;
    if pageaddr != seg_start {
        let holds = if pageaddr.is_multiple_of(seg_size) {
            format!(
                ", which belongs in file {}",
                segment_name(n.tli, pageaddr, seg_size)
            )
        } else {
            String::new()
        };
        return Err(format!(
            "its first page is for WAL position {}{holds}, but the file is named {name} (position {})",
            format_lsn(pageaddr),
            format_lsn(seg_start)
        ));
    }
    // The first page of a new timeline's first segment was copied from the old
    // timeline, so its header may carry an older timeline, never a newer one.
    if tli == 0 || tli > n.tli {
        return Err(format!(
            "its first page is from timeline {tli}, but its name says timeline {}",
            n.tli
        ));
    }
    Ok(SegInfo {
        magic,
        sysid,
        blcksz,
        seg_start,
        name_tli: n.tli,
    })
}

/// Checks the header of page `off / blcksz` (not the first) of a complete segment:
/// either zeroed (the tail after pg_switch_wal) or a page of this segment.
fn check_page(s: &SegInfo, off: u64, h: &[u8]) -> Result<(), String> {
    if h[..SHORT_PHD].iter().all(|&b| b == 0) {
        return Ok(());
    }
    let page = off / s.blcksz;
    let magic = get_u16(h, 0);
    if magic != s.magic {
        return Err(format!(
            "page {page} (offset {off}) has magic 0x{magic:04X}, the first page 0x{:04X}",
            s.magic
        ));
    }
    let info = get_u16(h, 2);
    if info & !XLP_ALL_FLAGS != 0 || info & XLP_LONG_HEADER != 0 {
        return Err(format!("page {page} (offset {off}) has flags 0x{info:04X}"));
    }
    let tli = get_u32(h, 4);
    if tli == 0 || tli > s.name_tli {
        return Err(format!(
            "page {page} (offset {off}) is from timeline {tli}, but the file is of timeline {}",
            s.name_tli
        ));
    }
    let addr = get_u64(h, 8);
    if addr != s.seg_start + off {
        return Err(format!(
            "page {page} (offset {off}) is for WAL position {} instead of {} \
             (a stale page of a recycled segment?)",
            format_lsn(addr),
            format_lsn(s.seg_start + off)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Push.

/// What happened to a pushed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Newly archived.
    Archived,
    /// The archive already held the same bytes under that name: nothing done.
    AlreadyArchived,
    /// The archive held that name with the same BLAKE3 in an intact header, but its
    /// stored bytes were damaged: replaced with this (identical) file.
    Repaired,
}

#[derive(Debug, Clone)]
pub struct Pushed {
    pub name: String,
    pub outcome: Outcome,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub seconds: f64,
}

struct CrcWrite<W> {
    inner: W,
    crc: u32,
    n: u64,
}

impl<W: Write> Write for CrcWrite<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(b)?;
        self.crc = crc32c::crc32c_append(self.crc, &b[..k]);
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct CrcRead<R> {
    inner: R,
    crc: u32,
    n: u64,
}

impl<R: Read> Read for CrcRead<R> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(b)?;
        self.crc = crc32c::crc32c_append(self.crc, &b[..k]);
        self.n += k as u64;
        Ok(k)
    }
}

/// Reads until `buf` is full or the end of the file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads the whole source once: checks every page (or the text of a history file),
/// hashes it and feeds `sink` (the compressor), if any. Errors name `src`.
fn scan(
    f: &mut File,
    src: &Path,
    len: u64,
    n: &WalName,
    seg: Option<&SegInfo>,
    mut sink: Option<&mut dyn Write>,
) -> Result<blake3::Hash> {
    let invalid = |what: String| {
        anyhow!(
            "'{}' is not a valid WAL file: {what}; nothing was archived",
            src.display()
        )
    };
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK.min(len.max(1) as usize)];
    let mut off = 0u64;
    loop {
        let k =
            read_full(f, &mut buf).with_context(|| format!("cannot read '{}'", src.display()))?;
        if k == 0 {
            break;
        }
        if off + k as u64 > len {
            bail!(
                "'{}' grew while being read (PostgreSQL archives only complete files); nothing was archived",
                src.display()
            );
        }
        let chunk = &buf[..k];
        match (n.kind, seg) {
            (Kind::Segment, Some(s)) => {
                // Chunks are multiples of the WAL block size, so headers never straddle them.
                let mut p = if off == 0 { s.blcksz } else { 0 };
                while p + SHORT_PHD as u64 <= k as u64 {
                    check_page(s, off + p, &chunk[p as usize..]).map_err(invalid)?;
                    p += s.blcksz;
                }
            }
            (Kind::History | Kind::Backup, _) => {
                if chunk.contains(&0) {
                    return Err(invalid("it holds NUL bytes, not text".into()));
                }
                if off == 0 && n.kind == Kind::Backup && !chunk.starts_with(b"START WAL LOCATION") {
                    return Err(invalid(
                        "a backup history file starts with 'START WAL LOCATION'".into(),
                    ));
                }
            }
            _ => {}
        }
        h.update(chunk);
        if let Some(w) = sink.as_deref_mut() {
            w.write_all(chunk)
                .context("cannot write to the WAL archive")?;
        }
        off += k as u64;
    }
    if off != len {
        bail!(
            "'{}' changed size while being read ({len} bytes, then {off}); nothing was archived",
            src.display()
        );
    }
    Ok(h.finalize())
}

/// Compresses the source into a durable temp file in `dir`; returns it and its header.
fn write_temp(
    dir: &Path,
    f: &mut File,
    src: &Path,
    name: &str,
    len: u64,
    n: &WalName,
    seg: Option<&SegInfo>,
) -> Result<(Temp, Header)> {
    let (tmp, mut out) = temp_beside(dir, name)?;
    let werr = |e: io::Error| anyhow!("cannot write '{}': {e}", tmp.path.display());
    out.write_all(&[0u8; HDR_LEN]).map_err(werr)?;
    let cw = CrcWrite {
        inner: out,
        crc: 0,
        n: 0,
    };
    let mut enc = zstd::stream::write::Encoder::new(cw, ZSTD_LEVEL).map_err(werr)?;
    enc.include_checksum(true).map_err(werr)?;
    enc.include_contentsize(true).map_err(werr)?;
    enc.set_pledged_src_size(Some(len)).map_err(werr)?;
    let hash = scan(f, src, len, n, seg, Some(&mut enc))?;
    let cw = enc.finish().map_err(werr)?;
    let hdr = Header {
        kind: n.kind,
        name: name.to_string(),
        raw: len,
        stored: cw.n,
        blake3: *hash.as_bytes(),
        sysid: seg.map_or(0, |s| s.sysid),
        crc: cw.crc,
    };
    let out = cw.inner;
    out.write_all_at(&hdr.encode(), 0).map_err(werr)?;
    out.sync_all().map_err(werr)?;
    Ok((tmp, hdr))
}

/// Refuses a segment of another cluster. Returns true when the repository has no
/// system identifier yet (the caller records it once the segment is safely written).
fn check_system_identifier(repo: &Repo, sysid: u64, src: &Path) -> Result<bool> {
    let refuse = |theirs: u64, whose: &str| {
        anyhow!(
            "'{}' comes from the cluster with system identifier {sysid}, but repository '{}' \
             {whose} of cluster {theirs}: refused, nothing was archived (use one repository per cluster)",
            src.display(),
            repo.describe()
        )
    };
    match system_identifier(repo)? {
        Some(s) if s == sysid => Ok(false),
        Some(s) => Err(refuse(s, "archives the WAL")),
        None => {
            // No WAL yet: the backups recorded in the catalog, if any, name the cluster.
            if let Ok(sets) = repo.catalog() {
                if let Some(other) = sets
                    .iter()
                    .filter_map(|c| c.system_identifier.as_deref()?.trim().parse::<u64>().ok())
                    .find(|&s| s != sysid)
                {
                    return Err(refuse(other, "holds backups"));
                }
            }
            Ok(true)
        }
    }
}

fn record_system_identifier(repo: &Repo, sysid: u64) -> Result<()> {
    let rel = format!("wal/{SYSID_FILE}");
    if repo
        .store()
        .put_new(&rel, format!("{sysid}\n").as_bytes())?
    {
        return Ok(());
    }
    // Another push recorded it first: it must be the same cluster.
    match system_identifier(repo)? {
        Some(s) if s == sysid => Ok(()),
        s => bail!(
            "'{}' holds system identifier {s:?}, not {sysid}: another cluster archives into this repository",
            repo.store().describe(&rel)
        ),
    }
}

/// Archives one file PostgreSQL hands to archive_command (`%p`).
pub fn push(repo: &Repo, src: &Path) -> Result<Pushed> {
    let t0 = Instant::now();
    let name = src
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("'{}' names no file", src.display()))?
        .to_string();
    let n = parse_name(&name).ok_or_else(|| {
        anyhow!(
            "'{}': '{name}' is not a name PostgreSQL gives a WAL file it archives (24 hex digits, \
             or .partial, .history, .backup); nothing was archived",
            src.display()
        )
    })?;
    let mut f = File::open(src).with_context(|| format!("cannot open '{}'", src.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot stat '{}'", src.display()))?;
    if !meta.is_file() {
        bail!(
            "'{}' is not a regular file; nothing was archived",
            src.display()
        );
    }
    let len = meta.len();
    let mut new_sysid = false;
    let seg = if n.kind.is_segment() {
        let mut page = vec![0u8; (LONG_PHD as u64).min(len) as usize];
        f.read_exact_at(&mut page, 0)
            .with_context(|| format!("cannot read '{}'", src.display()))?;
        let s = check_first_page(&name, &n, len, &page).map_err(|m| {
            anyhow!(
                "'{}' is not a valid WAL segment: {m}; nothing was archived",
                src.display()
            )
        })?;
        new_sysid = check_system_identifier(repo, s.sysid, src)?;
        Some(s)
    } else {
        if len > SMALL_MAX || len == 0 {
            bail!(
                "'{}' is {len} bytes, not a {} file; nothing was archived",
                src.display(),
                if n.kind == Kind::History {
                    "timeline history"
                } else {
                    "backup history"
                }
            );
        }
        None
    };
    let rel = format!("wal/{:08X}/{name}.zst", n.tli);
    let done = |outcome, hdr: &Header| Pushed {
        name: name.clone(),
        outcome,
        raw_bytes: hdr.raw,
        stored_bytes: hdr.stored,
        seconds: t0.elapsed().as_secs_f64(),
    };
    let store = repo.store();
    let stage = std::env::temp_dir();
    // Pushed before (PostgreSQL retries after a crash): the same bytes are fine.
    let have = with_archived(repo, &rel, &stage, |have| {
        let hash = scan(&mut f, src, len, &n, seg.as_ref(), None)?;
        let out = compare_existing(have, &name, len, hash.as_bytes())?;
        Ok((out, read_header(have)?))
    })?;
    if let Some((out, hdr)) = have {
        if out != Outcome::Repaired {
            return Ok(done(out, &hdr));
        }
        use std::io::Seek;
        f.rewind()?;
        let dir = store.stage_dir(&rel)?;
        let (tmp, hdr) = write_temp(&dir, &mut f, src, &name, len, &n, seg.as_ref())?;
        store.put_file(&rel, &tmp.path)?;
        return Ok(done(out, &hdr));
    }
    // Compressed and checked in a durable temp file, then made the archived file only
    // if the name is still free (local: in its final directory, then a link).
    let dir = store.stage_dir(&rel)?;
    let (tmp, hdr) = write_temp(&dir, &mut f, src, &name, len, &n, seg.as_ref())?;
    if new_sysid {
        record_system_identifier(repo, seg.map_or(0, |s| s.sysid))?;
    }
    let created = store.put_new_file(&rel, &tmp.path)?;
    drop(tmp);
    if created {
        return Ok(done(Outcome::Archived, &hdr));
    }
    // A concurrent push of the same name won the race.
    let out = with_archived(repo, &rel, &stage, |have| {
        compare_existing(have, &name, len, &hdr.blake3)
    })?
    .ok_or_else(|| anyhow!("'{}' vanished while being compared", store.describe(&rel)))?;
    Ok(done(out, &hdr))
}

fn read_header(p: &Path) -> Result<Header> {
    let mut b = [0u8; HDR_LEN];
    let mut f = File::open(p).with_context(|| format!("cannot open '{}'", p.display()))?;
    let k = read_full(&mut f, &mut b).with_context(|| format!("cannot read '{}'", p.display()))?;
    Header::decode(&b[..k]).map_err(|m| damaged(p, &m))
}

/// Compares a pushed file with the copy the archive already holds under its name.
fn compare_existing(fin: &Path, name: &str, len: u64, hash: &[u8; 32]) -> Result<Outcome> {
    let hdr = read_header(fin).map_err(|e| {
        anyhow!(
            "{name} is already archived, but {e:#}; it was left as is: check it, remove it and \
             push again"
        )
    })?;
    if hdr.raw != len || &hdr.blake3 != hash || hdr.name != name {
        bail!(
            "{name} is already archived with different content ({} bytes, BLAKE3 {}; this file: \
             {len} bytes, BLAKE3 {}): refused, the archived copy '{}' is unchanged (two clusters \
             archiving into one repository, or a cluster restored without a new timeline?)",
            hdr.raw,
            &hex::encode(hdr.blake3)[..16],
            &hex::encode(hash)[..16],
            fin.display()
        );
    }
    match decode_to(fin, name, &mut io::sink()) {
        Ok(_) => Ok(Outcome::AlreadyArchived),
        Err(_) => Ok(Outcome::Repaired),
    }
}

// ---------------------------------------------------------------------------------
// Get.

fn damaged(p: &Path, what: &str) -> anyhow::Error {
    anyhow!(
        "archived WAL file '{}' is damaged: {what}; it cannot be restored from this archive",
        p.display()
    )
}

/// Decompresses an archived file into `out`, checking the header, the CRC32C of the
/// stored bytes, the size and the BLAKE3 of the restored bytes.
fn decode_to(path: &Path, name: &str, out: &mut dyn Write) -> Result<Header> {
    let mut f = File::open(path).with_context(|| format!("cannot open '{}'", path.display()))?;
    let flen = f.metadata()?.len();
    let mut hb = [0u8; HDR_LEN];
    let k =
        read_full(&mut f, &mut hb).with_context(|| format!("cannot read '{}'", path.display()))?;
    let hdr = Header::decode(&hb[..k]).map_err(|m| damaged(path, &m))?;
    if hdr.name != name {
        return Err(damaged(path, &format!("it holds {}, not {name}", hdr.name)));
    }
    let limit = if hdr.kind.is_segment() {
        1 << 30
    } else {
        SMALL_MAX
    };
    if hdr.raw > limit {
        return Err(damaged(
            path,
            &format!(
                "its header gives {} bytes, over the {limit} a {:?} file may hold",
                hdr.raw, hdr.kind
            ),
        ));
    }
    if flen != HDR_LEN as u64 + hdr.stored {
        return Err(damaged(
            path,
            &format!(
                "it is {flen} bytes, but its header says {}",
                HDR_LEN as u64 + hdr.stored
            ),
        ));
    }
    let mut src = CrcRead {
        inner: (&mut f).take(hdr.stored),
        crc: 0,
        n: 0,
    };
    enum Fail {
        Damaged(String),
        Write(io::Error),
    }
    let mut h = blake3::Hasher::new();
    let mut raw = 0u64;
    let res: Result<(), Fail> = (|| {
        let mut dec = zstd::stream::read::Decoder::new(&mut src)
            .map_err(|e| Fail::Damaged(e.to_string()))?
            .single_frame();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let k = match dec.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fail::Damaged(format!("it does not decompress ({e})"))),
            };
            raw += k as u64;
            if raw > hdr.raw {
                return Err(Fail::Damaged(format!(
                    "it decompresses to more than {} bytes",
                    hdr.raw
                )));
            }
            h.update(&buf[..k]);
            out.write_all(&buf[..k]).map_err(Fail::Write)?;
        }
    })();
    // Finish the CRC over whatever the decoder left, to say which check failed.
    let _ = io::copy(&mut src, &mut io::sink());
    let crc_ok = src.n == hdr.stored && src.crc == hdr.crc;
    match res {
        Err(Fail::Write(e)) => bail!("cannot write the restored WAL file: {e}"),
        _ if !crc_ok => return Err(damaged(path, "its stored bytes fail their CRC32C")),
        Err(Fail::Damaged(m)) => return Err(damaged(path, &m)),
        Ok(()) => {}
    }
    if raw != hdr.raw {
        return Err(damaged(
            path,
            &format!(
                "it decompresses to {raw} bytes, its header says {}",
                hdr.raw
            ),
        ));
    }
    if h.finalize().as_bytes() != &hdr.blake3 {
        return Err(damaged(path, "its restored bytes fail their BLAKE3"));
    }
    Ok(hdr)
}

/// Error of `fetch` when the archive does not hold the name (restore_command's normal
/// "not found").
#[derive(Debug)]
pub struct NotArchived(pub String);

impl std::fmt::Display for NotArchived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotArchived {}

/// Restores archived `name` to `dest` (restore_command's %f and %p), checking every
/// byte. `dest` appears complete or not at all. Returns the bytes restored.
pub fn fetch(repo: &Repo, name: &str, dest: &Path) -> Result<u64> {
    let rel = archived_rel(name).ok_or_else(|| {
        anyhow!("'{name}' is not a WAL file name (24 hex digits, or .partial, .history, .backup)")
    })?;
    let dest_name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("'{}' names no file", dest.display()))?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // Absent is told apart before anything is written (archive-get's exit codes).
    let Some(local) = repo.store().fetch_to(&rel, &dir)? else {
        return Err(NotArchived(format!(
            "{name} is not in the WAL archive of '{}'",
            repo.describe()
        ))
        .into());
    };
    let (tmp, mut out) = temp_beside(&dir, dest_name)?;
    let hdr = decode_to(&local.path, name, &mut out)
        .map_err(|e| relabel(e, &local.path, &repo.store().describe(&rel)))?;
    drop(out);
    fs::rename(&tmp.path, dest).with_context(|| format!("cannot create '{}'", dest.display()))?;
    Ok(hdr.raw)
}

/// The text of an archived timeline history file, checked as fetch checks it;
/// None when the archive does not hold it.
pub fn read_history(repo: &Repo, tli: u32) -> Result<Option<String>> {
    let name = format!("{tli:08X}.history");
    let rel = archived_rel(&name).expect("a history file name");
    let mut text = vec![];
    let got = with_archived(repo, &rel, &std::env::temp_dir(), |p| {
        decode_to(p, &name, &mut text)
    })?;
    if got.is_none() {
        return Ok(None);
    }
    String::from_utf8(text)
        .map(Some)
        .map_err(|_| anyhow!("archived {name} is not text"))
}

/// Checks an archived file as fetch would, writing nothing.
#[allow(dead_code)] // API for restore and verify (issue 3)
pub fn verify(repo: &Repo, name: &str) -> Result<u64> {
    let rel = archived_rel(name).ok_or_else(|| anyhow!("'{name}' is not a WAL file name"))?;
    match with_archived(repo, &rel, &std::env::temp_dir(), |p| {
        decode_to(p, name, &mut io::sink())
    })? {
        Some(h) => Ok(h.raw),
        None => bail!("{name} is not in the WAL archive of '{}'", repo.describe()),
    }
}

/// Synthetic WAL for unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

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

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

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
}
