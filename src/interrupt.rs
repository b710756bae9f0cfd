//! Ctrl-C, SIGTERM and SIGHUP while a pipeline runs. The handler only records the
//! signal; the stages see it at their next poll (50 ms at most), and the command's
//! failure path cleans up: partial stripes removed, multipart uploads aborted, nothing
//! recorded, a restore's target marked incomplete. A second signal ends the process at once.

use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Relaxed);
    // SAFETY: signal() is async-signal-safe; the next one gets the default action.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Catches the signals until dropped, then puts back what was there before. A signal
/// the process was started ignoring (nohup) stays ignored.
pub struct Guard {
    before: Vec<(libc::c_int, libc::sighandler_t)>,
}

pub fn catch() -> Guard {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    let mut before = vec![];
    for sig in SIGNALS {
        // SAFETY: the handler only stores to an atomic and calls signal().
        let old = unsafe { libc::signal(sig, handler as libc::sighandler_t) };
        if old == libc::SIG_IGN {
            unsafe { libc::signal(sig, libc::SIG_IGN) };
        } else {
            before.push((sig, old));
        }
    }
    Guard { before }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let ours = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for &(sig, old) in &self.before {
            // An outer Guard's handler comes back only while no signal has come.
            let old = if old == ours && received().is_some() {
                libc::SIG_DFL
            } else {
                old
            };
            // SAFETY: restores the disposition catch() replaced.
            unsafe { libc::signal(sig, old) };
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
        libc::SIGINT => "SIGINT (Ctrl-C)",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The error a pipeline stopped by a signal fails with.
pub fn error(sig: i32) -> anyhow::Error {
    anyhow::anyhow!("interrupted by {}", name(sig))
}
