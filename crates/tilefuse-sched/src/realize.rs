//! Buffer realization, the lowering pass between scheduling and code: every
//! workgroup- or private-scope buffer shrinks to the region that one
//! iteration of the innermost loop enclosing all its uses touches, and its
//! indices are rebased to that region. A workgroup buffer then becomes a
//! `var<workgroup>` array per workgroup, a private one an array per
//! invocation (and per thread on the CPU).

use crate::ir::{BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, RegionError, Scope};
use crate::schedule::ScheduleError;

/// The kernel with its non-global buffers realized.
pub fn realize(kernel: &Kernel) -> Result<Kernel, ScheduleError> {
    let mut k = kernel.clone();
    for buffer in kernel.live_buffers() {
        let scope = kernel.buffer(buffer).scope;
        if scope != Scope::Global {
            realize_one(&mut k, buffer, scope)?;
        }
    }
    Ok(k)
}

fn users(k: &Kernel, buffer: BufferId) -> Vec<BlockId> {
    k.blocks_in_order()
        .into_iter()
        .filter(|&b| k.block(b).buffer == buffer || k.block(b).reads(buffer))
        .collect()
}

fn realize_one(k: &mut Kernel, buffer: BufferId, scope: Scope) -> Result<(), ScheduleError> {
    let name = k.buffer(buffer).name.clone();
    let fail =
        |msg: String| ScheduleError::Codegen(format!("buffer {name} ({scope:?} scope): {msg}"));
    let blocks = users(k, buffer);
    let paths: Vec<Vec<LoopId>> = blocks
        .iter()
        .map(|&b| k.path_to(&Node::Block(b)).expect("live"))
        .collect();
    let common: Vec<LoopId> = paths[0]
        .iter()
        .enumerate()
        .take_while(|(i, l)| paths.iter().all(|p| p.get(*i) == Some(l)))
        .map(|(_, l)| *l)
        .collect();
    let Some(&lca) = common.last() else {
        return Err(fail(
            "its blocks share no loop; compute_at the copy under the loop of the block that uses it".into(),
        ));
    };
    let inner = k.loops_inside(lca);
    for &l in &inner {
        if let LoopKind::Bound(axis) = k.loop_(l).kind {
            let allowed = scope == Scope::Workgroup && !axis.is_workgroup();
            if !allowed {
                return Err(fail(format!(
                    "loop {} bound to {} lies inside the loops that share it; a {scope:?} buffer cannot span {}s",
                    k.loop_(l).name,
                    axis.name(),
                    if axis.is_workgroup() {
                        "workgroup"
                    } else {
                        "invocation"
                    }
                )));
            }
        }
    }
    if scope == Scope::Workgroup
        && let Some(&l) = common
            .iter()
            .find(|&&l| matches!(k.loop_(l).kind, LoopKind::Bound(a) if !a.is_workgroup()))
    {
        return Err(fail(format!(
            "it is used inside loop {} bound to an invocation axis; use private scope",
            k.loop_(l).name
        )));
    }
    // Region of the buffer one iteration of `lca` touches.
    let mut accesses: Vec<(BlockId, Vec<Index>)> = Vec::new();
    for &b in &blocks {
        let block = k.block(b);
        if block.buffer == buffer {
            accesses.push((b, block.over_loops(&block.indices)));
        }
        let mut loads = Vec::new();
        block.value.loads(&mut loads);
        for (_, idx) in loads.into_iter().filter(|(buf, _)| *buf == buffer) {
            accesses.push((b, block.over_loops(idx)));
        }
    }
    let rank = k.buffer(buffer).shape.len();
    let accesses: Vec<Vec<Index>> = accesses.into_iter().map(|(_, a)| a).collect();
    let region = k.region(lca, rank, &accesses).map_err(|e| match e {
        RegionError::NotAffine { dim, inner } => fail(format!(
            "index {dim} is not affine in loop {}",
            k.loop_(inner).name
        )),
        RegionError::Diverging => {
            fail("its accesses move differently with the loops around them".into())
        }
    })?;
    let start = region.start;
    k.buffers[buffer.0 as usize].shape = region.extent;
    let rebase = |indices: &[Index]| -> Vec<Index> {
        indices
            .iter()
            .zip(&start)
            .map(|(ix, s)| ix.clone() + s.clone() * -1)
            .collect()
    };
    for &b in &blocks {
        let block = k.block(b).clone();
        let value = block
            .value
            .map_loads(&mut |buf, idx| crate::ir::Expr::Load {
                buffer: buf,
                indices: if buf == buffer {
                    rebase(idx)
                } else {
                    idx.to_vec()
                },
            });
        let bm = k.block_mut(b);
        bm.value = value;
        if bm.buffer == buffer {
            bm.indices = rebase(&block.indices);
        }
    }
    Ok(())
}
