//! Workgroups cannot wait for each other inside one dispatch, so every
//! loop above a workgroup-bound loop must have that loop's subtree as its
//! only child (the CPU device has no such limit and skips this check).

use super::{LowerError, Lowered};
use crate::ir::{Kernel, LoopKind, Node};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    l.kernel
        .body
        .iter()
        .try_for_each(|root| check(&l.kernel, root, true))
}

fn check(k: &Kernel, node: &Node, on_spine: bool) -> Result<(), LowerError> {
    let Node::Loop(l, body) = node else {
        return Ok(());
    };
    if let LoopKind::Bound(axis) = k.loop_(*l).kind
        && axis.is_workgroup()
        && !on_spine
    {
        return Err(LowerError {
            pass: "verify_workgroup_spine",
            message: format!(
                "loop {} is bound to {} below a loop with several children; workgroups cannot \
                 synchronize within one kernel (give each such nest its own root loop)",
                k.loop_(*l).name,
                axis.name()
            ),
        });
    }
    let single = body.len() == 1;
    body.iter()
        .try_for_each(|n| check(k, n, on_spine && single))
}
