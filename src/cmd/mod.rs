//! One file per command. Commands parse nothing themselves (clap does) and own all
//! printing; the engine and the format modules never print.

pub mod archive;
pub mod backup;
pub mod bench;
pub mod check;
pub mod cli;
pub mod config;
pub mod copy;
pub mod demo;
pub mod drill;
pub mod each;
pub mod estimate;
pub mod expire;
pub mod generate;
pub mod history;
pub mod info;
pub mod init;
pub mod key;
pub mod log;
pub mod merge;
pub mod restore;
pub mod sql;
pub mod status;
pub mod tune;
pub mod waits;

pub use waits::PrintWaits;

// Until cmd/backup.rs reads its base set through crate::set::read itself.

use crate::engine::stats::Progress;

/// Exit statuses (docs/PROGRAMS.md): 0 ok, then these. archive-get's are its own
/// (cmd::archive), status's Nagios checks use 1 and 2, a signal 128 + its number.
/// Failed: damaged, refused, not found, misconfigured at run time; fix before retrying.
pub const EXIT_FATAL: u8 = 1;
/// The command line, a PAGEVAULT_* variable or the configuration file is wrong; nothing ran.
pub const EXIT_USAGE: u8 = 2;
/// A store or server did not answer, or a wait timed out: the same run may pass later.
pub const EXIT_RETRY: u8 = 3;

/// A failure that must end the process with a status of its own (not 1).
#[derive(Debug)]
pub struct Exit {
    pub code: u8,
    pub error: anyhow::Error,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Exit {}
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Shows progress while a run goes on: a bar on a terminal, else
/// "N percent processed." lines every `step` percent (SQL Server's STATS).
pub struct Reporter {
    stop: Arc<AtomicBool>,
    waker: Option<std::sync::mpsc::Sender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Reporter {
    pub fn start(
        progress: Arc<Progress>,
        stats: Option<u32>,
        json: bool,
        verb: &'static str,
    ) -> Reporter {
        Self::spawn(progress, stats, json, verb, true)
    }

    /// A bar on a terminal and nothing else: for a step before the run, whose
    /// "percent processed" lines are the run's alone.
    pub fn bar_only(
        progress: Arc<Progress>,
        stats: Option<u32>,
        json: bool,
        verb: &'static str,
    ) -> Reporter {
        Self::spawn(progress, stats, json, verb, false)
    }

    fn spawn(
        progress: Arc<Progress>,
        stats: Option<u32>,
        json: bool,
        verb: &'static str,
        lines: bool,
    ) -> Reporter {
        let tty = std::io::stderr().is_terminal() && stats.is_none() && !json;
        let step = (lines && !json).then(|| stats.unwrap_or(10).clamp(1, 100) as u64);
        let stop = Arc::new(AtomicBool::new(false));
        let (waker, wake) = std::sync::mpsc::channel::<()>();
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let bar = tty.then(|| {
                let b = indicatif::ProgressBar::new(progress.total.load(Relaxed));
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                    )
                    .unwrap()
                    .progress_chars("=> "),
                );
                b.set_message(verb);
                b
            });
            let mut printed = 0u64;
            loop {
                let done = s.load(Relaxed);
                let total = progress.total.load(Relaxed);
                let cur = progress.done.load(Relaxed).min(total);
                if let Some(b) = &bar {
                    b.set_length(total);
                    b.set_position(cur);
                } else if let Some(step) = step {
                    let pct = (cur * 100)
                        .checked_div(total)
                        .unwrap_or(if done { 100 } else { 0 });
                    while printed + step <= pct {
                        printed += step;
                        println!("{printed} percent processed.");
                    }
                }
                if done {
                    if let Some(b) = &bar {
                        b.finish_and_clear();
                    }
                    break;
                }
                // Wakes at once when finish() drops the sender.
                let _ = wake.recv_timeout(Duration::from_millis(100));
            }
        });
        Reporter {
            stop,
            waker: Some(waker),
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) {
        self.stop.store(true, Relaxed);
        self.waker.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        self.waker.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// An on/off option (`--direct-io on`), listed as such in `--help`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

impl Switch {
    pub fn on(self) -> bool {
        self == Switch::On
    }
}

/// A string from a set or a catalog record as text output shows it: control characters
/// escaped, so a forged name cannot drive the terminal.
pub fn shown(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap());
}

/// With --json, prints a use case's report as JSON and says so (the caller then prints
/// no text).
pub fn printed_json<T: serde::Serialize>(report: &T, json: bool) -> bool {
    if json {
        print_json(&serde_json::to_value(report).unwrap_or_default());
    }
    json
}

/// Object-store requests retried in this run, for the summary (text and JSON).
pub fn retries_json() -> serde_json::Value {
    serde_json::to_value(crate::device::object::retry_stats()).unwrap_or_default()
}

pub fn print_retries() {
    let r = crate::device::object::retry_stats();
    if r.retries > 0 {
        println!(
            "Object storage: {} request(s) retried after throttling, timeouts or dropped connections, {:.1} s spent backing off (part of the stage that issued them).",
            r.retries, r.backoff_seconds
        );
    }
}

#[cfg(test)]
mod shown_tests {
    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::shown("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
        assert_eq!(super::shown("base/1/1259 é"), "base/1/1259 é");
    }
}
