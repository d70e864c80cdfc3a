//! The kernel → program compiler: each node becomes a step, a loop
//! around a single block a lane step (with a tape where its value and
//! store allow), recognized nests the GEMM or row-by-row fast paths.

use tilefuse_ir::{DType, ReduceOp, Scalar};
use tilefuse_sched::ir::{
    Block, BlockId, BufferId, Expr, Index, IterKind, Kernel, LoopId, Node, Var, flat_offset,
};

use super::code::{BlockCode, Counted, RowsCode, Step, TapeCode, TapeStore};
use super::gemm_match::gemm_code;
use super::nest::{in_one_thread, single_block, through_units};
use super::tape::Tape;
use super::value::{Access, Value};

pub(super) fn compile_node(kernel: &Kernel, node: &Node) -> Step {
    match node {
        Node::Block(b) => Step::Block(compile_block(kernel, kernel.block(*b), None)),
        Node::Loop(l, body) if let Some(g) = gemm_code(kernel, *l, body) => Step::Gemm(Box::new(g)),
        Node::Loop(l, body) if let Some(r) = rows_code(kernel, *l, body) => Step::Rows(Box::new(r)),
        Node::Loop(l, body) => {
            let lp = kernel.loop_(*l);
            let parallel = !in_one_thread(kernel, *l);
            match single_block(kernel, body) {
                Some(b) if !parallel => Step::Lanes {
                    var: l.0 as usize,
                    extent: lp.extent as i64,
                    block: compile_block(kernel, kernel.block(b), Some(Var::Loop(*l))),
                },
                _ => {
                    let body: Vec<Step> = body.iter().map(|n| compile_node(kernel, n)).collect();
                    let work = lp.extent.saturating_mul(Step::total_work(&body));
                    Step::Loop {
                        var: l.0 as usize,
                        extent: lp.extent as i64,
                        parallel: parallel && work >= MIN_PARALLEL_WORK,
                        body,
                    }
                }
            }
        }
    }
}

/// Block instances below which a parallel loop runs serially: waking the
/// pool's workers costs some 10 to 30 µs, as much as tens of thousands of
/// lanes of work (the chain `tanh(a*b+1)*0.5+exp(-a)` on 2 threads: 2^14
/// elements 48 µs through the pool, ~20 serially; 2^16 even; BENCHMARKS.md).
pub(super) const MIN_PARALLEL_WORK: u64 = 1 << 16;

impl Step {
    /// Block instances the step runs (an estimate of its work).
    pub(super) fn work(&self) -> u64 {
        match self {
            Step::Block(_) => 1,
            Step::Lanes { extent, .. } => *extent as u64,
            Step::Rows(r) => (r.r.extent as u64).saturating_mul(r.lanes.extent as u64),
            Step::Gemm(g) => (g.k.extent as u64)
                .saturating_mul(g.rows.extent as u64)
                .saturating_mul(g.lanes.extent as u64),
            Step::Loop { extent, body, .. } => {
                (*extent as u64).saturating_mul(Step::total_work(body))
            }
        }
    }

    pub(super) fn total_work(steps: &[Step]) -> u64 {
        steps.iter().fold(0, |sum, s| sum.saturating_add(s.work()))
    }
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
    let rv = Var::Loop(r);
    let drives_up = block.reduce_iters.iter().any(|&i| {
        block.bindings[i]
            .linear_in(rv)
            .is_some_and(|(coef, _)| coef > 0)
    });
    let combines = matches!(tape.into, TapeStore::Combine(_));
    if !combines || tape.store.mentions(rv) || !tape.tape.linear_in(rv) || !drives_up {
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
        let linear =
            lane.and_then(|v| block.over_loops(std::slice::from_ref(&offset))[0].linear_in(v));
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
    let guards = kernel.needs_guard(block_id);
    let predicates: Vec<(Index, i64)> = kernel
        .live_predicates(block_id)
        .into_iter()
        .map(|(e, b)| (e, b as i64))
        .collect();
    let per_lane = !guards.is_empty()
        || !predicates.is_empty()
        || !all_linear(&value)
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
        bindings: block.bindings.clone(),
        extents: block.iters.iter().map(|i| i.extent as i64).collect(),
        guards,
        predicates,
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
        store: rest.clone(),
        into,
    })
}

pub(super) fn all_linear(v: &Value) -> bool {
    match v {
        Value::Const(..) => true,
        Value::Load(a) => a.linear.is_some(),
        Value::Unary(_, x) | Value::Cast(_, x) => all_linear(x),
        Value::Binary(_, x, y) => all_linear(x) && all_linear(y),
        Value::Select(c, x, y) => all_linear(c) && all_linear(x) && all_linear(y),
    }
}
