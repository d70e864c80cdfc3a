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

use std::collections::HashMap;

use super::ast::Stmt;
use crate::ir::{BufferId, Kernel, LoopKind, Node, Scope};

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

/// The shared buffers a subtree reads and writes, each with whether some
/// access to it spreads over the workgroup's invocations (an access every
/// invocation makes alike hands nothing to another).
#[derive(Clone, Debug, Default)]
struct Accesses {
    reads: HashMap<BufferId, bool>,
    writes: HashMap<BufferId, bool>,
}

impl Accesses {
    fn of(kernel: &Kernel, node: &Node) -> Self {
        let mut a = Self::default();
        a.add(kernel, node, false);
        a
    }

    fn add(&mut self, kernel: &Kernel, node: &Node, spread: bool) {
        let note = |map: &mut HashMap<BufferId, bool>, b: BufferId| {
            if kernel.buffer(b).scope != Scope::Private {
                *map.entry(b).or_default() |= spread;
            }
        };
        match node {
            Node::Block(b) => {
                let block = kernel.block(*b);
                let mut loads = Vec::new();
                block.value.loads(&mut loads);
                for (buf, _) in loads {
                    note(&mut self.reads, buf);
                }
                note(&mut self.writes, block.buffer);
            }
            Node::Loop(l, body) => {
                let spread = spread
                    || matches!(kernel.loop_(*l).kind, LoopKind::Bound(a) if !a.is_workgroup());
                body.iter().for_each(|n| self.add(kernel, n, spread));
            }
        }
    }

    /// Forgets the accesses that `barrier` ordered; those through memory
    /// it did not order still need a barrier before a later conflict.
    fn ordered_by(&mut self, barrier: Barrier, kernel: &Kernel) {
        let unordered = |b: &BufferId, _: &mut bool| match kernel.buffer(*b).scope {
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

    /// The barrier `next` needs after `self` has run: for every buffer one
    /// side writes and the other reads or writes, where either side's
    /// access spreads over invocations.
    fn barrier_before(&self, next: &Self, kernel: &Kernel) -> Barrier {
        let mut barrier = Barrier::default();
        let conflict = |earlier: &HashMap<BufferId, bool>, later: &HashMap<BufferId, bool>| {
            earlier
                .iter()
                .filter_map(|(b, &s)| later.get(b).map(|&t| (*b, s || t)))
                .filter(|&(_, spread)| spread)
                .map(|(b, _)| b)
                .collect::<Vec<_>>()
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
        let b = since.barrier_before(&a, kernel);
        since.ordered_by(b, kernel);
        since.extend(&a);
        out.push(b);
    }
    (out, since)
}

/// The barrier at the end of a loop body that holds barriers: the next
/// iteration's accesses against those since the body's last barrier.
pub(super) fn wrap_around(kernel: &Kernel, body: &[Node]) -> Barrier {
    let (_, tail) = scan(kernel, body);
    let mut all = Accesses::default();
    for n in body {
        all.extend(&Accesses::of(kernel, n));
    }
    tail.barrier_before(&all, kernel)
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
