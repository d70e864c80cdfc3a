//! The kernel → program compiler: each node becomes a step, a loop
//! around a single block a lane step (with a tape where its value and
//! store allow), recognized nests the GEMM or row-by-row fast paths.

use tilefuse_ir::{DType, ReduceOp, Scalar};
use tilefuse_sched::ir::{
    Block, BlockId, BufferId, Expr, Index, IterKind, Kernel, LoopId, Node, Scope, Var, flat_offset,
};

use super::code::{BlockCode, Bound, Counted, LaneBound, RowsCode, Step, TapeCode, TapeStore};
use super::gemm_match::gemm_code;
use super::loop_index::LoopIndex;
use super::nest::{
    block_bounds, hoisted_bounds, in_one_thread, loop_chain, single_block, through_units,
};
use super::tape::Tape;
use super::value::{Access, Value};

pub(super) fn compile_node(kernel: &Kernel, node: &Node) -> Step {
    match node {
        Node::Block(b) => Step::Block(compile_block(kernel, kernel.block(*b), None)),
        Node::Loop(..) if let Some(g) = gemm_code(kernel, node) => Step::Gemm(Box::new(g)),
        Node::Loop(l, body) if let Some(r) = rows_code(kernel, *l, body) => Step::Rows(Box::new(r)),
        Node::Loop(l, body) if let Some(s) = coalesced(kernel, *l, body) => s,
        Node::Loop(l, body) => {
            let lp = kernel.loop_(*l);
            let parallel = !in_one_thread(kernel, *l);
            match single_block(kernel, body) {
                Some(b) if !parallel => Step::Lanes {
                    var: l.0 as usize,
                    extent: lp.extent as i64,
                    block: compile_block(kernel, kernel.block(b), Some(Var::Loop(*l))),
                    parallel: false,
                },
                _ => {
                    let steps: Vec<Step> = body.iter().map(|n| compile_node(kernel, n)).collect();
                    let work = lp.extent.saturating_mul(Step::total_work(&steps));
                    Step::Loop {
                        var: l.0 as usize,
                        extent: lp.extent as i64,
                        parallel: parallel && work >= MIN_PARALLEL_WORK,
                        bounds: (hoisted_bounds(kernel, *l, body).into_iter())
                            .map(|(x, b)| (LoopIndex::new(x), b))
                            .collect(),
                        body: steps,
                    }
                }
            }
        }
    }
}

/// Block instances below which a parallel loop runs serially: handing
/// chunks to the pool's workers costs some 5 µs, as much as a few thousand
/// lanes of work. On 2 threads (`pool::share`), the chain
/// `tanh(a*b+1)*0.5+exp(-a)` over 256 x 128 elements: 38 µs serially, 26
/// through the pool; 64 x 128 even (BENCHMARKS.md).
pub(super) const MIN_PARALLEL_WORK: u64 = 1 << 13;

/// Multiply-adds of the GEMM micro-kernel per block instance of the
/// estimate: they come 16 to a vector instruction (a 32^3 matmul on two
/// threads: 4.9 µs serially, 6.2 through the pool).
const FMAS_PER_INSTANCE: u64 = 16;

impl Step {
    /// Block instances the step runs (an estimate of its work).
    pub(super) fn work(&self) -> u64 {
        match self {
            Step::Block(_) => 1,
            Step::Lanes { extent, .. } => *extent as u64,
            Step::Rows(r) => (r.r.extent as u64).saturating_mul(r.lanes.extent as u64),
            Step::Gemm(g) => {
                (g.k as u64)
                    .saturating_mul(g.rows as u64)
                    .saturating_mul(g.lanes as u64)
                    / FMAS_PER_INSTANCE
            }
            Step::Loop { extent, body, .. } => {
                (*extent as u64).saturating_mul(Step::total_work(body))
            }
        }
    }

    pub(super) fn total_work(steps: &[Step]) -> u64 {
        steps.iter().fold(0, |sum, s| sum.saturating_add(s.work()))
    }
}

/// A chain of loops, each the only child of the one before (looking
/// through loops of one iteration), around one block that stores through
/// a tape without reducing, when the chain is contiguous: each loop moves
/// every access by the inner loops' extents times the innermost's step.
/// One lane step over all their iterations then runs the chain (their
/// variables stay 0), spread over the threads where the chain has a
/// parallel or workgroup loop. Schedulers split a GPU's stores into
/// unrolled vec4s and bind rows to workgroups; lane by lane, a 64-wide
/// store in 16 steps of 4 cost a 64^3 matmul 40 % of its time in index
/// evaluation, and a 256 x 128 chain a row at a time 25 %. A chain in one
/// thread that is contiguous only in another order runs in that order
/// (see [`reordered`]).
fn coalesced(kernel: &Kernel, outer: LoopId, body: &[Node]) -> Option<Step> {
    let (inner, id) = loop_chain(kernel, body, &mut Vec::new())?;
    let chain: Vec<LoopId> = std::iter::once(outer).chain(inner).collect();
    let block = kernel.block(id);
    if block.reduce.is_some() {
        return None;
    }
    if chain.len() >= 2
        && let Some(step) = lane_step(kernel, &chain, block)
    {
        return Some(step);
    }
    reordered(kernel, &chain, block)
}

/// The chain's loops sorted by how far each moves the store, outermost
/// first, when all run in one thread and no load reads the stored buffer
/// (so no iteration depends on another): the longest run of innermost
/// loops of that order that is contiguous becomes one lane step, inside
/// the other loops in their nest's order. A GPU schedule splits a tile's
/// rows and columns over invocations and then within them (an invocation
/// of 4 x 4 elements: row, column, row, column), so its accumulator's
/// start and store ran 4 lanes at a time; so they run 32 (a 256^3 matmul
/// in such invocations: 2.3 ms, then 0.5 ms).
fn reordered(kernel: &Kernel, chain: &[LoopId], block: &Block) -> Option<Step> {
    let store = flat_offset(&block.indices, &kernel.buffer(block.buffer).shape);
    let store = kernel.offset_over_loops(block, &store);
    let mut order: Vec<(i64, LoopId)> = (chain.iter())
        .map(|&l| Some((store.linear_in(Var::Loop(l))?.0, l)))
        .collect::<Option<_>>()?;
    order.sort_by_key(|&(stride, _)| std::cmp::Reverse(stride));
    let order: Vec<LoopId> = order.into_iter().map(|(_, l)| l).collect();
    let mut loads = Vec::new();
    block.value.loads(&mut loads);
    let in_place = loads.iter().any(|&(b, _)| b == block.buffer);
    if order == chain || in_place || !chain.iter().all(|&l| in_one_thread(kernel, l)) {
        return None;
    }
    let (lanes, mut step) = (0..order.len())
        .filter(|&i| order[i..] != chain[chain.len() - 1..])
        .find_map(|i| Some((&order[i..], lane_step(kernel, &order[i..], block)?)))?;
    for &l in chain.iter().rev().filter(|l| !lanes.contains(l)) {
        step = Step::Loop {
            var: l.0 as usize,
            extent: kernel.loop_(l).extent as i64,
            parallel: false,
            bounds: Vec::new(),
            body: vec![step],
        };
    }
    Some(step)
}

/// `block` as one lane step over the `chain` of loops (outermost first),
/// when they move every access as one variable would and the block
/// stores through a tape.
fn lane_step(kernel: &Kernel, chain: &[LoopId], block: &Block) -> Option<Step> {
    let lane = *chain.last()?;
    let code = compile_block(kernel, block, Some(Var::Loop(lane)));
    code.tape.as_ref()?;
    // Whether `x` moves with the chain as one variable would: each loop
    // by the inner loops' extents times the innermost's step.
    let as_one = |x: &Index, lane_step: i64| {
        let mut step = lane_step;
        chain.windows(2).rev().all(|pair| {
            step *= kernel.loop_(pair[1]).extent as i64;
            (x.linear_in(Var::Loop(pair[0]))).is_some_and(|(coef, _)| coef == step)
        })
    };
    let contiguous = |a: &Access| {
        let step = a.linear.as_ref().map_or(0, |(coef, _)| *coef);
        as_one(&kernel.offset_over_loops(block, &a.offset), step)
    };
    if !contiguous(&code.store) || !all_loads(&code.value, &contiguous) {
        return None;
    }
    // The chain's lanes run as one variable past the innermost extent: a
    // bound must not move with them, or hold for a prefix of that variable.
    let in_chain = |x: &Index| chain.iter().any(|&l| x.mentions(Var::Loop(l)));
    if code.uniform.iter().any(|(x, _)| in_chain(x.index()))
        || !code.prefix.iter().all(|p| as_one(p.rest.index(), p.coef))
    {
        return None;
    }
    // Across threads, every lane must be independent of the others and
    // of the thread: global buffers only, none both loaded and stored.
    let threaded = !chain.iter().all(|&l| in_one_thread(kernel, l));
    let global = |a: &Access| kernel.buffers[a.buffer].scope == Scope::Global;
    let independent = global(&code.store)
        && all_loads(&code.value, &|a| global(a) && a.buffer != code.store.buffer);
    if threaded && !independent {
        return None;
    }
    let extent: i64 = (chain.iter())
        .map(|&l| kernel.loop_(l).extent as i64)
        .product();
    Some(Step::Lanes {
        var: lane.0 as usize,
        extent,
        block: code,
        parallel: threaded && extent as u64 >= MIN_PARALLEL_WORK,
    })
}

/// The outer-reduction nest under loop `r`, if `body` is one: a serial
/// loop over lanes `j` (through loops of one iteration) whose block has a
/// combining tape, stores to elements that do not move with `r`, reads
/// loads that move linearly with it, and has a reduce iterator that `r`
/// drives upward (so only `r = 0` can be an element's first visit).
pub(super) fn rows_code(kernel: &Kernel, r: LoopId, body: &[Node]) -> Option<RowsCode> {
    let mut units = Vec::new();
    let Node::Loop(j, j_body) = through_units(kernel, body, &mut units)? else {
        return None;
    };
    if !in_one_thread(kernel, r) || !in_one_thread(kernel, *j) {
        return None;
    }
    let id = single_block(kernel, j_body)?;
    let block = compile_block(kernel, kernel.block(id), Some(Var::Loop(*j)));
    let tape = block.tape.as_ref()?;
    if !block.uniform.is_empty() || !block.prefix.is_empty() {
        return None;
    }
    let rv = Var::Loop(r);
    let drives_up = block.reduce_iters.iter().any(|&i| {
        block.bindings[i]
            .index()
            .linear_in(rv)
            .is_some_and(|(coef, _)| coef > 0)
    });
    let combines = matches!(tape.into, TapeStore::Combine(_));
    if !combines || tape.store.index().mentions(rv) || !tape.tape.linear_in(rv) || !drives_up {
        return None;
    }
    Some(RowsCode {
        r: Counted::of(kernel, r),
        lanes: Counted::of(kernel, *j),
        block,
    })
}

pub(super) fn compile_block(kernel: &Kernel, block: &Block, lane: Option<Var>) -> BlockCode {
    let id = kernel
        .blocks
        .iter()
        .position(|b| std::ptr::eq(b, block))
        .expect("block of this kernel");
    let access = |buffer: BufferId, indices: &[Index]| {
        let offset = flat_offset(indices, &kernel.buffer(buffer).shape);
        let linear = lane.and_then(|v| kernel.offset_over_loops(block, &offset).linear_in(v));
        Access {
            buffer: buffer.0 as usize,
            offset,
            linear,
        }
    };
    fn value(e: &Expr, access: &dyn Fn(BufferId, &[Index]) -> Access) -> Value {
        match e {
            Expr::Const { value, dtype } => Value::Const(Scalar::F(*value).to(*dtype), *dtype),
            Expr::Load { buffer, indices } => Value::Load(access(*buffer, indices)),
            Expr::Unary(op, a) => Value::Unary(*op, Box::new(value(a, access))),
            Expr::Binary(op, a, b) => {
                Value::Binary(*op, Box::new(value(a, access)), Box::new(value(b, access)))
            }
            Expr::Select(c, a, b) => Value::Select(
                Box::new(value(c, access)),
                Box::new(value(a, access)),
                Box::new(value(b, access)),
            ),
            Expr::Cast(d, a) => Value::Cast(*d, Box::new(value(a, access))),
        }
    }
    let lane_reduces = lane.is_some_and(|v| {
        block
            .iters
            .iter()
            .zip(&block.bindings)
            .any(|(it, b)| it.kind == IterKind::Reduce && b.mentions(v))
    });
    let store = access(block.buffer, &block.indices);
    let value = value(&block.value, &access);
    let block_id = BlockId(id as u32);
    let Bounds {
        predicates,
        uniform,
        prefix,
    } = bounds(kernel, block_id, lane);
    let per_lane = !predicates.is_empty()
        || !all_loads(&value, &|a| a.linear.is_some())
        || match store.linear {
            None => true,
            Some((0, _)) => !lane_reduces,
            Some(_) => false,
        };
    let dtypes: Vec<DType> = kernel.buffers.iter().map(|b| b.dtype).collect();
    let tape = (lane.is_some() && !per_lane)
        .then(|| tape_code(&value, &store, block.reduce, lane_reduces, &dtypes))
        .flatten();
    BlockCode {
        tape,
        bindings: block.bindings.iter().cloned().map(LoopIndex::new).collect(),
        predicates,
        uniform,
        prefix,
        reduce_iters: (0..block.iters.len())
            .filter(|&i| block.iters[i].kind == IterKind::Reduce)
            .collect(),
        store,
        value,
        reduce: block.reduce,
        init: block.init,
        dtype: kernel.buffer(block.buffer).dtype,
        lane_reduces,
        per_lane,
    }
}

/// A block's guards and predicates, sorted by how a lane step checks them
/// (see `BlockCode`).
struct Bounds {
    predicates: Vec<Bound>,
    uniform: Vec<(LoopIndex, i64)>,
    prefix: Vec<LaneBound>,
}

/// A block's guards and predicates, sorted for lane steps over `lane`:
/// within the loops' ranges, those the same for every lane, those that
/// hold for a prefix of the lanes, and the rest.
fn bounds(kernel: &Kernel, id: BlockId, lane: Option<Var>) -> Bounds {
    let mut out = Bounds {
        predicates: Vec::new(),
        uniform: Vec::new(),
        prefix: Vec::new(),
    };
    for (x, bound) in block_bounds(kernel, id) {
        let Some(lane) = lane else {
            out.uniform.push((LoopIndex::new(x), bound));
            continue;
        };
        let x = kernel.within_loops(&x);
        match x.linear_in(lane) {
            Some((0, _)) => out.uniform.push((LoopIndex::new(x), bound)),
            Some((coef, rest)) if coef > 0 => out.prefix.push(LaneBound {
                rest: LoopIndex::new(rest),
                coef,
                bound,
            }),
            _ => out.predicates.push((x, bound)),
        }
    }
    out
}

/// The tape of a lane step's block whose lanes need no iterator values of
/// their own (`per_lane` is false): f32 values stored to consecutive
/// elements or folded into one.
pub(super) fn tape_code(
    value: &Value,
    store: &Access,
    reduce: Option<ReduceOp>,
    lane_reduces: bool,
    dtypes: &[DType],
) -> Option<TapeCode> {
    let (coef, rest) = store.linear.as_ref()?;
    let into = match (reduce, coef, lane_reduces) {
        (None, 1, _) => TapeStore::Lanes,
        (Some(op), 1, false) => TapeStore::Combine(op),
        (Some(op), 0, true) => TapeStore::Fold(op),
        _ => return None,
    };
    if dtypes[store.buffer] != DType::F32 {
        return None;
    }
    Some(TapeCode {
        tape: Tape::compile(value, store.buffer, dtypes)?,
        store: LoopIndex::new(rest.clone()),
        into,
    })
}

/// Whether every load in `v` passes `test`.
pub(super) fn all_loads(v: &Value, test: &dyn Fn(&Access) -> bool) -> bool {
    match v {
        Value::Const(..) => true,
        Value::Load(a) => test(a),
        Value::Unary(_, x) | Value::Cast(_, x) => all_loads(x, test),
        Value::Binary(_, x, y) => all_loads(x, test) && all_loads(y, test),
        Value::Select(c, x, y) => all_loads(c, test) && all_loads(x, test) && all_loads(y, test),
    }
}

/// The steps a schedule compiles to on the CPU, for tests of which paths
/// run.
#[cfg(test)]
pub(super) fn compiled(schedule: &tilefuse_sched::Schedule) -> Vec<Step> {
    let kernel = tilefuse_sched::lower(schedule.kernel(), tilefuse_sched::Target::Cpu)
        .unwrap()
        .kernel;
    kernel
        .body
        .iter()
        .map(|n| compile_node(&kernel, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{BinaryOp, DType, Fusion, evaluate};
    use tilefuse_sched::Schedule;
    use tilefuse_testing::{compare, inputs};

    use super::{BlockCode, Step, compiled};

    /// Extent and `parallel` of each lane step in `steps`, in order.
    fn lane_steps(steps: &[Step], out: &mut Vec<(i64, bool)>) {
        let mut blocks = Vec::new();
        lane_blocks(steps, &mut blocks);
        out.extend(
            blocks
                .iter()
                .map(|&(extent, parallel, _)| (extent, parallel)),
        );
    }

    /// Each lane step in `steps`, in order: extent, `parallel`, block.
    fn lane_blocks<'a>(steps: &'a [Step], out: &mut Vec<(i64, bool, &'a BlockCode)>) {
        for step in steps {
            match step {
                Step::Lanes {
                    extent,
                    parallel,
                    block,
                    ..
                } => out.push((*extent, *parallel, block)),
                Step::Loop { body, .. } => lane_blocks(body, out),
                _ => {}
            }
        }
    }

    /// Iterations and lanes of each row-by-row step in `steps`, in order.
    fn row_steps(steps: &[Step], out: &mut Vec<(i64, i64)>) {
        for step in steps {
            match step {
                Step::Rows(r) => out.push((r.r.extent, r.lanes.extent)),
                Step::Loop { body, .. } => row_steps(body, out),
                _ => {}
            }
        }
    }

    /// `a * 2` (plus a row-broadcast `bias`) over `rows` x `cols`, its
    /// columns split into (unrolled, up to 1024) steps of 4 vectorized
    /// lanes, as a GPU's stores, its rows maybe parallel: the lane steps
    /// it compiles to, and its result on three threads against the
    /// reference.
    fn split_store(rows: usize, cols: usize, bias: bool, parallel: bool) -> Vec<(i64, bool)> {
        let mut f = Fusion::new();
        let a = f.input(&[rows, cols], DType::F32, Some("a")).unwrap();
        let two = f.constant(2.0, DType::F32).unwrap();
        let mut y = f.binary(BinaryOp::Mul, a, two).unwrap();
        if bias {
            let b = f.input(&[cols], DType::F32, Some("bias")).unwrap();
            y = f.binary(BinaryOp::Add, y, b).unwrap();
        }
        f.output(y).unwrap();
        let mut s = Schedule::new(&f);
        s.compute_inline_all(&[]);
        let block = *s.get_blocks().last().unwrap();
        let loops = s.get_loops(block).unwrap();
        let parts = s.split(loops[1], &[None, Some(4)], None).unwrap();
        if cols <= 1024 {
            s.unroll(parts[0]).unwrap();
        }
        s.vectorize(parts[1]).unwrap();
        if parallel {
            s.parallel(loops[0]).unwrap();
        }
        runs_right(&f, &s, 3, 1e-6);
        let mut lanes = Vec::new();
        lane_steps(&compiled(&s), &mut lanes);
        lanes
    }

    /// Contiguous loops become one lane step, as far out as every access
    /// stays contiguous: all 8 x 64 elements without the bias, each row's
    /// 64 with it (the bias does not move with the rows). A split that
    /// does not divide the columns cuts each row's step at the edge. Lanes
    /// through a parallel loop are shared by the threads where there are
    /// enough of them.
    #[test]
    fn contiguous_loop_chains_run_as_one_lane_step() {
        assert_eq!(split_store(8, 64, false, false), [(512, false)]);
        assert_eq!(split_store(8, 64, true, false), [(64, false)]);
        assert_eq!(split_store(8, 66, false, false), [(68, false)]);
        assert_eq!(split_store(8, 64, false, true), [(512, false)]);
        assert_eq!(split_store(9, 1 << 13, false, true), [(9 << 13, true)]);
        assert_eq!(split_store(9, 1 << 13, true, true), [(1 << 13, false)]);
    }

    /// The CPU device's default params for `f` with `path` set to
    /// `value`, and `f` scheduled by them.
    fn defaults_with(
        f: &Fusion,
        path: &str,
        value: serde_json::Value,
    ) -> (tilefuse_params::HeuristicParams, Schedule) {
        use tilefuse_schedulers::{heuristics, schedule};
        let info = crate::Device::cpu().info();
        let params = heuristics(f, None, &info)
            .unwrap()
            .with(path, value)
            .unwrap();
        let s = schedule(f, &params, &info).unwrap();
        (params, s)
    }

    /// Asserts that `s` on `threads` threads gives the reference's result
    /// for `f` on fresh inputs.
    fn runs_right(f: &Fusion, s: &Schedule, threads: usize, tolerance: f32) {
        let x = inputs(f, 7);
        let device = crate::Device::Cpu(crate::cpu::CpuDevice { threads });
        let got = device.build(s).unwrap().run(&x).unwrap();
        compare(&evaluate(f, &x).unwrap(), &got, tolerance).unwrap();
    }

    /// A matmul's B staged in workgroup memory (`async_gmem_load_operands`)
    /// is copied a k step at a time as one lane step: the copy's fused
    /// loop, split into the tile's rows and columns and flattened again,
    /// reads as contiguous (it ran 4 lanes at a time, interpreted).
    #[test]
    fn a_staged_tile_copies_as_one_lane_step() {
        let f = tilefuse_testing::matmul(64, 256, 256);
        let (params, s) = defaults_with(&f, "async_gmem_load_operands", true.into());
        let tilefuse_params::HeuristicParams::Matmul(m) = &params else {
            panic!("matmul params")
        };
        let k_step = i64::from(m.tile_sizes.cta_tile.k);
        let mut lanes = Vec::new();
        lane_steps(&compiled(&s), &mut lanes);
        assert!(lanes.contains(&(k_step * 256, false)), "{lanes:?}");
        runs_right(&f, &s, 2, 1e-5);
    }

    /// Split-k's sum of the partial products runs a slice of k at a time
    /// over a row of 1024 lanes (it ran 2 lanes at a time, one output
    /// element after another: 10 ms for 256^3 against 0.3 ms for the
    /// whole matmul without split-k).
    #[test]
    fn a_split_k_sum_adds_a_slice_to_a_row_of_lanes() {
        let f = tilefuse_testing::matmul(64, 48, 256);
        let (_, s) = defaults_with(&f, "splitk_factor", 4.into());
        let mut rows = Vec::new();
        row_steps(&compiled(&s), &mut rows);
        assert_eq!(rows, [(4, 1024)]);
        runs_right(&f, &s, 2, 1e-5);
    }

    /// The tiles of A and of a transposed B staged in workgroup memory
    /// have rows apart in memory: each row of a k step's tile (128
    /// elements) copies as one lane step (they went 4 lanes at a time, and
    /// 8 after that: 38 ms, then 0.8, for 256^3).
    #[test]
    fn a_staged_tile_copies_a_row_at_a_time() {
        let mut f = Fusion::new();
        let a = f.input(&[64, 256], DType::F32, Some("a")).unwrap();
        let b = f.input(&[192, 256], DType::F32, Some("b")).unwrap();
        let c = f.matmul(a, b, false, true).unwrap();
        f.output(c).unwrap();
        let (_, s) = defaults_with(&f, "async_gmem_load_operands", true.into());
        let mut lanes = Vec::new();
        lane_steps(&compiled(&s), &mut lanes);
        assert_eq!(
            lanes.iter().filter(|&&l| l == (128, false)).count(),
            2,
            "{lanes:?}"
        );
        runs_right(&f, &s, 2, 1e-5);
    }

    /// A matmul in invocations of 4 x 4 elements (8 x 8 of them a 32 x 32
    /// tile): the accumulator's start runs as one lane step over the
    /// tile's 1024 elements, its store with the bias and relu a row of
    /// the tile (32 lanes) at a time, both in the order of the elements
    /// rather than the invocations' (they ran 4 lanes at a time).
    #[test]
    fn invocation_tiles_start_and_store_in_the_elements_order() {
        let mut f = Fusion::new();
        let a = f.input(&[64, 80], DType::F32, Some("a")).unwrap();
        let b = f.input(&[80, 96], DType::F32, Some("b")).unwrap();
        let bias = f.input(&[96], DType::F32, Some("bias")).unwrap();
        let c = f.matmul(a, b, false, false).unwrap();
        let c = f.binary(BinaryOp::Add, c, bias).unwrap();
        let y = f.unary(tilefuse_ir::UnaryOp::Relu, c).unwrap();
        f.output(y).unwrap();
        let tiles = super::super::gemm_match::tests::invocations_of_4x4();
        let (_, s) = defaults_with(&f, "tile_sizes", tiles);
        let mut lanes = Vec::new();
        lane_steps(&compiled(&s), &mut lanes);
        assert_eq!(lanes, [(1024, false), (32, false)]);
        runs_right(&f, &s, 2, 1e-5);
    }

    /// A swizzled grid over more rows of tiles than there are (8 rows of
    /// tiles, 1 of them real): every block of a workgroup past the edge
    /// fails the same predicate, which the workgroup loop checks once an
    /// iteration instead (a fuzzed 8 x 256 x 100 matmul: 6.6 ms, 0.26).
    #[test]
    fn workgroups_past_a_swizzled_edge_skip_their_nests() {
        let mut f = Fusion::new();
        let a = f.input(&[100, 8], DType::F32, Some("a")).unwrap();
        let b = f.input(&[100, 96], DType::F32, Some("b")).unwrap();
        let c = f.matmul(a, b, true, false).unwrap();
        f.output(c).unwrap();
        let (_, s) = defaults_with(&f, "grid_swizzle_factor", 8.into());
        let steps = compiled(&s);
        // The grid: workgroup rows (one), then the 8 swizzled workgroups.
        let [Step::Loop { body, .. }] = &steps[..] else {
            panic!("one workgroup-row loop")
        };
        let [
            Step::Loop {
                var,
                extent: 8,
                bounds,
                ..
            },
        ] = &body[..]
        else {
            panic!("8 workgroups a row")
        };
        let mut env = vec![0; 64]; // more than the kernel's loops
        let runs = (0..8)
            .filter(|&i| {
                env[*var] = i;
                bounds.iter().all(|(x, b)| x.eval(&env) < *b)
            })
            .count();
        assert_eq!(runs, 1);
        runs_right(&f, &s, 2, 1e-5);
    }

    /// Columns split by 64 that do not divide 100: lanes past the edge
    /// fail a predicate linear in them, so each row runs as one step of
    /// the split's 128 lanes cut to its first 100, through the tape.
    #[test]
    fn a_ragged_edge_along_the_lanes_runs_its_prefix_through_the_tape() {
        let mut f = Fusion::new();
        let a = f.input(&[5, 100], DType::F32, Some("a")).unwrap();
        let y = f.unary(tilefuse_ir::UnaryOp::Exp, a).unwrap();
        f.output(y).unwrap();
        let mut s = Schedule::new(&f);
        s.compute_inline_all(&[]);
        let block = *s.get_blocks().last().unwrap();
        let loops = s.get_loops(block).unwrap();
        let parts = s.split(loops[1], &[None, Some(64)], None).unwrap();
        s.vectorize(parts[1]).unwrap();
        let mut blocks = Vec::new();
        let steps = compiled(&s);
        lane_blocks(&steps, &mut blocks);
        let [(128, false, code)] = blocks[..] else {
            panic!("one lane step of 128: {blocks:?}")
        };
        assert!(code.tape.is_some() && code.predicates.is_empty());
        assert_eq!(code.prefix.len(), 1);
        runs_right(&f, &s, 2, 1e-6);
    }
}
