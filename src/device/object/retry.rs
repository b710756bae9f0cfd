//! Requests the object store client retried, counted for the summary.

use super::*;

// ---------------------------------------------------------------------------------
// Retry accounting. object_store retries internally and says so through `tracing`;
// a tiny subscriber counts those events and the back-off they announce. It is the
// subscriber of our own object_store futures only (`block_on`, `spawn`): a program
// embedding pagevault keeps its own global subscriber, and pagevault installs none.

pub(super) static RETRIES: AtomicU64 = AtomicU64::new(0);
pub(super) static BACKOFF_NS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone, Copy, Default, serde::Serialize, PartialEq)]
pub struct RetryStats {
    /// Requests made (each page of a listing, each part of an upload).
    pub requests: u64,
    pub retries: u64,
    pub backoff_seconds: f64,
}

/// Requests made and retried so far in this process, and the time spent backing off.
pub fn retry_stats() -> RetryStats {
    RetryStats {
        requests: super::count::REQUESTS.load(Relaxed),
        retries: RETRIES.load(Relaxed),
        backoff_seconds: BACKOFF_NS.load(Relaxed) as f64 / 1e9,
    }
}

impl RetryStats {
    /// What was retried since `before` was taken: one run's share of the process's.
    pub fn since(self, before: RetryStats) -> RetryStats {
        RetryStats {
            requests: self.requests.saturating_sub(before.requests),
            retries: self.retries.saturating_sub(before.retries),
            backoff_seconds: (self.backoff_seconds - before.backoff_seconds).max(0.0),
        }
    }
}

pub(super) struct RetryCounter;

/// The one dispatcher of `RetryCounter`, built once: building a dispatcher makes
/// tracing re-register every callsite, so not one per request.
pub(super) fn counter() -> Dispatch {
    static D: OnceLock<Dispatch> = OnceLock::new();
    D.get_or_init(|| Dispatch::new(RetryCounter)).clone()
}

pub(super) struct MessageOf(String);

impl tracing::field::Visit for MessageOf {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// "..., backing off for 0.4 seconds, retry 1 of 10" -> 0.4
pub(super) fn backoff_of(msg: &str) -> Option<f64> {
    let rest = msg.split("backing off for ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl tracing::Subscriber for RetryCounter {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target().starts_with("object_store") && m.is_event()
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut m = MessageOf(String::new());
        e.record(&mut m);
        if let Some(s) = backoff_of(&m.0) {
            RETRIES.fetch_add(1, Relaxed);
            BACKOFF_NS.fetch_add((s * 1e9) as u64, Relaxed);
            // A diagnostic switch, documented in docs/guide/10-object-stores.md.
            if std::env::var_os("PAGEVAULT_LOG_RETRIES").is_some() {
                eprintln!("pagevault: object store: {}", m.0);
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
