//! Buffer realization, the first lowering pass: every workgroup- or
//! private-scope buffer shrinks to the region its users touch
//! in one iteration of the innermost loop enclosing them all, and its
//! indices are rebased to that region.
//!
//! A workgroup buffer is one `var<workgroup>` array per workgroup, so its
//! region spans the invocation-bound loops inside (a dimension indexed
//! non-affinely keeps its whole extent). A private buffer is an array per
//! invocation on a GPU: loops bound to invocations are fixed for it (loops
//! bound to the same axis are the same invocation index), and every
//! invocation must read only what it wrote. The CPU device runs a
//! workgroup's invocations in turn on one thread, so there a private
//! buffer is realized like a workgroup one.

use std::collections::HashMap;

use super::{LowerError, Lowered, Target};
use crate::ir::{
    BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, Region, Scope, ThreadAxis, Var,
};

/// Where private buffers live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PrivateMemory {
    /// One copy per invocation (GPUs).
    PerInvocation,
    /// One copy per thread that runs a workgroup's invocations in turn
    /// (the CPU device).
    PerWorkgroup,
}

/// Realizes every live non-global buffer.
pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let private = match l.target {
        Target::Cpu => PrivateMemory::PerWorkgroup,
        Target::Wgsl => PrivateMemory::PerInvocation,
    };
    for buffer in l.kernel.live_buffers() {
        let scope = l.kernel.buffer(buffer).scope;
        if scope != Scope::Global {
            realize_one(&mut l.kernel, buffer, scope, private)?;
        }
    }
    Ok(())
}

fn users(k: &Kernel, buffer: BufferId) -> Vec<BlockId> {
    k.blocks_in_order()
        .into_iter()
        .filter(|&b| k.block(b).buffer == buffer || k.block(b).reads(buffer))
        .collect()
}

fn invocation_axis(k: &Kernel, l: LoopId) -> Option<ThreadAxis> {
    match k.loop_(l).kind {
        LoopKind::Bound(a) if !a.is_workgroup() => Some(a),
        _ => None,
    }
}

/// Every access of `buffer`: the block and its indices over loops (writes
/// first within a block).
fn accesses(k: &Kernel, blocks: &[BlockId], buffer: BufferId) -> Vec<(BlockId, bool, Vec<Index>)> {
    let mut out = Vec::new();
    for &b in blocks {
        let block = k.block(b);
        if block.buffer == buffer {
            out.push((b, true, block.over_loops(&block.indices)));
        }
        let mut loads = Vec::new();
        block.value.loads(&mut loads);
        for (_, idx) in loads.into_iter().filter(|(buf, _)| *buf == buffer) {
            out.push((b, false, block.over_loops(idx)));
        }
    }
    out
}

fn realize_one(
    k: &mut Kernel,
    buffer: BufferId,
    scope: Scope,
    private: PrivateMemory,
) -> Result<(), LowerError> {
    let name = k.buffer(buffer).name.clone();
    let fail = |msg: String| LowerError {
        pass: "realize_buffers",
        message: format!("buffer {name} ({scope:?} scope): {msg}"),
    };
    let blocks = users(k, buffer);
    let paths: HashMap<BlockId, Vec<LoopId>> = blocks
        .iter()
        .map(|&b| (b, k.path_to(&Node::Block(b)).expect("live")))
        .collect();
    let first = &paths[&blocks[0]];
    let common: Vec<LoopId> = first
        .iter()
        .enumerate()
        .take_while(|(i, l)| paths.values().all(|p| p.get(*i) == Some(l)))
        .map(|(_, l)| *l)
        .collect();
    let shared = scope == Scope::Workgroup || private == PrivateMemory::PerWorkgroup;
    let cut = if shared {
        common
            .iter()
            .position(|&l| invocation_axis(k, l).is_some())
            .unwrap_or(common.len())
    } else {
        common.len()
    };
    let Some(&lca) = common[..cut].last() else {
        return Err(fail(if cut < common.len() {
            "its blocks share no loop outside the invocation-bound ones; compute_at it under a \
             workgroup-level loop"
                .into()
        } else {
            "its blocks share no loop; compute_at the copy under the loop of the block that uses it"
                .into()
        }));
    };
    for l in k.loops_inside(lca) {
        if let LoopKind::Bound(axis) = k.loop_(l).kind
            && axis.is_workgroup()
        {
            return Err(fail(format!(
                "loop {} bound to {} lies inside the loops that share it; a {scope:?} buffer \
                 cannot be shared by workgroups",
                k.loop_(l).name,
                axis.name()
            )));
        }
    }
    let all = accesses(k, &blocks, buffer);
    let shape = k.buffer(buffer).shape.clone();
    // Per block: how to rebase its indices (the region start in terms of
    // that block's loops).
    let (extent, starts): (Vec<u64>, HashMap<BlockId, Vec<Index>>) = if shared {
        let indices: Vec<Vec<Index>> = all.iter().map(|(_, _, a)| a.clone()).collect();
        let region = k.region_or_whole(lca, &shape, &indices);
        let starts = blocks.iter().map(|&b| (b, region.start.clone())).collect();
        (region.extent, starts)
    } else {
        // Invocation-bound loops of one axis are one invocation index: name
        // them all after the first, and keep them out of the region.
        let mut canonical: HashMap<ThreadAxis, LoopId> = HashMap::new();
        for &b in &blocks {
            for &l in &paths[&b] {
                if let Some(axis) = invocation_axis(k, l) {
                    canonical.entry(axis).or_insert(l);
                }
            }
        }
        let to_canonical = |b: BlockId, ix: &Index| {
            ix.subst(&|v| match v {
                Var::Loop(l) if paths[&b].contains(&l) => invocation_axis(k, l)
                    .map(|a| Index::var(Var::Loop(canonical[&a])))
                    .filter(|c| *c != Index::var(v)),
                _ => None,
            })
        };
        let inner: Vec<LoopId> = k
            .loops_inside(lca)
            .into_iter()
            .filter(|&l| invocation_axis(k, l).is_none())
            .collect();
        let per_access: Vec<Region> = all
            .iter()
            .map(|(b, _, a)| {
                let a: Vec<Index> = a.iter().map(|ix| to_canonical(*b, ix)).collect();
                k.region_over(&inner, shape.len(), &[a])
            })
            .collect::<Result<_, _>>()
            .map_err(|_| fail("its indices are not affine in the loops that share it".into()))?;
        // Written under an invocation loop inside `lca`, each invocation
        // holds only its own part: everyone must touch exactly that part.
        let split_writers = all.iter().any(|(b, write, _)| {
            *write
                && k.loops_inside(lca)
                    .iter()
                    .any(|&l| invocation_axis(k, l).is_some() && paths[b].contains(&l))
        });
        let region = if split_writers {
            let first = &per_access[0];
            let same = per_access.iter().all(|r| {
                r.extent == first.extent
                    && r.start.iter().zip(&first.start).all(|(a, b)| a.same_sum(b))
            });
            if !same {
                return Err(fail(
                    "invocations write parts of it but read other parts; each invocation's \
                     private copy holds only what it wrote (use workgroup scope)"
                        .into(),
                ));
            }
            per_access.into_iter().next().expect("a user")
        } else {
            let indices: Vec<Vec<Index>> = all
                .iter()
                .map(|(b, _, a)| a.iter().map(|ix| to_canonical(*b, ix)).collect())
                .collect();
            k.region_over(&inner, shape.len(), &indices).map_err(|_| {
                fail("its accesses move differently with the loops around them".into())
            })?
        };
        // Back from the canonical loops to each block's own.
        let mut starts = HashMap::new();
        for &b in &blocks {
            let own = |axis: ThreadAxis| {
                paths[&b]
                    .iter()
                    .copied()
                    .find(|&l| invocation_axis(k, l) == Some(axis))
            };
            let missing = std::cell::Cell::new(false);
            let start: Vec<Index> = region
                .start
                .iter()
                .map(|s| {
                    s.subst(&|v| match v {
                        Var::Loop(l) => invocation_axis(k, l).and_then(|a| {
                            let mine = own(a);
                            missing.set(missing.get() || mine.is_none());
                            mine.filter(|&m| m != l).map(|m| Index::var(Var::Loop(m)))
                        }),
                        Var::Iter(_) => None,
                    })
                })
                .collect();
            if missing.get() {
                return Err(fail(format!(
                    "block {} is not under the invocation loops that index it",
                    k.block(b).name
                )));
            }
            starts.insert(b, start);
        }
        (region.extent, starts)
    };
    k.buffers[buffer.0 as usize].shape = extent;
    let rebase = |start: &[Index], indices: &[Index]| -> Vec<Index> {
        indices
            .iter()
            .zip(start)
            .map(|(ix, s)| ix.clone() + s.clone() * -1)
            .collect()
    };
    for &b in &blocks {
        let block = k.block(b).clone();
        let start = &starts[&b];
        let value = block
            .value
            .map_loads(&mut |buf, idx| crate::ir::Expr::Load {
                buffer: buf,
                indices: if buf == buffer {
                    rebase(start, idx)
                } else {
                    idx.to_vec()
                },
            });
        let bm = k.block_mut(b);
        bm.value = value;
        if bm.buffer == buffer {
            bm.indices = rebase(start, &block.indices);
        }
    }
    Ok(())
}
