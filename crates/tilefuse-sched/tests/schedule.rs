use tilefuse_ir::{BinaryOp, DType, Fusion, ReduceOp, TensorId, UnaryOp};
use tilefuse_sched::ir::{MAX_EXPR_DEPTH, Scope, ThreadAxis};
use tilefuse_sched::{Schedule, ScheduleError};

fn softmax(rows: usize, cols: usize) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(&[rows, cols], DType::F32, Some("x")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    f.set_name(e, "e").unwrap();
    let s = f.reduce(ReduceOp::Sum, e, Some(&[1]), true).unwrap();
    let y = f.binary(BinaryOp::Div, e, s).unwrap();
    f.set_name(y, "y").unwrap();
    f.output(y).unwrap();
    f
}

#[test]
fn initial_schedule_prints() {
    let s = Schedule::new(&softmax(4, 8));
    let text = s.to_string();
    println!("{text}");
    assert!(
        text.contains("buffer x: f32[4, 8] global input(0)"),
        "{text}"
    );
    assert!(text.contains("op_1[v0, 0] max= x[v0, v1]"), "{text}");
    assert_eq!(s.get_blocks().len(), 5);
}

#[test]
fn split_bind_inline_and_replay() {
    let f = softmax(4, 1000);
    let mut s = Schedule::new(&f);
    let e = s.get_block("e").unwrap();
    let d = s.get_block("op_2").unwrap();
    s.compute_inline(d).unwrap();
    let loops = s.get_loops(e).unwrap();
    let parts = s
        .split(
            loops[1],
            &[None, Some(256)],
            Some(&["jo".into(), "ji".into()]),
        )
        .unwrap();
    s.bind(loops[0], ThreadAxis::WorkgroupX).unwrap();
    s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
    let text = s.to_string();
    println!("{text}");
    assert!(text.contains("if v1 < 1000:"), "{text}");
    assert!(text.contains("exp((x[v0, v1] - op_1[v0, 0]))"), "{text}");
    let replayed = Schedule::replay_json(&f, &s.trace_json()).unwrap();
    assert_eq!(replayed.to_string(), text);
}

#[test]
fn preconditions_give_typed_errors() {
    let f = softmax(4, 8);
    let mut s = Schedule::new(&f);
    let m = s.get_block("op_1").unwrap();
    let loops = s.get_loops(m).unwrap();
    let err = s.parallel(loops[1]).unwrap_err();
    assert!(
        matches!(
            err,
            ScheduleError::Precondition {
                primitive: "parallel",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("carries the reduction of block op_1"),
        "{err}"
    );
    assert!(
        s.compute_inline(m)
            .unwrap_err()
            .to_string()
            .contains("is a reduction")
    );
    let y = s.get_block("y").unwrap();
    assert!(
        s.compute_inline(y)
            .unwrap_err()
            .to_string()
            .contains("not an intermediate")
    );
    assert!(s.split(loops[0], &[None, None], None).is_err());
    assert!(
        s.split(loops[0], &[Some(3)], None)
            .unwrap_err()
            .to_string()
            .contains("less than the extent")
    );
    let parts = s.split(loops[0], &[Some(2), None], None).unwrap();
    assert!(matches!(
        s.split(loops[0], &[Some(2)], None),
        Err(ScheduleError::StaleLoop(_))
    ));
    assert!(
        s.fuse(&[parts[0], loops[1]])
            .unwrap_err()
            .to_string()
            .contains("only child")
    );
    assert!(
        s.get_block("nope")
            .unwrap_err()
            .to_string()
            .starts_with("no block named \"nope\"")
    );
    let _ = TensorId(0);
}

#[test]
fn compute_at_family_preconditions_and_effect() {
    use tilefuse_testing::{fusions, reverse_compute_at_epilogue};
    let (_, mm) = fusions()
        .into_iter()
        .find(|(n, _)| *n == "matmul_bias_relu")
        .unwrap();
    let mut s = Schedule::new(&mm);
    reverse_compute_at_epilogue(&mut s);
    assert_eq!(
        s.kernel().body.len(),
        1,
        "the epilogue joins the matmul's nest:\n{s}"
    );

    let f = softmax(4, 8);
    let mut s = Schedule::new(&f);
    let y = s.get_block("y").unwrap();
    let m = s.get_block("op_1").unwrap();
    let row = s.get_loops(y).unwrap()[0];
    let err = s.compute_at(m, row).unwrap_err();
    assert!(
        err.to_string()
            .contains("reads op_1 but is not under loop i0"),
        "{err}"
    );
    let e = s.get_block("e").unwrap();
    let err = s.compute_at(y, s.get_loops(e).unwrap()[0]).unwrap_err();
    assert!(
        err.to_string()
            .contains("no block under loop i0 reads block y"),
        "{err}"
    );
    let err = s.reverse_compute_at(m, row).unwrap_err();
    assert!(
        err.to_string()
            .contains("exactly one block under loop i0, it reads 0"),
        "{err}"
    );
}

/// Binding a loop that carries a reduction makes a subgroup reduction,
/// under preconditions: invocation.x, a power-of-two extent, nothing but
/// the reducing block inside.
#[test]
fn binding_a_reduction_loop_reduces_across_a_subgroup() {
    let f = softmax(4, 12);
    let s = Schedule::new(&f);
    let m = s.get_block("op_1").unwrap();
    let k = s.get_loops(m).unwrap()[1];
    let fails = |s: &mut Schedule, l, axis, want: &str| {
        let err = s.bind(l, axis).unwrap_err();
        assert!(
            matches!(
                err,
                ScheduleError::Precondition {
                    primitive: "bind",
                    ..
                }
            ) && err.to_string().contains(want),
            "{err}"
        );
    };
    fails(
        &mut s.clone(),
        k,
        ThreadAxis::WorkgroupX,
        "bind it to an invocation axis, not workgroup.x",
    );
    fails(
        &mut s.clone(),
        k,
        ThreadAxis::InvocationY,
        "only invocation.x",
    );
    fails(&mut s.clone(), k, ThreadAxis::InvocationX, "not 12");
    let mut split = s.clone();
    let parts = split.split(k, &[Some(4), None], None).unwrap();
    fails(
        &mut split,
        parts[0],
        ThreadAxis::InvocationX,
        "only the reducing block",
    );

    let mut s = s;
    let parts = s.split(k, &[None, Some(4)], None).unwrap();
    s.reorder(&[parts[1], parts[0]]).unwrap();
    let partials = s.rfactor(parts[1]).unwrap();
    s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
    let combine = s.get_block("op_1").unwrap();
    let combine = *s.get_loops(combine).unwrap().last().unwrap();
    s.bind(combine, ThreadAxis::InvocationX).unwrap();
    assert!(
        s.to_string()
            .contains("# invocation.x (subgroup reduction)"),
        "{s}"
    );
    let wgsl = tilefuse_sched::codegen::generate(s.kernel()).unwrap();
    assert!(
        wgsl.source.contains("subgroupShuffleXor(tf_sg, 2u)"),
        "{}",
        wgsl.source
    );
    assert_eq!(
        wgsl.stages.iter().map(|st| st.subgroup_lanes).max(),
        Some(4)
    );

    // Partials in workgroup memory are folded there as a tree instead.
    s.set_scope(partials, Scope::Workgroup).unwrap();
    assert!(
        s.to_string().contains("# invocation.x (tree reduction)"),
        "{s}"
    );
    let wgsl = tilefuse_sched::codegen::generate(s.kernel()).unwrap();
    assert!(
        wgsl.source.contains("if (lid.x < 2u)")
            && wgsl.source.contains("if (lid.x < 1u)")
            && !wgsl.source.contains("subgroupShuffleXor"),
        "{}",
        wgsl.source
    );
    assert_eq!(
        wgsl.stages.iter().map(|st| st.subgroup_lanes).max(),
        Some(0)
    );

    // A tree needs no subgroup layout: it folds on any invocation axis.
    let mut y = Schedule::new(&f);
    let k = y.get_loops(m).unwrap()[1];
    let parts = y.split(k, &[None, Some(4)], None).unwrap();
    y.reorder(&[parts[1], parts[0]]).unwrap();
    let partials = y.rfactor(parts[1]).unwrap();
    y.set_scope(partials, Scope::Workgroup).unwrap();
    y.bind(parts[1], ThreadAxis::InvocationY).unwrap();
    let combine = y.get_block("op_1").unwrap();
    let combine = *y.get_loops(combine).unwrap().last().unwrap();
    y.bind(combine, ThreadAxis::InvocationY).unwrap();
    assert!(
        y.to_string().contains("# invocation.y (tree reduction)"),
        "{y}"
    );
    let src = tilefuse_sched::codegen::generate(y.kernel())
        .unwrap()
        .source;
    assert!(
        src.contains("if (lid.y < 2u)") && src.contains("if (lid.y == 0u)"),
        "{src}"
    );
}

/// rfactor over part of an exact split: the partial block starts its
/// partials itself (no fill block). With a tail guard some partials might
/// never start, so a fill block does; under a row loop shared with other
/// blocks, everything is placed in that loop.
#[test]
fn rfactor_self_initializing_and_in_place() {
    let f = softmax(4, 64);
    let mut s = Schedule::new(&f);
    let m = s.get_block("op_1").unwrap();
    let k = *s.get_loops(m).unwrap().last().unwrap();
    let parts = s.split(k, &[Some(4), None], None).unwrap();
    s.rfactor(parts[0]).unwrap();
    let text = s.to_string();
    assert!(!text.contains("op_1_rf_init"), "{text}");
    assert!(
        text.contains("op_1_rf[vrf, v0, 0] max= x[v0, vrf * 16 + v1]"),
        "{text}"
    );

    let mut s = Schedule::new(&f);
    for b in ["op_2", "e"] {
        let b = s.get_block(b).unwrap();
        let _ = s.compute_inline(b);
    }
    let y = s.get_block("y").unwrap();
    let row = s.get_loops(y).unwrap()[0];
    for b in ["op_4", "op_1"] {
        let b = s.get_block(b).unwrap();
        s.compute_at(b, row).unwrap();
    }
    let m = s.get_block("op_1").unwrap();
    let k = *s.get_loops(m).unwrap().last().unwrap();
    let parts = s.split(k, &[None, Some(7)], None).unwrap();
    s.rfactor(parts[1]).unwrap();
    s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
    let text = s.to_string();
    println!("{text}");
    // Fill, partials and combine all sit under the shared row loop.
    assert_eq!(s.kernel().body.len(), 1, "{text}");
    assert!(text.contains("block op_1_rf_init"), "{text}");
    let replayed = Schedule::replay_json(&f, &s.trace_json()).unwrap();
    assert_eq!(replayed.to_string(), text);
}

/// `pipeline` rotates the copies at the front of a loop's body; its
/// preconditions are typed errors, and it replays from the trace.
#[test]
fn pipeline_preconditions_and_replay() {
    let mut f = Fusion::new();
    let x = f.input(&[8, 64], DType::F32, Some("x")).unwrap();
    let y = f.unary(UnaryOp::Exp, x).unwrap();
    f.set_name(y, "y").unwrap();
    f.output(y).unwrap();
    let mut s = Schedule::new(&f);
    let y = s.get_block("y").unwrap();
    let [row, col] = s.get_loops(y).unwrap()[..] else {
        unreachable!("two loops")
    };
    let pre = |e: ScheduleError| match e {
        ScheduleError::Precondition {
            primitive: "pipeline",
            message,
            loops,
            ..
        } => {
            assert_eq!(loops, ["i0"], "the pipelined loop");
            message
        }
        e => panic!("not a pipeline precondition: {e}"),
    };
    let no_copy = pre(s.pipeline(row, 2, 1).unwrap_err());
    assert!(no_copy.contains("does not start with a copy"), "{no_copy}");
    assert!(no_copy.contains("y, a global buffer"), "{no_copy}");
    let copy = s.cache_read(y, "x", Scope::Workgroup).unwrap();
    s.compute_at(copy, row).unwrap();
    s.bind(col, ThreadAxis::InvocationX).unwrap();
    let copy_loop = s.get_loops(copy).unwrap()[1];
    s.bind(copy_loop, ThreadAxis::InvocationX).unwrap();
    for (stages, gap, why) in [
        (1, 0, "stages must be between 2 and 8, got 1"),
        (9, 1, "stages must be between 2 and 8, got 9"),
        (2, 2, "prefetch_gap must be less than stages (2), got 2"),
    ] {
        let message = pre(s.pipeline(row, stages, gap).unwrap_err());
        assert!(message.contains(why), "{message}");
    }
    s.pipeline(row, 3, 1).unwrap();
    let text = s.to_string();
    assert!(
        text.contains("# pipelined: 3 stages, copies 1 ahead"),
        "{text}"
    );
    let again = pre(s.pipeline(row, 3, 1).unwrap_err());
    assert!(again.contains("already Pipelined"), "{again}");
    // Unrolled (before or after), each stage index is a constant.
    s.unroll(row).unwrap();
    let text = s.to_string();
    assert!(text.contains("copies 1 ahead, unrolled"), "{text}");
    let wgsl = tilefuse_sched::codegen::generate(s.kernel())
        .unwrap()
        .source;
    let row_var = format!("l{}", row.0);
    assert!(!wgsl.contains(&format!("for (var {row_var} ")), "{wgsl}");
    assert!(wgsl.contains(&format!("let {row_var} = 7u;")), "{wgsl}");
    let replayed = Schedule::replay_json(&f, &s.trace_json()).unwrap();
    assert_eq!(replayed.to_string(), text);
    // After lowering the copy fills row + 1's stage, the prologue row 0's.
    let k = tilefuse_sched::lower(s.kernel(), tilefuse_sched::Target::Wgsl)
        .unwrap()
        .kernel;
    let staged = k.buffers.iter().find(|b| b.name == "x_wg").unwrap();
    assert_eq!(staged.shape, [3, 1, 64]);
    assert_eq!(k.to_string().matches("block x_wg").count(), 2, "{k}");
}

/// `reverse_compute_at` computes the consumer over the region the
/// producer writes per iteration; writes with gaps (a strided walk) would
/// have it read elements other iterations write, so it refuses them.
#[test]
fn reverse_compute_at_refuses_writes_with_gaps() {
    let mut f = Fusion::new();
    let x = f.input(&[64], DType::F32, Some("x")).unwrap();
    let y = f.unary(UnaryOp::Exp, x).unwrap();
    let z = f.unary(UnaryOp::Neg, y).unwrap();
    f.output(z).unwrap();
    let fresh = Schedule::new(&f);
    let [producer, consumer] = fresh.get_blocks()[..] else {
        unreachable!("two blocks")
    };
    let mut s = fresh.clone();
    let i = s.get_loops(producer).unwrap()[0];
    let [o, m, n] = s.split(i, &[None, Some(2), Some(4)], None).unwrap()[..] else {
        unreachable!("three loops")
    };
    // Under m, o and n write m * 4 + o * 8 + n: 32 elements spread over 60.
    s.reorder(&[m, o, n]).unwrap();
    let err = s.reverse_compute_at(consumer, m).unwrap_err();
    assert!(err.to_string().contains("with gaps"), "{err}");
    // Dense writes under a loop are taken.
    let mut s = fresh;
    let i = s.get_loops(producer).unwrap()[0];
    let outer = s.split(i, &[None, Some(8)], None).unwrap()[0];
    s.reverse_compute_at(consumer, outer).unwrap();
}

/// A chain of `n` ops on one input: `abs`, then `- 0.25`, over and over.
fn chain(n: usize) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(&[4, 8], DType::F32, Some("x")).unwrap();
    let quarter = f.constant(0.25, DType::F32).unwrap();
    let mut y: TensorId = x;
    for i in 0..n {
        y = if i % 2 == 0 {
            f.unary(UnaryOp::Abs, y).unwrap()
        } else {
            f.binary(BinaryOp::Sub, y, quarter).unwrap()
        };
    }
    f.output(y).unwrap();
    f
}

fn deepest(s: &Schedule) -> usize {
    let k = s.kernel();
    (k.blocks_in_order().into_iter())
        .map(|b| k.block(b).value.depth())
        .max()
        .unwrap()
}

#[test]
fn inlining_a_deep_chain_keeps_every_expression_within_the_depth_bound() {
    let mut s = Schedule::new(&chain(5000));
    s.compute_inline_all(&[]);
    let blocks = s.get_blocks().len();
    assert!(deepest(&s) <= MAX_EXPR_DEPTH, "{}", deepest(&s));
    // Kept intermediates every ~128 levels, not one per op.
    assert!((30..=60).contains(&blocks), "{blocks} blocks");
    // A short chain is still inlined whole.
    let mut s = Schedule::new(&chain(100));
    s.compute_inline_all(&[]);
    assert_eq!(s.get_blocks().len(), 1);
}

#[test]
fn compute_inline_refuses_an_expression_past_the_depth_bound() {
    let f = chain(MAX_EXPR_DEPTH + 10);
    let mut s = Schedule::new(&f);
    let mut refused = None;
    for b in s.get_blocks() {
        if let Err(e) = s.compute_inline(b) {
            refused = Some(e);
            break;
        }
    }
    let e = refused.expect("some inline passes the bound");
    assert!(e.to_string().contains("past the limit of 256"), "{e}");
    assert!(deepest(&s) <= MAX_EXPR_DEPTH);
}
