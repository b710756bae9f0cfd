//! The log chain recovery will need, checked before anything is written.

use super::RestoreOptions;
use crate::pg;
use crate::pg::facts::PgFacts;
use crate::repo::{walchain, CatalogEntry, Repo};
use crate::source::Extra;
use anyhow::{anyhow, Result};
use serde_json::json;
use std::time::Duration;

/// Finds a broken or damaged log chain before anything is written: every WAL file
/// recovery will fetch after the set, on every timeline up to the target, must be in
/// the archive (and intact, unless `no_verify_wal`).
pub(super) fn check_wal_chain(
    repo: &Repo,
    entry: &CatalogEntry,
    extra: &Extra,
    o: &RestoreOptions,
) -> Result<Option<WalCheck>> {
    let (Some(tli), Some(stop)) = (
        entry.timeline,
        entry.stop_lsn.as_deref().and_then(pg::parse_lsn),
    ) else {
        return Ok(None);
    };
    let seg_size = PgFacts::from_extra(extra)
        .map_err(|e| anyhow!("set {}: its manifest's PostgreSQL facts: {e}", entry.set_id))?
        .map_or(16 << 20, |f| f.wal_segment_size);
    let end = match o.until_lsn.as_deref().and_then(pg::parse_lsn) {
        Some(l) => walchain::End::Lsn(l),
        None => walchain::End::Latest,
    };
    let from = walchain::From {
        set_id: &entry.set_id,
        tli,
        stop_lsn: stop,
        seg_size,
    };
    let chain = walchain::plan(repo, &from, end, o.timeline)?;
    let verified = match o.no_verify_wal {
        true => None,
        false => {
            // Objects are downloaded: more requests in flight than cores.
            let threads = match repo.store().local_path("wal") {
                Some(_) => crate::engine::default_threads(),
                None => 8,
            };
            Some(walchain::verify(repo, &chain, threads)?)
        }
    };
    Ok(Some(WalCheck { chain, verified }))
}

/// The log chain a restore checked.
pub(super) struct WalCheck {
    chain: walchain::WalChain,
    /// How long reading and checking every file took (None: `no_verify_wal`).
    verified: Option<Duration>,
}

impl WalCheck {
    pub(super) fn note(&self) -> String {
        let how = match self.verified {
            Some(d) => format!(
                "all {} files read and checked in {:.3} s",
                self.chain.files.len(),
                d.as_secs_f64()
            ),
            None => format!(
                "{} files present, their content NOT checked (--no-verify-wal): archive-get checks \
                 each as recovery fetches it and stops recovery on a damaged one",
                self.chain.files.len()
            ),
        };
        format!(
            "recovery will replay from the archive {} up to timeline {}; {how}",
            self.chain.describe(),
            self.chain.target_tli
        )
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let mut j = self.chain.json();
        j["verified"] = json!(self.verified.is_some());
        j["verify_seconds"] = json!(self.verified.map(|d| d.as_secs_f64()));
        j
    }
}
