//! The log chain recovery will need, checked before anything is written.

use super::{RestoreOptions, Show};
use crate::engine::stats::Progress;
use crate::pg;
use crate::pg::facts::PgFacts;
use crate::repo::wal::damaged::Position;
use crate::repo::{wal, walchain, CatalogEntry, Repo};
use crate::source::Extra;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::json;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// What the progress shows while the archive's WAL is read and checked.
pub const CHECK_WAL: &str = "check WAL";

/// Finds a broken or damaged log chain before anything is written: every WAL file
/// recovery will fetch after the set, on every timeline up to the target, must be in
/// the archive (and intact, unless `no_verify_wal`).
pub(super) fn check_wal_chain(
    repo: &Repo,
    others: &[crate::repo::many::RepoStore],
    entry: &CatalogEntry,
    extra: &Extra,
    o: &RestoreOptions,
    planned: &mut dyn FnMut(&str),
    show: Show,
) -> Result<Option<WalCheck>> {
    let (Some(tli), Some(stop)) = (
        entry.timeline,
        entry.stop_lsn.as_deref().and_then(pg::parse_lsn),
    ) else {
        return Ok(None);
    };
    let seg_size = PgFacts::from_extra(extra)
        .map_err(|e| anyhow!("set {}: its manifest's PostgreSQL facts: {e}", entry.set_id))?
        .map_or(16 << 20, |f| f.wal_segment_size);
    let end = match o.until_lsn.as_deref().and_then(pg::parse_lsn) {
        Some(l) => walchain::End::Lsn(l),
        None => walchain::End::Latest,
    };
    let from = walchain::From {
        set_id: &entry.set_id,
        tli,
        stop_lsn: stop,
        seg_size,
    };
    let chain = walchain::plan(repo, &from, end, o.timeline.and_then(|t| t.id(tli)))?;
    if let Some(first) = chain.files.first() {
        planned(first);
    }
    // Recovery stops at a damaged segment: said, not refused (the WAL before it replays).
    let start = entry.start_lsn.as_deref().and_then(pg::parse_lsn);
    let own = |n: &str| {
        let (first, last) = (start.unwrap_or(stop) / seg_size, stop / seg_size);
        wal::damaged::position(n, tli, first, last, seg_size) == Position::Inside
    };
    let on: std::collections::HashSet<&str> = chain.files.iter().map(String::as_str).collect();
    let damaged = (wal::damaged::list(repo)?.into_iter())
        .filter(|d| on.contains(d.segment.as_str()) || own(&d.segment))
        .map(|d| (own(&d.segment), d))
        .collect();
    let (verified, elsewhere) = match o.no_verify_wal {
        true => (None, vec![]),
        false => {
            // Objects are downloaded: more requests in flight than cores.
            let threads = match repo.store().local_path("wal") {
                Some(_) => crate::engine::default_threads(),
                None => 8,
            };
            // The repositories restore_command falls back on, those that open.
            let others: Vec<Repo> = (others.iter())
                .filter_map(|r| Repo::open(&r.spec, false, &r.store).ok())
                .collect();
            // A week of WAL takes a while to read: shown as it goes.
            let progress = Arc::new(Progress::default());
            // Counted in segments' bytes: a history file is a few bytes.
            let size = |name: &str| match crate::pg::walname::parse_name(name) {
                Some(n) if n.kind.is_segment() => seg_size,
                _ => 0,
            };
            let total = chain.files.iter().map(|f| size(f)).sum();
            (progress.total).store(total, Relaxed);
            let shown = show(progress.clone(), CHECK_WAL);
            let checked = |name: &str| {
                progress.done.fetch_add(size(name), Relaxed);
            };
            let verified = walchain::verify_with(repo, &others, &chain, threads, &checked);
            drop(shown);
            let (took, notes) = verified?;
            (Some(took), notes)
        }
    };
    Ok(Some(WalCheck {
        chain,
        verified,
        damaged,
        elsewhere,
    }))
}

/// The log chain a restore checked.
pub(super) struct WalCheck {
    chain: walchain::WalChain,
    /// How long reading and checking every file took (None: `no_verify_wal`).
    verified: Option<Duration>,
    /// Files damaged in the chain's repository and intact in another one.
    elsewhere: Vec<String>,
    /// Segments marked damaged when archived, in WAL order: of the chain, or (true)
    /// of the set's own WAL, start to stop.
    damaged: Vec<(bool, wal::damaged::Damaged)>,
}

impl WalCheck {
    pub(super) fn note(&self) -> String {
        let how = match self.verified {
            Some(d) => format!(
                "all {} files read and checked in {:.3} s",
                self.chain.files.len(),
                d.as_secs_f64()
            ),
            None => format!(
                "{} files present, their content NOT checked (--no-verify-wal): archive-get checks \
                 each as recovery fetches it and stops recovery on a damaged one",
                self.chain.files.len()
            ),
        };
        format!(
            "recovery will replay from the archive {} up to timeline {}; {how}",
            self.chain.describe(),
            self.chain.target_tli
        )
    }

    /// One sentence per damaged segment the chain passes: recovery stops at the first.
    pub(super) fn warnings(&self) -> Vec<String> {
        let elsewhere = self.elsewhere.iter().cloned();
        (self.damaged.iter())
            .map(|(own, d)| {
                let what = match own {
                    true => {
                        "the set needs it to be consistent: recovery may stop there before \
                             the set is consistent, and the server then refuses to start"
                    }
                    false => {
                        "recovery will stop there as if the WAL ended, and reach no point \
                              past it"
                    }
                };
                format!(
                    "archived WAL segment {} could not be decoded when pushed ({}): {what}; \
                     check the server's storage, and take a new full backup",
                    d.segment, d.note
                )
            })
            .chain(elsewhere)
            .collect()
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let mut j = self.chain.json();
        j["damaged"] = json!((self.damaged.iter())
            .map(|(own, d)| json!({"segment": d.segment, "note": d.note, "set_needs_it": own}))
            .collect::<Vec<_>>());
        j["verified"] = json!(self.verified.is_some());
        j["served_elsewhere"] = json!(self.elsewhere);
        j["verify_seconds"] = json!(self.verified.map(|d| d.as_secs_f64()));
        j
    }
}

/// The file a restore's probe fetches: the first the archive must give recovery, else
/// the set's last segment (which may not be archived yet: then "not archived" passes).
pub(super) fn probe_name(check: Option<&WalCheck>, entry: &CatalogEntry) -> Option<(String, bool)> {
    match check.and_then(|c| c.chain.files.first()) {
        Some(f) => Some((f.clone(), true)),
        None => entry.stop_wal.clone().map(|w| (w, false)),
    }
}

/// Runs `command`, the `restore_command` a restore writes, once on WAL file `name` as
/// `user` (the server's, when root runs) before anything is written:
/// a key or repository the server cannot read would otherwise stop its recovery, or
/// end it early. `must_exist`: the archive holds `name`, so only a fetch passes.
pub(crate) fn probe_restore_command(
    command: &str,
    name: &str,
    must_exist: bool,
    user: Option<(&str, u32, u32)>,
) -> Result<()> {
    let dir = std::env::temp_dir().join(format!(".pagevault-probe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&dir).with_context(|| format!("cannot create '{}'", dir.display()))?;
    let removed = Removed(&dir);
    if let Some((_, uid, gid)) = user {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .with_context(|| format!("cannot give '{}' to uid {uid}", dir.display()))?;
    }
    let dest = dir.join(name);
    // As PostgreSQL substitutes them (%p is quoted in our command).
    let line = command
        .replace("%f", name)
        .replace("%p", &dest.display().to_string());
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", &line]);
    if let Some((u, uid, gid)) = user.filter(|_| crate::sys::is_root()) {
        crate::sys::run_as(&mut cmd, u, uid, gid)
            .with_context(|| format!("cannot run the restore_command probe as user '{u}'"))?;
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run the restore_command probe ({line})"))?;
    let fetched = out.status.success() && dest.is_file();
    let absent = out.status.code() == Some(1) && !must_exist;
    drop(removed);
    if fetched || absent {
        return Ok(());
    }
    let who = user.map_or("this user".to_string(), |(u, _, _)| format!("user '{u}'"));
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.trim();
    bail!(
        "the restore_command this restore would write fails when run as {who} on {name} ({}{}{said}): the server would stop its recovery (or end it early); make the key files, the configuration file it names (if any) and the repositories readable by {who} (a key file it reads must not be readable by group or others: chmod 600, owned by that user), then restore again; nothing was written",
        match out.status.code() {
            Some(c) => format!("exit {c}"),
            None => "killed by a signal".into(),
        },
        if said.is_empty() { "" } else { ": " },
    )
}

/// Removes a probe's directory when dropped.
struct Removed<'a>(&'a std::path::Path);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0);
    }
}
