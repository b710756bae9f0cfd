//! A drill's result recorded in the repository (`drills/TIME.json`, written once) and
//! the newest read back for `status`. A record is data from storage: read bounded,
//! every field checked, shown escaped. In an encrypted or signed repository a record
//! carries the key's id and a tag (HMAC-SHA256 under a key derived from the master)
//! over its name and text: one without it, or with another, is shown as forged.
//! `expire` removes the records older than the oldest set it keeps (never the newest).

use crate::crypt::{show_id, Master};
use crate::repo::Repo;
use anyhow::Result;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

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
    /// An encrypted or signed repository's key id (hex), and the record's tag (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A keyed repository's record as stored: its compact JSON (with `key_id`, without
/// `tag`) then `,"tag":"HEX"}` in place of its closing brace. The tag covers the name,
/// a newline and that JSON as written: checked on the bytes read, never on a
/// re-serialization (a float need not print back the same).
fn tagged(name: &str, r: &DrillRecord, m: &Master) -> Result<Vec<u8>> {
    let r = DrillRecord {
        key_id: Some(show_id(&m.id)),
        tag: None,
        ..r.clone()
    };
    let mut body = serde_json::to_vec(&r)?;
    let tag = hex::encode(m.drill_tag(&covered(name, &body)));
    body.pop();
    body.extend_from_slice(format!(",\"tag\":\"{tag}\"}}").as_bytes());
    Ok(body)
}

/// What a tag covers: the record's name, a newline, its JSON without the tag.
fn covered(name: &str, body: &[u8]) -> Vec<u8> {
    let mut text = format!("{name}\n").into_bytes();
    text.extend_from_slice(body);
    text
}

/// The newest drill as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LastDrill {
    pub record: String,
    pub time: Option<String>,
    pub age_seconds: Option<f64>,
    /// "ok", "failed", "damaged" (the record does not read as one), "forged" (its
    /// tag does not check with the repository's key) or "unverified" (a keyed
    /// repository read without its key).
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

/// Writes `r` as a new record (tagged with `master`, a keyed repository's key);
/// returns its name in the repository.
pub fn write(repo: &Repo, r: &DrillRecord, master: Option<&Master>) -> Result<String> {
    let t = DateTime::parse_from_rfc3339(&r.time)?.with_timezone(&Utc);
    let stem = t.format("%Y%m%dT%H%M%S%.3fZ").to_string();
    repo.store().create_dir(DIR)?;
    for n in 0..100 {
        let name = match n {
            0 => format!("{stem}.json"),
            n => format!("{stem}-{n}.json"),
        };
        let bytes = match master {
            Some(m) => tagged(&name, r, m)?,
            None => serde_json::to_vec_pretty(r)?,
        };
        let rel = format!("{DIR}/{name}");
        if repo.store().put_new(&rel, &bytes)? {
            return Ok(rel);
        }
    }
    anyhow::bail!("cannot record the drill: {DIR}/{stem}*.json all exist")
}

/// A keyed repository's record (`bytes` as read, `r` parsed from them) against its
/// key: Err says why it is not genuine.
fn authentic(name: &str, bytes: &[u8], r: &DrillRecord, master: &Master) -> Result<(), String> {
    let want = show_id(&master.id);
    let (Some(id), Some(tag)) = (&r.key_id, &r.tag) else {
        return Err(format!(
            "it carries no tag, and the repository's records are tagged with its key (id {want})"
        ));
    };
    if *id != want {
        return Err(format!(
            "it names key id '{}', not the repository's {want}",
            id.chars().take(64).collect::<String>().escape_default()
        ));
    }
    let tail = format!(",\"tag\":\"{tag}\"}}");
    let Some(body) = bytes.strip_suffix(tail.as_bytes()) else {
        return Err("its tag is not where a tagged record keeps it (at its end)".into());
    };
    let mut body = body.to_vec();
    body.push(b'}');
    match hex::decode(tag) {
        Ok(t) if master.drill_ok(&covered(name, &body), &t) => Ok(()),
        _ => Err("its tag does not match its name and text under the repository's key".into()),
    }
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

/// The names of the drill records, oldest first.
fn names(repo: &Repo) -> Result<Vec<String>> {
    let mut names: Vec<String> = (repo.store().list(DIR)?.into_iter())
        .map(|(n, _)| n)
        .filter(|n| is_record_name(n))
        .collect();
    names.sort();
    Ok(names)
}

/// The newest drill the repository records, if any.
pub fn newest(repo: &Repo, now: DateTime<Utc>) -> Result<Option<LastDrill>> {
    let Some(name) = names(repo)?.pop() else {
        return Ok(None);
    };
    let rel = format!("{DIR}/{name}");
    let unshown = |outcome: &str, e: String| LastDrill {
        record: rel.clone(),
        time: None,
        age_seconds: None,
        outcome: outcome.into(),
        rto_seconds: None,
        rpo_seconds: None,
        failed: vec![],
        error: Some(e),
    };
    let damaged = |e| unshown("damaged", e);
    let bytes = match repo.store().get(&rel, MAX) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Ok(Some(damaged(format!("{e:#}")))),
    };
    let r: DrillRecord = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return Ok(Some(damaged(e.to_string()))),
    };
    if let Some(k) = repo.protection() {
        match repo.record_master()? {
            None => {
                return Ok(Some(unshown(
                    "unverified",
                    format!(
                        "the repository is {} (key id {}): give its key to check the record's tag",
                        k.mode.verb(),
                        show_id(&k.key_id)
                    ),
                )))
            }
            Some(m) => {
                if let Err(e) = authentic(&name, &bytes, &r, &m) {
                    return Ok(Some(unshown("forged", e)));
                }
            }
        }
    }
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

/// The drill records `expire` removed, and those the retention holds.
#[derive(Debug, Default, Serialize)]
pub struct DrillExpiry {
    pub removed: Vec<String>,
    pub locked: usize,
    /// Until when the retention holds the newest of those kept (RFC 3339).
    pub locked_until: Option<String>,
    /// A removal the store refused (the record stays).
    pub refused: Option<String>,
}

/// When a record's name says it was written.
fn named_time(name: &str) -> Option<DateTime<Utc>> {
    let t = NaiveDateTime::parse_from_str(name.get(..15)?, "%Y%m%dT%H%M%S").ok()?;
    Some(t.and_utc())
}

/// Removes the drill records written before `before` (the oldest kept set's start),
/// never the newest; in an immutable repository those its retention holds are kept
/// and counted. `dry_run`: only says which.
pub fn expire(repo: &Repo, before: DateTime<Utc>, dry_run: bool) -> Result<DrillExpiry> {
    let mut names = names(repo)?;
    names.pop();
    let clock = SystemTime::now();
    let mut out = DrillExpiry::default();
    let mut until = None;
    for name in names {
        if named_time(&name).is_none_or(|t| t >= before) {
            continue;
        }
        let rel = format!("{DIR}/{name}");
        if let Some(u) = repo.locked_until(std::slice::from_ref(&rel), clock)? {
            out.locked += 1;
            until = until.max(Some(u));
            continue;
        }
        if !dry_run {
            if let Err(e) = repo.store().delete(&rel) {
                if repo.immutable().is_none() {
                    return Err(e);
                }
                out.refused = Some(format!("{e:#}"));
                out.locked += 1;
                continue;
            }
        }
        out.removed.push(rel);
    }
    out.locked_until =
        until.map(|u| DateTime::<Utc>::from(u).to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn record_names() {
        assert!(super::is_record_name("20261126T233700.123Z.json"));
        assert!(super::is_record_name("20261126T233700.123Z-1.json"));
        assert!(!super::is_record_name("../x.json") && !super::is_record_name("a.json"));
        let t = super::named_time("20261126T233700.123Z-1.json").unwrap();
        assert!(super::named_time("2026.json").is_none());
        assert_eq!(t.to_rfc3339(), "2026-11-26T23:37:00+00:00");
    }

    #[test]
    fn a_tag_checks_on_the_bytes_read_whatever_floats_it_holds() {
        use super::*;
        let m = Master::new([7u8; 32]);
        let name = "20261126T233700.123Z.json";
        for x in [
            0.1 + 0.2,
            1.0 / 3.0,
            12345.678901234567,
            5e-324,
            1e10 - 1e-6,
        ] {
            let r = DrillRecord {
                time: "2026-11-26T23:37:00.123Z".into(),
                outcome: "ok".into(),
                rto_seconds: x,
                restore_seconds: Some(x / 7.0),
                replay_seconds: None,
                rpo_seconds: Some(x * 3.3),
                set_id: None,
                reached_lsn: None,
                failed: vec![],
                key_id: None,
                tag: None,
            };
            let b = tagged(name, &r, &m).unwrap();
            let back: DrillRecord = serde_json::from_slice(&b).unwrap();
            assert_eq!(authentic(name, &b, &back, &m), Ok(()));
            // Another name, another key, a changed byte: refused.
            let other = "20261126T233701.000Z.json";
            assert!(authentic(other, &b, &back, &m).is_err());
            assert!(authentic(name, &b, &back, &Master::new([8u8; 32])).is_err());
            let changed = String::from_utf8(b.clone())
                .unwrap()
                .replace("\"ok\"", "\"failed\"");
            let r2: DrillRecord = serde_json::from_str(&changed).unwrap();
            assert!(authentic(name, changed.as_bytes(), &r2, &m).is_err());
        }
    }
}
