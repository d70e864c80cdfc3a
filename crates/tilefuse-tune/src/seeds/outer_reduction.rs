//! Outer (column) reductions: consecutive invocations must read
//! consecutive columns, and long columns want several invocations each so
//! that the device has enough work. Seeds trade columns per workgroup
//! against invocations per column, try vec4 columns, and unroll each
//! invocation's loop down its column so that several loads are in flight
//! (nvFuser's outer-reduction unroll; the H100's best column sum of
//! 4096² unrolled 4, lavapipe's of 1024² 8: 1.7x its default).

use tilefuse_params::{HeuristicParams, SchedulerKind};

use super::{AutotunerHeuristic, DeviceKind, SeedContext, edited, pow2_at_most, workgroup};

pub struct OuterReduction;

impl AutotunerHeuristic for OuterReduction {
    fn name(&self) -> &str {
        "outer_reduction"
    }

    fn schedulers(&self) -> &[SchedulerKind] {
        &[SchedulerKind::Reduction]
    }

    fn devices(&self) -> &[DeviceKind] {
        &[DeviceKind::Gpu, DeviceKind::CpuVulkan]
    }

    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String> {
        Ok(cx.features.reduction.is_some_and(|r| r.inner > 1))
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let r = cx.features.reduction.ok_or("not a reduction")?;
        let max = u64::from(cx.device.limits.max_invocations_per_workgroup).min(256);
        // `columns` a workgroup (`vector` each per invocation) and
        // `per_column` invocations a column.
        let seed = |columns: u64, per_column: u64, vector: u64, unroll: u64| {
            vec![
                ("rows_per_workgroup", columns.into()),
                ("vectorization_factor_iteration", vector.into()),
                ("cross_invocation_outer_reduction", (per_column > 1).into()),
                ("reduction_invocations", per_column.into()),
                ("unroll_factor_reduction", unroll.into()),
                (
                    "launch.workgroup_size",
                    workgroup(columns / vector * per_column),
                ),
            ]
        };
        let mut seeds = Vec::new();
        for columns in [16u64, 64] {
            let columns = columns.min(pow2_at_most(r.inner));
            let per_column = (max / columns).min(pow2_at_most(r.reduced / 16)).max(1);
            seeds.push(seed(columns, per_column, 1, 1));
            if columns >= 4 && r.inner.is_multiple_of(4) {
                seeds.push(seed(columns, per_column, 4, 1));
            }
            // At least eight steps of the unrolled loop down a column.
            let unroll = pow2_at_most(r.reduced / per_column / 8).min(8);
            if unroll > 1 {
                seeds.push(seed(columns, per_column, 1, unroll));
            }
        }
        edited(cx.default, &seeds)
    }
}
