//! Barriers: where the invocations of a workgroup hand data to each other
//! between sibling subtrees, and through which memory.
//!
//! Siblings run one after the other on every invocation. A barrier goes
//! before a sibling that reads what an earlier one (since the last barrier)
//! wrote, or writes what it read or wrote, through memory that several
//! invocations share, when either side spreads over invocations. It is a
//! `workgroupBarrier()` for workgroup memory and a `storageBarrier()` for
//! storage buffers: on a discrete GPU a storage barrier on workgroup-only
//! traffic costs a device-memory fence per step. A barrier of one kind
//! leaves accesses through the other kind pending for later siblings.
//!
//! A buffer with rotating stages (`software_pipeline`) is tracked per
//! stage, relative to the current iteration of its pipelined loop: a copy
//! into the stage `prefetch` iterations ahead does not conflict with the
//! reads of this iteration's stage, nor (with enough stages) with the
//! next iteration's.

use std::collections::HashMap;

use super::ast::Stmt;
use crate::ir::{Block, BufferId, Index, Kernel, LoopId, LoopKind, Node, Scope, Var};

/// The barrier between two parts of a body: which memories it orders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Barrier {
    workgroup: bool,
    storage: bool,
}

impl Barrier {
    pub fn stmts(self) -> Vec<Stmt> {
        let mut out = Vec::new();
        if self.storage {
            out.push(Stmt::Call("storageBarrier".into()));
        }
        if self.workgroup {
            out.push(Stmt::Call("workgroupBarrier".into()));
        }
        out
    }
}

/// A buffer, and for a staged one accessed within one iteration of its
/// pipelined loop, the stage as an offset from that iteration's
/// (`None`: any stage).
type Place = (BufferId, Option<i64>);

/// The shared places a subtree reads and writes, each with whether some
/// access to it spreads over the workgroup's invocations (an access every
/// invocation makes alike hands nothing to another).
#[derive(Clone, Debug, Default)]
struct Accesses {
    reads: HashMap<Place, bool>,
    writes: HashMap<Place, bool>,
}

/// The stage offset of an access to `buffer` at `indices` (over loops),
/// unless the walk passed through its pipelined loop (`around`).
fn stage(kernel: &Kernel, buffer: BufferId, indices: &[Index], around: &[LoopId]) -> Option<i64> {
    let (l, _) = kernel.buffer(buffer).stages?;
    let mut vars = Vec::new();
    indices[0].vars(&mut vars);
    (!around.contains(&l) && vars.iter().all(|&v| v == Var::Loop(l)))
        .then(|| indices[0].eval(&|_| 0))
}

impl Accesses {
    fn of(kernel: &Kernel, node: &Node) -> Self {
        let mut a = Self::default();
        a.add(kernel, node, false, &mut Vec::new());
        a
    }

    fn add(&mut self, kernel: &Kernel, node: &Node, spread: bool, around: &mut Vec<LoopId>) {
        let note = |map: &mut HashMap<Place, bool>, block: &Block, b: BufferId, ix: &[Index]| {
            if kernel.buffer(b).scope != Scope::Private {
                let at = stage(kernel, b, &block.over_loops(ix), around);
                *map.entry((b, at)).or_default() |= spread;
            }
        };
        match node {
            Node::Block(b) => {
                let block = kernel.block(*b);
                let mut loads = Vec::new();
                block.value.loads(&mut loads);
                for (buf, ix) in loads {
                    note(&mut self.reads, block, buf, ix);
                }
                note(&mut self.writes, block, block.buffer, &block.indices);
            }
            Node::Loop(l, body) => {
                let spread = spread
                    || matches!(kernel.loop_(*l).kind, LoopKind::Bound(a) if !a.is_workgroup());
                around.push(*l);
                body.iter()
                    .for_each(|n| self.add(kernel, n, spread, around));
                around.pop();
            }
        }
    }

    /// Forgets the accesses that `barrier` ordered; those through memory
    /// it did not order still need a barrier before a later conflict.
    fn ordered_by(&mut self, barrier: Barrier, kernel: &Kernel) {
        let unordered = |(b, _): &Place, _: &mut bool| match kernel.buffer(*b).scope {
            Scope::Workgroup => !barrier.workgroup,
            Scope::Global => !barrier.storage,
            Scope::Private => false,
        };
        self.reads.retain(unordered);
        self.writes.retain(unordered);
    }

    fn extend(&mut self, other: &Self) {
        for (mine, theirs) in [
            (&mut self.reads, &other.reads),
            (&mut self.writes, &other.writes),
        ] {
            for (&b, &spread) in theirs {
                *mine.entry(b).or_default() |= spread;
            }
        }
    }

    /// The barrier `next` needs after `self` has run: for every place one
    /// side writes and the other reads or writes, where either side's
    /// access spreads over invocations. With `next_iteration_of`, `next`
    /// runs in the following iteration of that loop (its stages one on).
    fn barrier_before(
        &self,
        next: &Self,
        kernel: &Kernel,
        next_iteration_of: Option<LoopId>,
    ) -> Barrier {
        let mut barrier = Barrier::default();
        let same = |(a, x): Place, (b, y): Place| {
            a == b
                && match (x, y, kernel.buffer(a).stages) {
                    (Some(x), Some(y), Some((l, n))) => {
                        let step = i64::from(next_iteration_of == Some(l));
                        (x - y - step).rem_euclid(n as i64) == 0
                    }
                    _ => true,
                }
        };
        let conflict = |earlier: &HashMap<Place, bool>, later: &HashMap<Place, bool>| {
            let mut out = Vec::new();
            for (&p, &s) in earlier {
                for (&q, &t) in later {
                    if (s || t) && same(p, q) {
                        out.push(p.0);
                    }
                }
            }
            out
        };
        let mut conflicts = conflict(&self.writes, &next.reads);
        conflicts.extend(conflict(&self.writes, &next.writes));
        conflicts.extend(conflict(&self.reads, &next.writes));
        for b in conflicts {
            match kernel.buffer(b).scope {
                Scope::Workgroup => barrier.workgroup = true,
                Scope::Global => barrier.storage = true,
                Scope::Private => {}
            }
        }
        barrier
    }
}

/// The barrier before each of `nodes` (none before the first).
pub(super) fn before_each(kernel: &Kernel, nodes: &[Node]) -> Vec<Barrier> {
    scan(kernel, nodes).0
}

/// The barrier before each of `nodes`, and what ran since the last one.
fn scan(kernel: &Kernel, nodes: &[Node]) -> (Vec<Barrier>, Accesses) {
    let mut since = Accesses::default();
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        let a = Accesses::of(kernel, n);
        let b = since.barrier_before(&a, kernel, None);
        since.ordered_by(b, kernel);
        since.extend(&a);
        out.push(b);
    }
    (out, since)
}

/// The barrier at the end of loop `l`'s body: the next iteration's
/// accesses against those since the body's last barrier.
pub(super) fn wrap_around(kernel: &Kernel, l: LoopId, body: &[Node]) -> Barrier {
    let (_, tail) = scan(kernel, body);
    let mut all = Accesses::default();
    for n in body {
        all.extend(&Accesses::of(kernel, n));
    }
    tail.barrier_before(&all, kernel, Some(l))
}

/// Whether emitted statements hold a barrier, at any depth.
pub(super) fn holds_barrier(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Call(name) => name.ends_with("Barrier"),
        Stmt::If(_, body) | Stmt::Scope(body) | Stmt::For { body, .. } => holds_barrier(body),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{BinaryOp, DType, Fusion, UnaryOp};

    use super::*;
    use crate::ir::ThreadAxis;

    /// Nests writing `g` (global) and `w` (workgroup), then one reading
    /// `w`, then one reading `g`: the workgroup barrier before the third
    /// does not order `g`, so the fourth still needs a storage barrier.
    #[test]
    fn a_barrier_of_one_kind_leaves_the_other_pending() {
        let mut f = Fusion::new();
        let x = f.input(&[4], DType::F32, Some("x")).unwrap();
        let g = f.unary(UnaryOp::Exp, x).unwrap();
        let w = f.binary(BinaryOp::Mul, x, x).unwrap();
        let b = f.binary(BinaryOp::Add, w, x).unwrap();
        let c = f.binary(BinaryOp::Add, g, x).unwrap();
        f.output(b).unwrap();
        f.output(c).unwrap();
        let mut k = crate::lower(&f);
        for node in k.body.clone() {
            let Node::Loop(l, _) = node else {
                unreachable!("root loops")
            };
            k.loop_mut(l).kind = LoopKind::Bound(ThreadAxis::InvocationX);
        }
        let w = k.blocks_in_order()[1];
        let w = k.block(w).buffer;
        k.buffers[w.0 as usize].scope = Scope::Workgroup;
        let kinds: Vec<(bool, bool)> = before_each(&k, &k.body)
            .into_iter()
            .map(|b| (b.workgroup, b.storage))
            .collect();
        assert_eq!(
            kinds,
            [(false, false), (false, false), (true, false), (false, true)]
        );
    }
}
