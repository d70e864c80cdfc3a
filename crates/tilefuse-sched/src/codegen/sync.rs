//! Barriers: where the invocations of a workgroup hand data to each other
//! between sibling subtrees, and through which memory.
//!
//! Siblings run one after the other on every invocation. A barrier goes
//! before a sibling that reads what an earlier one (since the last barrier)
//! wrote, or writes what it read or wrote, through memory that several
//! invocations share, when either side spreads over invocations. It is a
//! `workgroupBarrier()` for workgroup memory and a `storageBarrier()` for
//! storage buffers: on a discrete GPU a storage barrier on workgroup-only
//! traffic costs a device-memory fence per step.

use std::collections::HashSet;

use super::ast::Stmt;
use crate::ir::{BufferId, Kernel, LoopKind, Node, Scope};

/// The barrier between two parts of a body: which memories it orders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Barrier {
    workgroup: bool,
    storage: bool,
}

impl Barrier {
    pub fn is_some(self) -> bool {
        self.workgroup || self.storage
    }

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

/// The shared buffers a subtree reads and writes, and whether it spreads
/// over the workgroup's invocations.
#[derive(Clone, Debug, Default)]
struct Accesses {
    reads: HashSet<BufferId>,
    writes: HashSet<BufferId>,
    invocations: bool,
}

impl Accesses {
    fn of(kernel: &Kernel, node: &Node) -> Self {
        let mut a = Self::default();
        a.add(kernel, node);
        a
    }

    fn add(&mut self, kernel: &Kernel, node: &Node) {
        let shared = |b: &BufferId| kernel.buffer(*b).scope != Scope::Private;
        match node {
            Node::Block(b) => {
                let block = kernel.block(*b);
                let mut loads = Vec::new();
                block.value.loads(&mut loads);
                self.reads
                    .extend(loads.into_iter().map(|(b, _)| b).filter(shared));
                if shared(&block.buffer) {
                    self.writes.insert(block.buffer);
                }
            }
            Node::Loop(l, body) => {
                self.invocations |=
                    matches!(kernel.loop_(*l).kind, LoopKind::Bound(a) if !a.is_workgroup());
                body.iter().for_each(|n| self.add(kernel, n));
            }
        }
    }

    fn extend(&mut self, other: &Self) {
        self.reads.extend(&other.reads);
        self.writes.extend(&other.writes);
        self.invocations |= other.invocations;
    }

    /// The barrier `next` needs after `self` has run.
    fn barrier_before(&self, next: &Self, kernel: &Kernel) -> Barrier {
        let mut barrier = Barrier::default();
        if !(self.invocations || next.invocations) {
            return barrier;
        }
        let conflicts = self
            .writes
            .iter()
            .filter(|b| next.reads.contains(b) || next.writes.contains(b))
            .chain(self.reads.iter().filter(|b| next.writes.contains(b)));
        for &b in conflicts {
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
        if b.is_some() {
            since = Accesses::default();
        }
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
