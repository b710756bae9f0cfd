//! The copy use case: sets and archived WAL of one repository copied into another
//! without the database (3-2-1, issue 54). Each set's stripes are read once, every
//! frame checked by the restore engine as verify checks it, and written to the other
//! repository as they are read (set/copy.rs); the set's WAL follows, and only then is
//! the set recorded there: a copy that stops leaves nothing the repository takes for
//! a set, and the next copy writes it whole again.
//!
//! A plain set goes byte for byte; a signed set's frames too, its key block rewrapped
//! for the destination's key and its manifest tagged again (it names its repository);
//! an encrypted set's frames are opened and sealed again under a new data key wrapped
//! by the destination's key.

use crate::crypt::{DataKey, KeySource, Master, SetMac};
use crate::device::object::StoreOptions;
use crate::device::CreateHint;
use crate::engine::restore;
use crate::engine::stats::Progress;
use crate::format::media::{Guard, MediaHeader};
use crate::format::seal::{KeyBlock, KeyUse};
use crate::ops::backup::REPOSITORY;
use crate::ops::verify::{
    check_source_facts, engine_params, open_recorded, regular_files, Checksums, ReadOptions, Show,
};
use crate::repo::chain::{self, Selector};
use crate::repo::{wal, CatalogEntry, Repo, RepoKey};
use crate::set::copy::{tee, Frames, Teed};
use crate::set::write;
use crate::units::mb_per_sec;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct CopyOptions {
    /// The repository copied from, and its object-store options and key.
    pub from: String,
    pub from_store: StoreOptions,
    /// The repository copied into (made before: `pagevault init`), and its options.
    pub to: String,
    pub to_store: StoreOptions,
    /// The set whose chain is copied (an id or its first characters); default the
    /// newest chain.
    pub set: Option<String>,
    /// Every set the destination lacks, and all archived WAL it lacks.
    pub all: bool,
    /// Checking threads (default: one per core).
    pub threads: Option<usize>,
}

/// What `copy --json` prints.
#[derive(Debug, Serialize, Default)]
pub struct CopyReport {
    pub command: &'static str,
    pub from: String,
    pub to: String,
    pub sets_copied: usize,
    pub sets: Vec<SetCopied>,
    /// Sets not copied, each with why (the destination holds it already ...).
    pub skipped: Vec<Skipped>,
    /// Stored bytes written into the destination: stripes and WAL.
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_sec: f64,
    pub wal_copied: usize,
    pub wal_bytes: u64,
    /// Archived WAL files the destination held already.
    pub wal_skipped: usize,
}

#[derive(Debug, Serialize)]
pub struct SetCopied {
    pub set_id: String,
    pub backup_type: String,
    pub stripes: usize,
    pub frames: u64,
    /// Stored bytes of its stripes.
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_sec: f64,
    /// `as stored`, `key block rewrapped` (a signed set) or `sealed again` (an
    /// encrypted set, under a new data key).
    pub frames_went: &'static str,
    /// The archived WAL files copied with it (its start to its stop segment).
    pub wal_copied: usize,
}

#[derive(Debug, Serialize)]
pub struct Skipped {
    pub set_id: String,
    pub reason: String,
}

pub fn copy(o: &CopyOptions, show: Show) -> Result<CopyReport> {
    let t0 = Instant::now();
    if o.all && o.set.is_some() {
        bail!("give --set or --all, not both");
    }
    let a = Repo::open(&o.from, false, &o.from_store)?;
    let b = Repo::open_made(&o.to, &o.to_store)?;
    if a.describe() == b.describe() || a.spec_for_command() == b.spec_for_command() {
        bail!(
            "--repo and --to-repo both name '{}': name another repository to copy into",
            a.describe()
        );
    }
    let _signals = crate::interrupt::catch();
    let catalog = a.catalog()?;
    let wanted: Vec<CatalogEntry> = match o.all {
        true => catalog.clone(),
        false => {
            let sel = Selector {
                set: o.set.clone(),
                ..Selector::default()
            };
            chain::select(&catalog, &sel)
                .map_err(|e| crate::ops::verify::with_history_hint(e, &a))?
                .links
        }
    };
    let held: HashSet<String> = b.catalog()?.into_iter().map(|e| e.set_id).collect();
    let mut r = CopyReport {
        command: "copy",
        from: a.describe(),
        to: b.describe(),
        ..CopyReport::default()
    };
    let mut wal = WalCopy::new(&a, &b)?;
    let mut there: HashSet<String> = held.clone();
    for e in &wanted {
        stop_if_signalled(&format!("set {}", e.set_id))?;
        if held.contains(&e.set_id) {
            r.skipped.push(Skipped {
                set_id: e.set_id.clone(),
                reason: format!("repository '{}' holds it already", b.describe()),
            });
            continue;
        }
        if let Some(base) = e.base_set.as_deref().filter(|s| !there.contains(*s)) {
            r.skipped.push(Skipped {
                set_id: e.set_id.clone(),
                reason: format!(
                    "its base set {base} is in neither repository (expired or not copied): it could not be restored there"
                ),
            });
            continue;
        }
        let (mut c, rec) = copy_set(&a, &b, e, o.threads, show)?;
        // The WAL that makes it consistent goes first: the record makes it a set.
        let got = wal
            .copy_range(e)
            .and_then(|n| stop_if_signalled(&format!("set {}", e.set_id)).map(|()| n))
            .and_then(|n| b.record(&rec).map(|()| n));
        match got {
            Ok(n) => c.wal_copied = n,
            Err(err) => {
                let _ = b.remove_set_files(&rec);
                return Err(err.context(format!(
                    "set {}: its stripes were copied but not recorded in '{}', and were removed; run the copy again",
                    e.set_id,
                    b.describe()
                )));
            }
        }
        there.insert(e.set_id.clone());
        r.bytes += c.bytes;
        r.sets.push(c);
    }
    // The WAL after them, for a recovery to their newest point (or all of it).
    let from = match o.all {
        true => None,
        false => wanted
            .first()
            .and_then(|e| Some((e.timeline?, e.start_wal.clone()?))),
    };
    if o.all || from.is_some() {
        wal.copy_after(from)?;
    }
    r.sets_copied = r.sets.len();
    r.wal_copied = wal.copied;
    r.wal_bytes = wal.bytes;
    r.wal_skipped = wal.skipped;
    r.bytes += wal.bytes;
    r.seconds = t0.elapsed().as_secs_f64();
    r.mb_per_sec = mb_per_sec(r.bytes, r.seconds);
    Ok(r)
}

/// Stops between steps on a signal, saying what was left unrecorded.
fn stop_if_signalled(what: &str) -> Result<()> {
    match crate::interrupt::received() {
        Some(sig) => Err(crate::interrupt::error(sig).context(format!(
            "{what} was not recorded in the destination; run the copy again to finish"
        ))),
        None => Ok(()),
    }
}

/// How a set's stripes change on the way.
struct Plan {
    header: MediaHeader,
    frames: Frames,
    guard: Guarding,
    /// The destination's id, recorded in a keyed set's manifest.
    repo_id: Option<String>,
    went: &'static str,
}

enum Guarding {
    Plain,
    Seal(DataKey),
    Sign(SetMac),
}

/// The destination's key for a keyed set of use `u`: its master, checked against the
/// repository's marker (an empty plain repository becomes keyed, as a backup makes it).
fn dest_key(b: &Repo, set: &str, u: KeyUse) -> Result<(RepoKey, Master)> {
    let Some(source) = &b.options().key else {
        bail!(
            "set {set} is {} and repository '{}' {}: give its key with --to-key-file or --to-passphrase-file (default: the --key-file of --repo)",
            u.verb(),
            b.describe(),
            match b.protection() {
                Some(k) => format!("is {} (key id {})", k.mode.verb(), crate::crypt::show_id(&k.key_id)),
                None => "is plain".into(),
            }
        );
    };
    let k = b.key_for(source, u)?;
    let master = master_of(source, &k, b)?;
    Ok((k, master))
}

fn master_of(source: &KeySource, k: &RepoKey, b: &Repo) -> Result<Master> {
    source
        .master(&k.kdf)
        .map_err(|e| anyhow!("repository '{}': {e}", b.describe()))
}

/// How set `e` (opened as `set`) goes into `b`.
fn plan(a: &Repo, b: &Repo, e: &CatalogEntry, set: &crate::set::read::OpenSet) -> Result<Plan> {
    let id = &e.set_id;
    let h = &set.header;
    let (dest, to) = (b.describe(), || b.protection().map(|k| k.mode));
    match (h.key_use(), to()) {
        (None, None) => Ok(Plan {
            header: h.clone(),
            frames: Frames::AsStored,
            guard: Guarding::Plain,
            repo_id: None,
            went: "as stored",
        }),
        (None, Some(m)) => bail!(
            "set {id} is neither encrypted nor signed, and repository '{dest}' is {}: a plain set is not authenticated, so it is not copied into it; copy it into a plain repository, or take a new backup into '{dest}'",
            m.verb()
        ),
        (Some(KeyUse::Sign), Some(KeyUse::Seal)) => bail!(
            "set {id} is signed, not encrypted, and repository '{dest}' is encrypted: its frames are plain; copy it into a signed repository, or take a new backup into '{dest}'"
        ),
        (Some(u), _) => {
            let (k, master) = dest_key(b, id, u)?;
            let kb = h.key.as_ref().expect("a keyed set has its key block");
            let source = a.options().key.as_ref().ok_or_else(|| {
                anyhow!("set {id} is {}: {}", u.verb(), crate::crypt::load::GIVE_KEY)
            })?;
            let key = kb
                .open(source, &h.set_id, u)
                .map_err(|m| anyhow!("set {id}: {m}"))?;
            let (new, frames, guard, went) = match u {
                KeyUse::Sign => {
                    let mac = set.sign.clone().ok_or_else(|| anyhow!("set {id}: no MAC key"))?;
                    (key, Frames::AsStored, Guarding::Sign(mac), "key block rewrapped")
                }
                KeyUse::Seal => {
                    let old = set.seal.clone().ok_or_else(|| anyhow!("set {id}: no data key"))?;
                    let new = DataKey::random();
                    let frames = Frames::Reseal {
                        old: old.dek,
                        new: new.clone(),
                        set_id: h.set_id,
                        crc: old.crc,
                    };
                    (new.clone(), frames, Guarding::Seal(new), "sealed again")
                }
            };
            let header = MediaHeader {
                key: Some(KeyBlock::new(&master, k.kdf, &h.set_id, &new, u)),
                ..h.clone()
            };
            Ok(Plan {
                header,
                frames,
                guard,
                repo_id: b.id(),
                went,
            })
        }
    }
}

/// Copies set `e`'s stripes from `a` into `b`, checking every frame: committed there,
/// not recorded. Returns what it did and the record to write.
fn copy_set(
    a: &Repo,
    b: &Repo,
    e: &CatalogEntry,
    threads: Option<usize>,
    show: Show,
) -> Result<(SetCopied, CatalogEntry)> {
    let t0 = Instant::now();
    let id = &e.set_id;
    let ctx = |what: &str| {
        format!(
            "set {id}: {what}; nothing of it was recorded in '{}'",
            b.describe()
        )
    };
    let mut set = open_recorded(a, e)
        .with_context(|| {
            let a = a.describe();
            format!("set {id} of repository '{a}' cannot be read (`pagevault verify --repo {a} --set {id}` checks it)")
        })
        .with_context(|| ctx("not copied"))?;
    crate::ops::authenticated_in(a, e, &set.manifest)?;
    check_source_facts(&set.manifest)?;
    let p = plan(a, b, e, &set)?;
    let n = set.stripes.len();
    let m = set.manifest.clone();
    // What an interrupted copy of the set left (never recorded) goes first.
    for rel in (1..=n).map(|i| format!("sets/{id}/{i}.pv")) {
        if b.store().exists(&rel)? {
            b.store().delete(&rel)?;
        }
    }
    let specs = (1..=n)
        .map(|i| b.stripe_spec(id, i))
        .collect::<Result<Vec<_>>>()?;
    // A plain set's frames go byte for byte: each stripe's index goes with them, every
    // entry compared with its frame as the engine reads it.
    let plain = matches!((&p.frames, &p.guard), (Frames::AsStored, Guarding::Plain));
    let indexes = match plain {
        true => (set.stripes.iter())
            .map(restore::load_index)
            .collect::<Result<Vec<_>>>()
            .with_context(|| ctx("not copied"))?,
        false => vec![],
    };
    let devices = write::devices(&specs, b.options())?;
    let headers = write::headers(&p.header, n);
    let block = set.header.block_size as u64;
    let mut teed: Vec<Teed> = vec![];
    for (i, st) in set.stripes.iter_mut().enumerate() {
        let hint = CreateHint {
            expected_bytes: st.source.len(),
            transfer_size: m.transfer_size as usize,
            direct: false,
        };
        let made = devices[i].create(&hint).and_then(|sink| {
            tee(
                st,
                sink,
                &headers[i],
                p.frames.clone(),
                block,
                devices[i].describe(),
            )
        });
        match made {
            Ok(t) => teed.push(t),
            Err(err) => {
                teed.into_iter().for_each(Teed::abort);
                return Err(err.context(ctx("not copied")));
            }
        }
    }
    let ro = ReadOptions {
        threads,
        ..ReadOptions::default()
    };
    let mut params = engine_params(&ro, &set);
    params.use_index = plain;
    let ids = regular_files(&m);
    let sums = Checksums::new(&m, &ids);
    let progress = Arc::new(Progress::default());
    let shown = show(progress.clone(), "copy");
    let out = restore::run(&set.stripes, &ids, &params, None, &progress, &|i, got| {
        sums.check(i, got)
    });
    drop(shown);
    let out = match out {
        Ok(o) => o,
        Err(err) => {
            let dest = teed.iter().find_map(Teed::write_error);
            teed.into_iter().for_each(Teed::abort);
            let err = match dest {
                Some(d) => anyhow!(
                    "{d}: make room in the destination or fix its access, then run the copy again"
                ),
                None => err.context(format!(
                    "set {id} in repository '{}' is damaged: verify it (`pagevault verify --repo {} --set {id}`), and copy a set that is intact",
                    a.describe(),
                    a.describe()
                )),
            };
            return Err(err.context(ctx("not copied")));
        }
    };
    let mut stripes = vec![];
    let mut failed = None;
    for t in teed {
        match failed.is_none().then(|| t.finish()) {
            Some(Ok(s)) => stripes.push(s),
            Some(Err(err)) => failed = Some(err),
            None => {}
        }
    }
    if let Some(err) = failed {
        write::abort(stripes);
        return Err(err.context(ctx("not copied")));
    }
    for (s, ix) in stripes.iter_mut().zip(indexes) {
        s.index = ix.unwrap_or_default();
    }
    let mut m2 = m.clone();
    match &p.repo_id {
        Some(r) => m2.extra.insert(REPOSITORY.to_string(), r.clone().into()),
        None => m2.extra.remove(REPOSITORY),
    };
    for (s, d) in m2.stripes.iter_mut().zip(&devices) {
        s.device = d.describe();
    }
    let guard = match &p.guard {
        Guarding::Plain => Guard::Plain,
        Guarding::Seal(k) => Guard::Seal(k, &p.header.set_id),
        Guarding::Sign(mac) => Guard::Sign(mac, &headers[0][..64]),
    };
    let committed =
        write::commit(&devices, stripes, &m2, block, guard).with_context(|| ctx("not copied"))?;
    let mut rec = e.clone();
    rec.stripes = specs.iter().map(|s| b.relative(s)).collect();
    rec.stripe_versions = match committed.iter().any(|c| c.version.is_some()) {
        true => committed.iter().map(|c| c.version.clone()).collect(),
        false => vec![],
    };
    rec.base_version = None;
    let bytes: u64 = committed.iter().map(|c| c.bytes).sum();
    rec.stored_bytes = bytes;
    let secs = t0.elapsed().as_secs_f64();
    Ok((
        SetCopied {
            set_id: id.clone(),
            backup_type: e.backup_type.as_str().to_string(),
            stripes: n,
            frames: out.frames,
            bytes,
            seconds: secs,
            mb_per_sec: mb_per_sec(bytes, secs),
            frames_went: p.went,
            wal_copied: 0,
        },
        rec,
    ))
}

/// The archived WAL the destination lacks, fetched from the source (every byte
/// checked, as archive-get checks it) and pushed into the destination (sealed or
/// signed with its key, summarized, as archive-push stores it).
struct WalCopy<'a> {
    a: &'a Repo,
    b: &'a Repo,
    /// The source's archived files, and those the destination holds.
    names: Vec<String>,
    held: HashSet<String>,
    /// Those this copy dealt with already.
    done: HashSet<String>,
    dir: tempfile::TempDir,
    copied: usize,
    bytes: u64,
    skipped: usize,
}

impl<'a> WalCopy<'a> {
    fn new(a: &'a Repo, b: &'a Repo) -> Result<WalCopy<'a>> {
        let names = wal::all_archived(a)?.into_iter().map(|(n, _)| n).collect();
        let held = wal::all_archived(b)?.into_iter().map(|(n, _)| n).collect();
        // Private (0700): the plain WAL passes through it.
        let dir = tempfile::Builder::new()
            .prefix("pagevault-copy-")
            .tempdir()
            .context("cannot make a temporary directory for the WAL copied (set TMPDIR)")?;
        Ok(WalCopy {
            a,
            b,
            names,
            held,
            done: HashSet::new(),
            dir,
            copied: 0,
            bytes: 0,
            skipped: 0,
        })
    }

    /// The WAL of set `e`: its timeline's history files, its start to its stop
    /// segment. Returns how many files were copied.
    fn copy_range(&mut self, e: &CatalogEntry) -> Result<usize> {
        let (Some(tli), Some(start), Some(stop)) = (e.timeline, &e.start_wal, &e.stop_wal) else {
            return Ok(0);
        };
        let want: Vec<String> = (self.names.iter())
            .filter(|n| match crate::pg::parse_name(n) {
                Some(p) if p.kind == crate::pg::Kind::History => p.tli <= tli,
                Some(p) => p.tli == tli && n.as_str() >= start.as_str() && n[..24] <= stop[..],
                None => false,
            })
            .cloned()
            .collect();
        let before = self.copied;
        for n in want {
            self.one(&n)?;
        }
        Ok(self.copied - before)
    }

    /// Every archived file from segment `from` on (its timeline and later ones), or,
    /// with None, every one.
    fn copy_after(&mut self, from: Option<(u32, String)>) -> Result<()> {
        let want: Vec<String> = (self.names.iter())
            .filter(|n| match (&from, crate::pg::parse_name(n)) {
                (None, _) => true,
                (Some(_), Some(p)) if p.kind == crate::pg::Kind::History => true,
                (Some((tli, start)), Some(p)) => p.tli >= *tli && n[8..] >= start[8..],
                (_, None) => false,
            })
            .cloned()
            .collect();
        for n in want {
            self.one(&n)?;
        }
        Ok(())
    }

    fn one(&mut self, name: &str) -> Result<()> {
        if !self.done.insert(name.to_string()) {
            return Ok(());
        }
        if self.held.contains(name) {
            self.skipped += 1;
            return Ok(());
        }
        stop_if_signalled(&format!("archived WAL file {name}"))?;
        let p = self.dir.path().join(name);
        let (a, b) = (self.a.describe(), self.b.describe());
        wal::fetch(self.a, name, &p).with_context(|| {
            format!("archived WAL file {name} of repository '{a}' cannot be copied: check it with `pagevault verify --repo {a}`")
        })?;
        let pushed = wal::push(self.b, &p).with_context(|| {
            format!("archived WAL file {name} cannot be stored in repository '{b}': fix the cause, then run the copy again")
        });
        let _ = std::fs::remove_file(&p);
        let pushed = pushed?;
        self.copied += 1;
        self.bytes += pushed.stored_bytes;
        Ok(())
    }
}
