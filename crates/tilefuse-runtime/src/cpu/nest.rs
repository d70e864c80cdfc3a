//! Reading loop nests: loops of one iteration looked through, loops run
//! in order on one thread.

use tilefuse_sched::ir::{BlockId, Index, Kernel, LoopId, LoopKind, Node};

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
}
