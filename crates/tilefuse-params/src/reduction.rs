//! Params of the reduction / normalization scheduler (nvFuser's
//! `ReductionParams`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ParamsError;
use crate::common::{CompileParams, LaunchParams};
use crate::convert::params_struct;
use crate::version::{PARAMS_VERSION, current_version};

/// How the reduction scheduler maps reduction and iteration domains onto
/// workgroups, invocations and subgroups.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReductionParams {
    /// Params format version this value was written with. Default: current.
    #[serde(default = "current_version")]
    #[schemars(range(min = 1))]
    pub version: u32,
    pub launch: LaunchParams,
    pub compile: CompileParams,
    /// The reduced axis is the innermost (contiguous) one: an inner
    /// reduction. `false` schedules an outer reduction. Default `true`.
    pub fastest_dim: bool,
    /// Keep each row in registers / workgroup memory for the whole
    /// normalization instead of re-reading it from global memory. Default `false`.
    pub persistent_kernel: bool,
    /// Persistent kernels: keep the fusion inputs instead of intermediates
    /// when that takes less storage. Default `false`.
    pub project_persistent_buffers: bool,
    /// Schedule as a 3D problem (outer iteration, reduction, inner
    /// iteration), for reductions over a middle axis. Default `false`.
    pub schedule_3d: bool,
    /// Swap the grid axes of the iteration and reduction domains. Default `false`.
    pub flip_grid: bool,
    /// Inner reduction: invocations of a workgroup cooperate on one row (a
    /// tree reduction through workgroup memory). Default `false`.
    pub cross_invocation_inner_reduction: bool,
    /// Inner reduction: several workgroups cooperate on one row (partial
    /// results, then a second pass). Default `false`.
    pub cross_workgroup_inner_reduction: bool,
    /// Inner reduction: the cross-invocation partials are combined with
    /// subgroup shuffles instead of through workgroup memory; the
    /// `reduction_invocations` (a power of two, at most the device's
    /// smallest subgroup) sit on invocation.x. Needs
    /// `compile.use_subgroups` and the cross-invocation flag. Default `false`.
    pub subgroup_inner_reduction: bool,
    /// Outer reduction: invocations of a workgroup cooperate on one column.
    /// Default `false`.
    pub cross_invocation_outer_reduction: bool,
    /// Outer reduction: several workgroups cooperate on one column. Default `false`.
    pub cross_workgroup_outer_reduction: bool,
    /// Outer reduction: the cross-invocation partials are combined with
    /// subgroup shuffles instead of through workgroup memory; the
    /// `reduction_invocations` (a power of two, at most the device's
    /// smallest subgroup) sit on invocation.x. Needs
    /// `compile.use_subgroups` and the cross-invocation flag. Default `false`.
    pub subgroup_outer_reduction: bool,
    /// Vector width of loads along the reduction domain. Default `1`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub vectorization_factor_reduction: u32,
    /// Unroll factor of the per-invocation reduction loop. Default `1`.
    #[schemars(range(min = 1, max = 16))]
    pub unroll_factor_reduction: u32,
    /// Vector width of loads along the iteration domain. Default `1`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub vectorization_factor_iteration: u32,
    /// Unroll factor over the iteration domain. Default `1`.
    #[schemars(range(min = 1, max = 16))]
    pub unroll_factor_iteration: u32,
    /// Rows (iteration-domain elements) each workgroup handles; a
    /// multiple of the row invocations × `unroll_factor_iteration` ×
    /// `vectorization_factor_iteration`. `null` derives that product (each
    /// row invocation handles one unrolled, vectorized group). Default `null`.
    #[schemars(range(min = 1, max = 1024))]
    pub rows_per_workgroup: Option<u32>,
    /// Invocations of a workgroup that share one row's reduction, when a
    /// `cross_invocation_*` flag is on (else each invocation reduces whole
    /// rows and this is unused); the rest of the workgroup's invocations
    /// span the rows. Must divide the workgroup's invocation count.
    /// Default `128`.
    #[schemars(range(min = 1, max = 1024))]
    pub reduction_invocations: u32,
}

impl Default for ReductionParams {
    fn default() -> Self {
        ReductionParams {
            version: PARAMS_VERSION,
            launch: LaunchParams::default(),
            compile: CompileParams::default(),
            fastest_dim: true,
            persistent_kernel: false,
            project_persistent_buffers: false,
            schedule_3d: false,
            flip_grid: false,
            cross_invocation_inner_reduction: false,
            cross_workgroup_inner_reduction: false,
            subgroup_inner_reduction: false,
            cross_invocation_outer_reduction: false,
            cross_workgroup_outer_reduction: false,
            subgroup_outer_reduction: false,
            vectorization_factor_reduction: 1,
            unroll_factor_reduction: 1,
            vectorization_factor_iteration: 1,
            unroll_factor_iteration: 1,
            rows_per_workgroup: None,
            reduction_invocations: 128,
        }
    }
}

params_struct!(
    ReductionParams,
    scheduler = "reduction",
    default = ReductionParams::default(),
    check = |p: &ReductionParams| {
        p.launch.check_fields().map_err(|e| e.within("launch"))?;
        for (field, on) in [
            ("subgroup_inner_reduction", p.subgroup_inner_reduction),
            ("subgroup_outer_reduction", p.subgroup_outer_reduction),
        ] {
            if on && !p.compile.use_subgroups {
                return Err(ParamsError::new(
                    field,
                    "needs compile.use_subgroups = true",
                ));
            }
        }
        let cross = p.cross_invocation_inner_reduction || p.cross_invocation_outer_reduction;
        let given = p.launch.workgroup_size.map(|s| s.iter().product::<u32>());
        if let (true, Some(invocations)) = (cross, given)
            && !invocations.is_multiple_of(p.reduction_invocations)
        {
            return Err(ParamsError::new(
                "reduction_invocations",
                format!(
                    "must divide the workgroup's {invocations} invocations \
                     (launch.workgroup_size), got {}",
                    p.reduction_invocations
                ),
            ));
        }
        Ok(())
    }
);
