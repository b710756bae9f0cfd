//! The use cases, one file each (rustic_core's `commands/` is the model): each takes
//! an options struct and the progress counters and returns a report struct, which is
//! what `--json` serialises. They decide; `cmd/` parses and prints; the engine moves
//! bytes.

pub mod archive;
pub mod backup;
pub mod check;
pub mod copy;
pub mod drill;
pub mod estimate;
pub mod expire;
pub mod init;
pub mod key;
pub mod merge;
pub mod restore;
pub mod status;
pub mod tune;
pub mod verify;

use anyhow::Context;

/// Whether a restore of set `m` may hold visibility-map pages older than its WAL made
/// them ([`crate::repo::CatalogEntry::vm_may_be_stale`]): its manifest records change
/// rules before [`crate::pg::walsummary::RULES`], or, written before the rules were
/// recorded, it holds a visibility-map fork read page by page, or is a merge.
pub(crate) fn vm_may_be_stale(m: &crate::format::manifest::Manifest) -> bool {
    use crate::pg::page::{RelPath, VM_FORK};
    if m.source.kind != crate::format::manifest::SourceKind::Postgres {
        return false;
    }
    match m.extra.get(backup::CHANGE_RULES).map(|v| v.as_u64()) {
        Some(Some(r)) => r < crate::pg::walsummary::RULES as u64,
        // A value that is not a number is no record of exact rules.
        Some(None) => true,
        None => {
            m.name
                .as_deref()
                .is_some_and(|n| n.starts_with(crate::repo::MERGE_NAME))
                || (m.files.iter())
                    .any(|f| f.sparse && RelPath::parse(&f.path).is_some_and(|r| r.fork == VM_FORK))
        }
    }
}

/// The manifest of a set the catalog records (from its first stripe).
pub(crate) fn set_manifest(
    repo: &crate::repo::Repo,
    set: &crate::repo::CatalogEntry,
) -> anyhow::Result<crate::format::manifest::Manifest> {
    let first = set
        .stripes
        .first()
        .ok_or_else(|| anyhow::anyhow!("set {} records no stripe", set.set_id))?;
    let pin = set.stripe_versions.first().and_then(|v| v.as_deref());
    let m = crate::set::read::open_any(&repo.stripe_path(first), pin, repo.options())
        .with_context(|| format!("cannot read set {}", set.set_id))?;
    authenticated_in(repo, set, &m)?;
    Ok(m)
}

/// An encrypted repository holds encrypted sets only, a signed one signed or encrypted
/// sets: any other is forged (or put there by hand, or, in a signed repository, older
/// than its signing), and is refused even when no key was given. Each must be this
/// repository's set (`bound_in`).
pub(crate) fn authenticated_in(
    repo: &crate::repo::Repo,
    e: &crate::repo::CatalogEntry,
    m: &crate::format::manifest::Manifest,
) -> anyhow::Result<()> {
    use crate::format::seal::KeyUse;
    use crate::format::{SEALED_VERSION, SIGNED_VERSION};
    let Some(k) = repo.protection() else {
        return Ok(());
    };
    let id = crate::crypt::show_id(&k.key_id);
    match k.mode {
        KeyUse::Seal if m.format_version != SEALED_VERSION => anyhow::bail!(
            "set {} in repository '{}' is not encrypted, but the repository is (key id {id}): the set is damaged or forged",
            m.set_id,
            repo.describe(),
        ),
        KeyUse::Sign if ![SEALED_VERSION, SIGNED_VERSION].contains(&m.format_version) => {
            anyhow::bail!(
                "set {} in repository '{}' is not signed, but the repository is (key id {id}): the set is forged, or older than the repository's signing",
                m.set_id,
                repo.describe(),
            )
        }
        _ => anyhow::Ok(()),
    }?;
    bound_in(repo, e, m)
}

/// A keyed repository's set records the repository's id (under its tag or seal), or,
/// written before ids, lies inside it: a record naming another repository's set, or a
/// stripe elsewhere, is refused even when the key is the same. A plain repository's
/// writer can forge any set there, so it only hears where a stripe lies (verify).
fn bound_in(
    repo: &crate::repo::Repo,
    e: &crate::repo::CatalogEntry,
    m: &crate::format::manifest::Manifest,
) -> anyhow::Result<()> {
    if repo.protection().is_none() {
        return Ok(());
    }
    let why = "another repository's set, named by a copied or forged catalog record";
    let fix = format!(
        "move the record (catalog/{}.json) out of catalog/",
        e.set_id
    );
    match m.extra.get(backup::REPOSITORY) {
        Some(v) => {
            let theirs = v.as_str().filter(|s| crate::repo::is_repo_id(s));
            if theirs.is_none() || theirs != repo.id().as_deref() {
                anyhow::bail!(
                    "set {} in repository '{}' belongs to repository {} ({why}); {fix}",
                    e.set_id,
                    repo.describe(),
                    theirs.map_or_else(|| format!("'{v}' (not an id)"), str::to_string),
                );
            }
        }
        None => {
            if let Some(st) = e.stripes.iter().find(|s| !repo.inside(s)) {
                anyhow::bail!(
                    "set {} in repository '{}' records no repository and its stripe '{}' lies outside the repository ({why}); {fix} (a set written with --to before repositories had ids reads with --from)",
                    e.set_id,
                    repo.describe(),
                    repo.stripe_path(st),
                );
            }
        }
    }
    Ok(())
}

/// The time ages are measured from: `PAGEVAULT_NOW` (RFC 3339, e.g.
/// 2026-05-13T12:00:00Z) when set, else the clock. Only `expire` and `status` read it,
/// to see what retention would do on another day (and for tests); nothing is stamped
/// with it.
pub fn now() -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    match std::env::var("PAGEVAULT_NOW") {
        Ok(v) if !v.is_empty() => chrono::DateTime::parse_from_rfc3339(&v)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| {
                anyhow::anyhow!(
                    "PAGEVAULT_NOW='{v}' is not an RFC 3339 time (2026-05-13T12:00:00Z): {e}"
                )
            }),
        _ => Ok(chrono::Utc::now()),
    }
}
