//! `--report FILE.html`: a sampler that snapshots the engine's live counters every
//! 250 ms, and one self-contained page drawn from the samples (inline SVG, the raw
//! series embedded as JSON, no network needed to view it).

mod chart;
mod html;
mod sampler;
mod series;
#[cfg(test)]
mod tests;
mod valley;

pub use sampler::{Sampler, INTERVAL};
pub use series::{IoSeries, PoolSeries, Series, StageSeries};

use anyhow::{Context, Result};
use serde_json::Value;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Value parser of `--report`: the file must be creatable, known before any work starts.
pub fn writable_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_dir() {
        return Err(format!(
            "report '{s}' is a directory; name a file such as '{}'",
            p.join("report.html").display()
        ));
    }
    let name = p
        .file_name()
        .ok_or_else(|| format!("report '{s}' names no file"))?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "directory '{}' of report '{s}' does not exist; create it first",
            dir.display()
        ));
    }
    // Creating a file is the only sure test (root ignores modes; read-only mounts).
    let probe = tmp_name(&dir, name);
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
            Ok(p)
        }
        Err(e) => Err(format!(
            "cannot write report '{s}' in '{}': {e}",
            dir.display()
        )),
    }
}

fn tmp_name(dir: &Path, name: &OsStr) -> PathBuf {
    dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ))
}

/// Everything the page shows.
pub struct Report<'a> {
    /// "backup" or "restore".
    pub command: &'a str,
    /// Shown as a table: key -> value (arrays are joined).
    pub config: Value,
    /// The command's JSON summary (raw_bytes, seconds, mb_per_sec, waits ...).
    pub summary: &'a Value,
    pub series: Series,
    /// Names of the read and write lanes, by index.
    pub read_names: Vec<String>,
    pub write_names: Vec<String>,
}

/// Writes the page atomically: a temporary file beside it, then a rename.
pub fn write(path: &Path, r: &Report) -> Result<()> {
    let html = html::render(r);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tmp_name(dir, path.file_name().unwrap_or(OsStr::new("report")));
    let written = (|| -> std::io::Result<()> {
        // Created new: a link planted at the temp name is removed, never followed.
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(html.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write report '{}'", path.display()))
}
