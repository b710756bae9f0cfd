//! Where a PostgreSQL major version's programs (postgres, pg_ctl, psql, pg_amcheck)
//! are: the directory given, Debian's and the PGDG RPMs' places, then PATH. A
//! directory counts only when its `postgres --version` is of that major.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The major version `DIR/postgres --version` prints ("postgres (PostgreSQL) 15.4 ...").
pub fn major_of(dir: &Path) -> Option<u32> {
    let out = std::process::Command::new(dir.join("postgres"))
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.split("(PostgreSQL)").nth(1)?.trim_start();
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The bin/ directory of PostgreSQL `major`: `given` (refused when of another
/// version), else /usr/lib/postgresql/MAJOR/bin, /usr/pgsql-MAJOR/bin, then PATH.
pub fn server_bin(major: u32, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = given {
        return match major_of(dir) {
            Some(m) if m == major => Ok(dir.to_path_buf()),
            Some(m) => bail!(
                "--pg-bin '{}' holds PostgreSQL {m}, the set is of PostgreSQL {major}",
                dir.display()
            ),
            None => bail!(
                "--pg-bin '{}' holds no runnable postgres (DIR/postgres --version failed)",
                dir.display()
            ),
        };
    }
    let mut candidates = vec![
        PathBuf::from(format!("/usr/lib/postgresql/{major}/bin")),
        PathBuf::from(format!("/usr/pgsql-{major}/bin")),
    ];
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    for dir in candidates {
        if dir.join("pg_ctl").is_file() && major_of(&dir) == Some(major) {
            return Ok(dir);
        }
    }
    bail!(
        "found no PostgreSQL {major} programs (pg_ctl, postgres) in /usr/lib/postgresql/{major}/bin, \
         /usr/pgsql-{major}/bin or PATH: install the server of that version or give --pg-bin DIR"
    )
}
