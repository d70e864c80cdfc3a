//! Inlining: `compute_inline` folds a producer into its consumers,
//! `reverse_compute_inline` folds a consumer into its producer. Both remove
//! an intermediate buffer and the block that wrote or read it.

use std::collections::{HashMap, HashSet};

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{Block, BlockId, BufferId, Expr, Index, MAX_EXPR_DEPTH, Node, Role, Var};

const REVERSE_INLINE: &str = "reverse_compute_inline";

/// The deepest expression `compute_inline_all` inlines: half the bound, so
/// that a consumer of several such expressions stays within it.
const KEPT_DEPTH: usize = MAX_EXPR_DEPTH / 2;

impl Schedule {
    /// Inlines, in order, every block `compute_inline` accepts except those
    /// in `keep`, and returns them; reductions, outputs and the like stay.
    /// Each is recorded as its own `compute_inline`. A block whose inlined
    /// expression would nest deeper than [`KEPT_DEPTH`] stays, writing its
    /// buffer, so that its consumers' expressions stay within
    /// [`MAX_EXPR_DEPTH`] (a chain of thousands of ops becomes a few
    /// hundred ops a block).
    ///
    /// One pass in nest order, linear in the kernel's size: each block's
    /// loads of inlined buffers are replaced by their producers' final
    /// expressions (moved where read once, copied otherwise), which is what
    /// inlining the blocks one by one gives (a chain of 10,000 ops took
    /// seconds that way: every step rebuilt the grown consumer).
    pub fn compute_inline_all(&mut self, keep: &[BlockId]) -> Vec<BlockId> {
        let order = self.kernel.blocks_in_order();
        let mut writers: HashMap<BufferId, usize> = HashMap::new();
        for &b in &order {
            *writers.entry(self.kernel.block(b).buffer).or_default() += 1;
        }
        let inlined: Vec<BlockId> = order
            .iter()
            .copied()
            .filter(|&b| {
                let block = self.kernel.block(b);
                !keep.contains(&b)
                    && writers[&block.buffer] == 1
                    && self.check_inlinable_alone("compute_inline", b).is_ok()
                    && !block.value.reads(block.buffer)
            })
            .collect();
        let buffers: HashSet<BufferId> = inlined
            .iter()
            .map(|&b| self.kernel.block(b).buffer)
            .collect();
        let mut reads: HashMap<BufferId, usize> = HashMap::new();
        for &b in &order {
            let mut loads = Vec::new();
            self.kernel.block(b).value.loads(&mut loads);
            for (buffer, _) in loads.into_iter().filter(|(x, _)| buffers.contains(x)) {
                *reads.entry(buffer).or_default() += 1;
            }
        }
        let mut finished: HashMap<BufferId, Expr> = HashMap::new();
        let mut depths: HashMap<BufferId, usize> = HashMap::new();
        let mut kept: HashSet<BlockId> = HashSet::new();
        for &b in &order {
            let own = &self.kernel.block(b).value;
            let depth = own.depth_with(&|buffer| depths.get(&buffer).copied().unwrap_or(1));
            let value = self.take_value(b).map_loads(&mut |buffer, indices| {
                let Some(v) = finished.get(&buffer) else {
                    return Expr::Load {
                        buffer,
                        indices: indices.to_vec(),
                    };
                };
                let v = if reads[&buffer] == 1 {
                    finished.remove(&buffer).expect("read once")
                } else {
                    v.clone()
                };
                substitute(v, indices)
            });
            let buffer = self.kernel.block(b).buffer;
            if buffers.contains(&buffer) && depth <= KEPT_DEPTH {
                finished.insert(buffer, value);
                depths.insert(buffer, depth);
            } else {
                kept.insert(b);
                self.kernel.block_mut(b).value = value;
            }
        }
        let inlined: Vec<BlockId> = inlined.into_iter().filter(|b| !kept.contains(b)).collect();
        let gone: HashSet<BlockId> = inlined.iter().copied().collect();
        prune(&mut self.kernel.body, &|b| gone.contains(&b));
        for &block in &inlined {
            self.record(Instruction::ComputeInline { block });
        }
        inlined
    }

    /// Replaces every read of `block`'s buffer by `block`'s expression and
    /// removes the block.
    ///
    /// Preconditions: `block` is not a reduction, writes an intermediate
    /// (not an output), and stores at exactly its iterators (so each read
    /// index names one instance).
    pub fn compute_inline(&mut self, block: BlockId) -> Result<()> {
        const P: &str = "compute_inline";
        self.check_block(block)?;
        self.check_inlinable(P, block)?;
        let b = self.kernel.block(block);
        let buffer = b.buffer;
        if b.value.reads(buffer) {
            return Err(
                ScheduleError::pre(P, format!("block {} reads its own buffer", b.name))
                    .blocks([b.name.clone()]),
            );
        }
        let consumers: Vec<BlockId> = (self.kernel.blocks_in_order().into_iter())
            .filter(|&o| o != block && self.kernel.block(o).reads(buffer))
            .collect();
        self.check_depth(P, block, &consumers)?;
        let reads: usize = (consumers.iter())
            .map(|&o| self.kernel.block(o).value.count_loads(buffer))
            .sum();
        // The block is removed: its expression moves into its one read
        // (a chain of n inlines then copies nothing: linear, not
        // quadratic), or is copied into each of several.
        let mut value = Some(self.take_value(block));
        for other in consumers {
            let inlined = self.kernel.block(other).value.map_loads(&mut |b, indices| {
                if b != buffer {
                    return Expr::Load {
                        buffer: b,
                        indices: indices.to_vec(),
                    };
                }
                let v = if reads == 1 {
                    value.take().expect("one read")
                } else {
                    value.clone().expect("kept for every read")
                };
                substitute(v, indices)
            });
            self.kernel.block_mut(other).value = inlined;
        }
        self.remove_block(block);
        self.record(Instruction::ComputeInline { block });
        Ok(())
    }

    /// Makes the producer of the one intermediate that `block` reads write
    /// `block`'s result directly, and removes `block`.
    ///
    /// Preconditions: `block` is not a reduction, reads exactly one
    /// intermediate buffer, at exactly its own iterators; that buffer's
    /// producer is not a reduction, stores at exactly its iterators over
    /// the same extents, and nothing but `block` reads the buffer; every
    /// other buffer `block` reads is ready before the producer runs.
    pub fn reverse_compute_inline(&mut self, block: BlockId) -> Result<()> {
        self.check_block(block)?;
        let c = self.kernel.block(block).clone();
        let temp = self.sole_intermediate(&c)?;
        let order = self.kernel.blocks_in_order();
        let producer = *order
            .iter()
            .find(|&&b| self.kernel.block(b).buffer == temp)
            .expect("every intermediate has a producer");
        self.check_inlinable(REVERSE_INLINE, producer)?;
        self.check_reverse_inline_into(&order, block, producer, temp)?;
        self.check_depth(REVERSE_INLINE, producer, &[block])?;
        let p = self.kernel.block(producer).clone();
        // Iterators correspond one to one (same extents, identity indices).
        let value = c.value.map_loads(&mut |buffer, indices| {
            if buffer == temp {
                p.value.clone()
            } else {
                Expr::Load {
                    buffer,
                    indices: indices.to_vec(),
                }
            }
        });
        let pb = self.kernel.block_mut(producer);
        pb.value = value;
        pb.buffer = c.buffer;
        pb.indices = c.indices;
        self.remove_block(block);
        self.record(Instruction::ReverseComputeInline { block });
        Ok(())
    }

    /// The one intermediate buffer consumer `c` reads, at exactly its
    /// iterators (reverse_compute_inline's preconditions on the consumer).
    fn sole_intermediate(&self, c: &Block) -> Result<BufferId> {
        let fail = |msg: String| ScheduleError::pre(REVERSE_INLINE, msg).blocks([c.name.clone()]);
        if c.reduce.is_some() {
            return Err(fail(format!("block {} is a reduction", c.name)));
        }
        let mut loads = Vec::new();
        c.value.loads(&mut loads);
        let temps: Vec<_> = loads
            .iter()
            .filter(|(buf, _)| self.kernel.buffer(*buf).role == Role::Temp)
            .collect();
        let Some(&&(temp, _)) = temps.first() else {
            return Err(fail(format!(
                "block {} reads no intermediate buffer",
                c.name
            )));
        };
        if temps
            .iter()
            .any(|(b, idx)| *b != temp || !is_identity(idx, c.iters.len()))
        {
            let msg = format!(
                "block {} must read one intermediate, at exactly its iterators",
                c.name
            );
            return Err(fail(msg));
        }
        Ok(temp)
    }

    /// Whether `producer` may write consumer `block`'s result in its
    /// place: the same domain, no other reader of `temp`, and every other
    /// input of `block` ready before `producer` runs.
    fn check_reverse_inline_into(
        &self,
        order: &[BlockId],
        block: BlockId,
        producer: BlockId,
        temp: BufferId,
    ) -> Result<()> {
        let (c, p) = (self.kernel.block(block), self.kernel.block(producer));
        let fail = |msg: String, other: &str| {
            ScheduleError::pre(REVERSE_INLINE, msg).blocks([c.name.clone(), other.to_owned()])
        };
        let extents = |b: &Block| b.iters.iter().map(|i| i.extent).collect::<Vec<_>>();
        if extents(p) != extents(c) {
            let msg = format!(
                "blocks {} and {} iterate over different domains",
                p.name, c.name
            );
            return Err(
                ScheduleError::pre(REVERSE_INLINE, msg).blocks([p.name.clone(), c.name.clone()])
            );
        }
        for &other in order {
            let o = self.kernel.block(other);
            if other != block && other != producer && o.reads(temp) {
                let temp = &self.kernel.buffer(temp).name;
                return Err(fail(
                    format!("buffer {temp} is also read by block {}", o.name),
                    &o.name,
                ));
            }
        }
        let p_pos = order.iter().position(|&b| b == producer).expect("in order");
        let mut loads = Vec::new();
        c.value.loads(&mut loads);
        for (buf, _) in loads.into_iter().filter(|(buf, _)| *buf != temp) {
            let writer = order
                .iter()
                .position(|&b| self.kernel.block(b).buffer == buf);
            if writer.is_some_and(|w| w >= p_pos) {
                let msg = format!(
                    "block {} reads {}, which is written after {} runs",
                    c.name,
                    self.kernel.buffer(buf).name,
                    p.name
                );
                return Err(fail(msg, &p.name));
            }
        }
        Ok(())
    }

    fn check_inlinable(&self, primitive: &'static str, block: BlockId) -> Result<()> {
        self.check_sole_writer(primitive, block)?;
        self.check_inlinable_alone(primitive, block)
    }

    /// That inlining `producer`'s expression into `consumers` nests none of
    /// them deeper than [`MAX_EXPR_DEPTH`].
    fn check_depth(
        &self,
        primitive: &'static str,
        producer: BlockId,
        consumers: &[BlockId],
    ) -> Result<()> {
        let p = self.kernel.block(producer);
        let inlined = p.value.depth();
        for &c in consumers {
            let c = self.kernel.block(c);
            let depth = c
                .value
                .depth_with(&|b| if b == p.buffer { inlined } else { 1 });
            if depth > MAX_EXPR_DEPTH {
                let msg = format!(
                    "inlining block {} into block {} nests an expression {depth} deep, \
                     past the limit of {MAX_EXPR_DEPTH}; keep one of the blocks between them",
                    p.name, c.name
                );
                return Err(
                    ScheduleError::pre(primitive, msg).blocks([p.name.clone(), c.name.clone()])
                );
            }
        }
        Ok(())
    }

    /// `check_inlinable` but for other writers of the buffer.
    fn check_inlinable_alone(&self, primitive: &'static str, block: BlockId) -> Result<()> {
        let b = self.kernel.block(block);
        if b.reduce.is_some() {
            return Err(
                ScheduleError::pre(primitive, format!("block {} is a reduction", b.name))
                    .blocks([b.name.clone()]),
            );
        }
        if self.kernel.buffer(b.buffer).role != Role::Temp {
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "block {} writes {}, which is not an intermediate",
                    b.name,
                    self.kernel.buffer(b.buffer).name
                ),
            )
            .blocks([b.name.clone()]));
        }
        if !is_identity(&b.indices, b.iters.len()) {
            return Err(ScheduleError::pre(
                primitive,
                format!("block {} does not store at exactly its iterators", b.name),
            )
            .blocks([b.name.clone()]));
        }
        Ok(())
    }

    /// No other block may write `block`'s buffer (as `rfactor`'s fill and
    /// partial blocks share theirs): moving or folding one of them would
    /// change what the other sees.
    pub(super) fn check_sole_writer(&self, primitive: &'static str, block: BlockId) -> Result<()> {
        let buffer = self.kernel.block(block).buffer;
        let others: Vec<String> = self
            .kernel
            .blocks_in_order()
            .into_iter()
            .filter(|&b| b != block && self.kernel.block(b).buffer == buffer)
            .map(|b| self.block_name(b))
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        Err(ScheduleError::pre(
            primitive,
            format!(
                "block {} shares its buffer {} with block {}",
                self.block_name(block),
                self.kernel.buffer(buffer).name,
                others.join(", ")
            ),
        )
        .blocks([self.block_name(block)])
        .blocks(others))
    }

    /// Takes a block out of the tree, with loops left empty by it.
    fn remove_block(&mut self, block: BlockId) {
        prune(&mut self.kernel.body, &|b| b == block);
        // The block is gone from the nest; its expression (which inlining
        // may have grown) would only hold memory: a chain of n inlined
        // blocks kept O(n^2) nodes.
        self.take_value(block);
    }

    /// Takes a block's expression, leaving a constant in its place.
    fn take_value(&mut self, block: BlockId) -> Expr {
        let dtype = self.kernel.buffer(self.kernel.block(block).buffer).dtype;
        let placeholder = Expr::Const { value: 0.0, dtype };
        std::mem::replace(&mut self.kernel.block_mut(block).value, placeholder)
    }
}

/// Takes the blocks `gone` says out of the tree, with loops left empty.
fn prune(nodes: &mut Vec<Node>, gone: &impl Fn(BlockId) -> bool) {
    nodes.retain(|n| !matches!(n, Node::Block(b) if gone(*b)));
    for n in nodes.iter_mut() {
        if let Node::Loop(_, body) = n {
            prune(body, gone);
        }
    }
    nodes.retain(|n| !matches!(n, Node::Loop(_, body) if body.is_empty()));
}

/// A producer's expression `v` as read at `indices` (its iterators
/// replaced by them; nothing to do where they are its own iterators).
fn substitute(v: Expr, indices: &[Index]) -> Expr {
    if is_identity(indices, indices.len()) {
        v
    } else {
        v.subst(&|var| match var {
            Var::Iter(i) => Some(indices[i as usize].clone()),
            Var::Loop(_) => None,
        })
    }
}

fn is_identity(indices: &[Index], rank: usize) -> bool {
    indices.len() == rank
        && indices
            .iter()
            .enumerate()
            .all(|(i, idx)| *idx == Index::var(Var::Iter(i as u32)))
}
