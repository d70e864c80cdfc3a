//! The pointwise scheduler (nvFuser's `schedulePointwise`, in WebGPU terms).
//!
//! Every intermediate is inlined, so each output is one block. Its loops
//! are fused into one (`break_point = 0`) or into an outer and an inner
//! group (2D), then split so that, from the outside in:
//!
//! ```text
//! 1D: grid → workgroup.x, unroll_factor_outer, unroll_factor_inner (unrolled),
//!     launch.workgroup_size[0] → invocation.x, vectorization_factor (vectorized)
//! 2D: outer grid → workgroup.y, inner grid → workgroup.x (swapped by flip_grid_binding),
//!     unroll_factor_outer / unroll_factor_inner (unrolled),
//!     launch.workgroup_size[1] → invocation.y (split_block), launch.workgroup_size[0] →
//!     invocation.x, vectorization_factor (vectorized)
//! ```
//!
//! Consecutive invocations touch consecutive vectors. A fixed `launch.grid`
//! adds a serial grid-stride loop; `split_grid_y_dim` splits a grid that
//! exceeds the device's per-dimension workgroup limit. `compile.fast_math`
//! and `compile.use_subgroups` have no pointwise variant and are ignored;
//! `compile.index_type` must be `"u32"` (kernels index with u32).

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::{HeuristicParams, ParamsError, PointwiseParams, SchedulerKind, Tunable};

use super::launch::{
    CPU_WORKGROUP_LANES, bind_capped, check_index_type, check_workgroup, err, fuse, workgroup_sizes,
};
use super::{Scheduler, has_op, largest_divisor};
use crate::step::Step;
use tilefuse_sched::ir::{LoopId, ThreadAxis};
use tilefuse_sched::{DeviceInfo, Schedule};

/// Elementwise and broadcast fusions (nvFuser's pointwise scheduler).
pub struct Pointwise;

impl Scheduler for Pointwise {
    type Params = PointwiseParams;
    const KIND: SchedulerKind = SchedulerKind::Pointwise;

    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String> {
        if fusion.outputs().is_empty() {
            Err("the fusion has no outputs".into())
        } else if has_op(fusion, |op| matches!(op, Op::Reduce { .. })) {
            Err("the fusion reduces; pointwise fusions have no reductions".into())
        } else if has_op(fusion, |op| matches!(op, Op::Matmul { .. })) {
            Err("the fusion has a matmul".into())
        } else {
            Ok(())
        }
    }

    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> PointwiseParams {
        pointwise_heuristics(fusion, device)
    }

    fn schedule(
        &self,
        fusion: &Fusion,
        params: &PointwiseParams,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError> {
        Ok(schedule_pointwise(fusion, params, device)?)
    }

    /// The workgroup size, vector width and unrolls; with outputs of rank
    /// two or more, the break point of a 2D schedule and its block split
    /// and grid binding.
    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable> {
        let mut out = vec![
            workgroup_sizes(device),
            Tunable::choice("vectorization_factor", [1, 2, 4]),
            Tunable::pow2("unroll_factor_inner", 1, 8),
            Tunable::pow2("unroll_factor_outer", 1, 8),
        ];
        let rank = output_shapes(fusion)
            .iter()
            .map(Vec::len)
            .min()
            .unwrap_or(0);
        if rank >= 2 {
            out.push(Tunable::int("break_point", 0, rank as u32 - 1));
            out.push(Tunable::flag("split_block"));
            out.push(Tunable::flag("flip_grid_binding"));
        }
        out
    }

    fn params(params: &HeuristicParams) -> Option<&PointwiseParams> {
        match params {
            HeuristicParams::Pointwise(p) => Some(p),
            _ => None,
        }
    }
}

/// Default params. On a GPU: a flat schedule, 128 invocations (or the
/// device's maximum), vec4 where every output's size allows. On the CPU
/// device: rows (all but the last axis, or the last two where the last
/// is short) in parallel and the last axis as one invocation loop that
/// divides it exactly, which the executor runs as SIMD lanes with
/// contiguous (and broadcast) loads and no tail guard.
/// With outputs of several ranks, the break point is below the smallest
/// rank (every output is scheduled with it).
pub fn pointwise_heuristics(fusion: &Fusion, device: &DeviceInfo) -> PointwiseParams {
    let shapes = output_shapes(fusion);
    let Defaults {
        workgroup,
        break_point,
        vector,
    } = defaults(&shapes, device);
    let mut p = PointwiseParams::default();
    p.launch.workgroup_size = Some(workgroup);
    p.break_point = break_point;
    p.vectorization_factor = vector;
    let total = shapes.iter().map(|s| numel(s)).max().unwrap_or(0);
    let per_workgroup = u64::from(workgroup[0] * vector);
    p.split_grid_y_dim =
        total.div_ceil(per_workgroup) > u64::from(device.limits.max_workgroups_per_dimension);
    p
}

/// What the default heuristic picks (see `pointwise_heuristics`).
struct Defaults {
    workgroup: [u32; 3],
    break_point: u32,
    vector: u32,
}

fn defaults(shapes: &[Vec<usize>], device: &DeviceInfo) -> Defaults {
    let max = device.limits.max_invocations_per_workgroup;
    if device.is_gpu() {
        let vector = [4u32, 2, 1]
            .into_iter()
            .find(|&v| shapes.iter().all(|s| numel(s).is_multiple_of(u64::from(v))))
            .unwrap_or(1);
        return Defaults {
            workgroup: [128.min(max), 1, 1],
            break_point: 0,
            vector,
        };
    }
    let min_rank = shapes.iter().map(Vec::len).min().unwrap_or(1);
    let last = shapes
        .iter()
        .map(|s| numel(&s[min_rank - 1..]))
        .max()
        .unwrap_or(1);
    // Rows of the last axis alone where it is short and the rows are
    // 2-D or more: the leading axes then fuse into one loop (rank 4: the
    // first three) whose div and mod the executor cannot fold away, and
    // it ran a lane step a row (1M elements in rows of 64: x * 2 + 1 took
    // 1.05 ms, permuted as attention heads are 1.05, broadcast over a
    // middle axis 3.1; the two last axes as rows, 0.10, 0.19 and 0.10).
    let widest = CPU_WORKGROUP_LANES.min(u64::from(max));
    let rows_of_two = min_rank >= 3 && last <= widest;
    let bp = (min_rank - 1 - usize::from(rows_of_two)).min(MAX_BREAK_POINT);
    // Invocations that divide the last axis: the loops of a row then
    // split along its axes, with no div or mod left in the lane.
    let lanes = largest_divisor(last, 1..=widest).unwrap_or(1);
    Defaults {
        workgroup: [lanes as u32, 1, 1],
        break_point: bp as u32,
        vector: 1,
    }
}

/// The largest `break_point` the params schema admits.
const MAX_BREAK_POINT: usize = 8;

fn numel(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// The shapes of the outputs that have axes (scalars take no schedule).
fn output_shapes(fusion: &Fusion) -> Vec<Vec<usize>> {
    fusion
        .outputs()
        .iter()
        .map(|&t| fusion.ty(t).expect("an output").shape.clone())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Builds the pointwise schedule of `fusion` from `p` (see the module docs).
pub(crate) fn schedule_pointwise(
    fusion: &Fusion,
    p: &PointwiseParams,
    device: &DeviceInfo,
) -> Step<Schedule> {
    check_index_type(p.compile.index_type)?;
    // Not given: as the default heuristic would pick it.
    let size = (p.launch).workgroup_size_or(|| defaults(&output_shapes(fusion), device).workgroup);
    let [_, by, bz] = size;
    if bz != 1 {
        return Err(err(
            "launch.workgroup_size[2]",
            format!("the pointwise scheduler uses x and y only; must be 1, got {bz}"),
        ));
    }
    if (p.break_point == 0 || !p.split_block) && by != 1 {
        return Err(err(
            "launch.workgroup_size[1]",
            format!("must be 1 unless break_point > 0 and split_block, got {by}"),
        ));
    }
    check_workgroup(size, &device.limits)?;
    let mut s = Schedule::new(fusion);
    s.compute_inline_all(&[]); // outputs stay
    for b in s.get_blocks() {
        let loops = s.get_loops(b)?;
        if loops.is_empty() {
            continue; // a scalar output
        }
        let rank = loops.len();
        let bp = p.break_point as usize;
        if bp >= rank && bp != 0 {
            return Err(err(
                "break_point",
                format!("must be less than the output rank {rank}, got {bp}"),
            ));
        }
        let inner = fuse(&mut s, &loops[bp..])?.expect("loops after the break point");
        let inner_extent = s.kernel().loop_(inner).extent;
        let v = u64::from(p.vectorization_factor);
        if !inner_extent.is_multiple_of(v) {
            return Err(err(
                "vectorization_factor",
                format!(
                    "{v} does not divide the innermost extent {inner_extent} of block {}",
                    s.block_name(b)
                ),
            ));
        }
        let nest = Nest { p, size, device };
        if bp == 0 {
            nest.one_dimensional(&mut s, inner)?;
        } else {
            let outer = fuse(&mut s, &loops[..bp])?.expect("loops before the break point");
            nest.two_dimensional(&mut s, outer, inner)?;
        }
    }
    Ok(s)
}

/// What shapes each output's nest: the params, the workgroup size, the device.
struct Nest<'a> {
    p: &'a PointwiseParams,
    size: [u32; 3],
    device: &'a DeviceInfo,
}

impl Nest<'_> {
    /// `break_point` 0: the fused loop split into grid, outer and inner
    /// unroll, invocations and the vector.
    fn one_dimensional(&self, s: &mut Schedule, inner: LoopId) -> Step<()> {
        let (p, f) = (self.p, |x: u32| Some(u64::from(x)));
        let extent = s.kernel().loop_(inner).extent;
        let lanes = u64::from(self.size[0] * p.vectorization_factor);
        let ui = clamp_unroll(p.unroll_factor_inner, extent, lanes);
        let uo = clamp_unroll(p.unroll_factor_outer, extent, ui * lanes);
        let factors = [
            None,
            Some(uo),
            Some(ui),
            f(self.size[0]),
            f(p.vectorization_factor),
        ];
        let parts = s.split(inner, &factors, None)?;
        let (grid, uo, ui, tx, vec) = (parts[0], parts[1], parts[2], parts[3], parts[4]);
        annotate(s, &[uo, ui], tx, None, vec)?;
        self.bind_grid(s, grid, ThreadAxis::WorkgroupX)
    }

    /// A `break_point`: the loops before it fused into an outer loop (grid,
    /// outer unroll and, with `split_block`, invocation.y), those after it
    /// into an inner one (grid, inner unroll, invocation.x, the vector).
    fn two_dimensional(&self, s: &mut Schedule, outer: LoopId, inner: LoopId) -> Step<()> {
        let (p, f) = (self.p, |x: u32| Some(u64::from(x)));
        let [bx, by, _] = self.size;
        let (inner_extent, outer_extent) = (
            s.kernel().loop_(inner).extent,
            s.kernel().loop_(outer).extent,
        );
        let lanes = u64::from(bx * p.vectorization_factor);
        let ui = Some(clamp_unroll(p.unroll_factor_inner, inner_extent, lanes));
        let ip = s.split(inner, &[None, ui, f(bx), f(p.vectorization_factor)], None)?;
        let (ig, ui, tx, vec) = (ip[0], ip[1], ip[2], ip[3]);
        let rows = if p.split_block { u64::from(by) } else { 1 };
        let uo = Some(clamp_unroll(p.unroll_factor_outer, outer_extent, rows));
        let (og, uo, ty) = if p.split_block {
            let op = s.split(outer, &[None, uo, f(by)], None)?;
            (op[0], op[1], Some(op[2]))
        } else {
            let op = s.split(outer, &[None, uo], None)?;
            (op[0], op[1], None)
        };
        let mut order = vec![og, ig, uo, ui];
        order.extend(ty);
        order.extend([tx, vec]);
        s.reorder(&order)?;
        annotate(s, &[uo, ui], tx, ty, vec)?;
        let (outer_axis, inner_axis) = if p.flip_grid_binding {
            (ThreadAxis::WorkgroupX, ThreadAxis::WorkgroupY)
        } else {
            (ThreadAxis::WorkgroupY, ThreadAxis::WorkgroupX)
        };
        self.bind_grid(s, ig, inner_axis)?;
        self.bind_grid(s, og, outer_axis)
    }

    /// Binds a grid loop to `axis`: split by a fixed `launch.grid` into a
    /// grid-stride loop, or by the device limit where `split_grid_y_dim`
    /// allows.
    fn bind_grid(&self, s: &mut Schedule, grid: LoopId, axis: ThreadAxis) -> Step<()> {
        let (p, max) = (self.p, self.device.limits.max_workgroups_per_dimension);
        let fixed = p.launch.grid.map(|g| g[axis.dim()]);
        let extent = s.kernel().loop_(grid).extent;
        let cap = match fixed {
            Some(g) => Some(u64::from(g)),
            None if extent > u64::from(max) => {
                if !p.split_grid_y_dim {
                    return Err(err(
                        "split_grid_y_dim",
                        format!(
                            "{extent} workgroups along {} exceed the device's max_compute_workgroups_per_dimension ({max}); set split_grid_y_dim",
                            axis.name()
                        ),
                    ));
                }
                Some(u64::from(max))
            }
            None => None,
        };
        bind_capped(s, grid, axis, cap)?;
        Ok(())
    }
}

/// An unroll factor of a loop of `extent` whose every step covers `inner`
/// elements, clamped to the steps there are: copies past them would only
/// add code whose guards always fail (16 x 16 unrolled copies of a
/// 360-element fusion made 243 KB of WGSL).
fn clamp_unroll(factor: u32, extent: u64, inner: u64) -> u64 {
    u64::from(factor).min(extent.div_ceil(inner.max(1)).max(1))
}

/// Unrolls, binds invocations and vectorizes the inner loops.
fn annotate(
    s: &mut Schedule,
    unrolled: &[LoopId],
    tx: LoopId,
    ty: Option<LoopId>,
    vec: LoopId,
) -> Step<()> {
    for &u in unrolled {
        s.unroll(u)?;
    }
    if let Some(ty) = ty {
        s.bind(ty, ThreadAxis::InvocationY)?;
    }
    s.bind(tx, ThreadAxis::InvocationX)?;
    s.vectorize(vec)?;
    Ok(())
}
