//! Strategy replay (Kernel Tuner's simulation mode): a space's timings
//! recorded once by an exhaustive run, then any strategy run against the
//! recording instead of a device, so that search logic is compared and
//! tested deterministically, in milliseconds, with no device.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;

use serde::{Deserialize, Serialize};
use tilefuse_ir::Fusion;
use tilefuse_runtime::Device;

use crate::candidate::Timing;
use crate::candidate::{Candidate, Finalist, Measured};
use crate::executor::Executor;
use crate::measure::{self, median};
use crate::options::{Observer, Options, TuneError};
use crate::search::{self, tune};
use crate::space::Observation;
use crate::space::{Grid, Point};
use crate::strategy::{Points, Strategy};
use crate::verdict::RoundTimes;

/// The fastest kernels of a recording [`Recording::confirm`] re-times.
pub const CONFIRMED: usize = 8;

/// Interleaved rounds of a confirmation, and launches a round at least.
/// Among a few hundred kernels that run alike, the fastest of their
/// re-timings is still a lucky one: with three launches a round and five
/// rounds, a chain's 288 equal kernels kept a best 10-20 % ahead of the
/// base (`benches/record_spaces.py`, case chain).
const CONFIRM_ROUNDS: usize = 7;
const CONFIRM_REPEAT: usize = 10;

/// Confirmations at most: on a flat landscape each can bring as many new
/// kernels into the fastest as it re-timed.
const CONFIRM_LOOKS: usize = 8;

/// Every point of a space with its time (`None`: it failed).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Recording {
    /// What was recorded, for people reading the file.
    pub description: String,
    /// The tuned fields' paths and their number of values.
    pub fields: Vec<String>,
    pub sizes: Vec<usize>,
    /// The default heuristic's point, where every search starts.
    pub base: Point,
    pub times: Vec<(Point, Option<f64>)>,
}

impl Recording {
    /// Records every point of the space of `fusion` on `device` (over
    /// `options.fields` when given): an exhaustive tuning run.
    /// `observe` sees each trial as a tuning run's observer does (and
    /// stops the recording by returning `false`).
    pub fn record(
        fusion: &Fusion,
        device: &Device,
        options: &Options,
        description: &str,
        observe: &mut Observer,
    ) -> Result<Recording, TuneError> {
        let options = Options {
            strategy: Some(Strategy::Exhaustive),
            trials: Some(usize::MAX),
            seconds: Some(f64::INFINITY),
            ..options.clone()
        };
        let r = tune(fusion, device, &options, &[], observe)?;
        let times = (r.trials.iter())
            .map(|t| (t.point.clone(), t.status.observed(t.time)))
            .collect::<Vec<_>>();
        Ok(Recording {
            description: description.to_owned(),
            fields: r.fields,
            sizes: r.sizes,
            base: times[0].0.clone(),
            times,
        })
    }

    /// One recording from several passes over the same space: each
    /// point's median time, failed where most passes failed. A pass times
    /// its points one after another, so a machine that slows down for a
    /// while (a shared VM, a GPU's clocks) slows a run of neighbouring
    /// points together; passes at different times outvote it. Each pass
    /// is first scaled to the median of the passes' base times: a pass's
    /// times are paired with its base's (`drift`), so a pass whose base ran
    /// in a slow spell is slow throughout, and its points' medians would
    /// mix the passes' speeds.
    pub fn median_of(passes: &[Recording]) -> Recording {
        let first = &passes[0];
        let base_time = |r: &Recording| r.time_of(&r.base);
        let mut bases: Vec<f64> = passes.iter().filter_map(base_time).collect();
        let typical = (!bases.is_empty()).then(|| median(&mut bases));
        let scales: Vec<f64> = (passes.iter())
            .map(|r| typical.zip(base_time(r)).map_or(1.0, |(t, b)| t / b))
            .collect();
        let times = (first.times.iter())
            .map(|(point, _)| {
                let mut ran: Vec<f64> = (passes.iter().zip(&scales))
                    .filter_map(|(r, scale)| Some(r.time_of(point)? * scale))
                    .collect();
                ran.sort_by(f64::total_cmp);
                let median = (2 * ran.len() > passes.len()).then(|| ran[ran.len() / 2]);
                (point.clone(), median)
            })
            .collect();
        Recording {
            times,
            ..first.clone()
        }
    }

    /// Re-times the fastest kernels of the recording against its base, in
    /// interleaved rounds (as the tuner's final run does), until the
    /// [`CONFIRMED`] fastest were all re-timed: each keeps the base's
    /// recorded time times its median ratio to the base over the rounds
    /// (at most [`CONFIRM_LOOKS`] times over).
    /// A pass times a point once, so one point in a few hundred can catch
    /// a fast moment the base's pairing missed, 20 % and more faster than
    /// its kernel runs (Helion confirms suspiciously fast timings too);
    /// the best of a recording must not be such a moment.
    pub fn confirm(
        &mut self,
        fusion: &Fusion,
        device: &Device,
        options: &Options,
    ) -> Result<(), TuneError> {
        let info = device.info();
        let (_, space) = search::space(fusion, &info, options)?;
        let problem = options.problem(fusion)?;
        let Some(base_time) = self.time_of(&self.base) else {
            return Ok(());
        };
        let timing = Timing {
            repeat: options.repeat.max(CONFIRM_REPEAT),
            ..options.timing()
        };
        let mut confirmed = HashSet::from([base_time.to_bits()]);
        for _ in 0..CONFIRM_LOOKS {
            let fastest = self.fastest_kernels(CONFIRMED);
            let fresh: Vec<(Point, f64)> = (fastest.into_iter())
                .filter(|(_, t)| !confirmed.contains(&t.to_bits()))
                .collect();
            if fresh.is_empty() {
                break;
            }
            // Each point as the tuner measured it: repaired.
            let schedule = |p: &_| tilefuse_schedulers::schedule(fusion, p, &info);
            let params = std::iter::once(&self.base)
                .chain(fresh.iter().map(|(p, _)| p))
                .map(|p| space.repair(p, schedule).map(|(p, _)| p.to_value()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|(_, e)| TuneError::Failed(e.to_string()))?;
            let rounds =
                measure::final_round(fusion, device, &problem, &params, timing, CONFIRM_ROUNDS)
                    .map_err(TuneError::from_runtime)?;
            for ((_, old), times) in fresh.iter().zip(&rounds[1..]) {
                let mut ratios: Vec<f64> =
                    times.iter().zip(&rounds[0]).map(|(t, b)| t / b).collect();
                let now = base_time * median(&mut ratios);
                confirmed.insert(now.to_bits());
                self.retime(*old, now);
            }
        }
        Ok(())
    }

    /// The first point of each of the `n` fastest kernels (distinct
    /// times), fastest first.
    fn fastest_kernels(&self, n: usize) -> Vec<(Point, f64)> {
        let mut ran: Vec<(Point, f64)> = (self.times.iter())
            .filter_map(|(p, t)| Some((p.clone(), (*t)?)))
            .collect();
        ran.sort_by(|a, b| a.1.total_cmp(&b.1));
        ran.dedup_by(|a, b| a.1 == b.1);
        ran.truncate(n);
        ran
    }

    /// Every point timed `old` (one kernel) timed `now` instead.
    fn retime(&mut self, old: f64, now: f64) {
        (self.times.iter_mut())
            .filter(|(_, t)| *t == Some(old))
            .for_each(|(_, t)| *t = Some(now));
    }

    /// The time `point` ran in, if it ran.
    fn time_of(&self, point: &Point) -> Option<f64> {
        self.times.iter().find(|(p, _)| p == point)?.1
    }

    /// The fastest recorded time.
    pub fn best(&self) -> f64 {
        (self.times.iter())
            .filter_map(|(_, t)| *t)
            .fold(f64::INFINITY, f64::min)
    }

    pub fn size(&self) -> usize {
        self.times.len()
    }

    /// What measuring `point` found when it was recorded.
    pub fn measured(&self, point: &Point) -> Measured {
        let found = self.times.iter().find(|(p, _)| p == point);
        match found {
            Some((_, Some(t))) => Measured::ran(*t),
            Some((_, None)) => Measured::failed("it failed when recorded".into()),
            None => Measured::failed(format!("{point:?} is not in the recording")),
        }
    }

    /// The observations `strategy` makes with `budget` trials (the base
    /// first; see [`trials`]), reading times from the recording.
    pub fn replay(&self, strategy: Strategy, budget: usize, seed: u64) -> Vec<Observation> {
        self.replay_until(strategy, budget, seed, |_| false)
    }

    /// [`Recording::replay`], ending early after the first observation
    /// `done` accepts.
    pub fn replay_until(
        &self,
        strategy: Strategy,
        budget: usize,
        seed: u64,
        mut done: impl FnMut(&Observation) -> bool,
    ) -> Vec<Observation> {
        let table: HashMap<&Point, Option<f64>> = self.times.iter().map(|(p, t)| (p, *t)).collect();
        let grid = Grid {
            sizes: self.sizes.clone(),
        };
        let observe = |point: Point| Observation {
            time: table.get(&point).copied().flatten(),
            point,
        };
        let mut history = vec![observe(self.base.clone())];
        let mut kernels = Kernels::default();
        let mut spent = usize::from(kernels.counts(&history[0]));
        let mut points = Points::new(&grid, &self.base, strategy, seed);
        while spent < budget && !done(&history[history.len() - 1]) {
            let Some((p, _)) = points.next(&grid, &history) else {
                break;
            };
            let o = observe(p);
            spent += usize::from(kernels.counts(&o));
            history.push(o);
        }
        history
    }
}

/// The kernels a replay has measured. The recorder gives a point whose
/// kernel an earlier point already had (a duplicate, not measured again)
/// its original's time, so equal times mark one kernel.
#[derive(Default)]
struct Kernels(HashSet<u64>);

impl Kernels {
    /// Whether observing `o` costs a trial: a failure does (a refused point
    /// counts in a tuning run), a kernel only the first time.
    fn counts(&mut self, o: &Observation) -> bool {
        o.time.is_none_or(|t| self.0.insert(t.to_bits()))
    }
}

/// The trials `history` costs a tuning run, which counts each kernel once
/// against its budget (duplicates are neither measured nor counted).
pub fn trials(history: &[Observation]) -> usize {
    let mut kernels = Kernels::default();
    history.iter().filter(|o| kernels.counts(o)).count()
}

/// The best time among `history` (infinite when none ran).
pub fn best_of(history: &[Observation]) -> f64 {
    (history.iter())
        .filter_map(|o| o.time)
        .fold(f64::INFINITY, f64::min)
}

/// Trials `strategy` takes (with `seed`) to find a point within
/// `tolerance` of the recording's best; `None` when `budget` trials do not.
pub fn trials_to_within(
    recording: &Recording,
    strategy: Strategy,
    tolerance: f64,
    seed: u64,
    budget: usize,
) -> Option<usize> {
    let target = recording.best() * (1.0 + tolerance);
    let near = |o: &Observation| o.time.is_some_and(|t| t <= target);
    let history = recording.replay_until(strategy, budget, seed, near);
    history.last().filter(|o| near(o)).map(|_| trials(&history))
}

/// Trials `strategy` takes to get within `tolerance` of the recording's
/// best with each of `seeds` (the whole space for a seed that never
/// does), fewest first: how strategies compare offline (Kernel Tuner's
/// simulation mode).
pub fn trials_over_seeds(
    recording: &Recording,
    strategy: Strategy,
    tolerance: f64,
    seeds: Range<u64>,
) -> Vec<usize> {
    let all = recording.size();
    let mut runs: Vec<usize> = seeds
        .map(|seed| trials_to_within(recording, strategy, tolerance, seed, all).unwrap_or(all))
        .collect();
    runs.sort_unstable();
    runs
}

/// An executor that reads candidates' times from a recording instead of
/// measuring them: `width` of them "in flight" at once, told back last
/// first, as parallel workers finishing out of order would.
pub struct ReplayExecutor<'r> {
    recording: &'r Recording,
    width: usize,
    queue: VecDeque<Candidate>,
}

impl<'r> ReplayExecutor<'r> {
    pub fn new(recording: &'r Recording, width: usize) -> Self {
        ReplayExecutor {
            recording,
            width,
            queue: VecDeque::new(),
        }
    }
}

impl Executor for ReplayExecutor<'_> {
    fn capacity(&self) -> usize {
        self.width
    }

    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError> {
        self.queue.push_back(candidate);
        Ok(())
    }

    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        let c = self.queue.pop_back().expect("a submitted candidate");
        Ok((c.id, self.recording.measured(&c.point)))
    }

    /// One round of the recorded times, however many were asked for.
    fn final_round(
        &mut self,
        finalists: &[Finalist],
        _: Timing,
        _: usize,
    ) -> Result<RoundTimes, TuneError> {
        (finalists.iter())
            .map(|f| {
                let m = self.recording.measured(&f.point);
                (m.time.map(|t| vec![t]))
                    .ok_or_else(|| TuneError::Failed(m.error.unwrap_or_default()))
            })
            .collect()
    }
}
