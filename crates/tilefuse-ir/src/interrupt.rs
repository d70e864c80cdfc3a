//! Cooperative interruption of long native work. An embedder installs a
//! hook (the Python bindings: "did the user press Ctrl-C?"); long loops —
//! the reference evaluator, the CPU executor, benchmark loops — ask
//! [`requested`] between units of work and stop with their crate's
//! `Interrupted` error.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static HOOK: OnceLock<fn() -> bool> = OnceLock::new();

/// How often a thread asks the hook: often enough to answer within half a
/// second, rarely enough that asking costs nothing measurable.
const EVERY: Duration = Duration::from_millis(50);

/// Installs the hook once per process (later calls are ignored). It must be
/// callable from any thread and return true when work should stop.
pub fn set_hook(hook: fn() -> bool) {
    let _ = HOOK.set(hook);
}

thread_local!(static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) });

/// Runs `work` on this thread with a time limit: once `limit` has passed,
/// [`requested`] answers true here as for Ctrl-C (work that other threads
/// do for this one stops with it: the CPU executor's callers watch for
/// them). Also returns whether the limit passed.
pub fn within<T>(limit: Duration, work: impl FnOnce() -> T) -> (T, bool) {
    /// Puts the enclosing limit back, also when `work` panics.
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
        }
    }
    let deadline = Instant::now() + limit;
    let _outer = Restore(DEADLINE.replace(Some(deadline)));
    let out = work();
    (out, Instant::now() >= deadline)
}

/// Whether the work in progress should stop: an interrupt, or this
/// thread's time limit ([`within`]) passed. Cheap: the hook runs at most
/// every [`EVERY`] per thread, and not on a thread's first call, so short
/// work never pays for it.
pub fn requested() -> bool {
    let (deadline, hook) = (DEADLINE.get(), HOOK.get());
    if deadline.is_none() && hook.is_none() {
        return false;
    }
    let now = Instant::now();
    if deadline.is_some_and(|d| now >= d) {
        return true;
    }
    let Some(hook) = hook else {
        return false;
    };
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    LAST.with(|last| match last.get() {
        Some(t) if now.duration_since(t) < EVERY => false,
        Some(_) => {
            last.set(Some(now));
            hook()
        }
        None => {
            last.set(Some(now));
            false
        }
    })
}
