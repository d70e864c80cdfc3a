//! Params checked against the problem and device, resolved into the
//! tiles, invocations and staging the nest is built from.

use tilefuse_ir::Fusion;
use tilefuse_params::{GemmTile, MatmulParams};

use super::analysis::{accepts, fusion_has_batch, problem};
use crate::step::Step;

use crate::launch::{CPU_WORKGROUP_LANES, check_index_type, check_workgroup, err};
use tilefuse_sched::DeviceInfo;

pub(super) struct Plan {
    pub(super) cta: GemmTile,
    pub(super) warp: GemmTile,
    pub(super) instr: GemmTile,
    pub(super) invocations: [u64; 2],
    pub(super) splitk: u64,
    /// Invocations of the later, flat stages.
    pub(super) flat_invocations: u64,
    /// The CPU device: a workgroup's invocations run in turn, and a
    /// vectorized loop of any length is one step of SIMD lanes.
    pub(super) simd_lanes: bool,
    pub(super) grid_cap: u64,
}

pub(super) fn plan(fusion: &Fusion, p: &MatmulParams, device: &DeviceInfo) -> Step<Plan> {
    accepts(fusion).map_err(|e| err("scheduler", e))?;
    check_index_type(p.compile.index_type)?;
    if p.compile.use_subgroups {
        return Err(err(
            "compile.use_subgroups",
            "the matmul scheduler has no subgroup variant yet",
        ));
    }
    let cb = &p.circular_buffer_options;
    for (field, on) in [("smem_write", cb.smem_write), ("smem_read", cb.smem_read)] {
        if on && !p.async_gmem_load_operands {
            return Err(err(
                &format!("circular_buffer_options.{field}"),
                "circular buffering pipelines the operands staged in workgroup memory; \
                 set async_gmem_load_operands",
            ));
        }
    }
    if cb.smem_write && cb.stages < 2 {
        return Err(err(
            "circular_buffer_options.stages",
            format!(
                "a circular buffer needs at least 2 stages, got {}",
                cb.stages
            ),
        ));
    }
    let t = &p.tile_sizes;
    let (cta, warp, instr) = (t.cta_tile, t.warp_tile, t.instruction_tile);
    let invocations = [u64::from(cta.n / instr.n), u64::from(cta.m / instr.m)];
    let n_inv = invocations[0] * invocations[1];
    // Derived (not given): the tiles' invocations, n along x and m along y.
    let size = (p.launch).workgroup_size_or(|| [cta.n / instr.n, cta.m / instr.m, 1]);
    let given: u64 = size.iter().map(|&d| u64::from(d)).product();
    if n_inv != given {
        return Err(err(
            "launch.workgroup_size",
            format!(
                "the tiles give (cta_tile.n / instruction_tile.n) × (cta_tile.m / instruction_tile.m) \
                 = {} × {} = {n_inv} invocations per workgroup, got {given}; leave it null to \
                 derive it",
                invocations[0], invocations[1],
            ),
        ));
    }
    for (d, &count) in invocations.iter().enumerate() {
        let max = u64::from(device.limits.max_workgroup_size[d]);
        if count > max {
            return Err(err(
                "tile_sizes.instruction_tile",
                format!(
                    "the tiles put {count} invocations along {}, over the device's \
                     max_compute_workgroup_size_{} ({max})",
                    ["x (n)", "y (m)"][d],
                    ["x", "y"][d]
                ),
            ));
        }
    }
    check_workgroup(size, &device.limits)?;
    let (_, _, k) = problem(fusion);
    let splitk = u64::from(p.splitk_factor);
    if !k.is_multiple_of(splitk) {
        return Err(err(
            "splitk_factor",
            format!("{splitk} does not divide k ({k})"),
        ));
    }
    if splitk > 1 && fusion_has_batch(fusion) {
        return Err(err(
            "splitk_factor",
            "batched matmuls keep workgroup.z for the batch; split-k needs it",
        ));
    }
    Ok(Plan {
        cta,
        warp,
        instr,
        invocations,
        splitk,
        flat_invocations: flat_invocations(n_inv, device),
        simd_lanes: !device.is_gpu(),
        grid_cap: u64::from(device.limits.max_workgroups_per_dimension),
    })
}

/// A GPU's flat stages keep the matmul's workgroup size; the CPU device's
/// take the widest lane steps it runs (the matmul's 8 invocations made a
/// 256^3 split-k sum 65,536 steps of 2 lanes each: 10 ms, against 0.3 ms
/// for the whole matmul without split-k).
fn flat_invocations(matmul_invocations: u64, device: &DeviceInfo) -> u64 {
    let max = u64::from(device.limits.max_workgroup_size[0]);
    if device.is_gpu() {
        matmul_invocations.min(max)
    } else {
        CPU_WORKGROUP_LANES.min(max)
    }
}
