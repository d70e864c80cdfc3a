//! Loops clipped to the iterations that run something, for the CPU device:
//! a loop whose last iterations fail a guard or predicate of every block
//! under it (a workgroup wider than the row it covers: 128 invocations over
//! rows of 64) runs only the iterations before them. The CPU device runs
//! a chain of loops as one lane step where each moves its accesses by the
//! inner ones' extents, which an idle tail breaks: rows of 64 in
//! workgroups of 128 ran a lane step per row (0.8 ms for 512 x 16 x 64,
//! 0.08 in workgroups of 64). GPUs keep their workgroups as scheduled.

use super::distribute::loops_in_post_order;
use super::{LowerError, Lowered};
use crate::ir::{Block, Index, Kernel, LoopId, Var};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let k = &mut l.kernel;
    for id in loops_in_post_order(&k.body) {
        let extent = k.loop_(id).extent;
        let runs = (k.blocks_under(id).iter())
            .map(|&b| iterations_that_run(k, k.block(b), id))
            .max()
            .unwrap_or(extent);
        if (1..extent).contains(&runs) {
            k.loop_mut(id).extent = runs;
        }
    }
    Ok(())
}

/// How many of loop `l`'s first iterations can run `block`: past them, one
/// of its conditions (an iterator's binding under its extent, a predicate)
/// fails whatever the other loops' values. The loop's extent when none
/// grows with it.
fn iterations_that_run(k: &Kernel, block: &Block, l: LoopId) -> u64 {
    let extent = k.loop_(l).extent;
    let conditions = (block.bindings.iter())
        .zip(block.iters.iter().map(|i| i.extent))
        .chain(block.predicates.iter().map(|(x, bound)| (x, *bound)));
    conditions
        .filter_map(|(x, bound)| first_failing(k, x, bound, l))
        .fold(extent, u64::min)
}

/// The first value of loop `l` from which `x < bound` fails for every
/// value of the other loops: where `x = a * l + rest` with `a > 0`, the
/// least `l` with `a * l + min(rest) >= bound`.
fn first_failing(k: &Kernel, x: &Index, bound: u64, l: LoopId) -> Option<u64> {
    let (a, rest) = x.linear_in(Var::Loop(l))?;
    if a <= 0 {
        return None;
    }
    let least = rest.bounds(&|v| k.loop_range(v)).0;
    Some(((bound as i64 - least).max(0) as u64).div_ceil(a as u64))
}
