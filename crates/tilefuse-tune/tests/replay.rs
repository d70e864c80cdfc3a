//! Strategy replay: every strategy run against recorded spaces (see
//! `examples/record_spaces.rs`), deterministic and without a device.

use std::collections::HashSet;

use tilefuse_ir::Fusion;
use tilefuse_runtime::Device;
use tilefuse_testing::{softmax, sum};
use tilefuse_tune::replay::{CONFIRMED, best_of, trials, trials_to_within};
use tilefuse_tune::{Options, Recording, Strategy};

fn recordings() -> Vec<(&'static str, Recording)> {
    ["chain_cpu", "softmax_gpu", "matmul_gpu"]
        .into_iter()
        .map(|name| {
            let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            (name, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

const STRATEGIES: [Strategy; 4] = [
    Strategy::Random,
    Strategy::Pattern,
    Strategy::Surrogate,
    Strategy::Exhaustive,
];

#[test]
fn every_strategy_starts_at_the_base_and_never_repeats_a_point() {
    for (name, r) in recordings() {
        for strategy in STRATEGIES {
            let budget = r.size() / 10;
            let h = r.replay(strategy, budget, 7);
            assert_eq!(trials(&h), budget, "{name} {strategy:?}");
            assert_eq!(h[0].point, r.base);
            let distinct: HashSet<_> = h.iter().map(|o| &o.point).collect();
            assert_eq!(
                distinct.len(),
                h.len(),
                "{name} {strategy:?} repeated a point"
            );
        }
    }
}

#[test]
fn a_replay_is_reproducible_and_exhaustive_finds_the_best() {
    for (name, r) in recordings() {
        for strategy in STRATEGIES {
            assert_eq!(
                r.replay(strategy, 20, 3),
                r.replay(strategy, 20, 3),
                "{name}"
            );
        }
        let all = r.replay(Strategy::Exhaustive, usize::MAX, 0);
        assert_eq!(all.len(), r.size());
        assert_eq!(best_of(&all), r.best(), "{name}");
    }
}

#[test]
fn a_replay_counts_each_kernel_once_as_a_tuning_run_does() {
    // The softmax space: 792 points ran 144 distinct kernels (reduction
    // invocations past a workgroup's rows change nothing).
    let (_, r) = recordings().swap_remove(1);
    assert_eq!(trials(&r.replay(Strategy::Exhaustive, usize::MAX, 0)), 144);
    let h = r.replay(Strategy::Random, 30, 1);
    assert_eq!(trials(&h), 30);
    assert!(h.len() > 30, "random points repeat kernels of this space");
}

#[test]
fn the_surrogate_needs_fewer_trials_than_random_search() {
    // Mean trials to within 5% of the best over ten seeds. The bar is
    // half of random's; on the softmax space it takes about 0.6 (4.0
    // trials against 6.7 over 400 seeds, `tilefuse replay`), so this
    // guards the weaker claim on every space where the default point leaves something to find (the matmul's is
    // the best: every strategy stops at its first trial).
    for (name, r) in recordings() {
        if r.measured(&r.base)
            .time
            .is_some_and(|t| t <= r.best() * 1.05)
        {
            assert_eq!(name, "matmul_gpu", "the default is within 5%");
            continue;
        }
        let mean = |strategy| {
            (0..10)
                .map(|seed| {
                    trials_to_within(&r, strategy, 0.05, seed, r.size()).unwrap_or(r.size())
                })
                .sum::<usize>() as f64
                / 10.0
        };
        let (surrogate, random) = (mean(Strategy::Surrogate), mean(Strategy::Random));
        assert!(
            surrogate < random,
            "{name}: surrogate {surrogate}, random {random}"
        );
    }
}

#[test]
fn the_surrogate_finds_a_near_best_point_in_a_tenth_of_the_space() {
    // The target, on every recorded space: within 5% of the best
    // with at most 10% of the space, in at least 9 of 10 seeds.
    for (name, r) in recordings() {
        let hits = (0..10)
            .filter(|&seed| {
                trials_to_within(&r, Strategy::Surrogate, 0.05, seed, r.size() / 10).is_some()
            })
            .count();
        assert!(hits >= 9, "{name}: {hits}/10");
    }
}

#[test]
fn passes_combine_into_each_point_s_median_and_most_passes_decide_a_failure() {
    let pass = |times: [Option<f64>; 3]| Recording {
        description: "three points".into(),
        fields: vec!["f".into()],
        sizes: vec![3],
        base: vec![0],
        times: (0..3).map(|i| (vec![i], times[i])).collect(),
    };
    let slow_spell = pass([Some(1.0), Some(9.0), Some(9.0)]);
    let passes = [
        pass([Some(2.0), Some(3.0), None]),
        slow_spell,
        pass([Some(1.5), Some(3.5), None]),
    ];
    let r = Recording::median_of(&passes);
    let times: Vec<_> = r.times.iter().map(|(_, t)| *t).collect();
    // Each pass scaled to the median base time, 1.5: [1.5, 2.25, -],
    // [1.5, 13.5, 13.5], [1.5, 3.5, -].
    assert_eq!(times, [Some(1.5), Some(3.5), None]);
    assert_eq!((r.base, r.sizes), (vec![0], vec![3]));
}

#[test]
fn passes_whose_base_ran_in_another_spell_are_scaled_to_one_speed() {
    // Paired times: each pass at the speed its base ran at. Point 1 runs
    // at 0.9 of the base; one pass timed it in a fast moment (0.6).
    let pass = |times: [f64; 3]| Recording {
        description: "three points".into(),
        fields: vec!["f".into()],
        sizes: vec![3],
        base: vec![0],
        times: (0..3).map(|i| (vec![i], Some(times[i]))).collect(),
    };
    let passes = [
        pass([1.0, 0.6, 1.1]),
        pass([1.4, 1.26, 1.54]),
        pass([0.7, 0.63, 0.77]),
    ];
    let r = Recording::median_of(&passes);
    let times: Vec<f64> = r.times.iter().map(|(_, t)| t.unwrap()).collect();
    // Unscaled, point 1's median would be 0.63: two-thirds of the base.
    let want = [1.0, 0.9, 1.1];
    assert!(
        times.iter().zip(want).all(|(t, w)| (t - w).abs() < 1e-9),
        "{times:?}"
    );
}

/// A recording of `fields` of `f` on the CPU device, four points given a
/// time 100x faster than the base's (as if each had caught a fast moment
/// of the machine), then confirmed: the base's time and that moment.
fn confirmed_after_fast_moments(f: &Fusion, fields: &[&str]) -> (Recording, Option<f64>, f64) {
    let device = Device::cpu();
    let options = Options {
        fields: Some(fields.iter().map(|&f| f.into()).collect()),
        repeat: 3,
        ..Options::default()
    };
    let mut r = Recording::record(f, &device, &options, "", &mut |_, _| true).unwrap();
    let base = r.times.iter().find(|(p, _)| *p == r.base).unwrap().1;
    let moment = base.unwrap() / 100.0;
    let others = (r.times.iter_mut()).filter(|(_, t)| t.is_some() && *t != base);
    for (i, (_, t)) in others.step_by(7).take(4).enumerate() {
        // One time a point: kernels stay told apart.
        *t = Some(moment * (1.0 + i as f64 * 1e-6));
    }
    r.confirm(f, &device, &options).unwrap();
    (r, base, moment)
}

#[test]
fn a_recording_s_fastest_kernels_are_confirmed_against_its_base() {
    let f = softmax(&[64, 256], -1);
    let (r, base, moment) = confirmed_after_fast_moments(&f, &["vectorization_factor_reduction"]);
    assert!(
        r.best() > 10.0 * moment,
        "{} against the base's {base:?}",
        r.best()
    );
    assert_eq!(r.times.iter().find(|(p, _)| *p == r.base).unwrap().1, base);
}

#[test]
fn points_the_tuner_repaired_are_confirmed_as_it_measured_them() {
    // Points of a column sum's workgroup size, rows a workgroup and unroll
    // need repair (rows a multiple of the invocations' rows).
    let f = sum(&[2048, 512], 0);
    let fields = [
        "launch.workgroup_size",
        "rows_per_workgroup",
        "unroll_factor_iteration",
    ];
    let (r, _, moment) = confirmed_after_fast_moments(&f, &fields);
    let fastest: Vec<f64> = {
        let mut t: Vec<f64> = r.times.iter().filter_map(|(_, t)| *t).collect();
        t.sort_by(f64::total_cmp);
        t.dedup();
        t.truncate(CONFIRMED);
        t
    };
    assert!(fastest.iter().all(|&t| t > 10.0 * moment), "{fastest:?}");
}
