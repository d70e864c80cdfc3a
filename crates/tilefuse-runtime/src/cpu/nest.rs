//! Reading loop nests: loops of one iteration looked through, loops run
//! in order on one thread.

use tilefuse_sched::ir::{BlockId, Index, Kernel, LoopId, LoopKind, Node, Var};

/// Looks through loops of one iteration to the single node of a body,
/// collecting their variables.
pub(super) fn through_units<'a>(
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

/// The loops of a chain in `body`, each the only child of the one before
/// (looking through loops of one iteration, collected into `units`), and
/// the block the chain ends at.
pub(super) fn loop_chain(
    kernel: &Kernel,
    mut body: &[Node],
    units: &mut Vec<usize>,
) -> Option<(Vec<LoopId>, BlockId)> {
    let mut loops = Vec::new();
    loop {
        match through_units(kernel, body, units)? {
            Node::Loop(l, inner) => {
                loops.push(*l);
                body = inner;
            }
            Node::Block(id) => return Some((loops, *id)),
        }
    }
}

/// A loop the executor runs in order on one thread: neither parallel nor
/// bound to workgroups (invocation loops run as serial loops).
pub(super) fn in_one_thread(kernel: &Kernel, l: LoopId) -> bool {
    match kernel.loop_(l).kind {
        LoopKind::Parallel => false,
        LoopKind::Bound(axis) => !axis.is_workgroup(),
        _ => true,
    }
}

/// The block a loop body consists of, looking through loops of extent 1
/// (their variable stays 0), so that e.g. a vector loop of width 1 under an
/// invocation loop does not turn every lane into a chunk of its own.
pub(super) fn single_block(kernel: &Kernel, body: &[Node]) -> Option<BlockId> {
    match body {
        [Node::Block(b)] => Some(*b),
        [Node::Loop(l, inner)] if kernel.loop_(*l).extent == 1 => single_block(kernel, inner),
        _ => None,
    }
}

/// A block's guards (its iterators that may run past their extents) and
/// live split predicates, as `expr < bound` over loop variables.
pub(super) fn block_bounds(kernel: &Kernel, id: BlockId) -> impl Iterator<Item = (Index, i64)> {
    let block = kernel.block(id);
    let guards = (kernel.needs_guard(id).into_iter())
        .map(|g| (block.bindings[g].clone(), block.iters[g].extent as i64));
    (kernel.live_predicates(id).into_iter())
        .map(|(e, b)| (e, b as i64))
        .chain(guards)
        .map(|(x, bound)| over_dividend(x, bound))
}

/// `x / c < bound` holds exactly when `x < bound * c` (`c > 0`, division
/// rounding down): a bound on a quotient reads as one on the dividend,
/// which is linear where the quotient is not. A flat stage over a 200 x
/// 100 output guards its rows as `i / 100 < 200`; checked lane by lane,
/// it cost a split-k matmul's sum four fifths of its time.
fn over_dividend(x: Index, bound: i64) -> (Index, i64) {
    match x {
        Index::Div(inner, c) if c > 0 => over_dividend(*inner, bound.saturating_mul(c)),
        x => (x, bound),
    }
}

/// The bounds `x < bound` that every block under loop `l` has, moving
/// with `l`, with `x` at its least over the loops inside `l` (the start
/// of its region, `Kernel::region_over`): an iteration of `l` that fails
/// one runs no block. So the workgroups of a swizzled grid past its edge,
/// and the invocations of a tile past a ragged edge, skip their nests
/// whole instead of failing every block's check (a swizzled 8 x 256 x 100
/// matmul whose 512 workgroups were 7/8 past the edge: 6.6 ms, then 0.26).
pub(super) fn hoisted_bounds(kernel: &Kernel, l: LoopId) -> Vec<(Index, i64)> {
    let inner = kernel.loops_inside(l);
    let least = |x: Index| {
        let region = kernel.region_over(&inner, 1, &[vec![x]]).ok()?;
        Some(region.start[0].simplified())
    };
    let mut common: Option<Vec<(Index, i64)>> = None;
    for id in kernel.blocks_under(l) {
        let mine: Vec<(Index, i64)> = block_bounds(kernel, id)
            .filter_map(|(x, bound)| Some((least(kernel.within_loops(&x))?, bound)))
            .filter(|(x, _)| x.mentions(Var::Loop(l)))
            .collect();
        let kept = match common {
            None => mine,
            Some(c) => c.into_iter().filter(|b| mine.contains(b)).collect(),
        };
        if kept.is_empty() {
            return kept;
        }
        common = Some(kept);
    }
    common.unwrap_or_default()
}
