//! Reduction transforms. `rfactor` turns part of a reduction into a
//! spatial dimension, so that a loop that carried the reduction can run in
//! parallel (bound to invocations or workgroups), with a second block
//! combining the partial results. `decompose_reduction` moves a
//! reduction's start from the identity out of its loops.

use tilefuse_ir::{DType, ReduceOp, reduce_identity};

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{
    Block, BlockId, Buffer, BufferId, Expr, Index, IterKind, IterVar, LoopId, Node, Role, Scope,
    Var, fresh_name,
};

impl Schedule {
    /// Factors the reduction of the block `B` under `l` over `l`:
    ///
    /// - the block, renamed `B_rf`, reduces into a new buffer `B_rf[l, ...]`
    ///   (so `l` is a spatial loop for it and may be parallelized or bound);
    ///   where `l` splits its only reduce iterator exactly, it reduces over
    ///   the rest of that iterator and starts from the identity itself,
    ///   else `B_rf_init` first fills `B_rf` with the identity;
    /// - a new block named `B` reduces `B_rf` over `l` into the original
    ///   buffer.
    ///
    /// In place: when the loops that carry `B`'s reduction enclose only `B`
    /// and drive none of its spatial iterators, the fill and combine nests
    /// go right before and after them, inside the loops around (so a
    /// reduction already placed under a row loop by `compute_at` can be
    /// factored there). Otherwise `B` must be alone in its root nest, and
    /// the fill and combine get root nests of their own.
    ///
    /// Returns the `B_rf` block.
    ///
    /// Preconditions: `l` encloses exactly one block, a reduction; `l`
    /// drives one of its reduce iterators and none of its spatial ones; one
    /// of the two placements above applies.
    pub fn rfactor(&mut self, l: LoopId) -> Result<BlockId> {
        let site = self.rfactor_site(l)?;
        let extent = self.kernel.loop_(l).extent;
        let rf = self.partial_buffer(&site.b, extent);
        let (vrf, self_init) = self.make_partial(&site, l, rf, extent);
        let (fill, combine) = self.fill_and_combine(&site, rf, extent, vrf);
        let fill = (!self_init).then_some(fill);
        if site.in_place {
            let fill = fill.map(|fill| self.inner_nest(fill, extent));
            let combine = self.inner_nest(combine, extent);
            let (siblings, at) = self.siblings(&site.path, site.first);
            siblings.insert(at + 1, combine);
            if let Some(fill) = fill {
                siblings.insert(at, fill);
            }
        } else {
            let root = self.root_of(l);
            let fill = fill.map(|fill| self.kernel.add_nest(fill));
            let combine = self.kernel.add_nest(combine);
            self.kernel.body.insert(root + 1, combine);
            if let Some(fill) = fill {
                self.kernel.body.insert(root, fill);
            }
        }
        self.record(Instruction::Rfactor { loop_: l });
        Ok(site.block)
    }

    /// Checks `rfactor`'s preconditions on loop `l` and finds where the
    /// fill and combine blocks go.
    fn rfactor_site(&self, l: LoopId) -> Result<RfactorSite> {
        const P: &str = "rfactor";
        self.check_loop(l)?;
        let fault = |message: String| ScheduleError::pre(P, message).loops([self.loop_name(l)]);
        let blocks = self.kernel.blocks_under(l);
        let [block] = blocks.as_slice() else {
            return Err(fault(format!(
                "loop {} must enclose exactly one block, it encloses {}",
                self.loop_name(l),
                blocks.len()
            )));
        };
        let block = *block;
        let b = self.kernel.block(block).clone();
        let Some(op) = b.reduce else {
            return Err(fault(format!("block {} is not a reduction", b.name)).blocks([b.name]));
        };
        let drives = |loop_: LoopId, kind| {
            b.iters
                .iter()
                .zip(&b.bindings)
                .any(|(it, x)| it.kind == kind && x.mentions(Var::Loop(loop_)))
        };
        if !drives(l, IterKind::Reduce) || drives(l, IterKind::Spatial) {
            return Err(fault(format!(
                "loop {} must drive a reduce iterator of block {} and no spatial one",
                self.loop_name(l),
                b.name
            ))
            .blocks([b.name.clone()]));
        }
        // The outermost loop that carries the reduction (a loop a previous
        // rfactor made spatial drives a reduce iterator too, but carries
        // none; neither does a loop of one iteration).
        let path = self.get_loops(block)?;
        let first = path
            .iter()
            .position(|&p| {
                drives(p, IterKind::Reduce)
                    && !drives(p, IterKind::Spatial)
                    && self.kernel.loop_(p).extent > 1
            })
            .ok_or_else(|| {
                fault(format!(
                    "loop {} has one iteration: nothing to factor",
                    self.loop_name(l)
                ))
            })?;
        let in_place = self.kernel.blocks_under(path[first]) == [block]
            && !path[first..].iter().any(|&p| drives(p, IterKind::Spatial));
        if !in_place && self.kernel.blocks_under(path[0]) != [block] {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "block {}'s reduction loops must enclose only it and drive none of its \
                     spatial iterators, or its loop nest must hold only it",
                    b.name
                ),
            )
            .blocks([b.name.clone()]));
        }
        Ok(RfactorSite {
            block,
            b,
            op,
            path,
            first,
            in_place,
        })
    }

    /// Adds the buffer `B_rf[l, ...]` of block `b`'s partial results.
    fn partial_buffer(&mut self, b: &Block, extent: u64) -> BufferId {
        let out = self.kernel.buffer(b.buffer);
        let mut shape = vec![extent];
        shape.extend(&out.shape);
        let buffer = Buffer {
            name: self.kernel.fresh_block_name(&format!("{}_rf", b.name)),
            dtype: out.dtype,
            shape,
            scope: Scope::Global,
            role: Role::Temp,
            stages: None,
        };
        self.kernel.buffers.push(buffer);
        BufferId(self.kernel.buffers.len() as u32 - 1)
    }

    /// Turns the block into the partial reduction `B_rf`: one more spatial
    /// iterator (returned by name) over `l`, writing `rf`. Returns whether
    /// the partial starts from the identity itself (no fill block needed).
    fn make_partial(
        &mut self,
        site: &RfactorSite,
        l: LoopId,
        rf: BufferId,
        extent: u64,
    ) -> (String, bool) {
        let b = &site.b;
        let position = b.iters.len();
        let vrf = fresh_name("vrf", |n| b.iters.iter().any(|it| it.name == n));
        // The partial block shares its buffer's name (TVM's `B_rf`).
        let name = self.kernel.buffer(rf).name.clone();
        let pb = self.kernel.block_mut(site.block);
        pb.name = name;
        pb.iters.push(IterVar {
            name: vrf.clone(),
            extent,
            kind: IterKind::Spatial,
        });
        pb.bindings.push(Index::var(Var::Loop(l)));
        pb.buffer = rf;
        pb.indices.insert(0, iter(position));
        // Where `l` splits the block's only reduce iterator `vk = c * l + q`
        // exactly, the partial block reduces over `q` alone and starts
        // from the identity itself (TVM's rfactor): no fill block, and its
        // partials can live in registers. Otherwise a fill block starts
        // them.
        let Some((k, c, q)) = self.split_reduce_iter(b, l).filter(|_| b.init) else {
            self.kernel.block_mut(site.block).init = false;
            return (vrf, false);
        };
        let q_extent = q.bounds(&|v| self.kernel.loop_range(v)).1 as u64 + 1;
        let pb = self.kernel.block_mut(site.block);
        pb.iters[k].extent = q_extent;
        pb.bindings[k] = q;
        let vk = iter(position) * c as i64 + iter(k);
        pb.value = pb
            .value
            .subst(&|v| (v == Var::Iter(k as u32)).then(|| vk.clone()));
        (vrf, true)
    }

    /// The fill block (the identity into `rf`) and the combine block
    /// (`rf` reduced over its first dimension into `B`'s buffer). Both walk
    /// `B`'s output elements (its spatial iterators, renumbered) and one
    /// more iterator over `l`.
    fn fill_and_combine(
        &self,
        site: &RfactorSite,
        rf: BufferId,
        extent: u64,
        vrf: String,
    ) -> (Block, Block) {
        let b = &site.b;
        let out = self.kernel.buffer(b.buffer);
        let (spatial, bindings, indices): (Vec<IterVar>, Vec<Index>, Vec<Index>) = if site.in_place
        {
            let kept: Vec<usize> = (0..b.iters.len())
                .filter(|&i| b.iters[i].kind == IterKind::Spatial)
                .collect();
            let renumber = |ix: &Index| {
                ix.subst(&|v| match v {
                    Var::Iter(i) => kept.iter().position(|&k| k == i as usize).map(iter),
                    Var::Loop(_) => None,
                })
            };
            (
                kept.iter().map(|&i| b.iters[i].clone()).collect(),
                kept.iter().map(|&i| b.bindings[i].clone()).collect(),
                b.indices.iter().map(renumber).collect(),
            )
        } else {
            let rank = out.shape.len();
            (
                IterVar::spatial(&out.shape),
                Vec::new(),
                (0..rank).map(iter).collect(),
            )
        };
        let mut rf_index = vec![iter(spatial.len())];
        rf_index.extend(indices.iter().cloned());
        let with_last = |kind, name: String| {
            let mut iters = spatial.clone();
            iters.push(IterVar { name, extent, kind });
            iters
        };
        let fill = Block {
            name: self
                .kernel
                .fresh_block_name(&format!("{}_init", self.kernel.buffer(rf).name)),
            iters: with_last(IterKind::Spatial, vrf),
            bindings: bindings.clone(),
            indices: rf_index.clone(),
            ..identity_block(rf, site.op, out.dtype)
        };
        let combine = Block {
            name: b.name.clone(),
            iters: with_last(IterKind::Reduce, "vr".into()),
            bindings,
            buffer: b.buffer,
            indices,
            value: Expr::Load {
                buffer: rf,
                indices: rf_index,
            },
            reduce: Some(site.op),
            init: b.init,
            predicates: Vec::new(),
        };
        (fill, combine)
    }

    /// Starts the reduction of `block` with a separate block placed just
    /// before loop `l`, which writes the identity over the elements
    /// `block` reduces into under `l`; `block` then only accumulates (no
    /// test for its first iteration inside the loop). Returns the new
    /// block, named `B_init`.
    ///
    /// Preconditions: `block` is an initializing reduction under `l`; `l`
    /// is the outermost loop that carries its reduction (no loop outside
    /// `l` drives a reduce iterator); the elements written under `l` form
    /// a region (indices with terms over the loops inside or outside `l`,
    /// not both).
    pub fn decompose_reduction(&mut self, block: BlockId, l: LoopId) -> Result<BlockId> {
        const P: &str = "decompose_reduction";
        self.check_block(block)?;
        self.check_loop(l)?;
        let b = self.kernel.block(block).clone();
        let Some(op) = b.reduce.filter(|_| b.init) else {
            return Err(ScheduleError::pre(
                P,
                format!("block {} is not an initializing reduction", b.name),
            )
            .blocks([b.name]));
        };
        let path = self.get_loops(block)?;
        let Some(at) = path.iter().position(|&p| p == l) else {
            return Err(ScheduleError::pre(
                P,
                format!("block {} is not under loop {}", b.name, self.loop_name(l)),
            )
            .blocks([b.name])
            .loops([self.loop_name(l)]));
        };
        let carries = |p: LoopId| {
            b.iters
                .iter()
                .zip(&b.bindings)
                .any(|(it, x)| it.kind == IterKind::Reduce && x.mentions(Var::Loop(p)))
        };
        if !carries(l) || path[..at].iter().any(|&p| carries(p)) {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "loop {} must be the outermost loop of block {}'s reduction",
                    self.loop_name(l),
                    b.name
                ),
            )
            .blocks([b.name.clone()])
            .loops([self.loop_name(l)]));
        }
        let mut inner = vec![l];
        inner.extend(self.kernel.loops_inside(l));
        let out = self.kernel.buffer(b.buffer).clone();
        let region = self
            .kernel
            .region_over(&inner, out.shape.len(), &[b.over_loops(&b.indices)])
            .map_err(|_| {
                ScheduleError::pre(
                    P,
                    format!(
                        "the elements block {} writes under loop {} do not form a region",
                        b.name,
                        self.loop_name(l)
                    ),
                )
                .blocks([b.name.clone()])
                .loops([self.loop_name(l)])
            })?;
        let dtype = out.dtype;
        // One iterator per buffer dimension, walking the region from its
        // start (as compute_at places blocks).
        let mut loops = Vec::new();
        let mut bindings = Vec::new();
        for (i, (&extent, start)) in region.extent.iter().zip(&region.start).enumerate() {
            let lp = self
                .kernel
                .new_loop(format!("{}_init_ax{i}", b.name), extent);
            loops.push(lp);
            bindings.push(start.clone() + Index::var(Var::Loop(lp)));
        }
        let rank = out.shape.len();
        let init = Block {
            name: self.kernel.fresh_block_name(&format!("{}_init", b.name)),
            iters: IterVar::spatial(&out.shape),
            bindings,
            indices: (0..rank).map(iter).collect(),
            ..identity_block(b.buffer, op, dtype)
        };
        self.kernel.blocks.push(init);
        let id = BlockId(self.kernel.blocks.len() as u32 - 1);
        let mut node = Node::Block(id);
        for &lp in loops.iter().rev() {
            node = Node::Loop(lp, vec![node]);
        }
        let (siblings, pos) = self.siblings(&path, at);
        siblings.insert(pos, node);
        self.kernel.block_mut(block).init = false;
        self.record(Instruction::DecomposeReduction { block, loop_: l });
        Ok(id)
    }

    /// `(k, c, q)` when block `b`'s only reduce iterator `k` is bound to
    /// `c * l + q` exactly (no instance guarded off), `q` a sum of other
    /// loops with non-negative coefficients: then `q = 0` is the first
    /// instance of every partial, where the partial block starts from the
    /// identity.
    fn split_reduce_iter(&self, b: &Block, l: LoopId) -> Option<(usize, u64, Index)> {
        let mut reduce = (0..b.iters.len()).filter(|&i| b.iters[i].kind == IterKind::Reduce);
        let k = reduce.next()?;
        if reduce.next().is_some() {
            return None;
        }
        let (c, q) = b.bindings[k].linear_in(Var::Loop(l))?;
        // Every partial must have a first instance that runs: no guard or
        // predicate may skip instances along `l`.
        let range = |v| self.kernel.loop_range(v);
        let overshoot = b.bindings[k].bounds(&range).1 >= b.iters[k].extent as i64;
        if overshoot || b.predicates.iter().any(|(e, _)| e.mentions(Var::Loop(l))) {
            return None;
        }
        let mut vars = Vec::new();
        q.vars(&mut vars);
        let mut rest = q.clone();
        for v in vars {
            let (coef, r) = rest.linear_in(v)?;
            if coef < 0 {
                return None;
            }
            rest = r;
        }
        (c > 0 && rest == Index::Const(0)).then_some((k, c as u64, q))
    }

    /// The node list holding loop `path[at]` (the body of `path[at - 1]`,
    /// or the kernel's root) and the loop's position in it.
    fn siblings(&mut self, path: &[LoopId], at: usize) -> (&mut Vec<Node>, usize) {
        let siblings = match at {
            0 => &mut self.kernel.body,
            _ => {
                let (nodes, pos) = self.kernel.find_loop_mut(path[at - 1]).expect("live");
                match &mut nodes[pos] {
                    Node::Loop(_, body) => body,
                    Node::Block(_) => unreachable!("a loop"),
                }
            }
        };
        let pos = siblings
            .iter()
            .position(|n| matches!(n, Node::Loop(id, _) if *id == path[at]))
            .expect("a child");
        (siblings, pos)
    }

    /// A nest of one new loop over the last iterator of `block`, whose
    /// other iterators keep their bindings.
    fn inner_nest(&mut self, mut block: Block, extent: u64) -> Node {
        let name = self.kernel.fresh_loop_name(&format!("{}_l", block.name));
        let lp = self.kernel.new_loop(name, extent);
        block.bindings.push(Index::var(Var::Loop(lp)));
        self.kernel.blocks.push(block);
        Node::Loop(
            lp,
            vec![Node::Block(BlockId(self.kernel.blocks.len() as u32 - 1))],
        )
    }

    /// Position among the root nests of the nest holding `block` (which
    /// must be in the schedule).
    pub(super) fn root_index(&self, block: BlockId) -> usize {
        match self.get_loops(block).expect("a live block").first() {
            Some(&top) => self.root_of(top),
            None => self
                .kernel
                .body
                .iter()
                .position(|n| matches!(n, Node::Block(b) if *b == block))
                .expect("a root block"),
        }
    }

    /// Position among the root nests of the nest holding loop `l`.
    pub(super) fn root_of(&self, l: LoopId) -> usize {
        let path = self
            .kernel
            .path_to(&Node::Loop(l, vec![]))
            .expect("checked");
        let top = path.first().copied().unwrap_or(l);
        self.kernel
            .body
            .iter()
            .position(|n| matches!(n, Node::Loop(id, _) if *id == top))
            .expect("a root loop")
    }
}

/// Where `rfactor` applies: the block (`b`, as it was), its reduction,
/// the loops around it and the first that carries the reduction, and
/// whether the fill and combine go in place around that loop.
struct RfactorSite {
    block: BlockId,
    b: Block,
    op: ReduceOp,
    path: Vec<LoopId>,
    first: usize,
    in_place: bool,
}

/// Iterator `i` of a block, as an index.
fn iter(i: usize) -> Index {
    Index::var(Var::Iter(i as u32))
}

/// A block storing `op`'s identity into `buffer`; the caller sets its
/// name, iterators, bindings and indices.
fn identity_block(buffer: BufferId, op: ReduceOp, dtype: DType) -> Block {
    Block {
        name: String::new(),
        iters: Vec::new(),
        bindings: Vec::new(),
        buffer,
        indices: Vec::new(),
        value: Expr::Const {
            value: reduce_identity(op, dtype).as_f64(),
            dtype,
        },
        reduce: None,
        init: false,
        predicates: Vec::new(),
    }
}
