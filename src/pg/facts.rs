//! What a PostgreSQL set's manifest records about its cluster, typed. On media they are
//! the manifest's `extra` map (text LSNs and WAL names, as before); read back, every
//! field is checked, since a manifest may be damaged or forged.

use super::walname::{format_lsn, parse_lsn, parse_name, valid_seg_size, Kind};
use serde_json::Value;
use std::collections::BTreeMap;

/// The manifest's source-specific map.
pub type Extra = BTreeMap<String, Value>;

/// A backup_label or tablespace_map longer than this is damage, not PostgreSQL's.
const MAX_TEXT: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgFacts {
    pub start_lsn: u64,
    /// The WAL segment holding `start_lsn` (its name carries the timeline).
    pub start_wal: String,
    pub timeline: u32,
    /// server_version_num, e.g. 150004.
    pub version_num: u32,
    pub data_checksums: bool,
    pub system_identifier: String,
    pub wal_segment_size: u64,
    /// The databases when the backup started: OID -> name (empty in sets written
    /// before they were recorded).
    pub databases: BTreeMap<u32, String>,
    /// Known once the backup stopped.
    pub stop: Option<Stop>,
}

/// Databases a set records at most (a catalog entry is bounded).
pub const MAX_DATABASES: usize = 100_000;
/// The longest database name (NAMEDATALEN - 1).
pub const MAX_DATABASE_NAME: usize = 63;

/// What pg_backup_stop said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub lsn: u64,
    pub wal: String,
    pub backup_label: String,
    /// Empty without tablespaces.
    pub tablespace_map: String,
}

impl PgFacts {
    /// The manifest map of these facts.
    pub fn to_extra(&self) -> Extra {
        let mut m = Extra::new();
        m.insert("start_lsn".into(), format_lsn(self.start_lsn).into());
        m.insert("start_wal".into(), self.start_wal.clone().into());
        m.insert("timeline".into(), self.timeline.into());
        m.insert("pg_version".into(), self.version_num.to_string().into());
        m.insert("data_checksums".into(), self.data_checksums.into());
        m.insert(
            "system_identifier".into(),
            self.system_identifier.clone().into(),
        );
        m.insert("wal_segment_size".into(), self.wal_segment_size.into());
        if !self.databases.is_empty() {
            let dbs: serde_json::Map<String, Value> = (self.databases.iter())
                .map(|(oid, name)| (oid.to_string(), name.clone().into()))
                .collect();
            m.insert("databases".into(), dbs.into());
        }
        if let Some(s) = &self.stop {
            m.insert("stop_lsn".into(), format_lsn(s.lsn).into());
            m.insert("stop_wal".into(), s.wal.clone().into());
            m.insert("backup_label".into(), s.backup_label.clone().into());
            if !s.tablespace_map.is_empty() {
                m.insert("tablespace_map".into(), s.tablespace_map.clone().into());
            }
        }
        m
    }

    /// The facts of a manifest map; None when it holds none (not a PostgreSQL set).
    /// Every field is checked: the error names the field and what is wrong.
    pub fn from_extra(m: &Extra) -> Result<Option<PgFacts>, String> {
        if !m.contains_key("start_lsn") {
            return Ok(None);
        }
        let text = |k: &str| -> Result<&str, String> {
            match m.get(k) {
                Some(Value::String(s)) if s.len() <= MAX_TEXT => Ok(s),
                Some(_) => Err(format!("'{k}' is not text of at most {MAX_TEXT} bytes")),
                None => Err(format!("'{k}' is missing")),
            }
        };
        let lsn = |k: &str| -> Result<u64, String> {
            let s = text(k)?;
            parse_lsn(s).ok_or_else(|| format!("'{k}' = '{s}' is not an LSN"))
        };
        let segment = |k: &str| -> Result<String, String> {
            let s = text(k)?;
            match parse_name(s) {
                Some(n) if n.kind == Kind::Segment => Ok(s.to_string()),
                _ => Err(format!("'{k}' = '{s}' is not a WAL segment name")),
            }
        };
        let start_wal = segment("start_wal")?;
        let timeline = match m.get("timeline").and_then(Value::as_u64) {
            Some(t) if t >= 1 && t <= u32::MAX as u64 => t as u32,
            _ => return Err("'timeline' is not a timeline number".into()),
        };
        if u32::from_str_radix(&start_wal[..8], 16).ok() != Some(timeline) {
            return Err(format!(
                "'start_wal' {start_wal} is not of timeline {timeline}"
            ));
        }
        // Sets written before the size was recorded are of 16 MiB segments.
        let wal_segment_size = match m.get("wal_segment_size") {
            None => 16 << 20,
            Some(v) => match v.as_u64() {
                Some(s) if valid_seg_size(s) => s,
                _ => {
                    return Err(format!(
                        "'wal_segment_size' = {v} is not a WAL segment size"
                    ))
                }
            },
        };
        let version_num = text("pg_version")?
            .parse::<u32>()
            .map_err(|_| "'pg_version' is not a server_version_num".to_string())?;
        let data_checksums = m
            .get("data_checksums")
            .and_then(Value::as_bool)
            .ok_or("'data_checksums' is not true or false")?;
        let system_identifier = text("system_identifier")?.to_string();
        if system_identifier.parse::<u64>().is_err() {
            return Err("'system_identifier' is not a number".into());
        }
        let start_lsn = lsn("start_lsn")?;
        let stop = if m.contains_key("stop_lsn") {
            let s = Stop {
                lsn: lsn("stop_lsn")?,
                wal: segment("stop_wal")?,
                backup_label: text("backup_label")?.to_string(),
                tablespace_map: match m.get("tablespace_map") {
                    None => String::new(),
                    Some(_) => text("tablespace_map")?.to_string(),
                },
            };
            if s.lsn < start_lsn {
                return Err(format!(
                    "'stop_lsn' {} is before 'start_lsn' {}",
                    format_lsn(s.lsn),
                    format_lsn(start_lsn)
                ));
            }
            Some(s)
        } else {
            None
        };
        Ok(Some(PgFacts {
            start_lsn,
            start_wal,
            timeline,
            version_num,
            data_checksums,
            system_identifier,
            wal_segment_size,
            databases: databases(m)?,
            stop,
        }))
    }

    /// The tablespaces of the set: (OID, directory) per line of its tablespace_map.
    pub fn tablespaces(&self) -> Vec<(&str, &str)> {
        self.stop
            .as_ref()
            .map(|s| {
                s.tablespace_map
                    .lines()
                    .filter_map(|l| l.split_once(' '))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The `databases` map of a manifest: OID -> name, each checked.
fn databases(m: &Extra) -> Result<BTreeMap<u32, String>, String> {
    let Some(v) = m.get("databases") else {
        return Ok(BTreeMap::new());
    };
    let map = v
        .as_object()
        .ok_or("'databases' is not a map of OID to name")?;
    if map.len() > MAX_DATABASES {
        return Err(format!("'databases' holds over {MAX_DATABASES} entries"));
    }
    let mut out = BTreeMap::new();
    for (oid, name) in map {
        let oid = oid
            .parse::<u32>()
            .ok()
            .filter(|&o| o > 0 && o.to_string() == *oid)
            .ok_or_else(|| format!("'databases' key '{}' is not an OID", oid.escape_debug()))?;
        match name.as_str() {
            Some(n) if !n.is_empty() && n.len() <= MAX_DATABASE_NAME => {
                out.insert(oid, n.to_string());
            }
            _ => {
                return Err(format!(
                    "'databases' entry {oid} is not a name of 1 to {MAX_DATABASE_NAME} bytes"
                ))
            }
        }
    }
    Ok(out)
}

/// The WAL file backup_label's `START WAL LOCATION: X/Y (file NAME)` line names, when
/// it is a segment name.
pub fn label_start_wal(label: &str) -> Option<String> {
    let name = start_line(label)?
        .split_once("(file ")?
        .1
        .strip_suffix(')')?;
    (name.len() == 24 && name.bytes().all(|c| c.is_ascii_hexdigit())).then(|| name.to_string())
}

/// backup_label's `START WAL LOCATION: X/Y (file NAME)` line, after its label.
fn start_line(label: &str) -> Option<&str> {
    label
        .lines()
        .find_map(|l| l.strip_prefix("START WAL LOCATION: "))
}

/// The position backup_label's `START WAL LOCATION` line gives.
pub fn label_start_lsn(label: &str) -> Option<u64> {
    super::parse_lsn(start_line(label)?.split_whitespace().next()?)
}

#[cfg(test)]
mod tests {
    use super::{label_start_lsn, label_start_wal};

    #[test]
    fn the_start_position_of_a_backup_label() {
        let label = "START WAL LOCATION: 0/5000028 (file 000000020000000000000005)\n";
        assert_eq!(label_start_lsn(label), Some(0x500_0028));
        assert_eq!(label_start_lsn("CHECKPOINT LOCATION: 0/5\n"), None);
    }

    #[test]
    fn the_start_wal_file_of_a_backup_label() {
        let label = "START WAL LOCATION: 0/5000028 (file 000000020000000000000005)\nCHECKPOINT LOCATION: 0/5000060\nBACKUP FROM: standby\n";
        assert_eq!(
            label_start_wal(label).as_deref(),
            Some("000000020000000000000005")
        );
        assert_eq!(
            label_start_wal("START WAL LOCATION: 0/5000028 (file ../x)\n"),
            None
        );
        assert_eq!(label_start_wal("LABEL: x\n"), None);
    }

    use super::*;

    fn facts() -> PgFacts {
        PgFacts {
            start_lsn: 0x3_0000_0028,
            start_wal: "000000020000000300000000".into(),
            timeline: 2,
            version_num: 150004,
            data_checksums: true,
            system_identifier: "7301234567890123456".into(),
            wal_segment_size: 16 << 20,
            databases: BTreeMap::from([(5, "postgres".into()), (16384, "app".into())]),
            stop: Some(Stop {
                lsn: 0x3_0000_0100,
                wal: "000000020000000300000000".into(),
                backup_label: "START WAL LOCATION: 3/28\n".into(),
                tablespace_map: "16389 /srv/ts a\n".into(),
            }),
        }
    }

    #[test]
    fn facts_survive_the_manifest_map() {
        let f = facts();
        let m = f.to_extra();
        assert_eq!(m["start_lsn"], "3/28");
        assert_eq!(PgFacts::from_extra(&m).unwrap(), Some(f.clone()));
        assert_eq!(f.tablespaces(), vec![("16389", "/srv/ts a")]);
        assert_eq!(PgFacts::from_extra(&Extra::new()).unwrap(), None);
    }

    #[test]
    fn damaged_facts_are_refused_by_name() {
        let bad = |k: &str, v: Value, says: &str| {
            let mut m = facts().to_extra();
            m.insert(k.into(), v);
            let e = PgFacts::from_extra(&m).unwrap_err();
            assert!(e.contains(says), "{k}: {e}");
        };
        bad(
            "start_lsn",
            "3/zz".into(),
            "'start_lsn' = '3/zz' is not an LSN",
        );
        bad("stop_lsn", "2/0".into(), "is before 'start_lsn'");
        bad(
            "start_wal",
            "../../etc/passwd".into(),
            "not a WAL segment name",
        );
        bad("timeline", 3.into(), "is not of timeline 3");
        bad("timeline", 0.into(), "not a timeline number");
        bad("wal_segment_size", 12345.into(), "not a WAL segment size");
        bad(
            "backup_label",
            "x".repeat(MAX_TEXT + 1).into(),
            "'backup_label' is not text",
        );
        bad("system_identifier", "abc".into(), "not a number");
        bad("databases", "app".into(), "not a map of OID to name");
        bad(
            "databases",
            serde_json::json!({"../1": "x"}),
            "is not an OID",
        );
        bad(
            "databases",
            serde_json::json!({"016384": "x"}),
            "is not an OID",
        );
        bad(
            "databases",
            serde_json::json!({"16384": "x".repeat(64)}),
            "not a name of 1 to 63",
        );
        bad(
            "databases",
            serde_json::json!({"16384": 7}),
            "not a name of 1 to 63",
        );
        let mut m = facts().to_extra();
        m.remove("wal_segment_size");
        assert_eq!(
            PgFacts::from_extra(&m).unwrap().unwrap().wal_segment_size,
            16 << 20
        );
    }
}
