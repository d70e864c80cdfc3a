//! The pointwise scheduler driven by its params, on the CPU and the GPU.

mod common;

use common::{devices, run};
use serde_json::json;
use tilefuse_ir::{BinaryOp, DType, Fusion, ReduceOp, UnaryOp};
use tilefuse_params::{HeuristicParams, ParamsStruct, PointwiseParams, SchedulerKind};
use tilefuse_runtime::Device;
use tilefuse_sched::codegen::generate;
use tilefuse_schedulers::{can_schedule, heuristics, schedule};
use tilefuse_testing::fusions;

/// `tanh(a * b + 1) * 0.5 + exp(-a)` over `[rows, cols]`, `b` broadcast.
fn chain(rows: usize, cols: usize) -> Fusion {
    let mut f = Fusion::new();
    let a = f.input(&[rows, cols], DType::F32, Some("a")).unwrap();
    let b = f.input(&[cols], DType::F32, Some("b")).unwrap();
    let ab = f.binary(BinaryOp::Mul, a, b).unwrap();
    let one = f.constant(1.0, DType::F32).unwrap();
    let t = f.binary(BinaryOp::Add, ab, one).unwrap();
    let t = f.unary(UnaryOp::Tanh, t).unwrap();
    let half = f.constant(0.5, DType::F32).unwrap();
    let t = f.binary(BinaryOp::Mul, t, half).unwrap();
    let na = f.unary(UnaryOp::Neg, a).unwrap();
    let e = f.unary(UnaryOp::Exp, na).unwrap();
    let y = f.binary(BinaryOp::Add, t, e).unwrap();
    f.output(y).unwrap();
    f
}

fn variant(change: &serde_json::Value) -> HeuristicParams {
    let mut v = PointwiseParams::default().to_value();
    v["launch"]["workgroup_size"] = json!([64, 1, 1]);
    for (k, x) in change.as_object().unwrap() {
        v[k] = x.clone();
    }
    HeuristicParams::from_value(v).unwrap()
}

#[test]
fn default_heuristics_match_the_reference() {
    for device in devices() {
        for f in [chain(37, 72), chain(4, 1000)] {
            let p = heuristics(&f, None, &device.info()).unwrap();
            assert_eq!(p.scheduler(), "pointwise");
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
        }
    }
}

/// Each field, changed on its own, keeps the result right and changes the
/// kernel (its WGSL).
#[test]
fn every_field_changes_the_kernel_and_keeps_the_result() {
    let f = chain(37, 72);
    let changes = [
        json!({"break_point": 1}),
        json!({"break_point": 1, "split_block": true, "launch": {"workgroup_size": [32, 2, 1]}}),
        json!({"break_point": 1, "flip_grid_binding": true}),
        json!({"vectorization_factor": 4}),
        json!({"unroll_factor_inner": 2}),
        json!({"unroll_factor_outer": 3}),
        json!({"launch": {"workgroup_size": [32, 1, 1]}}),
        json!({"launch": {"workgroup_size": [64, 1, 1], "grid": [5, 1, 1]}}),
    ];
    let devices = devices();
    let base = generate(
        schedule(&f, &variant(&json!({})), &devices[0].info())
            .unwrap()
            .kernel(),
    )
    .unwrap()
    .source;
    for change in changes {
        let p = variant(&change);
        for device in &devices {
            run(&f, &p, device).unwrap_or_else(|e| panic!("{change}: {e}"));
        }
        let wgsl = generate(schedule(&f, &p, &devices[0].info()).unwrap().kernel())
            .unwrap()
            .source;
        assert_ne!(wgsl, base, "{change} left the kernel unchanged");
    }
    // split_grid_y_dim only matters past the device's grid limit.
    let mut small = devices[0].info();
    small.limits.max_workgroups_per_dimension = 8;
    let err = schedule(&f, &variant(&json!({})), &small).unwrap_err();
    assert_eq!(err.path, "split_grid_y_dim");
    let p = variant(&json!({"split_grid_y_dim": true}));
    assert!(
        schedule(&f, &p, &small)
            .unwrap()
            .to_string()
            .contains("workgroup.x")
    );
}

#[test]
fn unusable_params_name_the_field() {
    let f = chain(37, 70);
    let info = Device::cpu().info();
    for (change, path) in [
        (json!({"vectorization_factor": 4}), "vectorization_factor"),
        (json!({"break_point": 2}), "break_point"),
        (
            json!({"compile": {"index_type": "i32"}}),
            "compile.index_type",
        ),
        (
            json!({"launch": {"workgroup_size": [64, 1, 2]}}),
            "launch.workgroup_size[2]",
        ),
        (
            json!({"launch": {"workgroup_size": [64, 2, 1]}}),
            "launch.workgroup_size[1]",
        ),
    ] {
        let err = schedule(&f, &variant(&change), &info).unwrap_err();
        assert_eq!(err.path, path, "{change}: {err}");
    }
}

#[test]
fn can_schedule_gives_reasons() {
    let (_, softmax) = fusions()
        .into_iter()
        .find(|(n, _)| *n == "softmax")
        .unwrap();
    assert!(
        can_schedule(&softmax, SchedulerKind::Pointwise)
            .unwrap_err()
            .contains("reduces")
    );
    assert!(can_schedule(&softmax, SchedulerKind::Reduction).is_ok());
    assert!(can_schedule(&chain(2, 2), SchedulerKind::Pointwise).is_ok());
    // Reductions over different axes: no single scheduler takes them.
    let mut f = Fusion::new();
    let x = f.input(&[4, 6], DType::F32, Some("x")).unwrap();
    let rows = f.reduce(ReduceOp::Sum, x, Some(&[1]), false).unwrap();
    let cols = f.reduce(ReduceOp::Sum, x, Some(&[0]), false).unwrap();
    f.output(rows).unwrap();
    f.output(cols).unwrap();
    assert!(
        can_schedule(&f, SchedulerKind::Reduction)
            .unwrap_err()
            .contains("reductions differ")
    );
    assert!(
        heuristics(&f, None, &Device::cpu().info())
            .unwrap_err()
            .to_string()
            .starts_with("scheduler: no scheduler accepts")
    );
}

#[test]
fn unroll_factors_past_the_loop_are_clamped_to_its_steps() {
    // 120 elements, 64 invocations: the inner unroll has 2 steps to take,
    // the outer 1.
    let f = chain(3, 40);
    let info = Device::cpu().info();
    let wgsl = |change| {
        let s = schedule(&f, &variant(&change), &info).unwrap();
        generate(s.kernel()).unwrap().source
    };
    let clamped = wgsl(json!({"unroll_factor_inner": 2}));
    let huge = json!({"unroll_factor_inner": 16, "unroll_factor_outer": 16});
    assert_eq!(wgsl(huge.clone()), clamped);
    for device in devices() {
        run(&f, &variant(&huge), &device).unwrap();
    }
}

#[test]
fn a_stage_past_the_wgsl_size_bound_is_refused_before_the_driver() {
    let Some(gpu) = common::gpu() else { return };
    // One invocation a workgroup unrolling 16 x 16 copies of a sum of 256
    // `tanh` terms (a balanced tree: shallow, so inlined whole).
    let mut f = Fusion::new();
    let x = f.input(&[64, 1024], DType::F32, Some("x")).unwrap();
    let mut terms: Vec<_> = (0..256)
        .map(|i| {
            let c = f.constant(f64::from(i), DType::F32).unwrap();
            let t = f.binary(BinaryOp::Mul, x, c).unwrap();
            f.unary(UnaryOp::Tanh, t).unwrap()
        })
        .collect();
    while terms.len() > 1 {
        let pairs = terms
            .chunks(2)
            .map(|p| f.binary(BinaryOp::Add, p[0], p[1]).unwrap());
        terms = pairs.collect();
    }
    let y = terms[0];
    f.output(y).unwrap();
    let p = variant(&json!({
        "unroll_factor_inner": 16,
        "unroll_factor_outer": 16,
        "launch": {"workgroup_size": [1, 1, 1]},
    }));
    let s = schedule(&f, &p, &gpu.info()).unwrap();
    let e = gpu
        .build(&s)
        .err()
        .expect("a stage over the bound")
        .to_string();
    assert!(e.contains("past the limit of 1048576 bytes a stage"), "{e}");
}
