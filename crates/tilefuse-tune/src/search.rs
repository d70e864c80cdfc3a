//! The tuning loop: candidates from a strategy over the space, each
//! scheduled, built, checked against the reference and timed; one that
//! fails anywhere is recorded with its error and skipped. The default
//! heuristic's params always enter first, then the seed heuristics' seeds
//! (their neighbours of each new best go before the strategy's next
//! point); at the end the best few (the
//! default among them) are re-measured interleaved and the winner is the
//! best of that paired run, so a tuned result is never slower than the
//! default on the measurement that picked it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tilefuse_ir::{Fusion, Tensor};
use tilefuse_params::{HeuristicParams, SchedulerKind};
use tilefuse_runtime::{Device, Kernel};
use tilefuse_sched::Schedule;
use tilefuse_sched::schedulers::{features, heuristics, schedule, tunables};

use crate::measure::{CUT_RATIO, Problem};
use crate::seeding::{HeuristicReport, Proposal, Seeding};
use crate::seeds::{AutotunerHeuristic, SeedContext};
use crate::space::{Point, Space};
use crate::strategy::{Observation, Points, Strategy};

/// How a runtime error reads when Ctrl-C interrupted the work.
const INTERRUPTED: &str = "interrupted";

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
    /// The inputs candidates are checked and timed on (a workload's);
    /// random ones made from `seed` when `None`.
    pub inputs: Option<Arc<[Tensor]>>,
    pub warmup: usize,
    pub repeat: usize,
    /// Tune only these fields (paths of the scheduler's tunable fields);
    /// every one when `None`.
    pub fields: Option<Vec<String>>,
    /// Fault injection for tests: the outputs of the trial with this index
    /// are corrupted before the reference check, which must disqualify it.
    pub corrupt_trial: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            effort: Effort::Quick,
            strategy: None,
            trials: None,
            seconds: None,
            seed: 0,
            inputs: None,
            warmup: 2,
            repeat: 10,
            fields: None,
            corrupt_trial: None,
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
    /// The same kernel as an earlier candidate: not measured again (its
    /// time is the earlier one's).
    Duplicate,
    /// Much slower than the best in a short timing: not measured in full.
    Cut,
}

impl Status {
    /// The time a strategy learns from: a measurement of the candidate's
    /// point (a duplicate's is its original's, a cut one's the short
    /// timing); none for a failed or wrong candidate.
    pub(crate) fn observed(self, time: Option<f64>) -> Option<f64> {
        match self {
            Status::Ok | Status::Duplicate | Status::Cut => time,
            Status::Failed | Status::Wrong => None,
        }
    }
}

/// Where a candidate came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Source {
    /// `"default"`, `"seed"`, `"heuristic_neighbor"`, `"random"`,
    /// `"neighbor"` or `"exhaustive"`.
    pub origin: &'static str,
    /// The seed heuristic of a seed or its neighbour.
    pub heuristic: Option<String>,
}

impl Source {
    fn of(origin: &'static str) -> Source {
        Source {
            origin,
            heuristic: None,
        }
    }
}

/// One candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    pub params: serde_json::Value,
    /// Its point in the space (the nearest, for seeds).
    pub point: Point,
    #[serde(flatten)]
    pub source: Source,
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
    /// The tuned fields and their number of values: the space's shape.
    pub fields: Vec<String>,
    pub sizes: Vec<usize>,
    pub best_params: serde_json::Value,
    /// Median seconds of the winner in the final interleaved run.
    pub best_time: f64,
    pub default_params: serde_json::Value,
    /// The default heuristic's median in the same run (`None` if it failed).
    pub default_time: Option<f64>,
    pub trials: Vec<Trial>,
    /// The seed heuristics that applied.
    pub heuristics: Vec<HeuristicReport>,
    /// Seed heuristics that failed and were skipped.
    pub warnings: Vec<String>,
    pub elapsed: f64,
}

/// A measured candidate kept for the final run.
struct Finalist {
    params: HeuristicParams,
    source: Source,
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

/// Tunes `fusion` (one scheduler must take it whole) on `device`, seeded
/// by the `heuristics` that apply (`seeds::builtin()` and any others);
/// `observe` sees each trial and the best time so far, and stops tuning by
/// returning false.
pub fn tune(
    fusion: &Fusion,
    device: &Device,
    options: &Options,
    heuristics: &[&dyn AutotunerHeuristic],
    observe: &mut dyn FnMut(&Trial, Option<f64>) -> bool,
) -> Result<TuneResult, TuneError> {
    let failed = |e: String| TuneError::Failed(e);
    let info = device.info();
    let features = features(fusion).map_err(failed)?;
    let kind = features.scheduler;
    let base = self::heuristics(fusion, Some(kind), &info).map_err(|e| failed(e.to_string()))?;
    let (_, mut fields) = tunables(fusion, Some(kind), &info).map_err(|e| failed(e.to_string()))?;
    if let Some(only) = &options.fields {
        if let Some(unknown) = only.iter().find(|p| !fields.iter().any(|f| f.path == *p)) {
            let known: Vec<_> = fields.iter().map(|f| f.path).collect();
            return Err(failed(format!(
                "{unknown} is not a tunable field of the {kind} scheduler here (those are {})",
                known.join(", ")
            )));
        }
        fields.retain(|f| only.iter().any(|p| p == f.path));
    }
    let space = Space::new(base.clone(), fields);
    let budget = options.trials.unwrap_or(options.effort.trials());
    let strategy = options
        .strategy
        .unwrap_or(if space.grid.size() <= budget as u64 {
            Strategy::Exhaustive
        } else {
            Strategy::Pattern
        });
    let cx = SeedContext {
        fusion,
        device: &info,
        features: &features,
        default: &base,
    };
    let mut seeding = Seeding::new(heuristics, &cx);
    let mut run = Run {
        fusion,
        device,
        options,
        space: &space,
        problem: match &options.inputs {
            Some(inputs) => Problem::given(fusion, Arc::clone(inputs)),
            None => Problem::new(fusion, options.seed),
        }
        .map_err(failed)?,
        start: Instant::now(),
        stopped: false,
        seen: HashMap::new(),
        trials: Vec::new(),
        history: Vec::new(),
        finalists: Vec::new(),
        observe,
    };
    let default_ok = run.try_params(base.clone(), Source::of("default"));
    let mut points = Points::new(&space.grid, &space.base_point(), strategy, options.seed);
    let seconds = options.seconds.unwrap_or(options.effort.seconds());
    let mut measured = 0;
    while !run.stopped && measured < budget && run.start.elapsed().as_secs_f64() < seconds {
        let status = match seeding.next(run.best_params(), &cx) {
            Some(Proposal {
                params,
                heuristic,
                origin,
            }) => run.try_params(
                params,
                Source {
                    origin,
                    heuristic: Some(heuristic),
                },
            ),
            None => {
                let Some((point, origin)) = points.next(&space.grid, &run.history) else {
                    break;
                };
                run.try_point(point, Source::of(origin))
            }
        };
        measured += usize::from(status != Status::Duplicate);
    }
    if run.stopped {
        return Err(TuneError::Stopped);
    }
    run.finish(kind, strategy, &base, default_ok, seeding)
}

struct Run<'a> {
    fusion: &'a Fusion,
    device: &'a Device,
    options: &'a Options,
    space: &'a Space,
    problem: Problem,
    start: Instant,
    /// The observer asked to stop, or a measurement was interrupted.
    stopped: bool,
    /// Scheduled kernels already measured (their printed IR) and the
    /// trial that measured each.
    seen: HashMap<String, usize>,
    trials: Vec<Trial>,
    /// What the strategy learns from: each trial's point and time.
    history: Vec<Observation>,
    finalists: Vec<Finalist>,
    observe: &'a mut dyn FnMut(&Trial, Option<f64>) -> bool,
}

impl Run<'_> {
    fn best_time(&self) -> Option<f64> {
        self.finalists.iter().map(|f| f.time).min_by(f64::total_cmp)
    }

    fn best_params(&self) -> Option<&HeuristicParams> {
        let best = self
            .finalists
            .iter()
            .min_by(|a, b| a.time.total_cmp(&b.time))?;
        Some(&best.params)
    }

    #[allow(clippy::too_many_arguments)] // one trial's fields
    fn record(
        &mut self,
        params: serde_json::Value,
        point: Point,
        source: Source,
        status: Status,
        time: Option<f64>,
        error: Option<String>,
    ) {
        self.history.push(Observation {
            point: point.clone(),
            time: status.observed(time),
        });
        let trial = Trial {
            params,
            point,
            source,
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
    fn try_point(&mut self, proposed: Point, source: Source) -> Status {
        let space = self.space;
        let base = space.base_point();
        let mut point = proposed.clone();
        let info = self.device.info();
        let refused = loop {
            let attempt = space
                .params(&point)
                .and_then(|p| schedule(self.fusion, &p, &info).map(|s| (p, s)));
            let e = match attempt {
                Ok((p, s)) => return self.try_scheduled(p, proposed, Ok(s), source),
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
            proposed,
            source,
            Status::Failed,
            None,
            Some(refused.to_string()),
        );
        Status::Failed
    }

    /// Schedules, builds, checks and times one candidate; its status.
    fn try_params(&mut self, params: HeuristicParams, source: Source) -> Status {
        let info = self.device.info();
        let scheduled = schedule(self.fusion, &params, &info);
        let point = self.space.point_of(&params);
        self.try_scheduled(params, point, scheduled.map_err(|e| e.to_string()), source)
    }

    /// Builds, checks and times a scheduled candidate; its status.
    fn try_scheduled(
        &mut self,
        params: HeuristicParams,
        point: Point,
        scheduled: Result<Schedule, String>,
        source: Source,
    ) -> Status {
        let value = params.to_value();
        let (status, time, error) = match scheduled.map(|s| self.measure(&s)) {
            Err(e) => (Status::Failed, None, Some(e)),
            Ok(measured) => match measured {
                Ok((kernel, time)) => {
                    self.keep(params, source.clone(), kernel, time);
                    (Status::Ok, Some(time), None)
                }
                Err((status, time, e)) => (status, time, Some(e)),
            },
        };
        self.record(value, point, source, status, time, error);
        status
    }

    /// The kernel and its median, or why not (a duplicate with the
    /// time of the trial it duplicates).
    #[allow(clippy::type_complexity)]
    fn measure(&mut self, s: &Schedule) -> Result<(Kernel, f64), (Status, Option<f64>, String)> {
        let failed = |e: String| (Status::Failed, None, e);
        let text = s.kernel().to_string();
        if let Some(&i) = self.seen.get(&text) {
            let why = format!("the same kernel as trial {i}");
            return Err((Status::Duplicate, self.trials[i].time, why));
        }
        self.seen.insert(text, self.trials.len());
        let kernel = self.device.build(s).map_err(|e| failed(e.to_string()))?;
        let corrupt = self.options.corrupt_trial == Some(self.trials.len());
        self.problem
            .check_with(&kernel, corrupt)
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
        Ok((kernel, time))
    }

    /// Keeps the fastest few for the final run.
    fn keep(&mut self, params: HeuristicParams, source: Source, kernel: Kernel, time: f64) {
        self.finalists.push(Finalist {
            params,
            source,
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
        mut seeding: Seeding,
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
        let winner = &self.finalists[win].source;
        if let (Some(name), "seed") = (&winner.heuristic, winner.origin) {
            seeding.won(name);
        }
        Ok(TuneResult {
            scheduler: kind,
            strategy,
            fields: self
                .space
                .fields
                .iter()
                .map(|f| f.path.to_owned())
                .collect(),
            sizes: self.space.grid.sizes.clone(),
            best_params: self.finalists[win].params.to_value(),
            best_time: medians[win],
            default_params: base.to_value(),
            default_time,
            trials: std::mem::take(&mut self.trials),
            heuristics: seeding.reports,
            warnings: seeding.warnings,
            elapsed: self.start.elapsed().as_secs_f64(),
        })
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
