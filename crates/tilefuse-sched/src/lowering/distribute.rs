//! Loop distribution for the CPU device: a loop it runs in order on one
//! thread, whose body is several short nests and whose iterations each
//! write elements of their own, becomes one loop per nest. The CPU device
//! runs a chain of loops around one block as one long lane step, but a
//! nest beside others runs one short step per iteration of the loop around
//! them: a workgroup of 128 softmax rows of 16 ran four steps of 16 lanes a
//! row (380 ns a row). Long rows keep their nests together, so that a row
//! is still in cache for the next nest. GPUs keep every nest as scheduled.

use super::{LowerError, Lowered};
use crate::ir::{BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, Var};

/// Block instances one iteration of a loop runs in its largest nest, up to
/// which its nests are distributed on the CPU: rows of 256 gain (16384
/// softmax rows: 0.77-0.82x the time), of 512 and 1024 not (1.06-1.07x).
pub const SHORT_NEST: u64 = 256;
/// The most block instances the loop runs in one nest in all: about what
/// stays in a core's L2 cache between nests (256 KB of f32). The bound was
/// L1's 8192 at first, which kept 128 softmax rows of 100 together: 3.5
/// ms for 8192 of them, distributed 1.8.
const MOST_INSTANCES: u64 = 1 << 16;

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let k = &mut l.kernel;
    for id in loops_in_post_order(&k.body) {
        if matches!(k.loop_node(id), Some(Node::Loop(_, body)) if distributable(k, id, body)) {
            distribute(k, id);
        }
    }
    Ok(())
}

/// Inner loops first, so that a distributed loop's nests are final.
pub(super) fn loops_in_post_order(nodes: &[Node]) -> Vec<LoopId> {
    let mut out = Vec::new();
    for n in nodes {
        if let Node::Loop(id, body) = n {
            out.extend(loops_in_post_order(body));
            out.push(*id);
        }
    }
    out
}

/// A serial or invocation loop of several short nests whose iterations
/// write disjoint elements.
fn distributable(k: &Kernel, l: LoopId, body: &[Node]) -> bool {
    let lp = k.loop_(l);
    let in_order = match lp.kind {
        LoopKind::Serial => true,
        LoopKind::Bound(axis) => !axis.is_workgroup(),
        _ => false,
    };
    in_order
        && lp.extent > 1
        && body.len() > 1
        && body.iter().all(|n| {
            let each = instances(k, n);
            each <= SHORT_NEST && each.saturating_mul(lp.extent) <= MOST_INSTANCES
        })
        && iterations_write_their_own(k, l)
}

/// Whether each iteration of `l` touches elements of its own in every
/// buffer a block under it writes.
fn iterations_write_their_own(k: &Kernel, l: LoopId) -> bool {
    let blocks = k.blocks_under(l);
    let mut written: Vec<BufferId> = blocks.iter().map(|&b| k.block(b).buffer).collect();
    written.sort_unstable();
    written.dedup();
    written.into_iter().all(|b| own_elements(k, l, &blocks, b))
}

/// Block instances in one run of `node`.
fn instances(k: &Kernel, node: &Node) -> u64 {
    match node {
        Node::Block(_) => 1,
        Node::Loop(id, body) => (body.iter().map(|n| instances(k, n)))
            .fold(0u64, u64::saturating_add)
            .saturating_mul(k.loop_(*id).extent),
    }
}

/// Whether every access to `buffer` by `blocks` (those under `l`) stays within elements of
/// its own iteration of `l`: along some dimension, each iteration's
/// accesses start at the same `c * l + rest` and span at most `c`.
fn own_elements(k: &Kernel, l: LoopId, blocks: &[BlockId], buffer: BufferId) -> bool {
    let accesses: Vec<Vec<Index>> = (blocks.iter())
        .flat_map(|&b| k.block(b).accesses(buffer))
        .map(|(_, indices)| indices)
        .collect();
    let inner = k.loops_inside(l);
    let rank = k.buffer(buffer).shape.len();
    let regions: Option<Vec<_>> = (accesses.iter())
        .map(|a| k.region_over(&inner, rank, std::slice::from_ref(a)).ok())
        .collect();
    let Some(regions) = regions else { return false };
    (0..rank).any(|d| {
        let moves = |r: &crate::ir::Region| {
            let (c, rest) = r.start[d].simplified().linear_in(Var::Loop(l))?;
            (c > 0 && r.extent[d] <= c as u64).then(|| (c, rest.simplified()))
        };
        let first = regions.first().and_then(moves);
        first.is_some() && regions.iter().all(|r| moves(r) == first)
    })
}

/// Gives each nest after the first a copy of `l` (its variable renamed in
/// the nest's blocks), placed after `l` in order.
fn distribute(k: &mut Kernel, l: LoopId) {
    let Some((siblings, at)) = k.find_loop_mut(l) else {
        return;
    };
    let Node::Loop(_, body) = &mut siblings[at] else {
        return;
    };
    let rest: Vec<Node> = body.drain(1..).collect();
    let mut copies = Vec::with_capacity(rest.len());
    for (i, nest) in rest.into_iter().enumerate() {
        let lp = k.loop_(l).clone();
        let copy = k.new_loop(format!("{}_{}", lp.name, i + 1), lp.extent);
        k.loop_mut(copy).kind = lp.kind;
        rename(k, &nest, l, copy);
        copies.push(Node::Loop(copy, vec![nest]));
    }
    let (siblings, at) = k.find_loop_mut(l).expect("still in the tree");
    siblings.splice(at + 1..at + 1, copies);
}

/// Loop `from` becomes `to` in the blocks in `node`: their bindings,
/// predicates and the indices lowering rebased over loops (a pipeline's
/// stages, realized buffers).
fn rename(k: &mut Kernel, node: &Node, from: LoopId, to: LoopId) {
    let mut blocks = Vec::new();
    node.blocks(&mut blocks);
    let swap = |v: Var| (v == Var::Loop(from)).then_some(Index::Var(Var::Loop(to)));
    for b in blocks {
        k.block_mut(b).subst(&swap);
    }
}
