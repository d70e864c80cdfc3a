//! Loop annotations: `bind`, `parallel`, `vectorize`, `unroll`. They say
//! how a loop maps onto hardware and leave the sequential meaning alone,
//! which is why a loop that carries a reduction may not run in parallel
//! (`bind` to invocations aside: it combines the terms itself).

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{CrossInvocation, LoopId, LoopKind, Node, ThreadAxis};

/// Unrolled loops are emitted once per iteration; past this the shader
/// grows more than it gains.
pub const MAX_UNROLL: u64 = 256;

/// The most invocations a cross-invocation reduction spans: WebGPU's
/// largest workgroup x size (shuffles are held to the device's subgroup
/// size when the kernel is built).
pub const MAX_REDUCTION_LANES: u64 = 1024;

impl Schedule {
    fn annotate(&mut self, primitive: &'static str, l: LoopId, kind: LoopKind) -> Result<()> {
        self.set_kind(primitive, l, kind, kind == LoopKind::Unrolled)
    }

    /// Sets the kind of a serial loop; `reduction_ok` lets it carry a
    /// reduction (unrolled copies run in order; a cross-invocation
    /// reduction combines its terms itself).
    pub(super) fn set_kind(
        &mut self,
        primitive: &'static str,
        l: LoopId,
        kind: LoopKind,
        reduction_ok: bool,
    ) -> Result<()> {
        self.check_loop(l)?;
        let current = self.kernel.loop_(l).kind;
        if current != LoopKind::Serial {
            return Err(ScheduleError::pre(
                primitive,
                format!("loop {} is already {current:?}", self.loop_name(l)),
            )
            .loops([self.loop_name(l)]));
        }
        if !reduction_ok && let Some((block, iter)) = self.carried_reduction(l) {
            return Err(ScheduleError::pre(
                primitive,
                format!(
                    "loop {} carries the reduction of block {block} (iterator {iter}); \
                     its iterations must run in order (rfactor it first)",
                    self.loop_name(l)
                ),
            )
            .blocks([block])
            .loops([self.loop_name(l)]));
        }
        self.kernel.loop_mut(l).kind = kind;
        Ok(())
    }

    /// Binds `l` to a GPU thread axis: each workgroup (or invocation) runs
    /// one iteration. On the CPU, workgroup loops run in parallel.
    ///
    /// A loop that carries a reduction may be bound to an invocation axis
    /// (TVM's cross-thread reduction): each invocation computes one term.
    /// When the terms are the lanes' entries of a workgroup buffer (the
    /// partials of an `rfactor` set to workgroup scope) they are folded
    /// there as a tree, a barrier per halving, on any invocation axis;
    /// otherwise they are combined with subgroup shuffles, no workgroup
    /// memory or barrier, on `invocation.x` only, and the loop must fit in
    /// the device's smallest subgroup at build time. Its extent must be a
    /// power of two of at most [`MAX_REDUCTION_LANES`], it must hold only
    /// the reducing block, and at build time it must span the workgroup's
    /// size along its axis.
    ///
    /// Preconditions: `l` is serial and carries no reduction unless as
    /// above; no loop around or inside it is bound to the same axis; a
    /// workgroup axis is not bound inside an invocation-bound loop.
    pub fn bind(&mut self, l: LoopId, axis: ThreadAxis) -> Result<()> {
        const P: &str = "bind";
        self.check_loop(l)?;
        let path = self
            .kernel
            .path_to(&Node::Loop(l, vec![]))
            .expect("checked");
        let mut related: Vec<LoopId> = path;
        related.extend(self.kernel.loops_inside(l));
        for other in related {
            if let LoopKind::Bound(a) = self.kernel.loop_(other).kind {
                if a == axis {
                    return Err(ScheduleError::pre(
                        P,
                        format!(
                            "loop {} is already bound to {} in the same nest",
                            self.loop_name(other),
                            a.name()
                        ),
                    )
                    .loops([self.loop_name(l), self.loop_name(other)]));
                }
                let outer = self
                    .kernel
                    .path_to(&Node::Loop(l, vec![]))
                    .expect("checked")
                    .contains(&other);
                // Workgroup loops enclose invocation loops, whichever of
                // the two is bound first.
                if axis.is_workgroup() != a.is_workgroup() && axis.is_workgroup() == outer {
                    return Err(ScheduleError::pre(
                        P,
                        format!(
                            "cannot bind {} to {} {} loop {} bound to {}: workgroup loops must enclose invocation loops",
                            self.loop_name(l),
                            axis.name(),
                            if outer { "inside" } else { "outside" },
                            self.loop_name(other),
                            a.name()
                        ),
                    ).loops([self.loop_name(l), self.loop_name(other)]));
                }
            }
        }
        let carried = self.carried_reduction(l);
        if let Some((block, iter)) = &carried {
            self.check_cross_invocation_reduction(l, axis, block, iter)?;
        }
        self.set_kind(P, l, LoopKind::Bound(axis), carried.is_some())?;
        self.record(Instruction::Bind { loop_: l, axis });
        Ok(())
    }

    /// Runs the iterations of `l` on several CPU threads (on a GPU, within
    /// one invocation they stay serial).
    ///
    /// Preconditions: `l` is serial and carries no reduction.
    pub fn parallel(&mut self, l: LoopId) -> Result<()> {
        self.annotate("parallel", l, LoopKind::Parallel)?;
        self.record(Instruction::Parallel { loop_: l });
        Ok(())
    }

    /// Runs the iterations of `l` as SIMD lanes (`vec4` loads and stores in
    /// WGSL where the layout allows).
    ///
    /// Preconditions: `l` is serial, innermost (no loops inside it) and
    /// carries no reduction.
    pub fn vectorize(&mut self, l: LoopId) -> Result<()> {
        const P: &str = "vectorize";
        self.check_loop(l)?;
        if !self.kernel.loops_inside(l).is_empty() {
            return Err(ScheduleError::pre(
                P,
                format!("loop {} is not innermost", self.loop_name(l)),
            )
            .loops([self.loop_name(l)]));
        }
        self.annotate(P, l, LoopKind::Vectorized)?;
        self.record(Instruction::Vectorize { loop_: l });
        Ok(())
    }

    /// Emits `l` once per iteration, without a loop.
    ///
    /// Preconditions: `l` is serial or pipelined, with an extent of at most
    /// [`MAX_UNROLL`].
    pub fn unroll(&mut self, l: LoopId) -> Result<()> {
        const P: &str = "unroll";
        self.check_loop(l)?;
        let extent = self.kernel.loop_(l).extent;
        if extent > MAX_UNROLL {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "loop {} has {extent} iterations; at most {MAX_UNROLL} unroll (split it first)",
                    self.loop_name(l)
                ),
            )
            .loops([self.loop_name(l)]));
        }
        match self.kernel.loop_(l).kind {
            LoopKind::Pipelined {
                stages,
                prefetch,
                unrolled: false,
            } => {
                self.kernel.loop_mut(l).kind = LoopKind::Pipelined {
                    stages,
                    prefetch,
                    unrolled: true,
                };
            }
            _ => self.annotate(P, l, LoopKind::Unrolled)?,
        }
        self.record(Instruction::Unroll { loop_: l });
        Ok(())
    }

    /// Preconditions of binding a loop that carries a reduction (see `bind`).
    fn check_cross_invocation_reduction(
        &self,
        l: LoopId,
        axis: ThreadAxis,
        block: &str,
        iter: &str,
    ) -> Result<()> {
        let name = self.loop_name(l);
        let fail = |why: String| {
            Err(ScheduleError::pre(
                "bind",
                format!(
                    "loop {name} carries the reduction of block {block} (iterator {iter}); \
                     bound, it would be a cross-invocation reduction: {why}"
                ),
            )
            .blocks([block])
            .loops([name.clone()]))
        };
        if axis.is_workgroup() {
            return fail(format!(
                "workgroups cannot combine terms; bind it to an invocation axis, not {} (or \
                 rfactor it first)",
                axis.name()
            ));
        }
        let Some((_, b)) = self.kernel.reduction_chain(l) else {
            return fail(
                "it must hold only the reducing block, or serial or unrolled loops over its \
                 rows that each hold only the next and then it (rfactor the rest of the \
                 reduction out first)"
                    .into(),
            );
        };
        let shuffled = self.kernel.combining(l, b) == Some(CrossInvocation::Shuffles);
        if shuffled && axis != ThreadAxis::InvocationX {
            return fail(format!(
                "its terms would be combined with subgroup shuffles, and only invocation.x is \
                 laid out along subgroups on every driver (lavapipe gives each invocation.y its \
                 own); bind it to invocation.x, not {} (or rfactor it into workgroup memory \
                 first, for a tree)",
                axis.name()
            ));
        }
        let extent = self.kernel.loop_(l).extent;
        if !extent.is_power_of_two() || extent > MAX_REDUCTION_LANES {
            return fail(format!(
                "it spans a power of two of at most {MAX_REDUCTION_LANES} invocations, not \
                 {extent}"
            ));
        }
        Ok(())
    }
}
