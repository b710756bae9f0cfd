//! Where a set goes (the repository's stripes, then `--to`), the base a differential or
//! incremental is measured against, and the source it reads.

use super::*;

/// The base of a differential (the newest full set of the repository that may be one:
/// not copy-only, not damaged, of a PostgreSQL source) or of an incremental (the newest
/// such set of any type), and the paths it holds.
pub(super) fn diff_base(
    repo: &Repo,
    source: &str,
    ty: BackupType,
) -> Result<(CatalogEntry, source::postgres::DiffBase)> {
    let what = match ty {
        BackupType::Incr => "incremental",
        _ => "differential",
    };
    if !source.starts_with("postgres") {
        bail!("{what} backups are for PostgreSQL sources (pages carry LSNs); take a full backup");
    }
    let catalog = repo.catalog()?;
    let Some(base) = catalog.iter().rev().find(|c| {
        (c.backup_type == BackupType::Full || ty == BackupType::Incr)
            && !c.copy_only
            && !c.damaged
            && c.source_kind == SourceKind::Postgres
    }) else {
        bail!(
            "no usable base for a{} {what} in '{}': it needs a full backup that is not copy-only or damaged; take one with --type full",
            if ty == BackupType::Incr { "n" } else { "" },
            repo.describe()
        );
    };
    let start_lsn = base
        .start_lsn
        .as_deref()
        .and_then(crate::pg::parse_lsn)
        .ok_or_else(|| anyhow::anyhow!("base set {} records no start LSN", base.set_id))?;
    let manifest = crate::ops::set_manifest(repo, base).context("cannot read the base set")?;
    let files = manifest.files.into_iter().map(|f| f.path.into()).collect();
    Ok((
        base.clone(),
        source::postgres::DiffBase {
            start_lsn,
            files,
            summaries: true,
        },
    ))
}

/// Where the set goes: device specs and devices, the repository, the base of a diff.
pub(super) struct Dest {
    pub(super) specs: Vec<String>,
    pub(super) devices: Vec<Box<dyn Device>>,
    pub(super) repo: Option<Repo>,
    pub(super) base: Option<(CatalogEntry, source::postgres::DiffBase)>,
    pub(super) discard: bool,
}

/// The source `o.source` names.
pub(super) fn parse_source(
    o: &BackupOptions,
    dest: &Dest,
    set_hex: &str,
) -> Result<Box<dyn Source>> {
    source::parse(
        &o.source,
        &source::Options {
            page_size: o.page_size as u32,
            spool: o.spool.clone(),
            pgdata: o.pgdata.clone(),
            label: o
                .name
                .clone()
                .unwrap_or_else(|| format!("pagevault {set_hex}")),
            continue_after_error: o.continue_after_error,
            archive_timeout: o.archive_timeout,
            base: dest.base.as_ref().map(|(_, b)| b.clone()),
            password_file: o.password_file.clone(),
            primary: o.primary.clone(),
            archived: archived(o)?,
        },
    )
}

/// With --repo: whether the repository's WAL archive holds a file (a handle of its own).
fn archived(o: &BackupOptions) -> Result<Option<source::postgres::Archived>> {
    let Some(spec) = o.repo.as_deref() else {
        return Ok(None);
    };
    // The backup writes to it: opened as a write (a key may make it keyed).
    let repo = Repo::open(spec, true, &o.store)?;
    Ok(Some(std::sync::Arc::new(move |name: &str| {
        crate::repo::wal::has_segment(&repo, name)
    })))
}

/// The devices of the set: the repository's stripes first, then `to`.
pub(super) fn destination(o: &BackupOptions, set_hex: &str) -> Result<Dest> {
    let repo = o
        .repo
        .as_deref()
        .map(|r| Repo::open(r, true, &o.store))
        .transpose()?;
    let base = match (o.backup_type, &repo) {
        (BackupType::Diff, None) => {
            bail!("a differential backup needs --repo: its base is the newest full set there")
        }
        (BackupType::Incr, None) => {
            bail!("an incremental backup needs --repo: its base is the newest set there")
        }
        (ty @ (BackupType::Diff | BackupType::Incr), Some(repo)) => {
            Some(diff_base(repo, &o.source, ty)?)
        }
        (BackupType::Full, _) => None,
    };
    let mut specs: Vec<String> = vec![];
    if let Some(repo) = &repo {
        let n = o.stripes.unwrap_or(if o.to.is_empty() { 1 } else { 0 });
        for i in 1..=n {
            specs.push(repo.stripe_spec(set_hex, i as usize)?);
        }
    }
    specs.extend(o.to.iter().cloned());
    if specs.is_empty() {
        bail!("no device: name --to DEVICE or --repo with --stripes 1 or more");
    }
    let devices = set_write::devices(&specs, &o.store)?;
    let discard = set_write::is_discard(&devices);
    Ok(Dest {
        specs,
        devices,
        repo,
        base,
        discard,
    })
}

pub(super) fn same_cluster(info: &SourceInfo, dest: &Dest) -> Result<()> {
    let sysid = info.identity.get("system_identifier");
    if let Some((b, _)) = &dest.base {
        if b.system_identifier.as_ref() != sysid {
            bail!(
                "the base set {} is of another cluster than {}: take a full backup first",
                b.set_id,
                info.location
            );
        }
    }
    if let (Some(repo), Some(sysid)) = (&dest.repo, sysid) {
        if let Some(other) = repo
            .catalog()?
            .iter()
            .find(|c| c.system_identifier.as_ref().is_some_and(|s| s != sysid))
        {
            bail!(
                "repository '{}' holds sets of cluster {} (set {}), not of cluster {sysid}: use one repository per cluster",
                repo.describe(),
                other.system_identifier.as_deref().unwrap_or("?"),
                other.set_id
            );
        }
    }
    Ok(())
}
