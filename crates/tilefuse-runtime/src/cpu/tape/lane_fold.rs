//! How a run's lanes fold into one value (`Sink::Fold`), in one order
//! wherever they ran: through a tape's registers, where they lie in a
//! buffer, or staged with other rows' lanes.

use tilefuse_ir::{DType, ReduceOp, reduce_identity};

use super::TILE;
use crate::cpu::lanes::{combine_into, fold_f32};
use crate::cpu::simd_math::multiversion;

/// A load folded as it is (a row sum), or `None` where it would need
/// padding (one tile not a multiple of `fold_f32`'s eight partial sums:
/// `run_tiles` pads it in a register). It adds in the order a copy
/// through a register would (the copy was over half of a 4096-column row
/// sum's time), tile after tile for rows of more than a tile.
#[inline(always)]
pub(super) fn fold_whole(row: &[f32], op: ReduceOp) -> Option<f32> {
    if row.len() > TILE {
        let mut acc = [identity(op); TILE];
        for tile in row.chunks(TILE) {
            combine_into(&mut acc[..tile.len()], tile, op, false);
        }
        return Some(fold_f32(&acc, op));
    }
    row.len().is_multiple_of(8).then(|| fold_f32(row, op))
}

/// `lanes` folded by `op` as a tape's run over them into [`Sink::Fold`]
/// adds them, so that a row folds alike whether its lanes ran alone or
/// were staged with other rows' (`scatter::Segments`).
/// Inlined where rows are short: a dispatch to wider vectors a row took
/// rows of 32 1.1x the time (and rows of 128 1.15x).
#[inline(always)]
pub fn fold_as_run(lanes: &[f32], op: ReduceOp) -> f32 {
    if lanes.len() > TILE {
        return fold_tiles(lanes, op);
    }
    fold_whole(lanes, op).unwrap_or_else(|| {
        // One tile, not a multiple of eight lanes: padded as `run_tiles`
        // pads its register.
        let mut padded = [identity(op); TILE];
        padded[..lanes.len()].copy_from_slice(lanes);
        fold_f32(&padded[..lanes.len().next_multiple_of(8)], op)
    })
}

multiversion!(
    /// A row of more than a tile folded as [`fold_as_run`] folds it,
    /// compiled for the widest vectors (rows of 1024 to 4096 took 1.2-1.3x
    /// the time without).
    fn fold_tiles(row: &[f32], op: ReduceOp) -> f32 {
        fold_whole(row, op).expect("a row of more than a tile folds whole")
    }
);

multiversion!(
    /// Combines `lanes`, the first of them lane `at` of a run, into the
    /// run's accumulator `acc`: lane `j` into `acc[j % TILE]`, as
    /// [`fold_whole`] combines a gathered run of more than a tile, so that
    /// pieces folded where they lie, in lane order, add as the run would.
    pub(super) fn fold_piece(acc: &mut [f32; TILE], at: usize, lanes: &[f32], op: ReduceOp) {
        let mut done = 0;
        while done < lanes.len() {
            let pos = (at + done) % TILE;
            let take = (TILE - pos).min(lanes.len() - done);
            combine_into(
                &mut acc[pos..pos + take],
                &lanes[done..done + take],
                op,
                false,
            );
            done += take;
        }
    }
);

/// The f32 value `op` starts a fold from.
pub(super) fn identity(op: ReduceOp) -> f32 {
    reduce_identity(op, DType::F32).as_f64() as f32
}
