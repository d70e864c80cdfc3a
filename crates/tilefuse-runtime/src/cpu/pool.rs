//! The CPU device's worker threads: one rayon pool per process, made on
//! first use and kept, so a launch spawns no thread. `TILEFUSE_NUM_THREADS`
//! sets how many threads run a parallel loop (default: the machine's
//! available parallelism); the thread that launches runs one share itself.

use std::sync::OnceLock;

use crate::error::{Result, RuntimeError};

/// Threads a parallel loop runs on: `TILEFUSE_NUM_THREADS` when set, else
/// the machine's available parallelism. A value that is not a positive
/// integer is a `Config` error.
pub fn threads_from_env() -> Result<usize> {
    match std::env::var("TILEFUSE_NUM_THREADS") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                RuntimeError::Config(format!(
                    "TILEFUSE_NUM_THREADS={v:?}: expected a positive integer"
                ))
            }),
        Err(_) => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// The pool of workers beside the launching thread, sized once, from the
/// first device's thread count.
pub fn workers(threads: usize) -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.saturating_sub(1).max(1))
            .thread_name(|i| format!("tilefuse-cpu-{i}"))
            .build()
            .unwrap_or_else(|e| panic!("the CPU device's thread pool: {e}"))
    })
}
