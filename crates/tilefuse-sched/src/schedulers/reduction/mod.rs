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
//! stage combines them.
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
//! its rows one strided element at a time.
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

mod scheduler;

pub use scheduler::Reduction;

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::{ParamsError, ReductionParams};

use super::launch::{
    Fix, bind_capped, check_index_type, check_launch_limits, check_workgroup, err, fuse,
};
use crate::ir::{BlockId, IterKind, LoopId, Role, Scope, ThreadAxis};
use crate::{DeviceInfo, Schedule, ScheduleError};

/// The reference shape and reduced axes every reduction shares.
#[derive(Clone, Debug)]
pub(super) struct Topology {
    shape: Vec<u64>,
    axes: Vec<usize>,
}

impl Topology {
    fn product(&self, dims: std::ops::Range<usize>) -> u64 {
        self.shape[dims].iter().product()
    }

    fn outer(&self) -> u64 {
        self.product(0..self.axes[0])
    }

    fn reduced(&self) -> u64 {
        self.product(self.axes[0]..self.axes[self.axes.len() - 1] + 1)
    }

    fn inner(&self) -> u64 {
        self.product(self.axes[self.axes.len() - 1] + 1..self.shape.len())
    }

    /// Rows both outside and inside the reduced axes (`schedule_3d`).
    fn three_d(&self) -> bool {
        self.outer() > 1 && self.inner() > 1
    }
}

/// The shared reduction domain of `fusion`, or why there is none.
pub(super) fn topology(fusion: &Fusion) -> Result<Topology, String> {
    let mut found: Option<Topology> = None;
    for node in fusion.nodes() {
        let Op::Reduce { axes, .. } = &node.op else {
            continue;
        };
        let shape: Vec<u64> = fusion
            .ty(node.args[0])
            .expect("a verified fusion")
            .shape
            .iter()
            .map(|&d| d as u64)
            .collect();
        match &found {
            None => {
                found = Some(Topology {
                    shape,
                    axes: axes.clone(),
                })
            }
            Some(t) if t.shape == shape && t.axes == *axes => {}
            Some(t) => {
                return Err(format!(
                    "its reductions differ ({:?} over axes {:?}, {shape:?} over axes {axes:?}); \
                     segment the fusion",
                    t.shape, t.axes
                ));
            }
        }
    }
    let t = found.ok_or("the fusion has no reduction")?;
    if t.axes.is_empty() {
        return Err("a reduction reduces no axis".into());
    }
    if t.axes.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(format!(
            "it reduces non-adjacent axes {:?}; permute them together first",
            t.axes
        ));
    }
    Ok(t)
}

/// Default params. The CPU device: one row per workgroup (rows run on
/// threads), each reduced serially as SIMD lanes, intermediates kept per
/// row. GPUs: inner reductions spread each row over up to 256 invocations
/// whose partials fold as a tree in workgroup memory, in one persistent
/// kernel, with vec4 loads. A CPU Vulkan (lavapipe) pays for every barrier:
/// it gets one subgroup a row, partials shuffled together and rows
/// recomputed (no workgroup memory, no barrier) where it has subgroups and
/// rows are not too long; otherwise fewer, larger steps per invocation,
/// within its per-invocation loop budget, and one dispatch per reduction.
/// Outer reductions give each invocation columns (coalesced) and several
/// invocations per column when columns alone would leave the GPU idle.
pub fn reduction_heuristics(fusion: &Fusion, device: &DeviceInfo) -> ReductionParams {
    let topo = topology(fusion).expect("can_schedule checked the fusion");
    let mut p = ReductionParams {
        fastest_dim: topo.inner() == 1,
        persistent_kernel: true,
        project_persistent_buffers: true,
        ..ReductionParams::default()
    };
    let r = topo.reduced();
    let max = u64::from(device.limits.max_invocations_per_workgroup);
    if !device.is_gpu() {
        p.launch.workgroup_size = Some([1, 1, 1]);
        p.reduction_invocations = 1;
        p.project_persistent_buffers = false;
        if !p.fastest_dim {
            // Column blocks a thread each, 1024 at most (4096² column sums:
            // 2.4 ms with 1024 a block on 2 threads, 3.3 with 512, 2.8
            // with 4096; numpy 2.1), each reduced row by row in its own
            // nest (see the module docs).
            let threads = device.cores.max(1) as u64;
            let w = (topo.inner() / threads).clamp(1, 1024);
            let w = 1 << (63 - w.leading_zeros());
            p.launch.workgroup_size = Some([w as u32, 1, 1]);
            p.rows_per_workgroup = Some(w as u32);
            p.persistent_kernel = false;
        }
        return p;
    }
    let cpu_vulkan = device.adapter_type == "cpu";
    let pow2_at_most = |n: u64| 1u64 << (63 - n.max(1).leading_zeros());
    if p.fastest_dim {
        let v = [4u32, 2, 1]
            .into_iter()
            .find(|&v| r.is_multiple_of(u64::from(v)))
            .unwrap_or(1);
        p.vectorization_factor_reduction = v;
        let v = u64::from(v);
        let subgroup = device
            .subgroup_sizes
            .map_or(0, |(min, _)| u64::from(min).min(max));
        // Discrete GPUs: many invocations a row, partials folded as a tree
        // in workgroup memory, four unrolled steps each (softmax 4096x4096
        // on an H100 in 0.056 ms with 256, 0.103 with one subgroup of 32 and
        // shuffles; layernorm 0.055, 0.098; the same run). lavapipe: one
        // subgroup a row, shuffled (softmax 42 ms, 80 with 128 invocations
        // a row); without subgroups, a dispatch per reduction (a softmax ran
        // 2.3x faster so than as one persistent kernel, BENCHMARKS.md).
        let shuffles =
            cpu_vulkan && subgroup >= 2 && r >= subgroup * v && r / (subgroup * v) <= 1024;
        let (t, unroll_from) = match (cpu_vulkan, shuffles) {
            (false, _) => (pow2_at_most(r / (4 * v)).clamp(1, max.min(256)), Some(4)),
            (true, true) => (subgroup, Some(8)),
            (true, false) => (pow2_at_most(r / 32).clamp(1, max.min(256)), None),
        };
        p.cross_invocation_inner_reduction = t > 1;
        p.subgroup_inner_reduction = shuffles;
        p.compile.use_subgroups = shuffles;
        p.reduction_invocations = t as u32;
        p.launch.workgroup_size = Some([t as u32, 1, 1]);
        if unroll_from.is_some_and(|steps| r / (t * v) >= steps) {
            p.unroll_factor_reduction = 4;
        }
        p.persistent_kernel = !cpu_vulkan || shuffles;
        // A discrete GPU keeps the exp / centred row on chip when it fits
        // with room to spare (split tails pad it); lavapipe recomputes it.
        let fits = 4 * r <= u64::from(device.limits.max_workgroup_storage_bytes) / 4;
        p.project_persistent_buffers = cpu_vulkan || t == 1 || !fits;
    } else {
        let columns = topo.inner();
        let (x, y) = if cpu_vulkan {
            let x = pow2_at_most(columns).clamp(1, max.min(64));
            let y = if columns < 4 * x && r >= 64 {
                (max / x).min(8)
            } else {
                1
            };
            (x, y)
        } else {
            // A discrete GPU wants a hundred thousand invocations in
            // hundreds of workgroups: column sums of 4096x4096 on an H100
            // took 6.3 ms with one invocation per column (64 columns a
            // workgroup), 0.035 ms with 32 per column, 16 columns a
            // workgroup and steps unrolled by 4 (softmax: 0.29 ms).
            let x = pow2_at_most(columns / 256).clamp(1, max.min(64));
            let y = pow2_at_most((1 << 17) / columns)
                .min(r / 64)
                .clamp(1, (max / x).min(32));
            if r / y >= 16 {
                p.unroll_factor_reduction = 4;
            }
            (x, y)
        };
        p.cross_invocation_outer_reduction = y > 1;
        p.reduction_invocations = y as u32;
        p.launch.workgroup_size = Some([(x * y) as u32, 1, 1]);
        p.rows_per_workgroup = Some(x as u32);
        p.schedule_3d = topo.three_d();
    }
    p
}

/// How one nest lays out its rows and reduction.
#[derive(Clone, Copy, Debug)]
struct Rows {
    serial: u64,
    unroll: u64,
    /// Row invocations.
    invocations: u64,
    vector: u64,
    /// Invocations per row (1: each invocation reduces whole rows).
    reduction_invocations: u64,
    /// Workgroups per row (cross-workgroup reductions).
    groups: Option<u64>,
}

/// What the params say, checked against the fusion and the device.
struct Plan {
    topo: Topology,
    rows: Rows,
    /// Reduction invocations of the main nests.
    t: u64,
    /// All invocations of a workgroup.
    invocations: u64,
    unroll_r: u64,
    vec_r: u64,
    /// Reduction invocations combine their partials with subgroup shuffles.
    subgroup: bool,
    red_axis: ThreadAxis,
    row_axis: ThreadAxis,
    grid_axis: ThreadAxis,
    /// The second workgroup axis (3D: outer rows; cross-workgroup: groups).
    other_grid_axis: ThreadAxis,
    schedule_3d: bool,
    grid_cap: u64,
    fixed_grid: Option<[u32; 3]>,
    max_row_invocations: u64,
    /// The CPU device: outer reductions loop over the reduction outside
    /// their rows (see the module docs).
    reduce_outside_rows: bool,
}

impl Plan {
    /// Workgroups along `axis`: a fixed `launch.grid` or the device limit.
    fn grid(&self, axis: ThreadAxis) -> u64 {
        self.fixed_grid
            .map_or(self.grid_cap, |g| u64::from(g[axis.dim()]))
    }

    /// The stage combining cross-workgroup partials: every invocation on
    /// rows, each reducing its row's partials serially.
    fn combine_rows(&self) -> Rows {
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

/// `launch.workgroup_size` when not given: 128 invocations (or the device's
/// maximum), a multiple of `reduction_invocations` when a cross-invocation
/// flag is on.
fn derived_workgroup(p: &ReductionParams, device: &DeviceInfo) -> [u32; 3] {
    let cross = p.cross_invocation_inner_reduction || p.cross_invocation_outer_reduction;
    let t = if cross { p.reduction_invocations } else { 1 };
    let budget = 128.min(device.limits.max_invocations_per_workgroup);
    [t * (budget / t).max(1), 1, 1]
}

fn plan(fusion: &Fusion, p: &ReductionParams, device: &DeviceInfo) -> Result<Plan, ParamsError> {
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
    let (cross_invocation, cross_workgroup, subgroup, other_cross) = if inner {
        (
            p.cross_invocation_inner_reduction,
            p.cross_workgroup_inner_reduction,
            p.subgroup_inner_reduction,
            [
                (
                    "cross_invocation_outer_reduction",
                    p.cross_invocation_outer_reduction,
                ),
                (
                    "cross_workgroup_outer_reduction",
                    p.cross_workgroup_outer_reduction,
                ),
                ("subgroup_outer_reduction", p.subgroup_outer_reduction),
            ],
        )
    } else {
        (
            p.cross_invocation_outer_reduction,
            p.cross_workgroup_outer_reduction,
            p.subgroup_outer_reduction,
            [
                (
                    "cross_invocation_inner_reduction",
                    p.cross_invocation_inner_reduction,
                ),
                (
                    "cross_workgroup_inner_reduction",
                    p.cross_workgroup_inner_reduction,
                ),
                ("subgroup_inner_reduction", p.subgroup_inner_reduction),
            ],
        )
    };
    let kind = if inner { "an inner" } else { "an outer" };
    if let Some((field, _)) = other_cross.iter().find(|(_, on)| *on) {
        return Err(err(
            field,
            format!("the fusion is {kind} reduction; this flag is for the other kind"),
        ));
    }
    let n: u64 = size.iter().map(|&d| u64::from(d)).product();
    let t = if cross_invocation {
        u64::from(p.reduction_invocations)
    } else {
        1
    };
    let y = n / t;
    if subgroup {
        check_subgroups(inner, t, device)?;
    }
    let (vec_rows, vec_r) = (
        u64::from(p.vectorization_factor_iteration),
        u64::from(p.vectorization_factor_reduction),
    );
    let (contiguous, strided) = if inner {
        (
            "vectorization_factor_reduction",
            "vectorization_factor_iteration",
        )
    } else {
        (
            "vectorization_factor_iteration",
            "vectorization_factor_reduction",
        )
    };
    if (if inner { vec_rows } else { vec_r }) != 1 {
        return Err(err(
            strided,
            format!(
                "{kind} reduction vectorizes along its contiguous domain ({contiguous}); must be 1"
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
    let unroll_rows = u64::from(p.unroll_factor_iteration);
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
    let groups_per_row = if cross_workgroup {
        if p.persistent_kernel {
            return Err(err(
                if inner {
                    "cross_workgroup_inner_reduction"
                } else {
                    "cross_workgroup_outer_reduction"
                },
                "workgroups cannot share a row within one stage; needs persistent_kernel = false",
            ));
        }
        if p.schedule_3d {
            return Err(err(
                "schedule_3d",
                "both workgroup axes are taken by a cross-workgroup reduction",
            ));
        }
        let per_group = t * u64::from(p.unroll_factor_reduction) * vec_r;
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
        Some(groups)
    } else {
        None
    };
    // Subgroups are laid out along invocation.x on every driver, so a
    // subgroup reduction keeps its invocations there, outer ones too.
    let (red_axis, row_axis) = if inner || subgroup {
        (ThreadAxis::InvocationX, ThreadAxis::InvocationY)
    } else {
        (ThreadAxis::InvocationY, ThreadAxis::InvocationX)
    };
    let (grid_axis, other_grid_axis) = if p.flip_grid {
        (ThreadAxis::WorkgroupY, ThreadAxis::WorkgroupX)
    } else {
        (ThreadAxis::WorkgroupX, ThreadAxis::WorkgroupY)
    };
    Ok(Plan {
        topo,
        rows: Rows {
            serial: rpw / per_step,
            unroll: unroll_rows,
            invocations: y,
            vector: vec_rows,
            reduction_invocations: t,
            groups: groups_per_row,
        },
        t,
        invocations: n,
        unroll_r: u64::from(p.unroll_factor_reduction),
        vec_r,
        subgroup,
        red_axis,
        row_axis,
        grid_axis,
        other_grid_axis,
        schedule_3d: p.schedule_3d,
        grid_cap: u64::from(device.limits.max_workgroups_per_dimension),
        fixed_grid: p.launch.grid,
        max_row_invocations: u64::from(device.limits.max_workgroup_size[row_axis.dim()]),
        reduce_outside_rows: !inner && !device.is_gpu(),
    })
}

/// A subgroup reduction combines the partials of the `t` reduction
/// invocations (on invocation.x) with shuffles, so they must be several, a
/// power of two, and fit in the device's smallest subgroup.
fn check_subgroups(inner: bool, t: u64, device: &DeviceInfo) -> Result<(), ParamsError> {
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

/// Builds the reduction schedule of `fusion` from `p` (see the module docs).
pub fn schedule_reduction(
    fusion: &Fusion,
    p: &ReductionParams,
    device: &DeviceInfo,
) -> Result<Schedule, ParamsError> {
    let plan = plan(fusion, p, device)?;
    let mut s = Schedule::new(fusion);
    let kept = if p.project_persistent_buffers {
        Vec::new()
    } else {
        shared_rows(&s, &plan.topo)
    };
    s.compute_inline_all(&kept);
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
            own_nest(&mut s, &plan, b, plan.rows)?;
        }
    }
    check_limits(&s, !kept.is_empty(), device)?;
    Ok(s)
}

/// Full-shape intermediates that a reduction and another block both read.
fn shared_rows(s: &Schedule, topo: &Topology) -> Vec<BlockId> {
    let k = s.kernel();
    let blocks = s.get_blocks();
    blocks
        .iter()
        .copied()
        .filter(|&b| {
            let buf = k.block(b).buffer;
            let readers: Vec<BlockId> = blocks
                .iter()
                .copied()
                .filter(|&r| k.block(r).reads(buf))
                .collect();
            k.buffer(buf).role == Role::Temp
                && k.block(b).reduce.is_none()
                && full_shape(s, b, topo)
                && readers.len() > 1
                && readers.iter().any(|&r| k.block(r).reduce.is_some())
        })
        .collect()
}

fn full_shape(s: &Schedule, b: BlockId, topo: &Topology) -> bool {
    s.kernel().buffer(s.kernel().block(b).buffer).shape == topo.shape
}

/// The block's own loops (one per iterator, as a fresh or `compute_at`
/// nest has them), split into those over rows and those over the
/// reduction domain.
fn own_loops(s: &Schedule, topo: &Topology, b: BlockId) -> (Vec<LoopId>, Vec<LoopId>) {
    let block = s.kernel().block(b);
    let loops = s.get_loops(b).expect("a live block");
    let own = &loops[loops.len() - block.iters.len()..];
    let full = full_shape(s, b, topo) && block.reduce.is_none();
    let in_r =
        |i: usize| block.iters[i].kind == IterKind::Reduce || (full && topo.axes.contains(&i));
    let pick = |r: bool| {
        (0..own.len())
            .filter(|&i| in_r(i) == r)
            .map(|i| own[i])
            .collect()
    };
    (pick(false), pick(true))
}

/// Splits `l` by the given factors after an inferred outermost one, keeping
/// only factors above 1 (and those marked `keep`); returns the outermost
/// loop and, per factor, its loop if it was kept.
fn split_kept(
    s: &mut Schedule,
    l: LoopId,
    factors: &[(u64, bool)],
) -> (LoopId, Vec<Option<LoopId>>) {
    let mut wanted = vec![None];
    wanted.extend(
        factors
            .iter()
            .filter(|(f, keep)| *f > 1 || *keep)
            .map(|(f, _)| Some(*f)),
    );
    let parts = s.split(l, &wanted, None).expect("valid factors");
    let mut rest = parts[1..].iter();
    let loops = factors
        .iter()
        .map(|(f, keep)| (*f > 1 || *keep).then(|| *rest.next().expect("one per kept factor")))
        .collect();
    (parts[0], loops)
}

/// Schedules a block in its own root nest (the anchor, or a block not
/// computed at the anchor's rows); returns its innermost row loop.
fn own_nest(s: &mut Schedule, plan: &Plan, b: BlockId, rows: Rows) -> Result<LoopId, ParamsError> {
    let (mut row_loops, mut r) = own_loops(s, &plan.topo, b);
    let chain: Vec<LoopId> = row_loops.iter().chain(&r).copied().collect();
    if chain.len() > 1 {
        s.reorder(&chain).expect("one fresh chain");
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
        let parts = s.split(r[0], &[Some(1), None], None).expect("valid");
        row_loops.push(parts[0]);
        r[0] = parts[1];
    }
    if plan.schedule_3d && row_loops.len() > 1 {
        let outer_dims = plan.topo.axes[0].min(row_loops.len() - 1);
        let outer = fuse(s, &row_loops[..outer_dims]).expect("outer rows");
        bind_capped(
            s,
            outer,
            plan.other_grid_axis,
            Some(plan.grid(plan.other_grid_axis)),
        );
        row_loops.drain(..outer_dims);
    }
    let row = fuse(s, &row_loops).expect("rows");
    let (grid, parts) = split_kept(
        s,
        row,
        &[
            (rows.serial, false),
            (rows.unroll, false),
            (rows.invocations, true),
            (rows.vector, false),
        ],
    );
    let [serial, unroll, invocations, vector] = parts[..] else {
        unreachable!("four factors")
    };
    let unroll_or_serial = [serial, unroll];
    let invocations = invocations.expect("kept");
    let mut r = fuse(s, &r);
    let mut next_stage = None;
    if let (Some(r_loop), Some(groups), true) = (r, rows.groups, is_reduction(s, b)) {
        // Partials per workgroup: the group loop goes outermost and is
        // factored into a global buffer that the next stage combines.
        let parts = s.split(r_loop, &[Some(groups), None], None).expect("valid");
        let mut order = vec![parts[0], grid];
        order.extend(unroll_or_serial.iter().flatten());
        order.push(invocations);
        order.extend(vector);
        s.reorder(&order).expect("one chain");
        let name = s.block_name(b);
        s.rfactor(parts[0]).map_err(|e| internal(&e))?;
        if let Ok(fill) = s.get_block(&format!("{name}_rf_init")) {
            flat_nest(s, plan, fill);
        }
        next_stage = Some(s.get_block(&name).expect("rfactor's combining block"));
        bind_capped(
            s,
            parts[0],
            plan.other_grid_axis,
            Some(plan.grid(plan.other_grid_axis)),
        );
        r = Some(parts[1]);
    }
    bind_capped(s, grid, plan.grid_axis, Some(plan.grid(plan.grid_axis)));
    if let Some(u) = unroll {
        s.unroll(u).expect("a small serial loop");
    }
    s.bind(invocations, plan.row_axis)
        .expect("an unbound row loop");
    reduction_domain(s, plan, b, r, vector, rows.reduction_invocations, false)?;
    if plan.reduce_outside_rows && is_reduction(s, b) {
        reduce_outside(s, b, invocations);
    }
    if let Some(combine) = next_stage {
        own_nest(s, plan, combine, plan.combine_rows())?;
    }
    Ok(invocations)
}

/// Moves the reduction loops of `b` inside `rows` (its row invocation loop)
/// outside it, keeping their order and that of the row loops, where they
/// are one chain of `b`'s own loops.
fn reduce_outside(s: &mut Schedule, b: BlockId, rows: LoopId) {
    let loops = s.get_loops(b).expect("a live block");
    let from = loops.iter().position(|&l| l == rows).expect("b's row loop");
    let block = s.kernel().block(b);
    let reduces = |l: LoopId| {
        block
            .iters
            .iter()
            .zip(&block.bindings)
            .any(|(it, x)| it.kind == IterKind::Reduce && x.mentions(crate::ir::Var::Loop(l)))
    };
    let (mut order, spatial): (Vec<LoopId>, Vec<LoopId>) =
        loops[from..].iter().partition(|&&l| reduces(l));
    if order.is_empty() {
        return;
    }
    order.extend(spatial);
    // Where other blocks share these loops (a cross-workgroup stage's
    // partials, a combining block), the nest stays as it is: the same
    // result, with a strided walk per column.
    let _unchanged = s.reorder(&order).is_err();
}

/// Schedules a block that `compute_at` placed under the anchor's rows.
fn under_row(s: &mut Schedule, plan: &Plan, b: BlockId, kept: bool) -> Result<(), ParamsError> {
    let (rows, r) = own_loops(s, &plan.topo, b);
    let chain: Vec<LoopId> = rows.iter().chain(&r).copied().collect();
    if chain.len() > 1 {
        s.reorder(&chain).expect("one chain of fresh loops");
    }
    let vector = rows
        .iter()
        .copied()
        .rfind(|&l| s.kernel().loop_(l).extent > 1);
    let r = fuse(s, &r);
    reduction_domain(s, plan, b, r, vector, plan.rows.reduction_invocations, true)?;
    let temp = s.kernel().buffer(s.kernel().block(b).buffer).role == Role::Temp;
    if kept {
        let scope = if plan.t > 1 {
            Scope::Workgroup
        } else {
            Scope::Private
        };
        s.set_scope(b, scope).map_err(|e| internal(&e))?;
    } else if temp && plan.t == 1 && is_reduction(s, b) {
        s.set_scope(b, Scope::Private).map_err(|e| internal(&e))?;
    }
    Ok(())
}

fn is_reduction(s: &Schedule, b: BlockId) -> bool {
    s.kernel().block(b).reduce.is_some()
}

/// Splits and binds the reduction domain `r` of block `b` (see the module
/// docs); `vector` is the row-vector loop of outer reductions.
fn reduction_domain(
    s: &mut Schedule,
    plan: &Plan,
    b: BlockId,
    r: Option<LoopId>,
    vector: Option<LoopId>,
    t: u64,
    under_row: bool,
) -> Result<(), ParamsError> {
    let reduce = is_reduction(s, b);
    let Some(r) = r else {
        if let (Some(v), false) = (vector, reduce) {
            s.vectorize(v).expect("the innermost loop");
        }
        return Ok(());
    };
    let (serial, parts) = split_kept(
        s,
        r,
        &[(plan.unroll_r, false), (t, false), (plan.vec_r, false)],
    );
    let [unroll, lanes, vec_r] = parts[..] else {
        unreachable!("three factors")
    };
    if let Some(v) = vector {
        if reduce {
            s.unroll(v).expect("a small spatial loop");
        } else {
            let mut order = vec![serial];
            order.extend(unroll.iter().chain(&lanes));
            order.push(v);
            s.reorder(&order).expect("one chain");
            s.vectorize(v).expect("the innermost spatial loop");
        }
    }
    if let Some(u) = unroll {
        s.unroll(u).expect("a small loop");
    }
    if let Some(lanes) = lanes {
        if reduce {
            let name = s.block_name(b);
            s.rfactor(lanes).map_err(|e| internal(&e))?;
            // Partials: each invocation's own with subgroups, else shared.
            let partials = if plan.subgroup {
                Scope::Private
            } else {
                Scope::Workgroup
            };
            s.set_scope(b, partials).map_err(|e| internal(&e))?;
            if let Ok(fill) = s.get_block(&format!("{name}_rf_init")) {
                let fill_loop = *s.get_loops(fill).expect("live").last().expect("its loop");
                s.bind(fill_loop, plan.red_axis).expect("a spatial loop");
            }
            let combine = s.get_block(&name).expect("rfactor's combining block");
            let temp = s.kernel().buffer(s.kernel().block(combine).buffer).role == Role::Temp;
            if under_row && temp {
                // Every invocation combines the partials into its own copy.
                s.set_scope(combine, Scope::Private)
                    .map_err(|e| internal(&e))?;
            }
            let over_lanes = *s
                .get_loops(combine)
                .expect("live")
                .last()
                .expect("its loop");
            let tree = t.is_power_of_two();
            if plan.subgroup || tree {
                // Private partials are shuffled together, workgroup ones
                // folded as a tree.
                s.bind(over_lanes, plan.red_axis)
                    .map_err(|e| internal(&e))?;
            } else if !(under_row && temp) {
                // One invocation writes the global result.
                let one = s.split(over_lanes, &[Some(1), None], None).expect("valid")[0];
                s.bind(one, plan.red_axis).expect("a loop of one iteration");
            }
        }
        s.bind(lanes, plan.red_axis).expect("a spatial loop");
    }
    if let Some(v) = vec_r {
        if reduce {
            s.unroll(v).expect("a small loop");
        } else {
            s.vectorize(v).expect("the innermost spatial loop");
        }
    }
    Ok(())
}

/// A fill nest of a cross-workgroup reduction: flat over workgroups.
fn flat_nest(s: &mut Schedule, plan: &Plan, b: BlockId) {
    let loops = s.get_loops(b).expect("live");
    let flat = fuse(s, &loops).expect("a non-empty nest");
    let parts = s
        .split(flat, &[None, Some(plan.invocations)], None)
        .expect("valid");
    bind_capped(s, parts[0], plan.grid_axis, Some(plan.grid_cap));
    s.bind(parts[1], plan.row_axis).expect("a spatial loop");
}

fn internal(e: &ScheduleError) -> ParamsError {
    err("scheduler", format!("the reduction scheduler failed: {e}"))
}

/// Workgroup memory and per-invocation loop budgets, checked on the WGSL
/// the schedule produces.
fn check_limits(s: &Schedule, kept: bool, device: &DeviceInfo) -> Result<(), ParamsError> {
    let storage = if kept {
        Fix(
            "project_persistent_buffers",
            "set it to true to recompute the rows from the inputs",
        )
    } else {
        Fix("reduction_invocations", "use fewer")
    };
    let loops = Fix(
        "reduction_invocations",
        "spread the work over more invocations (cross-invocation reduction, \
         reduction_invocations) or workgroups",
    );
    check_launch_limits(s, device, storage, loops)
}
