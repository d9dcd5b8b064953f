//! Fixed thread counts: each measurement runs inside a rayon pool of exactly `threads` threads.
//!
//! The closure runs *on* a pool worker (`install`), so with one thread every parallel op of the
//! backend executes inline on that worker: no hand-off to another thread per op, whose wake-up
//! latency would otherwise add tens to hundreds of microseconds of noise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn pools() -> &'static Mutex<HashMap<usize, Arc<rayon::ThreadPool>>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    POOLS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `f` on a pool of `threads` threads (pools are built once per count and reused).
pub fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    let threads = threads.max(1);
    let pool = {
        let mut map = pools().lock().unwrap_or_else(|e| e.into_inner());
        map.entry(threads)
            .or_insert_with(|| {
                Arc::new(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .thread_name(move |i| format!("perfcast-{threads}t-{i}"))
                        .build()
                        .unwrap_or_else(|e| panic!("cannot start {threads} threads: {e}")),
                )
            })
            .clone()
    };
    pool.install(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_has_the_requested_threads() {
        assert_eq!(with_threads(1, rayon::current_num_threads), 1);
        assert_eq!(with_threads(3, rayon::current_num_threads), 3);
    }
}
