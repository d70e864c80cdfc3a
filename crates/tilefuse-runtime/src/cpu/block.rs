//! One block compiled for the executor: its loads and store as offsets
//! (linear in a lane step's variable where they are), its guards and
//! predicates sorted by how a lane step checks them, its tape.

use tilefuse_ir::{BinaryOp, DType, Scalar};
use tilefuse_sched::ir::{
    Block, BlockId, BufferId, Expr, Index, IterKind, Kernel, Var, flat_offset,
};

use super::code::{BlockCode, Bound, LaneBound, TapeCode, TapeStore};
use super::loop_index::LoopIndex;
use super::nest::block_bounds;
use super::scatter::Scatter;
use super::stream;
use super::tape::Tape;
use super::value::{Access, Value};

/// The reciprocal of an f32 constant divisor that is a power of two with a
/// normal reciprocal: `x * (1 / c)` then rounds the same exact quotient as
/// `x / c`, so every result is the division's bit for bit (NaN, ±inf and
/// ±0 included), and a multiply costs a fraction of a divide (a mean
/// divides by the row length in every lane).
fn exact_reciprocal(divisor: &Expr) -> Option<f32> {
    let Expr::Const {
        value,
        dtype: DType::F32,
    } = divisor
    else {
        return None;
    };
    let c = *value as f32;
    let r = 1.0 / c;
    let power_of_two = c.to_bits() & 0x007f_ffff == 0;
    (power_of_two && c.is_normal() && r.is_normal()).then_some(r)
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
            Expr::Binary(BinaryOp::Div, a, b) if let Some(r) = exact_reciprocal(b) => {
                let r = Value::Const(Scalar::F(f64::from(r)), DType::F32);
                Value::Binary(BinaryOp::Mul, Box::new(value(a, access)), Box::new(r))
            }
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
    // Lanes that each combine into their own element while driving a
    // reduce iterator (a loop fused from a reduce and a spatial one) start
    // their elements at different lanes: each lane's firstness is its own.
    let per_lane = !predicates.is_empty()
        || !all_loads(&value, &|a| a.linear.is_some())
        || match store.linear {
            None => true,
            Some((0, _)) => !lane_reduces,
            Some(_) => lane_reduces && block.init,
        };
    let tape = (lane.is_some() && !per_lane)
        .then(|| tape_code(kernel, &value, &store, block, lane_reduces))
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
                period: 1,
            }),
            _ => out.predicates.push((x, bound)),
        }
    }
    out
}

/// The tape of a lane step's block whose lanes need no iterator values of
/// their own (`per_lane` is false): f32 values stored to elements a fixed
/// stride apart or folded into one. Lanes that each combine into their own
/// element while driving a reduce iterator (an rfactor's partials) start
/// their elements at different iterations, so only a block without an
/// init (its partials started by a block of their own) combines them.
fn tape_code(
    kernel: &Kernel,
    value: &Value,
    store: &Access,
    block: &Block,
    lane_reduces: bool,
) -> Option<TapeCode> {
    let &(coef, _) = store.linear.as_ref()?;
    let into = match (block.reduce, coef, lane_reduces) {
        (None, 1, _) if stream::streams(kernel, store.buffer) => TapeStore::Stream,
        (None, 1.., _) => TapeStore::Lanes,
        (Some(op), 1.., false) => TapeStore::Combine(op),
        (Some(op), 1.., true) if !block.init => TapeStore::Combine(op),
        (Some(op), 0, true) => TapeStore::Fold(op),
        _ => return None,
    };
    let scatter = (coef > 1).then(|| Scatter::strided(coef));
    tape_into(kernel, value, store, into, scatter)
}

/// The tape computing `value` whose lanes go `into` the `store` (lane 0's
/// element first; `scatter`: where the others go when not consecutively),
/// or `None` where the store is not f32 (or a half's consecutive
/// elements) or the value is not a tape's.
pub(super) fn tape_into(
    kernel: &Kernel,
    value: &Value,
    store: &Access,
    into: TapeStore,
    scatter: Option<Scatter>,
) -> Option<TapeCode> {
    let (_, rest) = store.linear.as_ref()?;
    let dtypes: Vec<DType> = kernel.buffers.iter().map(|b| b.dtype).collect();
    // Halves are stored lane by lane through an f32 run (`tape_loop`).
    let half_store = matches!(into, TapeStore::Lanes | TapeStore::Stream) && scatter.is_none();
    match dtypes[store.buffer] {
        DType::F32 => {}
        d if d.is_half() && half_store => {}
        _ => return None,
    }
    Some(TapeCode {
        tape: Tape::compile(value, store.buffer, &dtypes)?,
        store: LoopIndex::new(rest.clone()),
        into,
        scatter,
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
