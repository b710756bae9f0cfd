//! `pagevault status`: how fresh a repository's backups and WAL are, as text, JSON,
//! Prometheus's text format (node_exporter's textfile collector), or a Nagios check.

use super::print_json;
use crate::cmd::config::RepoOptions;
use crate::device::object::StoreOptions;
use crate::ops::status::{status, StatusOptions, StatusReport, WalLag};
use crate::repo::many::RepoStore;
use crate::units::human;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct StatusArgs {
    /// The repository. Repeat for several (a stanza's repo list gives them all): each
    /// one's status, and which lag behind the others in WAL; --prometheus labels each
    /// one's metrics by its `repo`, and the Nagios check checks each and takes the worst.
    /// Each opens with its own key and endpoint when the stanza gives them.
    #[arg(long, required = true)]
    pub repo: Vec<String>,
    /// Of the stanza's repositories (--stanza), use this one: its name or its place N
    /// (1 the first), as backup's --to-repo picks; its own key, endpoint and settings
    /// apply. Instead of --repo (status: this one instead of them all).
    #[arg(long, value_name = "NAME|N")]
    pub repo_index: Option<String>,
    /// A PostgreSQL server (postgres://USER@HOST:PORT/DB) whose WAL the repository
    /// archives: the archiving lag is measured against it.
    #[arg(long)]
    pub source: Option<String>,
    /// The source's password is the first line of FILE.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// The spool of `archive-push --async`: its backlog and the pusher's last error.
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// Print JSON.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print metrics in Prometheus's text format (names start with pagevault_), e.g.
    /// into node_exporter's textfile collector directory from a timer.
    #[arg(long)]
    pub prometheus: bool,
    /// Nagios check (the plugin line first on stdout; exit 3 UNKNOWN when the status
    /// cannot be read): exit 1 (WARNING) when the newest backup of any type is older than
    /// this (e.g. 26h, 2d, 1w, 90m, 3600s), or there is none, or a set the repository
    /// keeps may restore a stale visibility map.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub warn_age: Option<f64>,
    /// Nagios check: exit 2 (CRITICAL) when the newest backup is older than this.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub crit_age: Option<f64>,
}

/// An age: a number and a unit (s, m, h, d, w).
pub(crate) fn parse_age(s: &str) -> Result<f64, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: f64 = n
        .parse()
        .map_err(|_| format!("'{s}' is not an age: give a number and s, m, h, d or w (26h, 2w)"))?;
    let mult = match unit {
        "s" | "" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "w" => 7.0 * 86400.0,
        _ => return Err(format!("'{s}': the unit is s, m, h, d or w")),
    };
    Ok(n * mult)
}

/// Each repository opens with its own key and endpoint (`repos`).
pub fn run(a: StatusArgs, store: &StoreOptions, repos: &RepoOptions) -> Result<()> {
    let nagios = (a.warn_age.is_some() || a.crit_age.is_some()) && !a.json && !a.prometheus;
    let stores = match repos.stores(&a.repo, store) {
        Ok(s) => s,
        Err(e) if nagios => {
            println!("PAGEVAULT UNKNOWN - {}", one_line(&format!("{e:#}")));
            return Err(super::Exit { code: 3, error: e }.into());
        }
        Err(e) => return Err(e),
    };
    if let [one] = stores.as_slice() {
        return run_one(&a, one, nagios);
    }
    run_all(&a, &stores, nagios)
}

/// One repository's status.
fn run_one(a: &StatusArgs, one: &RepoStore, nagios: bool) -> Result<()> {
    let r = match status(&StatusOptions {
        repo: one.spec.clone(),
        source: a.source.clone(),
        password_file: a.password_file.clone(),
        spool: a.spool.clone(),
        store: one.store.clone(),
    }) {
        Ok(r) => r,
        // Nagios reads stdout's first line: a check that could not run is UNKNOWN (3).
        Err(e) if nagios => {
            println!("PAGEVAULT UNKNOWN - {}", one_line(&format!("{e:#}")));
            return Err(super::Exit { code: 3, error: e }.into());
        }
        Err(e) => return Err(e),
    };
    if a.json {
        print_json(&serde_json::to_value(&r)?);
    } else if a.prometheus {
        print!("{}", prometheus(std::slice::from_ref(&r), None));
    }
    let checked = check_age(&r, a.warn_age, a.crit_age);
    if nagios {
        // The plugin line first (state, summary, performance data), then the long output.
        let (word, summary) = plugin(&r, &checked);
        let perf = perf("age", &r, a.warn_age, a.crit_age);
        let perf = if perf.is_empty() {
            perf
        } else {
            format!(" | {perf}")
        };
        println!("PAGEVAULT {word} - {summary}{perf}");
    }
    if !a.json && !a.prometheus {
        print_text(&r);
    }
    // Prometheus: the metrics carry what could not be read (pagevault_repository_up,
    // pagevault_status_errors), and a scrape file written on success stays fresh.
    match checked {
        Ok(()) if !r.errors.is_empty() && !a.prometheus => Err(anyhow::anyhow!(
            "the status is incomplete: {}",
            r.errors.join("; ")
        )),
        other => other,
    }
}

/// The Nagios state word and summary of one report's check.
fn plugin(r: &StatusReport, checked: &Result<()>) -> (String, String) {
    match checked {
        Ok(()) => (
            "OK".to_string(),
            r.newest_backup_age_seconds
                .map_or("no backup set".to_string(), |a| {
                    format!("the newest backup finished {} ago", ago(a))
                }),
        ),
        Err(e) => {
            let text = format!("{e:#}");
            let word = text.split(':').next().unwrap_or("UNKNOWN").to_string();
            let rest = text.split_once(": ").map_or(text.as_str(), |(_, t)| t);
            (word, one_line(rest))
        }
    }
}

/// Nagios performance data of one report: its newest backup's age as `label`.
fn perf(label: &str, r: &StatusReport, warn: Option<f64>, crit: Option<f64>) -> String {
    let limit = |l: Option<f64>| l.map_or(String::new(), |l| format!("{l:.0}"));
    match r.newest_backup_age_seconds {
        Some(age) => format!("{label}={age:.0}s;{};{};0", limit(warn), limit(crit)),
        None => String::new(),
    }
}

/// Several repositories: each one's status, then which lag in WAL. The Nagios check
/// checks each and takes the worst state; Prometheus gets each one's metrics.
fn run_all(a: &StatusArgs, repos: &[RepoStore], nagios: bool) -> Result<()> {
    let all = match crate::ops::status::status_of_all(
        &StatusOptions {
            repo: String::new(),
            source: a.source.clone(),
            password_file: a.password_file.clone(),
            spool: a.spool.clone(),
            store: StoreOptions::default(),
        },
        repos,
    ) {
        Ok(all) => all,
        Err(e) if nagios => {
            println!("PAGEVAULT UNKNOWN - {}", one_line(&format!("{e:#}")));
            return Err(super::Exit { code: 3, error: e }.into());
        }
        Err(e) => return Err(e),
    };
    let mut worst: (u8, String, Vec<String>) = (0, "OK".into(), vec![]);
    if nagios {
        let (mut parts, mut perfs) = (vec![], vec![]);
        for (i, r) in all.repositories.iter().enumerate() {
            let checked = check_age(r, a.warn_age, a.crit_age);
            let code = (checked.as_ref().err())
                .and_then(|e| e.downcast_ref::<super::Exit>())
                .map_or(0, |x| x.code);
            let (word, summary) = plugin(r, &checked);
            let part = format!("{}: {word}, {summary}", r.repo);
            if code > worst.0 {
                (worst.0, worst.1) = (code, word);
            }
            if code > 0 {
                worst.2.push(part.clone());
            }
            parts.push(part);
            perfs.push(perf(&format!("age_{}", i + 1), r, a.warn_age, a.crit_age));
        }
        perfs.retain(|p| !p.is_empty());
        let perf = match perfs.is_empty() {
            true => String::new(),
            false => format!(" | {}", perfs.join(" ")),
        };
        println!(
            "PAGEVAULT {} - {}{perf}",
            worst.1,
            one_line(&parts.join("; "))
        );
    }
    if a.json {
        print_json(&serde_json::to_value(&all)?);
    } else if a.prometheus {
        print!("{}", prometheus(&all.repositories, Some(&all.wal_lagging)));
        // The metrics carry what could not be read (pagevault_repository_up).
        return Ok(());
    } else {
        for (i, r) in all.repositories.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print_text(r);
        }
        println!();
        match (&all.newest_wal, all.wal_lagging.is_empty()) {
            (Some(n), true) => println!("WAL               every repository holds up to {n}"),
            (None, true) => println!("WAL               none archived"),
            _ => {}
        }
        for l in &all.wal_lagging {
            println!("WAL lags          {}: {}", super::shown(&l.repo), l.why);
        }
    }
    if nagios {
        return match worst.0 {
            0 => Ok(()),
            code => Err(super::Exit {
                code,
                error: anyhow::anyhow!("{}", worst.2.join("; ")),
            }
            .into()),
        };
    }
    let errors: Vec<String> = (all.repositories.iter())
        .flat_map(|r| r.errors.iter().map(move |e| format!("{}: {e}", r.repo)))
        .collect();
    match errors.is_empty() {
        true => Ok(()),
        false => Err(anyhow::anyhow!(
            "the status is incomplete: {}",
            errors.join("; ")
        )),
    }
}

/// A message on one line (a Nagios summary).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn print_text(r: &StatusReport) {
    let age = |s: Option<f64>| s.map_or("none".to_string(), ago);
    println!("repository        {}", super::shown(&r.repo));
    for e in &r.errors {
        println!("ERROR: {}", super::shown(e));
    }
    if !r.repository_up {
        return;
    }
    if let Some(secs) = r.immutable_retain_seconds {
        println!(
            "immutable         nothing overwritten; expire removes nothing younger than {secs} s"
        );
    }
    println!(
        "sets              {} ({} damaged)",
        r.sets,
        r.damaged_sets.len()
    );
    for (what, n) in [
        ("full", &r.newest_full),
        ("diff", &r.newest_diff),
        ("incr", &r.newest_incr),
    ] {
        match n {
            Some(n) => println!(
                "newest {what:<10} {} ({} ago)",
                super::shown(&n.set_id),
                ago(n.age_seconds)
            ),
            None => println!("newest {what:<10} none"),
        }
    }
    println!(
        "newest WAL        {} ({} ago), {} segments",
        r.newest_wal.as_deref().unwrap_or("none"),
        age(r.newest_wal_age_seconds),
        r.wal_files
    );
    println!(
        "recovery window   {} to {}",
        r.recovery_window_start.as_deref().unwrap_or("-"),
        r.recovery_window_end.as_deref().unwrap_or("-")
    );
    println!("repository size   {}", human(r.repository_bytes));
    if let Some(l) = r.wal_archive_lag_bytes {
        println!("archiving lag     {}", human(l));
    }
    if let Some(sp) = &r.spool {
        println!(
            "spool             {} files ({}) wait in {}{}",
            sp.files,
            human(sp.bytes),
            sp.dir,
            sp.oldest
                .as_deref()
                .map(|o| format!(", oldest {o}"))
                .unwrap_or_default()
        );
        if let Some(l) = &sp.lacks {
            println!(
                "spool lag         this repository lacks {} of them ({}){}",
                l.files,
                human(l.bytes),
                l.oldest
                    .as_deref()
                    .map(|o| format!(", oldest {o}"))
                    .unwrap_or_default()
            );
        }
        if let (Some(e), Some(s)) = (&sp.pusher_error, sp.pusher_failing_seconds) {
            println!("pusher failing    for {}: {e}", ago(s as f64));
        }
    }
    for id in &r.damaged_sets {
        println!("damaged set       {}", super::shown(id));
    }
    if !r.stale_vm_sets.is_empty() {
        let ids: Vec<String> = r.stale_vm_sets.iter().map(|i| super::shown(i)).collect();
        println!(
            "stale vis. map    set(s) {}: {}",
            ids.join(", "),
            crate::repo::STALE_VM
        );
    }
    print_damaged_wal(&r.damaged_wal);
    for b in &r.running {
        println!(
            "running           {} {} {:.1}% ({} of {}), since {}, pid {} on {}",
            b.kind,
            super::shown(&b.id),
            b.percent_complete,
            human(b.bytes_done),
            human(b.bytes_total),
            super::shown(&b.started),
            b.pid,
            super::shown(&b.host)
        );
    }
    for st in &r.stale_running {
        println!(
            "stale record      {}: {} ({})",
            super::shown(&st.record),
            super::shown(&st.why),
            if st.dead {
                "the next backup on this host removes it"
            } else {
                "not running here: remove it once its backup is known to be gone"
            }
        );
    }
    match &r.last_drill {
        Some(d) if d.time.is_none() => println!(
            "last drill        record {} is {}: {}",
            super::shown(&d.record),
            d.outcome,
            super::shown(d.error.as_deref().unwrap_or(""))
        ),
        Some(d) => println!(
            "last drill        {} ({} ago), {}, RTO {}, RPO {}{}",
            d.time.as_deref().unwrap_or("-"),
            d.age_seconds.map_or("-".into(), ago),
            d.outcome,
            d.rto_seconds.map_or("-".into(), |s| format!("{s:.1} s")),
            d.rpo_seconds
                .map_or("unknown".into(), |s| format!("{s:.1} s")),
            match d.failed.is_empty() {
                true => String::new(),
                false => format!(" (failed: {})", super::shown(&d.failed.join(", "))),
            }
        ),
        None => println!("last drill        none"),
    }
}

/// Segments shown by name in text; `--json` lists them all.
const DAMAGED_SHOWN: usize = 10;

fn print_damaged_wal(d: &[crate::repo::wal::damaged::Damaged]) {
    if d.is_empty() {
        return;
    }
    for x in d.iter().take(DAMAGED_SHOWN) {
        println!(
            "WARNING: damaged WAL {}: {}",
            super::shown(&x.segment),
            super::shown(&x.note)
        );
    }
    if d.len() > DAMAGED_SHOWN {
        println!(
            "WARNING: and {} more damaged WAL segments (status --json lists them all)",
            d.len() - DAMAGED_SHOWN
        );
    }
    println!(
        "WARNING: a recovery replaying a damaged segment stops there as if the WAL ended: \
         point-in-time recovery cannot pass it; check the server's storage, and take a new \
         full backup"
    );
}

fn ago(secs: f64) -> String {
    match secs {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} d", s / 86400.0),
    }
}

/// A label value in Prometheus's text format: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric family: its name (after `pagevault_`), help and sample lines.
type Family = (String, String, Vec<String>);

/// Metrics in Prometheus's text format: each family's HELP and TYPE once, then its
/// samples of every report (the `repo` label tells repositories apart); with `lagging`
/// (several repositories), which of them lags in WAL.
fn prometheus(reports: &[StatusReport], lagging: Option<&[WalLag]>) -> String {
    let mut all: Vec<Family> = vec![];
    for r in reports {
        let mut fams = families(r);
        if let Some(lags) = lagging {
            let lags = lags.iter().any(|l| l.repo == r.repo);
            fams.push((
                "wal_lagging".into(),
                "1 when the repository lags behind another of the list in WAL, or lacks files \
                 the spool keeps for it (status's WAL lags says why)."
                    .into(),
                vec![format!(
                    "pagevault_wal_lagging{{repo=\"{}\"}} {}",
                    label(&r.repo),
                    u8::from(lags)
                )],
            ));
        }
        for (name, help, lines) in fams {
            match all.iter_mut().find(|f| f.0 == name) {
                Some(f) => f.2.extend(lines),
                None => all.push((name, help, lines)),
            }
        }
    }
    let mut out = String::new();
    for (name, help, lines) in all {
        out += &format!("# HELP pagevault_{name} {help}\n# TYPE pagevault_{name} gauge\n");
        for l in lines {
            out += &l;
            out.push('\n');
        }
    }
    out
}

/// One report's metric families.
fn families(r: &StatusReport) -> Vec<Family> {
    let repo = label(&r.repo);
    let mut out: Vec<Family> = vec![];
    let mut metric = |name: &str, help: &str, rows: Vec<(String, f64)>| {
        let lines = (rows.into_iter())
            .map(|(labels, v)| format!("pagevault_{name}{{repo=\"{repo}\"{labels}}} {v}"))
            .collect();
        out.push((name.to_string(), help.to_string(), lines));
    };
    let one = |v: f64| vec![(String::new(), v)];
    metric(
        "repository_up",
        "1 when the repository could be read, 0 when not (status --json's errors say why).",
        one(r.repository_up as u8 as f64),
    );
    metric(
        "status_errors",
        "What status could not read: the repository, the source's WAL position, the spool.",
        one(r.errors.len() as f64),
    );
    // What the spool keeps for the repository counts most while it cannot be read.
    if let Some(sp) = &r.spool {
        // With several repositories, what waits for this one: what it lacks.
        let (files, bytes) = sp
            .lacks
            .as_ref()
            .map_or((sp.files, sp.bytes), |l| (l.files, l.bytes));
        metric(
            "spool_files",
            "WAL files waiting in archive-push's spool for the repository.",
            vec![(String::new(), files as f64)],
        );
        metric(
            "spool_bytes",
            "Bytes waiting in archive-push's spool.",
            vec![(String::new(), bytes as f64)],
        );
        metric(
            "pusher_failing_seconds",
            "Seconds the spool's pusher has failed to store files (0: it does not fail).",
            vec![(String::new(), sp.pusher_failing_seconds.unwrap_or(0) as f64)],
        );
    }
    if !r.repository_up {
        return out;
    }
    let ages = [
        ("full", &r.newest_full),
        ("diff", &r.newest_diff),
        ("incr", &r.newest_incr),
    ]
    .into_iter()
    .filter_map(|(t, n)| {
        n.as_ref()
            .map(|n| (format!(",type=\"{t}\""), n.age_seconds))
    })
    .collect();
    metric(
        "newest_backup_age_seconds",
        "Seconds since the newest set of each type finished.",
        ages,
    );
    metric(
        "sets",
        "Backup sets in the repository.",
        vec![(String::new(), r.sets as f64)],
    );
    metric(
        "damaged_sets",
        "Sets recorded as damaged.",
        vec![(String::new(), r.damaged_sets.len() as f64)],
    );
    metric(
        "stale_visibility_map_sets",
        "Sets whose restore may hold stale visibility maps: take a new full backup.",
        vec![(String::new(), r.stale_vm_sets.len() as f64)],
    );
    metric(
        "wal_segments",
        "Archived WAL segments.",
        vec![(String::new(), r.wal_files as f64)],
    );
    metric(
        "damaged_wal_segments",
        "Archived WAL segments whose records could not be decoded: recovery stops at each.",
        vec![(String::new(), r.damaged_wal.len() as f64)],
    );
    if let Some(a) = r.newest_wal_age_seconds {
        metric(
            "newest_wal_age_seconds",
            "Seconds since the newest WAL segment was archived.",
            vec![(String::new(), a)],
        );
    }
    metric(
        "repository_bytes",
        "Bytes the repository stores.",
        vec![(String::new(), r.repository_bytes as f64)],
    );
    let ts = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp() as f64)
    };
    if let Some(t) = ts(&r.recovery_window_start) {
        metric(
            "recovery_window_start_timestamp_seconds",
            "The oldest point a restore can reach (Unix time).",
            vec![(String::new(), t)],
        );
    }
    if let Some(t) = ts(&r.recovery_window_end) {
        metric(
            "recovery_window_end_timestamp_seconds",
            "The newest point a restore can reach (Unix time).",
            vec![(String::new(), t)],
        );
    }
    if let Some(d) = r.last_drill.as_ref().filter(|d| d.time.is_some()) {
        metric(
            "last_drill_timestamp_seconds",
            "When the newest drill ended (Unix time).",
            vec![(String::new(), ts(&d.time).unwrap_or(0.0))],
        );
        metric(
            "last_drill_rto_seconds",
            "The newest drill's recovery time: restore, replay and checks.",
            vec![(String::new(), d.rto_seconds.unwrap_or(0.0))],
        );
        if let Some(rpo) = d.rpo_seconds {
            metric(
                "last_drill_rpo_seconds",
                "The newest drill's recovery point: how far the last transaction replayed lags the newest archived segment (or --until).",
                vec![(String::new(), rpo)],
            );
        }
        metric(
            "last_drill_ok",
            "1 when the newest drill passed, else 0.",
            vec![(String::new(), f64::from(u8::from(d.outcome == "ok")))],
        );
    }
    metric(
        "backups_running",
        "Backups writing into the repository now.",
        vec![(String::new(), r.running.len() as f64)],
    );
    let running = (r.running.iter())
        .map(|b| {
            let labels = format!(",set_id=\"{}\",type=\"{}\"", label(&b.id), b.kind);
            (labels, b.percent_complete)
        })
        .collect();
    metric(
        "backup_running_percent",
        "Percent complete of each backup running now (SQL Server's percent_complete).",
        running,
    );
    if let Some(l) = r.wal_archive_lag_bytes {
        metric(
            "wal_archive_lag_bytes",
            "WAL the server wrote past the newest archived segment.",
            vec![(String::new(), l as f64)],
        );
    }
    out
}

/// Nagios's exit statuses: 0 OK, 1 WARNING, 2 CRITICAL.
fn check_age(r: &StatusReport, warn: Option<f64>, crit: Option<f64>) -> Result<()> {
    let limits = warn.is_some() || crit.is_some();
    let exit = |code, error| Err(super::Exit { code, error }.into());
    if limits && !r.repository_up {
        return exit(2, anyhow::anyhow!("CRITICAL: {}", r.errors.join("; ")));
    }
    let age = r.newest_backup_age_seconds;
    let over = |limit: Option<f64>| limit.is_some_and(|l| age.is_none_or(|a| a > l));
    let (code, word) = match (over(crit), over(warn)) {
        (true, _) => (2, "CRITICAL"),
        (false, true) => (1, "WARNING"),
        // A set that restores a stale visibility map is a warning as long as it is kept.
        _ if (warn.is_some() || crit.is_some()) && !r.stale_vm_sets.is_empty() => {
            return Err(super::Exit {
                code: 1,
                error: anyhow::anyhow!(
                    "WARNING: set(s) {}: {}",
                    r.stale_vm_sets.join(", "),
                    crate::repo::STALE_VM
                ),
            }
            .into())
        }
        // What could not be read besides (the source, the spool) leaves it incomplete.
        _ if limits && !r.errors.is_empty() => {
            return exit(1, anyhow::anyhow!("WARNING: {}", r.errors.join("; ")))
        }
        _ => return Ok(()),
    };
    let what = age.map_or("no backup set".to_string(), |a| {
        format!("the newest backup finished {} ago", ago(a))
    });
    Err(super::Exit {
        code,
        error: anyhow::anyhow!("{word}: {what}"),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_labels() {
        assert_eq!(parse_age("26h"), Ok(93600.0));
        assert_eq!(parse_age("90"), Ok(90.0));
        assert_eq!(parse_age("2w"), Ok(1209600.0));
        assert!(parse_age("2y").is_err() && parse_age("h").is_err());
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
