//! The reduction scheduler driven by its params, on the CPU and the GPU.

mod common;

use common::{check_fields, device_kinds, devices, merged, merged_value, run, wgsl};
use serde_json::{Value, json};
use tilefuse_ir::{BinaryOp, DType, Fusion, ReduceOp, UnaryOp};
use tilefuse_params::{HeuristicParams, ParamsStruct, ReductionParams};
use tilefuse_runtime::Device;
use tilefuse_sched::ir::{LoopKind, Role, Scope, ThreadAxis};
use tilefuse_sched::lowering::{Lowered, Target, lower};
use tilefuse_schedulers::{heuristics, schedule};
use tilefuse_testing::{reduction_fusions, sum};

fn fusion(name: &str) -> Fusion {
    reduction_fusions()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

#[test]
fn default_heuristics_match_the_reference() {
    for device in devices() {
        for (name, f) in reduction_fusions() {
            let p = heuristics(&f, None, &device.info()).unwrap();
            assert_eq!(p.scheduler(), "reduction", "{name}");
            run(&f, &p, &device)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}\n{p:?}", device.info().name));
        }
    }
}

/// The inner-reduction fixtures (normalizations, sums, 3-D rows).
const INNER: [&str; 6] = [
    "softmax",
    "layernorm",
    "rmsnorm",
    "log_softmax",
    "inner_sum",
    "softmax_3d_rows",
];

/// Inner reductions: a persistent, cross-invocation base with vec4 loads.
fn inner_base() -> Value {
    let mut v = ReductionParams::default().to_value();
    v["launch"]["workgroup_size"] = json!([32, 1, 1]);
    v["reduction_invocations"] = json!(16);
    v["cross_invocation_inner_reduction"] = json!(true);
    v["persistent_kernel"] = json!(true);
    v["rows_per_workgroup"] = json!(2);
    v
}

/// Outer reductions: columns on invocations, whole columns per invocation.
fn outer_base() -> Value {
    let mut v = ReductionParams::default().to_value();
    v["fastest_dim"] = json!(false);
    v["launch"]["workgroup_size"] = json!([8, 1, 1]);
    v["rows_per_workgroup"] = json!(8);
    v["persistent_kernel"] = json!(true);
    v
}

#[test]
fn every_inner_field_changes_the_kernel_and_keeps_the_result() {
    check_fields(fusion, &INNER, &inner_base(), &inner_changes());
}

/// One change of each field from `inner_base`.
fn inner_changes() -> [Value; 13] {
    [
        json!({"persistent_kernel": false}),
        json!({"project_persistent_buffers": true}),
        json!({"flip_grid": true}),
        json!({"cross_invocation_inner_reduction": false, "rows_per_workgroup": 32}),
        json!({"persistent_kernel": false, "cross_workgroup_inner_reduction": true}),
        json!({"persistent_kernel": false, "cross_workgroup_inner_reduction": true,
               "launch": {"grid": [2, 3, 1]}}),
        json!({"vectorization_factor_reduction": 2}),
        json!({"unroll_factor_reduction": 2}),
        json!({"unroll_factor_iteration": 2, "rows_per_workgroup": 4}),
        json!({"rows_per_workgroup": 4}),
        json!({"reduction_invocations": 8, "rows_per_workgroup": 4}),
        json!({"launch": {"workgroup_size": [64, 1, 1]}, "rows_per_workgroup": 4}),
        json!({"launch": {"grid": [3, 1, 1]}}),
    ]
}

#[test]
fn every_outer_field_changes_the_kernel_and_keeps_the_result() {
    check_fields(
        fusion,
        &["softmax_outer"],
        &outer_base(),
        &[
            json!({"persistent_kernel": false}),
            json!({"flip_grid": true}),
            json!({"cross_invocation_outer_reduction": true, "reduction_invocations": 4,
                   "launch": {"workgroup_size": [32, 1, 1]}}),
            json!({"persistent_kernel": false, "cross_workgroup_outer_reduction": true}),
            json!({"vectorization_factor_iteration": 2, "rows_per_workgroup": 16}),
            json!({"unroll_factor_reduction": 4}),
            json!({"unroll_factor_iteration": 2, "rows_per_workgroup": 16}),
            json!({"launch": {"workgroup_size": [4, 1, 1]}}),
        ],
    );
    check_fields(
        fusion,
        &["middle_sum"],
        &outer_base(),
        &[
            json!({"schedule_3d": true}),
            json!({"cross_invocation_outer_reduction": true, "reduction_invocations": 2,
                   "launch": {"workgroup_size": [16, 1, 1]}}),
        ],
    );
}

#[test]
fn unusable_params_name_the_field() {
    let mut info = Device::cpu().info();
    info.limits.max_invocations_per_workgroup = 256;
    let cases = [
        (
            "softmax",
            inner_base(),
            json!({"fastest_dim": false}),
            "fastest_dim",
        ),
        (
            "outer_max",
            outer_base(),
            json!({"fastest_dim": true}),
            "fastest_dim",
        ),
        // The CPU device has no subgroups.
        (
            "softmax",
            inner_base(),
            json!({"subgroup_inner_reduction": true,
            "compile": {"use_subgroups": true}}),
            "subgroup_inner_reduction",
        ),
        (
            "softmax",
            inner_base(),
            json!({"subgroup_outer_reduction": true,
            "compile": {"use_subgroups": true}}),
            "subgroup_outer_reduction",
        ),
        (
            "softmax",
            inner_base(),
            json!({"cross_workgroup_inner_reduction": true}),
            "cross_workgroup_inner_reduction",
        ),
        (
            "softmax",
            inner_base(),
            json!({"cross_invocation_outer_reduction": true}),
            "cross_invocation_outer_reduction",
        ),
        (
            "softmax",
            inner_base(),
            json!({"vectorization_factor_iteration": 2}),
            "vectorization_factor_iteration",
        ),
        (
            "softmax_odd",
            inner_base(),
            json!({"vectorization_factor_reduction": 4}),
            "vectorization_factor_reduction",
        ),
        (
            "softmax",
            inner_base(),
            json!({"rows_per_workgroup": 3}),
            "rows_per_workgroup",
        ),
        (
            "softmax",
            inner_base(),
            json!({"schedule_3d": true}),
            "schedule_3d",
        ),
        (
            "softmax",
            inner_base(),
            json!({"compile": {"index_type": "i32"}}),
            "compile.index_type",
        ),
        (
            "softmax",
            inner_base(),
            json!({"launch": {"workgroup_size": [512, 1, 1]}}),
            "launch.workgroup_size",
        ),
    ];
    for (name, base, change, path) in cases {
        let err = schedule(&fusion(name), &merged(&base, &change), &info).unwrap_err();
        assert_eq!(err.path, path, "{name} {change}: {err}");
    }
}

/// Subgroup params checked against a device with subgroups of 8.
#[test]
fn subgroup_params_fit_the_subgroup() {
    let mut info = Device::cpu().info();
    info.backend = "vulkan".into();
    info.subgroup_sizes = Some((8, 8));
    let on = json!({"subgroup_inner_reduction": true, "compile": {"use_subgroups": true}});
    let cases = [
        // 16 reduction invocations do not fit in a subgroup of 8.
        (json!({}), "reduction_invocations"),
        (
            json!({"cross_invocation_inner_reduction": false, "rows_per_workgroup": 32}),
            "subgroup_inner_reduction",
        ),
    ];
    for (change, path) in cases {
        let p = merged(&merged_value(&inner_base(), &on), &change);
        let err = schedule(&fusion("softmax"), &p, &info).unwrap_err();
        assert_eq!(err.path, path, "{change}: {err}");
    }
    let fits = merged(
        &merged_value(&inner_base(), &on),
        &json!({"reduction_invocations": 8, "rows_per_workgroup": 4}),
    );
    assert!(schedule(&fusion("softmax"), &fits, &info).is_ok());
}

/// Subgroup reductions on the GPU: every fusion family, persistent or
/// not, rows recomputed or kept, inner and outer. Where the rows are
/// recomputed, the persistent kernel needs no workgroup memory at all.
#[test]
fn subgroup_reductions_match_the_reference() {
    let Some(gpu) = common::gpu() else { return };
    let Some((smallest, _)) = gpu.info().subgroup_sizes.filter(|(min, _)| *min >= 8) else {
        eprintln!("subgroup checks skipped: {:?}", gpu.info().subgroup_sizes);
        return;
    };
    eprintln!("subgroups of {smallest} or more");
    let sub = json!({
        "subgroup_inner_reduction": true, "compile": {"use_subgroups": true},
        "reduction_invocations": 8, "launch": {"workgroup_size": [16, 1, 1]},
    });
    let inner = merged_value(&inner_base(), &sub);
    for name in INNER {
        for change in [
            json!({"project_persistent_buffers": true}),
            json!({}),
            json!({"persistent_kernel": false}),
            json!({"unroll_factor_reduction": 2, "vectorization_factor_reduction": 2}),
        ] {
            let p = merged(&inner, &change);
            run(&fusion(name), &p, &gpu).unwrap_or_else(|e| panic!("{name} {change}: {e}"));
        }
    }
    let recomputed = merged(&inner, &json!({"project_persistent_buffers": true}));
    let source = wgsl(&fusion("softmax"), &recomputed, &gpu);
    assert!(source.contains("subgroupShuffleXor"), "{source}");
    assert!(
        !source.contains("Barrier") && !source.contains("var<workgroup>"),
        "{source}"
    );

    let outer = merged_value(
        &outer_base(),
        &json!({
            "cross_invocation_outer_reduction": true, "reduction_invocations": 2,
            "subgroup_outer_reduction": true, "compile": {"use_subgroups": true},
            "rows_per_workgroup": 4,
        }),
    );
    for name in ["softmax_outer", "middle_sum", "outer_max"] {
        for change in [json!({}), json!({"persistent_kernel": false})] {
            let p = merged(&outer, &change);
            run(&fusion(name), &p, &gpu).unwrap_or_else(|e| panic!("{name} {change}: {e}"));
        }
    }
}

#[test]
fn device_limits_are_params_errors() {
    let mut info = Device::cpu().info();
    info.limits.max_workgroup_storage_bytes = 256;
    let kept = merged(&inner_base(), &json!({"project_persistent_buffers": false}));
    let err = schedule(&fusion("softmax"), &kept, &info).unwrap_err();
    assert_eq!(err.path, "project_persistent_buffers", "{err}");
    assert!(err.to_string().contains("256"), "{err}");

    let mut info = Device::cpu().info();
    info.backend = "vulkan".into();
    info.limits.max_loop_iterations_per_invocation = Some(100);
    let serial = merged(
        &inner_base(),
        &json!({"cross_invocation_inner_reduction": false, "rows_per_workgroup": 32}),
    );
    let err = schedule(&fusion("softmax"), &serial, &info).unwrap_err();
    assert_eq!(err.path, "reduction_invocations", "{err}");
}

#[test]
fn heuristics_differ_by_device_kind() {
    let f = fusion("softmax");
    let [c, g, l] = device_kinds().map(|d| heuristics(&f, None, &d).unwrap());
    assert_ne!(c, g);
    assert_ne!(g, l);
    let [HeuristicParams::Reduction(g), HeuristicParams::Reduction(l)] = [g, l] else {
        unreachable!("reductions")
    };
    // Rows of 130: a discrete GPU folds 16 partials a row as a tree ...
    assert!(
        g.cross_invocation_inner_reduction && !g.subgroup_inner_reduction,
        "{g:?}"
    );
    assert_eq!(g.reduction_invocations, 16);
    // ... lavapipe shuffles one subgroup's, or without subgroups takes a
    // dispatch per reduction.
    assert!(
        l.subgroup_inner_reduction && l.compile.use_subgroups,
        "{l:?}"
    );
    assert_eq!(l.reduction_invocations, 8);
    let mut plain = device_kinds()[2].clone();
    plain.subgroup_sizes = None;
    let HeuristicParams::Reduction(p) = heuristics(&f, None, &plain).unwrap() else {
        unreachable!("a reduction")
    };
    assert!(!p.subgroup_inner_reduction && !p.persistent_kernel, "{p:?}");
}

/// The default reduction params of `f` on lavapipe.
fn on_lavapipe(f: &Fusion) -> ReductionParams {
    match heuristics(f, None, &device_kinds()[2]).unwrap() {
        HeuristicParams::Reduction(p) => p,
        other => panic!("not a reduction: {other:?}"),
    }
}

/// lavapipe unrolls the steps of an invocation that walks a whole column,
/// not those of several invocations sharing one, and gives those at most
/// 16 columns a workgroup (see the heuristics).
#[test]
fn lavapipe_unrolls_whole_columns_only() {
    let columns = |shape: &[usize]| {
        let p = on_lavapipe(&sum(shape, 0));
        let per_workgroup = p.rows_per_workgroup.unwrap();
        (
            per_workgroup,
            p.reduction_invocations,
            p.unroll_factor_reduction,
        )
    };
    assert_eq!(columns(&[1024, 1024]), (64, 1, 4));
    assert_eq!(columns(&[8, 1024]), (64, 1, 1), "eight steps a column");
    assert_eq!(columns(&[3000, 100]), (16, 8, 1));
    assert_eq!(columns(&[3000, 10]), (8, 8, 1));
}

/// lavapipe's rows of up to four subgroup steps share workgroups (whole
/// ones, 64 or more) and unroll steps that divide them evenly; rows of 32
/// steps or more (in fours) unroll four rows' steps in turn instead of
/// four steps of one row.
#[test]
fn lavapipe_rows_by_length() {
    let rows = |shape: &[usize]| {
        let p = on_lavapipe(&tilefuse_testing::softmax(shape, -1));
        let unroll = (p.unroll_factor_reduction, p.unroll_factor_iteration);
        (p.rows_per_workgroup, unroll)
    };
    assert_eq!(rows(&[4096, 128]), (Some(16), (4, 1)));
    assert_eq!(rows(&[1000, 64]), (Some(8), (2, 1)), "8 rows divide 1000");
    assert_eq!(rows(&[4096, 100]), (Some(16), (1, 1)), "ragged steps");
    assert_eq!(rows(&[64, 64]), (None, (2, 1)), "too few workgroups");
    assert_eq!(rows(&[4096, 512]), (None, (4, 1)), "sixteen steps a row");
    assert_eq!(rows(&[4096, 1024]), (None, (1, 4)));
    assert_eq!(rows(&[1001, 1024]), (None, (4, 1)), "rows not in fours");
}

/// The full-shape output of a reduction over scattered axes is laid out
/// otherwise than the permuted tensor the reduction reads, and written a
/// row at a time in loops of its own. Those loops are split across the
/// row's reduction invocations as the reduction is: each invocation used
/// to write the whole row (8x the work), and four unrolled rows of that
/// passed a WGSL stage's budget, so lavapipe refused its own default
/// params (a fuzzer's find). The defaults and one change of each field
/// match the reference on both devices.
#[test]
fn scattered_rows_split_their_output_across_the_invocations() {
    let mut f = Fusion::new();
    let x = f
        .input(&[1, 4, 8, 4, 4, 16], DType::F32, Some("x"))
        .unwrap();
    let neg = f.unary(UnaryOp::Neg, x).unwrap();
    let s = f
        .reduce(ReduceOp::Sum, neg, Some(&[0, 1, 3, 4, 5]), false)
        .unwrap();
    f.output(neg).unwrap();
    f.output(s).unwrap();
    let p = on_lavapipe(&f);
    assert!(p.reduction_invocations > 1, "{p:?}");
    let nest = schedule(&f, &p.clone().into(), &device_kinds()[2]).unwrap();
    let k = nest.kernel();
    let b = nest.get_block("op_1").unwrap();
    // The block's loops bound to invocations cover the workgroup (those
    // left out would each run the same instances).
    let bound: u64 = (nest.get_loops(b).unwrap().iter())
        .map(|&l| k.loop_(l))
        .filter(|l| matches!(l.kind, LoopKind::Bound(a) if !a.is_workgroup()))
        .map(|l| l.extent)
        .product();
    let workgroup = p.launch.workgroup_size.unwrap().iter().product::<u32>();
    assert_eq!(bound, u64::from(workgroup), "{nest}");
    for device in devices() {
        let defaults = heuristics(&f, None, &device.info()).unwrap();
        let changed = inner_changes().map(|c| merged(&inner_base(), &c));
        for p in std::iter::once(defaults).chain(changed) {
            let name = &device.info().name;
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{name}: {e}\n{p:?}"));
        }
    }
}

/// A batch norm over NCHW's `[0, 2, 3]` normalizes in NCHW, not in the
/// permuted layout its reductions read: that nest runs flat over the
/// elements, a workgroup of invocations (on a GPU with four lanes each),
/// not one element a workgroup (a million workgroups for 16 x 64 x 32 x
/// 32).
#[test]
fn a_tensor_laid_out_otherwise_than_the_rows_runs_flat() {
    let f = tilefuse_testing::batch_norm_over(&[4, 8, 16, 16], &[0, 2, 3]);
    for info in device_kinds() {
        let nest = schedule(&f, &heuristics(&f, None, &info).unwrap(), &info).unwrap();
        let k = nest.kernel();
        let out = (nest.get_blocks().into_iter())
            .find(|&b| matches!(k.buffer(k.block(b).buffer).role, Role::Output(_)))
            .unwrap();
        let loops: Vec<_> = (nest.get_loops(out).unwrap().iter())
            .map(|&l| k.loop_(l))
            .collect();
        let lanes = (loops.iter()).find(|l| l.kind == LoopKind::Bound(ThreadAxis::InvocationX));
        let (invocations, vectorized) = if info.is_gpu() {
            (256, true)
        } else {
            (1024, false)
        };
        assert_eq!(lanes.map(|l| l.extent), Some(invocations), "{nest}");
        let last = loops.last().unwrap().kind;
        assert_eq!(last == LoopKind::Vectorized, vectorized, "{nest}");
    }
    for device in devices() {
        let p = heuristics(&f, None, &device.info()).unwrap();
        run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
    }
}

/// An NCHW batch norm whose N and C are alike (3 x 3 x 7 x 28) is laid
/// out otherwise all the same: its statistics are read at its iterator 1.
/// Taken for the permuted layout by its shape, its output was scheduled by
/// its axis 0's rows and every GPU's defaults were refused.
#[test]
fn a_tensor_shaped_like_the_permuted_one_is_still_laid_out_otherwise() {
    for shape in [[3, 3, 7, 28], [16, 16, 4, 4]] {
        let f = tilefuse_testing::batch_norm_over(&shape, &[0, 2, 3]);
        for info in device_kinds() {
            let p = heuristics(&f, None, &info).unwrap();
            schedule(&f, &p, &info).unwrap_or_else(|e| panic!("{shape:?} {}: {e}", info.name));
        }
        for device in devices() {
            let p = heuristics(&f, None, &device.info()).unwrap();
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
        }
    }
}

/// Columns longer than lavapipe's loop budget (65535 iterations an
/// invocation) across a column's few invocations: the defaults spread the
/// rows over workgroups, pointwise nests too, instead of being refused.
#[test]
fn long_columns_spread_over_workgroups_within_the_loop_budget() {
    let lavapipe = &device_kinds()[2];
    for f in [
        sum(&[600_000, 2], 0),
        tilefuse_testing::softmax(&[600_000, 2], 0),
    ] {
        let p = on_lavapipe(&f);
        assert!(p.cross_workgroup_outer_reduction, "{p:?}");
        schedule(&f, &p.into(), lavapipe).unwrap_or_else(|e| panic!("{e}"));
        for device in devices() {
            let p = heuristics(&f, None, &device.info()).unwrap();
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
        }
    }
}

/// Short rows share CPU workgroups: up to 1024 rows where there are
/// thousands (the last one ragged), fewer where that keeps four workgroups a
/// thread, fewer where the workgroup's elements would pass 32768. Rows of
/// more than 2048 share one only as a lone reduction (their nests run a
/// row at a time: see `rows_per_workgroup`).
#[test]
fn short_rows_share_cpu_workgroups_and_match_the_reference() {
    let cpu = Device::cpu();
    let threads = cpu.info().cores.max(1);
    let many = 4096 * threads + 3;
    let some = 512 * threads + 3;
    let workgroup = |f: &Fusion| {
        let HeuristicParams::Reduction(p) = heuristics(f, None, &cpu.info()).unwrap() else {
            unreachable!("a reduction")
        };
        p.launch.workgroup_size.map(|w| w[0])
    };
    for (f, rows) in [
        (sum(&[many, 16], 1), 1024),
        (tilefuse_testing::softmax(&[many, 40], 1), 512),
        (sum(&[some, 1024], 1), 32),
        (sum(&[16 * threads, 16], 1), 4),
    ] {
        assert_eq!(workgroup(&f), Some(rows), "{}", f.to_json());
        let p = heuristics(&f, None, &cpu.info()).unwrap();
        run(&f, &p, &cpu).unwrap();
    }
    // Rows of 257 to 2048 through several nests run nest by nest: they
    // share workgroups as a lone reduction's do; longer ones do not.
    let softmax = |cols| workgroup(&tilefuse_testing::softmax(&[some, cols], 1));
    assert_eq!(softmax(257), Some(64));
    assert_eq!(softmax(2049), Some(1));
    assert_eq!(workgroup(&sum(&[2 * threads, 16], 1)), Some(1));
}

/// On the CPU, rows of 257 to 2048 that pass through several nests run
/// nest by nest over all rows (not persistent); shorter rows, longer ones
/// and lone reductions keep a row's nests together.
#[test]
fn mid_length_rows_run_nest_by_nest_on_the_cpu() {
    let cpu = Device::cpu();
    let persistent = |f: &Fusion| {
        let p = heuristics(f, None, &cpu.info()).unwrap();
        let HeuristicParams::Reduction(r) = &p else {
            unreachable!("a reduction")
        };
        run(f, &p, &cpu).unwrap();
        r.persistent_kernel
    };
    let softmax = |cols| tilefuse_testing::softmax(&[6, cols], 1);
    assert!(persistent(&softmax(256)));
    assert!(!persistent(&softmax(257)));
    assert!(!persistent(&softmax(2048)));
    assert!(persistent(&softmax(2049)));
    assert!(persistent(&sum(&[6, 1024], 1)));
}

/// Row sums whose rows share a CPU workgroup fold each row where it lies
/// (`fold_rows_as_runs`, or side by side below 16), bit for bit as a workgroup of
/// one row folds it through its tape: rows of one tile, of more than a
/// tile, of a length that a tile pads (those still run through the tape),
/// and short ones. Sums of squares (a tape, not a load) run a few rows at
/// a time into a staged run and fold there alike, also rows longer than
/// a stage (each a run of its own).
#[test]
fn grouped_row_sums_fold_where_they_lie_as_one_row_would() {
    let cpu = Device::cpu();
    let shapes = [[64, 200], [8, 520], [64, 130], [64, 40], [4, 3000]];
    for f in shapes.iter().flat_map(|s| [sum(s, 1), sum_of_squares(s)]) {
        let x = tilefuse_testing::inputs(&f, 5);
        let run_with = |rows: u64| {
            let mut p = heuristics(&f, None, &cpu.info()).unwrap();
            p = p
                .with("launch.workgroup_size", json!([rows, 1, 1]))
                .unwrap();
            let s = schedule(&f, &p, &cpu.info()).unwrap();
            cpu.build(&s).unwrap().run(&x).unwrap()
        };
        assert_eq!(run_with(16), run_with(1), "{}", f.to_json());
    }
}

/// `sum(x * x)` along the rows of `shape`.
fn sum_of_squares(shape: &[usize]) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let sq = f.binary(BinaryOp::Mul, x, x).unwrap();
    let s = f.reduce(ReduceOp::Sum, sq, Some(&[1]), false).unwrap();
    f.output(s).unwrap();
    f
}

/// A workgroup with more rows than the fusion: the rows past the end take
/// no part in a tree, whose steps would fold their indices, which land on
/// other rows' partials, into those.
#[test]
fn rows_past_the_end_stay_out_of_a_tree() {
    let p = merged(
        &inner_base(),
        &json!({"launch": {"workgroup_size": [512, 1, 1]}, "reduction_invocations": 8,
                "rows_per_workgroup": null}),
    );
    for device in devices() {
        for name in ["softmax_odd", "layernorm", "inner_sum"] {
            run(&fusion(name), &p, &device)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}", device.info().name));
        }
    }
}

/// Without subgroups, outer reductions fold their partials as a tree along
/// invocation.y (the reduction invocations' axis) instead of every
/// invocation reading them all.
#[test]
fn outer_partials_fold_as_a_tree_along_y() {
    let f = fusion("softmax_outer");
    let p = merged(
        &outer_base(),
        &json!({"cross_invocation_outer_reduction": true, "reduction_invocations": 4,
                "launch": {"workgroup_size": [32, 1, 1]}}),
    );
    let src = wgsl(&f, &p, &Device::cpu());
    assert!(
        src.contains("(lid.y < 2u)") && src.contains("(lid.y < 1u)"),
        "{src}"
    );
    for device in devices() {
        run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
    }
}

/// On a GPU, an outer tree reduction whose invocations each take several
/// columns (unrolled, vectorized) folds them all in one tree, a barrier
/// per step for all of them, not a reduction nest and a tree per column.
#[test]
fn columns_of_an_invocation_share_one_tree_on_a_gpu() {
    let f = sum(&[256, 40], 0);
    let p = merged(
        &outer_base(),
        &json!({"cross_invocation_outer_reduction": true, "reduction_invocations": 32,
                "launch": {"workgroup_size": [32, 1, 1]}, "unroll_factor_iteration": 2,
                "vectorization_factor_iteration": 4}),
    );
    let gpu = &device_kinds()[1];
    let nest = schedule(&f, &p, gpu).unwrap();
    let src = tilefuse_sched::codegen::generate(nest.kernel())
        .unwrap()
        .source;
    // Five steps of the tree, and the barrier before it.
    assert_eq!(src.matches("workgroupBarrier").count(), 6, "{src}");
    assert!(nest.to_string().contains("(tree reduction)"), "{nest}");
    for device in devices() {
        run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
    }
}

/// On the CPU device, every nest of an outer normalization that runs nest
/// by nest walks its lanes along the kept, contiguous axis: its loops over
/// the reduced axis go outside the invocations, for the pointwise nests as
/// for the reductions. With the columns outside, each row of the exp and
/// the division was a strided walk down a column (a softmax over the
/// columns of 1024 x 4096 took 43 ms, 6.4 ms after). A persistent kernel
/// keeps its rows inside: its reductions, computed at the rows, would run
/// again for every row (a 1024 x 256 batch norm took 1.3 s).
#[test]
fn outer_normalizations_walk_their_lanes_along_the_kept_axis_on_the_cpu() {
    let f = tilefuse_testing::softmax(&[64, 256], 0);
    let cpu = &device_kinds()[0];
    for persistent in [false, true] {
        let mut p = heuristics(&f, None, cpu).unwrap().to_value();
        p["persistent_kernel"] = json!(persistent);
        // Column blocks, the rows not spread (whose partials run apart).
        p["cross_workgroup_outer_reduction"] = json!(false);
        p["launch"]["grid"] = Value::Null;
        let p = HeuristicParams::from_value(p).unwrap();
        let nest = schedule(&f, &p, cpu).unwrap();
        let k = nest.kernel();
        for b in nest.get_blocks() {
            let loops = nest.get_loops(b).unwrap();
            let innermost = k.loop_(*loops.last().unwrap());
            let instances: u64 = loops.iter().map(|&l| k.loop_(l).extent).product();
            let name = nest.block_name(b);
            assert_eq!(
                instances,
                64 * 256,
                "{name} runs {instances} times:\n{nest}"
            );
            assert!(
                persistent || matches!(innermost.kind, LoopKind::Bound(_)),
                "{name} ends in {innermost:?}:\n{nest}",
            );
        }
        for device in devices() {
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
        }
    }
}

/// On the CPU device, the pointwise nests of an outer normalization whose
/// reductions spread their rows over workgroups take the same slices of
/// the rows, one a workgroup, so that they run on every thread (in one
/// workgroup, a softmax over the columns of 4096 x 300 took 1.9 ms on two
/// threads, numpy 1.6; 0.93 ms spread).
#[test]
fn spread_normalizations_spread_their_pointwise_nests_on_the_cpu() {
    let cpu = &tilefuse_sched::DeviceInfo {
        cores: 2,
        ..device_kinds()[0].clone()
    };
    let f = tilefuse_testing::softmax(&[640, 24], 0);
    let p = heuristics(&f, None, cpu).unwrap();
    let HeuristicParams::Reduction(r) = &p else {
        panic!("reduction params")
    };
    let groups = u64::from(r.launch.grid.expect("rows spread")[1]);
    let nest = schedule(&f, &p, cpu).unwrap();
    let k = nest.kernel();
    let mut spread = 0;
    for b in nest.get_blocks() {
        let block = k.block(b);
        if block.reduce.is_some() || k.buffer(block.buffer).shape != [640, 24] {
            continue;
        }
        let outer = k.loop_(nest.get_loops(b).unwrap()[0]);
        let name = nest.block_name(b);
        assert_eq!(
            (outer.kind, outer.extent),
            (LoopKind::Bound(ThreadAxis::WorkgroupY), groups),
            "{name}:\n{nest}"
        );
        spread += 1;
    }
    assert!(spread >= 2, "the exp and the division:\n{nest}");
    for device in devices() {
        run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
    }
}

/// On the CPU device, an outer normalization's statistics epilogue (the
/// mean's `sum / n`, `rsqrt(var / n + eps)`) is computed once per column,
/// each in a nest of its own, where inlined it was computed again for
/// every element (a batch norm over 4096 x 300: 1.14 ms, 0.75 once); a
/// GPU inlines it (a nest of its own costs it a launch).
#[test]
fn outer_statistics_are_computed_once_on_the_cpu() {
    let f = tilefuse_testing::batch_norm(&[640, 24], 0);
    let [cpu, gpu, lavapipe] = device_kinds();
    for (info, apart) in [(cpu, 2), (gpu, 0), (lavapipe, 0)] {
        let p = heuristics(&f, None, &info).unwrap();
        let nest = schedule(&f, &p, &info).unwrap();
        let k = nest.kernel();
        let statistics: Vec<_> = (nest.get_blocks().into_iter())
            .filter(|&b| {
                k.block(b).reduce.is_none() && k.buffer(k.block(b).buffer).shape == [1, 24]
            })
            .collect();
        assert_eq!(statistics.len(), apart, "{}:\n{nest}", info.adapter_type);
        for b in statistics {
            let loops = nest.get_loops(b).unwrap();
            let instances: u64 = loops.iter().map(|&l| k.loop_(l).extent).product();
            assert_eq!(instances, 24, "{}:\n{nest}", nest.block_name(b));
        }
        run(&f, &p, &Device::cpu()).unwrap();
    }
    for device in devices() {
        let p = heuristics(&f, None, &device.info()).unwrap();
        run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
    }
}

/// On the CPU device, an outer reduction too narrow to give each thread a
/// block of 1024 columns takes all its columns in one block and, where
/// such blocks are too few for the threads, spreads its rows over
/// workgroups that divide them evenly (an uneven last slice runs row by
/// row); a wide one keeps its column blocks.
#[test]
fn narrow_column_reductions_spread_their_rows_on_the_cpu() {
    // Two cores, as CI has, whatever this machine has.
    let cpu = &tilefuse_sched::DeviceInfo {
        cores: 2,
        ..device_kinds()[0].clone()
    };
    let cores = 2;
    let softmax = tilefuse_testing::softmax;
    // Each case: the rows reduced and the columns, whether they spread, and
    // whether the columns take one block.
    for (f, [rows, cols], spread, whole) in [
        (sum(&[4000, 300], 0), [4000, 300], true, true),
        (sum(&[64, 512, 32], 1), [512, 32], false, true),
        (softmax(&[640, 24], 0), [640, 24], true, true),
        (sum(&[1009, 64], 0), [1009, 64], false, false),
        (sum(&[16, 64], 0), [16, 64], false, false),
        (
            sum(&[64, 2048 * cores], 0),
            [64, 2048 * cores],
            false,
            false,
        ),
    ] {
        let p = heuristics(&f, None, cpu).unwrap();
        let HeuristicParams::Reduction(r) = &p else {
            panic!("reduction params")
        };
        assert_eq!(r.cross_workgroup_outer_reduction, spread, "{rows} x {cols}");
        let block = r.rows_per_workgroup.unwrap();
        assert_eq!(block == cols as u32, whole, "{rows} x {cols}: {block}");
        if spread {
            let grid = r.launch.grid.unwrap();
            assert_eq!(grid[0], 1);
            assert!(
                (rows as u32).is_multiple_of(grid[1]) && rows as u32 / grid[1] >= 16,
                "{grid:?}"
            );
        }
        for device in devices() {
            run(&f, &p, &device).unwrap_or_else(|e| panic!("{}: {e}", device.info().name));
        }
    }
}

/// The rows of a 3-D tensor are one fused loop, split into workgroups.
/// Its quotient and remainder by the middle axis are simplified once
/// lowered (`simplify_bindings`; a loop of one iteration counts as its
/// one value), so its buffers are realized as a matrix's are. A 32 x 128 x
/// 128 softmax kept whole-tensor buffers: on the CPU device it took 3.8x
/// the time of a 4096 x 128 one, and a discrete GPU's default heuristic
/// asked for 2.3 MB of workgroup memory and was refused. The cube here
/// is 16 x 256 x 128: its runs of 256 rows hold a whole CPU workgroup of
/// the matrix's (256 rows of 128), so both get the same workgroups.
#[test]
fn rows_of_a_3d_tensor_lower_as_a_matrix_does() {
    for mut info in device_kinds() {
        info.limits.max_workgroup_storage_bytes = 1 << 30;
        let lowered = |shape: &[usize]| {
            let f = tilefuse_testing::softmax(shape, shape.len() as i64 - 1);
            let p = heuristics(&f, None, &info).unwrap();
            let s = schedule(&f, &p, &info).unwrap();
            lower(s.kernel(), Target::of(&info)).unwrap()
        };
        let (cube, matrix) = (lowered(&[16, 256, 128]), lowered(&[4096, 128]));
        let memory = |l: &Lowered| -> (Vec<u64>, u64) {
            let local = (l.kernel.buffers.iter())
                .filter(|b| b.scope != Scope::Global)
                .map(|b| b.shape.iter().product());
            (local.collect(), l.launches[0].workgroup_bytes)
        };
        assert_eq!(
            memory(&cube),
            memory(&matrix),
            "{}\n{cube}",
            info.adapter_type
        );
        // The CPU's workgroups take whole rows of the middle axis: no
        // division is left for its lanes to step through.
        let k = &cube.kernel;
        let divides = (k.blocks_in_order().into_iter())
            .flat_map(|b| k.block(b).bindings.clone())
            .any(|x| x.affine().is_none());
        assert!(!divides || info.is_gpu(), "{cube}");
    }
}
