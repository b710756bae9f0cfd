//! Work over a list on several threads.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Calls `f(i)` for every `i` in `0..n` on up to `threads` threads (the caller's among
/// them), each taking the next index not yet taken. A thread that cannot be started
/// leaves its share to the others.
pub fn each_index(n: usize, threads: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    let work = || loop {
        let i = next.fetch_add(1, Relaxed);
        if i >= n {
            return;
        }
        f(i);
    };
    std::thread::scope(|s| {
        for _ in 1..threads.clamp(1, n.max(1)) {
            let _ = std::thread::Builder::new().spawn_scoped(s, work);
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn every_index_is_done_once() {
        for (n, threads) in [(0, 4), (1, 4), (1000, 1), (1000, 16)] {
            let seen = Mutex::new(vec![0u32; n]);
            each_index(n, threads, |i| seen.lock().unwrap()[i] += 1);
            assert!(seen.into_inner().unwrap().iter().all(|&c| c == 1));
        }
    }
}
