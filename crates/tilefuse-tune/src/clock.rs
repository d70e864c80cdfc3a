//! A tuning run's ending (the candidates kept for it, the final run's
//! size) and its time budget. `seconds` bounds the whole run, not its
//! search alone: the search stops handing out candidates when one more
//! (at the mean trial so far) and the ending after it (the second look
//! and the final run, estimated from the candidates kept) would pass it.
//! A quick tune on lavapipe spent its 30 s searching and 8 s more on the
//! ending (sixtieth session, BENCHMARKS.md).

use std::time::Instant;

use crate::candidate::{Measured, Timing};

/// Candidates kept at the end: the fastest [`FINALISTS`] go to the final
/// run, the others get a second look first. A slow spell of lavapipe on a
/// shared VM can double a trial's time, dropping a 1.7x winner below a
/// dozen others (thirty-seventh session, BENCHMARKS.md). The search keeps
/// them; the ending re-times them.
pub(crate) const KEPT: usize = 12;

/// The candidates re-measured in the final run (with the default's).
pub(crate) const FINALISTS: usize = 4;

/// Rounds of the final run.
pub(crate) const FINAL_ROUNDS: usize = 5;

/// Rounds of the confirmation of a winner other than the default (it and
/// the default alone; see `verdict`).
pub(crate) const CONFIRM_ROUNDS: usize = 5;

/// How much longer the ending's launches take than the kept candidates'
/// times say: those are each one's faster timing (paired, on the CPU
/// and lavapipe, to the default's first), and each timing has fixed
/// costs (copies, a readback) besides. A quick tune of the 1024² layer
/// norm on lavapipe spent 8.3 s on the ending its kept times put at 6.7 s.
const ENDING_PACE: f64 = 1.25;

/// What a run has spent of its time budget, and what its trials took.
pub(crate) struct Clock {
    start: Instant,
    seconds: f64,
    /// Candidates measured (told), and how long those whose executor
    /// said took to build.
    told: usize,
    builds: Vec<f64>,
}

impl Clock {
    /// A clock started now for a run of `seconds`.
    pub(crate) fn new(seconds: f64) -> Clock {
        Clock {
            start: Instant::now(),
            seconds,
            told: 0,
            builds: Vec::new(),
        }
    }

    /// Seconds since the run started.
    pub(crate) fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Learns what a candidate's measurement took.
    pub(crate) fn told(&mut self, measured: &Measured) {
        self.told += 1;
        self.builds.extend(measured.build);
    }

    /// Whether one more candidate, then the ending with the `kept`
    /// candidates' times (the default's first, then by time), would end
    /// past the budget.
    pub(crate) fn out_of_time(&self, kept: &[f64], timing: Timing) -> bool {
        let elapsed = self.elapsed();
        let next = elapsed / self.told.max(1) as f64;
        elapsed + next + self.ending(kept, timing) >= self.seconds
    }

    /// Seconds the second look, the final run and a confirmation would
    /// take after one more candidate: the builds (at the mean build so
    /// far) and launches (at their measured times) of the `kept`
    /// candidates, and of the next one while fewer than all are kept (at
    /// the slowest one's time), then the confirmation's pair (the
    /// default's and the fastest other's, built and launched again).
    fn ending(&self, kept: &[f64], t: Timing) -> f64 {
        let build = self.builds.iter().sum::<f64>() / self.builds.len().max(1) as f64;
        let mut times = kept.to_vec();
        if times.len() <= KEPT
            && let Some(slowest) = times.iter().copied().max_by(f64::total_cmp)
        {
            times.push(slowest);
        }
        let rounds = |n: usize| t.warmup.max(1) + n * t.repeat;
        let launches = |i: usize| match i {
            0..=FINALISTS => rounds(FINAL_ROUNDS),
            _ => t.repeat,
        };
        let cost = |launches: usize, time: f64| build + ENDING_PACE * launches as f64 * time;
        let ending: f64 = (times.iter().enumerate())
            .map(|(i, &time)| cost(launches(i), time))
            .sum();
        let confirmation: f64 = (times.iter().take(2))
            .map(|&time| cost(rounds(CONFIRM_ROUNDS), time))
            .sum();
        ending + confirmation
    }
}
