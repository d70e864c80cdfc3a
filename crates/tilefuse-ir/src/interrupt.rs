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

/// Whether the work in progress should stop. Cheap: the hook runs at most
/// every [`EVERY`] per thread, and not on a thread's first call, so short
/// work never pays for it.
pub fn requested() -> bool {
    let Some(hook) = HOOK.get() else {
        return false;
    };
    thread_local!(static LAST: Cell<Option<Instant>> = const { Cell::new(None) });
    let now = Instant::now();
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
