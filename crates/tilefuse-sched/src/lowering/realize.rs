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

fn invocation_axis(k: &Kernel, l: LoopId) -> Option<ThreadAxis> {
    match k.loop_(l).kind {
        LoopKind::Bound(a) if !a.is_workgroup() => Some(a),
        _ => None,
    }
}

/// One access of the buffer: the block, whether it writes, its indices
/// over loops.
type Access = (BlockId, bool, Vec<Index>);

/// The blocks that use one buffer, the loops above each, and every
/// access (writes first within a block).
struct Users<'k> {
    k: &'k Kernel,
    blocks: Vec<BlockId>,
    paths: HashMap<BlockId, Vec<LoopId>>,
    accesses: Vec<Access>,
}

/// Per block: where the realized region starts, in that block's loops.
type Starts = HashMap<BlockId, Vec<Index>>;

impl<'k> Users<'k> {
    fn of(k: &'k Kernel, buffer: BufferId) -> Self {
        let blocks: Vec<BlockId> = k
            .blocks_in_order()
            .into_iter()
            .filter(|&b| k.block(b).buffer == buffer || k.block(b).reads(buffer))
            .collect();
        let paths = blocks
            .iter()
            .map(|&b| (b, k.path_to(&Node::Block(b)).expect("live")))
            .collect();
        let mut accesses = Vec::new();
        for &b in &blocks {
            let mine = k.block(b).accesses(buffer).into_iter();
            accesses.extend(mine.map(|(writes, indices)| (b, writes, indices)));
        }
        Users {
            k,
            blocks,
            paths,
            accesses,
        }
    }

    /// The innermost loop around every user (outside the invocation-bound
    /// loops when the buffer is `shared` by a workgroup's invocations).
    fn sharing_loop(&self, shared: bool) -> Result<LoopId, String> {
        let first = &self.paths[&self.blocks[0]];
        let common: Vec<LoopId> = first
            .iter()
            .enumerate()
            .take_while(|(i, l)| self.paths.values().all(|p| p.get(*i) == Some(l)))
            .map(|(_, l)| *l)
            .collect();
        let cut = if shared {
            let invocation = |&l: &LoopId| invocation_axis(self.k, l).is_some();
            common.iter().position(invocation).unwrap_or(common.len())
        } else {
            common.len()
        };
        match common[..cut].last() {
            Some(&lca) => Ok(lca),
            None if cut < common.len() => Err("its blocks share no loop outside the \
                 invocation-bound ones; compute_at it under a workgroup-level loop"
                .into()),
            None => Err(
                "its blocks share no loop; compute_at the copy under the loop of the \
                 block that uses it"
                    .into(),
            ),
        }
    }

    /// A workgroup-bound loop inside `lca`, which would share the buffer
    /// between workgroups.
    fn no_workgroup_loop_inside(&self, lca: LoopId, scope: Scope) -> Result<(), String> {
        for l in self.k.loops_inside(lca) {
            if let LoopKind::Bound(axis) = self.k.loop_(l).kind
                && axis.is_workgroup()
            {
                return Err(format!(
                    "loop {} bound to {} lies inside the loops that share it; a {scope:?} buffer \
                     cannot be shared by workgroups",
                    self.k.loop_(l).name,
                    axis.name()
                ));
            }
        }
        Ok(())
    }

    /// The region every user touches in one iteration of `lca`, one start
    /// for all.
    fn shared_region(&self, lca: LoopId, shape: &[u64]) -> (Vec<u64>, Starts) {
        let indices: Vec<Vec<Index>> = self.accesses.iter().map(|(_, _, a)| a.clone()).collect();
        let region = self.k.region_or_whole(lca, shape, &indices);
        let starts = self
            .blocks
            .iter()
            .map(|&b| (b, region.start.clone()))
            .collect();
        (region.extent, starts)
    }

    /// The region one invocation touches in one iteration of `lca`, its
    /// start in each block's own invocation loops.
    fn private_region(&self, lca: LoopId, rank: usize) -> Result<(Vec<u64>, Starts), String> {
        let canonical = self.canonical_invocation_loops();
        let inner: Vec<LoopId> = self
            .k
            .loops_inside(lca)
            .into_iter()
            .filter(|&l| invocation_axis(self.k, l).is_none())
            .collect();
        let accesses: Vec<Vec<Index>> = self
            .accesses
            .iter()
            .map(|(b, _, a)| {
                a.iter()
                    .map(|ix| self.to_canonical(&canonical, *b, ix))
                    .collect()
            })
            .collect();
        let per_access: Vec<Region> = accesses
            .iter()
            .map(|a| self.k.region_over(&inner, rank, std::slice::from_ref(a)))
            .collect::<Result<_, _>>()
            .map_err(|_| "its indices are not affine in the loops that share it")?;
        let region = if self.split_writers(lca) {
            let first = &per_access[0];
            let same = per_access.iter().all(|r| {
                r.extent == first.extent
                    && r.start.iter().zip(&first.start).all(|(a, b)| a.same_sum(b))
            });
            if !same {
                return Err("invocations write parts of it but read other parts; each \
                     invocation's private copy holds only what it wrote (use workgroup scope)"
                    .into());
            }
            per_access.into_iter().next().expect("a user")
        } else {
            self.k
                .region_over(&inner, rank, &accesses)
                .map_err(|_| "its accesses move differently with the loops around them")?
        };
        let starts = self
            .blocks
            .iter()
            .map(|&b| Ok((b, self.own_start(b, &region.start)?)));
        Ok((region.extent, starts.collect::<Result<_, String>>()?))
    }

    /// Invocation-bound loops of one axis are one invocation index: each
    /// axis is named after its first loop.
    fn canonical_invocation_loops(&self) -> HashMap<ThreadAxis, LoopId> {
        let mut canonical = HashMap::new();
        for b in &self.blocks {
            for &l in &self.paths[b] {
                if let Some(axis) = invocation_axis(self.k, l) {
                    canonical.entry(axis).or_insert(l);
                }
            }
        }
        canonical
    }

    fn to_canonical(
        &self,
        canonical: &HashMap<ThreadAxis, LoopId>,
        b: BlockId,
        ix: &Index,
    ) -> Index {
        ix.subst(&|v| match v {
            Var::Loop(l) if self.paths[&b].contains(&l) => invocation_axis(self.k, l)
                .map(|a| Index::var(Var::Loop(canonical[&a])))
                .filter(|c| *c != Index::var(v)),
            _ => None,
        })
    }

    /// Written under an invocation loop inside `lca`: each invocation
    /// holds only its own part, so everyone must touch exactly that part.
    fn split_writers(&self, lca: LoopId) -> bool {
        let inside = self.k.loops_inside(lca);
        self.accesses.iter().any(|(b, write, _)| {
            *write
                && inside
                    .iter()
                    .any(|&l| invocation_axis(self.k, l).is_some() && self.paths[b].contains(&l))
        })
    }

    /// `start`, over the canonical invocation loops, in block `b`'s own.
    fn own_start(&self, b: BlockId, start: &[Index]) -> Result<Vec<Index>, String> {
        let own = |axis: ThreadAxis| {
            (self.paths[&b].iter().copied()).find(|&l| invocation_axis(self.k, l) == Some(axis))
        };
        let missing = std::cell::Cell::new(false);
        let start = start
            .iter()
            .map(|s| {
                s.subst(&|v| match v {
                    Var::Loop(l) => invocation_axis(self.k, l).and_then(|a| {
                        let mine = own(a);
                        missing.set(missing.get() || mine.is_none());
                        mine.filter(|&m| m != l).map(|m| Index::var(Var::Loop(m)))
                    }),
                    Var::Iter(_) => None,
                })
            })
            .collect();
        if missing.get() {
            let name = &self.k.block(b).name;
            return Err(format!(
                "block {name} is not under the invocation loops that index it"
            ));
        }
        Ok(start)
    }
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
    let shared = scope == Scope::Workgroup || private == PrivateMemory::PerWorkgroup;
    let shape = k.buffer(buffer).shape.clone();
    let users = Users::of(k, buffer);
    let lca = users.sharing_loop(shared).map_err(fail)?;
    users.no_workgroup_loop_inside(lca, scope).map_err(fail)?;
    let (extent, starts) = if shared {
        users.shared_region(lca, &shape)
    } else {
        users.private_region(lca, shape.len()).map_err(fail)?
    };
    let blocks = users.blocks;
    k.buffers[buffer.0 as usize].shape = extent;
    rebase(k, buffer, &blocks, &starts);
    Ok(())
}

/// Moves `buffer`'s indices in each of `blocks` to its realized region.
fn rebase(k: &mut Kernel, buffer: BufferId, blocks: &[BlockId], starts: &Starts) {
    let shift = |start: &[Index], indices: &[Index]| -> Vec<Index> {
        indices
            .iter()
            .zip(start)
            .map(|(ix, s)| ix.clone() + s.clone() * -1)
            .collect()
    };
    for &b in blocks {
        let block = k.block(b).clone();
        let start = &starts[&b];
        let value = block
            .value
            .map_loads(&mut |buf, idx| crate::ir::Expr::Load {
                buffer: buf,
                indices: if buf == buffer {
                    shift(start, idx)
                } else {
                    idx.to_vec()
                },
            });
        let bm = k.block_mut(b);
        bm.value = value;
        if bm.buffer == buffer {
            bm.indices = shift(start, &block.indices);
        }
    }
}
