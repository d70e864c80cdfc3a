//! Where candidates are measured. The search hands out [`Candidate`]s
//! and learns from their [`Measured`] results; an [`Executor`] measures
//! them: [`LocalExecutor`] on a device of this process (building ahead
//! of the timing on a GPU), others (Ray workers, from Python) several at
//! once elsewhere.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;

use tilefuse_ir::Fusion;
use tilefuse_runtime::{Device, Kernel};

use crate::candidate::{Candidate, Finalist, Measured, Timing};
use crate::drift::Stopwatch;
use crate::measure::{self, Problem};
use crate::options::TuneError;
use crate::trial::Status;
use crate::verdict::RoundTimes;

/// Measures candidates for a search, possibly several at once.
pub trait Executor {
    /// How many candidates it measures at once (0 when it has no worker
    /// left).
    fn capacity(&self) -> usize;

    /// Starts measuring `candidate`.
    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError>;

    /// Waits for any submitted candidate's result: its id and what was found.
    fn next(&mut self) -> Result<(usize, Measured), TuneError>;

    /// The `finalists` (params) timed in `rounds` interleaved rounds on
    /// one device, `timing.repeat` launches a round: each one's median in
    /// each round.
    fn final_round(
        &mut self,
        finalists: &[Finalist],
        timing: Timing,
        rounds: usize,
    ) -> Result<RoundTimes, TuneError>;
}

/// Candidates a [`LocalExecutor`] that overlaps builds hands out at once:
/// builds run this far ahead of the timing. A constant, not the machine's
/// core count, so that a seed gives the same search on every machine.
const LOOKAHEAD: usize = 4;

/// Measures on a device of this process, timing one candidate at a time
/// in the order submitted. On a GPU the builds (schedule, lower, codegen,
/// pipeline) of the next candidates run on a pool of threads while one is
/// timed. A device that computes on the host's cores (the CPU device,
/// lavapipe) runs at the speed of a machine others share: builds would
/// disturb the timing, so each is built just before it is timed, and each
/// time is paired with a reference kernel's (see [`crate::drift`]).
pub struct LocalExecutor<'a> {
    fusion: &'a Fusion,
    device: &'a Device,
    stopwatch: Stopwatch,
    overlap: bool,
    queued: Vec<Candidate>,
    done: VecDeque<(usize, Measured)>,
    /// The best median it timed: candidates far slower are cut.
    best: Option<f64>,
}

impl<'a> LocalExecutor<'a> {
    pub fn new(fusion: &'a Fusion, device: &'a Device, problem: Problem) -> Self {
        LocalExecutor {
            fusion,
            device,
            stopwatch: Stopwatch::new(device, problem),
            overlap: !device.info().on_the_host(),
            queued: Vec::new(),
            done: VecDeque::new(),
            best: None,
        }
    }

    /// Overlaps builds with timing, or not, whatever the device (tests).
    pub fn overlapping(mut self, overlap: bool) -> Self {
        self.overlap = overlap;
        self
    }

    /// Builds the queued candidates (on a pool of threads when it
    /// overlaps builds) and times each as soon as it and those before it
    /// are built.
    fn measure_queued(&mut self) {
        let batch = std::mem::take(&mut self.queued);
        if !self.overlap {
            for c in batch {
                let built = measure::build_timed(self.fusion, self.device, &c.params);
                self.time(built, c);
            }
            return;
        }
        let (fusion, device) = (self.fusion, self.device);
        let next = AtomicUsize::new(0);
        let (tx, rx) = mpsc::channel();
        let builders = thread::available_parallelism().map_or(1, |n| n.get().min(batch.len()));
        thread::scope(|s| {
            for _ in 0..builders {
                let (tx, next, batch) = (tx.clone(), &next, &batch);
                s.spawn(move || {
                    while let Some(c) = batch.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let built = measure::build_timed(fusion, device, &c.params);
                        if tx.send((c.id, built)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut built = HashMap::new();
            for c in &batch {
                while !built.contains_key(&c.id) {
                    let (id, kernel) = rx.recv().expect("every candidate is built");
                    built.insert(id, kernel);
                }
                let kernel = built.remove(&c.id).expect("built just above");
                self.time(kernel, c.clone());
            }
        });
    }

    /// Checks and times `c` (`built`: its kernel and the seconds that
    /// took), cut against the best this executor timed (newer than the
    /// one the search knew when it handed `c` out).
    fn time(&mut self, built: (Result<Kernel, String>, f64), mut c: Candidate) {
        c.best = faster(c.best, self.best);
        let m = self.stopwatch.measure(built, &c);
        if m.status == Status::Ok {
            self.best = faster(self.best, m.time);
        }
        self.done.push_back((c.id, m));
    }
}

fn faster(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

impl Executor for LocalExecutor<'_> {
    fn capacity(&self) -> usize {
        if self.overlap { LOOKAHEAD } else { 1 }
    }

    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError> {
        self.queued.push(candidate);
        Ok(())
    }

    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        if self.done.is_empty() {
            self.measure_queued();
        }
        Ok(self.done.pop_front().expect("a submitted candidate"))
    }

    fn final_round(
        &mut self,
        finalists: &[Finalist],
        timing: Timing,
        rounds: usize,
    ) -> Result<RoundTimes, TuneError> {
        let params: Vec<_> = finalists.iter().map(|f| f.params.clone()).collect();
        measure::final_round(
            self.fusion,
            self.device,
            self.stopwatch.problem(),
            &params,
            timing,
            rounds,
        )
        .map_err(TuneError::from_runtime)
    }
}
