//! Barrier placement: where the invocations of a workgroup hand data to
//! each other between sibling subtrees, and through which memory.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Display};

use super::{LowerError, Lowered};
use crate::ir::{
    Block, BufferId, CrossInvocation, Index, Kernel, LoopId, LoopKind, Node, Scope, Var,
};

/// The barrier between two parts of a body: which memories it orders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Barrier {
    /// Orders workgroup memory (`workgroupBarrier`).
    pub workgroup: bool,
    /// Orders storage buffers (`storageBarrier`).
    pub storage: bool,
}

impl Barrier {
    fn is_empty(self) -> bool {
        !self.workgroup && !self.storage
    }
}

/// Every barrier of a kernel: before a child of a loop's body, and at the
/// end of a loop's iteration (absent: none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Barriers {
    /// Before child `i` of loop `l`'s body, keyed `(l, i)`.
    pub before: BTreeMap<(LoopId, usize), Barrier>,
    /// After every iteration of the loop's body.
    pub end_of_iteration: BTreeMap<LoopId, Barrier>,
}

impl Barriers {
    pub fn before(&self, l: LoopId, child: usize) -> Barrier {
        self.before.get(&(l, child)).copied().unwrap_or_default()
    }

    pub fn end_of_iteration(&self, l: LoopId) -> Barrier {
        self.end_of_iteration.get(&l).copied().unwrap_or_default()
    }
}

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let mut barriers = Barriers::default();
    for root in &l.kernel.body {
        place(&l.kernel, root, &mut barriers);
    }
    l.barriers = barriers;
    Ok(())
}

/// Places the barriers inside `node`; whether it holds one at any depth.
/// Mirrors how codegen spells loops: a loop bound to invocations that
/// reduces across them is one expansion (a tree holds a barrier per
/// step); a loop that iterates gets the barrier its end needs when it
/// holds one or is pipelined (its copies hand data to later iterations).
fn place(k: &Kernel, node: &Node, out: &mut Barriers) -> bool {
    let Node::Loop(l, body) = node else {
        return false;
    };
    let lp = k.loop_(*l);
    if let (LoopKind::Bound(_), Some((_, how))) = (lp.kind, k.cross_invocation_reduction(*l)) {
        return how == CrossInvocation::Tree && lp.extent >= 2;
    }
    let mut holds = false;
    for (i, (n, barrier)) in body.iter().zip(before_each(k, body)).enumerate() {
        if !barrier.is_empty() {
            out.before.insert((*l, i), barrier);
            holds = true;
        }
        holds |= place(k, n, out);
    }
    let iterates = match lp.kind {
        LoopKind::Bound(_) => false,
        LoopKind::Unrolled | LoopKind::Vectorized => true,
        _ => lp.extent != 1,
    };
    let pipelined = matches!(lp.kind, LoopKind::Pipelined { .. });
    if iterates && (pipelined || holds) {
        let end = wrap_around(k, *l, body);
        if !end.is_empty() {
            out.end_of_iteration.insert(*l, end);
            holds = true;
        }
    }
    holds
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
fn before_each(kernel: &Kernel, nodes: &[Node]) -> Vec<Barrier> {
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
fn wrap_around(kernel: &Kernel, l: LoopId, body: &[Node]) -> Barrier {
    let (_, tail) = scan(kernel, body);
    let mut all = Accesses::default();
    for n in body {
        all.extend(&Accesses::of(kernel, n));
    }
    tail.barrier_before(&all, kernel, Some(l))
}

impl Barriers {
    /// `# barrier ...` lines, one per barrier (none when there are none).
    pub fn display<'a>(&'a self, k: &'a Kernel) -> impl Display + 'a {
        struct Show<'a>(&'a Barriers, &'a Kernel);
        impl Display for Show<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let Show(b, k) = self;
                let kinds = |b: &Barrier| match (b.workgroup, b.storage) {
                    (true, true) => "workgroup + storage",
                    (true, false) => "workgroup",
                    _ => "storage",
                };
                for ((l, i), b) in &b.before {
                    let name = &k.loop_(*l).name;
                    writeln!(
                        f,
                        "# barrier ({}) before child {i} of loop {name}",
                        kinds(b)
                    )?;
                }
                for (l, b) in &b.end_of_iteration {
                    let name = &k.loop_(*l).name;
                    writeln!(
                        f,
                        "# barrier ({}) after each iteration of loop {name}",
                        kinds(b)
                    )?;
                }
                Ok(())
            }
        }
        Show(self, k)
    }
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
        let mut k = crate::initial::initial_kernel(&f);
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
