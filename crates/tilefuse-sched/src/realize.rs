//! Buffer realization, the lowering pass between scheduling and code: every
//! workgroup- or private-scope buffer shrinks to the region that one
//! iteration of the innermost loop enclosing all its uses touches, and its
//! indices are rebased to that region. A workgroup buffer then becomes a
//! `var<workgroup>` array per workgroup, a private one an array per
//! invocation (and per thread on the CPU).

use crate::ir::{Block, BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, Scope, Var};
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

/// A block's index expressions with iterators replaced by their bindings.
fn over_loops(block: &Block, indices: &[Index]) -> Vec<Index> {
    indices
        .iter()
        .map(|ix| {
            ix.subst(&|v| match v {
                Var::Iter(i) => Some(block.bindings[i as usize].clone()),
                Var::Loop(_) => None,
            })
        })
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
    let mut inner = Vec::new();
    if let Some(Node::Loop(_, body)) = k.loop_node(lca) {
        collect_loops(body, &mut inner);
    }
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
            accesses.push((b, over_loops(block, &block.indices)));
        }
        let mut loads = Vec::new();
        block.value.loads(&mut loads);
        for (_, idx) in loads.into_iter().filter(|(buf, _)| *buf == buffer) {
            accesses.push((b, over_loops(block, idx)));
        }
    }
    let rank = k.buffer(buffer).shape.len();
    let mut start: Vec<Option<Index>> = vec![None; rank];
    let mut lo = vec![i64::MAX; rank];
    let mut hi = vec![i64::MIN; rank];
    for (_, access) in &accesses {
        for (d, ix) in access.iter().enumerate() {
            let mut rest = ix.clone();
            let (mut min, mut max) = (0i64, 0i64);
            for &v in &inner {
                let Some((c, r)) = rest.linear_in(Var::Loop(v)) else {
                    return Err(fail(format!(
                        "index {d} is not affine in loop {}",
                        k.loop_(v).name
                    )));
                };
                let span = c * (k.loop_(v).extent as i64 - 1);
                min += span.min(0);
                max += span.max(0);
                rest = r;
            }
            if start[d].as_ref().is_some_and(|s| *s != rest) {
                return Err(fail(
                    "its accesses move differently with the loops around them".into(),
                ));
            }
            start[d] = Some(rest);
            lo[d] = lo[d].min(min);
            hi[d] = hi[d].max(max);
        }
    }
    let start: Vec<Index> = start
        .into_iter()
        .zip(&lo)
        .map(|(s, &m)| s.unwrap_or(Index::Const(0)) + Index::Const(m))
        .collect();
    k.buffers[buffer.0 as usize].shape = lo
        .iter()
        .zip(&hi)
        .map(|(&a, &b)| (b - a + 1) as u64)
        .collect();
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

fn collect_loops(nodes: &[Node], out: &mut Vec<LoopId>) {
    for n in nodes {
        if let Node::Loop(l, body) = n {
            out.push(*l);
            collect_loops(body, out);
        }
    }
}
