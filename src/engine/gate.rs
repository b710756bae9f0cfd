//! Files written by one run and read by another at the same time (a merge restores a
//! chain while it backs the copy up): the writer opens each file once it is whole, and
//! the whole gate when it ends well or fails it; the reader waits per file.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<State>,
    changed: Condvar,
    /// The reader failed: the writer stops, as nobody will read what it writes.
    cancelled: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    open: HashSet<u32>,
    /// The writer is done: Ok when every file is whole, else why not.
    done: Option<Result<(), String>>,
}

impl Gate {
    /// File `id` is whole.
    pub fn open(&self, id: u32) {
        self.state.lock().unwrap().open.insert(id);
        self.changed.notify_all();
    }

    /// The writer ended: `Ok` opens every file, `Err` fails every wait.
    pub fn finish(&self, r: Result<(), String>) {
        self.state.lock().unwrap().done = Some(r);
        self.changed.notify_all();
    }

    /// Whether file `id` may be read, waiting up to `wait` for it; Err when the
    /// writer failed.
    pub fn ready(&self, id: u32, wait: Duration) -> Result<bool, String> {
        let st = self.state.lock().unwrap();
        let (st, _) = self
            .changed
            .wait_timeout_while(st, wait, |s| s.done.is_none() && !s.open.contains(&id))
            .unwrap();
        match &st.done {
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(())) => Ok(true),
            None => Ok(st.open.contains(&id)),
        }
    }

    /// The reader gave up: the writer should stop.
    pub fn cancel(&self) {
        self.cancelled.store(true, Relaxed);
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Relaxed)
    }

    /// Waits until the writer ended; its result.
    pub fn wait_done(&self) -> Result<(), String> {
        let st = self.state.lock().unwrap();
        let st = self.changed.wait_while(st, |s| s.done.is_none()).unwrap();
        st.done.clone().expect("done")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reader_waits_for_its_file_or_the_end() {
        let g = Arc::new(Gate::default());
        let short = Duration::from_millis(10);
        assert_eq!(g.ready(1, short), Ok(false));
        let w = g.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.open(1);
        });
        assert_eq!(g.ready(1, Duration::from_secs(5)), Ok(true));
        t.join().unwrap();
        assert_eq!(g.ready(2, short), Ok(false));
        g.finish(Ok(()));
        assert_eq!(g.ready(2, short), Ok(true));
        assert_eq!(g.wait_done(), Ok(()));
        let bad = Gate::default();
        bad.finish(Err("set x: frame 3 damaged".into()));
        assert_eq!(bad.ready(7, short), Err("set x: frame 3 damaged".into()));
        assert!(bad.wait_done().is_err());
    }
}
