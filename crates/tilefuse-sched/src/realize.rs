//! Buffer realization, the lowering pass between scheduling and code: every
//! workgroup- or private-scope buffer shrinks to the region that one
//! iteration of the innermost loop enclosing all its uses touches (a
//! dimension indexed non-affinely keeps its whole extent), and its indices
//! are rebased to that region. A workgroup buffer then becomes a
//! `var<workgroup>` array per workgroup, a private one an array per
//! invocation (and per thread on the CPU).

use crate::ir::{BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, Scope};
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
    // A workgroup buffer is shared by the invocations of a workgroup, so
    // its region spans the invocation-bound loops its uses share.
    let shared = match scope {
        Scope::Workgroup => common
            .iter()
            .position(|&l| matches!(k.loop_(l).kind, LoopKind::Bound(a) if !a.is_workgroup()))
            .unwrap_or(common.len()),
        _ => common.len(),
    };
    let Some(&lca) = common[..shared].last() else {
        return Err(fail(if shared < common.len() {
            "its blocks share no loop outside the invocation-bound ones; compute_at it under a \
             workgroup-level loop"
                .into()
        } else {
            "its blocks share no loop; compute_at the copy under the loop of the block that uses it"
                .into()
        }));
    };
    // Each invocation holds its own private copy: an invocation-bound loop
    // inside `lca` may read it, but writing it there would leave the other
    // invocations' copies incomplete.
    let writers: Vec<BlockId> = blocks
        .iter()
        .copied()
        .filter(|&b| k.block(b).buffer == buffer)
        .collect();
    for l in k.loops_inside(lca) {
        if let LoopKind::Bound(axis) = k.loop_(l).kind {
            let allowed = !axis.is_workgroup()
                && (scope == Scope::Workgroup
                    || !writers.iter().any(|w| k.blocks_under(l).contains(w)));
            if !allowed {
                return Err(fail(format!(
                    "loop {} bound to {} lies inside the loops that share it; a {scope:?} buffer \
                     cannot be {} {}s",
                    k.loop_(l).name,
                    axis.name(),
                    if axis.is_workgroup() {
                        "shared by"
                    } else {
                        "written by several"
                    },
                    if axis.is_workgroup() {
                        "workgroup"
                    } else {
                        "invocation"
                    }
                )));
            }
        }
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
    let accesses: Vec<Vec<Index>> = accesses.into_iter().map(|(_, a)| a).collect();
    let region = k.region_or_whole(lca, &k.buffer(buffer).shape, &accesses);
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
