//! The tuning loop, as a search that hands out candidates and learns from
//! their results ([`Search::ask`] / [`Search::tell`]) so that an
//! [`Executor`] can measure them anywhere, several at once. The default
//! heuristic's params always enter first, then the cached winners of the
//! fusion's family on the device (warm start), then the seed heuristics'
//! seeds (their neighbours of each new best go before the strategy's next
//! point); a candidate the scheduler refuses is recorded with its error
//! and skipped, one whose kernel was measured already is not measured
//! again. At the end (`ending`) the dozen fastest get a second look (two
//! interleaved rounds, each keeping the faster: a shared machine's slow
//! spells only add time), ranked on it alone: a search's times are
//! ratios to the default's kernel timed beside them, lucky in both
//! directions, and the fastest of a hundred are the luckiest (the
//! winner's curse). Then the best four of the look (and the default)
//! are re-measured in interleaved rounds (five, or more for short
//! kernels), and a finalist replaces the default's params only if it
//! beat them in enough rounds for a sign test (see `verdict`), and again
//! in rounds of it and the default alone (the confirmation), so a tuned
//! result is never slower than the default on the measurements that
//! picked it.

use std::collections::{HashMap, VecDeque};

use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, SchedulerKind, Tunable};
use tilefuse_runtime::Device;
use tilefuse_sched::{DeviceInfo, Schedule};
use tilefuse_schedulers::{Features, features, heuristics, schedule, tunables};

use crate::candidate::{Candidate, Finalist, Measured};
use crate::clock::{self, Clock, FINALISTS, KEPT};
use crate::executor::{Executor, LocalExecutor};
use crate::options::{INTERRUPTED, Observer, Options, TuneError};
use crate::seeding::{Proposal, Seeding};
use crate::seeds::{AutotunerHeuristic, SeedContext};
use crate::space::Observation;
use crate::space::{Point, Space};
use crate::strategy::{Points, Strategy};
use crate::trial::{Source, Status, Trial, TuneResult};
use crate::verdict;

/// Tunes `fusion` (one scheduler must take it whole) on `device`, seeded
/// by the `heuristics` that apply (`seeds::builtin()` and any others),
/// measuring in this process; `observe` sees each trial and the best time
/// so far, and stops tuning by returning false.
pub fn tune(
    fusion: &Fusion,
    device: &Device,
    options: &Options,
    heuristics: &[&dyn AutotunerHeuristic],
    observe: &mut Observer,
) -> Result<TuneResult, TuneError> {
    let problem = options.problem(fusion)?;
    let mut local = LocalExecutor::new(fusion, device, problem);
    let info = device.info();
    tune_with(fusion, &info, options, heuristics, &mut local, observe)
}

/// [`tune`] for a device described by `info`, measuring through `executor`
/// (whose devices must all be that device).
pub fn tune_with(
    fusion: &Fusion,
    info: &DeviceInfo,
    options: &Options,
    heuristics: &[&dyn AutotunerHeuristic],
    executor: &mut dyn Executor,
    observe: &mut Observer,
) -> Result<TuneResult, TuneError> {
    let mut search = Search::new(fusion, info, options, heuristics, observe)?;
    let mut in_flight = 0;
    loop {
        while in_flight < executor.capacity()
            && let Some(c) = search.ask()
        {
            executor.submit(c)?;
            in_flight += 1;
        }
        if in_flight == 0 {
            break;
        }
        let (id, measured) = executor.next()?;
        in_flight -= 1;
        search.tell(id, measured)?;
    }
    if search.stopped {
        return Err(TuneError::Stopped);
    }
    crate::ending::end(search, executor, options)
}

/// A measured candidate kept for the second look and the final run.
struct Kept {
    /// Its trial's.
    id: usize,
    params: HeuristicParams,
    point: Point,
    source: Source,
    time: f64,
}

/// A candidate handed out and not yet told.
struct Pending {
    params: HeuristicParams,
    point: Point,
    source: Source,
}

/// A candidate's params and schedule, or why the scheduler refused it.
type Scheduled = Result<(HeuristicParams, Schedule), Refused>;

/// The params the scheduler refused last and its error.
struct Refused {
    tried: serde_json::Value,
    error: String,
}

impl Refused {
    fn of(params: &HeuristicParams, error: &impl ToString) -> Refused {
        Refused {
            tried: params.to_value(),
            error: error.to_string(),
        }
    }
}

/// One tuning run's state: what was proposed, measured and learned.
pub struct Search<'a> {
    fusion: &'a Fusion,
    info: &'a DeviceInfo,
    options: &'a Options,
    features: Features,
    kind: SchedulerKind,
    base: HeuristicParams,
    space: Space,
    strategy: Strategy,
    /// Warm-start params not yet proposed.
    warm: VecDeque<&'a HeuristicParams>,
    seeding: Seeding<'a>,
    points: Points,
    /// Candidates that count against the trial budget (all but the
    /// default and duplicates).
    budget: usize,
    spent: usize,
    clock: Clock,
    /// The observer asked to stop, or a measurement was interrupted.
    stopped: bool,
    /// Scheduled kernels already handed out (their printed IR) and the
    /// trial that measures each.
    seen: HashMap<String, usize>,
    pending: HashMap<usize, Pending>,
    /// Duplicates settled while their original was in flight, by the
    /// original's id: their indices in `trials` and `history` (pushed
    /// together), which take its time when it is told.
    awaiting: HashMap<usize, Vec<usize>>,
    trials: Vec<Trial>,
    /// What the strategy learns from: each trial's point and time.
    history: Vec<Observation>,
    /// The fastest measured candidates (the default's first, when it
    /// ran), for the second look and the final run.
    kept: Vec<Kept>,
    observe: &'a mut Observer<'a>,
}

impl<'a> Search<'a> {
    /// The space of the scheduler that takes `fusion` on `info`, narrowed
    /// to `options.fields`, and the seed heuristics that apply.
    pub fn new(
        fusion: &'a Fusion,
        info: &'a DeviceInfo,
        options: &'a Options,
        heuristics: &[&'a dyn AutotunerHeuristic],
        observe: &'a mut Observer<'a>,
    ) -> Result<Search<'a>, TuneError> {
        let (features, space) = space(fusion, info, options)?;
        let kind = features.scheduler;
        let base = space.base.clone();
        let budget = options.trials.unwrap_or(options.effort.trials());
        let strategy = options
            .strategy
            .unwrap_or(if space.grid.size() <= budget as u64 {
                Strategy::Exhaustive
            } else {
                Strategy::Surrogate
            });
        let cx = SeedContext {
            fusion,
            device: info,
            features: &features,
            default: &base,
        };
        let seeding = Seeding::new(heuristics, &cx);
        let points = Points::new(&space.grid, &space.base_point(), strategy, options.seed);
        Ok(Search {
            fusion,
            info,
            options,
            features,
            kind,
            base,
            space,
            strategy,
            warm: options.warm_start.iter().collect(),
            seeding,
            points,
            budget,
            spent: 0,
            clock: Clock::new(options.seconds.unwrap_or(options.effort.seconds())),
            stopped: false,
            seen: HashMap::new(),
            pending: HashMap::new(),
            awaiting: HashMap::new(),
            trials: Vec::new(),
            history: Vec::new(),
            kept: Vec::new(),
            observe,
        })
    }

    /// The next candidate to measure; `None` when the budget is spent,
    /// the space is exhausted or tuning was stopped (candidates handed out
    /// may still be told). Candidates the scheduler refuses, that
    /// duplicate a kernel handed out before or that a journal recorded are
    /// settled here without being handed out.
    pub fn ask(&mut self) -> Option<Candidate> {
        loop {
            if self.stopped {
                return None;
            }
            let first = self.trials.len() + self.pending.len() == 0;
            if !first && (self.spent >= self.budget || self.out_of_time()) {
                return None;
            }
            let (scheduled, point, source) = match first {
                true => self.default_candidate(),
                false => self.next_proposal()?,
            };
            if let Some(c) = self.settle(scheduled, point, source) {
                return Some(c);
            }
        }
    }

    /// Whether the time budget ends the search (see [`crate::clock`]).
    fn out_of_time(&self) -> bool {
        let kept: Vec<f64> = self.kept.iter().map(|k| k.time).collect();
        self.clock.out_of_time(&kept, self.options.timing())
    }

    fn default_candidate(&self) -> (Scheduled, Point, Source) {
        let p = self.base.clone();
        let point = self.space.point_of(&p);
        let s = schedule(self.fusion, &p, self.info).map_err(|e| Refused::of(&p, &e));
        (s.map(|s| (p, s)), point, Source::of("default"))
    }

    /// A warm start's params, else a seed heuristic's proposal, else the
    /// strategy's next point; `None` when none has one.
    #[allow(clippy::type_complexity)]
    fn next_proposal(&mut self) -> Option<(Scheduled, Point, Source)> {
        if let Some(cached) = self.warm.pop_front() {
            // Only the tuned fields carry over: the rest of a winner of
            // other sizes is the default's business here.
            let point = self.space.point_of(cached);
            return Some((self.repaired(&point), point, Source::of("warm_start")));
        }
        let cx = SeedContext {
            fusion: self.fusion,
            device: self.info,
            features: &self.features,
            default: &self.base,
        };
        let best = (self.kept.iter())
            .min_by(|a, b| a.time.total_cmp(&b.time))
            .map(|f| &f.params);
        if let Some(Proposal {
            params,
            heuristic,
            origin,
        }) = self.seeding.next(best, &cx)
        {
            let point = self.space.point_of(&params);
            let s = schedule(self.fusion, &params, self.info).map_err(|e| Refused::of(&params, &e));
            let source = Source {
                origin,
                heuristic: Some(heuristic),
            };
            return Some((s.map(|s| (params, s)), point, source));
        }
        let (point, origin) = self.points.next(&self.space.grid, &self.history)?;
        Some((self.repaired(&point), point, Source::of(origin)))
    }

    /// The params of `proposed` and their schedule, repaired first
    /// ([`Space::repair`]).
    fn repaired(&self, proposed: &Point) -> Scheduled {
        (self.space)
            .repair(proposed, |p| schedule(self.fusion, p, self.info))
            .map_err(|(point, e)| Refused {
                tried: self.space.describe(&point),
                error: e.to_string(),
            })
    }

    /// Records a candidate that needs no measurement (refused, a
    /// duplicate, or recorded by a journal) or hands it out.
    fn settle(&mut self, scheduled: Scheduled, point: Point, source: Source) -> Option<Candidate> {
        let id = self.trials.len() + self.pending.len();
        let counts = !source.is_default();
        let (params, s) = match scheduled {
            Ok(done) => done,
            Err(r) => {
                self.spent += usize::from(counts);
                self.record(id, r.tried, point, source, Measured::failed(r.error));
                return None;
            }
        };
        let text = s.kernel().to_string();
        if let Some(&of) = self.seen.get(&text) {
            let original = self.trials.iter().find(|t| t.id == of);
            if original.is_none() {
                self.awaiting.entry(of).or_default().push(self.trials.len());
            }
            let time = original.and_then(|t| t.time);
            let error = Some(format!("the same kernel as trial {of}"));
            let m = Measured::new(Status::Duplicate, time, error);
            self.record(id, params.to_value(), point, source, m);
            return None;
        }
        self.seen.insert(text, id);
        self.spent += usize::from(counts);
        let value = params.to_value();
        self.pending.insert(
            id,
            Pending {
                params,
                point,
                source,
            },
        );
        if let Some(m) = self.options.recorded.get(&value.to_string()) {
            self.tell(id, m.clone()).ok()?;
            return None;
        }
        Some(Candidate {
            id,
            params: value,
            point: self.pending[&id].point.clone(),
            best: self.best_time(),
            corrupt: self.options.corrupt_trial == Some(id),
            timing: self.options.timing(),
            anchor: self.default_kept().then(|| self.kept[0].time),
        })
    }

    /// Learns what measuring candidate `id` found.
    pub fn tell(&mut self, id: usize, measured: Measured) -> Result<(), TuneError> {
        let Some(p) = self.pending.remove(&id) else {
            return Err(TuneError::Failed(format!(
                "no candidate {id} is being measured"
            )));
        };
        if let (Some(got), Some(want)) = (&measured.device, &self.options.fingerprint)
            && got != want
        {
            return Err(TuneError::Failed(format!(
                "candidate {id} was measured on device {got}, not {want}: timings of \
                 different devices are never compared"
            )));
        }
        self.clock.told(&measured);
        if measured.status == Status::Ok
            && let Some(time) = measured.time
        {
            self.keep(Kept {
                id,
                params: p.params.clone(),
                point: p.point.clone(),
                source: p.source.clone(),
                time,
            });
        }
        self.record(id, p.params.to_value(), p.point, p.source, measured);
        self.settle_awaiting(id);
        Ok(())
    }

    /// Gives the duplicates of candidate `id`, settled while it was in
    /// flight, its time: without it a strategy would take them for
    /// failures.
    fn settle_awaiting(&mut self, id: usize) {
        let time = self.trials.last().and_then(|t| t.time);
        for i in self.awaiting.remove(&id).unwrap_or_default() {
            self.trials[i].time = time;
            self.history[i].time = Status::Duplicate.observed(time);
        }
    }

    fn best_time(&self) -> Option<f64> {
        self.kept.iter().map(|f| f.time).min_by(f64::total_cmp)
    }

    fn record(
        &mut self,
        id: usize,
        params: serde_json::Value,
        point: Point,
        source: Source,
        m: Measured,
    ) {
        self.history.push(Observation {
            point: point.clone(),
            time: m.status.observed(m.time),
        });
        let trial = Trial {
            id,
            params,
            point,
            source,
            status: m.status,
            time: m.time,
            error: m.error,
            device: m.device.or_else(|| self.options.fingerprint.clone()),
            at: self.clock.elapsed(),
            look: None,
            launches: m.launches,
        };
        let best = self.best_time();
        let interrupted = trial.error.as_deref() == Some(INTERRUPTED);
        self.stopped |= interrupted || !(self.observe)(&trial, best);
        self.trials.push(trial);
    }

    /// Keeps the fastest dozen, and the default's first whenever its
    /// result comes (parallel workers may tell others before it).
    fn keep(&mut self, kept: Kept) {
        if kept.source.is_default() {
            self.kept.insert(0, kept);
        } else {
            self.kept.push(kept);
        }
        self.rank();
        self.kept.truncate(KEPT + 1);
    }

    /// Whether the default ran and passed (only measured candidates are
    /// kept, and the default's is never dropped).
    fn default_kept(&self) -> bool {
        self.kept.first().is_some_and(|k| k.source.is_default())
    }

    /// The default's stays first; the rest by time, ties by proposal (a
    /// short kernel's times tie in whole nanoseconds, and parallel workers
    /// tell results in no fixed order).
    fn rank(&mut self) {
        let first = usize::from(self.default_kept());
        self.kept[first..].sort_by(|a, b| a.time.total_cmp(&b.time).then(a.id.cmp(&b.id)));
    }

    /// The candidates the second look re-measures: those kept but the
    /// default's (always a finalist).
    pub fn contenders(&self) -> Vec<Finalist> {
        views(&self.kept[usize::from(self.default_kept())..])
    }

    /// Learns the contenders' second look, `times` (one list of times
    /// each, as [`Executor::final_round`] gives them): each one's time is
    /// the fastest of its look, and its trial records it.
    pub fn second_look(&mut self, times: &[Vec<f64>]) {
        let first = usize::from(self.default_kept());
        for (kept, again) in self.kept[first..].iter_mut().zip(times) {
            let look = again.iter().copied().fold(f64::INFINITY, f64::min);
            kept.time = look;
            if let Some(trial) = self.trials.iter_mut().find(|t| t.id == kept.id) {
                trial.look = Some(look);
            }
        }
        self.rank();
    }

    /// The candidates the final round re-measures: the first kept and the
    /// fastest others.
    pub fn finalists(&self) -> Vec<Finalist> {
        views(self.kept_finalists())
    }

    /// The first kept and the fastest others.
    fn kept_finalists(&self) -> &[Kept] {
        &self.kept[..self.kept.len().min(FINALISTS + 1)]
    }

    /// Rounds of the final run: as many as its finalists' times allow
    /// (see `clock::rounds`).
    pub fn final_rounds(&self) -> usize {
        let times: Vec<f64> = self.kept_finalists().iter().map(|k| k.time).collect();
        clock::rounds(&times, self.options.timing())
    }

    /// The final run's winner, where the default ran (the first finalist)
    /// and lost: the finalist a confirmation times again beside it.
    pub fn challenger(&self, rounds: &[Vec<f64>]) -> Option<usize> {
        verdict::challenger(rounds, self.default_kept().then_some(0)?)
    }

    /// The result, given the finalists' times in each round of the final
    /// run and, where there was a [`Search::challenger`], the default's
    /// and its times in each round of its confirmation (see
    /// `verdict::settled`).
    pub fn finish(mut self, rounds: &[Vec<f64>], confirmation: Option<&[Vec<f64>]>) -> TuneResult {
        let default = self.default_kept().then_some(0);
        let (win, rounds) = verdict::settled(rounds.to_vec(), default, confirmation);
        let medians = verdict::medians(&rounds);
        let default_time = default.map(|d| medians[d]);
        let winner = &self.kept[win].source;
        if let (Some(name), "seed") = (&winner.heuristic, winner.origin) {
            self.seeding.won(name);
        }
        self.trials.sort_by_key(|t| t.id);
        TuneResult {
            scheduler: self.kind,
            strategy: self.strategy,
            fields: (self.space.fields.iter())
                .map(|f| f.path.to_owned())
                .collect(),
            sizes: self.space.grid.sizes.clone(),
            space: crate::space::digest(&self.space.fields),
            best_params: self.kept[win].params.to_value(),
            best_time: medians[win],
            best_samples: rounds[win].clone(),
            default_params: self.base.to_value(),
            default_time,
            trials: std::mem::take(&mut self.trials),
            heuristics: std::mem::take(&mut self.seeding.reports),
            warnings: std::mem::take(&mut self.seeding.warnings),
            elapsed: self.clock.elapsed(),
        }
    }
}

/// What the final round needs to know of `kept` candidates.
fn views(kept: &[Kept]) -> Vec<Finalist> {
    (kept.iter())
        .map(|f| Finalist {
            params: f.params.to_value(),
            point: f.point.clone(),
        })
        .collect()
}

/// The space of the scheduler that takes `fusion` on `info`, narrowed to
/// `options.fields`, and the fusion's features.
pub(crate) fn space(
    fusion: &Fusion,
    info: &DeviceInfo,
    options: &Options,
) -> Result<(Features, Space), TuneError> {
    let failed = |e: String| TuneError::Failed(e);
    let features = features(fusion).map_err(failed)?;
    let kind = features.scheduler;
    let base = heuristics(fusion, Some(kind), info).map_err(|e| failed(e.to_string()))?;
    let (_, fields) = tunables(fusion, Some(kind), info).map_err(|e| failed(e.to_string()))?;
    let space = Space::new(base, narrowed(fields, options, kind)?);
    Ok((features, space))
}

/// The scheduler's tunable `fields`, only those `options.fields` names.
fn narrowed(
    mut fields: Vec<Tunable>,
    options: &Options,
    kind: SchedulerKind,
) -> Result<Vec<Tunable>, TuneError> {
    let Some(only) = &options.fields else {
        return Ok(fields);
    };
    if let Some(unknown) = only.iter().find(|p| !fields.iter().any(|f| f.path == *p)) {
        let known: Vec<_> = fields.iter().map(|f| f.path).collect();
        return Err(TuneError::Failed(format!(
            "{unknown} is not a tunable field of the {kind} scheduler here (those are {})",
            known.join(", ")
        )));
    }
    fields.retain(|f| only.iter().any(|p| p == f.path));
    Ok(fields)
}
