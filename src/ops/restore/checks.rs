//! What a restore checks before it writes anything: the options against the set and
//! the target, the log chain recovery will need, the cluster the chain is of, and the
//! restore_command tried as the server will run it.

use super::chain::Sets;
use super::wal::{self, check_wal_chain, WalCheck};
use super::{recovery, replace, restore_command_with, RestoreOptions, Show};
use crate::source::{self, Restorer};
use crate::target;
use anyhow::{anyhow, bail, Result};

/// The source's restorer, once the options and the target suit it, and the log
/// chain recovery will need, checked before anything is written.
/// `planned` gets the first WAL file recovery will fetch as soon as it is known.
pub(super) fn check(
    o: &RestoreOptions,
    sets: &Sets,
    planned: &mut dyn FnMut(&str),
    show: Show,
) -> Result<(Box<dyn Restorer>, Option<WalCheck>)> {
    if o.replace && o.delta {
        bail!("--replace and --delta exclude each other: --replace deletes what the target holds, --delta keeps what matches the set");
    }
    if o.replace || o.delta {
        replace::check(&o.to, sets, o.delta)?;
    }
    let m = &sets.full().manifest;
    let restorer = source::restorer(m.source.kind, &o.tablespace_map, o.tablespaces_from_set);
    if !restorer.recovers() && o.has_recovery_target() {
        bail!(
            "recovery targets (--until*, --timeline) apply to PostgreSQL sets only; this set is of a {} source",
            m.source.kind
        );
    }
    let has_target = o.until.is_some()
        || o.until_lsn.is_some()
        || o.until_xid.is_some()
        || o.until_name.is_some();
    if o.target_action.is_some() && !has_target {
        bail!("--target-action applies at a recovery target (--until, --until-lsn, --until-xid, --until-name): without one recovery replays the whole archive and the server opens");
    }
    restorer.check_target(&o.to)?;
    recovery::check(o)?;
    let recovery_asked = o.standby || o.archive_mode.is_some() || !o.recovery_options.is_empty();
    if recovery_asked && !restorer.recovers() {
        bail!("--standby, --archive-mode and --recovery-option apply to PostgreSQL sets only; this set is of a {} source", m.source.kind);
    }
    let some_dbs = !o.db_include.is_empty() || !o.db_exclude.is_empty();
    if some_dbs && (o.delta || o.stage_only) {
        bail!("--db-include and --db-exclude restore into an empty directory (or with --replace): with --delta the files left out would keep stale pages");
    }
    if o.delta {
        let extra = &sets.newest().set.manifest.extra;
        restorer.check_delta_target(&o.to, extra, o.force)?;
    }
    // The newest set's entries are the ones laid out.
    restorer.check_entries(&sets.newest().set.manifest)?;
    // From the newest set's end: recovery starts there.
    let newest = sets.newest();
    let wal_check = match (&sets.repo, &newest.entry) {
        (Some(repo), Some(entry)) if restorer.recovers() && !o.stage_only => check_wal_chain(
            repo,
            &sets.others,
            entry,
            &newest.set.manifest.extra,
            o,
            planned,
            show,
        )?,
        _ => None,
    };
    Ok((restorer, wal_check))
}

pub(super) type Owner = Option<(u32, u32)>;

/// `check`, the owner looked up and the restore_command tried as the server will run
/// it, before anything is written. The trial runs while the archive's WAL is verified:
/// it needs only the name of the first file.
pub(super) fn check_and_probe(
    o: &RestoreOptions,
    sets: &Sets,
    show: Show,
) -> Result<(Box<dyn Restorer>, Option<WalCheck>, Owner)> {
    let owner = o.owner.as_deref().map(target::lookup_user).transpose()?;
    let user = (o.owner.as_deref().zip(owner)).map(|(u, (uid, gid))| (u, uid, gid));
    let (repo, entry) = match (&sets.repo, &sets.newest().entry, o.stage_only) {
        (Some(repo), Some(entry), false) => (repo, entry),
        _ => {
            let (restorer, wal_check) = check(o, sets, &mut |_| {}, show)?;
            return Ok((restorer, wal_check, owner));
        }
    };
    let probe = |name: &str, must_exist: bool| -> Result<()> {
        let command = restore_command_with(repo, &sets.others, o.config.as_ref())?;
        wal::probe_restore_command(&command, name, must_exist, user)
    };
    let probe = &probe;
    std::thread::scope(|s| {
        let mut early = None;
        let (restorer, wal_check) = check(
            o,
            sets,
            &mut |first| {
                let first = first.to_string();
                early = Some(s.spawn(move || probe(&first, true)));
            },
            show,
        )?;
        match early {
            Some(t) => t.join().expect("the restore_command trial panicked")?,
            None => {
                let late = wal::probe_name(wal_check.as_ref(), entry);
                if let Some((name, must_exist)) = late.filter(|_| restorer.recovers()) {
                    probe(&name, must_exist)?;
                }
            }
        }
        Ok((restorer, wal_check, owner))
    })
}

/// The chain's cluster (its manifests' facts) must be the repository's: the one its
/// archived WAL is of, or with none archived, the one its other sets are of.
pub(super) fn check_same_cluster(sets: &Sets) -> Result<()> {
    let Some(repo) = &sets.repo else {
        return Ok(());
    };
    let m = &sets.newest().set.manifest;
    let Ok(Some(facts)) = crate::pg::facts::PgFacts::from_extra(&m.extra) else {
        return Ok(());
    };
    let id = &facts.system_identifier;
    let refuse = |theirs: &str, what: &str| {
        anyhow!(
            "set {} is of cluster {id}, but {what} is of cluster {theirs}: a set of another cluster is never restored as this repository's; remove it from the repository (or name a set of cluster {theirs} with --set)",
            m.set_id
        )
    };
    if let Some(w) = crate::repo::wal::system_identifier(repo)? {
        return match w.to_string() == *id {
            true => Ok(()),
            false => Err(refuse(&w.to_string(), "the repository's archived WAL")),
        };
    }
    let chain: Vec<&str> = (sets.links.iter())
        .map(|l| &*l.set.manifest.set_id)
        .collect();
    for e in repo.catalog()? {
        match &e.system_identifier {
            Some(s) if s != id && !chain.contains(&&*e.set_id) => {
                return Err(refuse(s, &format!("the repository's set {}", e.set_id)))
            }
            _ => {}
        }
    }
    Ok(())
}
