//! Loads that move with a tape's lanes, and how a lane step that runs
//! several loops as one turns loads that move otherwise into such loads.
#![allow(unsafe_code)]

use tilefuse_sched::ir::Index;

use tilefuse_ir::ReduceOp;

use super::lane_fold::{fold_piece, identity};
use super::{Folded, Offsets, Op, Operand, SOURCES, TILE, Tape, Uniform, single_load};
use crate::cpu::lanes::fold_f32;
use crate::cpu::loop_index::LoopIndex;
use crate::cpu::memory::{RawBuf, prefetch};
use crate::cpu::simd_math::multiversion;

/// A load that moves with the lane: lane `i` of a run reads element
/// `at + (i / period) * step + (i % period) * stride`, `at` (lane 0's)
/// over the loop variables. A load of one loop's lanes never wraps
/// (`period` is `usize::MAX`). A lane step that runs rows as one makes
/// `period` the row's length: a row's statistic (`stride` 0) repeats over
/// the row, a vector along the rows (`step` 0) restarts with each row.
#[derive(Debug)]
pub(super) struct LaneLoad {
    pub(super) buffer: usize,
    pub(super) at: LoopIndex,
    pub(super) stride: usize,
    pub(super) period: usize,
    pub(super) step: usize,
    /// The buffer holds halves: always gathered (widened into f32), never
    /// read where they lie.
    pub(super) half: bool,
}

/// A load's `period` and `step` (see [`LaneLoad`]).
pub type Period = (usize, usize);

/// Whether rows `step` apart whose lanes lie `stride` apart read a
/// transpose: the rows nearer than the lanes (`x.T` read along its rows).
pub fn transposed(step: usize, stride: usize) -> bool {
    0 < step && step < stride
}

/// Columns a transposed gather reads together, row by row, and how far
/// ahead it prefetches. Columns a power of two apart share one set of an
/// 8-way L1: 2048² ran in 3.1 ms in blocks of 8, 5.2 of 16, 6.8 of 32,
/// and 7.2 a column at a time.
const COLUMN_BLOCK: usize = 8;

impl LaneLoad {
    /// A load of one loop's lanes, `stride` apart.
    pub(super) fn strided(buffer: usize, at: LoopIndex, stride: usize) -> LaneLoad {
        LaneLoad {
            buffer,
            at,
            stride,
            period: usize::MAX,
            step: 0,
            half: false,
        }
    }

    /// Whether the lanes read consecutive elements (read where they lie;
    /// the others are gathered first).
    pub(super) fn consecutive(&self) -> bool {
        self.stride == 1 && !self.wraps() && !self.half
    }

    /// Whether the lanes wrap around rows of `period`.
    pub(super) fn wraps(&self) -> bool {
        self.period != usize::MAX
    }

    /// Whether the lanes restart with each row (a vector along the rows).
    pub(super) fn repeats(&self) -> bool {
        self.wraps() && self.step == 0
    }

    /// Appends lanes `start..start + n` to `into`, lane 0 reading element
    /// `at` of `buf`, a period at a time. A load that restarts with each
    /// row (`step` 0) reads its first period and copies what it has
    /// onward, doubling it (a layer norm's weights over rows of 64 copied
    /// 256 bytes a row).
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    pub(super) unsafe fn gather(
        &self,
        buf: &RawBuf,
        at: usize,
        (start, n): (usize, usize),
        (into, rows): (&mut Vec<f32>, &mut Vec<f32>),
    ) {
        if self.step != 0 || n <= self.period {
            return unsafe { self.gather_periods(buf, at, (start, n), (into, rows)) };
        }
        let from = into.len();
        unsafe { self.gather_periods(buf, at, (start, self.period), (into, rows)) };
        while into.len() - from < n {
            let have = into.len() - from;
            into.extend_from_within(from..from + have.min(n - have));
        }
    }

    /// As [`LaneLoad::gather`], each period read from `buf`: a row's
    /// statistic (`stride` 0) read once a row into `rows`, then spread
    /// over its lanes.
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    unsafe fn gather_periods(
        &self,
        buf: &RawBuf,
        at: usize,
        (start, n): (usize, usize),
        (into, rows): (&mut Vec<f32>, &mut Vec<f32>),
    ) {
        if self.stride == 0 && n > 0 {
            rows.clear();
            unsafe { self.gather_rows(buf, at, (start, n), rows) };
            return spread(rows, self.period, start, n, into);
        }
        let head = ((self.period - start % self.period) % self.period).min(n);
        let whole = (n - head) / self.period;
        if !self.transposes() || whole < 2 {
            return unsafe { self.gather_pieces(buf, at, (start, n), into) };
        }
        let first_row = (start + head) / self.period;
        let tail = start + head + whole * self.period;
        unsafe {
            self.gather_pieces(buf, at, (start, head), into);
            self.gather_transposed(buf, at, (first_row, whole), into);
            self.gather_pieces(buf, at, (tail, start + n - tail), into);
        }
    }

    /// Whether the lanes wrap around rows and read a transpose (see
    /// [`transposed`]).
    fn transposes(&self) -> bool {
        self.wraps() && transposed(self.step, self.stride) && !self.half
    }

    /// Lanes `start..start + n` read piece by piece, each row's lanes
    /// `stride` apart.
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    unsafe fn gather_pieces(
        &self,
        buf: &RawBuf,
        at: usize,
        lanes: (usize, usize),
        into: &mut Vec<f32>,
    ) {
        for (_, from, len) in self.pieces(at, lanes) {
            unsafe { buf.gather_f32(from, self.stride, len, into) };
        }
    }

    /// The whole rows `first..first + rows` of a load that
    /// [`transposes`](Self::transposes), read a block of columns at a
    /// time: a column's elements lie `step` apart, so the block's lines
    /// serve every row of the run before the next block's are read. Read
    /// row by row, each lane touched another line and page (`a + b.T` over
    /// 2048², into an existing array: 7.2 ms, then 3.1).
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    unsafe fn gather_transposed(
        &self,
        buf: &RawBuf,
        at: usize,
        (first, rows): (usize, usize),
        into: &mut Vec<f32>,
    ) {
        let (period, step, stride) = (self.period, self.step, self.stride);
        let span = (rows - 1) * step + (period - 1) * stride + 1;
        let src = unsafe { buf.slice::<f32>(at + first * step, span) };
        let base = into.len();
        into.reserve(rows * period);
        let out = &mut into.spare_capacity_mut()[..rows * period];
        let column_bytes = (rows - 1) * step * 4 + 4;
        for c0 in (0..period).step_by(COLUMN_BLOCK) {
            let columns = c0..(c0 + COLUMN_BLOCK).min(period);
            // The next block's lines: a column's are a few lines, too few
            // for the hardware prefetchers to follow.
            for c in columns.clone() {
                let ahead = src.as_ptr().wrapping_add((c + COLUMN_BLOCK) * stride);
                for line in (0..column_bytes).step_by(64) {
                    prefetch(ahead.cast::<u8>().wrapping_add(line));
                }
            }
            for r in 0..rows {
                for c in columns.clone() {
                    out[r * period + c].write(src[r * step + c * stride]);
                }
            }
        }
        // SAFETY: the loops wrote every lane of the rows.
        unsafe { into.set_len(base + rows * period) };
    }

    /// The lanes `start..start + n`, lane 0 reading element `at`, cut
    /// where they wrap: each piece's first lane, first element and length.
    fn pieces(
        &self,
        at: usize,
        (start, n): (usize, usize),
    ) -> impl Iterator<Item = (usize, usize, usize)> {
        let mut lane = start;
        std::iter::from_fn(move || {
            (lane < start + n).then(|| {
                let (row, column) = (lane / self.period, lane % self.period);
                let len = (self.period - column).min(start + n - lane);
                let piece = (lane, at + row * self.step + column * self.stride, len);
                lane += len;
                piece
            })
        })
    }
}

impl LaneLoad {
    /// Lanes `start..start + n` (more than a tile) of a load of
    /// consecutive elements that wraps around rows, folded by `op` where
    /// they lie, lane 0 reading element `at` of `buf`: each row's piece in
    /// place, added as the run over the gathered lanes would add them (a
    /// sum over axes 0 and 2 of 64 x 512 x 256 spent three quarters of
    /// its time copying the pieces first).
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    pub(super) unsafe fn fold_rows(
        &self,
        buf: &RawBuf,
        at: usize,
        (start, n): (usize, usize),
        op: ReduceOp,
    ) -> f32 {
        debug_assert!(self.stride == 1 && self.wraps() && n > TILE);
        let mut acc = [identity(op); TILE];
        for (lane, from, len) in self.pieces(at, (start, n)) {
            let piece = unsafe { buf.slice::<f32>(from, len) };
            fold_piece(&mut acc, lane - start, piece, op);
        }
        fold_f32(&acc, op)
    }

    /// Appends to `rows` a row's statistic (`stride` 0), lane 0 reading
    /// element `at`: one value for each row the lanes `start..start + n`
    /// span, the first row's first.
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for the elements read.
    pub(super) unsafe fn gather_rows(
        &self,
        buf: &RawBuf,
        at: usize,
        (start, n): (usize, usize),
        rows: &mut Vec<f32>,
    ) {
        let first = start / self.period;
        let count = rows_spanned(self.period, (start, n));
        unsafe { buf.gather_f32(at + first * self.step, self.step, count, rows) };
    }
}

/// The number of rows of `period` lanes that the lanes `start..start + n`
/// (`n` above 0) span.
pub(super) fn rows_spanned(period: usize, (start, n): (usize, usize)) -> usize {
    (start + n - 1) / period + 1 - start / period
}

multiversion!(
    /// Appends to `into` the lanes `start..start + n` of rows of `period`
    /// lanes, each row's lanes its value in `rows` (`rows[0]` the value
    /// of lane `start`'s row). Compiled for wide stores: a layer norm over
    /// rows of 32 spent a quarter of its time filling its statistics'
    /// lanes 4 at a time.
    pub(super) fn spread(rows: &[f32], period: usize, start: usize, n: usize, into: &mut Vec<f32>) {
        into.reserve(n);
        let out = &mut into.spare_capacity_mut()[..n];
        let mut done = 0;
        let mut len = period - start % period;
        for &v in rows {
            let row = &mut out[done..(done + len).min(n)];
            row.iter_mut().for_each(|x| {
                x.write(v);
            });
            done += row.len();
            len = period;
        }
        assert_eq!(done, n, "a value for every row the lanes span");
        // SAFETY: the `n` lanes past the length were written above.
        unsafe { into.set_len(into.len() + n) };
    }
);

impl Tape {
    /// The fold of lanes `start..start + n` for a tape that is one load of
    /// consecutive elements wrapping around rows, read where they lie
    /// rather than gathered (runs of up to a tile are gathered: their
    /// fold adds in another order, and copying a tile costs little).
    pub(super) fn fold_where_they_lie(
        &self,
        buffers: &[RawBuf],
        offsets: &Offsets,
        (start, n): (usize, usize),
        op: ReduceOp,
    ) -> Option<f32> {
        let i = single_load(&self.ops)?;
        let load = &self.loads[i];
        let at = offsets.loads[i] as usize;
        (n > TILE && load.stride == 1 && load.wraps() && !load.half)
            .then(|| unsafe { load.fold_rows(&buffers[load.buffer], at, (start, n), op) })
    }

    /// Gives each load (lane-invariant or moving with the lane) the
    /// period that `periodic` finds from its offset over loop variables
    /// (without the lane's) and its stride along the lane; `false`,
    /// leaving the tape as it was, where that makes more loads than a
    /// tape reads.
    pub fn wrap_loads(&mut self, periodic: impl Fn(&Index, usize) -> Option<Period>) -> bool {
        let mut repeated = Vec::new();
        let mut uniforms = Vec::new();
        let operands: Vec<Operand> = (self.uniforms.iter())
            .map(|u| match u {
                Uniform::Load(buffer, at) if let Some((period, step)) = periodic(at.index(), 0) => {
                    repeated.push(LaneLoad {
                        period,
                        step,
                        ..LaneLoad::strided(*buffer, at.clone(), 0)
                    });
                    Operand::Load((self.loads.len() + repeated.len() - 1) as u8)
                }
                kept => {
                    uniforms.push(kept.clone());
                    Operand::Uniform(uniforms.len() as u8 - 1)
                }
            })
            .collect();
        if self.loads.len() + repeated.len() > SOURCES {
            return false;
        }
        for load in &mut self.loads {
            if let Some((period, step)) = periodic(load.at.index(), load.stride) {
                (load.period, load.step) = (period, step);
            }
        }
        if repeated.is_empty() {
            return true;
        }
        let renamed = |x: &mut Operand| {
            if let Operand::Uniform(i) = *x {
                *x = operands[usize::from(i)];
            }
        };
        for op in &mut self.ops {
            match op {
                Op::Set { src, .. } => renamed(src),
                Op::Binary { rhs, .. } => renamed(rhs),
                Op::Apply { lhs, rhs, .. }
                | Op::Select {
                    on_true: lhs,
                    on_false: rhs,
                    ..
                } => {
                    renamed(lhs);
                    renamed(rhs);
                }
                Op::Unary { .. } | Op::Round { .. } => {}
            }
        }
        self.loads.extend(repeated);
        self.uniforms = uniforms;
        self.folded = Folded::of(&self.ops, self.uniforms.len(), &self.loads);
        true
    }

    /// Whether a load wraps around a period (see [`LaneLoad`]).
    pub fn wraps(&self) -> bool {
        self.loads.iter().any(LaneLoad::wraps)
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{DataRef, ReduceOp};
    use tilefuse_sched::ir::Index;

    use super::super::lane_fold::fold_whole;
    use super::{LaneLoad, TILE};
    use crate::cpu::loop_index::LoopIndex;
    use crate::cpu::memory::RawBuf;

    /// Lane `i` of a load wrapping around rows of 3 reads `at + (i / 3) *
    /// step + (i % 3) * stride`, from any first lane and for any count:
    /// a vector restarting with each row (`step` 0, copied onward from
    /// its first period), a row's statistic (`stride` 0), both moving, and
    /// transposed reads (`step` < `stride`, whole rows gathered by column).
    #[test]
    fn wrapped_lanes_read_by_their_row_and_column() {
        let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let buf = RawBuf::of_input(DataRef::F32(&data));
        for (stride, step) in [(1, 0), (2, 0), (0, 5), (2, 7), (5, 1), (7, 2)] {
            let load = LaneLoad {
                period: 3,
                step,
                ..LaneLoad::strided(0, LoopIndex::new(Index::Const(0)), stride)
            };
            for (start, n) in [(0, 3), (2, 11), (4, 2), (1, 20), (3, 12)] {
                let mut got = vec![-1.0];
                unsafe { load.gather(&buf, 4, (start, n), (&mut got, &mut Vec::new())) };
                let lane = |i: usize| (4 + (i / 3) * step + (i % 3) * stride) as f32;
                let want: Vec<f32> = std::iter::once(-1.0)
                    .chain((start..start + n).map(lane))
                    .collect();
                assert_eq!(got, want, "stride {stride}, step {step}, lanes {start}+{n}");
            }
        }
    }

    /// A transposed read of rows longer than a block of columns, from
    /// mid-row to mid-row, lanes as their row and column place them.
    #[test]
    fn transposed_rows_gather_by_blocks_of_columns() {
        let (period, stride, step) = (21, 30, 1);
        let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let buf = RawBuf::of_input(DataRef::F32(&data));
        let load = LaneLoad {
            period,
            step,
            ..LaneLoad::strided(0, LoopIndex::new(Index::Const(0)), stride)
        };
        assert!(load.transposes());
        for (start, n) in [(0, 84), (5, 100), (20, 43), (1, 20)] {
            let mut got = Vec::new();
            unsafe { load.gather(&buf, 2, (start, n), (&mut got, &mut Vec::new())) };
            let lane = |i: usize| (2 + (i / period) * step + (i % period) * stride) as f32;
            let want: Vec<f32> = (start..start + n).map(lane).collect();
            assert_eq!(got, want, "lanes {start}+{n}");
        }
    }

    /// A wrapped load's lanes folded where they lie add bit for bit as
    /// their gathered copy folds: rows shorter and longer than a tile, of
    /// no multiple of it, from mid-row, and rows that repeat (`step` 0).
    #[test]
    fn rows_fold_where_they_lie_as_their_gathered_lanes_do() {
        let data: Vec<f32> = (0..20_000)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.37)
            .collect();
        let buf = RawBuf::of_input(DataRef::F32(&data));
        for (period, step) in [
            (256, 300),
            (100, 150),
            (333, 400),
            (1000, 1000),
            (7, 9),
            (300, 0),
        ] {
            let load = LaneLoad {
                period,
                step,
                ..LaneLoad::strided(0, LoopIndex::new(Index::Const(0)), 1)
            };
            for (start, n) in [
                (0, TILE + 1),
                (5, 1000),
                (period - 1, 3 * TILE + 5),
                (0, 4096),
            ] {
                for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                    let mut gathered = Vec::new();
                    unsafe { load.gather(&buf, 3, (start, n), (&mut gathered, &mut Vec::new())) };
                    let want = fold_whole(&gathered, op).expect("over a tile");
                    let got = unsafe { load.fold_rows(&buf, 3, (start, n), op) };
                    let case = format!("rows of {period}, step {step}, lanes {start}+{n}, {op:?}");
                    assert_eq!(got.to_bits(), want.to_bits(), "{case}");
                }
            }
        }
    }
}
