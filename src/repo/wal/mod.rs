//! The WAL archive of a repository: log backups pushed by `archive_command` and
//! fetched by `restore_command`.
//!
//! ```text
//! REPO/wal/system_identifier             the cluster whose WAL this is (decimal), set by the first segment
//! REPO/wal/TTTTTTTT/NAME.zst             one archived file: a segment (NAME = 24 hex digits), a
//!                                        NAME.partial, TTTTTTTT.history or NAME.XXXXXXXX.backup
//! REPO/wal/TTTTTTTT/NAME.sum             the block summary of segment NAME (summary.rs; docs/FORMAT.md)
//! REPO/wal/damaged/NAME                  segment NAME was archived with records that cannot be decoded (damaged.rs)
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
//! A reader takes the limits from the name it asked for, never from the header alone:
//! the header's kind must be the name's, the raw size at most the largest file of that
//! kind (`pg::max_file_size`: 1 GiB for a segment, 16 MiB for a history file), the stored
//! size at most what zstd makes of it; an object is downloaded to a temp file, streamed,
//! and refused past that size.
//!
//! A push writes a hidden temp file beside its final name, fsyncs it, links it to the
//! final name only if that name is still free (so a crash or a concurrent push never
//! leaves a half file or overwrites an archived one), then fsyncs the directory.

use super::store::{sync_dir, temp_beside, Temp};
use super::Repo;
use crate::crypt::{load::GIVE_KEY, show_id};
use crate::format::{get_u16, get_u32, get_u64};
use crate::pg::walpage::{check_first_page, check_page, SegInfo, LONG_PHD, SHORT_PHD};
use crate::pg::{parse_name, segment_name_for, valid_seg_size, Kind, WalName};
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
const SYSID_FILE: &str = "system_identifier";
/// A decimal u64 and a newline; more is damage.
const SYSID_MAX: u64 = 64;

/// Where an archived file lives relative to the repository, or None for a name that
/// is not a WAL file name.
pub fn archived_rel(name: &str) -> Option<String> {
    let n = parse_name(name)?;
    Some(format!("wal/{:08X}/{name}.zst", n.tli))
}

/// The local path of an archived file (whether or not it is there).
#[cfg(test)]
pub fn archived_path(repo: &Repo, name: &str) -> Option<PathBuf> {
    repo.store().local_path(&archived_rel(name)?)
}

/// Whether the archive holds `name` (a segment, or any other archived WAL file).
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

/// The largest archived file of WAL file `name`: the header and a zstd frame of the
/// largest file of its kind (pg::max_file_size) at the worst ratio.
fn archived_max(name: &str) -> u64 {
    let raw = parse_name(name).map_or(0, |n| crate::pg::max_file_size(n.kind));
    HDR_LEN as u64 + zstd::zstd_safe::compress_bound(raw as usize) as u64
}

/// The largest object of WAL file `name` in `repo`: its envelope's too when encrypted
/// or signed.
fn stored_max(repo: &Repo, name: &str) -> u64 {
    let plain = archived_max(name);
    match repo.protection() {
        Some(_) => plain + seal::overhead_max(plain),
        None => plain,
    }
}

/// The plain copy of a local archived file (`path`, object `rel`): the file itself in
/// a plain repository, a temp file in `dir` opened from its envelope (every chunk
/// authenticated) in an encrypted or signed one. A plain file in an encrypted
/// repository, or in a signed one read with its key, is refused; so is an envelope in a
/// plain repository, or a signed one read without a key.
fn plain_copy(repo: &Repo, rel: &str, path: &Path, dir: &Path, most: u64) -> Result<Option<Temp>> {
    let object = rel.rsplit('/').next().unwrap_or(rel);
    let env = seal::envelope_of(path)?;
    match (repo.wal_master(false)?, env) {
        (None, None) => Ok(None),
        (Some(k), Some(_)) => seal::open_file(&k, object, path, dir, most).map(Some),
        (Some(k), None) => Err(damaged(
            path,
            &match k.env {
                Envelope::Seal => {
                    "it is not encrypted, but its repository is: forged, or put there by hand"
                        .to_string()
                }
                Envelope::Sign => format!(
                    "it is not signed, but its repository is (key id {}): forged, put there by hand, \
                     or archived before the repository was signed",
                    show_id(&k.master.id)
                ),
            },
        )),
        (None, Some(Envelope::Sign)) if repo.signing().is_some() => Err(damaged(
            path,
            &format!(
                "it is signed with key id {}, and no key was given to check it: {GIVE_KEY}",
                seal::file_key_id(path)?.unwrap_or_default()
            ),
        )),
        (None, Some(e)) => Err(damaged(
            path,
            &format!(
                "it is {}, but its repository is not (its marker names no key)",
                e.word()
            ),
        )),
    }
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
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let max = archived_max(name.strip_suffix(".zst").unwrap_or(name));
    let stored = stored_max(repo, name.strip_suffix(".zst").unwrap_or(name));
    let Some(local) = repo.store().fetch_to(rel, dir, stored)? else {
        return Ok(None);
    };
    let url = repo.store().describe(rel);
    let plain =
        plain_copy(repo, rel, &local.path, dir, max).map_err(|e| relabel(e, &local.path, &url))?;
    let path = plain.as_ref().map_or(&local.path, |t| &t.path);
    f(path).map(Some).map_err(|e| {
        let e = relabel(e, path, &url);
        relabel(e, &local.path, &url)
    })
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

/// When archived WAL file `name` was stored; None when the archive does not hold it.
pub fn archived_at(repo: &Repo, name: &str) -> Result<Option<std::time::SystemTime>> {
    match archived_rel(name) {
        Some(rel) => repo.store().modified(&rel),
        None => Ok(None),
    }
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

/// `key rotate`: every sealed or signed archived file, summary and damage marker of a
/// repository on a filesystem rewrapped from `old` to `new`; returns (rewritten, already
/// new). A signed repository's plain files (archived before its signing) are left as
/// they are.
pub fn rekey(
    repo: &Repo,
    old: &crate::crypt::Master,
    new: &crate::crypt::Master,
) -> Result<(u64, u64)> {
    let (mut done, mut already) = (0, 0);
    let env = match repo.signing() {
        Some(_) => Envelope::Sign,
        None => Envelope::Seal,
    };
    for (rel, _) in repo.store().list("wal")? {
        if let Some(sig) = crate::interrupt::received() {
            bail!(
                "{}: {done} WAL files rotated; run key rotate again with the same keys to finish",
                crate::interrupt::error(sig)
            );
        }
        let (dir, file) = rel.split_once('/').unwrap_or(("", &rel));
        let stem = file
            .strip_suffix(".zst")
            .or_else(|| file.strip_suffix(".sum"));
        let ours = stem.and_then(parse_name).map(|n| format!("{:08X}", n.tli));
        let marker = dir == "damaged" && damaged::segment_of(file).is_some();
        if ours.as_deref() != Some(dir) && !marker {
            continue;
        }
        let rel = format!("wal/{rel}");
        let shown = repo.store().describe(&rel);
        let mut did = seal::Rewrapped::Plain;
        repo.store()
            .patch_head(&rel, seal::ENV_HDR as u64, &mut |b| {
                did = seal::rewrap_head(b, &shown, file, env, old, new)?;
                Ok(did == seal::Rewrapped::Done)
            })?;
        match did {
            seal::Rewrapped::Done => done += 1,
            seal::Rewrapped::Already => already += 1,
            seal::Rewrapped::Plain => {}
        }
    }
    Ok((done, already))
}

/// Whether an archived file's first bytes (8 are enough) open a sealed envelope.
pub fn sealed_head(b: &[u8]) -> bool {
    Envelope::of(b) == Some(Envelope::Seal)
}

/// Removes one archived file (retention), and its block summary; its damage marker, if
/// listed, goes after it (`damaged::remove`).
pub fn remove_archived(repo: &Repo, name: &str) -> Result<()> {
    let rel = archived_rel(name).ok_or_else(|| anyhow!("'{name}' is not a WAL file name"))?;
    repo.store().delete(&rel)?;
    summary::remove(repo, name)
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
    if let Some(&s) = repo.known_sysid().get() {
        return Ok(Some(s));
    }
    let rel = format!("wal/{SYSID_FILE}");
    let Some(b) = repo.store().get(&rel, SYSID_MAX)? else {
        return Ok(None);
    };
    let s = String::from_utf8_lossy(&b).trim().parse().map_err(|_| {
        anyhow!(
            "'{}' is damaged: it should hold the cluster's system identifier",
            repo.store().describe(&rel)
        )
    })?;
    Ok(Some(*repo.known_sysid().get_or_init(|| s)))
}

pub mod damaged;
mod get;
mod header;
mod push;
mod seal;
pub mod spooled;
pub mod summary;
#[cfg(test)]
mod tests;

use get::{damaged, decode_to};
pub use get::{fetch, fetch_checked, read_history, verify, NotArchived};
use header::Header;
pub use push::{check_still_plain, push, push_with, Outcome, PlainCheck, Pushed};
use push::{map_if, open_checked, read_full, scan, write_summary, CrcRead, Opened};
use push::{push_how, How};
pub use seal::{Envelope, WalKey};
#[cfg(test)]
pub(crate) use tests::testing;
