//! Reductions across invocations (a loop bound to an invocation axis that
//! carries a reduction): every invocation of the axis must take part, a
//! tree's terms must all exist, and shuffles need subgroups as wide as the
//! loop. Records each launch's widest subgroup reduction.

use super::{LowerError, Lowered};
use crate::ir::{BlockId, CrossInvocation, Kernel, LoopId, LoopKind, Node, Var};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    for (i, root) in l.kernel.body.iter().enumerate() {
        let lanes = subgroup_lanes(&l.kernel, root, &l.launches[i])?;
        l.launches[i].subgroup_lanes = lanes;
    }
    Ok(())
}

fn fail(message: String) -> LowerError {
    LowerError {
        pass: "cross_invocation",
        message,
    }
}

/// The lanes of the widest subgroup reduction in `node` (0 for none).
fn subgroup_lanes(k: &Kernel, node: &Node, launch: &super::Launch) -> Result<u64, LowerError> {
    let Node::Loop(l, body) = node else {
        return Ok(0);
    };
    let mut lanes = 0;
    for n in body {
        lanes = lanes.max(subgroup_lanes(k, n, launch)?);
    }
    let lp = k.loop_(*l);
    let cross = k.cross_invocation_reduction(*l);
    if let LoopKind::Bound(axis) = lp.kind
        && !axis.is_workgroup()
        && cross.is_none()
        && let Some(b) = k
            .blocks_under(*l)
            .into_iter()
            .find(|&b| k.carried_iter(*l, b).is_some())
    {
        // A later primitive put something else under the loop bind checked.
        return Err(fail(format!(
            "loop {} reduces block {} across invocations, but no longer holds only it (or \
             serial or unrolled loops around it alone)",
            lp.name,
            k.block(b).name
        )));
    }
    if let (Some((b, how)), LoopKind::Bound(axis)) = (cross, lp.kind) {
        let size = launch.extent(axis);
        if lp.extent != size {
            return Err(fail(format!(
                "loop {} reduces across {} invocations of {}, but the workgroup has {size} \
                 along that axis; every invocation of the axis must take part",
                lp.name,
                lp.extent,
                axis.name()
            )));
        }
        match how {
            CrossInvocation::Shuffles => lanes = lanes.max(lp.extent),
            // The tree folds every lane's term; none may be missing
            // (guards of the rows are kept by the update).
            CrossInvocation::Tree if lane_guarded(k, *l, b) => {
                return Err(fail(format!(
                    "loop {} folds block {} in a tree, whose terms must all exist (a guard \
                     depends on the lane)",
                    lp.name,
                    k.block(b).name
                )));
            }
            CrossInvocation::Tree => {}
        }
    }
    Ok(lanes)
}

/// Whether some guard of block `b` depends on loop `l`.
fn lane_guarded(k: &Kernel, l: LoopId, b: BlockId) -> bool {
    let lane = Var::Loop(l);
    let block = k.block(b);
    k.needs_guard(b)
        .iter()
        .any(|&g| block.bindings[g].mentions(lane))
        || k.live_predicates(b).iter().any(|(e, _)| e.mentions(lane))
}
