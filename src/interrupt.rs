//! Ctrl-C, SIGTERM and SIGHUP while a pipeline runs. The handler only records the
//! signal; the stages see it at their next poll (50 ms at most), and the command's
//! failure path cleans up: partial stripes removed, multipart uploads aborted, nothing
//! recorded, a restore's target marked incomplete. A second signal ends the process at once.

use crate::sys::signal::{self, Disposition, DEFAULT, IGNORE};
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [i32; 3] = [signal::INT, signal::TERM, signal::HUP];

extern "C" fn on_signal(sig: i32) {
    RECEIVED.store(sig, Relaxed);
    // The next one gets the default action.
    signal::set(sig, DEFAULT);
}

fn ours() -> Disposition {
    // SAFETY: on_signal only stores to an atomic and calls signal().
    unsafe { Disposition::handler(on_signal) }
}

/// Catches the signals until dropped, then puts back what was there before. A signal
/// the process was started ignoring (nohup) stays ignored.
pub struct Guard {
    before: Vec<(i32, Disposition)>,
}

pub fn catch() -> Guard {
    let mut before = vec![];
    for sig in SIGNALS {
        let old = signal::set(sig, ours());
        if old == IGNORE {
            signal::set(sig, IGNORE);
        } else {
            before.push((sig, old));
        }
    }
    Guard { before }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for &(sig, old) in &self.before {
            // An outer Guard's handler comes back only while no signal has come.
            let old = if old == ours() && received().is_some() {
                DEFAULT
            } else {
                old
            };
            signal::set(sig, old);
        }
    }
}

/// The signal received while a Guard was up, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

pub fn name(sig: i32) -> &'static str {
    match sig {
        signal::INT => "SIGINT (Ctrl-C)",
        signal::TERM => "SIGTERM",
        signal::HUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The error a pipeline stopped by a signal fails with.
pub fn error(sig: i32) -> anyhow::Error {
    anyhow::anyhow!("interrupted by {}", name(sig))
}
