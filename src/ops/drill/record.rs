//! A drill's result recorded in the repository (`drills/TIME.json`, written once) and
//! the newest read back for `status`. A record is data from storage: read bounded,
//! every field checked, shown escaped.

use crate::repo::Repo;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub const DIR: &str = "drills";
const MAX: u64 = 64 << 10;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrillRecord {
    /// When the drill ended (RFC 3339).
    pub time: String,
    /// "ok" or "failed".
    pub outcome: String,
    pub rto_seconds: f64,
    pub restore_seconds: Option<f64>,
    pub replay_seconds: Option<f64>,
    pub rpo_seconds: Option<f64>,
    pub set_id: Option<String>,
    pub reached_lsn: Option<String>,
    /// The checks that failed.
    pub failed: Vec<String>,
}

/// The newest drill as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LastDrill {
    pub record: String,
    pub time: Option<String>,
    pub age_seconds: Option<f64>,
    /// "ok", "failed", or "damaged" (the record does not read as one).
    pub outcome: String,
    pub rto_seconds: Option<f64>,
    pub rpo_seconds: Option<f64>,
    pub failed: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A record's name: `YYYYMMDDTHHMMSS.fffZ.json`, optionally `-N` before `.json`.
fn is_record_name(n: &str) -> bool {
    n.strip_suffix(".json").is_some_and(|s| {
        (20..=28).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b"TZ.-".contains(&b))
    })
}

/// Writes `r` as a new record; returns its name in the repository.
pub fn write(repo: &Repo, r: &DrillRecord) -> Result<String> {
    let t = DateTime::parse_from_rfc3339(&r.time)?.with_timezone(&Utc);
    let stem = t.format("%Y%m%dT%H%M%S%.3fZ").to_string();
    let bytes = serde_json::to_vec_pretty(r)?;
    repo.store().create_dir(DIR)?;
    for n in 0..100 {
        let rel = match n {
            0 => format!("{DIR}/{stem}.json"),
            n => format!("{DIR}/{stem}-{n}.json"),
        };
        if repo.store().put_new(&rel, &bytes)? {
            return Ok(rel);
        }
    }
    anyhow::bail!("cannot record the drill: {DIR}/{stem}*.json all exist")
}

fn check(r: &DrillRecord) -> Result<DateTime<Utc>, String> {
    let t = DateTime::parse_from_rfc3339(&r.time)
        .map_err(|e| format!("time '{}': {e}", r.time.escape_default()))?
        .with_timezone(&Utc);
    if !["ok", "failed"].contains(&r.outcome.as_str()) {
        return Err("outcome is neither ok nor failed".into());
    }
    let secs = [
        Some(r.rto_seconds),
        r.restore_seconds,
        r.replay_seconds,
        r.rpo_seconds,
    ];
    if !secs
        .iter()
        .flatten()
        .all(|s| s.is_finite() && (0.0..1e10).contains(s))
    {
        return Err("a time in seconds is negative or out of range".into());
    }
    let long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > 200);
    if long(&r.set_id) || long(&r.reached_lsn) || r.failed.len() > 16 {
        return Err("a field is too long".into());
    }
    if r.failed.iter().any(|f| f.len() > 64) {
        return Err("a check name is too long".into());
    }
    Ok(t)
}

/// The newest drill the repository records, if any.
pub fn newest(repo: &Repo, now: DateTime<Utc>) -> Result<Option<LastDrill>> {
    let mut names: Vec<String> = (repo.store().list(DIR)?.into_iter())
        .map(|(n, _)| n)
        .filter(|n| is_record_name(n))
        .collect();
    names.sort();
    let Some(name) = names.pop() else {
        return Ok(None);
    };
    let rel = format!("{DIR}/{name}");
    let damaged = |e: String| LastDrill {
        record: rel.clone(),
        time: None,
        age_seconds: None,
        outcome: "damaged".into(),
        rto_seconds: None,
        rpo_seconds: None,
        failed: vec![],
        error: Some(e),
    };
    let bytes = match repo.store().get(&rel, MAX) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Ok(Some(damaged(format!("{e:#}")))),
    };
    let r: DrillRecord = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return Ok(Some(damaged(e.to_string()))),
    };
    Ok(Some(match check(&r) {
        Ok(t) => LastDrill {
            record: rel,
            time: Some(t.to_rfc3339()),
            age_seconds: Some((now - t).num_milliseconds().max(0) as f64 / 1000.0),
            outcome: r.outcome,
            rto_seconds: Some(r.rto_seconds),
            rpo_seconds: r.rpo_seconds,
            failed: r.failed,
            error: None,
        },
        Err(e) => damaged(e),
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn record_names() {
        assert!(super::is_record_name("20261126T233700.123Z.json"));
        assert!(super::is_record_name("20261126T233700.123Z-1.json"));
        assert!(!super::is_record_name("../x.json") && !super::is_record_name("a.json"));
    }
}
