//! The tuning loop: candidates from a strategy over the space, each
//! scheduled, built, checked against the reference and timed; one that
//! fails anywhere is recorded with its error and skipped. The default
//! heuristic's params always enter first; at the end the best few (the
//! default among them) are re-measured interleaved and the winner is the
//! best of that paired run, so a tuned result is never slower than the
//! default on the measurement that picked it.

use std::collections::HashSet;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, SchedulerKind};
use tilefuse_runtime::{Device, Kernel};
use tilefuse_sched::Schedule;
use tilefuse_sched::schedulers::{heuristics, pick, schedule, tunables};

use crate::measure::{CUT_RATIO, Problem};

/// How a runtime error reads when Ctrl-C interrupted the work.
const INTERRUPTED: &str = "interrupted";
use crate::space::{Point, Space};

/// How the next candidates are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly random points.
    Random,
    /// Neighbour descent from the best point, random restarts when every
    /// neighbour was tried.
    Pattern,
    /// Every point, in order (small spaces).
    Exhaustive,
}

/// How much tuning to do when no budget is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    /// The default heuristic (or the cache) only.
    None,
    Quick,
    Full,
}

impl Effort {
    fn trials(self) -> usize {
        match self {
            Effort::None => 0,
            Effort::Quick => 24,
            Effort::Full => 160,
        }
    }

    fn seconds(self) -> f64 {
        match self {
            Effort::None => 0.0,
            Effort::Quick => 30.0,
            Effort::Full => 600.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub effort: Effort,
    /// `None`: exhaustive when the space fits the trial budget, else pattern.
    pub strategy: Option<Strategy>,
    pub trials: Option<usize>,
    pub seconds: Option<f64>,
    /// Fixes the inputs and the strategy's choices: a run is reproducible.
    pub seed: u64,
    pub warmup: usize,
    pub repeat: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            effort: Effort::Quick,
            strategy: None,
            trials: None,
            seconds: None,
            seed: 0,
            warmup: 2,
            repeat: 10,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked and timed.
    Ok,
    /// Refused by the scheduler, or failed to build or run.
    Failed,
    /// Ran, but its outputs differ from the reference: disqualified.
    Wrong,
    /// The same kernel as an earlier candidate: not measured again.
    Duplicate,
    /// Much slower than the best in a short timing: not measured in full.
    Cut,
}

/// One candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub params: serde_json::Value,
    /// `"default"`, `"random"`, `"neighbor"` or `"exhaustive"`.
    pub origin: &'static str,
    pub status: Status,
    /// Median seconds (short timing for cut candidates).
    pub time: Option<f64>,
    pub error: Option<String>,
    /// Seconds since tuning started.
    pub at: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TuneResult {
    pub scheduler: SchedulerKind,
    pub strategy: Strategy,
    pub best_params: serde_json::Value,
    /// Median seconds of the winner in the final interleaved run.
    pub best_time: f64,
    pub default_params: serde_json::Value,
    /// The default heuristic's median in the same run (`None` if it failed).
    pub default_time: Option<f64>,
    pub trials: Vec<Trial>,
    pub elapsed: f64,
}

/// A measured candidate kept for the final run.
struct Finalist {
    params: HeuristicParams,
    kernel: Kernel,
    time: f64,
}

/// Finalists re-measured at the end.
const FINALISTS: usize = 4;

/// Why tuning ended without a result.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The observer asked to stop, or Ctrl-C interrupted a measurement.
    #[error("tuning was stopped")]
    Stopped,
    #[error("{0}")]
    Failed(String),
}

/// Tunes `fusion` (one scheduler must take it whole) on `device`;
/// `observe` sees each trial and the best time so far, and stops tuning by
/// returning false.
pub fn tune(
    fusion: &Fusion,
    device: &Device,
    options: &Options,
    observe: &mut dyn FnMut(&Trial, Option<f64>) -> bool,
) -> Result<TuneResult, TuneError> {
    let failed = |e: String| TuneError::Failed(e);
    let info = device.info();
    let kind = pick(fusion).map_err(failed)?;
    let base = heuristics(fusion, Some(kind), &info).map_err(|e| failed(e.to_string()))?;
    let (_, fields) = tunables(fusion, Some(kind), &info).map_err(|e| failed(e.to_string()))?;
    let space = Space::new(base.clone(), fields);
    let budget = options.trials.unwrap_or(options.effort.trials());
    let strategy = options
        .strategy
        .unwrap_or(if space.size() <= budget as u64 {
            Strategy::Exhaustive
        } else {
            Strategy::Pattern
        });
    let mut run = Run {
        fusion,
        device,
        options,
        problem: Problem::new(fusion, options.seed).map_err(failed)?,
        start: Instant::now(),
        stopped: false,
        seen: HashSet::new(),
        trials: Vec::new(),
        finalists: Vec::new(),
        observe,
    };
    let default_ok = run.try_params(base.clone(), "default");
    if run.stopped {
        return Err(TuneError::Stopped);
    }
    let mut points = Points::new(&space, strategy, options.seed);
    let seconds = options.seconds.unwrap_or(options.effort.seconds());
    let mut measured = 0;
    while measured < budget && run.start.elapsed().as_secs_f64() < seconds {
        let best = run.best_point(&space);
        let Some((point, origin)) = points.next(&space, best.as_ref()) else {
            break;
        };
        if run.try_point(&space, point, origin) != Status::Duplicate {
            measured += 1;
        }
        if run.stopped {
            return Err(TuneError::Stopped);
        }
    }
    run.finish(kind, strategy, &base, default_ok)
}

struct Run<'a> {
    fusion: &'a Fusion,
    device: &'a Device,
    options: &'a Options,
    problem: Problem,
    start: Instant,
    /// The observer asked to stop, or a measurement was interrupted.
    stopped: bool,
    /// Scheduled kernels already measured (their printed IR).
    seen: HashSet<String>,
    trials: Vec<Trial>,
    finalists: Vec<Finalist>,
    observe: &'a mut dyn FnMut(&Trial, Option<f64>) -> bool,
}

impl Run<'_> {
    fn best_time(&self) -> Option<f64> {
        self.finalists.iter().map(|f| f.time).min_by(f64::total_cmp)
    }

    fn best_point(&self, space: &Space) -> Option<Point> {
        let best = self
            .finalists
            .iter()
            .min_by(|a, b| a.time.total_cmp(&b.time))?;
        Some(space.point_of(&best.params))
    }

    fn record(
        &mut self,
        params: serde_json::Value,
        origin: &'static str,
        status: Status,
        time: Option<f64>,
        error: Option<String>,
    ) {
        let trial = Trial {
            params,
            origin,
            status,
            time,
            error,
            at: self.start.elapsed().as_secs_f64(),
        };
        let best = self.best_time();
        let interrupted = trial.error.as_deref() == Some(INTERRUPTED);
        self.stopped |= interrupted || !(self.observe)(&trial, best);
        self.trials.push(trial);
    }

    /// Tries the params of `point`, repaired first: a field the scheduler
    /// refuses (by its error's path) goes back to the base's value, until
    /// the params schedule or the refused field is at its base value.
    fn try_point(&mut self, space: &Space, mut point: Point, origin: &'static str) -> Status {
        let base = space.base_point();
        let info = self.device.info();
        let refused = loop {
            let attempt = space
                .params(&point)
                .and_then(|p| schedule(self.fusion, &p, &info).map(|s| (p, s)));
            let e = match attempt {
                Ok((p, s)) => return self.try_scheduled(p, Ok(s), origin),
                Err(e) => e,
            };
            let culprit = space.fields.iter().position(|f| {
                e.path == f.path
                    || e.path.starts_with(&format!("{}[", f.path))
                    || e.path.starts_with(&format!("{}.", f.path))
            });
            match culprit {
                Some(i) if point[i] != base[i] => point[i] = base[i],
                _ => break e,
            }
        };
        let tried = space.describe(&point);
        self.record(
            tried,
            origin,
            Status::Failed,
            None,
            Some(refused.to_string()),
        );
        Status::Failed
    }

    /// Schedules, builds, checks and times one candidate; its status.
    fn try_params(&mut self, params: HeuristicParams, origin: &'static str) -> Status {
        let info = self.device.info();
        let scheduled = schedule(self.fusion, &params, &info);
        self.try_scheduled(params, scheduled.map_err(|e| e.to_string()), origin)
    }

    /// Builds, checks and times a scheduled candidate; its status.
    fn try_scheduled(
        &mut self,
        params: HeuristicParams,
        scheduled: Result<Schedule, String>,
        origin: &'static str,
    ) -> Status {
        let value = params.to_value();
        let (status, time, error) = match scheduled.map(|s| self.measure(&s)) {
            Err(e) => (Status::Failed, None, Some(e)),
            Ok(measured) => match measured {
                Ok(Some((kernel, time))) => {
                    self.keep(params, kernel, time);
                    (Status::Ok, Some(time), None)
                }
                Ok(None) => (Status::Duplicate, None, None),
                Err((status, time, e)) => (status, time, Some(e)),
            },
        };
        self.record(value, origin, status, time, error);
        status
    }

    /// The kernel and its median, `None` for a duplicate, or why not.
    #[allow(clippy::type_complexity)]
    fn measure(
        &mut self,
        s: &Schedule,
    ) -> Result<Option<(Kernel, f64)>, (Status, Option<f64>, String)> {
        let failed = |e: String| (Status::Failed, None, e);
        if !self.seen.insert(s.kernel().to_string()) {
            return Ok(None);
        }
        let kernel = self.device.build(s).map_err(|e| failed(e.to_string()))?;
        self.problem
            .check(&kernel)
            .map_err(|e| (Status::Wrong, None, e))?;
        let (warmup, repeat) = (self.options.warmup, self.options.repeat);
        let short = self.problem.time(&kernel, 1, 3).map_err(failed)?;
        if self
            .best_time()
            .is_some_and(|best| short > CUT_RATIO * best)
        {
            return Err((Status::Cut, Some(short), "over 3x the best".into()));
        }
        let time = self.problem.time(&kernel, warmup, repeat).map_err(failed)?;
        Ok(Some((kernel, time)))
    }

    /// Keeps the fastest few for the final run.
    fn keep(&mut self, params: HeuristicParams, kernel: Kernel, time: f64) {
        self.finalists.push(Finalist {
            params,
            kernel,
            time,
        });
        // The first (the default's, when it ran) always stays; the rest
        // by time.
        self.finalists[1..].sort_by(|a, b| a.time.total_cmp(&b.time));
        self.finalists.truncate(FINALISTS + 1);
    }

    /// Re-measures the finalists interleaved and picks the winner.
    fn finish(
        mut self,
        kind: SchedulerKind,
        strategy: Strategy,
        base: &HeuristicParams,
        default_ok: Status,
    ) -> Result<TuneResult, TuneError> {
        if self.finalists.is_empty() {
            let why = "no candidate ran correctly, not even the default heuristic's";
            return Err(TuneError::Failed(why.into()));
        }
        let rounds = 3;
        let mut times = vec![Vec::new(); self.finalists.len()];
        for _ in 0..rounds {
            for (f, t) in self.finalists.iter().zip(&mut times) {
                let time = self.problem.time(&f.kernel, 1, self.options.repeat);
                t.push(time.map_err(|e| match e.as_str() {
                    INTERRUPTED => TuneError::Stopped,
                    _ => TuneError::Failed(e),
                })?);
            }
        }
        let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
        let win = (0..medians.len())
            .min_by(|&a, &b| medians[a].total_cmp(&medians[b]))
            .expect("finalists");
        let default_time =
            (default_ok == Status::Ok && self.finalists[0].params == *base).then(|| medians[0]);
        Ok(TuneResult {
            scheduler: kind,
            strategy,
            best_params: self.finalists[win].params.to_value(),
            best_time: medians[win],
            default_params: base.to_value(),
            default_time,
            trials: std::mem::take(&mut self.trials),
            elapsed: self.start.elapsed().as_secs_f64(),
        })
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The candidates a strategy proposes, in order, without repeats.
struct Points {
    strategy: Strategy,
    rng: StdRng,
    tried: HashSet<Point>,
    queue: Vec<(Point, &'static str)>,
}

impl Points {
    fn new(space: &Space, strategy: Strategy, seed: u64) -> Points {
        let mut tried = HashSet::new();
        tried.insert(space.base_point());
        let queue = match strategy {
            Strategy::Exhaustive => space
                .all()
                .into_iter()
                .rev()
                .map(|p| (p, "exhaustive"))
                .collect(),
            _ => Vec::new(),
        };
        Points {
            strategy,
            rng: StdRng::seed_from_u64(seed),
            tried,
            queue,
        }
    }

    fn next(&mut self, space: &Space, best: Option<&Point>) -> Option<(Point, &'static str)> {
        loop {
            let candidate = match self.strategy {
                Strategy::Exhaustive => self.queue.pop()?,
                Strategy::Random => (space.random(&mut self.rng), "random"),
                Strategy::Pattern => {
                    let base = space.base_point();
                    let fresh = space
                        .neighbors(best.unwrap_or(&base))
                        .into_iter()
                        .find(|p| !self.tried.contains(p));
                    match fresh {
                        Some(p) => (p, "neighbor"),
                        None => (space.random(&mut self.rng), "random"),
                    }
                }
            };
            if self.tried.len() as u64 >= space.size() {
                return None;
            }
            if self.tried.insert(candidate.0.clone()) {
                return Some(candidate);
            }
        }
    }
}
