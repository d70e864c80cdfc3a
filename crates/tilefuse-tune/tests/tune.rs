//! Tuning on the CPU device: the default enters first, every trial is
//! recorded, duplicates are not measured twice, the winner is never slower
//! than the default in the final run, and a wrong kernel is caught.

use std::time::{Duration, Instant};

use serde_json::json;
use tilefuse_ir::{DType, Data, Fusion, Tensor, UnaryOp};
use tilefuse_runtime::Device;
use tilefuse_schedulers::{heuristics, schedule};
use tilefuse_testing::{matmul, softmax};
use tilefuse_tune::{
    Candidate, Effort, Executor, LocalExecutor, Options, Problem, Status, Stopwatch, Strategy,
    Timing, measure, tune, tune_with,
};

#[test]
fn tuning_records_every_trial_and_never_loses_to_the_default() {
    let f = softmax(&[64, 256], -1);
    let options = Options {
        effort: Effort::Quick,
        trials: Some(10),
        seed: 3,
        repeat: 3,
        ..Options::default()
    };
    let mut seen = 0;
    let r = tune(&f, &Device::cpu(), &options, &[], &mut |_, _| {
        seen += 1;
        true
    })
    .unwrap();
    assert_eq!(seen, r.trials.len());
    assert_eq!(r.trials[0].source.origin, "default");
    assert_eq!(r.trials[0].status, Status::Ok);
    assert_eq!(r.strategy, Strategy::Surrogate);
    let measured = r
        .trials
        .iter()
        .filter(|t| t.status != Status::Duplicate)
        .count();
    assert!(measured >= 10, "{measured} measured");
    assert!(r.best_time <= r.default_time.unwrap());
    // The best time is the median of the winner's rounds: the final run's
    // five to twenty (more for short kernels), and the confirmation's as
    // many more where a winner other than the default was confirmed.
    let mut samples = r.best_samples.clone();
    samples.sort_by(f64::total_cmp);
    let confirmed = r.best_params != r.trials[0].params;
    let runs = if confirmed { 2 } else { 1 };
    assert!(
        (5 * runs..=20 * runs).contains(&samples.len()),
        "{samples:?}"
    );
    assert_eq!(samples[samples.len() / 2], r.best_time);
    // The winner's params load and schedule again.
    let p = tilefuse_params::HeuristicParams::from_value(r.best_params).unwrap();
    schedule(&f, &p, &Device::cpu().info()).unwrap();
}

#[test]
fn the_same_seed_proposes_the_same_candidates() {
    let f = softmax(&[16, 64], -1);
    let options = Options {
        strategy: Some(Strategy::Random),
        trials: Some(6),
        seed: 11,
        repeat: 1,
        ..Options::default()
    };
    let params = |r: tilefuse_tune::TuneResult| -> Vec<serde_json::Value> {
        r.trials.into_iter().map(|t| t.params).collect()
    };
    let a = params(tune(&f, &Device::cpu(), &options, &[], &mut |_, _| true).unwrap());
    let b = params(tune(&f, &Device::cpu(), &options, &[], &mut |_, _| true).unwrap());
    assert_eq!(a, b);
}

#[test]
fn a_kernel_with_wrong_results_is_disqualified() {
    // The check every candidate passes before its time counts: a kernel of
    // another fusion with the same signature (exp for tanh) is caught.
    let unary = |op| {
        let mut f = Fusion::new();
        let x = f.input(&[8, 32], DType::F32, Some("x")).unwrap();
        let y = f.unary(op, x).unwrap();
        f.output(y).unwrap();
        f
    };
    let (right, wrong) = (unary(UnaryOp::Tanh), unary(UnaryOp::Exp));
    let problem = Problem::new(&right, 5).unwrap();
    let device = Device::cpu();
    let build = |f: &Fusion| {
        let p = heuristics(f, None, &device.info()).unwrap();
        device
            .build(&schedule(f, &p, &device.info()).unwrap())
            .unwrap()
    };
    problem.check(&build(&right)).unwrap();
    let err = problem.check(&build(&wrong)).unwrap_err();
    assert!(err.contains("output 0: element"), "{err}");
}

#[test]
fn given_outputs_and_tolerance_are_what_candidates_are_checked_against() {
    let f = softmax(&[4, 16], -1);
    let device = Device::cpu();
    let kernel = {
        let p = heuristics(&f, None, &device.info()).unwrap();
        device
            .build(&schedule(&f, &p, &device.info()).unwrap())
            .unwrap()
    };
    let exact = Problem::new(&f, 2).unwrap();
    let off: Vec<Tensor> = (exact.want.iter())
        .map(|t| {
            let Data::F32(v) = &t.data else {
                panic!("softmax gives f32")
            };
            let v = v.iter().map(|x| x * 1.0001).collect();
            Tensor::new(t.shape.clone(), Data::F32(v)).unwrap()
        })
        .collect();
    let given = |want: Vec<Tensor>, rtol| {
        Problem::of(&f, Some(exact.inputs.clone()), Some(want.into()), 0, rtol)
    };
    given(off.clone(), 1e-3).unwrap().check(&kernel).unwrap();
    let err = given(off.clone(), 1e-6)
        .unwrap()
        .check(&kernel)
        .unwrap_err();
    assert!(err.contains("output 0: element"), "{err}");
    // Outputs of the wrong shape, outputs without inputs and a NaN
    // tolerance are refused before anything runs.
    let short = Tensor::new(vec![4], Data::F32(vec![0.0; 4])).unwrap();
    let err = given(vec![short], 1e-3).err().unwrap();
    assert!(
        err.contains("expected") && err.contains("output 0"),
        "{err}"
    );
    let err = Problem::of(&f, None, Some(off.clone().into()), 0, 1e-3)
        .err()
        .unwrap();
    assert!(err.contains("need the inputs"), "{err}");
    assert!(given(off, f64::NAN).err().unwrap().contains("rtol"));
}

#[test]
fn an_injected_wrong_candidate_is_disqualified_and_reported() {
    let f = softmax(&[32, 128], -1);
    let options = Options {
        strategy: Some(Strategy::Random),
        trials: Some(6),
        seed: 1,
        repeat: 1,
        corrupt_trial: Some(0),
        ..Options::default()
    };
    let r = tune(&f, &Device::cpu(), &options, &[], &mut |_, _| true).unwrap();
    let wrong = &r.trials[0];
    assert_eq!(wrong.status, Status::Wrong);
    assert!(
        wrong
            .error
            .as_deref()
            .unwrap()
            .contains("output 0: element")
    );
    // The default's params were the wrong candidate: no default time, and
    // the winner is another candidate that passed the check.
    assert_eq!(r.default_time, None);
    assert!(r.trials[1..].iter().any(|t| t.status == Status::Ok));
}

#[test]
fn builds_run_ahead_of_the_timing_without_losing_or_repeating_a_trial() {
    // What a GPU does (the CPU device times one build at a time): four
    // candidates out at once, built on a pool, timed in the order given.
    let f = softmax(&[32, 128], -1);
    let device = Device::cpu();
    let options = Options {
        trials: Some(12),
        seed: 4,
        repeat: 2,
        ..Options::default()
    };
    let problem = Problem::new(&f, options.seed).unwrap();
    let mut ex = LocalExecutor::new(&f, &device, problem).overlapping(true);
    assert_eq!(ex.capacity(), 4);
    let mut seen = Vec::new();
    let r = tune_with(&f, &device.info(), &options, &[], &mut ex, &mut |t, _| {
        seen.push(t.id);
        true
    })
    .unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..r.trials.len()).collect::<Vec<_>>());
    let measured: Vec<_> = (r.trials.iter())
        .filter(|t| t.status != Status::Duplicate)
        .map(|t| t.params.to_string())
        .collect();
    let unique: std::collections::HashSet<_> = measured.iter().collect();
    assert_eq!(
        unique.len(),
        measured.len(),
        "a candidate was measured twice"
    );
    assert!(measured.len() >= 12, "{} measured", measured.len());
    assert_eq!(r.trials[0].status, Status::Ok);
    assert!(r.best_time <= r.default_time.unwrap());
}

/// `f` on the CPU device: the device, random inputs with the reference's
/// outputs, and the default heuristic's params.
fn on_the_cpu(f: Fusion) -> (Fusion, Device, Problem, serde_json::Value) {
    let device = Device::cpu();
    let problem = Problem::new(&f, 1).unwrap();
    let params = heuristics(&f, None, &device.info()).unwrap().to_value();
    (f, device, problem, params)
}

#[test]
fn a_candidate_far_slower_than_the_best_is_cut_on_its_first_launch() {
    let (f, device, problem, params) = on_the_cpu(softmax(&[64, 256], -1));
    let candidate = |best| Candidate {
        id: 0,
        params: params.clone(),
        point: Vec::new(),
        best,
        corrupt: false,
        timing: Timing {
            warmup: 1,
            repeat: 5,
        },
        anchor: None,
    };
    let mut stopwatch = Stopwatch::new(&device, problem);
    let mut measure =
        |c: &Candidate| stopwatch.measure(measure::build_timed(&f, &device, &c.params), c);
    let hopeless = measure(&candidate(Some(1e-12)));
    assert_eq!(hopeless.status, Status::Cut);
    let why = hopeless.error.unwrap();
    assert!(why.contains("first launch"), "{why}");
    let first = measure(&candidate(None));
    assert_eq!(first.status, Status::Ok);
}

#[test]
fn a_candidate_past_its_time_limit_is_stopped_and_recorded() {
    // Scalar 16x16 tiles, one k step at a time (with 8, the CPU runs
    // them as long lane steps since `distribute_short_nests`): a launch
    // longer than the 0.52 s limit on a 2-vCPU VM, as a quick tune's
    // random point can run for minutes. The release build's executor runs
    // 512^3 in 6 ms, so it gets 2048^3 (the debug build gets 768^3: its
    // float64 reference of 2048^3 would take minutes).
    let n = if cfg!(debug_assertions) { 768 } else { 2048 };
    let (f, device, problem, mut params) = on_the_cpu(matmul(n, n, n));
    let tile = |m, n, k| json!({"m": m, "n": n, "k": k});
    params["tile_sizes"] = json!({
        "cta_tile": tile(16, 16, 1),
        "warp_tile": tile(16, 16, 1),
        "instruction_tile": tile(1, 1, 1),
    });
    let candidate = Candidate {
        id: 1,
        params,
        point: Vec::new(),
        best: Some(1e-3),
        corrupt: false,
        timing: Timing {
            warmup: 1,
            repeat: 5,
        },
        anchor: None,
    };
    let start = Instant::now();
    let built = measure::build_timed(&f, &device, &candidate.params);
    let m = Stopwatch::new(&device, problem).measure(built, &candidate);
    // The limit: 20x the best (its check and first launch) + 0.5 s.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(m.status, Status::Cut, "{m:?}");
    let why = m.error.unwrap();
    assert!(
        why.starts_with("stopped after 0.52 s: its first two launches"),
        "{why}"
    );
}

#[test]
fn the_final_run_times_every_finalist_in_every_round() {
    let (f, device, problem, params) = on_the_cpu(softmax(&[16, 64], -1));
    let timing = Timing {
        warmup: 1,
        repeat: 2,
    };
    let finalists = [params.clone(), params.clone(), params];
    let rounds = measure::final_round(&f, &device, &problem, &finalists, timing, 4).unwrap();
    assert_eq!(rounds.len(), 3);
    assert!(
        rounds
            .iter()
            .all(|r| r.len() == 4 && r.iter().all(|&t| t > 0.0))
    );
}

/// A candidate of `params` with no best to be cut against yet.
fn first_candidate(params: serde_json::Value) -> Candidate {
    Candidate {
        id: 0,
        params,
        point: Vec::new(),
        best: None,
        corrupt: false,
        timing: Timing {
            warmup: 1,
            repeat: 5,
        },
        anchor: None,
    }
}

#[test]
fn a_short_kernel_s_trial_counts_its_check_probe_and_two_timings() {
    // Small enough to launch in well under a millisecond in a debug build.
    let (f, device, problem, params) = on_the_cpu(softmax(&[4, 8], -1));
    let mut stopwatch = Stopwatch::new(&device, problem);
    let c = first_candidate(params);
    let mut measure = || stopwatch.measure(measure::build_timed(&f, &device, &c.params), &c);
    // The check and the probe, a short timing (1 + 3), the full one (5).
    assert_eq!(measure().launches, 2 + 4 + 5);
    // Paired on the CPU: the reference's short and full timings too.
    assert_eq!(measure().launches, 2 + 4 + 5 + 4 + 5);
}

/// Tanh, then exp, 16 times over `n` elements: a launch the CPU takes a
/// while over.
fn heavy(n: usize) -> Fusion {
    let mut f = Fusion::new();
    let mut y = f.input(&[n], DType::F32, Some("x")).unwrap();
    for _ in 0..16 {
        let t = f.unary(UnaryOp::Tanh, y).unwrap();
        y = f.unary(UnaryOp::Exp, t).unwrap();
    }
    f.output(y).unwrap();
    f
}

#[test]
fn a_long_kernel_s_trial_takes_a_few_launches() {
    // Sized until a launch takes 2 ms or more on this machine, where
    // three timed launches are all a trial needs.
    let mut n = 1 << 16;
    let (f, device, problem, params) = loop {
        let (f, device, problem, params) = on_the_cpu(heavy(n));
        let kernel = measure::build_timed(&f, &device, &params).0.unwrap();
        if problem.time(&kernel, 1, 1).unwrap() >= 2e-3 || n >= 1 << 24 {
            break (f, device, problem, params);
        }
        n *= 4;
    };
    let mut stopwatch = Stopwatch::new(&device, problem);
    let c = first_candidate(params);
    let mut measure = || stopwatch.measure(measure::build_timed(&f, &device, &c.params), &c);
    let first = measure();
    assert_eq!(first.status, Status::Ok);
    // The check, the probe and three timed launches.
    assert_eq!(first.launches, 2 + 3, "{first:?}");
    // Paired: the reference's three timed launches too.
    let second = measure();
    assert_eq!(second.launches, 2 + 3 + 3, "{second:?}");
}

#[test]
fn long_kernels_get_three_timed_launches() {
    assert_eq!(measure::launches_for(1e-4, 10), 10);
    assert_eq!(measure::launches_for(1e-3, 10), 3);
    assert_eq!(measure::launches_for(0.05, 10), 3);
    assert_eq!(measure::launches_for(0.05, 2), 2);
}
