//! Params every scheduler kind shares.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ParamsError;
use crate::convert::params_struct;

/// How a kernel is launched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchParams {
    /// Invocations per workgroup along x, y, z (`@workgroup_size`). The
    /// scheduler decides which loops bind to which axis. `null` lets it
    /// derive the size from the other fields: from the tiles (matmul), the
    /// row and reduction invocations (reduction), as the default heuristic
    /// would pick (pointwise). Default `null`.
    #[schemars(extend("items" = {"type": "integer", "minimum": 1, "maximum": 1024}))]
    pub workgroup_size: Option<[u32; 3]>,
    /// Workgroups dispatched along x, y, z; `null` lets the scheduler derive
    /// the grid from the problem size (the usual case). A fixed grid makes
    /// the kernel loop over the rest (grid-stride). Default `null`.
    #[schemars(extend("items" = {"type": "integer", "minimum": 1, "maximum": 65535}))]
    pub grid: Option<[u32; 3]>,
}

/// The integer type kernels index buffers with. WGSL has no 64-bit integers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IndexType {
    #[default]
    U32,
    I32,
}

/// How a kernel is compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CompileParams {
    /// Integer type of index arithmetic. Default `"u32"`.
    pub index_type: IndexType,
    /// Allow faster, less accurate math: polynomial `exp` / `tanh`,
    /// reassociated reductions. Default `false`.
    pub fast_math: bool,
    /// Use subgroup operations (`subgroupAdd`, shuffles) where the scheduler
    /// has a subgroup variant; rejected on adapters without the `subgroups`
    /// feature. Default `false`.
    pub use_subgroups: bool,
}

/// No adapter allows more invocations per workgroup; devices check their own
/// (usually lower) limit when a kernel is built.
pub const MAX_WORKGROUP_INVOCATIONS: u32 = 1024;

impl LaunchParams {
    /// The workgroup size given, else `derived()` (the scheduler's rule).
    pub fn workgroup_size_or(&self, derived: impl FnOnce() -> [u32; 3]) -> [u32; 3] {
        self.workgroup_size.unwrap_or_else(derived)
    }
}

params_struct!(
    LaunchParams,
    default = LaunchParams::default(),
    check = |p: &LaunchParams| {
        let Some(size) = p.workgroup_size else {
            return Ok(());
        };
        let n = size.iter().map(|&d| u64::from(d)).product::<u64>();
        if n > u64::from(MAX_WORKGROUP_INVOCATIONS) {
            return Err(ParamsError::new(
                "workgroup_size",
                format!("{n} invocations exceed the maximum of {MAX_WORKGROUP_INVOCATIONS}"),
            ));
        }
        Ok(())
    }
);
params_struct!(CompileParams, default = CompileParams::default());
