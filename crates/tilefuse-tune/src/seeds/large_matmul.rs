//! Large matmuls on GPUs that are not CPUs (both output sides at least
//! 64). On an H100 the full tunes of 512³, 1024³ and 2048³ (`benches/tune.py
//! --device gpu --efforts full`) found winners 1.2-2.2x the default. Their one
//! shared trait, the output tile stored through workgroup memory, is now
//! the default's (see `matmul_heuristics`). The rest varied with the size
//! and pays only in combination, which a quick tune (then of 24 trials)
//! did not reach: a k step of 8 in the register tile (alone 1.6x slower at 512³
//! and 1024³), thinner workgroup tiles for more workgroups (16 x 128 at
//! 1024³), k split four ways (512³), 8 x 8 register tiles in 128 x 128
//! workgroup tiles (2048³). Seeded with those, quick tunes reach or beat
//! the old full tunes there. lavapipe keeps its own default (8 x 16
//! register tiles, few workgroups for few cores): nothing here is
//! measured there.

use serde_json::Value;
use tilefuse_params::{GemmTile, HeuristicParams, SchedulerKind};
use tilefuse_schedulers::smem_epilogue_fits;

use super::{AutotunerHeuristic, DeviceKind, SeedContext, edited};

pub struct LargeMatmul;

/// The shorter output side from which a matmul is large.
const SIDE: u64 = 64;
/// Workgroups that fill a large GPU: two waves on an H100's 132
/// multiprocessors.
const FILL: u64 = 256;
/// The register tile's k step of every H100 winner.
const DEEP_K: u32 = 8;

impl AutotunerHeuristic for LargeMatmul {
    fn name(&self) -> &str {
        "large_matmul"
    }

    fn schedulers(&self) -> &[SchedulerKind] {
        &[SchedulerKind::Matmul]
    }

    fn devices(&self) -> &[DeviceKind] {
        &[DeviceKind::Gpu]
    }

    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String> {
        let large = |[m, n, k]: [u64; 3]| m.min(n) >= SIDE && k >= u64::from(DEEP_K);
        Ok(cx.features.matmul.is_some_and(large))
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let [m, n, k] = cx.features.matmul.ok_or("not a matmul")?;
        let HeuristicParams::Matmul(d) = cx.default else {
            return Err("not matmul params".into());
        };
        let (cta, warp) = (d.tile_sizes.cta_tile, d.tile_sizes.warp_tile);
        let tiles = |tm: u32, tn: u32| m.div_ceil(tm.into()) * n.div_ceil(tn.into());
        let deep = ("tile_sizes.instruction_tile.k", Value::from(DEEP_K));
        let rows = |tm: u32| {
            vec![
                ("tile_sizes.cta_tile.m", Value::from(tm)),
                ("tile_sizes.warp_tile.m", Value::from(warp.m.min(tm))),
                deep.clone(),
            ]
        };
        let mut seeds = vec![vec![deep.clone()]];
        // Thinner workgroup tiles, each halving a seed, until the device
        // has two rounds of workgroups.
        let mut tm = cta.m;
        while tiles(tm, cta.n) < 2 * FILL && tm / 2 >= 4 * d.tile_sizes.instruction_tile.m {
            tm /= 2;
            seeds.push(rows(tm));
        }
        // 8 x 8 register tiles where even 128 x 128 workgroup tiles fill it.
        let square = register_tiles_8x8(cta.k, warp.k);
        if tiles(128, 128) >= FILL && cx.device.limits.max_invocations_per_workgroup >= 256 {
            let mut edits: Vec<_> = square
                .iter()
                .map(|(p, v)| (p.as_str(), v.clone()))
                .collect();
            let fits = smem_epilogue_fits(GemmTile::new(128, 128, cta.k), cx.device);
            edits.push((
                "use_smem_epilogue",
                Value::from(d.use_smem_epilogue && fits),
            ));
            seeds.push(edits);
        }
        // Too few output tiles even so: split k.
        let splitk = splitk_to_fill(tiles(32, cta.n), k);
        if splitk > 1 {
            let mut edits = rows(32);
            edits.push(("splitk_factor", Value::from(splitk)));
            seeds.push(edits);
        }
        edited(cx.default, &seeds)
    }
}

/// 128 x 128 workgroup tiles of 8 x 8 register tiles (256 invocations)
/// in 16 x 16 warp tiles, as the 2048³ winner.
fn register_tiles_8x8(cta_k: u32, warp_k: u32) -> Vec<(String, Value)> {
    let levels = [
        ("cta_tile", GemmTile::new(128, 128, cta_k)),
        ("warp_tile", GemmTile::new(16, 16, warp_k)),
        ("instruction_tile", GemmTile::new(8, 8, DEEP_K)),
    ];
    let mut edits = Vec::new();
    for (level, t) in levels {
        for (side, v) in [("m", t.m), ("n", t.n), ("k", t.k)] {
            edits.push((format!("tile_sizes.{level}.{side}"), Value::from(v)));
        }
    }
    edits
}

/// The slices of k that bring `tiles` output tiles to [`FILL`]
/// workgroups, each slice keeping at least 128 of k; 1 when none do.
fn splitk_to_fill(tiles: u64, k: u64) -> u64 {
    let mut splitk = 1;
    while tiles * splitk < FILL && k.is_multiple_of(2 * splitk) && k / (2 * splitk) >= 128 {
        splitk *= 2;
    }
    splitk
}
