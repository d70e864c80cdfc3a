//! The reduction / normalization scheduler (nvFuser's reduction and
//! persistent-normalization schedulers, in WebGPU terms).
//!
//! Every reduction of the fusion reduces the same contiguous axes `R` of
//! the same reference shape `S = [O.., R.., I..]`. A block's loops then
//! fall into an iteration domain (the rows, `O × I`) and a reduction
//! domain (`R`), scheduled from the outside in as
//!
//! ```text
//! rows: grid → workgroup.x (workgroup.y with flip_grid; with schedule_3d, O alone
//!       on the other workgroup axis), serial rows, unroll_factor_iteration
//!       (unrolled), iteration invocations (bound) [, vectorization_factor_iteration]
//! R:    [workgroups per row (cross-workgroup) →] serial, unroll_factor_reduction
//!       (unrolled), reduction_invocations (bound), vectorization_factor_reduction
//! ```
//!
//! where the workgroup's invocations are `reduction_invocations` (when the
//! cross-invocation flag of the reduction's kind is on, else 1) along the
//! reduction times the rest along the rows. Inner reductions bind the
//! reduction invocations to `invocation.x` and rows to `invocation.y`,
//! outer ones the other way round (unless they use subgroups, below), so
//! consecutive invocations read consecutive addresses. `rows_per_workgroup`
//! is the product of the row factors. Only the invocation count of
//! `launch.workgroup_size` is read; the scheduler lays it out.
//!
//! A reduction over several invocations is `rfactor`ed in place: partial
//! results in workgroup memory, folded there as a tree (the combining loop
//! bound to the reduction invocations' axis) when the reduction
//! invocations are a power of two, else combined serially by every
//! invocation into its own copy (an intermediate the row reuses) or by
//! invocation 0 (a global result). Across workgroups, partials go to global memory and a second
//! stage combines them. On a GPU, an outer reduction whose workgroup is
//! all reduction invocations, folding a tree, and whose invocations take
//! several rows (unrolled or vectorized) shares one tree among those rows
//! (nvFuser's grouped reductions, `nest::grouped_tree`): each invocation
//! sums every row into registers per step of the reduction, then a tree
//! folds them all, a barrier per step, instead of a nest and a tree per row.
//!
//! `persistent_kernel` computes every block at the row loop of the last
//! full-shape block: one stage, each row read while it is hot. Without it
//! each block is a stage of its own. `project_persistent_buffers = false`
//! keeps full-shape intermediates that a reduction and a later block both
//! read (softmax's `exp(x - max)`, layernorm's `x - mean`) in memory —
//! workgroup memory in a persistent kernel — instead of recomputing them
//! from the inputs.
//!
//! On the CPU device an outer reduction's serial reduction loops go outside
//! its row loops (here, columns): the columns become the innermost lanes,
//! each row of the input streams past the elements it is combined into
//! (the CPU executor's row steps), instead of every column walking down
//! its rows one strided element at a time. Its statistics epilogue (the
//! mean's `sum / n`, `rsqrt(var / n + eps)`) is not inlined there: each
//! block of it is a nest over the columns, computed once.
//!
//! `subgroup_inner_reduction` / `subgroup_outer_reduction` (with
//! `compile.use_subgroups`) keep each reduction invocation's partial in its
//! registers and combine them with subgroup shuffles (`bind` of the
//! combining loop): no workgroup memory, no barrier. The reduction
//! invocations then sit on invocation.x for outer reductions too, since
//! only that axis is laid out along subgroups on every driver, and must
//! fit in the device's smallest subgroup. `compile.use_subgroups` alone
//! changes nothing; `compile.fast_math` has no reduction variant and is
//! ignored.

mod heuristics;
mod nest;
mod plan;
mod scheduler;
mod topology;

pub use heuristics::reduction_heuristics;
pub use scheduler::Reduction;

use nest::{
    elementwise_nest, full_shape, is_reduction, other_layout, own_nest, shared_rows, statistics,
    under_row,
};
use topology::topology;

/// The reference shape's `outer × reduced × inner` of the canonical
/// `fusion`'s reductions.
pub(super) fn shape(fusion: &Fusion) -> Result<super::ReductionShape, String> {
    let t = topology(fusion)?;
    Ok(super::ReductionShape {
        outer: t.outer(),
        reduced: t.reduced(),
        inner: t.inner(),
    })
}

use tilefuse_ir::Fusion;
use tilefuse_params::ReductionParams;

use super::launch::{Fix, check_launch_limits, err};
use crate::step::Step;
use tilefuse_sched::{DeviceInfo, Schedule};
/// Builds the reduction schedule of `fusion` from `p` (see the module docs).
pub(crate) fn schedule_reduction(
    fusion: &Fusion,
    p: &ReductionParams,
    device: &DeviceInfo,
) -> Step<Schedule> {
    let plan = plan::plan(fusion, p, device)?;
    let mut s = Schedule::new(fusion);
    let kept = if p.project_persistent_buffers {
        Vec::new()
    } else {
        shared_rows(&s, &plan.topo)
    };
    // On the CPU device, where a nest of its own costs no launch.
    let statistics = match plan.reduce_outside_rows {
        true => statistics(&s, &plan.topo),
        false => Vec::new(),
    };
    s.compute_inline_all(&[&kept[..], &statistics].concat());
    let blocks = s.get_blocks();
    // The anchor: the last full-shape pointwise block, else the last
    // reduction (a full reduction's epilogue, `sum / n` of a mean, has one
    // row or none, and is computed under the reduction's one row).
    let has_loops = |s: &Schedule, b| !s.get_loops(b).is_ok_and(|l| l.is_empty());
    let anchor_at = blocks
        .iter()
        .rposition(|&b| full_shape(&s, b, &plan.topo) && s.kernel().block(b).reduce.is_none())
        .or_else(|| blocks.iter().rposition(|&b| is_reduction(&s, b)))
        .ok_or_else(|| err("scheduler", "no block of the fusion has a loop"))?;
    let anchor = blocks[anchor_at];
    let row = own_nest(&mut s, &plan, anchor, plan.rows)?;
    let mut moved = Vec::new();
    if p.persistent_kernel {
        for &b in blocks[..anchor_at].iter().rev() {
            if s.compute_at(b, row).is_ok() {
                moved.push(b);
            }
        }
    }
    for &b in &blocks {
        if moved.contains(&b) {
            under_row(&mut s, &plan, b, kept.contains(&b))?;
        } else if b != anchor && has_loops(&s, b) {
            if other_layout(&s, &plan.topo, b) {
                elementwise_nest(&mut s, &plan, b)?;
            } else {
                own_nest(&mut s, &plan, b, plan.rows)?;
            }
        }
    }
    check_limits(&s, !kept.is_empty(), device)?;
    Ok(s)
}

/// The field blamed for unrolled code over a WGSL stage's budget.
const UNROLL_ROWS: &str = "unroll_factor_iteration";
/// The field blamed for an invocation's loops over the device's budget.
const LOOPS: &str = "reduction_invocations";

/// Workgroup memory, per-invocation loop budgets and unrolled code,
/// checked on the WGSL the schedule produces.
fn check_limits(s: &Schedule, kept: bool, device: &DeviceInfo) -> Step<()> {
    let storage = if kept {
        Fix(
            "project_persistent_buffers",
            "set it to true to recompute the rows from the inputs",
        )
    } else {
        Fix("reduction_invocations", "use fewer")
    };
    let loops = Fix(
        LOOPS,
        "spread the work over more invocations (cross-invocation reduction, \
         reduction_invocations) or workgroups",
    );
    let unrolled = Fix(
        UNROLL_ROWS,
        "unroll fewer rows (or a smaller unroll_factor_reduction)",
    );
    check_launch_limits(s, device, storage, loops, unrolled)
}
