//! The matmul scheduler behind the [`Scheduler`] trait: the fusions it
//! takes, and the fields a tuner may set.

use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, MatmulParams, ParamsError, SchedulerKind, Tunable};

use super::analysis::problem;
use super::heuristics::cpu_strip;
use super::{accepts, matmul_heuristics, schedule_matmul};
use crate::Scheduler;
use tilefuse_sched::{DeviceInfo, Schedule};

/// One matmul with its pointwise prologue and epilogue (nvFuser's matmul
/// scheduler).
pub struct Matmul;

impl Scheduler for Matmul {
    type Params = MatmulParams;
    const KIND: SchedulerKind = SchedulerKind::Matmul;

    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String> {
        accepts(fusion)
    }

    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> MatmulParams {
        matmul_heuristics(fusion, device)
    }

    fn schedule(
        &self,
        fusion: &Fusion,
        params: &MatmulParams,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError> {
        Ok(schedule_matmul(fusion, params, device)?)
    }

    /// The workgroup, invocation and per-invocation tiles, split-k, the
    /// order and swizzle of workgroups over tiles, vector widths, and
    /// staging the operands through workgroup memory (then its circular
    /// buffer's stages and prefetch). On the CPU device, workgroups of
    /// more rows in longer k steps (its default, `matmul_heuristics`, has
    /// 256 rows in steps of 128 for large problems), and columns in
    /// strips from 16 (one AVX-512 vector) to whole rows, the default.
    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable> {
        // (workgroup rows, invocation rows, k step): a CPU invocation's rows
        // are its workgroup's.
        let (rows, warp_rows, k) = if device.is_gpu() {
            (128, 64, 64)
        } else {
            (256, 256, 256)
        };
        let columns = |path, min, max| {
            if device.is_gpu() {
                Tunable::pow2(path, min, max)
            } else {
                let (m, n, _) = problem(fusion);
                cpu_columns(path, cpu_strip(m, n))
            }
        };
        vec![
            Tunable::pow2("tile_sizes.cta_tile.m", 16, rows),
            columns("tile_sizes.cta_tile.n", 16, 128),
            Tunable::pow2("tile_sizes.cta_tile.k", 8, k),
            Tunable::pow2("tile_sizes.warp_tile.m", 8, warp_rows),
            columns("tile_sizes.warp_tile.n", 8, 64),
            Tunable::pow2("tile_sizes.instruction_tile.m", 1, 8),
            columns("tile_sizes.instruction_tile.n", 1, 8),
            Tunable::pow2("tile_sizes.instruction_tile.k", 1, 8),
            Tunable::pow2("splitk_factor", 1, 8),
            Tunable::choice("cta_order", ["row_major", "column_major"]),
            Tunable::pow2("grid_swizzle_factor", 1, 8),
            Tunable::choice(
                "tiling_strategy",
                [
                    "one_tile_per_workgroup",
                    "distribute_tiles_across_workgroups",
                ],
            ),
            Tunable::choice("supported_vec_size.a", [1, 2, 4]),
            Tunable::choice("supported_vec_size.b", [1, 2, 4]),
            Tunable::choice("supported_vec_size.epilogue", [1, 2, 4]),
            Tunable::flag("async_gmem_load_operands"),
            Tunable::flag("circular_buffer_options.smem_write"),
            Tunable::int("circular_buffer_options.stages", 1, 4),
            Tunable::int("circular_buffer_options.prefetch_gap", 0, 3),
            Tunable::flag("use_smem_epilogue"),
        ]
    }

    fn params(params: &HeuristicParams) -> Option<&MatmulParams> {
        match params {
            HeuristicParams::Matmul(p) => Some(p),
            _ => None,
        }
    }
}

/// Column tiles on the CPU device: powers of two from 16 below `strip`,
/// then `strip` itself (whole rows, the default; not always a power of
/// two), so that the default's neighbour is the next narrower strip.
fn cpu_columns(path: &'static str, strip: u32) -> Tunable {
    let narrower =
        std::iter::successors(Some(16u32), |v| v.checked_mul(2)).take_while(|&v| v < strip);
    Tunable::choice(path, narrower.chain([strip]))
}
