//! Register-resident evaluation of a block's value: an f32 expression whose
//! loads are contiguous in the lane (or strided, or the same in every lane)
//! compiles to straight-line code over a few per-thread registers of
//! [`TILE`] lanes, run tile by tile. Nothing is allocated per chunk and no
//! contiguous load is copied into a column first: the column-at-a-time
//! path spent a third of a pointwise chain in `malloc` and copies. Loads
//! that do not read consecutive elements (strided, or wrapping around
//! short rows: `lane_load.rs`) are gathered first, a run's lanes at once
//! into a per-thread buffer, so the tiles see every load as contiguous.
//!
//! Unsafe code: only the element accesses of `RawBuf` (tapes load kernel buffers through `RawBuf` views),
//! under the contract in `memory.rs`: a verified schedule keeps concurrent
//! writes disjoint and ordered before their reads.
#![allow(unsafe_code)]

use tilefuse_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
use tilefuse_sched::ir::{Index, Var};

use super::halves::round_to;
use super::lanes::{Rhs, arith, arith_from, combine_into, fold_f32, select, unary_f32};
use super::loop_index::LoopIndex;
use super::memory::RawBuf;
use super::simd_math::multiversion;
use super::stream;
use fold::Folded;
pub use lane_fold::fold_as_run;
use lane_fold::{fold_whole, identity};
use lane_load::LaneLoad;
pub use lane_load::{Period, transposed};
pub use offsets::Offsets;
pub use rows::Rows;

mod compile;
mod fold;
mod lane_fold;
mod lane_load;
mod offsets;
mod rows;

/// Lanes per tile: 1 KB per register, so that a tape's registers stay in L1
/// (measured: 64 lanes made softmax ~10 % slower, 512 gained nothing).
pub(super) const TILE: usize = 256;
/// Registers (stack depth of the expression) a tape may use.
const REGISTERS: usize = 8;
/// Contiguous or strided, and lane-invariant loads a tape may read.
const SOURCES: usize = 16;

/// Where an operand comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Operand {
    Reg(u8),
    /// `loads[i]`: consecutive elements (or gathered ones), one per lane.
    Load(u8),
    /// `uniforms[i]`: one value for every lane.
    Uniform(u8),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Set {
        dst: u8,
        src: Operand,
    },
    Unary {
        op: UnaryOp,
        dst: u8,
    },
    /// `dst` rounded to a half dtype's precision (held in f32): the cast
    /// that ends each op on halves.
    Round {
        dst: u8,
        half: DType,
    },
    /// `dst = dst op rhs`, or `rhs op dst` with `swap`.
    Binary {
        op: BinaryOp,
        dst: u8,
        rhs: Operand,
        swap: bool,
    },
    /// `dst = lhs op rhs` for two operands read where they are (no
    /// register copy of `lhs` first).
    Apply {
        op: BinaryOp,
        dst: u8,
        lhs: Operand,
        rhs: Operand,
    },
    /// `dst = if dst != 0 { on_true } else { on_false }`: `dst` holds a
    /// comparison's 1.0 / 0.0.
    Select {
        dst: u8,
        on_true: Operand,
        on_false: Operand,
    },
}

/// A lane-invariant value: a constant or one element of a buffer.
#[derive(Clone, Debug)]
enum Uniform {
    Const(f32),
    Load(usize, LoopIndex),
}

/// A compiled f32 expression; its result ends in register 0.
#[derive(Debug)]
pub struct Tape {
    ops: Vec<Op>,
    /// The loads that move with the lane.
    loads: Vec<LaneLoad>,
    uniforms: Vec<Uniform>,
    /// `ops` as run: their uniform-only parts once per run.
    folded: Folded,
    /// What each run prefetches, tile by tile, its lanes' elements of a
    /// buffer: the buffer and lane 0's offset (see `cpu/prefetch.rs`).
    ahead: Vec<(usize, LoopIndex)>,
}

/// Runs of elements a tape may prefetch.
pub const AHEAD: usize = 4;

/// A thread's registers, allocated once per launch: zeroing them on every
/// call cost as much as the arithmetic. Register 0 is scratch for sinks
/// that do not store (stores compute straight into their destination).
/// `gathered` holds a run's strided loads, one after another; `staged` the
/// lanes of a store that is not consecutive; `rows` a run's row
/// statistics and row parts' values, one a row (`fold.rs`).
pub struct Registers {
    tiles: Box<[[f32; TILE]; REGISTERS]>,
    gathered: Vec<f32>,
    staged: Vec<f32>,
    rows: Vec<f32>,
    /// A run's offsets, written in place: built and returned per run,
    /// their 288 bytes cost a memset and a memcpy, 4 % of a one-thread
    /// softmax over rows of 1024.
    offsets: Offsets,
}

impl Default for Registers {
    fn default() -> Self {
        Registers {
            tiles: Box::new([[0.0; TILE]; REGISTERS]),
            gathered: Vec::new(),
            staged: Vec::new(),
            rows: Vec::new(),
            offsets: Offsets::default(),
        }
    }
}

/// The registers a run uses: the tiles, the gathered lanes, the rows'
/// values.
type RunRegisters<'r> = (
    &'r mut Box<[[f32; TILE]; REGISTERS]>,
    &'r mut Vec<f32>,
    &'r mut Vec<f32>,
);

/// What becomes of a tape's lanes.
pub enum Sink<'a> {
    /// Stored to consecutive elements.
    Store(&'a mut [f32]),
    /// Stored to consecutive elements past the caches (`cpu/stream.rs`).
    Stream(&'a mut [f32]),
    /// Combined into consecutive elements (stored on the first visit).
    Combine(&'a mut [f32], ReduceOp, bool),
    /// Every lane combined into one value, returned.
    Fold(ReduceOp),
}

impl Tape {
    /// Runs lanes `start..start + n` of the loop (the loads' offsets at
    /// lane 0 with the loop variables at `env`). Returns the folded value
    /// for [`Sink::Fold`].
    pub fn run(
        &self,
        buffers: &[RawBuf],
        env: &[i64],
        lanes: (usize, usize),
        regs: &mut Registers,
        sink: Sink<'_>,
    ) -> Option<f32> {
        self.offsets_into(env, &mut regs.offsets);
        let Registers {
            tiles,
            gathered,
            rows,
            offsets,
            ..
        } = regs;
        self.run_parts(buffers, offsets, lanes, (tiles, gathered, rows), sink)
    }

    /// Lanes `start..start + n` where they lie, for a tape that is one
    /// load of consecutive elements (its loads' offsets `offsets`).
    pub fn consecutive<'b>(
        &self,
        buffers: &'b [RawBuf],
        offsets: &Offsets,
        (start, n): (usize, usize),
    ) -> Option<&'b [f32]> {
        let i = single_load(&self.ops)?;
        let load = &self.loads[i];
        let at = offsets.loads[i] as usize + start;
        load.consecutive()
            .then(|| unsafe { buffers[load.buffer].slice::<f32>(at, n) })
    }

    /// The loads of consecutive elements that its ops read: each one's
    /// place in the tape, buffer and offset at lane 0.
    pub fn consecutive_loads(&self) -> impl Iterator<Item = (usize, usize, &LoopIndex)> {
        (self.loads.iter().enumerate())
            .filter(|&(i, load)| load.consecutive() && self.folded.reads(i))
            .map(|(i, load)| (i, load.buffer, &load.at))
    }

    /// Whether its runs go tile by tile, whatever their sink (one load
    /// alone is folded or combined where it lies), and so prefetch.
    pub fn runs_tiles(&self) -> bool {
        single_load(&self.ops).is_none()
    }

    /// Has every run prefetch its lanes' elements of `buffer`, lane 0's
    /// at offset `at` (over loop variables), until [`AHEAD`] runs do.
    pub fn prefetch(&mut self, buffer: usize, at: Index) {
        if self.ahead.len() < AHEAD {
            self.ahead.push((buffer, LoopIndex::new(at)));
        }
    }

    /// What each run prefetches (see [`Tape::prefetch`]).
    pub fn ahead(&self) -> impl Iterator<Item = (usize, &Index)> {
        self.ahead.iter().map(|(b, at)| (*b, at.index()))
    }

    /// Whether every load's offset is `coefficient * v + rest`.
    pub fn linear_in(&self, v: Var) -> bool {
        let uniform_loads = self.uniforms.iter().filter_map(|u| match u {
            Uniform::Load(_, rest) => Some(rest),
            Uniform::Const(_) => None,
        });
        self.loads
            .iter()
            .map(|load| &load.at)
            .chain(uniform_loads)
            .all(|x| x.index().linear_in(v).is_some())
    }

    /// As [`Tape::run`], with the loads at `offsets`.
    pub fn run_from(
        &self,
        buffers: &[RawBuf],
        offsets: &Offsets,
        lanes: (usize, usize),
        regs: &mut Registers,
        sink: Sink<'_>,
    ) -> Option<f32> {
        let Registers {
            tiles,
            gathered,
            rows,
            ..
        } = regs;
        self.run_parts(buffers, offsets, lanes, (tiles, gathered, rows), sink)
    }

    /// [`Tape::run_from`] on the registers it uses.
    fn run_parts(
        &self,
        buffers: &[RawBuf],
        offsets: &Offsets,
        (start, n): (usize, usize),
        (tiles, gathered, rows): RunRegisters<'_>,
        mut sink: Sink<'_>,
    ) -> Option<f32> {
        if let Sink::Fold(op) = sink
            && let Some(folded) = self.fold_where_they_lie(buffers, offsets, (start, n), op)
        {
            return Some(folded);
        }
        let wraps = self.gather(buffers, offsets, (start, n), (gathered, rows));
        let mut uniforms = [0f32; SOURCES];
        for ((slot, u), &at) in uniforms
            .iter_mut()
            .zip(&self.uniforms)
            .zip(&offsets.uniforms)
        {
            *slot = match u {
                Uniform::Const(c) => *c,
                Uniform::Load(buffer, _) => unsafe { buffers[*buffer].read_f32(at as usize) },
            };
        }
        (self.folded).evaluate(tiles, &mut uniforms, self.uniforms.len());
        let derived = gathered.len();
        let sources = (buffers, offsets, &uniforms);
        (self.folded).fill_rows(&self.loads, sources, (start, n), (tiles, rows), gathered);
        let mut loads: [&[f32]; SOURCES] = [&[]; SOURCES];
        let mut from = 0;
        for (i, load) in self.loads.iter().enumerate() {
            if !self.folded.reads(i) {
                continue;
            }
            loads[i] = match load.consecutive() {
                true => unsafe {
                    buffers[load.buffer].slice::<f32>(offsets.loads[i] as usize + start, n)
                },
                false => {
                    let lanes = window(n, wraps[i]);
                    from += lanes;
                    &gathered[from - lanes..from]
                }
            };
        }
        let parts = gathered[derived..].chunks_exact(n.max(1));
        for (slot, part) in loads[self.loads.len()..].iter_mut().zip(parts) {
            *slot = part;
        }
        let mut ahead = [None; AHEAD];
        for ((slot, (buffer, _)), &at) in ahead.iter_mut().zip(&self.ahead).zip(&offsets.ahead) {
            *slot = Some((buffers[*buffer], at as usize + start));
        }
        run_tiles(
            &self.folded.ops,
            tiles,
            (&loads, &wraps),
            &ahead[..self.ahead.len()],
            &uniforms,
            n,
            &mut sink,
        )
    }

    /// Runs lanes `lanes` (the loads' offsets at lane 0 `offsets`) into a
    /// contiguous per-thread run and hands it to `out` (for stores that
    /// are not consecutive: `scatter`).
    pub fn run_staged(
        &self,
        buffers: &[RawBuf],
        offsets: &Offsets,
        lanes: (usize, usize),
        regs: &mut Registers,
        out: impl FnOnce(&[f32]),
    ) {
        // Grown, never cleared: the run overwrites every lane it hands on
        // (zeroing them first was a third pass over a staged row fold).
        let mut staged = std::mem::take(&mut regs.staged);
        if staged.len() < lanes.1 {
            staged.resize(lanes.1, 0.0);
        }
        let run = &mut staged[..lanes.1];
        self.run_from(buffers, offsets, lanes, regs, Sink::Store(run));
        out(run);
        regs.staged = staged;
    }

    /// Copies the lanes `lanes` of each load that does not read
    /// consecutive elements into `into`, one load after another, and
    /// returns each load's period where its tiles read it modulo that:
    /// a load that restarts with each row (`LaneLoad::repeats`) needs
    /// only the lanes that any tile's window from a row's column reads
    /// (a layer norm's weights over rows of 64 were copied for every row
    /// of the run); the others `usize::MAX`.
    fn gather(
        &self,
        buffers: &[RawBuf],
        offsets: &Offsets,
        (start, n): (usize, usize),
        (into, rows): (&mut Vec<f32>, &mut Vec<f32>),
    ) -> [usize; SOURCES] {
        into.clear();
        let mut wraps = [usize::MAX; SOURCES];
        let whole = single_load(&self.ops).is_some();
        for (i, ((load, &at), wrap)) in (self.loads.iter().zip(&offsets.loads))
            .zip(&mut wraps)
            .enumerate()
        {
            if load.repeats() && !whole {
                *wrap = load.period;
            }
            if !load.consecutive() && self.folded.reads(i) {
                let lanes = (start, window(n, *wrap));
                unsafe { load.gather(&buffers[load.buffer], at as usize, lanes, (into, rows)) };
            }
        }
        wraps
    }
}

/// What a run prefetches: each a buffer and the element its lane 0 reads
/// (all `Some`: an array's slots, filled in order).
type Ahead = [Option<(RawBuf, usize)>];

/// A run's loads and their wraps (see [`Tape::gather`]).
type Loads<'a> = (&'a [&'a [f32]; SOURCES], &'a [usize; SOURCES]);

/// The lanes gathered of a load with `wrap` (see [`Tape::gather`]) for a
/// run of `n`: every tile's window from a lane below the wrap.
fn window(n: usize, wrap: usize) -> usize {
    n.min(wrap.saturating_add(TILE - 1))
}

/// The load a tape is, when it is nothing but one load (a sum of rows).
fn single_load(ops: &[Op]) -> Option<usize> {
    match ops {
        [
            Op::Set {
                dst: 0,
                src: Operand::Load(i),
            },
        ] => Some(usize::from(*i)),
        _ => None,
    }
}

multiversion!(
    /// Runs `ops` tile by tile over `n` lanes into `sink`. A load with a
    /// wrap (see `Tape::gather`) holds a window of lanes that each tile
    /// reads from its first lane modulo the wrap.
    fn run_tiles(
        ops: &[Op],
        regs: &mut [[f32; TILE]; REGISTERS],
        sources: Loads<'_>,
        ahead: &Ahead,
        uniforms: &[f32; SOURCES],
        n: usize,
        sink: &mut Sink<'_>,
    ) -> Option<f32> {
        let loads = sources.0;
        // (A single load never has a wrap: `Tape::gather`.)
        if let (Some(i), Sink::Combine(dst, op, first)) = (single_load(ops), &mut *sink) {
            // A load combined as it is (a sum of rows): straight from it.
            combine_into(dst, &loads[i][..n], *op, *first);
            return None;
        }
        if let (Some(i), Sink::Fold(op)) = (single_load(ops), &*sink)
            && let Some(folded) = fold_whole(&loads[i][..n], *op)
        {
            return Some(folded);
        }
        // Only folds of more than a tile need this (1 KB to fill, and
        // folding it whole cost a 64-lane row's fold 4x its lanes).
        let mut folded = match sink {
            Sink::Fold(op) if n > TILE => Some([identity(*op); TILE]),
            _ => None,
        };
        let (scratch, above) = regs.split_first_mut().expect("registers exist");
        let first = match sink {
            Sink::Stream(dst) => stream::to_line(dst),
            _ => 0,
        };
        for (lo, len) in tiles(n, first) {
            for (buf, at) in ahead.iter().flatten() {
                buf.prefetch(at + lo, len);
            }
            // Register 0 is the destination itself for stores: no copy out.
            // (A closure here would be compiled without the caller's
            // target features.)
            let reg0: &mut [f32] = match sink {
                Sink::Store(dst) => &mut dst[lo..lo + len],
                _ => &mut scratch[..len],
            };
            for op in ops {
                step(op, reg0, above, sources, uniforms, lo);
            }
            match sink {
                Sink::Store(_) => {}
                Sink::Stream(dst) => stream::copy(&mut dst[lo..lo + len], &scratch[..len]),
                Sink::Combine(dst, op, first) => {
                    combine_into(&mut dst[lo..lo + len], &scratch[..len], *op, *first)
                }
                Sink::Fold(op) => {
                    if let Some(folded) = folded.as_mut() {
                        combine_into(&mut folded[..len], &scratch[..len], *op, false);
                    }
                }
            }
        }
        let Sink::Fold(op) = sink else { return None };
        Some(match folded {
            Some(folded) => fold_f32(&folded, *op),
            None => {
                // One tile, folded where it is. Padded with the identity
                // to a multiple of `fold_f32`'s eight partial sums, so the
                // sum adds in the order a whole tile's fold would.
                let padded = n.next_multiple_of(8);
                scratch[n..padded].fill(identity(*op));
                fold_f32(&scratch[..padded], *op)
            }
        })
    }
);

/// The tiles of `n` lanes, each a start and a length: `first` lanes (if
/// any), then [`TILE`] at a time. A streamed store's tiles start on its
/// cache lines (`first`: the lanes before its first line): a tile that
/// ended within a line would store that line in plain stores (a layer
/// norm's pass over rows of 4096 at numpy's 16-byte offset, in C: 1.32x
/// the time of tiles on lines; `benches/ab_builds.py layernorm:4096x4096`).
fn tiles(n: usize, first: usize) -> impl Iterator<Item = (usize, usize)> {
    let first = first.min(n);
    let head = (first > 0).then_some((0, first));
    head.into_iter().chain(
        (first..n)
            .step_by(TILE)
            .map(move |lo| (lo, TILE.min(n - lo))),
    )
}

/// Runs one op on the lanes `lo..lo + reg0.len()`.
#[inline(always)]
fn step(
    op: &Op,
    reg0: &mut [f32],
    above: &mut [[f32; TILE]],
    loads: Loads<'_>,
    uniforms: &[f32; SOURCES],
    lo: usize,
) {
    let len = reg0.len();
    let (dst, d, rest): (u8, &mut [f32], &[[f32; TILE]]) = match *op {
        Op::Set { dst, .. }
        | Op::Unary { dst, .. }
        | Op::Round { dst, .. }
        | Op::Binary { dst, .. }
        | Op::Apply { dst, .. }
        | Op::Select { dst, .. }
            if dst == 0 =>
        {
            (0, reg0, above)
        }
        Op::Set { dst, .. }
        | Op::Unary { dst, .. }
        | Op::Round { dst, .. }
        | Op::Binary { dst, .. }
        | Op::Apply { dst, .. }
        | Op::Select { dst, .. } => {
            let (d, rest) = above[usize::from(dst) - 1..]
                .split_first_mut()
                .expect("register exists");
            (dst, &mut d[..len], rest)
        }
    };
    match *op {
        Op::Set { src, .. } => match read(src, dst, rest, loads, uniforms, lo, len) {
            Rhs::Each(b) => d.copy_from_slice(b),
            Rhs::Same(c) => d.fill(c),
        },
        Op::Unary { op, .. } => unary_f32(op, d),
        Op::Round { half, .. } => round_to(half, d),
        Op::Binary { op, rhs, swap, .. } => {
            arith(op, d, read(rhs, dst, rest, loads, uniforms, lo, len), swap)
        }
        Op::Apply { op, lhs, rhs, .. } => {
            let operand = |x| read(x, dst, rest, loads, uniforms, lo, len);
            arith_from(op, d, Some(operand(lhs)), operand(rhs), false);
        }
        Op::Select {
            on_true, on_false, ..
        } => {
            let operand = |x| read(x, dst, rest, loads, uniforms, lo, len);
            select(d, operand(on_true), operand(on_false));
        }
    }
}

/// Reads an operand of an op into register `dst`; `above` holds the
/// registers above it (register operands always are).
#[inline(always)]
fn read<'a>(
    src: Operand,
    dst: u8,
    above: &'a [[f32; TILE]],
    (loads, wraps): Loads<'a>,
    uniforms: &[f32; SOURCES],
    lo: usize,
    len: usize,
) -> Rhs<'a> {
    match src {
        Operand::Load(i) => {
            let (load, wrap) = (loads[usize::from(i)], wraps[usize::from(i)]);
            let at = if wrap == usize::MAX { lo } else { lo % wrap };
            Rhs::Each(&load[at..at + len])
        }
        Operand::Uniform(i) => Rhs::Same(uniforms[usize::from(i)]),
        Operand::Reg(r) => Rhs::Each(&above[usize::from(r - dst - 1)][..len]),
    }
}
