//! The reduction scheduler behind the [`Scheduler`] trait: the fusions it
//! takes, and the fields a tuner may set.

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::{HeuristicParams, ParamsError, ReductionParams, SchedulerKind, Tunable};

use super::{reduction_heuristics, schedule_reduction, topology};
use crate::launch::workgroup_sizes;
use crate::{Scheduler, has_op};
use tilefuse_sched::{DeviceInfo, Schedule};

/// Reductions with their pointwise prologue and epilogue (nvFuser's
/// reduction and normalization schedulers).
pub struct Reduction;

impl Scheduler for Reduction {
    type Params = ReductionParams;
    const KIND: SchedulerKind = SchedulerKind::Reduction;

    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String> {
        if has_op(fusion, |op| matches!(op, Op::Matmul { .. })) {
            return Err("the fusion has a matmul".into());
        }
        topology(fusion).map(drop)
    }

    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> ReductionParams {
        reduction_heuristics(fusion, device)
    }

    fn schedule(
        &self,
        fusion: &Fusion,
        params: &ReductionParams,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError> {
        Ok(schedule_reduction(fusion, params, device)?)
    }

    /// The vector widths and unrolls of both loops, the invocations across
    /// the reduction and rows per workgroup, persistence, and for the
    /// reduction's side (inner when it runs along the fastest axis) how it
    /// combines across invocations (subgroups for inner reductions, where
    /// the device has them).
    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable> {
        let max = device.limits.max_invocations_per_workgroup.min(1024);
        let mut out = vec![
            workgroup_sizes(device),
            Tunable::choice("vectorization_factor_reduction", [1, 2, 4]),
            Tunable::pow2("unroll_factor_reduction", 1, 8),
            Tunable::choice("vectorization_factor_iteration", [1, 2, 4]),
            Tunable::pow2("unroll_factor_iteration", 1, 8),
            Tunable::pow2("reduction_invocations", 1, max),
            Tunable::pow2("rows_per_workgroup", 1, 16),
            Tunable::flag("persistent_kernel"),
            Tunable::flag("project_persistent_buffers"),
        ];
        let inner = reduction_heuristics(fusion, device).fastest_dim;
        let side = |inner_path, outer_path| if inner { inner_path } else { outer_path };
        out.push(Tunable::flag(side(
            "cross_invocation_inner_reduction",
            "cross_invocation_outer_reduction",
        )));
        // Subgroups for inner reductions only: an outer one needs three
        // fields at once (cross-invocation, its invocations, subgroups).
        if inner && device.subgroup_sizes.is_some() {
            out.push(Tunable::flag("subgroup_inner_reduction"));
        }
        out
    }

    fn params(params: &HeuristicParams) -> Option<&ReductionParams> {
        match params {
            HeuristicParams::Reduction(p) => Some(p),
            _ => None,
        }
    }
}
