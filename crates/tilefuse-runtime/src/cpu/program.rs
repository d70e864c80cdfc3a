//! Compiling a kernel into an executable tree of steps, and running it.
//!
//! Loops become counted loops over an environment of loop variables. A
//! loop whose body is a single block becomes a *lane step*: f32 blocks
//! whose loads and store are contiguous in the lane (or lane-invariant)
//! run the whole loop through a register-resident tape (see `tape`); the
//! rest run chunks of [`CHUNK`] consecutive iterations at once, over
//! columns (see `lanes`), where loads linear in the lane variable read
//! contiguous or strided runs and anything else gathers. Parallel and
//! workgroup-bound loops are spread over threads.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use tilefuse_ir::{DType, ReduceOp, Scalar, binary_scalar, reduce_identity, unary_scalar};
use tilefuse_sched::ir::{
    Block, Expr, Index, IterKind, Kernel, LoopKind, Node, Scope, Var, flat_offset,
};

use super::lanes::Column;
use super::memory::{RawBuf, Storage};
use super::tape::{Registers, Rows, Sink, Tape};

/// Lanes per chunk: small enough that a block's columns stay in L1.
pub const CHUNK: usize = 512;

/// A load: a buffer and the flat offset, over block iterators, plus (in
/// lane steps) the offset as `coef * lane + rest` over loop variables.
#[derive(Debug)]
pub(super) struct Access {
    pub buffer: usize,
    pub offset: Index,
    pub linear: Option<(i64, Index)>,
}

#[derive(Debug)]
pub(super) enum Value {
    Const(Scalar, DType),
    Load(Access),
    Unary(tilefuse_ir::UnaryOp, Box<Value>),
    Binary(tilefuse_ir::BinaryOp, Box<Value>, Box<Value>),
    Select(Box<Value>, Box<Value>, Box<Value>),
    Cast(DType, Box<Value>),
}

#[derive(Debug)]
struct BlockCode {
    bindings: Vec<Index>,
    extents: Vec<i64>,
    guards: Vec<usize>,
    /// Split predicates over loop variables: `expr < bound`.
    predicates: Vec<(Index, i64)>,
    reduce_iters: Vec<usize>,
    store: Access,
    value: Value,
    /// In lane steps, the block as register-resident code where its value
    /// and store allow (see `tape_code`).
    tape: Option<TapeCode>,
    reduce: Option<ReduceOp>,
    /// Reductions: start from the identity on the first visit.
    init: bool,
    dtype: DType,
    /// In lane steps: whether the lane variable drives a reduce iterator
    /// (else every lane of a chunk is equally first or not).
    lane_reduces: bool,
    /// In lane steps: whether iterator values are needed lane by lane
    /// (guards, non-linear offsets); otherwise lane 0's values serve.
    per_lane: bool,
}

/// A lane step's block run whole-loop through a tape.
#[derive(Debug)]
struct TapeCode {
    tape: Tape,
    /// The store's offset in lane 0, over loop variables.
    store: Index,
    into: TapeStore,
}

/// Where a tape's lanes go.
#[derive(Clone, Copy, Debug)]
enum TapeStore {
    /// Consecutive elements.
    Lanes,
    /// Combined into consecutive elements (a reduction over an outer loop).
    Combine(ReduceOp),
    /// All combined into one element (a reduction over the lanes).
    Fold(ReduceOp),
}

#[derive(Debug)]
enum Step {
    Loop {
        var: usize,
        extent: i64,
        /// A parallel or workgroup loop with enough work to share: smaller
        /// ones run serially (handing shares to the pool costs more).
        parallel: bool,
        body: Vec<Step>,
    },
    Lanes {
        var: usize,
        extent: i64,
        block: BlockCode,
    },
    /// A loop over `k` around a loop over a few rows `r` around a lane
    /// loop over `j` whose block is `C[r, j] += A[r, k] * B[k, j]`: run by
    /// the register-blocked micro-kernel (`gemm.rs`).
    Gemm(Box<GemmCode>),
    /// A serial loop over `r` around a lane step whose tape combines into
    /// elements that stay put as `r` moves (an outer reduction, such as
    /// column sums): run row by row over blocks of lanes that stay in L1,
    /// the loads advancing by a stride per row, instead of one lane step
    /// (with its index evaluation) per `r`.
    Rows(Box<RowsCode>),
    Block(BlockCode),
}

#[derive(Debug)]
struct RowsCode {
    r: (usize, i64),
    lanes: (usize, i64),
    /// The lane step's block; its tape combines (`TapeStore::Combine`).
    block: BlockCode,
}

#[derive(Debug)]
struct GemmCode {
    k: (usize, i64),
    rows: (usize, i64),
    lanes: (usize, i64),
    /// Loops of one iteration in between (their variables stay 0).
    units: Vec<usize>,
    /// Buffer, offset at `k = r = j = 0` (over the loops outside), and
    /// element strides per `r`, `k` (and 1 per `j` for `b` and `c`).
    c: (usize, Index, i64),
    a: (usize, Index, i64, i64),
    b: (usize, Index, i64),
}

/// Lanes a tape runs between interrupt checks: long enough that checking
/// costs nothing, short enough to answer Ctrl-C at once.
const TAPE_CHUNK: usize = 1 << 16;

/// Lanes of an outer-reduction nest combined row by row: 16 KB, so that
/// the elements combined into stay in L1 while the rows stream past.
const ROW_LANES: usize = 4096;

/// Rows an outer-reduction nest accumulates between interrupt checks.
const INTERRUPT_ROWS: i64 = 1 << 12;

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct Program {
    steps: Vec<Step>,
    n_loops: usize,
    /// Workgroup / private buffers (id, dtype, elements): each thread of a
    /// parallel loop gets its own.
    locals: Vec<(usize, DType, usize)>,
}

impl Program {
    pub fn compile(kernel: &Kernel) -> Program {
        let steps = kernel
            .body
            .iter()
            .map(|n| compile_node(kernel, n))
            .collect();
        let locals = kernel
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.scope != Scope::Global)
            .map(|(i, b)| (i, b.dtype, b.numel() as usize))
            .collect();
        Program {
            steps,
            n_loops: kernel.loops.len(),
            locals,
        }
    }

    /// Runs every step on `buffers` (indexed by buffer id); false when an
    /// interrupt was [requested](tilefuse_ir::interrupt::requested) first.
    pub fn run(&self, buffers: &[RawBuf], threads: usize) -> bool {
        let mut env = vec![0i64; self.n_loops];
        let stop = AtomicBool::new(false);
        let ctx = Ctx {
            buffers,
            threads,
            locals: &self.locals,
            registers: RefCell::default(),
            stop: &stop,
        };
        for step in &self.steps {
            ctx.step(step, &mut env, true);
        }
        !stop.into_inner()
    }
}

fn compile_node(kernel: &Kernel, node: &Node) -> Step {
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
const MIN_PARALLEL_WORK: u64 = 1 << 16;

impl Step {
    /// Block instances the step runs (an estimate of its work).
    fn work(&self) -> u64 {
        match self {
            Step::Block(_) => 1,
            Step::Lanes { extent, .. } => *extent as u64,
            Step::Rows(r) => (r.r.1 as u64).saturating_mul(r.lanes.1 as u64),
            Step::Gemm(g) => (g.k.1 as u64)
                .saturating_mul(g.rows.1 as u64)
                .saturating_mul(g.lanes.1 as u64),
            Step::Loop { extent, body, .. } => {
                (*extent as u64).saturating_mul(Step::total_work(body))
            }
        }
    }

    fn total_work(steps: &[Step]) -> u64 {
        steps.iter().fold(0, |sum, s| sum.saturating_add(s.work()))
    }
}

/// Looks through loops of one iteration to the single node of a body,
/// collecting their variables.
fn through_units<'a>(
    kernel: &Kernel,
    body: &'a [Node],
    units: &mut Vec<usize>,
) -> Option<&'a Node> {
    match body {
        [Node::Loop(l, inner)] if kernel.loop_(*l).extent == 1 => {
            units.push(l.0 as usize);
            through_units(kernel, inner, units)
        }
        [node] => Some(node),
        _ => None,
    }
}

/// The micro-kernel's loop nest under loop `k`, if `body` is one: a serial
/// loop over at most `gemm::MAX_ROWS` rows `r`, then a serial loop over `j` with one
/// block that accumulates (without starting itself, no guards) `C += A *
/// B` in f32, where C moves with `r` and one step per `j` but not with `k`,
/// A with `r` and `k` but not `j`, and B with `k` and one step per `j` but
/// not `r`.
fn gemm_code(kernel: &Kernel, k: tilefuse_sched::ir::LoopId, body: &[Node]) -> Option<GemmCode> {
    let serial = |l| is_serial(kernel, l);
    if !serial(k) {
        return None;
    }
    let mut units = Vec::new();
    let Node::Loop(r, r_body) = through_units(kernel, body, &mut units)? else {
        return None;
    };
    let Node::Loop(j, j_body) = through_units(kernel, r_body, &mut units)? else {
        return None;
    };
    let [Node::Block(id)] = j_body.as_slice() else {
        return None;
    };
    let rows = kernel.loop_(*r).extent;
    if !serial(*r) || !serial(*j) || rows > super::gemm::MAX_ROWS as u64 {
        return None;
    }
    let block = kernel.block(*id);
    let f32s = |b: tilefuse_sched::ir::BufferId| kernel.buffer(b).dtype == DType::F32;
    if block.reduce != Some(ReduceOp::Sum)
        || block.init
        || !kernel.needs_guard(*id).is_empty()
        || !kernel.live_predicates(*id).is_empty()
        || !f32s(block.buffer)
    {
        return None;
    }
    let Expr::Binary(tilefuse_ir::BinaryOp::Mul, x, y) = &block.value else {
        return None;
    };
    let (
        Expr::Load {
            buffer: xb,
            indices: xi,
        },
        Expr::Load {
            buffer: yb,
            indices: yi,
        },
    ) = (&**x, &**y)
    else {
        return None;
    };
    // Strides of an access per loop, and its offset with those loops at 0.
    let form = |buffer: tilefuse_sched::ir::BufferId, indices: &[Index]| {
        let offset = block
            .over_loops(&[flat_offset(indices, &kernel.buffer(buffer).shape)])
            .remove(0)
            .simplified();
        let (sj, rest) = offset.linear_in(Var::Loop(*j))?;
        let (sr, rest) = rest.linear_in(Var::Loop(*r))?;
        let (sk, rest) = rest.linear_in(Var::Loop(k))?;
        let zero = |v| {
            if units.contains(&v) {
                Some(Index::Const(0))
            } else {
                None
            }
        };
        let rest = rest.subst(&|v| match v {
            Var::Loop(l) => zero(l.0 as usize),
            Var::Iter(_) => None,
        });
        Some((rest, sr, sk, sj))
    };
    let c = form(block.buffer, &block.indices)?;
    let (a, bm) = match (form(*xb, xi)?, form(*yb, yi)?) {
        (p, q) if p.3 == 0 && q.3 == 1 => ((*xb, p), (*yb, q)),
        (p, q) if q.3 == 0 && p.3 == 1 => ((*yb, q), (*xb, p)),
        _ => return None,
    };
    let distinct = a.0 != block.buffer && bm.0 != block.buffer;
    if !(distinct && f32s(a.0) && f32s(bm.0) && c.3 == 1 && c.2 == 0 && bm.1.1 == 0) {
        return None;
    }
    let (c_rest, c_r, ..) = c;
    let (a_rest, a_r, a_k, _) = a.1;
    let (b_rest, _, b_k, _) = bm.1;
    let n = kernel.loop_(*j).extent as i64;
    // Rows of C must not overlap: each is held in registers on its own.
    let disjoint_rows = rows == 1 || c_r >= n;
    if c_r < 0 || a_r < 0 || a_k < 0 || b_k < 0 || !disjoint_rows {
        return None;
    }
    Some(GemmCode {
        k: (k.0 as usize, kernel.loop_(k).extent as i64),
        rows: (r.0 as usize, rows as i64),
        lanes: (j.0 as usize, n),
        units,
        c: (block.buffer.0 as usize, c_rest, c_r),
        a: (a.0.0 as usize, a_rest, a_r, a_k),
        b: (bm.0.0 as usize, b_rest, b_k),
    })
}

/// The outer-reduction nest under loop `r`, if `body` is one: a serial
/// loop over lanes `j` (through loops of one iteration) whose block has a
/// combining tape, stores to elements that do not move with `r`, reads
/// loads that move linearly with it, and has a reduce iterator that `r`
/// drives upward (so only `r = 0` can be an element's first visit).
fn rows_code(kernel: &Kernel, r: tilefuse_sched::ir::LoopId, body: &[Node]) -> Option<RowsCode> {
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
        r: (r.0 as usize, kernel.loop_(r).extent as i64),
        lanes: (j.0 as usize, kernel.loop_(*j).extent as i64),
        block,
    })
}

/// A loop the executor runs in order on one thread: neither parallel nor
/// bound to workgroups (invocation loops run as serial loops).
fn in_one_thread(kernel: &Kernel, l: tilefuse_sched::ir::LoopId) -> bool {
    match kernel.loop_(l).kind {
        LoopKind::Parallel => false,
        LoopKind::Bound(axis) => !axis.is_workgroup(),
        _ => true,
    }
}

fn is_serial(kernel: &Kernel, l: tilefuse_sched::ir::LoopId) -> bool {
    !matches!(
        kernel.loop_(l).kind,
        LoopKind::Parallel | LoopKind::Bound(_)
    )
}

/// The block a loop body consists of, looking through loops of extent 1
/// (their variable stays 0), so that e.g. a vector loop of width 1 under an
/// invocation loop does not turn every lane into a chunk of its own.
fn single_block(kernel: &Kernel, body: &[Node]) -> Option<tilefuse_sched::ir::BlockId> {
    match body {
        [Node::Block(b)] => Some(*b),
        [Node::Loop(l, inner)] if kernel.loop_(*l).extent == 1 => single_block(kernel, inner),
        _ => None,
    }
}

fn compile_block(kernel: &Kernel, block: &Block, lane: Option<Var>) -> BlockCode {
    let id = kernel
        .blocks
        .iter()
        .position(|b| std::ptr::eq(b, block))
        .expect("block of this kernel");
    let access = |buffer: tilefuse_sched::ir::BufferId, indices: &[Index]| {
        let offset = flat_offset(indices, &kernel.buffer(buffer).shape);
        let linear =
            lane.and_then(|v| block.over_loops(std::slice::from_ref(&offset))[0].linear_in(v));
        Access {
            buffer: buffer.0 as usize,
            offset,
            linear,
        }
    };
    fn value(e: &Expr, access: &dyn Fn(tilefuse_sched::ir::BufferId, &[Index]) -> Access) -> Value {
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
    let block_id = tilefuse_sched::ir::BlockId(id as u32);
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
fn tape_code(
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

fn all_linear(v: &Value) -> bool {
    match v {
        Value::Const(..) => true,
        Value::Load(a) => a.linear.is_some(),
        Value::Unary(_, x) | Value::Cast(_, x) => all_linear(x),
        Value::Binary(_, x, y) => all_linear(x) && all_linear(y),
        Value::Select(c, x, y) => all_linear(c) && all_linear(x) && all_linear(y),
    }
}

struct Ctx<'a> {
    buffers: &'a [RawBuf],
    threads: usize,
    locals: &'a [(usize, DType, usize)],
    /// This thread's tape registers.
    registers: RefCell<Registers>,
    /// Set once an interrupt is requested: every thread stops at its next
    /// loop iteration.
    stop: &'a AtomicBool,
}

impl Ctx<'_> {
    fn step(&self, step: &Step, env: &mut Vec<i64>, may_spawn: bool) {
        match step {
            Step::Block(b) => self.scalar_block(b, env),
            Step::Lanes { var, extent, block } => self.lanes(block, *var, *extent, env),
            Step::Gemm(g) => self.gemm(g, env),
            Step::Rows(r) => self.rows(r, env),
            Step::Loop {
                var,
                extent,
                parallel,
                body,
            } => {
                if *parallel && may_spawn && self.threads > 1 && *extent > 1 {
                    self.parallel_loop(*var, *extent, body, env);
                } else {
                    for i in 0..*extent {
                        if self.interrupted() {
                            return;
                        }
                        env[*var] = i;
                        body.iter().for_each(|s| self.step(s, env, may_spawn));
                    }
                }
            }
        }
    }

    /// True once an interrupt is requested (by any thread of this run).
    fn interrupted(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        let now = tilefuse_ir::interrupt::requested();
        if now {
            self.stop.store(true, Ordering::Relaxed);
        }
        now
    }

    /// Splits the loop's iterations over the threads; the calling thread
    /// runs the first share itself, so it keeps answering interrupts.
    fn parallel_loop(&self, var: usize, extent: i64, body: &[Step], env: &[i64]) {
        let threads = (self.threads as i64).min(extent);
        let share = |t: i64| (extent * t / threads)..(extent * (t + 1) / threads);
        let (shared, locals, stop) = (self.buffers, self.locals, self.stop);
        // The pool's workers take the other shares (no thread spawned per
        // launch); this thread runs the first in place.
        super::pool::workers(self.threads).in_place_scope(|scope| {
            for t in 1..threads {
                let range = share(t);
                scope.spawn(move |_| run_share(shared, locals, stop, var, range, body, env));
            }
            run_share(shared, locals, stop, var, share(0), body, env);
        });
    }

    fn gemm(&self, g: &GemmCode, env: &mut [i64]) {
        for &v in [g.k.0, g.rows.0, g.lanes.0].iter().chain(&g.units) {
            env[v] = 0;
        }
        let at = |ix: &Index| ix.eval(&|v| loop_value(env, v)) as usize;
        let (rows, k, n) = (g.rows.1 as usize, g.k.1 as usize, g.lanes.1 as usize);
        let (c_row, a_row, a_k, b_k) = (
            g.c.2 as usize,
            g.a.2 as usize,
            g.a.3 as usize,
            g.b.2 as usize,
        );
        let span = |first: usize, strides: &[(usize, usize)]| {
            first + strides.iter().map(|&(s, n)| s * (n - 1)).sum::<usize>()
        };
        let c = self.buffers[g.c.0].slice_mut::<f32>(at(&g.c.1), span(n, &[(c_row, rows)]));
        let a = self.buffers[g.a.0].slice::<f32>(at(&g.a.1), span(1, &[(a_row, rows), (a_k, k)]));
        let b = self.buffers[g.b.0].slice::<f32>(at(&g.b.1), span(n, &[(b_k, k)]));
        super::gemm::update(&mut super::gemm::Panel {
            c,
            c_row,
            a,
            a_row,
            a_k,
            b,
            b_k,
            rows,
            k,
            n,
        });
    }

    fn scalar_block(&self, b: &BlockCode, env: &[i64]) {
        let iters: Vec<i64> = b
            .bindings
            .iter()
            .map(|x| x.eval(&|v| loop_value(env, v)))
            .collect();
        if b.guards.iter().any(|&g| iters[g] >= b.extents[g]) {
            return;
        }
        let at = |v: Var| match v {
            Var::Iter(i) => iters[i as usize],
            Var::Loop(l) => env[l.0 as usize],
        };
        let v = self.scalar_value(&b.value, &at);
        let buf = &self.buffers[b.store.buffer];
        let off = b.store.offset.eval(&at) as usize;
        match b.reduce {
            None => buf.write(off, v),
            Some(op) => {
                let first = b.init && b.reduce_iters.iter().all(|&r| iters[r] == 0);
                let acc = if first {
                    reduce_identity(op, b.dtype)
                } else {
                    buf.read(off)
                };
                buf.write(off, combine(op, acc, v));
            }
        }
    }

    fn scalar_value(&self, v: &Value, at: &dyn Fn(Var) -> i64) -> Scalar {
        match v {
            Value::Const(s, _) => *s,
            Value::Load(a) => self.buffers[a.buffer].read(a.offset.eval(&at) as usize),
            Value::Unary(op, x) => unary_scalar(*op, self.scalar_value(x, at)),
            Value::Binary(op, x, y) => {
                binary_scalar(*op, self.scalar_value(x, at), self.scalar_value(y, at))
            }
            Value::Select(c, x, y) => {
                if self.scalar_value(c, at).as_bool() {
                    self.scalar_value(x, at)
                } else {
                    self.scalar_value(y, at)
                }
            }
            Value::Cast(d, x) => self.scalar_value(x, at).to(*d),
        }
    }

    /// Runs a single-block loop a chunk of lanes at a time, or whole
    /// through its tape.
    fn lanes(&self, b: &BlockCode, var: usize, extent: i64, env: &mut [i64]) {
        if let Some(t) = &b.tape {
            env[var] = 0;
            return self.tape_loop(b, t, extent as usize, env);
        }
        let mut start = 0;
        while start < extent {
            if start > 0 && self.interrupted() {
                return;
            }
            let n = (extent - start).min(CHUNK as i64) as usize;
            env[var] = start;
            self.chunk(b, var, start, n, env);
            start += n as i64;
        }
    }

    fn chunk(&self, b: &BlockCode, var: usize, start: i64, n: usize, env: &[i64]) {
        // The matmul inner loop first, before anything is allocated: at
        // a few hundred lanes per chunk, allocation would cost more than
        // the FMAs (the lane variable is already `start` in `env`).
        if !b.per_lane
            && b.guards.is_empty()
            && b.predicates.is_empty()
            && self.axpy(b, start, n, env, b.first_in_lane_0(env))
        {
            return;
        }
        // Iterator values per lane (only lane 0 where that is enough).
        let lanes = if b.per_lane { n } else { 1 };
        let iters: Vec<Vec<i64>> = b
            .bindings
            .iter()
            .map(|x| {
                lane_values(x, lanes, &|v| match v {
                    Var::Loop(l) if l.0 as usize == var => Lane::From(start),
                    other => Lane::Same(loop_value(env, other)),
                })
            })
            .collect();
        let mask: Option<Vec<bool>> =
            (!b.guards.is_empty() || !b.predicates.is_empty()).then(|| {
                let mut mask = vec![true; n];
                for &g in &b.guards {
                    mask.iter_mut()
                        .zip(&iters[g])
                        .for_each(|(m, &v)| *m &= v < b.extents[g]);
                }
                for (p, bound) in &b.predicates {
                    let values = lane_values(p, n, &|v| match v {
                        Var::Loop(l) if l.0 as usize == var => Lane::From(start),
                        other => Lane::Same(loop_value(env, other)),
                    });
                    mask.iter_mut()
                        .zip(&values)
                        .for_each(|(m, &v)| *m &= v < *bound);
                }
                mask
            });
        let mask = mask.as_deref().filter(|m| m.iter().any(|&x| !x));
        if mask.is_some_and(|m| m.iter().all(|&x| !x)) {
            return;
        }
        // A tail: the valid lanes come first. Run them as a shorter chunk
        // without a mask, so contiguous loads and stores stay contiguous.
        if let Some(m) = mask {
            let valid = m.iter().take_while(|&&x| x).count();
            if m[valid..].iter().all(|&x| !x) {
                return self.chunk(b, var, start, valid, env);
            }
        }
        let chunk = Chunk {
            ctx: self,
            iters: &iters,
            env,
            start,
            n,
            mask,
        };
        let first = b.init && b.reduce_iters.iter().all(|&r| iters[r][0] == 0);
        if chunk.axpy(b, first) {
            return;
        }
        let value = chunk.column(&b.value);
        let buf = &self.buffers[b.store.buffer];
        match b.reduce {
            None => match (&b.store.linear, mask) {
                (Some((1, rest)), None) => {
                    value.write(buf, (rest.eval(&|v| loop_value(env, v)) + start) as usize)
                }
                _ => value.scatter(buf, &chunk.offsets(&b.store), mask),
            },
            Some(op) => {
                let at = |v| loop_value(env, v);
                let first_lane =
                    |k: usize| b.init && b.reduce_iters.iter().all(|&r| iters[r][k] == 0);
                match (&b.store.linear, mask) {
                    // Lanes are consecutive elements, equally first or not.
                    (Some((1, rest)), None) if !b.lane_reduces => {
                        let start_at = (rest.eval(&at) + start) as usize;
                        if value.reduce_into(buf, start_at, op, first_lane(0)) {
                            return;
                        }
                    }
                    // Every lane lands on one element: fold, then combine
                    // once. Lanes visit the element in order, so only
                    // lane 0 can be its first visit.
                    (Some((0, rest)), None) if b.lane_reduces => {
                        if let Some(folded) = value.fold(op) {
                            let off = rest.eval(&at) as usize;
                            return fold_into(buf, off, op, b.dtype, first_lane(0), folded);
                        }
                    }
                    _ => {}
                }
                let offsets = chunk.offsets(&b.store);
                for k in 0..n {
                    if mask.is_some_and(|m| !m[k]) {
                        continue;
                    }
                    let off = offsets[k] as usize;
                    let first = match (b.per_lane, b.lane_reduces) {
                        (true, _) => first_lane(k),
                        // Only lane 0 can be the first visit (see above).
                        (false, true) => k == 0 && first_lane(0),
                        (false, false) => first_lane(0),
                    };
                    let acc = if first {
                        reduce_identity(op, b.dtype)
                    } else {
                        buf.read(off)
                    };
                    buf.write(off, combine(op, acc, value.get(k)));
                }
            }
        }
    }
}

impl BlockCode {
    /// Whether lane 0 (the lane variable at its value in `env`) is the
    /// first visit of its element, for lanes that need no iterator values
    /// of their own: they are equally first or not, or (folds over the
    /// lanes) only lane 0 can be.
    fn first_in_lane_0(&self, env: &[i64]) -> bool {
        let at = |v| loop_value(env, v);
        self.init
            && self
                .reduce_iters
                .iter()
                .all(|&r| self.bindings[r].eval(&at) == 0)
    }
}

impl Ctx<'_> {
    /// `n` lanes from `start` as one multiply-add pass, where the block is
    /// one (see `Chunk::axpy`); lanes need no iterator values of their own.
    fn axpy(&self, b: &BlockCode, start: i64, n: usize, env: &[i64], first: bool) -> bool {
        let chunk = Chunk {
            ctx: self,
            iters: &[],
            env,
            start,
            n,
            mask: None,
        };
        chunk.axpy(b, first)
    }

    /// Runs a whole lane loop (its variable at 0 in `env`) through the
    /// block's tape, [`TAPE_CHUNK`] lanes at a time between interrupt
    /// checks; a multiply-add goes the one-pass axpy way instead.
    /// Runs an outer-reduction nest (see [`Step::Rows`]).
    fn rows(&self, g: &RowsCode, env: &mut [i64]) {
        let ((rv, rows), (jv, n)) = (g.r, g.lanes);
        let (b, t) = (&g.block, g.block.tape.as_ref().expect("rows_code checked"));
        let TapeStore::Combine(op) = t.into else {
            unreachable!("rows_code checked")
        };
        if rows == 0 {
            return;
        }
        env[jv] = 0;
        env[rv] = 1;
        let second = t.tape.offsets(&|x: &Index| x.eval(&|v| loop_value(env, v)));
        env[rv] = 0;
        let at = |x: &Index| x.eval(&|v| loop_value(env, v));
        let first_row = t.tape.offsets(&at);
        let stride = first_row.step_to(&second);
        let first = b.first_in_lane_0(env);
        let base = at(&t.store) as usize;
        let buf = &self.buffers[b.store.buffer];
        let mut registers = self.registers.borrow_mut();
        // Row by row over up to `ROW_LANES` lanes: each row is read as one
        // contiguous run and the elements combined into stay in L1.
        for lo in (0..n as usize).step_by(ROW_LANES) {
            let len = ROW_LANES.min(n as usize - lo);
            let mut offsets = first_row;
            for from in (0..rows).step_by(INTERRUPT_ROWS as usize) {
                if from > 0 && self.interrupted() {
                    return;
                }
                let mut chunk = Rows {
                    offsets,
                    stride,
                    start: lo,
                    rows: INTERRUPT_ROWS.min(rows - from),
                    dst: buf.slice_mut::<f32>(base + lo, len),
                    op,
                    first: first && from == 0,
                };
                t.tape.run_rows(self.buffers, &mut registers, &mut chunk);
                offsets = chunk.offsets;
            }
        }
    }

    fn tape_loop(&self, b: &BlockCode, t: &TapeCode, n: usize, env: &[i64]) {
        let first = b.first_in_lane_0(env);
        if self.axpy(b, 0, n, env, first) {
            return;
        }
        let at = |x: &Index| x.eval(&|v| loop_value(env, v));
        let buf = &self.buffers[b.store.buffer];
        let base = at(&t.store) as usize;
        let mut registers = self.registers.borrow_mut();
        for start in (0..n).step_by(TAPE_CHUNK) {
            if start > 0 && self.interrupted() {
                return;
            }
            let lanes = (start, TAPE_CHUNK.min(n - start));
            let mut run = |sink| t.tape.run(self.buffers, &at, lanes, &mut registers, sink);
            let stored = || buf.slice_mut::<f32>(base + lanes.0, lanes.1);
            match t.into {
                TapeStore::Lanes => run(Sink::Store(stored())),
                TapeStore::Combine(op) => run(Sink::Combine(stored(), op, first)),
                TapeStore::Fold(op) => {
                    // Every chunk folds into the one element: only the
                    // first chunk may find it unvisited.
                    let folded = run(Sink::Fold(op)).expect("a fold returns its value");
                    fold_into(buf, base, op, b.dtype, first && start == 0, folded);
                    None
                }
            };
        }
    }
}

/// Iterations `range` of a parallel loop, with this thread's own
/// workgroup / private buffers.
fn run_share(
    shared: &[RawBuf],
    locals: &[(usize, DType, usize)],
    stop: &AtomicBool,
    var: usize,
    range: std::ops::Range<i64>,
    body: &[Step],
    env: &[i64],
) {
    let mut own: Vec<Storage> = locals.iter().map(|&(_, d, n)| Storage::new(d, n)).collect();
    let mut buffers = shared.to_vec();
    for (&(id, ..), s) in locals.iter().zip(&mut own) {
        buffers[id] = s.view();
    }
    let ctx = Ctx {
        buffers: &buffers,
        threads: 1,
        locals,
        registers: RefCell::default(),
        stop,
    };
    let mut env = env.to_vec();
    for i in range {
        if ctx.interrupted() {
            return;
        }
        env[var] = i;
        body.iter().for_each(|s| ctx.step(s, &mut env, false));
    }
}

/// Combines a folded chunk of lanes into element `off` (or stores it, on
/// the element's first visit).
fn fold_into(buf: &RawBuf, off: usize, op: ReduceOp, dtype: DType, first: bool, folded: f32) {
    let acc = if first {
        reduce_identity(op, dtype)
    } else {
        buf.read(off)
    };
    buf.write(off, combine(op, acc, Scalar::F(f64::from(folded))));
}

/// One chunk of lanes being evaluated.
struct Chunk<'a> {
    ctx: &'a Ctx<'a>,
    iters: &'a [Vec<i64>],
    env: &'a [i64],
    start: i64,
    n: usize,
    mask: Option<&'a [bool]>,
}

impl Chunk<'_> {
    fn offsets(&self, a: &Access) -> Vec<i64> {
        match &a.linear {
            Some((coef, rest)) => {
                let base = rest.eval(&|v| loop_value(self.env, v)) + coef * self.start;
                (0..self.n as i64).map(|k| base + coef * k).collect()
            }
            None => lane_values(&a.offset, self.n, &|v| match v {
                Var::Iter(i) => Lane::Each(&self.iters[i as usize]),
                other => Lane::Same(loop_value(self.env, other)),
            }),
        }
    }

    /// `dst[k] += c * src[k]` over consecutive lanes, straight between the
    /// buffers (the inner loop of a matmul with the spatial `j` innermost):
    /// a sum reduction of a lane-invariant operand times a contiguous load
    /// into a contiguous store, first visits storing instead of adding.
    fn axpy(&self, b: &BlockCode, first: bool) -> bool {
        let (Some(ReduceOp::Sum), None, Some((1, out_rest)), false) =
            (b.reduce, self.mask, &b.store.linear, b.lane_reduces)
        else {
            return false;
        };
        let Value::Binary(tilefuse_ir::BinaryOp::Mul, x, y) = &b.value else {
            return false;
        };
        let (c, src) = match (self.uniform_f32(x), self.uniform_f32(y)) {
            (Some(c), None) => (c, &**y),
            (None, Some(c)) => (c, &**x),
            _ => return false,
        };
        let Value::Load(Access {
            buffer,
            linear: Some((1, rest)),
            ..
        }) = src
        else {
            return false;
        };
        let (dst_buf, src_buf) = (
            &self.ctx.buffers[b.store.buffer],
            &self.ctx.buffers[*buffer],
        );
        if *buffer == b.store.buffer || dst_buf.dtype != DType::F32 || src_buf.dtype != DType::F32 {
            return false;
        }
        let at = |v| loop_value(self.env, v);
        let src = src_buf.slice::<f32>((rest.eval(&at) + self.start) as usize, self.n);
        let dst = dst_buf.slice_mut::<f32>((out_rest.eval(&at) + self.start) as usize, self.n);
        super::simd_math::axpy(dst, c, src, first);
        true
    }

    /// The value of an f32 operand that is equal in every lane.
    fn uniform_f32(&self, v: &Value) -> Option<f32> {
        match v {
            Value::Const(c, DType::F32) => Some(c.as_f64() as f32),
            Value::Load(a)
                if self.mask.is_none() && self.ctx.buffers[a.buffer].dtype == DType::F32 =>
            {
                match &a.linear {
                    Some((0, rest)) => {
                        let at = rest.eval(&|v| loop_value(self.env, v)) as usize;
                        Some(self.ctx.buffers[a.buffer].slice::<f32>(at, 1)[0])
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn column(&self, v: &Value) -> Column {
        match v {
            Value::Const(s, d) => Column::splat(*s, *d, self.n),
            Value::Load(a) => {
                let buf = &self.ctx.buffers[a.buffer];
                match (&a.linear, self.mask) {
                    (Some((1, rest)), None) => {
                        let base = rest.eval(&|v| loop_value(self.env, v)) + self.start;
                        Column::read(buf, base as usize, self.n)
                    }
                    (Some((0, rest)), None) => {
                        let at = rest.eval(&|v| loop_value(self.env, v)) as usize;
                        Column::splat(buf.read(at), buf.dtype, self.n)
                    }
                    _ => Column::gather(buf, &self.offsets(a), self.mask),
                }
            }
            Value::Unary(op, x) => self.column(x).unary(*op),
            Value::Binary(op, x, y) => {
                // An operand that is the same in every lane (a constant, or
                // a load that does not move with the lane) is applied in
                // place as a scalar, never splatted into a column.
                if let Some(c) = self.uniform_f32(y) {
                    return self
                        .column(x)
                        .binary_const(*op, c, false)
                        .unwrap_or_else(|lhs| lhs.binary(*op, &self.column(y)));
                }
                if let Some(c) = self.uniform_f32(x) {
                    return self
                        .column(y)
                        .binary_const(*op, c, true)
                        .unwrap_or_else(|rhs| self.column(x).binary(*op, &rhs));
                }
                self.column(x).binary(*op, &self.column(y))
            }
            Value::Select(c, x, y) => self.column(c).select(&self.column(x), &self.column(y)),
            Value::Cast(d, x) => self.column(x).cast(*d),
        }
    }
}

fn loop_value(env: &[i64], v: Var) -> i64 {
    match v {
        Var::Loop(l) => env[l.0 as usize],
        Var::Iter(_) => unreachable!("iterators are resolved before loop variables"),
    }
}

/// An index expression's value in each of `n` lanes.
/// A variable across the lanes of a chunk.
enum Lane<'a> {
    /// The same in every lane (an outer loop).
    Same(i64),
    /// `start + k` in lane `k` (the lane loop).
    From(i64),
    /// Given per lane (an iterator already evaluated).
    Each(&'a [i64]),
}

/// An index expression's value in each of `n` lanes, one node at a time
/// over all lanes (so the arithmetic vectorizes); `at(v)` says how
/// variable `v` varies across the lanes.
fn lane_values<'a>(x: &Index, n: usize, at: &dyn Fn(Var) -> Lane<'a>) -> Vec<i64> {
    let each = |a: &Index, f: &dyn Fn(i64) -> i64| {
        let mut v = lane_values(a, n, at);
        v.iter_mut().for_each(|x| *x = f(*x));
        v
    };
    match x {
        Index::Const(c) => vec![*c; n],
        Index::Var(v) => match at(*v) {
            Lane::Same(c) => vec![c; n],
            Lane::From(s) => (s..s + n as i64).collect(),
            Lane::Each(values) => values[..n].to_vec(),
        },
        Index::Add(a, b) => {
            let mut a = lane_values(a, n, at);
            let b = lane_values(b, n, at);
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            a
        }
        Index::Mul(a, c) => each(a, &|x| x * c),
        Index::Div(a, c) => each(a, &|x| x.div_euclid(*c)),
        Index::Mod(a, c) => each(a, &|x| x.rem_euclid(*c)),
    }
}

fn combine(op: ReduceOp, acc: Scalar, v: Scalar) -> Scalar {
    let f = match op {
        ReduceOp::Sum | ReduceOp::Mean => tilefuse_ir::BinaryOp::Add,
        ReduceOp::Max => tilefuse_ir::BinaryOp::Max,
        ReduceOp::Min => tilefuse_ir::BinaryOp::Min,
    };
    binary_scalar(f, acc, v)
}
