//! Rows of an outer reduction combined through a tape in one call.
#![allow(unsafe_code)]

use tilefuse_ir::ReduceOp;

use super::{Offsets, Registers, Sink, Tape, single_load};
use crate::cpu::lanes::combine_into;
use crate::cpu::memory::RawBuf;
use crate::cpu::simd_math::multiversion;

/// Rows of an outer reduction combined in one call: `rows` rows of lanes
/// `start..start + dst.len()`, the loads moving by `stride` per row.
pub struct Rows<'a> {
    pub offsets: Offsets,
    pub stride: Offsets,
    pub start: usize,
    pub rows: i64,
    pub dst: &'a mut [f32],
    pub op: ReduceOp,
    /// The first row is the elements' first visit.
    pub first: bool,
}

impl Tape {
    /// Combines `rows` rows into `dst` (see [`Rows`]) and leaves
    /// `rows.offsets` at the next row. A tape that is one load is summed
    /// straight from it in one call; others run row by row.
    pub fn run_rows(&self, buffers: &[RawBuf], regs: &mut Registers, rows: &mut Rows<'_>) {
        let n = rows.dst.len();
        if let Some(i) = single_load(&self.ops)
            && self.loads[i].consecutive()
        {
            let (at, step) = (rows.offsets.loads[i], rows.stride.loads[i]);
            // The span of every row, whichever way the rows step.
            let final_row = at + step * (rows.rows - 1);
            let lo = at.min(final_row) + rows.start as i64;
            let hi = at.max(final_row) + (rows.start + n) as i64;
            let src = unsafe {
                buffers[self.loads[i].buffer].slice::<f32>(lo as usize, (hi - lo) as usize)
            };
            let from = (at + rows.start as i64 - lo) as usize;
            combine_rows(rows.dst, src, from, step, rows.rows, rows.op, rows.first);
            rows.offsets.advance_times(&rows.stride, rows.rows);
            return;
        }
        for r in 0..rows.rows {
            let first = rows.first && r == 0;
            let sink = Sink::Combine(&mut *rows.dst, rows.op, first);
            self.run_from(buffers, &rows.offsets, (rows.start, n), regs, sink);
            rows.offsets.advance(&rows.stride);
        }
    }
}

multiversion!(
    /// `dst` combined with `rows` rows of `src`, row `r` starting at
    /// `from + r * stride`.
    fn combine_rows(
        dst: &mut [f32],
        src: &[f32],
        from: usize,
        stride: i64,
        rows: i64,
        op: ReduceOp,
        first: bool,
    ) {
        let n = dst.len();
        for r in 0..rows {
            let at = (from as i64 + r * stride) as usize;
            combine_into(dst, &src[at..at + n], op, first && r == 0);
        }
    }
);
