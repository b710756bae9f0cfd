//! Work over a list on several threads.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

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

/// `f(i)` for every `i` in `0..n`, run as `each_index` runs it; the results in index
/// order.
pub fn map_index<T: Send + Sync>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let got: Vec<OnceLock<T>> = (0..n).map(|_| OnceLock::new()).collect();
    each_index(n, threads, |i| {
        let _ = got[i].set(f(i));
    });
    got.into_iter()
        .map(|v| v.into_inner().expect("every index is done"))
        .collect()
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

    #[test]
    fn results_come_back_in_index_order() {
        for (n, threads) in [(0, 4), (1, 4), (1000, 1), (1000, 16)] {
            let got = map_index(n, threads, |i| i * 3);
            assert_eq!(got, (0..n).map(|i| i * 3).collect::<Vec<_>>());
        }
    }
}
