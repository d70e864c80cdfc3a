//! Loop transformations: `split`, `fuse`, `reorder`. They change how a
//! block's iteration domain is walked, never the domain itself: bindings
//! are rewritten so every block instance still computes the same element.

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{Index, LoopId, LoopKind, Node, Var};

/// How many times its extent a split loop may cover: ample for tiles larger
/// than a small loop; beyond it the iterations past the extent, all
/// skipped, are only a hang on the CPU (a factor of 2^31 on a loop of 4).
pub const MAX_OVERSHOOT: u64 = 1 << 16;

/// `[None, 4]`, as the factors are written in Python.
fn describe(factors: &[Option<u64>]) -> String {
    let parts: Vec<String> = (factors.iter())
        .map(|f| f.map_or_else(|| "None".to_owned(), |f| f.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

impl Schedule {
    /// Replaces loop variable `old` by `expr` in every block binding.
    fn substitute_loop(&mut self, old: LoopId, expr: &Index) {
        let f = |v| (v == Var::Loop(old)).then(|| expr.clone());
        for block in &mut self.kernel.blocks {
            for binding in &mut block.bindings {
                *binding = binding.subst(&f);
            }
            for (p, _) in &mut block.predicates {
                *p = p.subst(&f);
            }
        }
    }

    fn check_serial(&self, primitive: &'static str, l: LoopId) -> Result<()> {
        match self.kernel.loop_(l).kind {
            LoopKind::Serial => Ok(()),
            kind => Err(ScheduleError::pre(
                primitive,
                format!(
                    "loop {} is {kind:?}; transform loops before annotating them",
                    self.loop_name(l)
                ),
            )
            .loops([self.loop_name(l)])),
        }
    }

    /// Splits `l` into nested loops with extents `factors` (outermost
    /// first). At most one factor may be `None`: it is inferred as the
    /// smallest extent that covers the loop. When the product overshoots
    /// the extent, the tail instances are guarded off.
    ///
    /// Preconditions: `l` is in the schedule and serial; factors are
    /// positive and cover at most [`MAX_OVERSHOOT`] times the extent;
    /// `names`, if given, has one name per factor, each an identifier
    /// (names reach generated code).
    pub fn split(
        &mut self,
        l: LoopId,
        factors: &[Option<u64>],
        names: Option<&[String]>,
    ) -> Result<Vec<LoopId>> {
        self.check_loop(l)?;
        self.check_serial("split", l)?;
        let resolved = self.split_factors(l, factors, names)?;
        let extent = self.kernel.loop_(l).extent;
        let product: u64 = resolved.iter().product();
        let base = self.loop_name(l);
        let new: Vec<LoopId> = resolved
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let name = names.map_or_else(|| format!("{base}_{i}"), |n| n[i].clone());
                self.kernel.new_loop(name, f)
            })
            .collect();
        let mut expr = Index::Const(0);
        let mut stride = 1i64;
        for (i, &lid) in new.iter().enumerate().rev() {
            expr = Index::var(Var::Loop(lid)) * stride + expr;
            stride *= resolved[i] as i64;
        }
        if product > extent {
            // The new loops overshoot: keep instances within the old loop.
            for b in self.kernel.blocks_under(l) {
                self.kernel
                    .block_mut(b)
                    .predicates
                    .push((Index::var(Var::Loop(l)), extent));
            }
        }
        self.substitute_loop(l, &expr);
        let (siblings, pos) = self.kernel.find_loop_mut(l).expect("checked");
        let Node::Loop(_, body) =
            std::mem::replace(&mut siblings[pos], Node::Block(crate::ir::BlockId(0)))
        else {
            unreachable!("find_loop_mut returns a loop")
        };
        siblings[pos] = nest(&new, body);
        self.record(Instruction::Split {
            loop_: l,
            factors: factors.to_vec(),
            names: names.map(<[String]>::to_vec),
        });
        Ok(new)
    }

    /// `factors` with the `None` inferred, once checked against loop
    /// `l`'s extent and `names` against the factors (split's
    /// preconditions).
    fn split_factors(
        &self,
        l: LoopId,
        factors: &[Option<u64>],
        names: Option<&[String]>,
    ) -> Result<Vec<u64>> {
        let fail = |msg: String| ScheduleError::pre("split", msg).loops([self.loop_name(l)]);
        let extent = self.kernel.loop_(l).extent;
        if factors.is_empty() {
            return Err(fail("needs at least one factor".into()));
        }
        if factors.iter().filter(|f| f.is_none()).count() > 1 {
            return Err(fail("at most one factor may be None (inferred)".into()));
        }
        if factors.contains(&Some(0)) {
            return Err(fail(format!(
                "factors must be positive, got {}",
                describe(factors)
            )));
        }
        let known = factors
            .iter()
            .flatten()
            .try_fold(1u64, |p, &f| p.checked_mul(f));
        let Some(known) = known else {
            let d = describe(factors);
            return Err(fail(format!(
                "factors {d} overflow a 64-bit iteration count"
            )));
        };
        let resolved: Vec<u64> = factors
            .iter()
            .map(|f| f.unwrap_or(extent.div_ceil(known)))
            .collect();
        // No overflow: the inferred factor is 1 once `known` covers the extent.
        let product: u64 = resolved.iter().product();
        let name = self.loop_name(l);
        if product > extent.max(1).saturating_mul(MAX_OVERSHOOT) {
            return Err(fail(format!(
                "factors {resolved:?} cover {product} iterations, more than {MAX_OVERSHOOT} times \
                 the extent {extent} of loop {name}: the iterations past the extent would all be \
                 skipped"
            )));
        }
        if product < extent {
            return Err(fail(format!(
                "factors {resolved:?} cover {product} iterations, less than the extent {extent} \
                 of loop {name}"
            )));
        }
        if let Some(names) = names
            && names.len() != factors.len()
        {
            let msg = format!("{} names for {} factors", names.len(), factors.len());
            return Err(fail(msg));
        }
        if let Some(bad) = names
            .into_iter()
            .flatten()
            .find(|n| !tilefuse_ir::is_identifier(n))
        {
            return Err(fail(format!(
                "loop name {bad:?} is not an identifier (letters, digits and _, not starting \
                 with a digit)"
            )));
        }
        Ok(resolved)
    }

    /// Fuses a chain of directly nested loops into one.
    ///
    /// Preconditions: at least two loops, all serial, each the only child
    /// of the one before it.
    pub fn fuse(&mut self, loops: &[LoopId]) -> Result<LoopId> {
        const P: &str = "fuse";
        if loops.len() < 2 {
            return Err(ScheduleError::pre(P, "needs at least two loops")
                .loops(loops.iter().map(|&l| self.loop_name(l))));
        }
        for &l in loops {
            self.check_loop(l)?;
            self.check_serial(P, l)?;
        }
        for pair in loops.windows(2) {
            let Some(Node::Loop(_, body)) = self.kernel.loop_node(pair[0]) else {
                unreachable!("checked")
            };
            if !matches!(body.as_slice(), [Node::Loop(inner, _)] if *inner == pair[1]) {
                return Err(ScheduleError::pre(
                    P,
                    format!(
                        "loop {} is not the only child of loop {}",
                        self.loop_name(pair[1]),
                        self.loop_name(pair[0])
                    ),
                )
                .loops([self.loop_name(pair[0]), self.loop_name(pair[1])]));
            }
        }
        let extents: Vec<u64> = loops.iter().map(|&l| self.kernel.loop_(l).extent).collect();
        let name = loops
            .iter()
            .map(|&l| self.loop_name(l))
            .collect::<Vec<_>>()
            .join("_")
            + "_fused";
        let fused = self.kernel.new_loop(name, extents.iter().product());
        let mut stride: i64 = 1;
        for (i, &l) in loops.iter().enumerate().rev() {
            let mut e = Index::var(Var::Loop(fused)) / stride;
            if i > 0 {
                e = e % extents[i] as i64;
            }
            self.substitute_loop(l, &e);
            stride *= extents[i] as i64;
        }
        let innermost = *loops.last().expect("two or more");
        let body = match self.kernel.loop_node(innermost) {
            Some(Node::Loop(_, body)) => body.clone(),
            _ => unreachable!("checked"),
        };
        let (siblings, pos) = self.kernel.find_loop_mut(loops[0]).expect("checked");
        siblings[pos] = Node::Loop(fused, body);
        self.record(Instruction::Fuse {
            loops: loops.to_vec(),
        });
        Ok(fused)
    }

    /// Reorders loops that lie on one chain: the chain from the outermost
    /// to the innermost of them must have a single child at every level.
    /// The given loops take their chain positions in the given order; the
    /// loops between them stay where they are.
    pub fn reorder(&mut self, loops: &[LoopId]) -> Result<()> {
        const P: &str = "reorder";
        for &l in loops {
            self.check_loop(l)?;
        }
        for (i, l) in loops.iter().enumerate() {
            if loops[..i].contains(l) {
                return Err(ScheduleError::pre(
                    P,
                    format!("loop {} is given twice", self.loop_name(*l)),
                )
                .loops([self.loop_name(*l)]));
            }
        }
        if loops.len() < 2 {
            self.record(Instruction::Reorder {
                loops: loops.to_vec(),
            });
            return Ok(());
        }
        // The outermost given loop is the one whose path contains no other.
        let depth = |l: LoopId| {
            self.kernel
                .path_to(&Node::Loop(l, vec![]))
                .map_or(0, |p| p.len())
        };
        let top = *loops.iter().min_by_key(|&&l| depth(l)).expect("non-empty");
        let mut chain = vec![top];
        let mut node = self.kernel.loop_node(top).expect("checked");
        while chain.iter().filter(|l| loops.contains(l)).count() < loops.len() {
            match node {
                Node::Loop(_, body) if body.len() == 1 && matches!(body[0], Node::Loop(..)) => {
                    let Node::Loop(next, _) = &body[0] else {
                        unreachable!()
                    };
                    chain.push(*next);
                    node = &body[0];
                }
                _ => {
                    return Err(ScheduleError::pre(
                        P,
                        format!(
                            "loops {} are not on one chain of single-child loops below {}",
                            loops
                                .iter()
                                .map(|&l| self.loop_name(l))
                                .collect::<Vec<_>>()
                                .join(", "),
                            self.loop_name(top)
                        ),
                    )
                    .loops(loops.iter().map(|&l| self.loop_name(l))));
                }
            }
        }
        let Node::Loop(_, body) = node else {
            unreachable!()
        };
        let body = body.clone();
        let mut order = loops.iter();
        let new_chain: Vec<LoopId> = chain
            .iter()
            .map(|l| {
                if loops.contains(l) {
                    *order.next().expect("counted")
                } else {
                    *l
                }
            })
            .collect();
        let (siblings, pos) = self.kernel.find_loop_mut(top).expect("checked");
        siblings[pos] = nest(&new_chain, body);
        self.record(Instruction::Reorder {
            loops: loops.to_vec(),
        });
        Ok(())
    }
}

/// `loops[0] { loops[1] { ... body } }`.
fn nest(loops: &[LoopId], body: Vec<Node>) -> Node {
    let (&last, outer) = loops.split_last().expect("at least one loop");
    let mut node = Node::Loop(last, body);
    for &l in outer.iter().rev() {
        node = Node::Loop(l, vec![node]);
    }
    node
}
