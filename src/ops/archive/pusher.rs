//! The pusher of `archive-push --async`: ships what waits in the spool to the
//! repository, several files at once, and removes each from the spool only once the
//! repository holds it. A failure is retried (1 s, doubling to 16 s) until it passes:
//! nothing is ever dropped. It ends once the spool stayed empty for `linger`.

use super::spool::{pushed_name, unix_now, Backlog, PusherState, Spool};
use crate::pg::{parse_name, Kind};
use crate::repo::wal::check_still_plain;
use crate::repo::wal::spooled::{
    mark_done, push_spooled, read_spooled_summary, retire, SUM_SUFFIX,
};
use crate::repo::Repo;
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// At most this many files per round: files spooled meanwhile join the next one.
const BATCH: usize = 64;
const BACKOFF_MAX: Duration = Duration::from_secs(16);
/// The longest an upload waits for a call copying files into the spool.
const YIELD_MAX: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct DrainOptions {
    pub spool: PathBuf,
    pub repo: String,
    /// Files pushed at once.
    pub process_max: usize,
    /// How long an empty spool is watched before the pusher ends.
    pub linger: Duration,
    /// Give up (an error) once pushes have failed this long; None: retry for ever.
    pub give_up: Option<Duration>,
    /// How long to wait for a running pusher to end; None: end at once.
    pub wait_for_lock: Option<Duration>,
    /// Uploads wait for a push copying files into the spool while fewer bytes than
    /// this wait ([`yields`]); 0: never.
    pub yield_below: u64,
    /// `--sign`: a new or plain repository is made signed, not encrypted, by the key.
    pub sign: bool,
    /// Segments are stored with their block summaries: one the spool lacks is made again.
    pub summaries: bool,
    pub store: crate::device::object::StoreOptions,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Drained {
    /// False when another pusher held the spool: this one did nothing.
    pub ran: bool,
    pub pushed: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub failures: u64,
    pub seconds: f64,
    /// What still waits (another pusher's, or files spooled as this one ended).
    pub left: Backlog,
    /// Requests to an object store, and retries, while it ran.
    pub object_store: crate::device::object::RetryStats,
}

/// Pushes the spool empty. `say` gets one line per event (the log).
pub fn drain(o: &DrainOptions, say: &mut dyn FnMut(&str)) -> Result<Drained> {
    if o.sign && o.store.key.is_none() {
        bail!("--sign needs a key: {}", crate::crypt::load::GIVE_KEY);
    }
    let t0 = Instant::now();
    let before = crate::device::object::retry_stats();
    let spool = Spool::open(&o.spool)?;
    let mut out = Drained::default();
    let mut lock = spool.try_lock()?;
    while lock.is_none() && t0.elapsed() < o.wait_for_lock.unwrap_or_default() {
        std::thread::sleep(Duration::from_millis(100));
        lock = spool.try_lock()?;
    }
    let Some(mut lock) = lock else {
        out.left = spool.backlog()?;
        return Ok(out);
    };
    out.ran = true;
    let mut state = PusherState {
        pid: std::process::id(),
        updated: unix_now(),
        ..PusherState::default()
    };
    spool.set_state(&state);
    let unlinker = Unlinker::start();
    for p in spool.pushed_leftovers() {
        unlinker.send(p);
    }
    let mut repo: Option<Repo> = None;
    let mut backoff = Duration::from_secs(1);
    let mut idle = Instant::now();
    loop {
        if let Some(sig) = crate::interrupt::received() {
            bail!(
                "{}: {} files pushed, the rest stays in the spool",
                crate::interrupt::error(sig),
                out.pushed
            );
        }
        for p in spool.orphan_summaries() {
            let _ = std::fs::remove_file(p);
        }
        let waiting = spool.waiting()?;
        if waiting.is_empty() {
            if idle.elapsed() < o.linger {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            // A file spooled after the listing above finds the lock free and starts a
            // pusher, or is seen here once the lock is given up.
            drop(lock);
            if spool.waiting()?.is_empty() {
                break;
            }
            match spool.try_lock()? {
                Some(l) => lock = l,
                None => break,
            }
            continue;
        }
        idle = Instant::now();
        let r = match &repo {
            Some(r) => r,
            None => match super::open_for_push(&o.repo, o.sign, &o.store) {
                Ok(r) => repo.insert(r),
                Err(e) => {
                    let e = format!("cannot open the repository: {e:#}");
                    fail(&spool, &mut state, &mut out, &e, say, o, &mut backoff)?;
                    continue;
                }
            },
        };
        let batch = &waiting[..waiting.len().min(BATCH)];
        let backlog: u64 = waiting.iter().map(|(_, b)| b).sum();
        let yielding = yields(o, backlog);
        let sum_path = |name: &str| spool.ready().join(format!("{name}{SUM_SUFFIX}"));
        let mut results = crate::par::map_index(batch.len(), o.process_max.max(1), |i| {
            let name = &batch[i].0;
            let sum = read_spooled_summary(&sum_path(name));
            if yielding {
                spool.yield_to_spooling(YIELD_MAX);
            }
            push_spooled(r, &spool.ready().join(name), sum, o.summaries)
        });
        // Once for the batch, before any spooled file goes: a plain repository is
        // still plain.
        if let Err(e) = check_still_plain(r, results.iter().flatten()) {
            let e = format!("{e:#}");
            results = results.into_iter().map(|_| Err(anyhow!("{e}"))).collect();
        }
        let results = results.into_iter().zip(batch).map(|(res, (name, _))| {
            let p = res?;
            mark_done(&spool.ready(), name);
            unlinker.remove(&spool.ready(), name)?;
            let _ = std::fs::remove_file(sum_path(name));
            Ok::<_, anyhow::Error>(p)
        });
        let mut failed = None;
        for (res, (name, _)) in results.zip(batch) {
            match res {
                Ok(p) => {
                    out.pushed += 1;
                    out.raw_bytes += p.raw_bytes;
                    out.stored_bytes += p.stored_bytes;
                    state.pushed += 1;
                    state.last_pushed = Some(p.name.clone());
                    say(&format!(
                        "pushed {} ({:?}, {} -> {} bytes, {:.3} s)",
                        p.name, p.outcome, p.raw_bytes, p.stored_bytes, p.seconds
                    ));
                }
                Err(e) => failed = Some(format!("{name}: {e:#}")),
            }
        }
        match failed {
            Some(e) => fail(&spool, &mut state, &mut out, &e, say, o, &mut backoff)?,
            None => {
                backoff = Duration::from_secs(1);
                state.last_error = None;
                state.failing_since = None;
                state.updated = unix_now();
                spool.set_state(&state);
            }
        }
    }
    state.updated = unix_now();
    spool.set_state(&state);
    out.left = spool.backlog()?;
    out.seconds = t0.elapsed().as_secs_f64();
    out.object_store = crate::device::object::retry_stats().since(before);
    Ok(out)
}

/// Whether uploads wait for a push copying files into the spool: only where they and
/// the copies compete for the cores (fewer than the copying threads, the uploads and
/// one for the server), and only while the pusher keeps up (`backlog` bytes under
/// `yield_below`); otherwise the wait would only delay the repository.
fn yields(o: &DrainOptions, backlog: u64) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = cores.min(4) + o.process_max + 1;
    cores < wanted && backlog < o.yield_below
}

/// Takes stored files out of the spool off the pusher's path: a segment into the pool
/// of files to write over while it has room ([`retire`]); any other file is renamed
/// out of the listing and unlinked on a thread of its own (on a file system mounted
/// with `discard`, about 20 ms for 16 MiB). A file a killed pusher left so is removed
/// by the next ([`Spool::pushed_leftovers`]).
struct Unlinker {
    tx: Option<mpsc::Sender<PathBuf>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Unlinker {
    fn start() -> Unlinker {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let thread = std::thread::spawn(move || {
            for p in rx {
                let _ = std::fs::remove_file(p);
            }
        });
        Unlinker {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn send(&self, p: PathBuf) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(p);
        }
    }

    /// Takes `dir/name` out of the spool at once: into the pool of segments to write
    /// over, or its bytes go later.
    fn remove(&self, dir: &Path, name: &str) -> std::io::Result<()> {
        if parse_name(name).is_some_and(|n| n.kind == Kind::Segment) && retire(dir, name)? {
            return Ok(());
        }
        let gone = dir.join(pushed_name(name));
        std::fs::rename(dir.join(name), &gone)?;
        self.send(gone);
        Ok(())
    }
}

impl Drop for Unlinker {
    /// Waits for the removals asked for: the spool's room is back when the pusher ends.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Records a failed round and waits before the next (or gives up past `give_up`).
fn fail(
    spool: &Spool,
    state: &mut PusherState,
    out: &mut Drained,
    e: &str,
    say: &mut dyn FnMut(&str),
    o: &DrainOptions,
    backoff: &mut Duration,
) -> Result<()> {
    out.failures += 1;
    let since = *state.failing_since.get_or_insert(unix_now());
    state.last_error = Some(e.to_string());
    state.updated = unix_now();
    spool.set_state(state);
    say(&format!(
        "push failed, retrying in {} s: {e}",
        backoff.as_secs()
    ));
    if let Some(g) = o.give_up {
        if unix_now().saturating_sub(since) >= g.as_secs() {
            bail!(
                "pushes have failed for {} s, the last: {e}; {} files stay in the spool '{}'",
                unix_now().saturating_sub(since),
                spool.backlog().map_or(0, |b| b.files),
                spool.dir.display()
            );
        }
    }
    let until = Instant::now() + *backoff;
    while Instant::now() < until && crate::interrupt::received().is_none() {
        std::thread::sleep(Duration::from_millis(100));
    }
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::wal::spooled::{spool_copy, POOL};

    fn seg(n: u64) -> String {
        format!("0000000100000000{n:08X}")
    }

    /// A drain of `spool` into `repo` that gives up at the first failed round.
    fn once(spool: &Spool, repo: &str) -> DrainOptions {
        DrainOptions {
            spool: spool.dir.clone(),
            repo: repo.to_string(),
            process_max: 2,
            linger: Duration::ZERO,
            give_up: Some(Duration::ZERO),
            wait_for_lock: None,
            yield_below: 0,
            sign: false,
            summaries: true,
            store: Default::default(),
        }
    }

    /// Segments `ns` of timeline 1 written in `dir` and spooled into `ready`.
    fn spool_segments(dir: &Path, ready: &Path, ns: std::ops::RangeInclusive<u64>) {
        for n in ns {
            let src = dir.join(seg(n));
            std::fs::write(&src, crate::repo::wal::testing::segment(1, n, 77, 5)).unwrap();
            spool_copy(&src, ready, None, true).unwrap();
        }
    }

    #[test]
    fn a_stored_file_leaves_the_listing_at_once_into_the_pool_or_removed() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(d.path()).unwrap();
        let ready = spool.ready();
        let pool = ready.join(POOL);
        let u = Unlinker::start();
        // Eight go into the pool to be written over; the ninth and a history file go.
        for i in 1..=9 {
            std::fs::write(ready.join(seg(i)), b"x").unwrap();
            u.remove(&ready, &seg(i)).unwrap();
        }
        std::fs::write(ready.join("00000002.history"), b"1\t0/1\tx\n").unwrap();
        u.remove(&ready, "00000002.history").unwrap();
        assert!(spool.waiting().unwrap().is_empty());
        drop(u);
        assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 8);
        assert!(!ready.join(pushed_name(&seg(9))).exists());
        assert!(!ready.join(pushed_name("00000002.history")).exists());
        // A pusher killed between the rename and the unlink leaves the file hidden; only
        // such names are swept.
        std::fs::write(ready.join(pushed_name(&seg(10))), b"x").unwrap();
        std::fs::write(ready.join(".notwal.pushed"), b"x").unwrap();
        assert_eq!(
            spool.pushed_leftovers(),
            [ready.join(pushed_name(&seg(10)))]
        );
    }

    #[test]
    fn uploads_yield_only_on_few_cores_while_the_pusher_keeps_up() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let o = |process_max, yield_below| DrainOptions {
            spool: PathBuf::new(),
            repo: String::new(),
            process_max,
            linger: Duration::ZERO,
            give_up: None,
            wait_for_lock: None,
            yield_below,
            sign: false,
            summaries: true,
            store: Default::default(),
        };
        let few = cores < cores.min(4) + 2 + 1;
        assert_eq!(yields(&o(2, 2 << 30), 1 << 30), few);
        // Behind (half the spool's limit waits), or never asked to: no wait.
        assert!(!yields(&o(2, 2 << 30), 2 << 30));
        assert!(!yields(&o(2, 0), 0));
        // As many uploads as the host has cores: they compete with the copies.
        assert!(yields(&o(cores, 2 << 30), 0));
    }

    #[test]
    fn a_drain_that_gives_up_names_the_damaged_file_keeps_it_and_pushes_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(&d.path().join("spool")).unwrap();
        let ready = spool.ready();
        spool_segments(d.path(), &ready, 3..=4);
        // Damaged in the spool after it was spooled: refused at every round.
        let copy = ready.join(seg(3));
        let mut b = std::fs::read(&copy).unwrap();
        b[8192 + 100] ^= 1;
        std::fs::write(&copy, &b).unwrap();
        let repo = d.path().join("repo");
        crate::repo::Repo::open(repo.to_str().unwrap(), true, &Default::default()).unwrap();
        let o = once(&spool, repo.to_str().unwrap());
        let t = Instant::now();
        let e = format!("{:#}", drain(&o, &mut |_| {}).unwrap_err());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(e.contains(&seg(3)) && e.contains("1 files stay"), "{e}");
        let left: Vec<_> = spool.waiting().unwrap().into_iter().map(|w| w.0).collect();
        assert_eq!(left, [seg(3)]);
        let r = Repo::open(repo.to_str().unwrap(), false, &Default::default()).unwrap();
        let stored = |n| {
            crate::repo::wal::archived_path(&r, &seg(n))
                .unwrap()
                .exists()
        };
        assert!(stored(4) && !stored(3));
    }

    #[test]
    fn a_segment_whose_spooled_summary_is_lost_is_summarized_again() {
        use crate::repo::wal::{spooled::SUM_SUFFIX, summary, testing::segment};
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(&d.path().join("spool")).unwrap();
        let ready = spool.ready();
        spool_segments(d.path(), &ready, 3..=5);
        // One summary lost (a crash before it reached the disk), one damaged.
        std::fs::remove_file(ready.join(format!("{}{SUM_SUFFIX}", seg(4)))).unwrap();
        std::fs::write(ready.join(format!("{}{SUM_SUFFIX}", seg(5))), b"torn").unwrap();
        let repo = d.path().join("repo");
        let repo = repo.to_str().unwrap();
        crate::repo::Repo::open(repo, true, &Default::default()).unwrap();
        let o = once(&spool, repo);
        assert_eq!(drain(&o, &mut |_| {}).unwrap().pushed, 3);
        let r = Repo::open(repo, false, &Default::default()).unwrap();
        for n in 3..=5 {
            let s = summary::read(&r, &seg(n)).unwrap();
            assert!(s.is_some_and(|s| s.segment == seg(n)), "{}", seg(n));
        }
        // Summaries off: none is made for a segment spooled without one.
        let src = d.path().join(seg(6));
        std::fs::write(&src, segment(1, 6, 77, 5)).unwrap();
        spool_copy(&src, &ready, None, false).unwrap();
        let off = DrainOptions {
            summaries: false,
            ..o
        };
        assert_eq!(drain(&off, &mut |_| {}).unwrap().pushed, 1);
        assert!(summary::read(&r, &seg(6)).unwrap().is_none());
    }

    #[test]
    fn a_segment_spooled_over_a_longer_recycled_file_holds_its_own_bytes() {
        use crate::repo::wal::testing::{segment, SEG};
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(&d.path().join("spool")).unwrap();
        let ready = spool.ready();
        std::fs::create_dir(ready.join(POOL)).unwrap();
        std::fs::write(
            ready.join(POOL).join(seg(1)),
            vec![7u8; SEG as usize + 4096],
        )
        .unwrap();
        let src = d.path().join(seg(3));
        let bytes = segment(1, 3, 77, 5);
        std::fs::write(&src, &bytes).unwrap();
        spool_copy(&src, &ready, None, true).unwrap();
        assert_eq!(std::fs::read(ready.join(seg(3))).unwrap(), bytes);
        assert_eq!(std::fs::read_dir(ready.join(POOL)).unwrap().count(), 0);
        // A link planted in the pool is never written through.
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, ready.join(POOL).join(seg(1))).unwrap();
        let src = d.path().join(seg(4));
        std::fs::write(&src, segment(1, 4, 77, 5)).unwrap();
        spool_copy(&src, &ready, None, true).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(
            std::fs::read(ready.join(seg(4))).unwrap(),
            segment(1, 4, 77, 5)
        );
        assert_eq!(std::fs::read_dir(ready.join(POOL)).unwrap().count(), 0);
    }
}
