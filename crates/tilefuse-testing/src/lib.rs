//! Test support (a dev-dependency, never published): standard fusions and
//! hand schedules, the matrix that tests of every device run and that
//! examples start from; random inputs; the comparison with the reference.

use tilefuse_ir::{
    BinaryOp, DType, Data, Fusion, Op, ReduceOp, Scalar, Tensor, UnaryOp, check_close,
};

use tilefuse_sched::Schedule;
use tilefuse_sched::ir::{IterKind, LoopId, Scope, ThreadAxis};

/// A named schedule recipe.
pub type Recipe = (&'static str, fn(&mut Schedule));

/// `(name, fusion)` pairs: pointwise with broadcasting, inner and outer
/// reductions, softmax, layernorm, matmul with a bias + relu epilogue.
pub fn fusions() -> Vec<(&'static str, Fusion)> {
    let mut out = Vec::new();
    let mut f = Fusion::new();
    let a = f.input(&[33, 70], DType::F32, Some("a")).unwrap();
    let b = f.input(&[70], DType::F32, Some("b")).unwrap();
    let m = f.binary(BinaryOp::Mul, a, b).unwrap();
    let one = f.constant(1.0, DType::F32).unwrap();
    let p = f.binary(BinaryOp::Add, m, one).unwrap();
    let t = f.unary(UnaryOp::Tanh, p).unwrap();
    f.output(t).unwrap();
    out.push(("pointwise", f));

    let mut f = Fusion::new();
    let x = f.input(&[17, 300], DType::F32, Some("x")).unwrap();
    let s = f.reduce(ReduceOp::Sum, x, Some(&[1]), false).unwrap();
    f.output(s).unwrap();
    out.push(("inner_sum", f));

    let mut f = Fusion::new();
    let x = f.input(&[300, 17], DType::F32, Some("x")).unwrap();
    let s = f.reduce(ReduceOp::Max, x, Some(&[0]), false).unwrap();
    f.output(s).unwrap();
    out.push(("outer_max", f));

    let mut f = Fusion::new();
    let x = f.input(&[9, 130], DType::F32, Some("x")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    let s = f.reduce(ReduceOp::Sum, e, Some(&[1]), true).unwrap();
    let y = f.binary(BinaryOp::Div, e, s).unwrap();
    f.output(y).unwrap();
    out.push(("softmax", f));

    let mut f = Fusion::new();
    let x = f.input(&[6, 96], DType::F32, Some("x")).unwrap();
    let mu = f.reduce(ReduceOp::Mean, x, Some(&[1]), true).unwrap();
    let c = f.binary(BinaryOp::Sub, x, mu).unwrap();
    let sq = f.binary(BinaryOp::Mul, c, c).unwrap();
    let var = f.reduce(ReduceOp::Mean, sq, Some(&[1]), true).unwrap();
    let eps = f.constant(1e-5, DType::F32).unwrap();
    let ve = f.binary(BinaryOp::Add, var, eps).unwrap();
    let r = f.unary(UnaryOp::Rsqrt, ve).unwrap();
    let y = f.binary(BinaryOp::Mul, c, r).unwrap();
    f.output(y).unwrap();
    out.push(("layernorm", f));

    out.push(("matmul_bias_relu", matmul_bias_relu(20, 36, 24)));
    out
}

/// `relu([m, k] @ [k, n] + bias[n])`.
pub fn matmul_bias_relu(m: usize, n: usize, k: usize) -> Fusion {
    let mut f = Fusion::new();
    let a = f.input(&[m, k], DType::F32, Some("a")).unwrap();
    let b = f.input(&[k, n], DType::F32, Some("b")).unwrap();
    let bias = f.input(&[n], DType::F32, Some("bias")).unwrap();
    let mm = f.matmul(a, b, false, false).unwrap();
    let z = f.binary(BinaryOp::Add, mm, bias).unwrap();
    let r = f.unary(UnaryOp::Relu, z).unwrap();
    f.output(r).unwrap();
    f
}

/// `(name, fusion)` pairs the reduction scheduler accepts, beyond those of
/// [`fusions`]: every normalization family, reductions over a middle axis,
/// several row axes, a full reduction, statistics returned with the
/// result, extents that no vector width divides.
pub fn reduction_fusions() -> Vec<(&'static str, Fusion)> {
    let mut out: Vec<(&'static str, Fusion)> = fusions()
        .into_iter()
        .filter(|(n, _)| matches!(*n, "inner_sum" | "outer_max" | "softmax" | "layernorm"))
        .collect();
    out.push(("softmax_3d_rows", softmax(&[3, 5, 40], 2)));
    out.push(("softmax_odd", softmax(&[7, 333], 1)));
    out.push(("softmax_outer", softmax(&[50, 12], 0)));
    out.push(("batch_norm_outer", batch_norm(&[48, 20], 0)));

    let mut f = Fusion::new();
    let x = f.input(&[10, 64], DType::F32, Some("x")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    let s = f.reduce(ReduceOp::Sum, e, Some(&[1]), true).unwrap();
    let l = f.unary(UnaryOp::Log, s).unwrap();
    let y = f.binary(BinaryOp::Sub, d, l).unwrap();
    f.output(y).unwrap();
    out.push(("log_softmax", f));

    let mut f = Fusion::new();
    let x = f.input(&[12, 80], DType::F32, Some("x")).unwrap();
    let w = f.input(&[80], DType::F32, Some("w")).unwrap();
    let sq = f.binary(BinaryOp::Mul, x, x).unwrap();
    let ms = f.reduce(ReduceOp::Mean, sq, Some(&[1]), true).unwrap();
    let eps = f.constant(1e-6, DType::F32).unwrap();
    let r = f.binary(BinaryOp::Add, ms, eps).unwrap();
    let r = f.unary(UnaryOp::Rsqrt, r).unwrap();
    let y = f.binary(BinaryOp::Mul, x, r).unwrap();
    let y = f.binary(BinaryOp::Mul, y, w).unwrap();
    f.output(y).unwrap();
    out.push(("rmsnorm", f));

    let mut f = Fusion::new();
    let x = f.input(&[4, 30, 6], DType::F32, Some("x")).unwrap();
    let s = f.reduce(ReduceOp::Sum, x, Some(&[1]), false).unwrap();
    f.output(s).unwrap();
    out.push(("middle_sum", f));

    let mut f = Fusion::new();
    let x = f.input(&[20, 25], DType::F32, Some("x")).unwrap();
    let s = f.reduce(ReduceOp::Sum, x, None, false).unwrap();
    f.output(s).unwrap();
    out.push(("full_sum", f));

    let mut f = Fusion::new();
    let x = f.input(&[9, 48], DType::F32, Some("x")).unwrap();
    let mu = f.reduce(ReduceOp::Mean, x, Some(&[1]), false).unwrap();
    let mx = f.reduce(ReduceOp::Max, x, Some(&[1]), false).unwrap();
    let gap = f.binary(BinaryOp::Sub, mx, mu).unwrap();
    f.output(mu).unwrap();
    f.output(gap).unwrap();
    out.push(("two_stats", f));
    out
}

/// `(name, fusion)` pairs the matmul scheduler accepts: both transposes,
/// a batch, every epilogue family, extents no tile divides.
pub fn matmul_fusions() -> Vec<(&'static str, Fusion)> {
    let mut out: Vec<(&'static str, Fusion)> = fusions()
        .into_iter()
        .filter(|(n, _)| *n == "matmul_bias_relu")
        .collect();
    let mut f = Fusion::new();
    let a = f.input(&[33, 20], DType::F32, Some("a")).unwrap();
    let b = f.input(&[45, 33], DType::F32, Some("b")).unwrap();
    let mm = f.matmul(a, b, true, true).unwrap();
    f.output(mm).unwrap();
    out.push(("matmul_tt", f));

    let mut f = Fusion::new();
    let a = f.input(&[3, 16, 24], DType::F32, Some("a")).unwrap();
    let b = f.input(&[24, 32], DType::F32, Some("b")).unwrap();
    let r = f.input(&[3, 16, 32], DType::F32, Some("residual")).unwrap();
    let mm = f.matmul(a, b, false, false).unwrap();
    let g = f.unary(UnaryOp::Gelu, mm).unwrap();
    let y = f.binary(BinaryOp::Add, g, r).unwrap();
    f.output(y).unwrap();
    out.push(("batched_gelu_residual", f));

    let mut f = Fusion::new();
    let a = f.input(&[64, 96], DType::F32, Some("a")).unwrap();
    let b = f.input(&[96, 64], DType::F32, Some("b")).unwrap();
    let mm = f.matmul(a, b, false, false).unwrap();
    let half = f.constant(0.5, DType::F32).unwrap();
    let y = f.binary(BinaryOp::Mul, mm, half).unwrap();
    f.output(y).unwrap();
    out.push(("matmul_scaled", f));
    out
}

/// `[m, k] @ [k, n]`.
pub fn matmul(m: usize, n: usize, k: usize) -> Fusion {
    matmul_transposed(m, n, k, false, false)
}

/// An `m x n` product over `k`, A given as `[k, m]` where `transpose_a`
/// and B as `[n, k]` where `transpose_b`.
pub fn matmul_transposed(
    m: usize,
    n: usize,
    k: usize,
    transpose_a: bool,
    transpose_b: bool,
) -> Fusion {
    let mut f = Fusion::new();
    let a_shape = if transpose_a { [k, m] } else { [m, k] };
    let b_shape = if transpose_b { [n, k] } else { [k, n] };
    let a = f.input(&a_shape, DType::F32, Some("a")).unwrap();
    let b = f.input(&b_shape, DType::F32, Some("b")).unwrap();
    let c = f.matmul(a, b, transpose_a, transpose_b).unwrap();
    f.output(c).unwrap();
    f
}

/// The sum of a tensor of `shape` over `axis` (the axis dropped).
pub fn sum(shape: &[usize], axis: i64) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let s = f.reduce(ReduceOp::Sum, x, Some(&[axis]), false).unwrap();
    f.output(s).unwrap();
    f
}

/// Softmax of a tensor of `shape` over `axis`.
pub fn softmax(shape: &[usize], axis: i64) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[axis]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    let s = f.reduce(ReduceOp::Sum, e, Some(&[axis]), true).unwrap();
    let y = f.binary(BinaryOp::Div, e, s).unwrap();
    f.output(y).unwrap();
    f
}

/// Batch norm of a tensor of `shape` over `axis`: `(x - mean) *
/// rsqrt(var + 1e-5)`, the statistics kept as size-1 axes.
pub fn batch_norm(shape: &[usize], axis: i64) -> Fusion {
    batch_norm_over(shape, &[axis])
}

/// [`batch_norm`] over several axes (NCHW's `[0, 2, 3]`).
pub fn batch_norm_over(shape: &[usize], axes: &[i64]) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let mean = f.reduce(ReduceOp::Mean, x, Some(axes), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, mean).unwrap();
    let sq = f.binary(BinaryOp::Mul, d, d).unwrap();
    let var = f.reduce(ReduceOp::Mean, sq, Some(axes), true).unwrap();
    let eps = f.constant(1e-5, DType::F32).unwrap();
    let v = f.binary(BinaryOp::Add, var, eps).unwrap();
    let r = f.unary(UnaryOp::Rsqrt, v).unwrap();
    let y = f.binary(BinaryOp::Mul, d, r).unwrap();
    f.output(y).unwrap();
    f
}

/// Inlines every intermediate that can be inlined.
pub fn inline_all(s: &mut Schedule) {
    s.compute_inline_all(&[]);
}

/// For every block: split its innermost spatial loop by 32 (tail-guarded),
/// bind the outer spatial loop to workgroups and the inner to invocations.
pub fn split_bind(s: &mut Schedule) {
    for b in s.get_blocks() {
        let loops = s.get_loops(b).unwrap();
        let block = s.kernel().block(b).clone();
        let spatial: Vec<_> = loops
            .iter()
            .zip(&block.iters)
            .filter(|(_, it)| it.kind == IterKind::Spatial)
            .map(|(l, _)| *l)
            .collect();
        if let Some(&inner) = spatial.last() {
            let parts = s.split(inner, &[None, Some(32)], None).unwrap();
            s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
            s.bind(parts[0], ThreadAxis::WorkgroupX).unwrap();
        }
    }
}

pub fn vectorize_unroll(s: &mut Schedule) {
    for b in s.get_blocks() {
        let loops = s.get_loops(b).unwrap();
        let Some(&last) = loops.last() else { continue };
        let block = s.kernel().block(b).clone();
        let reduce = block
            .iters
            .last()
            .is_some_and(|it| it.kind == IterKind::Reduce);
        let parts = s.split(last, &[None, Some(4)], None).unwrap();
        if reduce {
            s.unroll(parts[1]).unwrap();
        } else {
            s.vectorize(parts[1]).unwrap();
        }
        if loops.len() > 1 && !reduce {
            let _ = s.parallel(loops[0]);
        }
    }
}

/// Cross-invocation reductions: each reduction's last reduce loop is split
/// by 16 and rfactored over the inner part, which is bound to invocations
/// while the first spatial loop is bound to workgroups.
pub fn rfactor_bind(s: &mut Schedule) {
    rfactor_lanes(s, 16, false);
}

/// `rfactor_bind` over 8 invocations whose partials are combined with
/// subgroup shuffles: the combining loop is bound to the same axis.
pub fn rfactor_subgroup(s: &mut Schedule) {
    rfactor_lanes(s, 8, true);
}

/// `rfactor_subgroup` with the partials in workgroup memory, folded there
/// as a tree, where they share a nest with the combining block (else they
/// stay in a storage buffer, shuffled).
pub fn rfactor_tree(s: &mut Schedule) {
    rfactor_lanes(s, 8, true);
    for b in s.get_blocks() {
        let name = s.block_name(b);
        let Some(combine) = name.strip_suffix("_rf").and_then(|c| s.get_block(c).ok()) else {
            continue;
        };
        let root = |b| s.get_loops(b).unwrap()[0];
        if root(b) == root(combine) {
            s.set_scope(b, Scope::Workgroup).unwrap();
        }
    }
}

fn rfactor_lanes(s: &mut Schedule, lanes: u64, subgroup: bool) {
    inline_all(s);
    for b in s.get_blocks() {
        let block = s.kernel().block(b).clone();
        let loops = s.get_loops(b).unwrap();
        // In an initial nest, loop k drives iterator k.
        let Some(r) = block
            .iters
            .iter()
            .rposition(|it| it.kind == IterKind::Reduce)
        else {
            continue;
        };
        let parts = s.split(loops[r], &[None, Some(lanes)], None).unwrap();
        let name = block.name.clone();
        let rf = s.rfactor(parts[1]).unwrap();
        s.reorder(&[parts[1], parts[0]]).unwrap();
        s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
        if subgroup {
            let combine = s.get_block(&name).unwrap();
            let over_lanes = *s.get_loops(combine).unwrap().last().unwrap();
            s.bind(over_lanes, ThreadAxis::InvocationX).unwrap();
        }
        let outer = s.get_loops(rf).unwrap()[0];
        if outer != parts[1] {
            s.bind(outer, ThreadAxis::WorkgroupX).unwrap();
        }
    }
}

/// Each output row at a time: every other block is computed at the output
/// block's outer loop (producers first), which is bound to workgroups.
pub fn compute_at_rows(s: &mut Schedule) {
    if let Some(row) = rows(s) {
        s.bind(row, ThreadAxis::WorkgroupX).unwrap();
    }
}

/// `compute_at rows` before the binding: the row loop, where it applies.
fn rows(s: &mut Schedule) -> Option<LoopId> {
    inline_all(s);
    let blocks = s.get_blocks();
    let (&out, producers) = blocks.split_last()?;
    let &row = s.get_loops(out).unwrap().first()?;
    if s.kernel().block(out).iters[0].kind == IterKind::Reduce {
        return None; // an outer reduction has no row loop to share
    }
    for &p in producers.iter().rev() {
        s.compute_at(p, row).unwrap();
    }
    Some(row)
}

/// `compute_at rows`, then the first block of each row reads its first
/// input through workgroup memory, loaded cooperatively by 32 invocations;
/// and a matmul accumulates each output row in private memory.
pub fn cache_stage(s: &mut Schedule) {
    let Some(row) = rows(s) else { return };
    s.bind(row, ThreadAxis::WorkgroupX).unwrap();
    if !stage_first_input(s, row) {
        return;
    }
    let mm = s
        .get_blocks()
        .into_iter()
        .find(|&b| s.kernel().block(b).iters.iter().any(|it| it.name == "vk"));
    // An epilogue in the row reads the matmul's result before a copy back
    // after the nest would run: cache_write refuses, the matmul stays.
    if let Some(mm) = mm
        && let Ok(out) = s.cache_write(mm, Scope::Private)
    {
        let outer = s.get_loops(mm).unwrap()[1];
        s.reverse_compute_at(out, outer).unwrap();
    }
}

/// The rows of `compute_at rows` in one workgroup, in order, with the
/// first block's input staged as in `cache_read workgroup` and pipelined
/// over the rows: 3 rotating buffers, each row's copy one row ahead.
pub fn pipelined_stage(s: &mut Schedule) {
    if let Some(row) = rows(s)
        && stage_first_input(s, row)
    {
        s.pipeline(row, 3, 1).unwrap();
    }
}

/// Makes the first block under `row` read its first input through a
/// workgroup copy computed at `row`, spread over 32 invocations; `false`
/// where it reads no input.
fn stage_first_input(s: &mut Schedule, row: LoopId) -> bool {
    let first = s.kernel().blocks_under(row)[0];
    let mut loads = Vec::new();
    s.kernel().block(first).value.loads(&mut loads);
    let Some(input) = loads
        .iter()
        .map(|(b, _)| s.kernel().buffer(*b))
        .find(|b| matches!(b.role, tilefuse_sched::ir::Role::Input(_)))
        .map(|b| b.name.clone())
    else {
        return false;
    };
    let copy = s.cache_read(first, &input, Scope::Workgroup).unwrap();
    s.compute_at(copy, row).unwrap();
    let inner = *s.get_loops(copy).unwrap().last().unwrap();
    let parts = s.split(inner, &[None, Some(32)], None).unwrap();
    s.bind(parts[1], ThreadAxis::InvocationX).unwrap();
    true
}

/// Epilogue fusion: where the output block reads exactly one block of the
/// nest before it, it moves under that nest's outer loop (bound to
/// workgroups). Other fusions keep their inlined schedule.
pub fn reverse_compute_at_epilogue(s: &mut Schedule) {
    inline_all(s);
    let blocks = s.get_blocks();
    let [.., producer, out] = blocks.as_slice() else {
        return;
    };
    let outer = s.get_loops(*producer).unwrap()[0];
    if s.reverse_compute_at(*out, outer).is_ok() {
        s.bind(outer, ThreadAxis::WorkgroupX).unwrap();
    }
}

/// The hand schedules every fusion is tested with.
pub fn recipes() -> [Recipe; 11] {
    [
        ("initial", |_| {}),
        ("inline", inline_all),
        ("inline+split+bind", |s| {
            inline_all(s);
            split_bind(s);
        }),
        ("vectorize+unroll", vectorize_unroll),
        ("rfactor+bind", rfactor_bind),
        ("rfactor+subgroup", rfactor_subgroup),
        ("rfactor+tree", rfactor_tree),
        ("compute_at rows", compute_at_rows),
        ("reverse_compute_at epilogue", reverse_compute_at_epilogue),
        ("cache_read workgroup", cache_stage),
        ("cache_read+pipeline", pipelined_stage),
    ]
}

/// `fusion` with its f32 tensors in `dtype` instead: its inputs,
/// constants and casts to f32 retyped, the ops between them unchanged.
pub fn in_dtype(fusion: &Fusion, dtype: DType) -> Fusion {
    let retype = |d: DType| if d == DType::F32 { dtype } else { d };
    let mut f = Fusion::new();
    for node in fusion.nodes() {
        let op = match &node.op {
            Op::Input { shape, dtype } => Op::Input {
                shape: shape.clone(),
                dtype: retype(*dtype),
            },
            Op::Constant { value, dtype } => {
                f.constant(value.0, retype(*dtype)).expect("a constant");
                continue;
            }
            Op::Cast { dtype } => Op::Cast {
                dtype: retype(*dtype),
            },
            op => op.clone(),
        };
        f.add(op, &node.args, node.name.as_deref())
            .expect("the same ops in another float dtype");
    }
    for &t in fusion.outputs() {
        f.output(t).expect("an output");
    }
    f
}

/// Deterministic, never-zero float inputs for `fusion` (xorshift; `seed`
/// varies them), for device tests that need no random-number crate.
pub fn inputs(fusion: &Fusion, seed: u64) -> Vec<Tensor> {
    fusion
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let shape = fusion.ty(t).expect("an input").shape.clone();
            let mut s = (seed + i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let values: Vec<f64> = (0..shape.iter().product())
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % 20_000) as f64 / 10_000.0 - 1.0
                })
                .collect();
            let dtype = fusion.ty(t).expect("an input").dtype;
            let data = Data::from_fn(dtype, values.len(), |k| Scalar::F(values[k]));
            Tensor::new(shape, data.expect("a small tensor")).expect("sized to the shape")
        })
        .collect()
}

/// Whether outputs match the reference by [`check_close`]'s rule; the
/// message names the first output and element that do not.
pub fn compare(want: &[Tensor], got: &[Tensor], rtol: f32) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("want {} outputs, got {}", want.len(), got.len()));
    }
    for (o, (w, g)) in want.iter().zip(got).enumerate() {
        check_close(&w.data, &g.data, f64::from(rtol)).map_err(|e| format!("output {o}: {e}"))?;
    }
    Ok(())
}
