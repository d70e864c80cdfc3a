//! Short rows reduced along the fastest axis (softmax, layernorm over at
//! most 1024 elements): a workgroup per row leaves most invocations idle
//! or most of the workgroup waiting on barriers, so give each workgroup
//! several rows and fewer invocations per row.

use tilefuse_params::{HeuristicParams, SchedulerKind};

use super::{AutotunerHeuristic, DeviceKind, SeedContext, edited, pow2_at_most, workgroup};

pub struct ShortRows;

/// The longest row this heuristic calls short.
const SHORT: u64 = 1024;

impl AutotunerHeuristic for ShortRows {
    fn name(&self) -> &str {
        "short_rows"
    }

    fn schedulers(&self) -> &[SchedulerKind] {
        &[SchedulerKind::Reduction]
    }

    fn devices(&self) -> &[DeviceKind] {
        &[DeviceKind::Gpu, DeviceKind::CpuVulkan]
    }

    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String> {
        Ok(cx
            .features
            .reduction
            .is_some_and(|r| r.inner == 1 && r.reduced <= SHORT && r.outer >= 8))
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let r = cx.features.reduction.ok_or("not a reduction")?;
        let max = u64::from(cx.device.limits.max_invocations_per_workgroup).min(256);
        let storage = u64::from(cx.device.limits.max_workgroup_storage_bytes);
        let projects = cx.default.get("project_persistent_buffers") == Some(true.into());
        let mut seeds = Vec::new();
        // Invocations a row (four steps each at least), then rows to fill
        // the workgroup.
        let widest = pow2_at_most(r.reduced / 4).clamp(1, 64);
        for per_row in [widest, (widest / 4).max(1)] {
            let rows = (max / per_row).clamp(1, 16).min(pow2_at_most(r.outer));
            // Rows kept on chip (split tails padded) must leave half the
            // workgroup memory free, else they are recomputed.
            let on_chip = 4 * (r.reduced + 64) * rows;
            let project = projects || on_chip > storage / 2;
            seeds.push(vec![
                ("project_persistent_buffers", project.into()),
                ("reduction_invocations", per_row.into()),
                ("cross_invocation_inner_reduction", (per_row > 1).into()),
                ("subgroup_inner_reduction", false.into()),
                ("rows_per_workgroup", rows.into()),
                ("launch.workgroup_size", workgroup(per_row * rows)),
            ]);
        }
        edited(cx.default, &seeds)
    }
}
