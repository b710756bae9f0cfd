//! What a delta restore's sweep moved aside (`.pagevault-swept` in each root) is removed
//! on a thread while the set is written. What is left when the data is in place is not
//! waited for: the restore hands it to a process of its own (`remove_swept`), since a
//! stale copy's old WAL can take longer to unlink than the restore takes to write.

use anyhow::{bail, Context, Result};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use super::delta::TRASH;

/// The removal running beside the restore.
pub struct Emptying {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<()>>,
    trash: Vec<PathBuf>,
}

impl Emptying {
    pub fn start(trash: Vec<PathBuf>) -> Emptying {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (trash, stop) = (trash.clone(), stop.clone());
            move || remove_swept(&trash, &stop)
        });
        Emptying {
            stop,
            thread,
            trash,
        }
    }

    /// Stops it after the file it is at; the directories it has not removed yet.
    pub fn stop(self) -> Result<Vec<PathBuf>> {
        self.stop.store(true, Relaxed);
        self.thread.join().expect("removal panicked")?;
        Ok((self.trash.into_iter())
            .filter(|t| t.symlink_metadata().is_ok())
            .collect())
    }
}

/// Removes each trash directory and what it holds, never through a link (a link is
/// removed, not followed). Another remover of the same directory (an earlier restore's
/// process) is no error: what it removed first is simply gone. Ends early once `stop`.
pub fn remove_swept(trash: &[PathBuf], stop: &AtomicBool) -> Result<()> {
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    for t in trash {
        let walk = walkdir::WalkDir::new(t)
            .follow_links(false)
            .follow_root_links(false)
            .contents_first(true);
        for e in walk {
            if stop.load(Relaxed) {
                return Ok(());
            }
            let e = match e {
                Ok(e) => e,
                Err(e) if e.io_error().is_some_and(gone) => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot remove '{}'", t.display()))
                }
            };
            let r = match e.file_type().is_dir() {
                true => std::fs::remove_dir(e.path()),
                false => std::fs::remove_file(e.path()),
            };
            match r {
                Err(err) if !gone(&err) => {
                    return Err(err)
                        .with_context(|| format!("cannot remove '{}'", e.path().display()))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Checks that each path is a trash directory this user owns (named `.pagevault-swept`,
/// a directory, not a link) before a process is started to remove it.
pub fn check_swept(trash: &[PathBuf]) -> Result<()> {
    for t in trash {
        let m = std::fs::symlink_metadata(t)
            .with_context(|| format!("cannot read '{}'", t.display()))?;
        let named = t.file_name().is_some_and(|n| n == TRASH);
        let euid = rustix::process::geteuid().as_raw();
        if !named || !m.is_dir() || m.uid() != euid {
            bail!(
                "'{}' is not a directory named {TRASH} of this user (uid {euid}): not removed",
                t.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_without_following_links_and_stops_when_asked() {
        let t = tempfile::tempdir().unwrap();
        let (root, outside) = (t.path().join("root"), t.path().join("outside"));
        let trash = root.join(TRASH);
        std::fs::create_dir_all(trash.join("1/deep")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        std::fs::write(trash.join("1/deep/f"), b"f").unwrap();
        std::fs::write(trash.join("2"), b"2").unwrap();
        std::os::unix::fs::symlink(&outside, trash.join("3")).unwrap();

        check_swept(std::slice::from_ref(&trash)).unwrap();
        assert!(check_swept(std::slice::from_ref(&outside)).is_err());
        std::os::unix::fs::symlink(&trash, t.path().join(TRASH)).unwrap();
        assert!(check_swept(&[t.path().join(TRASH)]).is_err(), "a link");

        let stopped = AtomicBool::new(true);
        remove_swept(std::slice::from_ref(&trash), &stopped).unwrap();
        assert!(trash.join("2").exists(), "stopped before the first file");

        remove_swept(std::slice::from_ref(&trash), &AtomicBool::new(false)).unwrap();
        assert!(!trash.exists());
        assert_eq!(std::fs::read(outside.join("keep")).unwrap(), b"x");
        // Gone already (another remover was first): no error.
        remove_swept(&[trash], &AtomicBool::new(false)).unwrap();
    }

    #[test]
    fn the_thread_hands_back_what_it_left() {
        let t = tempfile::tempdir().unwrap();
        let trash = t.path().join(TRASH);
        std::fs::create_dir_all(&trash).unwrap();
        let e = Emptying::start(vec![trash.clone()]);
        let left = e.stop().unwrap();
        // Either removed before the stop or handed back whole; never half reported.
        assert_eq!(left.is_empty(), !trash.exists());
    }
}
