//! archive-push: one WAL file, checked, compressed and made durable, never a half file
//! and never over an archived one.

use super::*;
use crate::repo::Store;

/// What happened to a pushed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Newly archived.
    Archived,
    /// The archive already held the same bytes under that name: nothing done.
    AlreadyArchived,
    /// The archive held that name with the same BLAKE3 in an intact header, but its
    /// stored bytes were damaged: replaced with this (identical) file.
    Repaired,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Pushed {
    pub name: String,
    pub outcome: Outcome,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// BLAKE3 of the file's bytes.
    #[serde(serialize_with = "as_hex")]
    pub blake3: [u8; 32],
    pub seconds: f64,
    /// What the block summary written by this push holds, or why it is not usable.
    pub summary: Option<String>,
    /// CPU seconds of this process (user and system) when the push ended, and those
    /// spent summarizing and storing the summary.
    pub cpu_seconds: f64,
    pub summary_cpu_seconds: f64,
    /// What PostgreSQL's log must show (a record that cannot be decoded).
    pub warnings: Vec<String>,
    /// Stored plain, and the check that no keyed write made the repository encrypted
    /// meanwhile is left to the caller ([`PlainCheck::Caller`]).
    #[serde(skip)]
    pub unchecked_plain: bool,
}

/// Who checks, after a plain file is stored, that a keyed write did not make the
/// repository encrypted meanwhile (then the file goes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainCheck {
    /// Each push, at once: one more request per file.
    Each,
    /// The caller, once for a batch of pushes, before it lets go of their sources
    /// ([`check_still_plain`]).
    Caller,
}

/// The check [`PlainCheck::Caller`] leaves to the caller: when a keyed write made the
/// repository encrypted while `pushed` were stored plain, they (their summaries and
/// damage markers) are removed again and the error says so.
pub fn check_still_plain<'a>(
    repo: &Repo,
    pushed: impl IntoIterator<Item = &'a Pushed>,
) -> Result<()> {
    let plain: Vec<&Pushed> = pushed.into_iter().filter(|p| p.unchecked_plain).collect();
    if plain.is_empty() {
        return Ok(());
    }
    let Err(e) = repo.check_still_plain() else {
        return Ok(());
    };
    for p in plain {
        let rels = [archived_rel(&p.name), summary::summary_rel(&p.name)];
        for rel in rels.into_iter().flatten() {
            let _ = repo.store().delete(&rel);
        }
        let _ = super::damaged::remove(repo, &p.name);
    }
    Err(e)
}

fn as_hex<S: serde::Serializer>(b: &[u8; 32], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(b))
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

pub(super) struct CrcRead<R> {
    pub(super) inner: R,
    pub(super) crc: u32,
    pub(super) n: u64,
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
pub(super) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
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

/// Reads the whole source once, from `mapped` when given (its bytes, mapped), else
/// from `f`: checks every page (or the text of a history file), hashes it and feeds
/// `sink` (the compressor), if any. Errors name `src`.
pub(super) fn scan(
    f: &mut File,
    src: &Path,
    len: u64,
    n: &WalName,
    seg: Option<&SegInfo>,
    mut sink: Option<&mut dyn Write>,
    mapped: Option<&[u8]>,
) -> Result<blake3::Hash> {
    let invalid = |what: String| {
        anyhow!(
            "'{}' is not a valid WAL file: {what}; nothing was archived",
            src.display()
        )
    };
    let mut h = blake3::Hasher::new();
    let mut buf = vec![
        0u8;
        if mapped.is_some() {
            0
        } else {
            CHUNK.min(len.max(1) as usize)
        }
    ];
    let mut off = 0u64;
    loop {
        let chunk = match mapped {
            Some(m) => &m[off as usize..m.len().min(off as usize + CHUNK)],
            None => {
                let k = read_full(f, &mut buf)
                    .with_context(|| format!("cannot read '{}'", src.display()))?;
                &buf[..k]
            }
        };
        let k = chunk.len();
        if k == 0 {
            break;
        }
        if off + k as u64 > len {
            bail!(
                "'{}' grew while being read (PostgreSQL archives only complete files); nothing was archived",
                src.display()
            );
        }
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

/// A compressed file ready to store: a durable temp file beside its final place (a
/// local repository), or bytes in memory (an object store: no temp file, no fsync).
enum Staged {
    File(Temp),
    Bytes(Vec<u8>),
}

impl Staged {
    fn put_new(&self, store: &dyn Store, rel: &str) -> Result<bool> {
        match self {
            Staged::File(t) => store.put_new_file(rel, &t.path),
            Staged::Bytes(b) => store.put_new(rel, b),
        }
    }

    fn put(&self, store: &dyn Store, rel: &str) -> Result<()> {
        match self {
            Staged::File(t) => store.put_file(rel, &t.path),
            Staged::Bytes(b) => store.put(rel, b),
        }
    }
}

/// The file being pushed, opened and checked.
struct Input<'a> {
    /// Its file name (checked: a WAL file's).
    name: &'a str,
    f: &'a mut File,
    src: &'a Path,
    len: u64,
    n: &'a WalName,
    seg: Option<&'a SegInfo>,
    /// Its bytes, mapped (a segment to summarize).
    mapped: Option<&'a [u8]>,
}

impl Input<'_> {
    /// The archived file's header for these bytes, `stored` compressed with `crc`.
    fn header(&self, hash: &blake3::Hash, stored: u64, crc: u32) -> Header {
        Header {
            kind: self.n.kind,
            name: self.name.to_string(),
            raw: self.len,
            stored,
            blake3: *hash.as_bytes(),
            sysid: self.seg.map_or(0, |s| s.sysid),
            crc,
        }
    }
}

/// Compresses the source behind a header (zeros, filled in by the caller) into `out`;
/// returns `out` and the header.
fn compress<W: Write>(
    out: W,
    i: &mut Input,
    werr: &dyn Fn(io::Error) -> anyhow::Error,
) -> Result<(W, Header)> {
    let mut cw = CrcWrite {
        inner: out,
        crc: 0,
        n: 0,
    };
    cw.inner.write_all(&[0u8; HDR_LEN]).map_err(werr)?;
    let mut enc = zstd::stream::write::Encoder::new(cw, ZSTD_LEVEL).map_err(werr)?;
    enc.include_checksum(true).map_err(werr)?;
    enc.include_contentsize(true).map_err(werr)?;
    enc.set_pledged_src_size(Some(i.len)).map_err(werr)?;
    let hash = scan(i.f, i.src, i.len, i.n, i.seg, Some(&mut enc), i.mapped)?;
    let cw = enc.finish().map_err(werr)?;
    let hdr = i.header(&hash, cw.n, cw.crc);
    Ok((cw.inner, hdr))
}

/// Files up to this size are mapped and compressed in one call: zstd then matches
/// within one contiguous buffer, about twice as fast as through its stream's window.
pub(super) const WHOLE_MAX: u64 = 64 << 20;

/// Checks and hashes mapped source bytes `m`, then compresses them in one call;
/// returns the header and the compressed frame.
fn compress_whole(
    m: &[u8],
    i: &mut Input,
    werr: &dyn Fn(io::Error) -> anyhow::Error,
) -> Result<(Header, Vec<u8>)> {
    let hash = scan(i.f, i.src, i.len, i.n, i.seg, None, Some(m))?;
    let mut c = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(werr)?;
    c.include_checksum(true).map_err(werr)?;
    c.include_contentsize(true).map_err(werr)?;
    let body = c.compress(m).map_err(werr)?;
    let hdr = i.header(&hash, body.len() as u64, crc32c::crc32c(&body));
    Ok((hdr, body))
}

/// Compresses the source, sealed with `master` when given, for `rel` of `store`.
fn stage(
    store: &dyn Store,
    rel: &str,
    master: Option<&WalKey>,
    i: &mut Input,
) -> Result<(Staged, Header)> {
    let object = rel.rsplit('/').next().unwrap_or(rel);
    let whole = i.mapped.filter(|m| m.len() as u64 <= WHOLE_MAX);
    if store.local_path(rel).is_none() {
        let werr = |e: io::Error| anyhow!("cannot compress '{}': {e}", i.src.display());
        let (hdr, b) = match whole {
            Some(m) => {
                let (hdr, body) = compress_whole(m, i, &werr)?;
                let mut b = Vec::with_capacity(HDR_LEN + body.len());
                b.extend_from_slice(&hdr.encode());
                b.extend_from_slice(&body);
                (hdr, b)
            }
            None => {
                let cap = (i.len / 2).min(WHOLE_MAX) as usize;
                let (mut b, hdr) = compress(Vec::with_capacity(cap), i, &werr)?;
                b[..HDR_LEN].copy_from_slice(&hdr.encode());
                (hdr, b)
            }
        };
        let b = match master {
            Some(m) => seal::seal_bytes(m, object, &b),
            None => b,
        };
        return Ok((Staged::Bytes(b), hdr));
    }
    let dir = store.stage_dir(rel)?;
    let (tmp, mut out) = temp_beside(&dir, i.name)?;
    let werr = |e: io::Error| anyhow!("cannot write '{}': {e}", tmp.path.display());
    let hdr = match whole {
        Some(m) => {
            let (hdr, body) = compress_whole(m, i, &werr)?;
            out.write_all(&hdr.encode())
                .and_then(|()| out.write_all(&body))
                .map_err(werr)?;
            hdr
        }
        None => {
            let (o, hdr) = compress(out, i, &werr)?;
            out = o;
            out.write_all_at(&hdr.encode(), 0).map_err(werr)?;
            hdr
        }
    };
    out.sync_all().map_err(werr)?;
    let tmp = match master {
        Some(m) => seal::seal_file(m, object, &tmp.path, &dir)?,
        None => tmp,
    };
    Ok((Staged::File(tmp), hdr))
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
        let _ = repo.known_sysid().set(sysid);
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

/// A WAL file opened for archiving: its name checked, a segment's first page too.
pub(super) struct Opened {
    pub name: String,
    pub n: WalName,
    pub f: File,
    pub len: u64,
    pub seg: Option<SegInfo>,
}

/// `src`'s bytes mapped when `wanted` (a segment to summarize), else None.
pub(super) fn map_if(
    wanted: bool,
    f: &File,
    len: u64,
    src: &Path,
) -> Result<Option<memmap2::Mmap>> {
    match wanted {
        true => crate::sys::map_file(f, len)
            .map(Some)
            .with_context(|| format!("cannot map '{}' to read it", src.display())),
        false => Ok(None),
    }
}

/// Opens `src` (a regular file only) and checks what can be checked before reading it
/// all: the name, a segment's long page header, a history file's size.
pub(super) fn open_checked(src: &Path) -> Result<Opened> {
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
    let f = crate::sys::open_regular(src)
        .with_context(|| format!("cannot open '{}'; nothing was archived", src.display()))?;
    let len = f
        .metadata()
        .with_context(|| format!("cannot stat '{}'", src.display()))?
        .len();
    let seg = if n.kind.is_segment() {
        let mut page = vec![0u8; (LONG_PHD as u64).min(len) as usize];
        f.read_exact_at(&mut page, 0)
            .with_context(|| format!("cannot read '{}'", src.display()))?;
        Some(check_first_page(&name, &n, len, &page).map_err(|m| {
            anyhow!(
                "'{}' is not a valid WAL segment: {m}; nothing was archived",
                src.display()
            )
        })?)
    } else {
        if len > crate::pg::max_file_size(n.kind) || len == 0 {
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
    Ok(Opened {
        name,
        n,
        f,
        len,
        seg,
    })
}

/// Archives one file PostgreSQL hands to archive_command (`%p`), a segment with its
/// block summary.
pub fn push(repo: &Repo, src: &Path) -> Result<Pushed> {
    push_with(repo, src, true)
}

/// [`push`]; without `summaries` a segment is archived alone (incrementals over its
/// range then read every page).
pub fn push_with(repo: &Repo, src: &Path, summaries: bool) -> Result<Pushed> {
    let how = How {
        summaries,
        check: PlainCheck::Each,
        blake3: None,
    };
    push_how(repo, src, &how)
}

/// How a file is pushed.
pub(super) struct How {
    /// A complete segment gets its block summary.
    pub summaries: bool,
    pub check: PlainCheck,
    /// The BLAKE3 the file had when it was copied (into a spool): other bytes now are
    /// damage, refused before anything is stored.
    pub blake3: Option<[u8; 32]>,
}

/// [`push_with`], as `how` says.
pub(super) fn push_how(repo: &Repo, src: &Path, how: &How) -> Result<Pushed> {
    let (summaries, check) = (how.summaries, how.check);
    let t0 = Instant::now();
    let Opened {
        name,
        n,
        mut f,
        len,
        seg,
    } = open_checked(src)?;
    let new_sysid = match &seg {
        Some(s) => check_system_identifier(repo, s.sysid, src)?,
        None => false,
    };
    // An encrypted repository seals every file; a plain push into one is refused.
    let master = repo.wal_master(true)?;
    let rel = archived_rel(&name).expect("a WAL file's name");
    let done = |outcome, hdr: &Header| Pushed {
        name: name.clone(),
        outcome,
        raw_bytes: hdr.raw,
        stored_bytes: hdr.stored,
        blake3: hdr.blake3,
        seconds: t0.elapsed().as_secs_f64(),
        summary: None,
        cpu_seconds: crate::sys::cpu_seconds(),
        summary_cpu_seconds: 0.0,
        warnings: vec![],
        unchecked_plain: false,
    };
    let store = repo.store();
    let scratch = std::env::temp_dir();
    // A complete segment gets a block summary. Its bytes are mapped (any file's up to
    // WHOLE_MAX), and the hash, the compressor and the summary all read that one copy.
    let summarized = summaries && n.kind == Kind::Segment;
    let map = map_if(summarized || (1..=WHOLE_MAX).contains(&len), &f, len, src)?;
    let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
    let mapped = map.as_deref();
    // Compressed and checked in a durable temp file, then made the archived file only
    // if the name is still free (local: in its final directory, then a link). One
    // request in the common case: what the archive holds is read only when the name is
    // taken.
    let mut input = Input {
        name: &name,
        f: &mut f,
        src,
        len,
        n: &n,
        seg: seg.as_ref(),
        mapped,
    };
    let (staged, hdr) = stage(store, &rel, master.as_ref(), &mut input)?;
    if let Some(was) = how.blake3.filter(|b| b != &hdr.blake3) {
        bail!(
            "'{}' changed since it was copied there (BLAKE3 {} then, {} now): damaged on this \
             disk, it is not archived and stays; if PostgreSQL's pg_wal still holds {name}, copy \
             that over it, else remove it and take a new full backup (the WAL has a gap there)",
            src.display(),
            &hex::encode(was)[..16],
            &hex::encode(hdr.blake3)[..16]
        );
    }
    if new_sysid {
        record_system_identifier(repo, seg.map_or(0, |s| s.sysid))?;
    }
    if staged.put_new(store, &rel)? {
        drop(staged);
        // A first keyed write may have raced this plain push: then the file goes.
        if master.is_none() && check == PlainCheck::Each {
            if let Err(e) = repo.check_still_plain() {
                let _ = store.delete(&rel);
                return Err(e);
            }
        }
        let mut p = done(Outcome::Archived, &hdr);
        p.unchecked_plain = master.is_none() && check == PlainCheck::Caller;
        if summarized {
            summarize_into(&mut p, repo, bytes, seg.as_ref(), t0)?;
        }
        return Ok(p);
    }
    // Pushed before (PostgreSQL retries after a crash), or by a concurrent push: the
    // same bytes are fine.
    let out = with_archived(repo, &rel, &scratch, |have| {
        compare_existing(have, &name, len, &hdr.blake3)
    })?
    .ok_or_else(|| anyhow!("'{}' vanished while being compared", store.describe(&rel)))?;
    if out == Outcome::Repaired {
        repo.refuse_rewrite(&format!(
            "the archived '{}' is damaged and is never replaced there; keep this segment elsewhere, and take a new full backup",
            store.describe(&rel)
        ))?;
        staged.put(store, &rel)?;
    }
    drop(staged);
    // A push retried after the segment was stored but before its summary was.
    let mut p = done(out, &hdr);
    if summarized && summary::wanted(repo, &name, &hdr.blake3, len) {
        summarize_into(&mut p, repo, bytes, seg.as_ref(), t0)?;
    }
    Ok(p)
}

/// [`write_summary`] for a pushed segment, its CPU time counted.
fn summarize_into(
    p: &mut Pushed,
    repo: &Repo,
    bytes: &[u8],
    seg: Option<&SegInfo>,
    t0: Instant,
) -> Result<()> {
    let cpu = crate::sys::cpu_seconds();
    write_summary(repo, p, bytes, seg)?;
    p.cpu_seconds = crate::sys::cpu_seconds();
    p.summary_cpu_seconds = p.cpu_seconds - cpu;
    p.seconds = t0.elapsed().as_secs_f64();
    Ok(())
}

/// Summarizes an archived segment (its bytes as read), stores the summary, and says in
/// `p` what it holds (and, in its warnings, a record that cannot be decoded). The
/// segment is durable already: an error here fails the push, and PostgreSQL's retry
/// (AlreadyArchived) writes the summary then.
pub(super) fn write_summary(
    repo: &Repo,
    p: &mut Pushed,
    bytes: &[u8],
    seg: Option<&SegInfo>,
) -> Result<()> {
    let Some(s) = seg else { return Ok(()) };
    let (name, blake3) = (&p.name, &p.blake3);
    let major = crate::pg::version_of_wal_magic(s.magic).map_or(0, |v| v.major);
    let seg_size = bytes.len() as u64;
    let prev = summary::previous(repo, name, seg_size);
    let sum = summary::summarize(
        name,
        *blake3,
        bytes,
        s.blcksz as usize,
        major,
        prev.as_ref(),
    );
    summary::store(repo, &sum).with_context(|| {
        format!("{name} is archived, but its block summary could not be stored")
    })?;
    p.warnings.extend(sum.damage());
    p.summary = Some(if sum.usable() {
        let blocks: u64 = sum.rels.values().map(|e| e.blocks.len()).sum();
        format!(
            "block summary: {blocks} blocks in {} relation forks, {} databases created or dropped",
            sum.rels.len(),
            sum.databases.len()
        )
    } else {
        format!(
            "block summary stored, but it cannot be used for change tracking: {}",
            sum.note
        )
    });
    Ok(())
}

fn read_header(p: &Path) -> Result<Header> {
    let mut b = [0u8; HDR_LEN];
    let mut f =
        crate::sys::open_regular(p).with_context(|| format!("cannot open '{}'", p.display()))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::wal::tests::testing::{segment, SEG};
    use std::io::Seek;

    /// The file stored, decompressed.
    fn stored(s: &Staged) -> (Vec<u8>, Vec<u8>) {
        let Staged::File(t) = s else {
            panic!("a local repository stages a file")
        };
        let b = fs::read(&t.path).unwrap();
        let (hdr, body) = b.split_at(HDR_LEN);
        (hdr.to_vec(), zstd::decode_all(body).unwrap())
    }

    #[test]
    fn a_file_compressed_whole_or_streamed_stores_the_same_bytes() {
        let (d, repo) = crate::repo::temp_repo();
        let name = segment_name_for(1, 3, SEG);
        let src = d.path().join(&name);
        fs::write(&src, segment(1, 3, 77, 700)).unwrap();
        let Opened {
            n, mut f, len, seg, ..
        } = open_checked(&src).unwrap();
        let map = map_if(true, &f, len, &src).unwrap().unwrap();
        let rel = format!("wal/00000001/{name}.zst");
        let mut stage_with = |mapped: Option<&[u8]>| {
            f.rewind().unwrap();
            let mut i = Input {
                name: &name,
                f: &mut f,
                src: &src,
                len,
                n: &n,
                seg: seg.as_ref(),
                mapped,
            };
            stage(repo.store(), &rel, None, &mut i).unwrap()
        };
        let (whole, hw) = stage_with(Some(&map));
        let (streamed, hs) = stage_with(None);
        let ((hw_bytes, w), (_, s)) = (stored(&whole), stored(&streamed));
        assert_eq!(w, fs::read(&src).unwrap());
        assert_eq!(s, w);
        assert_eq!((hw.blake3, hw.raw, hw.sysid), (hs.blake3, hs.raw, hs.sysid));
        assert_eq!(Header::decode(&hw_bytes).unwrap(), hw);
    }
}
