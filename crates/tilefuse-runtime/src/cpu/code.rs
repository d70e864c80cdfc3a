//! The compiled program: a tree of steps (loops, lane steps, the GEMM
//! and row-by-row fast paths, single blocks) over compiled blocks.

use tilefuse_ir::{DType, ReduceOp};
use tilefuse_sched::ir::{Index, Kernel, LoopId};

use super::loop_index::LoopIndex;
use super::scatter::Scatter;
use super::tape::Tape;
use super::value::{Access, Value};

/// `expr < bound`: a guard or a predicate.
pub(super) type Bound = (Index, i64);

#[derive(Debug)]
pub(super) struct BlockCode {
    pub(super) bindings: Vec<LoopIndex>,
    /// Guards (iterators that may run past their extents) and split
    /// predicates that vary across a lane step's lanes otherwise than in
    /// `prefix`, over loop variables: checked lane by lane.
    pub(super) predicates: Vec<Bound>,
    /// Guards and predicates the same for every lane of a lane step (all
    /// of them outside lane steps), `expr < bound`: checked once a step,
    /// so that the lanes of a ragged edge's rows run as a whole.
    pub(super) uniform: Vec<(LoopIndex, i64)>,
    /// In lane steps: guards and predicates that hold for a prefix of the
    /// lanes (a ragged edge along them): the step runs that prefix, with
    /// no check lane by lane.
    pub(super) prefix: Vec<LaneBound>,
    pub(super) reduce_iters: Vec<usize>,
    pub(super) store: Access,
    pub(super) value: Value,
    /// In lane steps, the block as register-resident code where its value
    /// and store allow (see `tape_code`).
    pub(super) tape: Option<TapeCode>,
    pub(super) reduce: Option<ReduceOp>,
    /// Reductions: start from the identity on the first visit.
    pub(super) init: bool,
    pub(super) dtype: DType,
    /// In lane steps: whether the lane variable drives a reduce iterator
    /// (else every lane of a chunk is equally first or not).
    pub(super) lane_reduces: bool,
    /// In lane steps: whether iterator values are needed lane by lane
    /// (guards, non-linear offsets); otherwise lane 0's values serve.
    pub(super) per_lane: bool,
}

/// `coef * (lane / period) + rest < bound` with `coef > 0`: true for the
/// lanes below `(bound - rest) / coef`, rounded up, times `period`. The
/// period is 1 but where a lane step runs rows of `period` lanes as one
/// and the bound holds for whole rows (a workgroup's rows past the last).
#[derive(Debug)]
pub(super) struct LaneBound {
    pub(super) rest: LoopIndex,
    pub(super) coef: i64,
    pub(super) bound: i64,
    pub(super) period: i64,
}

/// A lane step's block run whole-loop through a tape.
#[derive(Debug)]
pub(super) struct TapeCode {
    pub(super) tape: Tape,
    /// The store's offset in lane 0, over loop variables.
    pub(super) store: LoopIndex,
    pub(super) into: TapeStore,
    /// Where `Lanes` and `Combine` put lanes other than consecutively.
    pub(super) scatter: Option<Scatter>,
}

impl TapeCode {
    /// The length of the rows its lanes fold in, if they do (see
    /// `scatter::Segments`).
    pub(super) fn in_rows(&self) -> Option<usize> {
        self.scatter.as_ref().and_then(Scatter::in_rows)
    }
}

/// Where a tape's lanes go.
#[derive(Clone, Copy, Debug)]
pub(super) enum TapeStore {
    /// One element each (consecutive, or as `TapeCode::scatter` says).
    Lanes,
    /// One element each, consecutive, streamed past the caches (see
    /// `cpu/stream.rs`).
    Stream,
    /// Combined into one element each (a reduction over an outer loop).
    Combine(ReduceOp),
    /// All combined into one element (a reduction over the lanes).
    Fold(ReduceOp),
}

/// Block instances below which a parallel loop runs serially: handing
/// chunks to the pool's workers costs some 5 µs, as much as a few thousand
/// lanes of work. On 2 threads (`pool::share`), the chain
/// `tanh(a*b+1)*0.5+exp(-a)` over 256 x 128 elements: 38 µs serially, 26
/// through the pool; 64 x 128 even (`benches/run.py --quick`, case chain).
pub(super) const MIN_PARALLEL_WORK: u64 = 1 << 13;

#[derive(Debug)]
pub(super) enum Step {
    Loop {
        var: usize,
        extent: i64,
        /// A parallel or workgroup loop with enough work to share: smaller
        /// ones run serially (handing shares to the pool costs more).
        parallel: bool,
        /// Bounds every block of the body has (see `nest::hoisted_bounds`):
        /// an iteration that fails one is skipped whole.
        bounds: Vec<(LoopIndex, i64)>,
        body: Vec<Step>,
    },
    Lanes {
        var: usize,
        extent: i64,
        block: BlockCode,
        /// Lanes spread over the threads (a coalesced chain through
        /// parallel or workgroup loops, with enough of them to share).
        parallel: bool,
    },
    /// A nest of loops over `k`, rows `r` and lanes `j`, in any order,
    /// around a block `C[r, j] += A[r, k] * B[k, j]`: run by the
    /// register-blocked micro-kernel (`gemm.rs`) in one call.
    Gemm(Box<GemmCode>),
    /// A serial loop over `r` around a lane step whose tape combines into
    /// elements that stay put as `r` moves (an outer reduction, such as
    /// column sums): run row by row over blocks of lanes that stay in L1,
    /// the loads advancing by a stride per row, instead of one lane step
    /// (with its index evaluation) per `r`.
    Rows(Box<RowsCode>),
    Block(BlockCode),
}

/// A loop the executor counts: its variable's slot and its extent.
#[derive(Clone, Copy, Debug)]
pub(super) struct Counted {
    pub(super) var: usize,
    pub(super) extent: i64,
}

impl Counted {
    pub(super) fn of(kernel: &Kernel, l: LoopId) -> Counted {
        Counted {
            var: l.0 as usize,
            extent: kernel.loop_(l).extent as i64,
        }
    }
}

#[derive(Debug)]
pub(super) struct RowsCode {
    pub(super) r: Counted,
    pub(super) lanes: Counted,
    /// The lane step's block; its tape combines (`TapeStore::Combine`).
    pub(super) block: BlockCode,
}

#[derive(Debug)]
pub(super) struct GemmCode {
    /// The block's guards, each ending one of the loops early.
    pub(super) cuts: Vec<Cut>,
    /// The call's k steps, rows and lanes: each the product of the
    /// extents of the nest's loops of that role (`gemm_match::Role`).
    pub(super) k: i64,
    pub(super) rows: i64,
    pub(super) lanes: i64,
    /// The nest's loops, whose variables stay 0 in a call (the operands'
    /// offsets are at its first k step, row and lane).
    pub(super) loops: Vec<usize>,
    /// `C` moves per row (not per `k`), `A` per row and `k`, `B` per `k`
    /// (not per row); `C` moves one element per lane, `B` one or more (a
    /// transposed B is packed before the micro-kernel reads it).
    pub(super) c: Operand,
    pub(super) a: Operand,
    pub(super) b: Operand,
}

/// The loops of a micro-kernel call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dim {
    K,
    Rows,
    Lanes,
    /// None of them: the call runs whole or not at all.
    Whole,
}

/// A guard that ends loop `dim` early: it runs while `start + i < bound`,
/// `start` the guarded value at the call's first iteration.
#[derive(Debug)]
pub(super) struct Cut {
    pub(super) dim: Dim,
    pub(super) start: Index,
    pub(super) bound: i64,
}

/// One matrix of the micro-kernel: its buffer, its offset at
/// `k = r = j = 0` (over the loops outside), and its element strides.
#[derive(Debug)]
pub(super) struct Operand {
    pub(super) buffer: usize,
    pub(super) offset: Index,
    pub(super) per_row: i64,
    pub(super) per_k: i64,
    pub(super) per_lane: i64,
}
