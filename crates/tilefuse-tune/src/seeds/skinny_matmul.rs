//! Skinny matmuls (one of `m`, `n` at most 16, the other at least 128:
//! GEMV-like shapes, small-batch projections). The default tiles are
//! square-ish, so most of each workgroup tile along the small side is
//! padding: fit the tile to the small side, spend the invocations along
//! the long side, and split `k` when there are too few output tiles to fill
//! the device.

use serde_json::Value;
use tilefuse_params::{HeuristicParams, SchedulerKind};

use super::{AutotunerHeuristic, DeviceKind, SeedContext, edited};

pub struct SkinnyMatmul;

/// The small side's bound and the long side's minimum.
const SMALL: u64 = 16;
const LONG: u64 = 128;

impl AutotunerHeuristic for SkinnyMatmul {
    fn name(&self) -> &str {
        "skinny_matmul"
    }

    fn schedulers(&self) -> &[SchedulerKind] {
        &[SchedulerKind::Matmul]
    }

    fn devices(&self) -> &[DeviceKind] {
        &[DeviceKind::Gpu, DeviceKind::CpuVulkan]
    }

    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String> {
        Ok(cx
            .features
            .matmul
            .is_some_and(|[m, n, _]| m.min(n) <= SMALL && m.max(n) >= LONG))
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let [m, n, k] = cx.features.matmul.ok_or("not a matmul")?;
        let (small, long) = if m <= n { ("m", "n") } else { ("n", "m") };
        let side = m.min(n).next_power_of_two();
        let max = u64::from(cx.device.limits.max_invocations_per_workgroup);
        let mut seeds = Vec::new();
        // One register row along the small side, four along the long one:
        // side × long_tile / 4 invocations.
        for long_tile in [64u64, 128].into_iter().filter(|t| side * t / 4 <= max) {
            let mut edits: Vec<(String, Value)> = Vec::new();
            for level in ["cta_tile", "warp_tile"] {
                edits.push((format!("tile_sizes.{level}.{small}"), side.into()));
                edits.push((format!("tile_sizes.{level}.{long}"), long_tile.into()));
            }
            edits.push((format!("tile_sizes.instruction_tile.{small}"), 1.into()));
            edits.push((format!("tile_sizes.instruction_tile.{long}"), 4.into()));
            seeds.push(edits.clone());
            if k >= 1024 {
                edits.push(("splitk_factor".into(), 4.into()));
                seeds.push(edits);
            }
        }
        let seeds: Vec<Vec<(&str, Value)>> = seeds
            .iter()
            .map(|e| e.iter().map(|(p, v)| (p.as_str(), v.clone())).collect())
            .collect();
        edited(cx.default, &seeds)
    }
}
