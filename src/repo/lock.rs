//! The repository lock (`locks/retention.json`): taken by `expire` and `merge` so that
//! two of them never remove or fold the same sets at once. Made create-only, it names
//! its holder (command, pid, host, time); a lock whose holder died on this host, older
//! than `STALE_SECONDS` or dated more than `SKEW_SECONDS` ahead, is taken over by a
//! compare and swap, so two takers never both win. Released when dropped.

use super::Repo;
use crate::fault::transient;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

const REL: &str = "locks/retention.json";
/// A lock this old is stale whoever holds it (a run on another host that died).
pub const STALE_SECONDS: i64 = 6 * 3600;
/// A lock dated further ahead than this is stale: no clock between hosts is that far
/// off, and a date in the future would otherwise never grow old.
pub const SKEW_SECONDS: i64 = 300;
/// A lock is a few hundred bytes; anything larger is not one.
const MAX: u64 = 4 << 10;

#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    command: String,
    pid: i32,
    host: String,
    /// RFC 3339.
    since: String,
}

/// The lock held; removed when dropped, unless another run took it over meanwhile.
pub struct RepoLock<'a> {
    repo: Option<&'a Repo>,
    bytes: Vec<u8>,
}

impl Drop for RepoLock<'_> {
    fn drop(&mut self) {
        let Some(r) = self.repo else { return };
        if r.store.get(REL, MAX).ok().flatten().as_deref() == Some(&self.bytes[..]) {
            let _ = r.store.delete(REL);
        }
    }
}

impl Repo {
    /// Takes the repository lock for `command`, or says who holds it (transient: the
    /// holder will finish). An immutable repository takes none: its store keeps every
    /// version of what is written, and expire there removes only what the retention let
    /// go.
    pub fn lock(&self, command: &str) -> Result<RepoLock<'_>> {
        if self.immutable.is_some() {
            return Ok(RepoLock {
                repo: None,
                bytes: vec![],
            });
        }
        let me = Holder {
            command: command.to_string(),
            pid: std::process::id() as i32,
            host: crate::sys::hostname(),
            since: Utc::now().to_rfc3339(),
        };
        let bytes = serde_json::to_vec(&me)?;
        let held = |bytes| RepoLock {
            repo: Some(self),
            bytes,
        };
        self.store.create_dir("locks")?;
        if self.store.put_new(REL, &bytes)? {
            return Ok(held(bytes));
        }
        let Some(theirs) = self.store.get(REL, MAX)? else {
            // Released meanwhile: one more try.
            return match self.store.put_new(REL, &bytes)? {
                true => Ok(held(bytes)),
                false => Err(self.busy(None)),
            };
        };
        let holder = serde_json::from_slice::<Holder>(&theirs).ok();
        if stale(holder.as_ref(), Utc::now()) && self.store.replace_if(REL, &theirs, &bytes)? {
            return Ok(held(bytes));
        }
        Err(self.busy(holder.as_ref()))
    }

    fn busy(&self, h: Option<&Holder>) -> anyhow::Error {
        let who = match h {
            // Read from storage: shown escaped.
            Some(h) => format!(
                "`{}` (pid {} on {}, since {})",
                h.command.escape_default(),
                h.pid,
                h.host.escape_default(),
                h.since.escape_default()
            ),
            None => "another run".to_string(),
        };
        transient(format!(
            "repository '{}' is locked by {who}: expire and merge run one at a time; run again once it is done (a lock whose holder died on this host, older than {} hours or dated in the future, is taken over; else remove '{}')",
            self.describe(),
            STALE_SECONDS / 3600,
            self.store.describe(REL)
        ))
    }
}

/// Whether a lock is stale: unreadable, its holder gone from this host, too old, or
/// dated in the future beyond clock skew.
fn stale(h: Option<&Holder>, now: DateTime<Utc>) -> bool {
    let Some(h) = h else {
        return true;
    };
    let old = DateTime::parse_from_rfc3339(&h.since).map_or(true, |t| {
        let age = (now - t.with_timezone(&Utc)).num_seconds();
        !(-SKEW_SECONDS..=STALE_SECONDS).contains(&age)
    });
    old || (h.host == crate::sys::hostname() && !crate::sys::process_alive(h.pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_a_dead_holder_is_taken_over() {
        let (_d, repo) = crate::repo::temp_repo();
        let held = repo.lock("expire").unwrap();
        let e = repo.lock("merge").err().unwrap();
        assert!(crate::fault::is_transient(&e));
        let m = format!("{e:#}");
        assert!(
            m.contains("`expire` (pid") && m.contains("locks/retention.json"),
            "{m}"
        );
        drop(held);
        assert!(!repo.store().exists(REL).unwrap());
        // A holder whose lock was taken over leaves the new holder's in place.
        let old = repo.lock("expire").unwrap();
        repo.store().put(REL, b"someone else").unwrap();
        drop(old);
        assert!(repo.store().exists(REL).unwrap());
        repo.store().delete(REL).unwrap();
        let again = repo.lock("merge").unwrap();
        drop(again);
        // A holder that died on this host, and an unreadable lock, are stale.
        let dead = Holder {
            command: "expire".into(),
            pid: i32::MAX,
            host: crate::sys::hostname(),
            since: Utc::now().to_rfc3339(),
        };
        repo.store()
            .put(REL, &serde_json::to_vec(&dead).unwrap())
            .unwrap();
        drop(repo.lock("expire").unwrap());
        repo.store().put(REL, b"not a lock").unwrap();
        drop(repo.lock("expire").unwrap());
        // A live holder elsewhere is not, until it is too old.
        let mut other = Holder {
            host: "elsewhere".into(),
            pid: 1,
            ..dead
        };
        assert!(!stale(Some(&other), Utc::now()));
        other.since = (Utc::now() - chrono::Duration::seconds(STALE_SECONDS + 1)).to_rfc3339();
        assert!(stale(Some(&other), Utc::now()));
        // Dated in the future: within clock skew it holds; beyond, it never would age.
        other.since = (Utc::now() + chrono::Duration::seconds(60)).to_rfc3339();
        assert!(!stale(Some(&other), Utc::now()));
        other.since = (Utc::now() + chrono::Duration::days(365)).to_rfc3339();
        assert!(stale(Some(&other), Utc::now()));
        // Planted so, it no longer blocks expire and merge for ever.
        repo.store()
            .put(REL, &serde_json::to_vec(&other).unwrap())
            .unwrap();
        drop(repo.lock("expire").unwrap());
    }
}
