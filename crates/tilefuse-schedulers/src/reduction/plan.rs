//! Params checked against the fusion and device, and resolved into the
//! plan the nest is built from: invocations per row and along the
//! reduction, vector widths, unrolls, grid axes, partials per row.

use tilefuse_ir::Fusion;
use tilefuse_params::ReductionParams;

use super::topology::{Topology, topology};
use crate::launch::{check_index_type, check_workgroup, err};
use crate::step::Step;
use tilefuse_sched::DeviceInfo;
use tilefuse_sched::ir::ThreadAxis;

/// How one nest lays out its rows and reduction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rows {
    pub(super) serial: u64,
    pub(super) unroll: u64,
    /// Row invocations.
    pub(super) invocations: u64,
    pub(super) vector: u64,
    /// Invocations per row (1: each invocation reduces whole rows).
    pub(super) reduction_invocations: u64,
    /// Workgroups per row (cross-workgroup reductions).
    pub(super) groups: Option<u64>,
}

/// What the params say, checked against the fusion and the device.
pub(super) struct Plan {
    pub(super) topo: Topology,
    pub(super) rows: Rows,
    /// Reduction invocations of the main nests.
    pub(super) t: u64,
    /// All invocations of a workgroup.
    pub(super) invocations: u64,
    pub(super) unroll_r: u64,
    pub(super) vec_r: u64,
    /// Reduction invocations combine their partials with subgroup shuffles.
    pub(super) subgroup: bool,
    pub(super) red_axis: ThreadAxis,
    pub(super) row_axis: ThreadAxis,
    pub(super) grid_axis: ThreadAxis,
    /// The second workgroup axis (3D: outer rows; cross-workgroup: groups).
    pub(super) other_grid_axis: ThreadAxis,
    pub(super) schedule_3d: bool,
    pub(super) grid_cap: u64,
    /// Invocations a workgroup of an elementwise nest and lanes an
    /// invocation (`nest::elementwise_nest`).
    pub(super) elementwise: (u64, u64),
    pub(super) fixed_grid: Option<[u32; 3]>,
    pub(super) max_row_invocations: u64,
    /// The CPU device: outer reductions loop over the reduction outside
    /// their rows (see the module docs).
    pub(super) reduce_outside_rows: bool,
    /// The CPU device, nest by nest: pointwise nests over the reduction's
    /// domain also loop over the reduced axes outside their rows. A
    /// persistent kernel's reductions are computed at its anchor's rows,
    /// so the anchor keeps them inside (outside, every row would reduce
    /// every column again).
    pub(super) pointwise_outside_rows: bool,
    /// Pointwise nests over the reduction's domain take the same slices of
    /// the rows as a cross-workgroup reduction: on the CPU device nest by
    /// nest (above); on a GPU always, else each of a column's few
    /// invocations walked a slice as long as the reduction's workgroups
    /// share (lavapipe refused a softmax over axis 0 of 400000 x 32 for
    /// its loop budget).
    pub(super) spread_pointwise: bool,
    /// A GPU outer reduction folded as a tree whose invocations each take
    /// several rows: its rows share one tree (see `nest::grouped_tree`).
    pub(super) grouped_tree: bool,
}

impl Plan {
    /// Workgroups along `axis`: a fixed `launch.grid` or the device limit.
    pub(super) fn grid(&self, axis: ThreadAxis) -> u64 {
        self.fixed_grid
            .map_or(self.grid_cap, |g| u64::from(g[axis.dim()]))
    }

    /// Whether an outer reduction's rows can share one tree: a tree over
    /// all of the workgroup's invocations (so each invocation's rows are
    /// one dense run, which the combining block can be computed over),
    /// several rows per invocation, and lanes that split the reduction
    /// exactly (the partials then need no identity fill).
    fn one_tree_fits(&self) -> bool {
        let rows = &self.rows;
        !self.subgroup
            && rows.groups.is_none()
            && self.t > 1
            && self.t.is_power_of_two()
            && rows.unroll * rows.vector > 1
            && rows.invocations == 1
            && (self.topo.reduced()).is_multiple_of(self.t * self.unroll_r * self.vec_r)
    }

    /// The stage combining cross-workgroup partials: every invocation on
    /// rows, each reducing its row's partials serially.
    pub(super) fn combine_rows(&self) -> Rows {
        Rows {
            serial: 1,
            unroll: 1,
            invocations: self.invocations.min(self.max_row_invocations),
            vector: 1,
            reduction_invocations: 1,
            groups: None,
        }
    }
}

/// An elementwise nest's invocations a workgroup and lanes an invocation:
/// on a GPU 256 of four (the pointwise scheduler's defaults, coalesced
/// vec4 loads); on the CPU device 1024 of one. The CPU device runs a
/// workgroup's invocations as lanes, and its vector loops over broadcast
/// operands take a slow path: the normalizing nest of a 16 x 64 x 32 x 32
/// batch norm as a pointwise fusion took 20 ms with 256 x 4, 0.16 ms with
/// 1024 x 1, 0.39 with 256 x 1.
fn elementwise(device: &DeviceInfo) -> (u64, u64) {
    let (invocations, lanes) = if device.is_gpu() { (256, 4) } else { (1024, 1) };
    let most = device
        .limits
        .max_invocations_per_workgroup
        .min(device.limits.max_workgroup_size[0]);
    (invocations.min(u64::from(most)), lanes)
}

/// `launch.workgroup_size` when not given: 128 invocations (or the device's
/// maximum), a multiple of `reduction_invocations` when a cross-invocation
/// flag is on.
pub(super) fn derived_workgroup(p: &ReductionParams, device: &DeviceInfo) -> [u32; 3] {
    let cross = p.cross_invocation_inner_reduction || p.cross_invocation_outer_reduction;
    let t = if cross { p.reduction_invocations } else { 1 };
    let budget = 128.min(device.limits.max_invocations_per_workgroup);
    [t * (budget / t).max(1), 1, 1]
}

pub(super) fn plan(fusion: &Fusion, p: &ReductionParams, device: &DeviceInfo) -> Step<Plan> {
    let topo = topology(fusion).map_err(|e| err("scheduler", e))?;
    check_index_type(p.compile.index_type)?;
    let size = p.launch.workgroup_size_or(|| derived_workgroup(p, device));
    check_workgroup(size, &device.limits)?;
    let inner = topo.inner() == 1;
    if p.fastest_dim != inner {
        return Err(err(
            "fastest_dim",
            format!(
                "the fusion reduces {} axes {:?} of {:?}; must be {inner}",
                if inner { "the innermost" } else { "outer" },
                topo.axes,
                topo.shape
            ),
        ));
    }
    let flags = CrossFlags::of(p, inner)?;
    let n: u64 = size.iter().map(|&d| u64::from(d)).product();
    let t = if flags.invocation {
        u64::from(p.reduction_invocations)
    } else {
        1
    };
    if flags.subgroup {
        check_subgroups(inner, t, device)?;
    }
    let (vec_rows, vec_r) = vectorization(p, &topo, inner)?;
    let (y, unroll_rows) = (n / t, u64::from(p.unroll_factor_iteration));
    let per_step = y * unroll_rows * vec_rows;
    let rpw = p.rows_per_workgroup.map_or(per_step, u64::from);
    if !rpw.is_multiple_of(per_step) {
        return Err(err(
            "rows_per_workgroup",
            format!(
                "must be a multiple of the {y} row invocations × unroll_factor_iteration ({unroll_rows}) \
                 × vectorization_factor_iteration ({vec_rows}) = {per_step}, got {rpw}"
            ),
        ));
    }
    if p.schedule_3d && !topo.three_d() {
        return Err(err(
            "schedule_3d",
            format!(
                "the reduction over axes {:?} of {:?} has no outer and inner rows both",
                topo.axes, topo.shape
            ),
        ));
    }
    let groups = if flags.workgroup {
        Some(groups_per_row(p, &topo, flags.workgroup_field, t * vec_r)?)
    } else {
        None
    };
    // Subgroups are laid out along invocation.x on every driver, so a
    // subgroup reduction keeps its invocations there, outer ones too.
    let (red_axis, row_axis) = if inner || flags.subgroup {
        (ThreadAxis::InvocationX, ThreadAxis::InvocationY)
    } else {
        (ThreadAxis::InvocationY, ThreadAxis::InvocationX)
    };
    let (grid_axis, other_grid_axis) = if p.flip_grid {
        (ThreadAxis::WorkgroupY, ThreadAxis::WorkgroupX)
    } else {
        (ThreadAxis::WorkgroupX, ThreadAxis::WorkgroupY)
    };
    let pointwise_outside_rows = !inner && !device.is_gpu() && !p.persistent_kernel;
    let mut plan = Plan {
        topo,
        rows: Rows {
            serial: rpw / per_step,
            unroll: unroll_rows,
            invocations: y,
            vector: vec_rows,
            reduction_invocations: t,
            groups,
        },
        t,
        invocations: n,
        unroll_r: u64::from(p.unroll_factor_reduction),
        vec_r,
        subgroup: flags.subgroup,
        red_axis,
        row_axis,
        grid_axis,
        other_grid_axis,
        schedule_3d: p.schedule_3d,
        grid_cap: u64::from(device.limits.max_workgroups_per_dimension),
        elementwise: elementwise(device),
        fixed_grid: p.launch.grid,
        max_row_invocations: u64::from(device.limits.max_workgroup_size[row_axis.dim()]),
        reduce_outside_rows: !inner && !device.is_gpu(),
        pointwise_outside_rows,
        spread_pointwise: device.is_gpu() || pointwise_outside_rows,
        grouped_tree: false,
    };
    plan.grouped_tree = !inner && device.is_gpu() && plan.one_tree_fits();
    Ok(plan)
}

/// The cross-invocation, cross-workgroup and subgroup flags of the
/// fusion's kind of reduction (inner or outer).
struct CrossFlags {
    invocation: bool,
    workgroup: bool,
    subgroup: bool,
    /// The params field of `workgroup`, which errors about it name.
    workgroup_field: &'static str,
}

impl CrossFlags {
    /// The flags for `inner` or outer reductions; the other kind's must be
    /// off.
    fn of(p: &ReductionParams, inner: bool) -> Step<Self> {
        let inner_flags = [
            (
                "cross_invocation_inner_reduction",
                p.cross_invocation_inner_reduction,
            ),
            (
                "cross_workgroup_inner_reduction",
                p.cross_workgroup_inner_reduction,
            ),
            ("subgroup_inner_reduction", p.subgroup_inner_reduction),
        ];
        let outer_flags = [
            (
                "cross_invocation_outer_reduction",
                p.cross_invocation_outer_reduction,
            ),
            (
                "cross_workgroup_outer_reduction",
                p.cross_workgroup_outer_reduction,
            ),
            ("subgroup_outer_reduction", p.subgroup_outer_reduction),
        ];
        let (own, other) = if inner {
            (inner_flags, outer_flags)
        } else {
            (outer_flags, inner_flags)
        };
        if let Some((field, _)) = other.iter().find(|(_, on)| *on) {
            return Err(err(
                field,
                format!(
                    "the fusion is {} reduction; this flag is for the other kind",
                    kind(inner)
                ),
            ));
        }
        Ok(CrossFlags {
            invocation: own[0].1,
            workgroup: own[1].1,
            subgroup: own[2].1,
            workgroup_field: own[1].0,
        })
    }
}

/// "an inner" or "an outer", for messages.
fn kind(inner: bool) -> &'static str {
    if inner { "an inner" } else { "an outer" }
}

/// `(rows, reduction)` vector widths: only along the contiguous domain
/// (the reduction for inner reductions, the rows for outer ones), which
/// the width must divide.
fn vectorization(p: &ReductionParams, topo: &Topology, inner: bool) -> Step<(u64, u64)> {
    let (vec_rows, vec_r) = (
        u64::from(p.vectorization_factor_iteration),
        u64::from(p.vectorization_factor_reduction),
    );
    let (contiguous, strided, strided_width) = if inner {
        (
            "vectorization_factor_reduction",
            "vectorization_factor_iteration",
            vec_rows,
        )
    } else {
        (
            "vectorization_factor_iteration",
            "vectorization_factor_reduction",
            vec_r,
        )
    };
    if strided_width != 1 {
        return Err(err(
            strided,
            format!(
                "{} reduction vectorizes along its contiguous domain ({contiguous}); must be 1",
                kind(inner)
            ),
        ));
    }
    let contiguous_extent = if inner { topo.reduced() } else { topo.inner() };
    let v = vec_rows.max(vec_r);
    if !contiguous_extent.is_multiple_of(v) {
        return Err(err(
            contiguous,
            format!("{v} does not divide the contiguous extent {contiguous_extent}"),
        ));
    }
    Ok((vec_rows, vec_r))
}

/// Workgroups sharing each row in a cross-workgroup reduction, where one
/// workgroup reduces `per_invocation_step` elements per unrolled step.
fn groups_per_row(
    p: &ReductionParams,
    topo: &Topology,
    flag_field: &str,
    per_invocation_step: u64,
) -> Step<u64> {
    if p.persistent_kernel {
        return Err(err(
            flag_field,
            "workgroups cannot share a row within one stage; needs persistent_kernel = false",
        ));
    }
    if p.schedule_3d {
        return Err(err(
            "schedule_3d",
            "both workgroup axes are taken by a cross-workgroup reduction",
        ));
    }
    let per_group = per_invocation_step * u64::from(p.unroll_factor_reduction);
    let other = if p.flip_grid { 0 } else { 1 };
    let groups = match p.launch.grid {
        Some(g) => u64::from(g[other]),
        None => topo.reduced().div_ceil(per_group * 16).clamp(2, 256),
    };
    if groups < 2 || groups > topo.reduced() {
        return Err(err(
            &format!("launch.grid[{other}]"),
            format!(
                "a cross-workgroup reduction spreads each row over 2 to {} workgroups \
                 (its reduction extent) along this axis, got {groups}",
                topo.reduced()
            ),
        ));
    }
    Ok(groups)
}

/// A subgroup reduction combines the partials of the `t` reduction
/// invocations (on invocation.x) with shuffles, so they must be several, a
/// power of two, and fit in the device's smallest subgroup.
pub(super) fn check_subgroups(inner: bool, t: u64, device: &DeviceInfo) -> Step<()> {
    let (field, cross) = if inner {
        (
            "subgroup_inner_reduction",
            "cross_invocation_inner_reduction",
        )
    } else {
        (
            "subgroup_outer_reduction",
            "cross_invocation_outer_reduction",
        )
    };
    let Some((smallest, _)) = device.subgroup_sizes else {
        return Err(err(
            field,
            format!("the device ({}) has no subgroups", device.name),
        ));
    };
    if t < 2 {
        return Err(err(
            field,
            format!(
                "it combines the partials of several reduction invocations; needs {cross} and reduction_invocations > 1"
            ),
        ));
    }
    if !t.is_power_of_two() || t > u64::from(smallest) {
        return Err(err(
            "reduction_invocations",
            format!(
                "a subgroup reduction needs a power of two of at most the device's smallest \
                 subgroup ({smallest}), got {t}"
            ),
        ));
    }
    Ok(())
}
