//! One repository's worker of the pusher, and what the workers share: each pushes what
//! its repository lacks on its own and backs off on its own, so a repository down
//! delays no other; a file leaves the spool once the last repository holds it.

use super::super::spool::{backlog_of, unix_now, Backlog, PusherState, Spool, Waiting};
use super::unlinker::Unlinker;
use super::{yields, DrainOptions, Drained, BACKOFF_MAX, BATCH, YIELD_MAX};
use crate::repo::wal::spooled::{mark_done, push_spooled, read_spooled_summary, SUM_SUFFIX};
use crate::repo::wal::{check_still_plain, Pushed};
use crate::repo::Repo;
use anyhow::{anyhow, bail, Result};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a worker with nothing to push waits before it looks again.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// How often a worker backing off counts again what its repository lacks.
const LACKS_EVERY: Duration = Duration::from_secs(1);

/// What the workers of one drain share.
pub(super) struct Run<'a> {
    pub o: &'a DrainOptions,
    pub spool: &'a Spool,
    unlinker: &'a Unlinker,
    /// Each repository's mark tag; none with one repository (a file leaves once it
    /// holds it).
    tags: Vec<String>,
    state: Mutex<PusherState>,
    out: Mutex<Drained>,
    /// One file leaves at a time: the worker whose mark completes it removes it.
    leaving: Mutex<()>,
    stop: AtomicBool,
    idle: Vec<AtomicBool>,
    /// Lines for the log, written by the drain's thread.
    lines: mpsc::Sender<String>,
}

/// A lock whose holder panicked still guards plain counters.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> Run<'a> {
    pub fn new(
        o: &'a DrainOptions,
        spool: &'a Spool,
        unlinker: &'a Unlinker,
        tags: Vec<String>,
        state: PusherState,
        out: Drained,
        lines: mpsc::Sender<String>,
    ) -> Run<'a> {
        Run {
            o,
            spool,
            unlinker,
            idle: o.repos.iter().map(|_| AtomicBool::new(false)).collect(),
            tags,
            state: Mutex::new(state),
            out: Mutex::new(out),
            leaving: Mutex::new(()),
            stop: AtomicBool::new(false),
            lines,
        }
    }

    pub fn several(&self) -> bool {
        !self.tags.is_empty()
    }

    pub fn set_stop(&self, stop: bool) {
        self.stop.store(stop, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || crate::interrupt::received().is_some()
    }

    /// Whether worker `i` found nothing to push at its last look.
    pub fn idle(&self, i: usize) -> bool {
        self.idle[i].load(Ordering::SeqCst)
    }

    pub fn pushed_files(&self) -> u64 {
        lock(&self.out).pushed
    }

    pub fn into_parts(self) -> (PusherState, Drained) {
        let state = self.state.into_inner().unwrap_or_else(|e| e.into_inner());
        let out = self.out.into_inner().unwrap_or_else(|e| e.into_inner());
        (state, out)
    }

    fn say(&self, line: String) {
        let _ = self.lines.send(line);
    }

    /// " into REPO" with several repositories, else nothing.
    fn into(&self, i: usize) -> String {
        match self.several() {
            true => format!(" into {}", self.o.repos[i].spec),
            false => String::new(),
        }
    }

    /// Pushes what repository `i` lacks until stopped; an error when pushes into it
    /// failed for `give_up`, or the spool cannot be listed.
    pub fn work(&self, i: usize) -> Result<()> {
        let o = self.o;
        let tag = self.tags.get(i);
        let mut repo: Option<Repo> = None;
        let mut backoff = Duration::from_secs(1);
        // Files it holds, by name and identity: each mark is read once.
        let mut held: HashMap<String, String> = HashMap::new();
        let sum_path = |name: &str| self.spool.ready().join(format!("{name}{SUM_SUFFIX}"));
        while !self.stopped() {
            let waiting = self.spool.waiting_files()?;
            let todo: Vec<Waiting> = match tag {
                None => waiting,
                Some(t) => {
                    let names: HashSet<&str> = waiting.iter().map(|w| w.name.as_str()).collect();
                    held.retain(|n, _| names.contains(n.as_str()));
                    let mut todo = vec![];
                    for w in &waiting {
                        if held.get(&w.name) == Some(&w.id) {
                            continue;
                        }
                        if self.spool.holds(w, t) {
                            held.insert(w.name.clone(), w.id.clone());
                            continue;
                        }
                        todo.push(w.clone());
                    }
                    self.set_lacks(i, backlog_of(&todo));
                    todo
                }
            };
            self.idle[i].store(todo.is_empty(), Ordering::SeqCst);
            if todo.is_empty() {
                std::thread::sleep(IDLE_WAIT);
                continue;
            }
            let r = match &repo {
                Some(r) => r,
                None => {
                    match super::super::open_for_push(&o.repos[i].spec, o.sign, &o.repos[i].store) {
                        Ok(r) => repo.insert(r),
                        Err(e) => {
                            let e = format!("cannot open the repository: {e:#}");
                            self.fail(i, &e, &mut backoff)?;
                            continue;
                        }
                    }
                }
            };
            let batch = &todo[..todo.len().min(BATCH)];
            let backlog: u64 = todo.iter().map(|w| w.len).sum();
            let yielding = yields(o, backlog);
            let mut results = crate::par::map_index(batch.len(), o.process_max.max(1), |k| {
                let name = &batch[k].name;
                let sum = read_spooled_summary(&sum_path(name));
                if yielding {
                    self.spool.yield_to_spooling(YIELD_MAX);
                }
                push_spooled(r, &self.spool.ready().join(name), sum, o.summaries)
            });
            // Once for the batch, before any spooled file goes: a plain repository is
            // still plain.
            if let Err(e) = check_still_plain(r, results.iter().flatten()) {
                let e = format!("{e:#}");
                results = results.into_iter().map(|_| Err(anyhow!("{e}"))).collect();
            }
            let mut failed = None;
            for (res, w) in results.into_iter().zip(batch) {
                let res = res.and_then(|p| {
                    if let Some(t) = tag {
                        self.spool.mark_held(w, t)?;
                        held.insert(w.name.clone(), w.id.clone());
                    }
                    self.leave_if_held(w)?;
                    Ok(p)
                });
                match res {
                    Ok(p) => self.pushed(i, &p),
                    Err(e) => failed = Some(format!("{}: {e:#}", w.name)),
                }
            }
            match failed {
                Some(e) => self.fail(i, &e, &mut backoff)?,
                None => {
                    backoff = Duration::from_secs(1);
                    self.succeeded(i);
                }
            }
        }
        Ok(())
    }

    /// Takes `w` out of the spool when every repository holds this very file (with one,
    /// at once): true when it left.
    pub fn leave_if_held(&self, w: &Waiting) -> Result<bool> {
        let _one = lock(&self.leaving);
        if self.several() {
            let Some(now) = self.spool.waiting_file(&w.name) else {
                return Ok(false);
            };
            if now.id != w.id || !self.tags.iter().all(|t| self.spool.holds(&now, t)) {
                return Ok(false);
            }
            // Before the file: a crash between leaves the file without marks, pushed
            // again (a no-op), never marks that outlive it.
            self.spool.unmark(&w.name, &self.tags)?;
        }
        let ready = self.spool.ready();
        mark_done(&ready, &w.name);
        self.unlinker.remove(&ready, &w.name)?;
        let _ = std::fs::remove_file(ready.join(format!("{}{SUM_SUFFIX}", w.name)));
        {
            let mut out = lock(&self.out);
            out.pushed += 1;
            out.raw_bytes += w.len;
        }
        let mut st = lock(&self.state);
        st.pushed += 1;
        st.last_pushed = Some(w.name.clone());
        Ok(true)
    }

    fn pushed(&self, i: usize, p: &Pushed) {
        {
            let mut out = lock(&self.out);
            out.stored_bytes += p.stored_bytes;
            if let Some(r) = out.repositories.get_mut(i) {
                r.pushed += 1;
                r.stored_bytes += p.stored_bytes;
            }
        }
        if let Some(r) = lock(&self.state).repos.get_mut(i) {
            r.pushed += 1;
            r.last_pushed = Some(p.name.clone());
        }
        self.say(format!(
            "pushed {}{} ({:?}, {} -> {} bytes, {:.3} s)",
            p.name,
            self.into(i),
            p.outcome,
            p.raw_bytes,
            p.stored_bytes,
            p.seconds
        ));
    }

    /// Records what repository `i` lacks, writing the state when it changed.
    fn set_lacks(&self, i: usize, lacks: Backlog) {
        let mut st = lock(&self.state);
        let Some(r) = st.repos.get_mut(i) else {
            return;
        };
        if r.lacks != lacks {
            r.lacks = lacks;
            st.updated = unix_now();
            self.spool.set_state(&st);
        }
    }

    fn succeeded(&self, i: usize) {
        let mut st = lock(&self.state);
        match st.repos.get_mut(i) {
            Some(r) => {
                r.last_error = None;
                r.failing_since = None;
                longest_failing(&mut st);
            }
            None => {
                st.last_error = None;
                st.failing_since = None;
            }
        }
        st.updated = unix_now();
        self.spool.set_state(&st);
    }

    /// Records a failed round of repository `i` and waits before its next (or gives up
    /// past `give_up`).
    fn fail(&self, i: usize, e: &str, backoff: &mut Duration) -> Result<()> {
        if let Some(Ok(l)) = self.tags.get(i).map(|t| self.spool.lacking(t)) {
            self.set_lacks(i, l);
        }
        let (since, lag) = {
            let mut st = lock(&self.state);
            let (since, lag) = match st.repos.get_mut(i) {
                Some(r) => {
                    r.last_error = Some(e.to_string());
                    let since = *r.failing_since.get_or_insert(unix_now());
                    let l = &r.lacks;
                    let lag = format!(
                        " ({} lacks {} files, {}, the oldest {})",
                        r.repo,
                        l.files,
                        crate::units::human(l.bytes),
                        l.oldest.as_deref().unwrap_or("-")
                    );
                    longest_failing(&mut st);
                    (since, lag)
                }
                None => {
                    st.last_error = Some(e.to_string());
                    (*st.failing_since.get_or_insert(unix_now()), String::new())
                }
            };
            st.updated = unix_now();
            self.spool.set_state(&st);
            (since, lag)
        };
        {
            let mut out = lock(&self.out);
            out.failures += 1;
            if let Some(r) = out.repositories.get_mut(i) {
                r.failures += 1;
            }
        }
        let into = self.into(i);
        self.say(format!(
            "push{into} failed, retrying in {} s{lag}: {e}",
            backoff.as_secs()
        ));
        if let Some(g) = self.o.give_up {
            if unix_now().saturating_sub(since) >= g.as_secs() {
                bail!(
                    "pushes{into} have failed for {} s, the last: {e}; {} files stay in the spool '{}'",
                    unix_now().saturating_sub(since),
                    self.spool.backlog().map_or(0, |b| b.files),
                    self.spool.dir.display()
                );
            }
        }
        let until = Instant::now() + *backoff;
        let mut counted = Instant::now();
        while Instant::now() < until && !self.stopped() {
            std::thread::sleep(Duration::from_millis(100));
            // What it lacks grows while it waits: counted again each second.
            if let (Some(t), true) = (self.tags.get(i), counted.elapsed() >= LACKS_EVERY) {
                if let Ok(l) = self.spool.lacking(t) {
                    self.set_lacks(i, l);
                }
                counted = Instant::now();
            }
        }
        *backoff = (*backoff * 2).min(BACKOFF_MAX);
        Ok(())
    }
}

/// With several repositories, the state's own error is the one of the repository
/// failing longest (what `status`, `check` and PostgreSQL's log show first).
fn longest_failing(st: &mut PusherState) {
    let worst = (st.repos.iter())
        .filter_map(|r| Some((r.failing_since?, r)))
        .min_by_key(|(since, _)| *since);
    (st.last_error, st.failing_since) = match worst {
        Some((since, r)) => (
            Some(format!(
                "into {}: {}",
                r.repo,
                r.last_error.as_deref().unwrap_or("")
            )),
            Some(since),
        ),
        None => (None, None),
    };
}
