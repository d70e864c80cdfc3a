//! Running a program: steps in order, parallel loops shared over the
//! pool, lane steps through tapes or chunks, the fast paths.
//!
//! Unsafe code: only the element accesses of `RawBuf` (steps read and write kernel buffers through `RawBuf` views),
//! under the contract in `memory.rs`: a verified schedule keeps concurrent
//! writes disjoint and ordered before their reads.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::Ordering;

use tilefuse_ir::{Scalar, binary_scalar, unary_scalar};
use tilefuse_sched::ir::Var;

use super::accumulate::{accumulate, fold_into};
use super::chunk::{CHUNK, Chunk};
use super::code::{BlockCode, Counted, RowsCode, Step, TapeCode, TapeStore};
use super::ctx::{Ctx, Lane, lane_values};
use super::lanes::Column;
use super::loop_index::{all_below, loop_value};
use super::memory::RawBuf;
use super::memory::Storage;
use super::parallel_nest::Nest;
use super::pool::Tasks;
use super::tape::{Rows, Sink, TILE};
use super::value::Value;

/// `s` as a kernel holds it: float scalars are computed in f64 and round
/// to f32 after every op, as the lanes and the GPU do (`1e20 * 1e20` is
/// inf in f32, so subtracting it from itself is NaN; unrounded, 0).
fn as_stored(s: Scalar) -> Scalar {
    match s {
        Scalar::F(x) => Scalar::F(f64::from(x as f32)),
        other => other,
    }
}

/// Asks of [`Ctx::interrupted`] a thread makes per reading of the clock.
const ASKS_PER_CHECK: u32 = 64;

/// Lanes a tape runs between interrupt checks: long enough that checking
/// costs nothing, short enough to answer Ctrl-C at once.
pub(super) const TAPE_CHUNK: usize = 1 << 16;

/// Lanes a run of tape `t` takes between interrupt checks: about
/// [`TAPE_CHUNK`], whole rows where its lanes fold in rows (a run that cut
/// a row would scatter its lanes one by one).
fn lanes_per_run(t: &TapeCode) -> usize {
    match t.in_rows() {
        Some(len) => (TAPE_CHUNK / len).max(1) * len,
        None => TAPE_CHUNK,
    }
}

/// Lanes of an outer-reduction nest combined row by row: 16 KB, so that
/// the elements combined into stay in L1 while the rows stream past.
pub(super) const ROW_LANES: usize = 4096;

/// One task of `Ctx::share`, on a thread's own context.
type TaskFn<'a> = dyn Fn(&Ctx<'_>, &mut Vec<i64>, usize) + Sync + 'a;

/// Chunks a parallel loop is cut into per thread: threads that wake late
/// or run slower take fewer.
const CHUNKS_PER_THREAD: usize = 4;

/// Rows an outer-reduction nest accumulates between interrupt checks.
pub(super) const INTERRUPT_ROWS: i64 = 1 << 12;

impl Ctx<'_> {
    pub(super) fn step(&self, step: &Step, env: &mut Vec<i64>, may_spawn: bool) {
        match step {
            Step::Block(b) => self.scalar_block(b, env),
            Step::Lanes {
                var,
                extent,
                block,
                parallel,
            } => {
                if *parallel && may_spawn && self.threads > 1 {
                    self.parallel_lanes(block, *var, *extent, env);
                } else {
                    self.lanes(block, *var, 0..*extent, env);
                }
            }
            Step::Gemm(g) => self.gemm(g, env),
            Step::Rows(r) => self.rows(r, env),
            Step::Loop {
                var,
                extent,
                parallel,
                bounds,
                body,
            } => {
                if *parallel && may_spawn && self.threads > 1 {
                    let nest = Nest::of(step);
                    if nest.iterations() > 1 {
                        return self.parallel_nest(&nest, env);
                    }
                }
                for i in 0..*extent {
                    if self.interrupted() {
                        return;
                    }
                    env[*var] = i;
                    if all_below(bounds, env) {
                        (body.iter()).for_each(|s| self.step(s, env, may_spawn));
                    }
                }
            }
        }
    }

    /// True once an interrupt is requested (by any thread of this run).
    /// Asked once a loop iteration, so it asks `interrupt::requested` (a
    /// reading of the clock) only every [`ASKS_PER_CHECK`]th time on a
    /// thread: every time cost 3-6 % of a tuner's run of a 16M-element
    /// chain. The work between two asks is bounded (a chunk of lanes, an
    /// iteration of the innermost loop), so an interrupt still lands fast.
    pub(super) fn interrupted(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return true;
        }
        let asks = self.asks.get().wrapping_add(1);
        self.asks.set(asks);
        if !asks.is_multiple_of(ASKS_PER_CHECK) {
            return false;
        }
        let now = tilefuse_ir::interrupt::requested();
        if now {
            self.stop.store(true, Ordering::Relaxed);
        }
        now
    }

    /// Splits the nest's iterations into chunks that the threads claim as
    /// they come (`pool::share`); the calling thread takes part, so it
    /// keeps answering interrupts.
    fn parallel_nest(&self, nest: &Nest<'_>, env: &[i64]) {
        let chunks = self.chunks(nest.iterations(), 1);
        self.share(
            chunks.len(),
            &|ctx, env, c| {
                for i in chunks[c].clone() {
                    if ctx.interrupted() {
                        return;
                    }
                    if nest.enter(i, env) {
                        (nest.body.iter()).for_each(|s| ctx.step(s, env, false));
                    }
                }
            },
            env,
        );
    }

    /// A lane step's lanes in chunks that the threads claim, as
    /// `parallel_loop` (chunks of whole tape tiles).
    fn parallel_lanes(&self, b: &BlockCode, var: usize, extent: i64, env: &[i64]) {
        let chunks = self.chunks(extent, TILE as u64);
        self.share(
            chunks.len(),
            &|ctx, env, c| ctx.lanes(b, var, chunks[c].clone(), env),
            env,
        );
    }

    /// `0..extent` cut into up to `CHUNKS_PER_THREAD` runs a thread, each
    /// a multiple of `align` but the last.
    fn chunks(&self, extent: i64, align: u64) -> Vec<Range<i64>> {
        let runs = (self.threads * CHUNKS_PER_THREAD) as u64;
        let len = (extent as u64).div_ceil(runs).div_ceil(align).max(1) * align;
        (0..extent)
            .step_by(len as usize)
            .map(|s| s..(s + len as i64).min(extent))
            .collect()
    }

    /// Runs `task(ctx, env, t)` for `t in 0..tasks` over the threads
    /// (`pool::share`), each with its own workgroup / private buffers and
    /// registers, and its own copy of `env`.
    fn share(&self, tasks: usize, task: &TaskFn<'_>, env: &[i64]) {
        let (shared, locals, stop) = (self.buffers, self.locals, self.stop);
        super::pool::share(self.threads, tasks, &|claimed: &mut Tasks<'_>| {
            let mut own: Vec<Storage> =
                locals.iter().map(|&(_, d, n)| Storage::new(d, n)).collect();
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
                asks: Cell::default(),
            };
            let mut env = env.to_vec();
            for t in claimed {
                task(&ctx, &mut env, t);
            }
        });
    }

    pub(super) fn scalar_block(&self, b: &BlockCode, env: &[i64]) {
        if !b.in_bounds(env) {
            return;
        }
        let iters: Vec<i64> = b.bindings.iter().map(|x| x.eval(env)).collect();
        let at = |v: Var| match v {
            Var::Iter(i) => iters[i as usize],
            Var::Loop(l) => env[l.0 as usize],
        };
        let v = self.scalar_value(&b.value, &at);
        let buf = &self.buffers[b.store.buffer];
        let off = b.store.offset.eval(&at) as usize;
        match b.reduce {
            None => unsafe { buf.write(off, v) },
            Some(op) => {
                let first = b.init && b.reduce_iters.iter().all(|&r| iters[r] == 0);
                accumulate(buf, off, op, b.dtype, first, v);
            }
        }
    }

    pub(super) fn scalar_value(&self, v: &Value, at: &dyn Fn(Var) -> i64) -> Scalar {
        match v {
            Value::Const(s, _) => *s,
            Value::Load(a) => unsafe { self.buffers[a.buffer].read(a.offset.eval(&at) as usize) },
            Value::Unary(op, x) => as_stored(unary_scalar(*op, self.scalar_value(x, at))),
            Value::Binary(op, x, y) => as_stored(binary_scalar(
                *op,
                self.scalar_value(x, at),
                self.scalar_value(y, at),
            )),
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

    /// Runs lanes `range` of a single-block loop a chunk of lanes at a
    /// time, or whole through its tape.
    pub(super) fn lanes(&self, b: &BlockCode, var: usize, range: Range<i64>, env: &mut [i64]) {
        let range = b.in_prefix(range, env);
        if !b.in_bounds(env) || range.is_empty() {
            return;
        }
        if let Some(t) = &b.tape {
            env[var] = range.start;
            return self.tape_loop(b, t, range.start as usize..range.end as usize, env);
        }
        let (mut start, extent) = (range.start, range.end);
        while start < extent {
            if start > range.start && self.interrupted() {
                return;
            }
            let n = (extent - start).min(CHUNK as i64) as usize;
            env[var] = start;
            self.chunk(b, var, start, n, env);
            start += n as i64;
        }
    }

    pub(super) fn chunk(&self, b: &BlockCode, var: usize, start: i64, n: usize, env: &[i64]) {
        // The matmul inner loop first, before anything is allocated: at
        // a few hundred lanes per chunk, allocation would cost more than
        // the FMAs (the lane variable is already `start` in `env`).
        if !b.per_lane
            && b.predicates.is_empty()
            && self.axpy(b, start, n, env, b.first_in_lane_0(env))
        {
            return;
        }
        // Iterator values per lane (only lane 0 where that is enough).
        let lanes = if b.per_lane { n } else { 1 };
        let at = |v| match v {
            Var::Loop(l) if l.0 as usize == var => Lane::From(start),
            other => Lane::Same(loop_value(env, other)),
        };
        let iters: Vec<Vec<i64>> = (b.bindings.iter())
            .map(|x| lane_values(x.index(), lanes, &at))
            .collect();
        let mask = lane_mask(b, n, &at);
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
        match b.reduce {
            None => chunk.store(b, &value),
            Some(op) => chunk.reduce(b, op, &value),
        }
    }
}

/// Which of `n` lanes the predicates checked lane by lane keep (`None`
/// when `b` has none).
fn lane_mask<'a>(b: &BlockCode, n: usize, at: &dyn Fn(Var) -> Lane<'a>) -> Option<Vec<bool>> {
    if b.predicates.is_empty() {
        return None;
    }
    let mut mask = vec![true; n];
    for (p, bound) in &b.predicates {
        let values = lane_values(p, n, at);
        (mask.iter_mut().zip(&values)).for_each(|(m, &v)| *m &= v < *bound);
    }
    Some(mask)
}

impl BlockCode {
    /// Whether the guards the same for every lane (`uniform`) hold.
    fn in_bounds(&self, env: &[i64]) -> bool {
        (self.uniform.iter()).all(|(x, bound)| x.eval(env) < *bound)
    }

    /// The lanes of `range` that the prefix bounds keep.
    fn in_prefix(&self, range: Range<i64>, env: &[i64]) -> Range<i64> {
        let end = (self.prefix.iter()).fold(range.end, |end, p| {
            let rows = (p.bound - p.rest.eval(env) + p.coef - 1).div_euclid(p.coef);
            end.min(rows.saturating_mul(p.period))
        });
        range.start..end.max(range.start)
    }

    /// Whether lane 0 (the lane variable at its value in `env`) is the
    /// first visit of its element, for lanes that need no iterator values
    /// of their own: they are equally first or not, or (folds over the
    /// lanes) only lane 0 can be.
    pub(super) fn first_in_lane_0(&self, env: &[i64]) -> bool {
        self.init && (self.reduce_iters.iter()).all(|&r| self.bindings[r].eval(env) == 0)
    }
}

impl Ctx<'_> {
    /// `n` lanes from `start` as one multiply-add pass, where the block is
    /// one (see `Chunk::axpy`); lanes need no iterator values of their own.
    pub(super) fn axpy(
        &self,
        b: &BlockCode,
        start: i64,
        n: usize,
        env: &[i64],
        first: bool,
    ) -> bool {
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

    /// [`Interp::tape_loop`] for a store of halves: each run computed into
    /// an f32 buffer, then narrowed into its consecutive elements.
    fn tape_halves(
        &self,
        t: &TapeCode,
        (buf, base): (&RawBuf, usize),
        range: Range<usize>,
        env: &[i64],
    ) {
        let mut registers = self.registers.borrow_mut();
        let per_run = lanes_per_run(t);
        let mut run = vec![0f32; per_run.min(range.len())];
        for start in range.clone().step_by(per_run) {
            if start > range.start && self.interrupted() {
                return;
            }
            let n = per_run.min(range.end - start);
            let lanes = &mut run[..n];
            t.tape.run(
                self.buffers,
                env,
                (start, n),
                &mut registers,
                Sink::Store(lanes),
            );
            Column::narrow_into(lanes, buf, base + start);
        }
    }

    /// Runs an outer-reduction nest (see [`Step::Rows`]).
    pub(super) fn rows(&self, g: &RowsCode, env: &mut [i64]) {
        let (
            Counted {
                var: rv,
                extent: rows,
            },
            Counted { var: jv, extent: n },
        ) = (g.r, g.lanes);
        let (b, t) = (&g.block, g.block.tape.as_ref().expect("rows_code checked"));
        let TapeStore::Combine(op) = t.into else {
            unreachable!("rows_code checked")
        };
        env[jv] = 0;
        env[rv] = 0;
        let n = b.in_prefix(0..n, env).end;
        if rows == 0 || n == 0 || !b.in_bounds(env) {
            return;
        }
        env[rv] = 1;
        let second = t.tape.offsets(env);
        env[rv] = 0;
        let first_row = t.tape.offsets(env);
        let stride = first_row.step_to(&second);
        let first = b.first_in_lane_0(env);
        let base = t.store.eval(env) as usize;
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
                    dst: unsafe { buf.slice_mut::<f32>(base + lo, len) },
                    op,
                    first: first && from == 0,
                };
                t.tape.run_rows(self.buffers, &mut registers, &mut chunk);
                offsets = chunk.offsets;
            }
        }
    }

    /// Lanes `range` of a lane step through its tape (`env` holds the
    /// first lane's variables), about [`TAPE_CHUNK`] lanes at a time
    /// between interrupt checks; a multiply-add goes the one-pass axpy
    /// way instead.
    pub(super) fn tape_loop(&self, b: &BlockCode, t: &TapeCode, range: Range<usize>, env: &[i64]) {
        let first = b.first_in_lane_0(env);
        // The axpy reads the block's value, where a load that wraps around
        // rows would be taken for one that moves with the lanes.
        if !t.tape.wraps() && self.axpy(b, range.start as i64, range.len(), env, first) {
            return;
        }
        let buf = &self.buffers[b.store.buffer];
        let base = t.store.eval(env) as usize;
        if buf.dtype.is_half() {
            return self.tape_halves(t, (buf, base), range, env);
        }
        let mut registers = self.registers.borrow_mut();
        let per_run = lanes_per_run(t);
        for start in range.clone().step_by(per_run) {
            if start > range.start && self.interrupted() {
                return;
            }
            let lanes = (start, per_run.min(range.end - start));
            let mut run = |sink| t.tape.run(self.buffers, env, lanes, &mut registers, sink);
            let stored = || unsafe { buf.slice_mut::<f32>(base + lanes.0, lanes.1) };
            match t.into {
                _ if let Some(scatter) = &t.scatter => {
                    let store = (base as i64, b.store.buffer);
                    let lanes = (lanes, &mut *registers);
                    let op = match t.into {
                        TapeStore::Combine(op) => Some(op),
                        _ => None,
                    };
                    self.scatter_lanes((&t.tape, op), scatter, store, lanes, env, first);
                    None
                }
                TapeStore::Lanes => run(Sink::Store(stored())),
                TapeStore::Stream => run(Sink::Stream(stored())),
                TapeStore::Combine(op) => run(Sink::Combine(stored(), op, first)),
                TapeStore::Fold(op) => {
                    // Every chunk folds into the one element: only the
                    // first chunk may find it unvisited.
                    let folded = run(Sink::Fold(op)).expect("a fold returns its value");
                    fold_into(
                        buf,
                        base,
                        op,
                        b.dtype,
                        first && start == range.start,
                        folded,
                    );
                    None
                }
            };
        }
    }
}
