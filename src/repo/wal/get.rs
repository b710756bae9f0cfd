//! archive-get and the checks restore runs: every byte of an archived file checked
//! against its header before anyone uses it.

use super::*;

pub(super) fn damaged(p: &Path, what: &str) -> anyhow::Error {
    anyhow!(
        "archived WAL file '{}' is damaged: {what}; it cannot be restored from this archive",
        p.display()
    )
}

/// Decompresses an archived file into `out`, checking the header, the CRC32C of the
/// stored bytes, the size and the BLAKE3 of the restored bytes.
pub(super) fn decode_to(path: &Path, name: &str, out: &mut dyn Write) -> Result<Header> {
    let mut f = crate::sys::open_regular(path)
        .with_context(|| format!("cannot open '{}'", path.display()))?;
    let flen = f.metadata()?.len();
    let mut hb = [0u8; HDR_LEN];
    let k =
        read_full(&mut f, &mut hb).with_context(|| format!("cannot read '{}'", path.display()))?;
    let hdr = Header::decode(&hb[..k]).map_err(|m| damaged(path, &m))?;
    if hdr.name != name {
        return Err(damaged(path, &format!("it holds {}, not {name}", hdr.name)));
    }
    // Sizes from the name asked for, never from the header alone.
    let kind = parse_name(name).map(|n| n.kind);
    if kind != Some(hdr.kind) {
        return Err(damaged(
            path,
            &format!(
                "its header says a {:?} file, its name a {kind:?} one",
                hdr.kind
            ),
        ));
    }
    let limit = crate::pg::max_file_size(hdr.kind);
    if hdr.raw > limit {
        return Err(damaged(
            path,
            &format!(
                "its header gives {} bytes, over the {limit} a {:?} file may hold",
                hdr.raw, hdr.kind
            ),
        ));
    }
    let most = zstd::zstd_safe::compress_bound(hdr.raw as usize) as u64;
    if hdr.stored > most {
        return Err(damaged(
            path,
            &format!(
                "its header gives {} stored bytes, more than zstd makes of {} bytes ({most})",
                hdr.stored, hdr.raw
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
        // Pushes write level 1 (a window of at most 512 KiB): a larger one is forged,
        // and would be allocated per decoder.
        dec.window_log_max(crate::format::ZSTD_WINDOW_LOG_MAX)
            .map_err(|e| Fail::Damaged(e.to_string()))?;
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
    fetch_checked(repo, name, dest).map(|(raw, _)| raw)
}

/// [`fetch`], returning also the BLAKE3 of the restored bytes, which the archive's
/// header gave and they matched.
pub fn fetch_checked(repo: &Repo, name: &str, dest: &Path) -> Result<(u64, [u8; 32])> {
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
    let Some(local) = repo.store().fetch_to(&rel, &dir, stored_max(repo, name))? else {
        return Err(NotArchived(format!(
            "{name} is not in the WAL archive of '{}'",
            repo.describe()
        ))
        .into());
    };
    let url = repo.store().describe(&rel);
    let plain = plain_copy(repo, &rel, &local.path, &dir, archived_max(name))
        .map_err(|e| relabel(e, &local.path, &url))?;
    let path = plain.as_ref().map_or(&local.path, |t| &t.path);
    let (tmp, mut out) = temp_beside(&dir, dest_name)?;
    let hdr = decode_to(path, name, &mut out).map_err(|e| {
        let e = relabel(e, path, &url);
        relabel(e, &local.path, &url)
    })?;
    drop(out);
    fs::rename(&tmp.path, dest).with_context(|| format!("cannot create '{}'", dest.display()))?;
    Ok((hdr.raw, hdr.blake3))
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
