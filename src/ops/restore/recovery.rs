//! The recovery settings a PostgreSQL restore writes: restore_command and targets,
//! `--standby` (standby.signal, primary_conninfo), `--archive-mode`, and
//! `--recovery-option KEY=VALUE` lines, written last so that they win.

use super::{restore_command_with, RestoreOptions, Sets, TargetAction, TimelineTarget};
use crate::source::Recovery;
use anyhow::{bail, Result};

/// `--archive-mode`: whether the restored server may archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveMode {
    /// `archive_mode = off` written: the copy archives nothing.
    Off,
    /// The set's own setting kept.
    Preserve,
}

impl std::str::FromStr for ArchiveMode {
    type Err = String;

    fn from_str(s: &str) -> Result<ArchiveMode, String> {
        match s {
            "off" => Ok(ArchiveMode::Off),
            "preserve" => Ok(ArchiveMode::Preserve),
            _ => Err(format!("'{s}': give off or preserve")),
        }
    }
}

/// The longest `--recovery-option` value.
const OPTION_MAX: usize = 4096;

/// `--recovery-option KEY=VALUE`, each checked: a setting name (letters, digits, `_`,
/// a `.` for an extension's) and a value of one line.
pub(super) fn options(given: &[String]) -> Result<Vec<(String, String)>> {
    let mut out = vec![];
    for o in given {
        let Some((k, v)) = o.split_once('=') else {
            bail!(
                "--recovery-option '{}': write KEY=VALUE (e.g. recovery_target_action=pause)",
                o.escape_debug()
            );
        };
        let (k, v) = (k.trim(), v.trim());
        let name_ok = k.len() <= 63
            && k.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
        if !name_ok {
            bail!("--recovery-option: '{}' is not a PostgreSQL setting name (lower-case letters, digits, '_', '.')", k.escape_debug());
        }
        if v.len() > OPTION_MAX || v.chars().any(|c| c.is_control()) {
            bail!(
                "--recovery-option {k}: the value must be one line of at most {OPTION_MAX} bytes"
            );
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Refusals before anything is written.
pub(super) fn check(o: &RestoreOptions) -> Result<()> {
    let target = o.until.is_some()
        || o.until_lsn.is_some()
        || o.until_xid.is_some()
        || o.until_name.is_some();
    if o.standby && target {
        bail!("--standby keeps replaying and never stops at a recovery target: drop --until*, or restore without --standby to stop there and open");
    }
    if o.primary_conninfo.is_some() && !o.standby {
        bail!("--primary-conninfo is for a standby: add --standby");
    }
    options(&o.recovery_options)?;
    Ok(())
}

/// Whether the restored server may archive, and why. By default a copy does not: a
/// restored copy that archives into the production repository on a new timeline
/// mixes its WAL with the cluster's. A `--delta` restore re-seeds the original in
/// place and a `--standby` archives nothing until promoted: both keep the setting.
fn archive_off(o: &RestoreOptions) -> Option<String> {
    match o.archive_mode {
        Some(ArchiveMode::Preserve) => None,
        Some(ArchiveMode::Off) => Some("--archive-mode off".into()),
        None if o.delta || o.standby => None,
        None => Some(
            "a restored copy archives nothing by default, so that its WAL never mixes with the cluster's in the repository (--archive-mode preserve keeps the set's setting)"
                .into(),
        ),
    }
}

/// The settings of the restored server.
pub(super) fn settings(o: &RestoreOptions, sets: &Sets) -> Result<Recovery> {
    Ok(Recovery {
        restore_command: (sets.repo.as_ref())
            .map(|r| restore_command_with(r, &sets.others, o.config.as_ref()))
            .transpose()?,
        target: o
            .until
            .clone()
            .map(|t| ("time", t))
            .or(o.until_lsn.clone().map(|l| ("lsn", l)))
            .or(o.until_xid.clone().map(|x| ("xid", x)))
            .or(o.until_name.clone().map(|n| ("name", n))),
        timeline: o.timeline.map(TimelineTarget::setting),
        action: o.target_action.and_then(TargetAction::setting),
        standby: o.standby,
        primary_conninfo: o.primary_conninfo.clone(),
        archive_off: archive_off(o),
        options: options(&o.recovery_options)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_options_are_setting_names_and_one_line_values() {
        let ok = options(&[
            "work_mem=64MB".into(),
            "pg_stat_statements.max = 500".into(),
        ])
        .unwrap();
        assert_eq!(ok[1], ("pg_stat_statements.max".into(), "500".into()));
        for bad in [
            "work_mem",
            "Work_mem=1",
            "a b=1",
            "x=1\nrestore_command=evil",
            "'x'=1",
        ] {
            assert!(options(&[bad.into()]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_copy_archives_nothing_unless_told() {
        let o = |delta, standby, mode| RestoreOptions {
            delta,
            standby,
            archive_mode: mode,
            ..Default::default()
        };
        assert!(archive_off(&o(false, false, None)).is_some());
        assert!(archive_off(&o(true, false, None)).is_none());
        assert!(archive_off(&o(false, true, None)).is_none());
        assert!(archive_off(&o(false, false, Some(ArchiveMode::Preserve))).is_none());
        assert!(archive_off(&o(true, false, Some(ArchiveMode::Off))).is_some());
    }
}
