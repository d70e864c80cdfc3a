//! The search behind an executor: results told out of order (parallel
//! workers) give the same winner and default time on a recorded space,
//! results of another device are refused, and a journal's results are not
//! measured again.

use tilefuse_runtime::Device;
use tilefuse_testing::softmax;
use tilefuse_tune::{
    Candidate, Executor, FINAL_GAIN, Finalist, Measured, Options, Point, Recording, ReplayExecutor,
    RoundTimes, Status, Strategy, Timing, TuneError, tune_with,
};

fn recorded() -> (tilefuse_ir::Fusion, Device, Recording) {
    recorded_over(&["reduction_invocations", "unroll_factor_reduction"])
}

fn recorded_over(fields: &[&str]) -> (tilefuse_ir::Fusion, Device, Recording) {
    let f = softmax(&[16, 64], -1);
    let device = Device::cpu();
    let options = Options {
        fields: Some(fields.iter().map(|&p| p.to_owned()).collect()),
        repeat: 1,
        ..Options::default()
    };
    let r = Recording::record(&f, &device, &options, "softmax 16x64", &mut |_, _| true).unwrap();
    (f, device, r)
}

fn exhaustive(r: &Recording) -> Options {
    Options {
        strategy: Some(Strategy::Exhaustive),
        trials: Some(r.size()),
        // Replayed launches take no time, whatever times the tests give
        // them: no budget for their ending.
        seconds: Some(f64::INFINITY),
        fields: Some(r.fields.clone()),
        ..Options::default()
    }
}

/// A replay that claims another `device`, that `refuse`s to measure, or
/// in which the `slowed` point's trials ran in a slow spell of the
/// machine (they report its time instead of the recorded one).
struct Wrapped<'r> {
    inner: ReplayExecutor<'r>,
    device: Option<String>,
    refuse: bool,
    slowed: Option<(Point, f64)>,
    /// The ids of the slowed point's candidates.
    spelled: Vec<usize>,
}

impl<'r> Wrapped<'r> {
    fn new(r: &'r Recording) -> Self {
        Wrapped {
            inner: ReplayExecutor::new(r, 1),
            device: None,
            refuse: false,
            slowed: None,
            spelled: Vec::new(),
        }
    }
}

impl Executor for Wrapped<'_> {
    fn capacity(&self) -> usize {
        1
    }
    fn submit(&mut self, c: Candidate) -> Result<(), TuneError> {
        if self.refuse {
            return Err(TuneError::Failed(format!("candidate {} measured", c.id)));
        }
        if self.slowed.as_ref().is_some_and(|(p, _)| *p == c.point) {
            self.spelled.push(c.id);
        }
        self.inner.submit(c)
    }
    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        let (id, mut m) = self.inner.next()?;
        m.device = self.device.clone();
        if let (Some((_, time)), true) = (&self.slowed, self.spelled.contains(&id)) {
            m.time = Some(*time);
        }
        Ok((id, m))
    }
    fn final_round(
        &mut self,
        f: &[Finalist],
        t: Timing,
        rounds: usize,
    ) -> Result<RoundTimes, TuneError> {
        self.inner.final_round(f, t, rounds)
    }
}

#[test]
fn parallel_workers_find_the_recorded_best() {
    let (f, device, r) = recorded();
    let options = exhaustive(&r);
    let info = device.info();
    let mut winners = Vec::new();
    for width in [1, 3] {
        let mut replay = ReplayExecutor::new(&r, width);
        let res = tune_with(&f, &info, &options, &[], &mut replay, &mut |_, _| true).unwrap();
        // The best point, unless it gains too little on the default's.
        let base = r.measured(&r.base).time.unwrap();
        let best = if r.best() < base * (1.0 - FINAL_GAIN) {
            r.best()
        } else {
            base
        };
        assert_eq!(res.best_time, best, "width {width}");
        assert_eq!(res.default_time, Some(base), "width {width}");
        let ids: Vec<_> = res.trials.iter().map(|t| t.id).collect();
        assert_eq!(ids, (0..res.trials.len()).collect::<Vec<_>>());
        winners.push(res.best_params);
    }
    assert_eq!(winners[0], winners[1]);
}

/// Candidates as fast as each other (a short kernel's times are whole
/// nanoseconds) rank by the order they were proposed in, not the order
/// their results came back in: parallel workers pick the winner one
/// worker would.
#[test]
fn tied_candidates_rank_by_proposal_not_arrival() {
    let (f, device, mut r) = recorded();
    let base = r.base.clone();
    for (point, time) in &mut r.times {
        *time = Some(if *point == base { 2e-6 } else { 1e-6 });
    }
    let options = exhaustive(&r);
    let info = device.info();
    for width in [1, 2, 3, 5] {
        let mut replay = ReplayExecutor::new(&r, width);
        let res = tune_with(&f, &info, &options, &[], &mut replay, &mut |_, _| true).unwrap();
        let first_tied = (res.trials.iter()).find(|t| t.time == Some(1e-6)).unwrap();
        assert_eq!(res.best_params, first_tied.params, "width {width}");
    }
}

#[test]
fn timings_of_another_device_are_refused() {
    let (f, device, r) = recorded();
    let options = Options {
        fingerprint: Some("aaaa".into()),
        ..exhaustive(&r)
    };
    let mut elsewhere = Wrapped {
        device: Some("bbbb".into()),
        ..Wrapped::new(&r)
    };
    let e = tune_with(
        &f,
        &device.info(),
        &options,
        &[],
        &mut elsewhere,
        &mut |_, _| true,
    );
    let Err(TuneError::Failed(why)) = e else {
        panic!("another device's timing was accepted")
    };
    assert!(why.contains("measured on device bbbb, not aaaa"), "{why}");
}

#[test]
fn a_journal_s_results_are_not_measured_again() {
    let (f, device, r) = recorded();
    let info = device.info();
    let mut first = ReplayExecutor::new(&r, 1);
    let options = exhaustive(&r);
    let done = tune_with(&f, &info, &options, &[], &mut first, &mut |_, _| true).unwrap();
    let mut resumed = exhaustive(&r);
    for t in done.trials.iter().filter(|t| t.status != Status::Duplicate) {
        let m = Measured {
            status: t.status,
            time: t.time,
            error: t.error.clone(),
            device: None,
            build: None,
            launches: 0,
        };
        resumed.recorded.insert(t.params.to_string(), m);
    }
    let mut none = Wrapped {
        refuse: true,
        ..Wrapped::new(&r)
    };
    let again = tune_with(&f, &info, &resumed, &[], &mut none, &mut |_, _| true).unwrap();
    assert_eq!(again.best_params, done.best_params);
    assert_eq!(again.trials.len(), done.trials.len());
}

/// Final rounds in which every finalist but the default is fastest in two
/// rounds of three and slowest in the third (a machine's hiccup).
struct Hiccup<'r>(ReplayExecutor<'r>);

impl Executor for Hiccup<'_> {
    fn capacity(&self) -> usize {
        1
    }
    fn submit(&mut self, c: Candidate) -> Result<(), TuneError> {
        self.0.submit(c)
    }
    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        self.0.next()
    }
    fn final_round(
        &mut self,
        f: &[Finalist],
        _: Timing,
        _: usize,
    ) -> Result<RoundTimes, TuneError> {
        let mut rounds = vec![vec![1.0; 3]];
        rounds.extend((1..f.len()).map(|_| vec![0.5, 0.5, 1.5]));
        Ok(rounds)
    }
}

#[test]
fn a_finalist_slower_than_the_default_in_one_round_does_not_win() {
    let (f, device, r) = recorded();
    let options = exhaustive(&r);
    let mut hiccup = Hiccup(ReplayExecutor::new(&r, 1));
    let res = tune_with(
        &f,
        &device.info(),
        &options,
        &[],
        &mut hiccup,
        &mut |_, _| true,
    )
    .unwrap();
    assert_eq!(res.best_params, res.default_params);
    assert_eq!((res.best_time, res.default_time), (1.0, Some(1.0)));
}

#[test]
fn a_trial_slowed_by_the_machine_gets_a_second_look() {
    let (f, device, mut r) = recorded_over(&[
        "launch.workgroup_size",
        "vectorization_factor_reduction",
        "rows_per_workgroup",
    ]);
    let options = exhaustive(&r);
    let info = device.info();
    let mut replay = ReplayExecutor::new(&r, 1);
    let first = tune_with(&f, &info, &options, &[], &mut replay, &mut |_, _| true).unwrap();
    // The other kernels (not duplicates), 2x faster than the default, the
    // last 10x.
    let kernels: Vec<_> = (first.trials[1..].iter())
        .filter(|t| t.status == Status::Ok)
        .map(|t| t.point.clone())
        .collect();
    assert!(
        kernels.len() > 12,
        "{} kernels: too few to slow one out of the finalists",
        kernels.len()
    );
    for (point, time) in &mut r.times {
        if let Some(k) = kernels.iter().position(|p| p == point) {
            *time = Some(0.5 + 0.01 * k as f64);
        } else if *point == r.base {
            *time = Some(1.0);
        }
    }
    let best = kernels.last().unwrap().clone();
    r.times.iter_mut().find(|(p, _)| *p == best).unwrap().1 = Some(0.1);
    // Its trial ran in a slow spell: eighth of the others.
    let mut spell = Wrapped {
        slowed: Some((best.clone(), 0.575)),
        ..Wrapped::new(&r)
    };
    let res = tune_with(&f, &info, &options, &[], &mut spell, &mut |_, _| true).unwrap();
    let trial = res.trials.iter().find(|t| t.point == best).unwrap();
    assert_eq!((trial.time, trial.look), (Some(0.575), Some(0.1)));
    assert_eq!((&res.best_params, res.best_time), (&trial.params, 0.1));
}

#[test]
fn a_duplicate_of_a_candidate_in_flight_gets_its_time() {
    // Three workers: a point whose kernel another still in flight has is
    // settled as a duplicate before that one's time is known.
    let (f, device, r) = recorded();
    let info = device.info();
    let mut replay = ReplayExecutor::new(&r, 3);
    let res = tune_with(&f, &info, &exhaustive(&r), &[], &mut replay, &mut |_, _| {
        true
    })
    .unwrap();
    let time_of = |id: usize| res.trials.iter().find(|t| t.id == id).unwrap().time;
    let duplicates: Vec<_> = (res.trials.iter())
        .filter(|t| t.status == Status::Duplicate)
        .collect();
    assert!(!duplicates.is_empty(), "the space has no duplicate kernels");
    for t in duplicates {
        let of: usize = (t.error.as_deref().unwrap())
            .trim_start_matches("the same kernel as trial ")
            .parse()
            .unwrap();
        assert_eq!(t.time, time_of(of), "trial {} (of {of})", t.id);
        assert_eq!(t.time, r.measured(&t.point).time, "trial {}", t.id);
    }
}

/// A second look (the first call) that times every contender alike, a
/// final run in which every finalist but the default runs 2x faster in
/// every round, then a confirmation whose winner's times are
/// `confirmation`'s; it keeps the pair it was asked to confirm.
struct Fluke<'r> {
    inner: ReplayExecutor<'r>,
    confirmation: f64,
    looked: bool,
    calls: usize,
    pair: Vec<Finalist>,
}

impl Executor for Fluke<'_> {
    fn capacity(&self) -> usize {
        1
    }
    fn submit(&mut self, c: Candidate) -> Result<(), TuneError> {
        self.inner.submit(c)
    }
    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        self.inner.next()
    }
    fn final_round(
        &mut self,
        f: &[Finalist],
        _: Timing,
        rounds: usize,
    ) -> Result<RoundTimes, TuneError> {
        if !std::mem::replace(&mut self.looked, true) {
            return Ok(vec![vec![2.0; rounds]; f.len()]);
        }
        self.calls += 1;
        let others = if self.calls == 1 {
            0.5
        } else {
            self.pair = f.to_vec();
            self.confirmation
        };
        let mut times = vec![vec![1.0; rounds]];
        times.extend((1..f.len()).map(|_| vec![others; rounds]));
        Ok(times)
    }
}

/// A tune of the recorded space through a [`Fluke`]: the result, the
/// pair the confirmation was asked for and the calls after the look.
fn tune_through_a_fluke(confirmation: f64) -> (tilefuse_tune::TuneResult, Vec<Finalist>, usize) {
    let (f, device, r) = recorded();
    let mut fluke = Fluke {
        inner: ReplayExecutor::new(&r, 1),
        confirmation,
        looked: false,
        calls: 0,
        pair: Vec::new(),
    };
    let options = exhaustive(&r);
    let res = tune_with(
        &f,
        &device.info(),
        &options,
        &[],
        &mut fluke,
        &mut |_, _| true,
    )
    .unwrap();
    (res, fluke.pair, fluke.calls)
}

#[test]
fn a_winner_the_confirmation_does_not_bear_out_leaves_the_default() {
    let (res, pair, calls) = tune_through_a_fluke(1.0);
    // The final run's winner and the default, timed again alone.
    assert_eq!(calls, 2);
    assert_eq!(pair.len(), 2);
    assert_eq!(pair[0].params, res.default_params);
    assert_ne!(pair[1].params, res.default_params);
    assert_eq!(res.best_params, res.default_params);
    assert_eq!((res.best_time, res.default_time), (1.0, Some(1.0)));
}

#[test]
fn a_confirmed_winner_is_timed_over_both_runs() {
    let (res, pair, _) = tune_through_a_fluke(0.6);
    assert_eq!(res.best_params, pair[1].params);
    assert_eq!(res.best_samples, [[0.5; 5], [0.6; 5]].concat());
    // The upper median of the ten rounds.
    assert_eq!((res.best_time, res.default_time), (0.6, Some(1.0)));
}
