//! PostgreSQL facts in one place: the versions pagevault knows and their WAL page
//! magics, WAL file names and LSNs for any segment size, timeline history files,
//! libpq's password file.
//! A leaf module: it knows nothing of repositories, devices or the pipeline.

pub mod bin;
pub mod control;
pub mod facts;
pub mod history;
pub mod page;
pub mod pgpass;
pub mod walname;
pub mod walpage;
pub mod walrecord;
pub mod walsummary;

pub use walname::*;

/// The file a running server keeps in its data directory; its first line is the
/// postmaster's pid.
pub const POSTMASTER_PID: &str = "postmaster.pid";

/// A data directory's control file.
pub const PG_CONTROL: &str = "global/pg_control";

/// The file that makes a server recover to the end of its WAL, then open.
pub const RECOVERY_SIGNAL: &str = "recovery.signal";
/// The file that makes a server a standby: it recovers and keeps recovering.
pub const STANDBY_SIGNAL: &str = "standby.signal";

/// The first OID of an object made after initdb (FirstNormalObjectId): databases
/// below it (template0, template1, postgres) are built in.
pub const FIRST_NORMAL_OID: u32 = 16384;

/// The cluster's system identifier in its control file: ControlFileData's first field,
/// 8 bytes in the machine's order (little-endian here).
pub fn control_system_identifier(control: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(control.get(..8)?.try_into().ok()?))
}

/// The pid a `postmaster.pid` names (its first line), if it names one.
pub fn postmaster_pid(text: &str) -> Option<i32> {
    let pid = text.lines().next()?.trim().parse::<i32>().ok()?;
    (pid > 0).then_some(pid)
}

/// A PostgreSQL major version pagevault reads WAL of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u32,
    /// `XLOG_PAGE_MAGIC`: the first two bytes of every WAL page it writes.
    pub wal_page_magic: u16,
}

/// Every version whose WAL `archive-push` accepts, oldest first. The newest entry is
/// also the newest server `backup` accepts: a later release may change the WAL or
/// the backup protocol, so it is refused by name until added here.
pub const VERSIONS: [Version; 7] = [
    Version {
        major: 12,
        wal_page_magic: 0xD101,
    },
    Version {
        major: 13,
        wal_page_magic: 0xD106,
    },
    Version {
        major: 14,
        wal_page_magic: 0xD10D,
    },
    Version {
        major: 15,
        wal_page_magic: 0xD110,
    },
    Version {
        major: 16,
        wal_page_magic: 0xD113,
    },
    Version {
        major: 17,
        wal_page_magic: 0xD116,
    },
    Version {
        major: 18,
        wal_page_magic: 0xD118,
    },
];

/// WAL segment sizes initdb allows (`--wal-segsize`): powers of two in this range.
pub const WAL_SEG_MIN: u64 = 1 << 20;
pub const WAL_SEG_MAX: u64 = 1 << 30;

/// Data page sizes PostgreSQL builds with (`--with-blocksize`): powers of two in this range.
pub const BLCKSZ_MIN: u64 = 1 << 10;
pub const BLCKSZ_MAX: u64 = 32 << 10;
/// WAL page sizes (`--with-wal-blocksize`): powers of two in this range.
pub const WAL_BLCKSZ_MIN: u64 = 1 << 10;
pub const WAL_BLCKSZ_MAX: u64 = 64 << 10;

/// Timeline history and backup history files are a few lines of text; one larger than
/// this is not PostgreSQL's.
pub const HISTORY_MAX: u64 = 16 << 20;

/// A data page size PostgreSQL can be built with.
pub fn valid_page_size(p: u64) -> bool {
    p.is_power_of_two() && (BLCKSZ_MIN..=BLCKSZ_MAX).contains(&p)
}

/// The largest WAL file of kind `k` PostgreSQL writes: a segment (or a partial one) is
/// at most the largest segment size, a history file a few lines.
pub fn max_file_size(k: Kind) -> u64 {
    match k {
        Kind::Segment | Kind::Partial => WAL_SEG_MAX,
        Kind::History | Kind::Backup => HISTORY_MAX,
    }
}

/// The oldest server `backup` accepts.
pub const BACKUP_MIN_MAJOR: u32 = 14;

/// The call that starts a non-exclusive backup with a fast checkpoint, label `$1`,
/// returning its start LSN: 15 renamed pg_start_backup and dropped exclusive backups.
pub fn backup_start_call(major: u32) -> &'static str {
    match major {
        ..15 => "pg_start_backup($1, true, false)",
        _ => "pg_backup_start($1, true)",
    }
}

/// The call that stops it without waiting for the archiver (pagevault waits itself),
/// returning lsn, labelfile and spcmapfile.
pub fn backup_stop_call(major: u32) -> &'static str {
    match major {
        ..15 => "pg_stop_backup(false, false)",
        _ => "pg_backup_stop(false)",
    }
}

pub fn newest() -> Version {
    VERSIONS[VERSIONS.len() - 1]
}

/// The version whose WAL pages carry `magic`.
pub fn version_of_wal_magic(magic: u16) -> Option<Version> {
    VERSIONS.iter().copied().find(|v| v.wal_page_magic == magic)
}

/// Why a WAL page magic is refused, for "'FILE' is not a valid WAL segment: ...".
pub fn unknown_wal_magic(magic: u16) -> String {
    let (first, last) = (VERSIONS[0], newest());
    if magic > last.wal_page_magic && magic < 0xD200 {
        format!(
            "its first page has magic 0x{magic:04X}: WAL of a PostgreSQL release newer than {} \
             (0x{:04X}), which this pagevault does not know; upgrade pagevault before archiving it",
            last.major, last.wal_page_magic
        )
    } else {
        format!(
            "its first page has magic 0x{magic:04X}, not the WAL page magic of PostgreSQL {}-{} \
             (PostgreSQL {} writes 0x{:04X})",
            first.major, last.major, last.major, last.wal_page_magic
        )
    }
}

/// Checks `server_version_num` (e.g. 150004) for a backup; returns the major version.
pub fn check_backup_server(version_num: &str) -> Result<u32, String> {
    let num: u32 = version_num
        .trim()
        .parse()
        .map_err(|_| format!("the server reports version '{version_num}', not a number"))?;
    let major = num / 10000;
    let newest = newest().major;
    if major < BACKUP_MIN_MAJOR {
        return Err(format!(
            "PostgreSQL {major} (server_version_num {num}) is not supported: pagevault backs up \
             PostgreSQL {BACKUP_MIN_MAJOR} to {newest}"
        ));
    }
    if major > newest {
        return Err(format!(
            "PostgreSQL {major} (server_version_num {num}) is newer than this pagevault knows \
             (PostgreSQL {BACKUP_MIN_MAJOR} to {newest}); nothing was backed up: upgrade pagevault"
        ));
    }
    Ok(major)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(check_backup_server("150004"), Ok(15));
        assert_eq!(check_backup_server("180006"), Ok(18));
        let e = check_backup_server("190000").unwrap_err();
        assert!(e.contains("PostgreSQL 19") && e.contains("newer"), "{e}");
        assert_eq!(check_backup_server("140023"), Ok(14));
        let e = check_backup_server("130010").unwrap_err();
        assert!(
            e.contains("PostgreSQL 13") && e.contains("not supported"),
            "{e}"
        );
        assert!(backup_start_call(14).starts_with("pg_start_backup("));
        assert!(backup_stop_call(16).starts_with("pg_backup_stop("));
        assert!(check_backup_server("x").is_err());
        assert_eq!(version_of_wal_magic(0xD118).map(|v| v.major), Some(18));
        assert_eq!(version_of_wal_magic(0xD110).map(|v| v.major), Some(15));
        assert!(version_of_wal_magic(0xD11A).is_none());
        assert!(unknown_wal_magic(0xD11A).contains("newer than 18"));
        assert!(unknown_wal_magic(0x1234).contains("not the WAL page magic"));
        // Magics grow with releases.
        assert!(VERSIONS
            .windows(2)
            .all(|w| w[0].wal_page_magic < w[1].wal_page_magic && w[0].major + 1 == w[1].major));
    }
}
