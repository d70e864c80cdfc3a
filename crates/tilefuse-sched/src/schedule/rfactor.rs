//! `rfactor`: turns part of a reduction into a spatial dimension, so that
//! a loop that carried the reduction can run in parallel (bound to
//! invocations or workgroups), with a second block combining the partial
//! results.

use tilefuse_ir::reduce_identity;

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{
    Block, BlockId, Buffer, BufferId, Expr, Index, IterKind, IterVar, LoopId, Node, Role, Scope,
    Var,
};

impl Schedule {
    /// Factors the reduction of the block under `l` over `l`:
    ///
    /// - `B_rf_init` fills a new buffer `B_rf[l, ...]` with the identity;
    /// - the block, renamed `B_rf`, reduces into `B_rf[l, ...]` (so `l` is a
    ///   spatial loop for it and may be parallelized or bound);
    /// - a new block named `B` reduces `B_rf` over `l` into the original
    ///   buffer, in a loop nest after the original one.
    ///
    /// Returns the `B_rf` block.
    ///
    /// Preconditions: `l` is in the schedule, in a root loop nest that holds
    /// exactly one block (the combining block runs after that nest); that
    /// block is a reduction that initializes its buffer; `l` drives one of
    /// its reduce iterators and none of its spatial ones.
    pub fn rfactor(&mut self, l: LoopId) -> Result<BlockId> {
        const P: &str = "rfactor";
        self.check_loop(l)?;
        let root = self
            .kernel
            .path_to(&Node::Loop(l, vec![]))
            .expect("checked")
            .first()
            .copied()
            .unwrap_or(l);
        let blocks = self.kernel.blocks_under(root);
        let [block] = blocks.as_slice() else {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "loop {}'s nest must hold exactly one block, it holds {}",
                    self.loop_name(l),
                    blocks.len()
                ),
            ));
        };
        let block = *block;
        let b = self.kernel.block(block).clone();
        let Some(op) = b.reduce.filter(|_| b.init) else {
            return Err(ScheduleError::pre(
                P,
                format!("block {} is not an initializing reduction", b.name),
            ));
        };
        let drives = |kind| {
            b.iters
                .iter()
                .zip(&b.bindings)
                .any(|(it, x)| it.kind == kind && x.mentions(Var::Loop(l)))
        };
        if !drives(IterKind::Reduce) || drives(IterKind::Spatial) {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "loop {} must drive a reduce iterator of block {} and no spatial one",
                    self.loop_name(l),
                    b.name
                ),
            ));
        }
        let extent = self.kernel.loop_(l).extent;
        let out = self.kernel.buffer(b.buffer).clone();
        let dtype = out.dtype;
        let rf_name = format!("{}_rf", b.name);
        let mut rf_shape = vec![extent];
        rf_shape.extend(&out.shape);
        self.kernel.buffers.push(Buffer {
            name: rf_name.clone(),
            dtype,
            shape: rf_shape.clone(),
            scope: Scope::Global,
            role: Role::Temp,
        });
        let rf = BufferId(self.kernel.buffers.len() as u32 - 1);
        let iter = |i: usize| Index::var(Var::Iter(i as u32));

        // The partial reduction: the original block, one more spatial iterator.
        let position = b.iters.len();
        let pb = self.kernel.block_mut(block);
        pb.name = rf_name.clone();
        pb.iters.push(IterVar {
            name: "vrf".into(),
            extent,
            kind: IterKind::Spatial,
        });
        pb.bindings.push(Index::var(Var::Loop(l)));
        pb.buffer = rf;
        pb.indices.insert(0, iter(position));
        pb.init = false;

        // Filling the partial buffer, before the original nest.
        let init = Block {
            name: format!("{rf_name}_init"),
            iters: IterVar::spatial(&rf_shape),
            bindings: Vec::new(),
            buffer: rf,
            indices: (0..rf_shape.len()).map(iter).collect(),
            value: Expr::Const {
                value: reduce_identity(op, dtype).as_f64(),
                dtype,
            },
            reduce: None,
            init: false,
            predicates: Vec::new(),
        };
        // Combining the partials, after it.
        let rank = out.shape.len();
        let mut iters = IterVar::spatial(&out.shape);
        iters.push(IterVar {
            name: "vr".into(),
            extent,
            kind: IterKind::Reduce,
        });
        let mut rf_index = vec![iter(rank)];
        rf_index.extend((0..rank).map(iter));
        let finish = Block {
            name: b.name.clone(),
            iters,
            bindings: Vec::new(),
            buffer: b.buffer,
            indices: (0..rank).map(iter).collect(),
            value: Expr::Load {
                buffer: rf,
                indices: rf_index,
            },
            reduce: Some(op),
            init: true,
            predicates: Vec::new(),
        };
        let root = self.root_of(l);
        let init_node = self.kernel.add_nest(init);
        let finish_node = self.kernel.add_nest(finish);
        self.kernel.body.insert(root + 1, finish_node);
        self.kernel.body.insert(root, init_node);
        self.record(Instruction::Rfactor { loop_: l });
        Ok(block)
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
