//! `pagevault history`: the sets a repository holds, oldest first.

use super::print_json;
use crate::device::object::StoreOptions;
use crate::repo::Repo;
use crate::units::human;
use anyhow::Result;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct HistoryArgs {
    /// The repository.
    #[arg(long)]
    pub repo: String,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo.
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: HistoryArgs, store: &StoreOptions) -> Result<()> {
    let repo = Repo::open(&a.repo, false, store)?;
    let sets = repo.catalog()?;
    let stale = crate::repo::chain::stale_vm_sets(&sets);
    let mut notes = repo.record_notes();
    if !stale.is_empty() {
        notes.push(format!(
            "set(s) {}: {}",
            stale.join(", "),
            crate::repo::STALE_VM
        ));
    }
    if a.json {
        // A stable document (docs/PROGRAMS.md): fields are added, never renamed or
        // removed, without a new version.
        let sets: Vec<serde_json::Value> = (sets.iter())
            .map(|e| {
                let mut v = serde_json::to_value(e).unwrap_or_default();
                v["visibility_map_may_be_stale"] = stale.contains(&e.set_id).into();
                v
            })
            .collect();
        print_json(&json!({ "version": 1, "sets": sets, "warnings": notes }));
        return Ok(());
    }
    for w in &notes {
        eprintln!("Warning: {w}.");
    }
    println!(
        "{:<32} {:<5} {:<9} {:<25} {:>10} {:>10} {:>3} {:<18} {:<18} base",
        "set", "type", "copy-only", "finished", "size", "stored", "tli", "start lsn", "stop lsn"
    );
    for s in &sets {
        // A catalog record is data: its strings are shown escaped, cut by characters.
        let text = |v: Option<&str>| super::shown(v.unwrap_or("-"));
        println!(
            "{:<32} {:<5} {:<9} {:<25} {:>10} {:>10} {:>3} {:<18} {:<18} {}",
            text(Some(&s.set_id)),
            s.backup_type,
            if s.copy_only { "yes" } else { "no" },
            finished(&s.finished),
            human(s.raw_bytes),
            human(s.stored_bytes),
            s.timeline.map_or("-".to_string(), |t| t.to_string()),
            text(s.start_lsn.as_deref()),
            text(s.stop_lsn.as_deref()),
            text(s.base_set.as_deref())
        );
    }
    if sets.is_empty() {
        println!("(no backup sets yet)");
    }
    Ok(())
}

/// A set's finishing time to the second, with its zone: `2026-11-28 06:47:21+00:00`.
/// A record whose time is not RFC 3339 is shown as it is, escaped and whole.
fn finished(t: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(t) {
        Ok(d) => d.format("%Y-%m-%d %H:%M:%S%:z").to_string(),
        Err(_) => super::shown(t),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_finished_time_keeps_its_zone() {
        assert_eq!(
            super::finished("2026-11-28T06:47:21.123456789+01:00"),
            "2026-11-28 06:47:21+01:00"
        );
        assert_eq!(super::finished("yesterday\n"), "yesterday\\n");
    }
}
