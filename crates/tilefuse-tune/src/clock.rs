//! A tuning run's ending (the candidates kept for it, the final run's
//! size) and its time budget. `seconds` bounds the whole run, not its
//! search alone: the search stops handing out candidates when one more
//! (at the mean trial so far) and the ending after it (the second look
//! and the final run, estimated from the candidates kept) would pass it.
//! A quick tune on lavapipe spent its 30 s searching and 8 s more on the
//! ending (`benches/tune.py --device gpu --efforts quick`).

use std::time::Instant;

use crate::candidate::{Measured, Timing};
use crate::measure::launches_for;

/// Candidates kept at the end, for a second look whose fastest
/// [`FINALISTS`] go to the final run. A slow spell of lavapipe on a
/// shared VM can double a trial's time, dropping a 1.7x winner below a
/// dozen others (`benches/selection.py --device gpu`). The search keeps
/// them; the ending re-times them.
pub(crate) const KEPT: usize = 12;

/// Rounds of the second look.
pub(crate) const LOOK_ROUNDS: usize = 2;

/// The candidates re-measured in the final run (with the default's).
pub(crate) const FINALISTS: usize = 4;

/// Rounds of the final run, and of the confirmation of a winner other
/// than the default (it and the default alone; see `verdict`), at least.
const MIN_ROUNDS: usize = 5;

/// Rounds of either at most.
const MAX_ROUNDS: usize = 20;

/// Seconds a final run or a confirmation may take for rounds past
/// [`MIN_ROUNDS`]: a short kernel's rounds are cheap, and more of them
/// let the sign test of `verdict` see a gain through noise.
const ROUNDS_SECONDS: f64 = 0.25;

/// Rounds of a final run or a confirmation of kernels of these `times`
/// (seconds a launch): as many as take [`ROUNDS_SECONDS`], within
/// [`MIN_ROUNDS`] and [`MAX_ROUNDS`].
pub(crate) fn rounds(times: &[f64], t: Timing) -> usize {
    let round: f64 = times
        .iter()
        .map(|&time| time * launches_for(time, t.repeat) as f64)
        .sum();
    ((ROUNDS_SECONDS / round) as usize).clamp(MIN_ROUNDS, MAX_ROUNDS)
}

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
    /// take after one more candidate, each building its kernels (at the
    /// mean build so far) and launching them (at their measured times):
    /// of the `kept` candidates, and the next one while fewer than all
    /// are kept (at the slowest one's time), the second look times all
    /// but the first (the default's), the final run the first five and
    /// the confirmation the first two.
    fn ending(&self, kept: &[f64], t: Timing) -> f64 {
        let build = self.builds.iter().sum::<f64>() / self.builds.len().max(1) as f64;
        let mut times = kept.to_vec();
        if times.len() <= KEPT
            && let Some(slowest) = times.iter().copied().max_by(f64::total_cmp)
        {
            times.push(slowest);
        }
        let run = |kernels: &[f64], rounds: usize| -> f64 {
            let launches = |time| (t.warmup.max(1) + rounds * launches_for(time, t.repeat)) as f64;
            (kernels.iter())
                .map(|&time| build + ENDING_PACE * launches(time) * time)
                .sum()
        };
        let finalists = &times[..times.len().min(FINALISTS + 1)];
        let pair = &times[..times.len().min(2)];
        run(times.get(1..).unwrap_or_default(), LOOK_ROUNDS)
            + run(finalists, rounds(finalists, t))
            + run(pair, rounds(pair, t))
    }
}
