//! The restored cluster's configuration is the drill's own. The set's postgresql.conf
//! and postgresql.auto.conf are moved aside (SCRATCH/set-config) and replaced: of the
//! set's settings only memory and planner ones and those recovery must match the
//! primary's are kept (simple `name = value` lines), plus the recovery settings the
//! restore wrote. No command, library, include, file or network setting of the set
//! reaches the server.

use anyhow::{bail, Context, Result};
use rustix::fs::{Mode, OFlags, CWD};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

/// Where the set's own configuration files go, in the scratch.
pub(super) const ASIDE: &str = "set-config";
const FILES: [&str; 2] = ["postgresql.conf", "postgresql.auto.conf"];
/// A configuration file longer than this is not read.
const MAX: u64 = 1 << 20;

/// The set's settings a drill keeps (and every `enable_*` planner switch).
const KEPT: &[&str] = &[
    // Memory.
    "shared_buffers",
    "work_mem",
    "maintenance_work_mem",
    "autovacuum_work_mem",
    "logical_decoding_work_mem",
    "hash_mem_multiplier",
    "temp_buffers",
    "wal_buffers",
    "effective_cache_size",
    "max_wal_size",
    "min_wal_size",
    // Planner.
    "random_page_cost",
    "seq_page_cost",
    "cpu_tuple_cost",
    "cpu_index_tuple_cost",
    "cpu_operator_cost",
    "parallel_setup_cost",
    "parallel_tuple_cost",
    "effective_io_concurrency",
    "maintenance_io_concurrency",
    "default_statistics_target",
    "max_parallel_workers",
    "max_parallel_workers_per_gather",
    "max_parallel_maintenance_workers",
    "jit",
    // What recovery needs equal to (or above) the primary's.
    "max_connections",
    "max_worker_processes",
    "max_wal_senders",
    "max_prepared_transactions",
    "max_locks_per_transaction",
    "max_pred_locks_per_transaction",
    "wal_level",
    "track_commit_timestamp",
    // How times read and print.
    "timezone",
    "datestyle",
];

/// The names of the recovery settings restore writes after its mark.
const RECOVERY: &[&str] = &[
    "restore_command",
    "recovery_target_time",
    "recovery_target_lsn",
    "recovery_target_xid",
    "recovery_target_name",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_timeline",
];

fn kept(name: &str) -> bool {
    KEPT.contains(&name) || name.starts_with("enable_")
}

/// `name` and `value` of a simple `name = value` line: a plain name, a value of one
/// bare word or one quoted string with no quote or backslash in it, then at most a
/// comment. None for anything else.
fn simple(line: &str) -> Option<(String, &str)> {
    let (name, rest) = line.split_once('=')?;
    let name = name.trim();
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if name.is_empty() || !name.chars().all(plain) || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let rest = rest.trim_start();
    let (value, after) = match rest.strip_prefix('\'') {
        Some(q) => {
            let end = q.find(['\'', '\\'])?;
            if q.as_bytes()[end] != b'\'' {
                return None;
            }
            rest.split_at(end + 2)
        }
        None => {
            let word = |c: char| c.is_ascii_alphanumeric() || "._+-".contains(c);
            let end = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            rest.split_at(end)
        }
    };
    let after = after.trim_start();
    if value.is_empty() || !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    Some((name.to_ascii_lowercase(), value))
}

/// The kept settings of `texts` read in order (the last value of a name wins).
fn allowed(texts: &[&str]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    for line in texts.iter().flat_map(|t| t.lines()) {
        let Some((name, value)) = simple(line).filter(|(n, _)| kept(n)) else {
            continue;
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(o) => o.1 = value.to_string(),
            None => out.push((name, value.to_string())),
        }
    }
    out
}

/// The recovery lines restore appended to `auto` (after its last mark): only those, and
/// its restore_command exactly `restore_command` (a `name = value` line).
fn recovery(auto: &str, restore_command: &str) -> Result<String> {
    let mark = format!("\n{}\n", crate::source::postgres_restore::RESTORE_MARK);
    let Some(at) = auto.rfind(&mark) else {
        bail!("the restored postgresql.auto.conf holds no recovery settings of the restore");
    };
    let mut out = String::new();
    let mut command = false;
    for line in auto[at + mark.len()..].lines() {
        let name = line.split_once(" = ").map(|(n, _)| n);
        match name {
            Some("restore_command") if line == restore_command && !command => command = true,
            Some(n) if n != "restore_command" && RECOVERY.contains(&n) => {}
            _ if line.trim().is_empty() => continue,
            _ => bail!(
                "the restored postgresql.auto.conf ends with '{}', not a recovery setting the restore writes",
                line.escape_default()
            ),
        }
        out.push_str(line);
        out.push('\n');
    }
    if !command {
        bail!("the restored postgresql.auto.conf has not the restore_command the restore writes");
    }
    Ok(out)
}

fn dir_at(at: &OwnedFd, name: &str) -> std::io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// A file moved aside, read (empty if it is not a regular file or is too long).
fn read_aside(aside: &OwnedFd, name: &str) -> String {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(aside, name, flags, Mode::empty()) else {
        return String::new();
    };
    let f = std::fs::File::from(fd);
    if !f.metadata().is_ok_and(|m| m.is_file() && m.len() <= MAX) {
        return String::new();
    }
    let mut b = vec![];
    let _ = f.take(MAX).read_to_end(&mut b);
    String::from_utf8_lossy(&b).into_owned()
}

/// A new file `name` in directory `at` (never through a link, never over a file), the
/// owner's (`ids`), 0600.
pub(super) fn create_at(
    at: &OwnedFd,
    name: &str,
    ids: Option<(u32, u32)>,
) -> std::io::Result<std::fs::File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let f = std::fs::File::from(rustix::fs::openat(
        at,
        name,
        flags,
        Mode::from_raw_mode(0o600),
    )?);
    if let Some((uid, gid)) = ids {
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
    }
    Ok(f)
}

/// The scratch directory, opened (never through a link).
pub(super) fn open_dir(dir: &Path) -> Result<OwnedFd> {
    rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("cannot open the scratch directory '{}'", dir.display()))
}

/// Moves the set's configuration files from `scratch/data` to `scratch/set-config` and
/// writes the drill's in their place. Returns the set's settings kept.
pub(super) fn confine(
    scratch: &Path,
    ids: Option<(u32, u32)>,
    restore_command: &str,
) -> Result<Vec<String>> {
    let top = open_dir(scratch)?;
    let data = dir_at(&top, "data")
        .with_context(|| format!("cannot open '{}/data'", scratch.display()))?;
    let aside_path = scratch.join(ASIDE);
    rustix::fs::mkdirat(&top, ASIDE, Mode::from_raw_mode(0o700))
        .with_context(|| format!("cannot create '{}'", aside_path.display()))?;
    let aside =
        dir_at(&top, ASIDE).with_context(|| format!("cannot open '{}'", aside_path.display()))?;
    let mut texts = vec![];
    for name in FILES {
        match rustix::fs::renameat(&data, name, &aside, name) {
            Ok(()) => texts.push(read_aside(&aside, name)),
            Err(rustix::io::Errno::NOENT) => texts.push(String::new()),
            Err(e) => {
                return Err(std::io::Error::from(e)).with_context(|| {
                    format!("cannot move the set's {name} to '{}'", aside_path.display())
                })
            }
        }
    }
    let recovery = recovery(&texts[1], restore_command)?;
    let settings = allowed(&[&texts[0], &texts[1]]);
    let mut conf = format!(
        "# Written by pagevault drill. The set's own configuration is in {}: of it only\n# these settings are kept.\n",
        aside_path.display()
    );
    for (n, v) in &settings {
        conf.push_str(&format!("{n} = {v}\n"));
    }
    let auto = format!(
        "# Do not edit this file manually!\n# It will be overwritten by the ALTER SYSTEM command.\n{}\n{recovery}",
        crate::source::postgres_restore::RESTORE_MARK
    );
    for (name, text) in FILES.iter().zip([conf, auto]) {
        create_at(&data, name, ids)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write '{}/data/{name}'", scratch.display()))?;
    }
    Ok(settings.into_iter().map(|(n, _)| n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_simple_lines_of_kept_settings_are_kept() {
        let conf = "shared_buffers = 64MB  # memory\n\
                    Work_Mem='8MB'\n\
                    recovery_end_command = 'touch /tmp/x'\n\
                    shared_preload_libraries = 'evil'\n\
                    include = 'other.conf'\n\
                    include_dir 'conf.d'\n\
                    max_connections = 100 200\n\
                    timezone = 'a\\'b'\n\
                    datestyle = 'iso, mdy' trailing\n\
                    enable_seqscan = off\n\
                    ssl = on\n";
        let auto = "shared_buffers = '128MB'\narchive_cleanup_command = 'x'\n";
        let got = allowed(&[conf, auto]);
        let want = [
            ("shared_buffers", "'128MB'"),
            ("work_mem", "'8MB'"),
            ("enable_seqscan", "off"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(n, v)| (&**n, &**v)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn only_the_restores_recovery_lines_are_kept() {
        let cmd = "restore_command = 'pagevault archive-get %f %p'";
        let mark = crate::source::postgres_restore::RESTORE_MARK;
        let ours = format!("\n{mark}\n{cmd}\nrecovery_target_timeline = 'latest'\n");
        let set = format!("recovery_end_command = 'x'\n{mark}\nrestore_command = 'evil'\n");
        assert_eq!(
            recovery(&format!("{set}{ours}"), cmd).unwrap(),
            format!("{cmd}\nrecovery_target_timeline = 'latest'\n")
        );
        let added = format!("{ours}recovery_end_command = 'x'\n");
        assert!(recovery(&added, cmd).is_err());
        assert!(recovery(&set, cmd).is_err());
        assert!(recovery("", cmd).is_err());
    }

    #[test]
    fn a_file_is_never_written_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("drill_hba.conf")).unwrap();
        let at = open_dir(d.path()).unwrap();
        assert!(create_at(&at, "drill_hba.conf", None).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
    }
}
