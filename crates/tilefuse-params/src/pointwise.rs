//! Params of the pointwise scheduler (nvFuser's `PointwiseParams`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CompileParams, LaunchParams};
use crate::convert::params_struct;
use crate::version::{PARAMS_VERSION, current_version};

/// How the pointwise scheduler tiles an elementwise / broadcast fusion.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PointwiseParams {
    /// Params format version this value was written with. Default: current.
    #[serde(default = "current_version")]
    #[schemars(range(min = 1))]
    pub version: u32,
    pub launch: LaunchParams,
    pub compile: CompileParams,
    /// Axis at which the output's axes are split into an outer and an inner
    /// group for a 2D schedule (outer → grid y, inner → grid x); `0` keeps
    /// the flat 1D schedule. Must be less than every output's rank. Default `0`.
    #[schemars(range(max = 8))]
    pub break_point: u32,
    /// 2D schedules: also split the inner group across the workgroup's y
    /// invocations instead of only x. Default `false`.
    pub split_block: bool,
    /// 2D schedules: split the outer group further so the y grid stays
    /// under the device's `max_compute_workgroups_per_dimension`. Default `false`.
    pub split_grid_y_dim: bool,
    /// Swap which grid axis the outer and inner groups bind to. Default `false`.
    pub flip_grid_binding: bool,
    /// Elements each invocation loads and stores as one vector (`vec2` /
    /// `vec4`); must divide the innermost extent. Default `1`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub vectorization_factor: u32,
    /// Vectors each invocation handles in its inner (unrolled) loop;
    /// clamped to the steps the loop has (a factor past them would only copy
    /// code that never runs). Default `1`.
    #[schemars(range(min = 1, max = 16))]
    pub unroll_factor_inner: u32,
    /// Iterations of the outer (grid) loop each invocation handles,
    /// unrolled; clamped like `unroll_factor_inner`. Default `1`.
    #[schemars(range(min = 1, max = 16))]
    pub unroll_factor_outer: u32,
}

impl Default for PointwiseParams {
    fn default() -> Self {
        PointwiseParams {
            version: PARAMS_VERSION,
            launch: LaunchParams::default(),
            compile: CompileParams::default(),
            break_point: 0,
            split_block: false,
            split_grid_y_dim: false,
            flip_grid_binding: false,
            vectorization_factor: 1,
            unroll_factor_inner: 1,
            unroll_factor_outer: 1,
        }
    }
}

params_struct!(
    PointwiseParams,
    scheduler = "pointwise",
    default = PointwiseParams::default(),
    check = |p: &PointwiseParams| p.launch.check_fields().map_err(|e| e.within("launch"))
);
