//! Software pipelining, the lowering pass after buffer realization (TVM's
//! `InjectSoftwarePipeline`, nvFuser's circular buffering). In a loop
//! marked by `Schedule::pipeline`, the copies at the front of the body
//! write into `stages` rotating copies of their (realized) buffers and run
//! `prefetch` iterations ahead:
//!
//! ```text
//! for p in range(prefetch):            # the prologue
//!   copy(iteration p)          -> buf[p]
//! for i in range(n):                   # pipelined
//!   copy(iteration i + prefetch) -> buf[(i + prefetch) % stages]   (if i + prefetch < n)
//!   use buf[i % stages]
//! ```
//!
//! Realization has already sized each buffer to one iteration, so the
//! stage is a new leading dimension. The barrier pass (`place_barriers`)
//! reads the stages: accesses to different stages never conflict, so one
//! barrier per iteration (at its end) orders both each copy before its use
//! and each use before the copy that overwrites its stage; unpipelined, a
//! workgroup needs two (after the copies, and after their use).

use std::collections::HashMap;

use super::{LowerError, Lowered};
use crate::ir::{BlockId, BufferId, Expr, Index, Kernel, LoopId, LoopKind, Node, Var};

/// Lowers every pipelined loop of a realized kernel (see the module docs).
pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let k = &mut l.kernel;
    let pipelined: Vec<(LoopId, u64, u64)> = (0..k.loops.len())
        .map(|i| LoopId(i as u32))
        .filter(|&l| k.loop_node(l).is_some())
        .filter_map(|l| match k.loop_(l).kind {
            LoopKind::Pipelined {
                stages, prefetch, ..
            } => Some((l, u64::from(stages), u64::from(prefetch))),
            _ => None,
        })
        .collect();
    for (l, stages, prefetch) in pipelined {
        inject_one(k, l, stages, prefetch)?;
    }
    Ok(())
}

fn inject_one(k: &mut Kernel, l: LoopId, stages: u64, prefetch: u64) -> Result<(), LowerError> {
    let n = k.copies_ahead(l).map_err(|message| LowerError {
        pass: "software_pipeline",
        message,
    })?;
    let Some(Node::Loop(_, body)) = k.loop_node(l).cloned() else {
        unreachable!("a live loop")
    };
    let mut copies = Vec::new();
    body[..n].iter().for_each(|c| c.blocks(&mut copies));
    let mut staged: Vec<BufferId> = copies.iter().map(|&b| k.block(b).buffer).collect();
    staged.sort();
    staged.dedup();
    let extent = k.loop_(l).extent;
    let var = Index::var(Var::Loop(l));
    // The prologue, cloned from the copies before they move ahead: its
    // iteration p fills stage p.
    if prefetch > 0 {
        let p = k.new_loop(
            format!("{}_prologue", k.loop_(l).name),
            prefetch.min(extent),
        );
        let mut fresh = HashMap::from([(l, p)]);
        let nest: Vec<Node> = body[..n]
            .iter()
            .map(|c| clone_nest(k, c, &mut fresh))
            .collect();
        let mut cloned = Vec::new();
        nest.iter().for_each(|c| c.blocks(&mut cloned));
        for b in cloned {
            with_stage(k, b, &staged, &Index::var(Var::Loop(p)));
        }
        let prologue = Node::Loop(p, nest);
        if let Some(at) = k
            .body
            .iter()
            .position(|n| matches!(n, Node::Loop(x, _) if *x == l))
        {
            // Each root nest is a dispatch of its own: one loop of one
            // iteration keeps the prologue in the loop's.
            let whole = k.new_loop(format!("{}_pipeline", k.loop_(l).name), 1);
            let main = k.body.remove(at);
            k.body.insert(at, Node::Loop(whole, vec![prologue, main]));
        } else {
            let (siblings, at) = k.find_loop_mut(l).expect("live");
            siblings.insert(at, prologue);
        }
    }
    let ahead = var.clone() + Index::Const(prefetch as i64);
    for &b in &copies {
        let block = k.block_mut(b);
        let shift = |v: Var| (v == Var::Loop(l)).then(|| ahead.clone());
        block.subst(&shift);
        if prefetch > 0 {
            block.predicates.push((ahead.clone(), extent));
        }
        with_stage(
            k,
            b,
            &staged,
            &Index::Mod(Box::new(ahead.clone()), stages as i64),
        );
    }
    let current = Index::Mod(Box::new(var), stages as i64);
    for b in k.blocks_under(l) {
        if !copies.contains(&b) {
            with_stage(k, b, &staged, &current);
        }
    }
    for buf in staged {
        let buffer = &mut k.buffers[buf.0 as usize];
        buffer.shape.insert(0, stages);
        buffer.stages = Some((l, stages));
    }
    Ok(())
}

/// Prepends `stage` to block `b`'s accesses of the staged buffers.
fn with_stage(k: &mut Kernel, b: BlockId, staged: &[BufferId], stage: &Index) {
    let block = k.block_mut(b);
    if staged.contains(&block.buffer) {
        block.indices.insert(0, stage.clone());
    }
    block.value = block.value.map_loads(&mut |buffer, indices| {
        let mut indices = indices.to_vec();
        if staged.contains(&buffer) {
            indices.insert(0, stage.clone());
        }
        Expr::Load { buffer, indices }
    });
}

/// A copy of a nest with fresh loops and blocks; `fresh` maps old loops to
/// new ones (seeded with the replacements of loops around the nest).
fn clone_nest(k: &mut Kernel, node: &Node, fresh: &mut HashMap<LoopId, LoopId>) -> Node {
    match node {
        Node::Loop(old, body) => {
            let lp = k.loop_(*old).clone();
            let new = k.new_loop(lp.name, lp.extent);
            k.loop_mut(new).kind = lp.kind;
            fresh.insert(*old, new);
            Node::Loop(new, body.iter().map(|n| clone_nest(k, n, fresh)).collect())
        }
        Node::Block(b) => {
            let mut block = k.block(*b).clone();
            block.subst(&|v| match v {
                Var::Loop(l) => fresh.get(&l).map(|&n| Index::var(Var::Loop(n))),
                Var::Iter(_) => None,
            });
            k.blocks.push(block);
            Node::Block(BlockId(k.blocks.len() as u32 - 1))
        }
    }
}
