//! The pusher of `archive-push --async`: ships what waits in the spool to the
//! repositories, several files at once, and removes each from the spool only once every
//! repository holds it. Each repository has its own worker, which retries a failure (1 s,
//! doubling to 16 s) until it passes: one repository down delays no other, and nothing
//! is ever dropped. It ends once the spool stayed empty for `linger`.

mod unlinker;
mod worker;

use super::spool::{repo_tag, unix_now, Backlog, PusherState, RepoPusher, Spool};
use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use unlinker::Unlinker;
use worker::Run;

/// At most this many files per round: files spooled meanwhile join the next one.
const BATCH: usize = 64;
const BACKOFF_MAX: Duration = Duration::from_secs(16);
/// The longest an upload waits for a call copying files into the spool.
const YIELD_MAX: Duration = Duration::from_millis(250);
/// How often files left behind (summaries, identities, marks) are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct DrainOptions {
    pub spool: PathBuf,
    /// The repositories (at least one), each with its own options: a file leaves the
    /// spool once every one holds it.
    pub repos: Vec<crate::repo::many::RepoStore>,
    /// Files pushed at once, into each repository.
    pub process_max: usize,
    /// How long an empty spool is watched before the pusher ends.
    pub linger: Duration,
    /// Give up (an error) once pushes into a repository have failed this long, after the
    /// others pushed what they could; None: retry for ever.
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
}

/// One repository's part of a drain, with several.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepoDrained {
    pub repo: String,
    /// Files pushed into it, and their bytes as stored.
    pub pushed: u64,
    pub stored_bytes: u64,
    pub failures: u64,
    /// What of the spool it lacks at the end.
    pub lacks: Backlog,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Drained {
    /// False when another pusher held the spool: this one did nothing.
    pub ran: bool,
    /// Files that left the spool (stored into every repository), and their bytes.
    pub pushed: u64,
    pub raw_bytes: u64,
    /// Bytes stored, into all repositories together.
    pub stored_bytes: u64,
    /// Failed rounds, of all repositories together.
    pub failures: u64,
    pub seconds: f64,
    /// What still waits (another pusher's, or files spooled as this one ended).
    pub left: Backlog,
    /// Requests to an object store, and retries, while it ran.
    pub object_store: crate::device::object::RetryStats,
    /// With several repositories, each one's part.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<RepoDrained>,
}

/// Pushes the spool empty. `say` gets one line per event (the log).
pub fn drain(o: &DrainOptions, say: &mut dyn FnMut(&str)) -> Result<Drained> {
    if let Some(r) = (o.repos.iter()).find(|r| o.sign && r.store.key.is_none()) {
        bail!(
            "--sign needs a key, and {} has none: {}",
            r.spec,
            crate::crypt::load::GIVE_KEY
        );
    }
    if o.repos.is_empty() {
        bail!("no repository to push into");
    }
    crate::repo::many::refuse_repeats(&crate::repo::many::specs(&o.repos))?;
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
    let tags: Vec<String> = match o.repos.len() {
        1 => vec![],
        _ => o.repos.iter().map(|r| repo_tag(&r.spec)).collect(),
    };
    out.repositories = (o.repos.iter())
        .take(if tags.is_empty() { 0 } else { o.repos.len() })
        .map(|r| RepoDrained {
            repo: r.spec.clone(),
            ..Default::default()
        })
        .collect();
    let state = PusherState {
        pid: std::process::id(),
        updated: unix_now(),
        repos: (o.repos.iter().zip(&tags))
            .map(|(r, t)| RepoPusher {
                repo: r.spec.clone(),
                tag: t.clone(),
                ..Default::default()
            })
            .collect(),
        ..PusherState::default()
    };
    spool.set_state(&state);
    let unlinker = Unlinker::start();
    for p in spool.pushed_leftovers() {
        unlinker.send(p);
    }
    let (tx, rx) = mpsc::channel();
    let run = Run::new(o, &spool, &unlinker, tags.clone(), state, out, tx);
    // Files every repository held when the last pusher stopped.
    if run.several() {
        for w in spool.waiting_files()? {
            let _ = run.leave_if_held(&w);
        }
    }
    let ended = std::thread::scope(|s| -> Result<()> {
        loop {
            run.set_stop(false);
            let workers: Vec<_> = (0..o.repos.len())
                .map(|i| {
                    let run = &run;
                    s.spawn(move || run.work(i))
                })
                .collect();
            let end = watch(&run, &workers, &rx, say);
            run.set_stop(true);
            let mut errors = vec![];
            for h in workers {
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => errors.push(e),
                    Err(_) => errors.push(anyhow!("a pusher's worker panicked")),
                }
            }
            for line in rx.try_iter() {
                say(&line);
            }
            let lingered = end?;
            let mut errors = errors.into_iter();
            if let Some(e) = errors.next() {
                let others: Vec<String> = errors.map(|e| format!("{e:#}")).collect();
                return Err(match others.is_empty() {
                    true => e,
                    false => e.context(others.join("; ")),
                });
            }
            if !lingered {
                return Ok(());
            }
            // A file spooled after the last listing finds the lock free and starts a
            // pusher, or is seen here once the lock is given up.
            drop(lock);
            if spool.waiting()?.is_empty() {
                return Ok(());
            }
            match spool.try_lock()? {
                Some(l) => lock = l,
                None => return Ok(()),
            }
        }
    });
    let (mut state, mut out) = run.into_parts();
    state.updated = unix_now();
    spool.set_state(&state);
    ended?;
    out.left = spool.backlog()?;
    for (r, t) in out.repositories.iter_mut().zip(&tags) {
        r.lacks = spool.lacking(t)?;
    }
    out.seconds = t0.elapsed().as_secs_f64();
    out.object_store = crate::device::object::retry_stats().since(before);
    Ok(out)
}

/// Watches the workers and the spool: true once the spool stayed empty for `linger`,
/// false once the workers ended (a worker that failed or gave up ends the drain at
/// once in the background pusher; by hand, once the others have nothing left to push).
fn watch(
    run: &Run,
    workers: &[std::thread::ScopedJoinHandle<Result<()>>],
    rx: &mpsc::Receiver<String>,
    say: &mut dyn FnMut(&str),
) -> Result<bool> {
    let o = run.o;
    let mut idle = Instant::now();
    let mut swept: Option<Instant> = None;
    loop {
        for line in rx.try_iter() {
            say(&line);
        }
        if let Some(sig) = crate::interrupt::received() {
            bail!(
                "{}: {} files pushed, the rest stays in the spool",
                crate::interrupt::error(sig),
                run.pushed_files()
            );
        }
        let ended: Vec<bool> = workers.iter().map(|h| h.is_finished()).collect();
        if ended.iter().all(|e| *e) {
            return Ok(false);
        }
        let rest_idle = ended.iter().enumerate().all(|(i, e)| *e || run.idle(i));
        if ended.iter().any(|e| *e) && (o.give_up.is_none() || rest_idle) {
            return Ok(false);
        }
        if swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            for p in run.spool.orphan_summaries() {
                let _ = std::fs::remove_file(p);
            }
            swept = Some(Instant::now());
        }
        if !run.spool.waiting()?.is_empty() {
            idle = Instant::now();
        } else if idle.elapsed() >= o.linger {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::archive::spool::Waiting;
    use crate::repo::many::RepoStore;
    use crate::repo::wal::spooled::{spool_copy, POOL, SUM_SUFFIX};
    use crate::repo::Repo;
    use std::path::Path;

    fn seg(n: u64) -> String {
        format!("0000000100000000{n:08X}")
    }

    /// A drain of `spool` into `repo` that gives up at the first failed round.
    fn once(spool: &Spool, repo: &str) -> DrainOptions {
        DrainOptions {
            spool: spool.dir.clone(),
            repos: RepoStore::all(&[repo.to_string()], &Default::default()),
            process_max: 2,
            linger: Duration::ZERO,
            give_up: Some(Duration::ZERO),
            wait_for_lock: None,
            yield_below: 0,
            sign: false,
            summaries: true,
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
    fn uploads_yield_only_on_few_cores_while_the_pusher_keeps_up() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let o = |process_max, yield_below| DrainOptions {
            spool: PathBuf::new(),
            repos: vec![],
            process_max,
            linger: Duration::ZERO,
            give_up: None,
            wait_for_lock: None,
            yield_below,
            sign: false,
            summaries: true,
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
    fn a_file_stays_spooled_until_the_last_repository_holds_it_and_each_gets_it_once() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::open(&d.path().join("spool")).unwrap();
        let ready = spool.ready();
        spool_segments(d.path(), &ready, 3..=5);
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        Repo::open(a, true, &Default::default()).unwrap();
        // `b` holds no repository yet: its pushes fail, `a` gets every file.
        let o = DrainOptions {
            repos: RepoStore::all(&[a.to_string(), b.to_string()], &Default::default()),
            ..once(&spool, a)
        };
        let e = format!("{:#}", drain(&o, &mut |_| {}).unwrap_err());
        assert!(e.contains(&format!("pushes into {b} have failed")), "{e}");
        let stored = |repo: &str, n| {
            let r = Repo::open(repo, false, &Default::default()).unwrap();
            crate::repo::wal::archived_path(&r, &seg(n))
                .unwrap()
                .exists()
        };
        assert!((3..=5).all(|n| stored(a, n)));
        assert_eq!(spool.waiting().unwrap().len(), 3);
        let (ta, tb) = (repo_tag(a), repo_tag(b));
        assert_eq!(spool.lacking(&ta).unwrap().files, 0);
        assert_eq!(spool.lacking(&tb).unwrap().files, 3);
        let st = spool.state().unwrap();
        assert!(st.repos[0].failing_since.is_none() && st.repos[1].failing_since.is_some());
        assert!(st.last_error.unwrap().starts_with(&format!("into {b}: ")));
        // A mark that speaks for another file of that name is not taken: seg 5 goes
        // into `a` again.
        let w5 = spool.waiting_file(&seg(5)).unwrap();
        let stale = Waiting {
            id: "1 2 3\n".into(),
            ..w5.clone()
        };
        spool.mark_held(&stale, &ta).unwrap();
        assert!(!spool.holds(&w5, &ta));
        // `b` back: it gets the three, `a` only the one whose mark lies, and they leave.
        Repo::open(b, true, &Default::default()).unwrap();
        let j = drain(&o, &mut |_| {}).unwrap();
        assert_eq!((j.pushed, j.left.files), (3, 0), "{j:?}");
        let each: Vec<u64> = j.repositories.iter().map(|r| r.pushed).collect();
        assert_eq!(each, [1, 3]);
        assert!((3..=5).all(|n| stored(a, n) && stored(b, n)));
        let left: Vec<String> = (std::fs::read_dir(&ready).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".in-") || n.ends_with(SUM_SUFFIX))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_segment_whose_spooled_summary_is_lost_is_summarized_again() {
        use crate::repo::wal::{summary, testing::segment};
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
