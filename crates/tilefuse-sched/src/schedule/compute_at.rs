//! `compute_at` and `reverse_compute_at`: move a producer under a loop of
//! its consumer (or a consumer under a loop of its producer), computing per
//! iteration of that loop only the region the other side touches there.
//! Regions come from the accesses' index expressions, which must be affine
//! in the loops inside the target loop.

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{
    Block, BlockId, BufferId, Index, IterKind, LoopId, Node, Region, RegionError, Var,
};

impl Schedule {
    /// Moves producer `block` under `l`: at each iteration of `l` it
    /// computes just the elements the blocks under `l` read.
    ///
    /// Preconditions: `block` stores each spatial iterator in one dimension
    /// of its buffer (other dimensions have size 1) and is alone in its own
    /// root loop nest, which runs before `l`'s; every block reading its
    /// buffer is under `l` and reads it at indices affine in the loops
    /// inside `l`. A reduction keeps its whole reduce domain per element.
    pub fn compute_at(&mut self, block: BlockId, l: LoopId) -> Result<()> {
        const P: &str = "compute_at";
        self.check_block(block)?;
        self.check_loop(l)?;
        self.check_alone(P, block, l)?;
        self.check_sole_writer(P, block)?;
        let dims = self.store_dims(P, block)?;
        let buffer = self.kernel.block(block).buffer;
        let under = self.kernel.blocks_under(l);
        let mut accesses = Vec::new();
        for b in self.kernel.blocks_in_order() {
            if b == block || !self.kernel.block(b).reads(buffer) {
                continue;
            }
            if !under.contains(&b) {
                return Err(ScheduleError::pre(
                    P,
                    format!(
                        "block {} reads {} but is not under loop {}",
                        self.kernel.block(b).name,
                        self.kernel.buffer(buffer).name,
                        self.loop_name(l)
                    ),
                )
                .blocks([self.kernel.block(b).name.clone()])
                .loops([self.loop_name(l)]));
            }
            let consumer = self.kernel.block(b);
            let mut loads = Vec::new();
            consumer.value.loads(&mut loads);
            for (_, idx) in loads.into_iter().filter(|(buf, _)| *buf == buffer) {
                accesses.push(self.kernel.block(b).over_loops(idx));
            }
        }
        if accesses.is_empty() {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "no block under loop {} reads block {}'s output",
                    self.loop_name(l),
                    self.block_name(block)
                ),
            )
            .blocks([self.block_name(block)])
            .loops([self.loop_name(l)]));
        }
        let region = self.region(P, l, &accesses, buffer)?;
        self.check_order(P, block, l, true)?;
        self.check_inputs_ready(P, block, l, false)?;
        self.move_under(block, l, &region, |i| dims[i], true)?;
        self.record(Instruction::ComputeAt { block, loop_: l });
        Ok(())
    }

    /// Moves consumer `block` under `l`: at each iteration of `l` it
    /// computes the instances that read what the blocks under `l` just
    /// wrote.
    ///
    /// Preconditions: `block` is alone in its own root loop nest, which
    /// runs after `l`'s; it reads the buffer written under `l` with one
    /// distinct iterator per dimension (or a constant, where the region
    /// covers the whole dimension); the writes are affine in the loops
    /// inside `l` and leave no gaps in the region they span.
    pub fn reverse_compute_at(&mut self, block: BlockId, l: LoopId) -> Result<()> {
        const P: &str = "reverse_compute_at";
        self.check_block(block)?;
        self.check_loop(l)?;
        self.check_alone(P, block, l)?;
        let c = self.kernel.block(block).clone();
        let producers: Vec<BlockId> = self
            .kernel
            .blocks_under(l)
            .into_iter()
            .filter(|&p| c.reads(self.kernel.block(p).buffer))
            .collect();
        let [producer] = producers.as_slice() else {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "block {} must read the buffer of exactly one block under loop {}, it reads {}",
                    c.name,
                    self.loop_name(l),
                    producers.len()
                ),
            )
            .blocks([c.name])
            .loops([self.loop_name(l)]));
        };
        self.check_sole_writer(P, *producer)?;
        self.check_sole_writer(P, block)?;
        let p = self.kernel.block(*producer).clone();
        let store = p.over_loops(&p.indices);
        let region = self.region(P, l, std::slice::from_ref(&store), p.buffer)?;
        self.check_dense(P, l, &p, &store, &region)?;
        // Which iterator of `block` walks each dimension of the buffer.
        let mut loads = Vec::new();
        c.value.loads(&mut loads);
        let mut dim_iter: Vec<Option<u32>> = Vec::new();
        for (i, (_, idx)) in loads.iter().filter(|(b, _)| *b == p.buffer).enumerate() {
            let this: Vec<Option<u32>> = idx
                .iter()
                .enumerate()
                .map(|(d, ix)| match ix {
                    Index::Var(Var::Iter(k)) => Ok(Some(*k)),
                    Index::Const(_)
                        if region.extent[d] == self.kernel.buffer(p.buffer).shape[d] =>
                    {
                        Ok(None)
                    }
                    _ => Err(ScheduleError::pre(
                        P,
                        format!(
                            "block {} must read {} with one iterator per dimension",
                            c.name,
                            self.kernel.buffer(p.buffer).name
                        ),
                    )
                    .blocks([c.name.clone()])),
                })
                .collect::<Result<_>>()?;
            if i > 0 && this != dim_iter {
                return Err(ScheduleError::pre(
                    P,
                    format!(
                        "block {} reads {} at different indices",
                        c.name,
                        self.kernel.buffer(p.buffer).name
                    ),
                )
                .blocks([c.name.clone()]));
            }
            dim_iter = this;
        }
        self.check_order(P, block, l, false)?;
        self.check_inputs_ready(P, block, l, true)?;
        self.move_under(
            block,
            l,
            &region,
            |it| dim_iter.iter().position(|&k| k == Some(it as u32)),
            false,
        )?;
        self.record(Instruction::ReverseComputeAt { block, loop_: l });
        Ok(())
    }

    /// Every element of `region` must be written in each iteration of `l`
    /// (the writes `store` of producer `p` may not leave gaps, as strided
    /// ones do): the consumer computed over the region would otherwise
    /// read elements other iterations write. A region larger than the
    /// number of writes the loops inside `l` make has gaps.
    fn check_dense(
        &self,
        primitive: &'static str,
        l: LoopId,
        p: &Block,
        store: &[Index],
        region: &Region,
    ) -> Result<()> {
        let writes: u64 = (self.kernel.loops_inside(l).into_iter())
            .filter(|&i| store.iter().any(|ix| ix.mentions(Var::Loop(i))))
            .map(|i| self.kernel.loop_(i).extent)
            .product();
        let volume: u64 = region.extent.iter().product();
        if volume <= writes {
            return Ok(());
        }
        Err(ScheduleError::pre(
            primitive,
            format!(
                "block {} writes {writes} elements of {} per iteration of loop {}, with gaps \
                 in the {volume} they span; the consumer would read elements other \
                 iterations write",
                p.name,
                self.kernel.buffer(p.buffer).name,
                self.loop_name(l)
            ),
        )
        .blocks([p.name.clone()])
        .loops([self.loop_name(l)]))
    }

    /// For each iterator of `block`, the buffer dimension it stores to
    /// (`None` for reduce iterators).
    fn store_dims(&self, primitive: &'static str, block: BlockId) -> Result<Vec<Option<usize>>> {
        let b = self.kernel.block(block);
        let shape = &self.kernel.buffer(b.buffer).shape;
        let dims: Vec<Option<usize>> = (0..b.iters.len())
            .map(|i| {
                b.indices
                    .iter()
                    .position(|ix| *ix == Index::var(Var::Iter(i as u32)))
            })
            .collect();
        let spatial_stored = b
            .iters
            .iter()
            .zip(&dims)
            .all(|(it, d)| (it.kind == IterKind::Spatial) == d.is_some());
        let others_unit = b
            .indices
            .iter()
            .zip(shape)
            .all(|(ix, &n)| matches!(ix, Index::Var(_)) || (n == 1 && *ix == Index::Const(0)));
        if !spatial_stored || !others_unit {
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "block {} must store each spatial iterator in one dimension of its buffer",
                    b.name
                ),
            )
            .blocks([b.name.clone()]));
        }
        Ok(dims)
    }

    /// `block` must be the only block of its own root nest, on the right
    /// side of `l`'s root nest, and not under `l`.
    fn check_alone(&self, primitive: &'static str, block: BlockId, l: LoopId) -> Result<()> {
        let path = self.get_loops(block)?;
        if path.contains(&l) {
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "block {} is already under loop {}",
                    self.block_name(block),
                    self.loop_name(l)
                ),
            )
            .blocks([self.block_name(block)])
            .loops([self.loop_name(l)]));
        }
        let alone = match path.first() {
            Some(&top) => self.kernel.blocks_under(top) == [block],
            None => true,
        };
        if !alone {
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "block {} must be alone in its own loop nest",
                    self.block_name(block)
                ),
            )
            .blocks([self.block_name(block)]));
        }
        Ok(())
    }

    /// The region of `buffer` that `accesses` touch in one iteration of `l`.
    fn region(
        &self,
        primitive: &'static str,
        l: LoopId,
        accesses: &[Vec<Index>],
        buffer: BufferId,
    ) -> Result<Region> {
        let name = &self.kernel.buffer(buffer).name;
        self.kernel.region(l, self.kernel.buffer(buffer).shape.len(), accesses).map_err(|e| {
            ScheduleError::pre(
                primitive,
                match e {
                    RegionError::NotAffine { dim, inner } => format!(
                        "index {dim} of {name} is not affine in loop {} inside loop {}",
                        self.loop_name(inner),
                        self.loop_name(l)
                    ),
                    RegionError::Diverging => {
                        format!("{name} is accessed at offsets that move differently with the loops around {}", self.loop_name(l))
                    }
                },
            ).loops([self.loop_name(l)])
        })
    }

    /// Every buffer `block` reads must be written before `l`'s nest runs,
    /// or within it before `l` by a block outside `l` (a copy of a copy:
    /// each iteration of the loops around `l` has written it by then), or,
    /// for a consumer placed last under `l`, by a block under `l`.
    fn check_inputs_ready(
        &self,
        primitive: &'static str,
        block: BlockId,
        l: LoopId,
        under_ok: bool,
    ) -> Result<()> {
        let target = self.root_of(l);
        let under = self.kernel.blocks_under(l);
        let order = self.kernel.blocks_in_order();
        let first_under = order.iter().position(|b| under.contains(b));
        for (at, &w) in order.iter().enumerate() {
            let writer = self.kernel.block(w);
            if w == block
                || !self.kernel.block(block).reads(writer.buffer)
                || (under_ok && under.contains(&w))
            {
                continue;
            }
            let root = self.root_index(w);
            let earlier_in_nest =
                root == target && !under.contains(&w) && first_under.is_some_and(|f| at < f);
            if root > target || (root == target && !earlier_in_nest) {
                return Err(ScheduleError::pre(
                    primitive,
                    format!(
                        "block {} reads {}, which block {} writes only after loop {}'s nest",
                        self.block_name(block),
                        self.kernel.buffer(writer.buffer).name,
                        writer.name,
                        self.loop_name(l)
                    ),
                )
                .blocks([self.block_name(block), writer.name.clone()])
                .loops([self.loop_name(l)]));
            }
        }
        Ok(())
    }

    /// A producer's nest must run before `l`'s, a consumer's after.
    fn check_order(
        &self,
        primitive: &'static str,
        block: BlockId,
        l: LoopId,
        before: bool,
    ) -> Result<()> {
        let own = self.root_index(block);
        let target = self.root_of(l);
        if (own < target) != before {
            let side = if before { "before" } else { "after" };
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "block {}'s loop nest must run {side} loop {}'s",
                    self.block_name(block),
                    self.loop_name(l)
                ),
            )
            .blocks([self.block_name(block)])
            .loops([self.loop_name(l)]));
        }
        Ok(())
    }

    /// Rebuilds `block`'s nest under `l` (first child for a producer, last
    /// for a consumer): iterator `i` walks region dimension `dim_of(i)`
    /// from its start, or its whole extent when it maps to none.
    fn move_under(
        &mut self,
        block: BlockId,
        l: LoopId,
        region: &Region,
        dim_of: impl Fn(usize) -> Option<usize>,
        first: bool,
    ) -> Result<()> {
        let b = self.kernel.block(block).clone();
        let old_top = self.get_loops(block)?.first().copied();
        let mut loops = Vec::new();
        let mut bindings = Vec::new();
        for (i, it) in b.iters.iter().enumerate() {
            match dim_of(i).filter(|&d| d < region.extent.len()) {
                Some(d) => {
                    let lp = self
                        .kernel
                        .new_loop(format!("{}_ax{i}", b.name), region.extent[d]);
                    bindings.push(region.start[d].clone() + Index::var(Var::Loop(lp)));
                    loops.push(lp);
                }
                None => {
                    let lp = self.kernel.new_loop(format!("{}_ax{i}", b.name), it.extent);
                    bindings.push(Index::var(Var::Loop(lp)));
                    loops.push(lp);
                }
            }
        }
        // The new nest walks each instance of the region exactly once.
        let moved = self.kernel.block_mut(block);
        moved.bindings = bindings;
        moved.predicates.clear();
        let mut node = Node::Block(block);
        for &lp in loops.iter().rev() {
            node = Node::Loop(lp, vec![node]);
        }
        match old_top {
            Some(top) => self
                .kernel
                .body
                .retain(|n| !matches!(n, Node::Loop(id, _) if *id == top)),
            None => self
                .kernel
                .body
                .retain(|n| !matches!(n, Node::Block(id) if *id == block)),
        }
        let (siblings, pos) = self.kernel.find_loop_mut(l).expect("checked");
        let Node::Loop(_, body) = &mut siblings[pos] else {
            unreachable!("a loop")
        };
        if first {
            body.insert(0, node);
        } else {
            body.push(node);
        }
        Ok(())
    }
}
