//! The search behind an executor: results told out of order (parallel
//! workers) give the same winner on a recorded space, results of another
//! device are refused, and a journal's results are not measured again.

use tilefuse_runtime::Device;
use tilefuse_testing::softmax;
use tilefuse_tune::{
    Candidate, Executor, FINAL_GAIN, Finalist, Measured, Options, Recording, ReplayExecutor,
    RoundTimes, Status, Strategy, Timing, TuneError, tune_with,
};

fn recorded() -> (tilefuse_ir::Fusion, Device, Recording) {
    let f = softmax(&[16, 64], -1);
    let device = Device::cpu();
    let options = Options {
        fields: Some(vec![
            "reduction_invocations".into(),
            "unroll_factor_reduction".into(),
        ]),
        repeat: 1,
        ..Options::default()
    };
    let r = Recording::record(&f, &device, &options, "softmax 16x64").unwrap();
    (f, device, r)
}

fn exhaustive(r: &Recording) -> Options {
    Options {
        strategy: Some(Strategy::Exhaustive),
        trials: Some(r.size()),
        fields: Some(r.fields.clone()),
        ..Options::default()
    }
}

/// A replay that claims another `device`, or that `refuse`s to measure.
struct Wrapped<'r> {
    inner: ReplayExecutor<'r>,
    device: Option<String>,
    refuse: bool,
}

impl Executor for Wrapped<'_> {
    fn capacity(&self) -> usize {
        1
    }
    fn submit(&mut self, c: Candidate) -> Result<(), TuneError> {
        match self.refuse {
            true => Err(TuneError::Failed(format!("candidate {} measured", c.id))),
            false => self.inner.submit(c),
        }
    }
    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        let (id, mut m) = self.inner.next()?;
        m.device = self.device.clone();
        Ok((id, m))
    }
    fn final_round(&mut self, f: &[Finalist], t: Timing) -> Result<RoundTimes, TuneError> {
        self.inner.final_round(f, t)
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
        let ids: Vec<_> = res.trials.iter().map(|t| t.id).collect();
        assert_eq!(ids, (0..res.trials.len()).collect::<Vec<_>>());
        winners.push(res.best_params);
    }
    assert_eq!(winners[0], winners[1]);
}

#[test]
fn timings_of_another_device_are_refused() {
    let (f, device, r) = recorded();
    let options = Options {
        fingerprint: Some("aaaa".into()),
        ..exhaustive(&r)
    };
    let mut elsewhere = Wrapped {
        inner: ReplayExecutor::new(&r, 1),
        device: Some("bbbb".into()),
        refuse: false,
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
        };
        resumed.recorded.insert(t.params.to_string(), m);
    }
    let mut none = Wrapped {
        inner: ReplayExecutor::new(&r, 1),
        device: None,
        refuse: true,
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
    fn final_round(&mut self, f: &[Finalist], _: Timing) -> Result<RoundTimes, TuneError> {
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
