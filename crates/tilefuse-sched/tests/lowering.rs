//! The lowering pass list: which passes each target runs, what they leave,
//! and the one launch verification every caller shares.

use tilefuse_ir::{BinaryOp, DType, Fusion, ReduceOp, UnaryOp};
use tilefuse_sched::codegen::{Extensions, emit, generate};
use tilefuse_sched::ir::{Expr, Node, Scope, ThreadAxis};
use tilefuse_sched::lowering::{
    LaunchLimit, MAX_COPIED_LOOP_STEPS, MAX_UNROLLED_BLOCKS, PASSES, launch_violations,
    lower_steps, verify_launch,
};
use tilefuse_sched::{DeviceInfo, DeviceLimits, Schedule, Target, lower};
use tilefuse_testing::{fusions, matmul_bias_relu, recipes, softmax, sum};

fn gpu_info() -> DeviceInfo {
    DeviceInfo {
        backend: "vulkan".into(),
        vendor: 0,
        name: "test gpu".into(),
        adapter_type: "discrete_gpu".into(),
        driver: String::new(),
        limits: DeviceLimits {
            max_workgroup_size: [256, 256, 64],
            max_invocations_per_workgroup: 256,
            max_workgroups_per_dimension: 65535,
            max_workgroup_storage_bytes: 16384,
            max_storage_buffer_binding_size: 1 << 27,
            max_storage_buffers_per_stage: 8,
            max_loop_iterations_per_invocation: None,
        },
        features: Vec::new(),
        subgroup_sizes: Some((32, 32)),
        cores: 0,
        simd_width: 0,
    }
}

#[test]
fn each_target_runs_its_passes_in_order() {
    let (_, f) = fusions().remove(0);
    let s = Schedule::new(&f);
    let names = |t| -> Vec<&str> {
        let steps = lower_steps(s.kernel(), t).unwrap();
        steps.iter().map(|s| s.pass).collect()
    };
    let of = |t: Target| -> Vec<&str> {
        (PASSES.iter())
            .filter(|p| p.only.is_none_or(|only| only == t))
            .map(|p| p.name)
            .collect()
    };
    assert_eq!(names(Target::Wgsl), of(Target::Wgsl));
    assert_eq!(names(Target::Cpu), of(Target::Cpu));
    assert!(of(Target::Cpu).contains(&"distribute_short_nests"));
    assert!(!of(Target::Wgsl).contains(&"distribute_short_nests"));
}

#[test]
fn every_fixture_lowers_for_the_cpu_and_codegen_reads_the_one_lowering() {
    for (fname, f) in fusions() {
        for (sname, apply) in recipes() {
            let mut s = Schedule::new(&f);
            apply(&mut s);
            let what = format!("{fname} / {sname}");
            let cpu = lower(s.kernel(), Target::Cpu).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(cpu.launches.len(), s.kernel().body.len(), "{what}");
            assert!(cpu.vectors.loops.is_empty(), "{what}: a WGSL-only pass ran");
            let gpu = lower(s.kernel(), Target::Wgsl).unwrap();
            assert_eq!(
                emit(&gpu, Extensions::default()),
                generate(s.kernel()).unwrap(),
                "{what}"
            );
            let steps = lower_steps(s.kernel(), Target::Wgsl).unwrap();
            let last = steps.last().unwrap();
            assert_eq!(last.text, gpu.to_string(), "{what}");
            // A pass reported unchanged left the text as it found it.
            for pair in steps.windows(2) {
                assert_eq!(pair[1].changed, pair[1].text != pair[0].text, "{what}");
            }
        }
    }
}

/// An element-wise nest over `n` elements, `per_group` invocations a
/// workgroup, the rest over workgroups.
fn bound(n: u64, per_group: u64) -> Schedule {
    let mut f = Fusion::new();
    let x = f.input(&[n as usize], DType::F32, Some("x")).unwrap();
    let y = f.unary(UnaryOp::Exp, x).unwrap();
    f.output(y).unwrap();
    let mut s = Schedule::new(&f);
    let b = s.get_block("op_1").unwrap();
    let l = s.get_loops(b).unwrap()[0];
    let parts = s.split(l, &[None, Some(per_group)], None).unwrap();
    s.bind(parts[0], ThreadAxis::WorkgroupX).unwrap();
    s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
    s
}

#[test]
fn verify_launch_names_the_limit_the_stage_and_the_values() {
    let info = gpu_info();
    let fits = lower(bound(1 << 16, 256).kernel(), Target::Wgsl).unwrap();
    assert_eq!(fits.launches[0].workgroups, [256, 1, 1]);
    assert_eq!(fits.launches[0].workgroup_size, [256, 1, 1]);
    verify_launch(&fits, &info).unwrap();

    let wide = lower(bound(1 << 16, 512).kernel(), Target::Wgsl).unwrap();
    let e = verify_launch(&wide, &info).unwrap_err();
    assert_eq!(e.limit, LaunchLimit::WorkgroupSize(0));
    assert_eq!((e.stage, e.value, e.max), (0, 512, 256));
    assert!(
        e.to_string().contains("max_compute_workgroup_size_x"),
        "{e}"
    );

    let many = lower(bound(1 << 25, 256).kernel(), Target::Wgsl).unwrap();
    let e = verify_launch(&many, &info).unwrap_err();
    assert_eq!(e.limit, LaunchLimit::Workgroups(0));
    assert_eq!((e.value, e.max), (1 << 17, 65535));
}

#[test]
fn nested_unrolled_loops_are_bounded_on_wgsl_only() {
    let mut f = Fusion::new();
    let x = f.input(&[128, 64], DType::F32, Some("x")).unwrap();
    let y = f.unary(UnaryOp::Exp, x).unwrap();
    f.output(y).unwrap();
    let unrolled = |rows: u64| {
        let mut s = Schedule::new(&f);
        let b = s.get_block("op_1").unwrap();
        let [i, j] = s.get_loops(b).unwrap()[..] else {
            panic!("two loops")
        };
        let i = s.split(i, &[None, Some(rows)], None).unwrap()[1];
        s.unroll(i).unwrap();
        s.unroll(j).unwrap();
        s
    };
    let fits = lower(unrolled(64).kernel(), Target::Wgsl).unwrap();
    assert_eq!(fits.launches[0].unrolled_blocks, 64 * 64);
    verify_launch(&fits, &gpu_info()).unwrap();

    let over = lower(unrolled(128).kernel(), Target::Wgsl).unwrap();
    let e = verify_launch(&over, &gpu_info()).unwrap_err();
    assert_eq!(e.limit, LaunchLimit::UnrolledBlocks);
    assert_eq!((e.value, e.max), (128 * 64, MAX_UNROLLED_BLOCKS));
    assert!(
        e.to_string().contains("unroll fewer or shorter loops"),
        "{e}"
    );

    // The CPU device runs unrolled loops as loops: no code is copied.
    let cpu = lower(unrolled(128).kernel(), Target::Cpu).unwrap();
    let cpu_info = DeviceInfo {
        adapter_type: "cpu".into(),
        ..gpu_info()
    };
    assert_eq!(launch_violations(&cpu, &cpu_info), vec![]);
}

/// Loops inside unrolled loops are copied out with them, and drivers
/// unroll short ones themselves: a random schedule that unrolled a
/// 20 x 36 matmul's row and column loops around its 24-step reduction
/// loop took lavapipe minutes and gigabytes to compile. Their steps are
/// bounded on WGSL (loops too long for a driver to unroll count a step a
/// copy), and loops the unrolled ones do not hold are not copies.
#[test]
fn loops_copied_by_unrolled_loops_are_bounded_on_wgsl() {
    let unrolled = |rows: usize, k: usize| {
        let f = matmul_bias_relu(rows, 36, k);
        let mut s = Schedule::new(&f);
        let b = s.get_block("op_3").unwrap();
        let [i, j, _k] = s.get_loops(b).unwrap()[..] else {
            panic!("three loops")
        };
        s.unroll(i).unwrap();
        s.unroll(j).unwrap();
        lower(s.kernel(), Target::Wgsl).unwrap()
    };
    let fits = unrolled(1, 24);
    assert_eq!(fits.launches[0].copied_loop_steps, 36 * 24);
    verify_launch(&fits, &gpu_info()).unwrap();

    // A loop too long for drivers to unroll stays one loop a copy.
    let long = unrolled(20, 48);
    assert_eq!(long.launches[0].copied_loop_steps, 20 * 36);
    verify_launch(&long, &gpu_info()).unwrap();

    let over = unrolled(20, 24);
    let e = verify_launch(&over, &gpu_info()).unwrap_err();
    assert_eq!(e.limit, LaunchLimit::CopiedLoopSteps);
    assert_eq!((e.value, e.max), (20 * 36 * 24, MAX_COPIED_LOOP_STEPS));
    assert!(
        e.to_string().contains("unroll the inner loops instead"),
        "{e}"
    );
    // The epilogue's loops stand alone: one copy each, none counted.
    assert!(over.launches[1..].iter().all(|l| l.copied_loop_steps == 0));
}

/// A softmax whose rows (`rows` x `cols`) are split into workgroups of
/// `per_group` rows, `e` inlined and each other op's nest computed at the
/// row loop inside (as the CPU's short-row default does).
fn softmax_rows(rows: usize, cols: usize, per_group: u64) -> Schedule {
    let f = softmax(&[rows, cols], 1);
    let mut s = Schedule::new(&f);
    s.compute_inline_all(&[]);
    let out = *s.get_blocks().last().unwrap();
    let [i, _] = s.get_loops(out).unwrap()[..] else {
        panic!("two loops")
    };
    let [wg, row] = s.split(i, &[None, Some(per_group)], None).unwrap()[..] else {
        panic!("two parts")
    };
    s.bind(wg, ThreadAxis::WorkgroupX).unwrap();
    for b in s.get_blocks().into_iter().rev().skip(1) {
        s.compute_at(b, row).unwrap();
    }
    s
}

/// Row loops of the loop nests under one row loop, outermost first.
fn row_loops(l: &tilefuse_sched::Lowered) -> Vec<String> {
    let Node::Loop(_, body) = &l.kernel.body[0] else {
        panic!("a loop nest")
    };
    body.iter()
        .filter_map(|n| match n {
            Node::Loop(id, _) => Some(l.kernel.loop_(*id).name.clone()),
            Node::Block(_) => None,
        })
        .collect()
}

/// On the CPU, a workgroup's short rows run nest by nest: each nest gets
/// its own copy of the row loop, so that the device runs it as one long
/// lane step. Long rows, rows too many to stay in L2 between nests, and
/// GPUs keep one row loop around all the nests.
#[test]
fn short_nests_are_distributed_on_the_cpu_only() {
    let short = softmax_rows(1024, 16, 128);
    let cpu = lower(short.kernel(), Target::Cpu).unwrap();
    let rows = row_loops(&cpu);
    assert_eq!(rows.len(), 3, "{}", cpu.kernel);
    assert!(
        rows[1].ends_with("_1") && rows[2].ends_with("_2"),
        "{rows:?}"
    );
    let wgsl = lower(short.kernel(), Target::Wgsl).unwrap();
    assert_eq!(row_loops(&wgsl).len(), 1);
    for long in [softmax_rows(1024, 512, 128), softmax_rows(2048, 128, 1024)] {
        let cpu = lower(long.kernel(), Target::Cpu).unwrap();
        assert_eq!(row_loops(&cpu).len(), 1, "{}", cpu.kernel);
    }
    // A row maximum kept in one private element that every row reuses: a
    // row's nests must run before the next row overwrites it.
    let mut reused = softmax_rows(1024, 16, 128);
    let max = reused.get_blocks()[0];
    reused.set_scope(max, Scope::Private).unwrap();
    let cpu = lower(reused.kernel(), Target::Cpu).unwrap();
    assert_eq!(cpu.kernel.buffer(cpu.kernel.block(max).buffer).numel(), 1);
    assert_eq!(row_loops(&cpu).len(), 1, "{}", cpu.kernel);
}

/// A tree may walk its block's rows inside each step (loops between the
/// bound loop and the block), but a row loop bound afterwards leaves a
/// loop that reduces across invocations without combining them: lowering
/// refuses it instead of racing on the target.
#[test]
fn a_tree_whose_rows_were_bound_afterwards_is_refused() {
    let f = sum(&[256, 64], 0);
    let mut s = Schedule::new(&f);
    let b = s.get_block("op_1").unwrap();
    let [rows, cols] = s.get_loops(b).unwrap()[..] else {
        unreachable!()
    };
    let [serial, lane] = s.split(rows, &[None, Some(32)], None).unwrap()[..] else {
        unreachable!()
    };
    s.reorder(&[lane, cols, serial]).unwrap();
    let partials = s.rfactor(lane).unwrap();
    let [wg, _] = s.split(cols, &[None, Some(16)], None).unwrap()[..] else {
        unreachable!()
    };
    s.reorder(&[wg, serial, lane]).unwrap();
    s.set_scope(partials, Scope::Workgroup).unwrap();
    s.bind(wg, ThreadAxis::WorkgroupX).unwrap();
    s.bind(lane, ThreadAxis::InvocationY).unwrap();
    let combine = s.get_block("op_1").unwrap();
    s.reverse_compute_at(combine, wg).unwrap();
    let [_, row, over_lanes] = s.get_loops(combine).unwrap()[..] else {
        unreachable!()
    };
    s.reorder(&[over_lanes, row]).unwrap();
    s.bind(over_lanes, ThreadAxis::InvocationY).unwrap();
    let wgsl = generate(s.kernel()).unwrap().source;
    assert_eq!(wgsl.matches("workgroupBarrier").count(), 6, "{wgsl}");
    s.bind(row, ThreadAxis::InvocationX).unwrap();
    let err = lower(s.kernel(), Target::Wgsl).unwrap_err();
    assert!(err.to_string().contains("no longer holds only it"), "{err}");
}

/// The value a block of `kernel` named `name` stores.
fn stored<'k>(kernel: &'k tilefuse_sched::ir::Kernel, name: &str) -> &'k Expr {
    let b = kernel.blocks.iter().find(|b| b.name == name);
    &b.unwrap_or_else(|| panic!("no block {name}")).value
}

#[test]
fn loads_of_empty_reductions_become_literals_on_wgsl() {
    let mut f = Fusion::new();
    let a = f.input(&[1, 0], DType::F32, None).unwrap();
    let b = f.input(&[0, 1], DType::F32, None).unwrap();
    let c = f.input(&[], DType::F32, None).unwrap();
    let m = f.matmul(a, b, false, false).unwrap();
    let q = f.binary(BinaryOp::Div, c, m).unwrap();
    f.set_name(q, "q").unwrap();
    // A sum of a non-zero constant depends on its extent: not a literal.
    let one = f.constant(1.0, DType::F32).unwrap();
    let ones = f.broadcast(one, &[3, 4]).unwrap();
    let s = f.reduce(ReduceOp::Sum, ones, Some(&[1]), false).unwrap();
    let r = f.binary(BinaryOp::Div, c, s).unwrap();
    f.set_name(r, "r").unwrap();
    f.output(q).unwrap();
    f.output(r).unwrap();
    let s = Schedule::new(&f);
    let literal_zero = Expr::Const {
        value: 0.0,
        dtype: DType::F32,
    };
    let gpu = lower(s.kernel(), Target::Wgsl).unwrap();
    let Expr::Binary(BinaryOp::Div, _, divisor) = stored(&gpu.kernel, "q") else {
        panic!("a division")
    };
    assert_eq!(**divisor, literal_zero);
    assert!(
        matches!(stored(&gpu.kernel, "r"), Expr::Binary(_, _, s) if matches!(**s, Expr::Load { .. }))
    );
    // The CPU computes IEEE arithmetic on loads as they are.
    let cpu = lower(s.kernel(), Target::Cpu).unwrap();
    assert!(
        matches!(stored(&cpu.kernel, "q"), Expr::Binary(_, _, m) if matches!(**m, Expr::Load { .. }))
    );
}

#[test]
fn literal_arithmetic_is_evaluated_on_wgsl() {
    let mut f = Fusion::new();
    let x = f.input(&[4], DType::F32, None).unwrap();
    let zero = f.constant(0.0, DType::F32).unwrap();
    let log = f.unary(UnaryOp::Log, zero).unwrap();
    let y = f.binary(BinaryOp::Add, x, log).unwrap();
    f.set_name(y, "y").unwrap();
    f.output(y).unwrap();
    let gpu = lower(Schedule::new(&f).kernel(), Target::Wgsl).unwrap();
    let Expr::Binary(BinaryOp::Add, _, term) = stored(&gpu.kernel, "y") else {
        panic!("an addition")
    };
    // WGSL would reject `log(0.0)` when it creates the shader.
    assert_eq!(
        **term,
        Expr::Const {
            value: f64::NEG_INFINITY,
            dtype: DType::F32
        }
    );
}

/// A sum over `axes` of a 4 x 6 x 8 tensor, its reduction loops fused into
/// one loop inside the kept axis's.
fn fused_sum(axes: [i64; 2]) -> Schedule {
    let mut f = Fusion::new();
    let x = f.input(&[4, 6, 8], DType::F32, Some("x")).unwrap();
    let y = f.reduce(ReduceOp::Sum, x, Some(&axes), false).unwrap();
    f.output(y).unwrap();
    let mut s = Schedule::new(&f);
    let b = s.get_blocks()[0];
    let loops = s.get_loops(b).unwrap();
    let kept = (0..3).find(|i| !axes.contains(&(*i as i64))).unwrap();
    let reduced: Vec<_> = axes.iter().map(|&a| loops[a as usize]).collect();
    s.reorder(&[&[loops[kept]], &reduced[..]].concat()).unwrap();
    s.fuse(&reduced).unwrap();
    s
}

/// The extents of the loops around the kernel's one block, outermost first.
fn extents(k: &tilefuse_sched::ir::Kernel) -> Vec<u64> {
    let mut out = Vec::new();
    let mut nodes = &k.body;
    while let [Node::Loop(l, body)] = &nodes[..] {
        out.push(k.loop_(*l).extent);
        nodes = body;
    }
    out
}

#[test]
fn a_fused_loop_over_axes_apart_in_memory_splits_back_on_the_cpu() {
    let apart = fused_sum([0, 2]);
    assert_eq!(extents(apart.kernel()), [6, 32]);
    let cpu = lower(apart.kernel(), Target::Cpu).unwrap();
    assert_eq!(extents(&cpu.kernel), [6, 4, 8], "{}", cpu.kernel);
    let block = &cpu.kernel.blocks[0];
    assert!(
        (block.bindings.iter()).all(|x| x.affine().is_some()),
        "{}",
        cpu.kernel
    );
    let gpu = lower(apart.kernel(), Target::Wgsl).unwrap();
    assert_eq!(extents(&gpu.kernel), [6, 32]);
    // Adjacent axes fused read memory linearly: the loop stays.
    let adjacent = fused_sum([0, 1]);
    let cpu = lower(adjacent.kernel(), Target::Cpu).unwrap();
    assert_eq!(extents(&cpu.kernel), [8, 24], "{}", cpu.kernel);
}

#[test]
fn the_cpu_clips_a_workgroup_wider_than_its_rows() {
    let mut f = Fusion::new();
    let x = f.input(&[8, 64], DType::F32, Some("x")).unwrap();
    let y = f.unary(UnaryOp::Exp, x).unwrap();
    f.output(y).unwrap();
    let mut s = Schedule::new(&f);
    let b = s.get_block("op_1").unwrap();
    let loops = s.get_loops(b).unwrap();
    let lanes = s.split(loops[1], &[None, Some(128)], None).unwrap()[1];
    s.bind(loops[0], ThreadAxis::WorkgroupX).unwrap();
    s.bind(lanes, ThreadAxis::InvocationX).unwrap();
    let extent = |t| lower(s.kernel(), t).unwrap().kernel.loop_(lanes).extent;
    // Invocations 64 to 127 fail the columns' guard: the CPU runs 64 of
    // them, a GPU's workgroup stays as scheduled.
    assert_eq!(extent(Target::Cpu), 64);
    assert_eq!(extent(Target::Wgsl), 128);
    let cpu = lower(s.kernel(), Target::Cpu).unwrap();
    assert_eq!(cpu.launches[0].workgroup_size, [128, 1, 1]);
    assert!(cpu.kernel.needs_guard(b).is_empty());
}
