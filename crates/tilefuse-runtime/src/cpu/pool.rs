//! The CPU device's worker threads: one rayon pool per process, made on
//! first use and kept, so a launch spawns no thread. `TILEFUSE_NUM_THREADS`
//! sets how many threads run a parallel loop (default: the machine's
//! available parallelism); the thread that launches takes part (`share`).

#![allow(unsafe_code)] // `share` lends its caller's closure to the workers

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;

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
        Err(_) => Ok(machine_parallelism()),
    }
}

/// The machine's available parallelism, read once per process: std reads
/// the cgroup's quota files on every call, which made each `Device.cpu()`
/// (and each `device="cpu"` argument) cost about 57 us.
pub fn machine_parallelism() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The pool of workers beside the launching thread, sized once, from the
/// first device's thread count.
fn workers(threads: usize) -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.saturating_sub(1).max(1))
            .thread_name(|i| format!("tilefuse-cpu-{i}"))
            .build()
            .unwrap_or_else(|e| panic!("the CPU device's thread pool: {e}"))
    })
}

/// Runs tasks `0..tasks` on the calling thread and up to `threads - 1` of
/// the pool's workers: `work` is called once on each thread that takes
/// part, with the tasks it claims one at a time. The caller claims from
/// the start, so it never sleeps waiting for a worker to wake (on a 2-vCPU
/// VM a pool job that the caller waits on costs two wake-ups: a 256 x 256
/// column sum took 7 us on one thread and 93 us on two); a worker that
/// wakes late finds its tasks taken and leaves. The caller then waits only
/// for the tasks workers claimed. A panic in `work` on any thread is
/// raised here once every claimed task has ended.
pub(crate) fn share<W: Fn(&mut Tasks<'_>) + Sync>(threads: usize, tasks: usize, work: &W) {
    let parts = threads.clamp(1, tasks.max(1));
    let board = Arc::new(Board::new(tasks, parts));
    let work: &(dyn Fn(&mut Tasks<'_>) + Sync) = work;
    // SAFETY: the lifetime is erased so that a pool job can hold `work`;
    // a job calls it only while holding a claimed task, and this function
    // returns only after every claimed task has ended (`Tasks::end`).
    let lent: Lent = Lent(unsafe { std::mem::transmute(work) });
    let pool = workers(threads);
    for part in 1..parts {
        let board = Arc::clone(&board);
        pool.spawn(move || {
            let lent = lent;
            if let Some(first) = board.claim(part) {
                // SAFETY: `first` is claimed and not yet ended (see above).
                drop(take_part(&board, part, first, unsafe { &*lent.0 }));
                board.caller.unpark();
            }
        });
    }
    let own = board
        .claim(0)
        .map(|first| take_part(&board, 0, first, work));
    let claimed = board.close();
    let (backoff, start) = (Backoff::new(), Instant::now());
    while board.done.load(Ordering::Acquire) < claimed {
        if !backoff.is_completed() {
            backoff.snooze();
        } else if start.elapsed() < SPIN_FOR {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(Duration::from_millis(1));
        }
    }
    if let Some(Err(payload)) = own {
        resume_unwind(payload);
    }
    assert!(
        !board.panicked.load(Ordering::Acquire),
        "a worker thread of the CPU device panicked"
    );
}

/// How long the caller waits for the workers' last tasks awake before it
/// sleeps: waking it costs as much as the wait at small sizes (a 128^3
/// matmul on two threads: 30 us a call awake, 50-100 us parked).
const SPIN_FOR: Duration = Duration::from_micros(500);

/// The tasks of one `share`, cut into one run per thread that takes part
/// (its *home*): a thread claims its home's tasks in order, then the other
/// homes' from their back. Each thread reads a contiguous run where all
/// wake in time (two threads that ended on adjacent column blocks made a
/// 4096^2 column sum 1.15x slower than two reading halves), and a late
/// thread's tasks go to the others.
struct Board {
    tasks: usize,
    /// Per home, the tasks not yet claimed: `front << 32 | back`.
    homes: Vec<AtomicU64>,
    /// Claimed tasks that have ended.
    done: AtomicUsize,
    panicked: AtomicBool,
    caller: Thread,
}

impl Board {
    fn new(tasks: usize, parts: usize) -> Board {
        assert!(u32::try_from(tasks).is_ok(), "at most u32::MAX tasks");
        Board {
            tasks,
            homes: (0..parts)
                .map(|p| {
                    let (front, back) = home(tasks, parts, p);
                    AtomicU64::new((front << 32) | back)
                })
                .collect(),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            caller: std::thread::current(),
        }
    }

    /// The next task for thread `part`: its home's front, else another
    /// home's back.
    fn claim(&self, part: usize) -> Option<usize> {
        let n = self.homes.len();
        (0..n).find_map(|i| self.claim_in((part + i) % n, i == 0))
    }

    fn claim_in(&self, home: usize, front_first: bool) -> Option<usize> {
        let cell = &self.homes[home];
        let mut ends = cell.load(Ordering::Acquire);
        loop {
            let (front, back) = unpack(ends);
            if front >= back {
                return None;
            }
            let (task, next) = if front_first {
                (front, ends + (1 << 32))
            } else {
                (back - 1, ends - 1)
            };
            match cell.compare_exchange_weak(ends, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(task as usize),
                Err(now) => ends = now,
            }
        }
    }

    /// Lets no more tasks be claimed; how many were.
    fn close(&self) -> usize {
        let unclaimed: u64 = (self.homes.iter())
            .map(|cell| {
                let (front, back) = unpack(cell.swap(0, Ordering::AcqRel));
                back - front
            })
            .sum();
        self.tasks - unclaimed as usize
    }
}

/// A home's `front << 32 | back` as `(front, back)`; claims keep
/// `front <= back`.
fn unpack(ends: u64) -> (u64, u64) {
    (ends >> 32, ends & u64::from(u32::MAX))
}

/// Thread `part`'s home among `parts`: tasks `front..back`.
fn home(tasks: usize, parts: usize, part: usize) -> (u64, u64) {
    let at = |p: usize| (tasks * p / parts) as u64;
    (at(part), at(part + 1))
}

/// `share`'s closure with its lifetime erased, sent to a pool job.
#[derive(Clone, Copy)]
struct Lent(*const (dyn Fn(&mut Tasks<'_>) + Sync + 'static));

// SAFETY: the closure is `Sync`; `share` keeps it alive while it is used.
unsafe impl Send for Lent {}

/// Runs `work` on this thread from its first claimed task, then ends the
/// task it holds.
fn take_part(
    board: &Board,
    part: usize,
    first: usize,
    work: &(dyn Fn(&mut Tasks<'_>) + Sync),
) -> std::thread::Result<()> {
    let mut tasks = Tasks {
        board,
        part,
        first: Some(first),
        held: false,
    };
    let result = catch_unwind(AssertUnwindSafe(|| work(&mut tasks)));
    // Before the caller sees the tasks end: it reads what they streamed.
    super::stream::fence();
    if result.is_err() {
        board.panicked.store(true, Ordering::Release);
    }
    tasks.end();
    result
}

/// The tasks one thread runs, claimed as it asks for them. A task ends
/// when the thread claims its next one, or after `work` returns: a thread
/// holds a task the whole time it runs `share`'s closure.
pub(crate) struct Tasks<'a> {
    board: &'a Board,
    part: usize,
    first: Option<usize>,
    held: bool,
}

impl Tasks<'_> {
    fn end(&mut self) {
        if std::mem::take(&mut self.held) {
            self.board.done.fetch_add(1, Ordering::Release);
        }
    }
}

impl Iterator for Tasks<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let task = (self.first.take()).or_else(|| self.board.claim(self.part))?;
        self.end();
        self.held = true;
        Some(task)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::share;

    /// Every task runs once, whichever threads claim it, and each thread
    /// that takes part is called once.
    #[test]
    fn every_task_runs_once() {
        for (threads, tasks) in [(1, 5), (2, 1), (2, 8), (4, 3), (3, 100)] {
            let runs: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            let parts = AtomicUsize::new(0);
            share(threads, tasks, &|claimed| {
                parts.fetch_add(1, Ordering::Relaxed);
                for t in claimed {
                    runs[t].fetch_add(1, Ordering::Relaxed);
                }
            });
            let counts: Vec<usize> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
            assert_eq!(counts, vec![1; tasks], "{threads} threads, {tasks} tasks");
            assert!((1..=threads).contains(&parts.load(Ordering::Relaxed)));
        }
    }

    /// A thread that stops claiming (an interrupt) leaves the rest
    /// unrun, and the call still returns.
    #[test]
    fn threads_may_stop_claiming() {
        let ran = Mutex::new(Vec::new());
        share(2, 50, &|claimed| {
            if let Some(t) = claimed.next() {
                ran.lock().unwrap().push(t);
            }
        });
        let ran = ran.into_inner().unwrap();
        assert!(!ran.is_empty() && ran.len() <= 2, "{ran:?}");
    }

    /// A panic on any thread reaches the caller after every claimed task
    /// has ended: on the caller's own, or on a worker's. Each side waits
    /// until the other has claimed a task (else one may take them all).
    #[test]
    fn a_panic_reaches_the_caller() {
        let caller = std::thread::current().id();
        for on_caller in [true, false] {
            let entered = [AtomicUsize::new(0), AtomicUsize::new(0)];
            let result = std::panic::catch_unwind(|| {
                share(2, 64, &|claimed| {
                    let here = std::thread::current().id() == caller;
                    entered[usize::from(here)].store(1, Ordering::Release);
                    while entered[usize::from(!here)].load(Ordering::Acquire) == 0 {
                        std::thread::yield_now();
                    }
                    for _ in claimed {
                        assert!(here != on_caller, "task failed");
                    }
                });
            });
            assert!(result.is_err(), "on the caller: {on_caller}");
        }
    }
}
