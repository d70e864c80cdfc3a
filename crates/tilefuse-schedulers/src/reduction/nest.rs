//! Building the loop nest from a plan: each block's rows and reduction
//! domain split, bound and ordered, partials factored across invocations
//! or workgroups.

use super::plan::{Plan, Rows};
use super::topology::Topology;
use crate::launch::{axes_outside, bind_capped, err, fuse};
use crate::step::Step;
use tilefuse_sched::Schedule;
use tilefuse_sched::ir::{BlockId, Index, IterKind, LoopId, Role, Scope, ThreadAxis, Var};

/// Full-shape intermediates that a reduction and another block both read.
pub(super) fn shared_rows(s: &Schedule, topo: &Topology) -> Vec<BlockId> {
    intermediates(s, topo, true, |readers| {
        readers.len() > 1 && readers.iter().any(|&r| is_reduction(s, r))
    })
}

/// An outer normalization's statistics epilogue: pointwise blocks over
/// the kept axes alone (`sum / n`, `rsqrt(var / n + eps)`) that full-shape
/// blocks read. Inlined, they are computed again for every element that
/// reads them: a CPU batch norm over 4096 x 300 divided and took a square
/// root per element. Kept, each is a nest of its own, computed once.
pub(super) fn statistics(s: &Schedule, topo: &Topology) -> Vec<BlockId> {
    intermediates(s, topo, false, |readers| {
        readers.iter().any(|&r| full_shape(s, r, topo))
    })
}

/// The pointwise blocks that compute intermediates, of the full shape or
/// not (`full`), whose readers `wanted` accepts.
fn intermediates(
    s: &Schedule,
    topo: &Topology,
    full: bool,
    wanted: impl Fn(&[BlockId]) -> bool,
) -> Vec<BlockId> {
    let k = s.kernel();
    let blocks = s.get_blocks();
    (blocks.iter().copied())
        .filter(|&b| {
            let block = k.block(b);
            let readers = || -> Vec<BlockId> {
                (blocks.iter().copied())
                    .filter(|&r| k.block(r).reads(block.buffer))
                    .collect()
            };
            k.buffer(block.buffer).role == Role::Temp
                && block.reduce.is_none()
                && full_shape(s, b, topo) == full
                && wanted(&readers())
        })
        .collect()
}

pub(super) fn full_shape(s: &Schedule, b: BlockId, topo: &Topology) -> bool {
    s.kernel().buffer(s.kernel().block(b).buffer).shape == topo.shape
        && !reads_rows_elsewhere(s, b, topo)
}

/// Whether block `b` reads a row's statistic (a buffer shaped like the
/// reference with its reduced axes 1) at a kept axis by another of its
/// iterators: it is laid out otherwise than the reference shape, however
/// alike the shapes (an NCHW batch norm's output with N = C, whose row
/// index is its iterator 1, was scheduled by its axis 0's rows, and the
/// defaults were refused).
fn reads_rows_elsewhere(s: &Schedule, b: BlockId, topo: &Topology) -> bool {
    let k = s.kernel();
    let statistic: Vec<u64> = (topo.shape.iter().enumerate())
        .map(|(i, &d)| if topo.axes.contains(&i) { 1 } else { d })
        .collect();
    let mut loads = Vec::new();
    k.block(b).value.loads(&mut loads);
    loads.into_iter().any(|(buffer, ix)| {
        k.buffer(buffer).shape == statistic
            && (ix.iter().enumerate())
                .filter(|(i, _)| statistic[*i] > 1)
                .any(|(i, x)| *x != Index::Var(Var::Iter(i as u32)))
    })
}

/// Which of the block's iterators run over the reduction domain: its
/// reduction iterators, or a full-shape pointwise block's iterators along
/// the reduced axes.
fn over_domain(s: &Schedule, topo: &Topology, b: BlockId) -> Vec<bool> {
    let block = s.kernel().block(b);
    let full = full_shape(s, b, topo) && block.reduce.is_none();
    (block.iters.iter().enumerate())
        .map(|(i, it)| it.kind == IterKind::Reduce || (full && topo.axes.contains(&i)))
        .collect()
}

/// The block's own loops (one per iterator, as a fresh or `compute_at`
/// nest has them), split into those over rows and those over the
/// reduction domain.
pub(super) fn own_loops(
    s: &Schedule,
    topo: &Topology,
    b: BlockId,
) -> Step<(Vec<LoopId>, Vec<LoopId>)> {
    split_own(s, b, &over_domain(s, topo, b))
}

/// The block's own loops split by `in_r` (one flag per iterator: over the
/// reduction domain).
fn split_own(s: &Schedule, b: BlockId, in_r: &[bool]) -> Step<(Vec<LoopId>, Vec<LoopId>)> {
    let own = own_loop_ids(s, b)?;
    let pick = |r: bool| {
        (0..own.len())
            .filter(|&i| in_r[i] == r)
            .map(|i| own[i])
            .collect()
    };
    Ok((pick(false), pick(true)))
}

/// The block's own loops, one per iterator, innermost last (those of a
/// `compute_at` nest under the loops it was placed at).
fn own_loop_ids(s: &Schedule, b: BlockId) -> Step<Vec<LoopId>> {
    let loops = s.get_loops(b)?;
    Ok(loops[loops.len() - s.kernel().block(b).iters.len()..].to_vec())
}

/// Splits `l` by the given factors after an inferred outermost one, keeping
/// only factors above 1 (and those marked `keep`); returns the outermost
/// loop and, per factor, its loop if it was kept.
pub(super) fn split_kept(
    s: &mut Schedule,
    l: LoopId,
    factors: &[(u64, bool)],
) -> Step<(LoopId, Vec<Option<LoopId>>)> {
    let mut wanted = vec![None];
    wanted.extend(
        factors
            .iter()
            .filter(|(f, keep)| *f > 1 || *keep)
            .map(|(f, _)| Some(*f)),
    );
    let parts = s.split(l, &wanted, None)?;
    let mut rest = parts[1..].iter();
    let loops = factors
        .iter()
        .map(|(f, keep)| (*f > 1 || *keep).then(|| *rest.next().expect("one per kept factor")))
        .collect();
    Ok((parts[0], loops))
}

/// Schedules a block in its own root nest (the anchor, or a block not
/// computed at the anchor's rows); returns its innermost row loop.
pub(super) fn own_nest(s: &mut Schedule, plan: &Plan, b: BlockId, rows: Rows) -> Step<LoopId> {
    let (mut row_loops, mut r) = own_loops(s, &plan.topo, b)?;
    let chain: Vec<LoopId> = row_loops.iter().chain(&r).copied().collect();
    if chain.len() > 1 {
        s.reorder(&chain)?;
    }
    if row_loops.is_empty() {
        if rows.invocations > 1 {
            // The row loop would be part of the reduction: its invocations
            // would all reduce one value without combining across them.
            return Err(err(
                "launch.workgroup_size",
                format!(
                    "the fusion reduces to one value, so its {} row invocations have no rows \
                     to take; reduce across them (cross_invocation_inner_reduction with \
                     reduction_invocations equal to the workgroup size) or use one invocation",
                    rows.invocations
                ),
            ));
        }
        // A full reduction: one row, split off the reduction domain.
        let parts = s.split(r[0], &[Some(1), None], None)?;
        row_loops.push(parts[0]);
        r[0] = parts[1];
    }
    if plan.schedule_3d && row_loops.len() > 1 {
        let outer_dims = plan.topo.axes[0].min(row_loops.len() - 1);
        let outer = fuse(s, &row_loops[..outer_dims])?.expect("outer rows");
        bind_capped(
            s,
            outer,
            plan.other_grid_axis,
            Some(plan.grid(plan.other_grid_axis)),
        )?;
        row_loops.drain(..outer_dims);
    }
    // Rows fused from several axes index the partials by quotients and
    // remainders, over which a region is not affine.
    let one_row_axis = row_loops.len() == 1;
    let row = fuse(s, &row_loops)?.expect("rows");
    let (grid, parts) = split_kept(
        s,
        row,
        &[
            (rows.serial, false),
            (rows.unroll, false),
            (rows.invocations, true),
            (rows.vector, false),
        ],
    )?;
    let [serial, unroll, invocations, vector] = parts[..] else {
        unreachable!("four factors")
    };
    let invocations = invocations.expect("kept");
    let mut r = fuse(s, &r)?;
    let mut next_stage = None;
    if let (Some(r_loop), Some(groups)) = (r, rows.groups)
        && (is_reduction(s, b) || plan.spread_pointwise)
    {
        let row_loops = [Some(grid), serial, unroll, Some(invocations), vector];
        let row_loops: Vec<LoopId> = row_loops.into_iter().flatten().collect();
        let (rest, combine) = spread_rows(s, plan, b, r_loop, groups, &row_loops)?;
        (r, next_stage) = (Some(rest), combine);
    }
    bind_capped(s, grid, plan.grid_axis, Some(plan.grid(plan.grid_axis)))?;
    if let (Some(r), true, true) = (r, plan.grouped_tree && one_row_axis, is_reduction(s, b)) {
        grouped_tree(s, plan, b, r, invocations, [unroll, vector])?;
        return Ok(invocations);
    }
    if let Some(u) = unroll {
        s.unroll(u)?;
    }
    s.bind(invocations, plan.row_axis)?;
    reduction_domain(s, plan, b, r, vector, rows.reduction_invocations, false)?;
    domain_outside(s, plan, b, invocations, rows)?;
    if let Some(combine) = next_stage {
        own_nest(s, plan, combine, plan.combine_rows())?;
    }
    Ok(invocations)
}

/// Splits the reduction domain `r` of block `b` into `groups` slices, one a
/// workgroup, outside the `row_loops` (in order); returns the loop over a
/// slice and, for a reduction, the stage that combines its partials. A
/// reduction's partials per workgroup are factored into a global buffer
/// that the next stage combines. A pointwise nest (on the CPU device) takes
/// the same slices of the rows as the reductions: in one workgroup, a batch
/// norm's normalizing nest over 4096 x 300 ran on one thread.
fn spread_rows(
    s: &mut Schedule,
    plan: &Plan,
    b: BlockId,
    r: LoopId,
    groups: u64,
    row_loops: &[LoopId],
) -> Step<(LoopId, Option<BlockId>)> {
    let parts = s.split(r, &[Some(groups), None], None)?;
    let mut order = vec![parts[0]];
    order.extend(row_loops);
    s.reorder(&order)?;
    let mut combine = None;
    if is_reduction(s, b) {
        let name = s.block_name(b);
        s.rfactor(parts[0])?;
        if let Ok(fill) = s.get_block(&format!("{name}_rf_init")) {
            flat_nest(s, plan, fill)?;
        }
        combine = Some(s.get_block(&name)?);
    }
    let other = plan.other_grid_axis;
    bind_capped(s, parts[0], other, Some(plan.grid(other)))?;
    Ok((parts[1], combine))
}

/// On the CPU device, the loops of block `b` over the reduction's domain go
/// outside its row `invocations` where the plan asks for it (see
/// `Plan::reduce_outside_rows`, `Plan::pointwise_outside_rows`). A
/// pointwise block's domain split across invocations keeps its order: its
/// lanes are bound inside the rows.
fn domain_outside(
    s: &mut Schedule,
    plan: &Plan,
    b: BlockId,
    invocations: LoopId,
    rows: Rows,
) -> Step<()> {
    let pointwise = plan.pointwise_outside_rows && rows.reduction_invocations == 1;
    if is_reduction(s, b) && plan.reduce_outside_rows || pointwise {
        let outside = over_domain(s, &plan.topo, b);
        axes_outside(s, b, invocations, &outside)?;
    }
    Ok(())
}

/// A GPU outer reduction whose reduction invocations (all of the
/// workgroup's) fold a tree and take several rows each (`rows`, unrolled
/// or vectorized; nvFuser's grouped reductions): every step of the reduction
/// loop adds one element of each row into each lane's partials, and one
/// tree folds all the rows at once, a barrier per step for all of them,
/// instead of a reduction nest and a tree per row. `rfactor` of the lanes
/// outermost leaves the combining block a root nest of its own, which
/// `reverse_compute_at` brings back under the row invocations.
fn grouped_tree(
    s: &mut Schedule,
    plan: &Plan,
    b: BlockId,
    r: LoopId,
    invocations: LoopId,
    rows: [Option<LoopId>; 2],
) -> Step<()> {
    let rows: Vec<LoopId> = rows.into_iter().flatten().collect();
    let mut order = vec![invocations, r];
    order.extend(&rows);
    s.reorder(&order)?;
    let (serial, parts) = split_kept(
        s,
        r,
        &[(plan.unroll_r, false), (plan.t, true), (plan.vec_r, false)],
    )?;
    let [unroll_r, Some(lanes), vec_r] = parts[..] else {
        unreachable!("the lanes are kept")
    };
    let mut order = vec![lanes, serial];
    order.extend(unroll_r.iter().chain(&vec_r));
    s.reorder(&order)?;
    let name = s.block_name(b);
    s.rfactor(lanes)?;
    let partials = s.get_block(&format!("{name}_rf"))?;
    s.set_scope(partials, Scope::Workgroup)?;
    s.bind(invocations, plan.row_axis)?;
    s.bind(lanes, plan.red_axis)?;
    for l in unroll_r.into_iter().chain(vec_r).chain(rows) {
        s.unroll(l)?;
    }
    // Each lane sums its rows in registers, then stores them for the tree
    // (kept in workgroup memory, the sums ran 2-3x slower on llvmpipe).
    let sums = s.cache_write(partials, Scope::Private)?;
    s.reverse_compute_at(sums, lanes)?;
    for l in loops_under(s, sums, lanes)? {
        s.unroll(l)?;
    }
    one_tree_under(s, plan, s.get_block(&name)?, invocations)
}

/// Brings the block `combine` that folds the lanes' partials under the row
/// invocations, its loop over the lanes outermost there, bound (a tree),
/// and its rows unrolled inside it.
fn one_tree_under(
    s: &mut Schedule,
    plan: &Plan,
    combine: BlockId,
    invocations: LoopId,
) -> Step<()> {
    s.reverse_compute_at(combine, invocations)?;
    let (over_lanes, row_loops): (Vec<LoopId>, Vec<LoopId>) =
        (loops_under(s, combine, invocations)?.into_iter())
            .partition(|&l| s.kernel().carried_iter(l, combine).is_some());
    let [over_lanes] = over_lanes[..] else {
        unreachable!("one loop over the lanes")
    };
    if !row_loops.is_empty() {
        s.reorder(&[&[over_lanes], &row_loops[..]].concat())?;
    }
    for &l in &row_loops {
        s.unroll(l)?;
    }
    s.bind(over_lanes, plan.red_axis)?;
    Ok(())
}

/// The loops of block `b` inside loop `l`, outermost first.
fn loops_under(s: &Schedule, b: BlockId, l: LoopId) -> Step<Vec<LoopId>> {
    let loops = s.get_loops(b)?;
    let from = loops.iter().position(|&x| x == l).expect("b is under l") + 1;
    Ok(loops[from..].to_vec())
}

/// Schedules a block that `compute_at` placed under the anchor's rows.
pub(super) fn under_row(s: &mut Schedule, plan: &Plan, b: BlockId, kept: bool) -> Step<()> {
    let (rows, r) = split_own(s, b, &domain_under_row(s, plan, b)?)?;
    let chain: Vec<LoopId> = rows.iter().chain(&r).copied().collect();
    if chain.len() > 1 {
        s.reorder(&chain)?;
    }
    // Only the innermost row loop can be vectorized: a wider loop outside
    // a loop of one iteration is not innermost.
    let vector = (rows.last().copied()).filter(|&l| s.kernel().loop_(l).extent > 1);
    let r = fuse(s, &r)?;
    reduction_domain(s, plan, b, r, vector, plan.rows.reduction_invocations, true)?;
    let temp = s.kernel().buffer(s.kernel().block(b).buffer).role == Role::Temp;
    if kept {
        let scope = if plan.t > 1 {
            Scope::Workgroup
        } else {
            Scope::Private
        };
        s.set_scope(b, scope)?;
    } else if temp && plan.t == 1 && is_reduction(s, b) {
        s.set_scope(b, Scope::Private)?;
    }
    Ok(())
}

/// [`over_domain`] of a block computed at the row; besides, for an output
/// laid out otherwise than the reference shape (the tensor that the
/// canonical form permutes before a reduction over scattered axes), the
/// iterators the row left whole: the row fixed its kept axes, one index
/// each, so those loops run over the row's domain. Split across the
/// reduction invocations as the domain is, instead of each of them
/// writing the whole row.
fn domain_under_row(s: &Schedule, plan: &Plan, b: BlockId) -> Step<Vec<bool>> {
    let mut in_r = over_domain(s, &plan.topo, b);
    let k = s.kernel();
    let block = k.block(b);
    let output = matches!(k.buffer(block.buffer).role, Role::Output(_));
    if output && other_layout(s, &plan.topo, b) && plan.rows.reduction_invocations > 1 {
        let own = own_loop_ids(s, b)?;
        for ((d, it), &l) in in_r.iter_mut().zip(&block.iters).zip(&own) {
            *d = it.extent > 1 && k.loop_(l).extent == it.extent;
        }
    }
    Ok(in_r)
}

pub(super) fn is_reduction(s: &Schedule, b: BlockId) -> bool {
    s.kernel().block(b).reduce.is_some()
}

/// Splits and binds the reduction domain `r` of block `b` (see the module
/// docs); `vector` is the row-vector loop of outer reductions.
pub(super) fn reduction_domain(
    s: &mut Schedule,
    plan: &Plan,
    b: BlockId,
    r: Option<LoopId>,
    vector: Option<LoopId>,
    t: u64,
    under_row: bool,
) -> Step<()> {
    let reduce = is_reduction(s, b);
    let Some(r) = r else {
        if let (Some(v), false) = (vector, reduce) {
            s.vectorize(v)?;
        }
        return Ok(());
    };
    let (serial, parts) = split_kept(
        s,
        r,
        &[(plan.unroll_r, false), (t, false), (plan.vec_r, false)],
    )?;
    let [unroll, lanes, vec_r] = parts[..] else {
        unreachable!("three factors")
    };
    if let Some(v) = vector {
        if reduce {
            s.unroll(v)?;
        } else {
            let mut order = vec![serial];
            order.extend(unroll.iter().chain(&lanes));
            order.push(v);
            s.reorder(&order)?;
            s.vectorize(v)?;
        }
    }
    if let Some(u) = unroll {
        s.unroll(u)?;
    }
    if let Some(lanes) = lanes {
        if reduce {
            let name = s.block_name(b);
            s.rfactor(lanes)?;
            // Partials: each invocation's own with subgroups, else shared.
            let partials = if plan.subgroup {
                Scope::Private
            } else {
                Scope::Workgroup
            };
            s.set_scope(b, partials)?;
            if let Ok(fill) = s.get_block(&format!("{name}_rf_init")) {
                let fill_loop = *s.get_loops(fill)?.last().expect("its loop");
                s.bind(fill_loop, plan.red_axis)?;
            }
            let combine = s.get_block(&name)?;
            let temp = s.kernel().buffer(s.kernel().block(combine).buffer).role == Role::Temp;
            if under_row && temp {
                // Every invocation combines the partials into its own copy.
                s.set_scope(combine, Scope::Private)?;
            }
            let over_lanes = *s.get_loops(combine)?.last().expect("its loop");
            let tree = t.is_power_of_two();
            if plan.subgroup || tree {
                // Private partials are shuffled together, workgroup ones
                // folded as a tree.
                s.bind(over_lanes, plan.red_axis)?;
            } else if !(under_row && temp) {
                // One invocation writes the global result.
                let one = s.split(over_lanes, &[Some(1), None], None)?[0];
                s.bind(one, plan.red_axis)?;
            }
        }
        s.bind(lanes, plan.red_axis)?;
    }
    if let Some(v) = vec_r {
        if reduce {
            s.unroll(v)?;
        } else {
            s.vectorize(v)?;
        }
    }
    Ok(())
}

/// Whether `b` is a pointwise block as large as the reference shape but
/// laid out otherwise (an output a reduction over scattered axes reads
/// through the canonical form's permute, or a batch norm's normalized
/// NCHW tensor): the reduction's rows do not index it.
pub(super) fn other_layout(s: &Schedule, topo: &Topology, b: BlockId) -> bool {
    let k = s.kernel();
    let block = k.block(b);
    let elements: u64 = k.buffer(block.buffer).shape.iter().product();
    block.reduce.is_none()
        && !full_shape(s, b, topo)
        && elements == topo.shape.iter().product::<u64>()
}

/// A nest of its own for a block laid out otherwise than the reference
/// shape: flat over its elements, as the pointwise scheduler lays them out
/// (see `plan::elementwise`; lanes where its last axis takes them), not by
/// the reduction's rows, which made each element a row (a batch norm over
/// NCHW ran a million one-invocation workgroups: on the CPU device 100x
/// numpy's time).
pub(super) fn elementwise_nest(s: &mut Schedule, plan: &Plan, b: BlockId) -> Step<()> {
    let loops = s.get_loops(b)?;
    let flat = fuse(s, &loops)?.expect("a non-empty nest");
    let (invocations, lanes) = plan.elementwise;
    let last = s.kernel().block(b).iters.last().map_or(1, |it| it.extent);
    let vector = if last.is_multiple_of(lanes) { lanes } else { 1 };
    let (grid, parts) = split_kept(s, flat, &[(invocations, true), (vector, false)])?;
    bind_capped(s, grid, ThreadAxis::WorkgroupX, Some(plan.grid_cap))?;
    s.bind(parts[0].expect("kept"), ThreadAxis::InvocationX)?;
    if let Some(v) = parts[1] {
        s.vectorize(v)?;
    }
    Ok(())
}

/// A fill nest of a cross-workgroup reduction: flat over workgroups.
pub(super) fn flat_nest(s: &mut Schedule, plan: &Plan, b: BlockId) -> Step<()> {
    let loops = s.get_loops(b)?;
    let flat = fuse(s, &loops)?.expect("a non-empty nest");
    let parts = s.split(flat, &[None, Some(plan.invocations)], None)?;
    bind_capped(s, parts[0], plan.grid_axis, Some(plan.grid_cap))?;
    s.bind(parts[1], plan.row_axis)?;
    Ok(())
}
