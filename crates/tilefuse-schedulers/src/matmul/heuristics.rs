//! The matmul scheduler's default params per device kind.

use tilefuse_ir::Fusion;
use tilefuse_params::{GemmTile, MatmulParams};

use super::analysis::{fusion_has_batch, problem};
use tilefuse_sched::DeviceInfo;

/// Default params. The CPU device: invocations of 8 whole rows (the
/// executor's register-blocked micro-kernel), up to 256 rows a workgroup
/// that share each k step's rows of B from cache, workgroups in parallel
/// on threads (at least two per core; k split across the cores where the
/// output tiles are fewer than them); up to 32 rows stay in one workgroup
/// and the columns split instead (`cpu_tiles`). A CPU
/// Vulkan (lavapipe): 8×16 register tiles read straight from global memory,
/// no workgroup memory (its barriers are costly). Other GPUs: 4×4 register
/// tiles in a 64×128 workgroup tile, operands read from global memory too
/// (on an H100, 1024³ took 0.18 ms so and 1.5 ms with this scheduler's
/// workgroup-memory staging: scalar copies, a barrier pair per k step),
/// the output tile stored through workgroup memory.
/// `launch.workgroup_size` stays null: the scheduler derives it from the
/// tiles, so editing them keeps the params valid.
pub fn matmul_heuristics(fusion: &Fusion, device: &DeviceInfo) -> MatmulParams {
    let (m, n, k) = problem(fusion);
    let mut p = MatmulParams::default();
    let (cta, warp, instr) = if !device.is_gpu() {
        cpu_tiles(m, n, k, device.cores.max(1) as u64)
    } else {
        let max = device.limits.max_invocations_per_workgroup;
        let cpu_vulkan = device.adapter_type == "cpu";
        // lavapipe: 8x16 register tiles (four vec4 accumulators a row) run
        // 1024^3 in 0.35x the time of the hand-written 4x4 kernel
        // (BENCHMARKS.md); discrete GPUs keep 4x4 (registers are scarcer).
        let (ri, rj) = if cpu_vulkan {
            (pow2_at_most(m, 8), pow2_at_most(n, 16))
        } else {
            (pow2_at_most(m, 4), pow2_at_most(n, 4))
        };
        let (side_m, side_n) = match (cpu_vulkan, max) {
            (true, _) | (_, ..=255) => (8, 8),
            (_, 256..=511) => (16, 16),
            _ => (16, 32),
        };
        let (tm, tn) = (
            ri * pow2_at_most(m.div_ceil(u64::from(ri)), side_m),
            rj * pow2_at_most(n.div_ceil(u64::from(rj)), side_n),
        );
        let kk = pow2_at_most(k, if cpu_vulkan { 16 } else { 32 });
        let ik = pow2_at_most(k, if cpu_vulkan { 2 } else { 4 });
        (
            GemmTile::new(tm, tn, kk),
            GemmTile::new((tm / 2).max(ri), (tn / 2).max(rj), kk),
            GemmTile::new(ri, rj, ik),
        )
    };
    p.tile_sizes.cta_tile = cta;
    p.tile_sizes.warp_tile = warp;
    p.tile_sizes.instruction_tile = instr;
    // GPUs that are not CPUs store the output tile through workgroup
    // memory, the whole workgroup storing rows of it: on an H100 1.17x at
    // 2048³, 1.47x at 512³ and 1.55x at 1024³ (0.181 → 0.117 ms; BENCHMARKS.md,
    // thirty-fourth session). On lavapipe it was 2-9 % slower (256³, 512³).
    p.use_smem_epilogue =
        device.is_gpu() && device.adapter_type != "cpu" && smem_epilogue_fits(cta, device);
    if !device.is_gpu() && !fusion_has_batch(fusion) {
        p.splitk_factor = cpu_splitk(m, n, k, cta, device.cores);
    }
    p.supported_vec_size.epilogue = [4u32, 2, 1]
        .into_iter()
        .find(|&v| instr.n.is_multiple_of(v) && n.is_multiple_of(u64::from(v)))
        .unwrap_or(1);
    p
}

/// The CPU device's tiles: `(cta, warp, instruction)`.
fn cpu_tiles(m: u64, n: u64, k: u64, cores: u64) -> (GemmTile, GemmTile, GemmTile) {
    let rows = pow2_at_most(m, 8);
    let kk = pow2_at_most(k, 128);
    // Few rows: every workgroup of rows would stream all of B, so the
    // rows stay in one and the columns are split over the cores instead
    // (16 x 4096 x 4096 on 2 cores: 8.96 ms as two workgroups of 8 rows,
    // 6.3-6.5 as two of 2048 columns, numpy 6.5).
    if m <= SKINNY_ROWS && n >= 2 * cores * MIN_COLUMNS {
        let all_rows = rows.max(m.next_power_of_two() as u32);
        let columns = pow2_at_most(n / (2 * cores), 4096);
        let cta = GemmTile::new(all_rows, columns, kk);
        return (cta, cta, GemmTile::new(rows, columns, 1));
    }
    // Up to 256 rows a workgroup in k steps of 128: the executor copies
    // each k step's strip of B (k x 64) once per workgroup, so more rows a
    // workgroup copy B fewer times, and a longer k step loads and stores
    // the accumulators less often (1024^3 on one core of an AVX-512 Xeon:
    // 19.0 ms at 64 rows and k 64, 16.1 at 256 and 128, 18.1 at 512 and
    // 128, where the rows' outputs no longer stay in L2; numpy 14.0).
    let strip = cpu_strip(n);
    let per_core = m.div_ceil(2 * cores);
    let tile_rows = rows.max(pow2_at_most(per_core, 256));
    let cta = GemmTile::new(tile_rows, strip, kk);
    (cta, cta, GemmTile::new(rows, strip, 1))
}

/// The largest power of two at most `x`, and at most `cap`.
fn pow2_at_most(x: u64, cap: u64) -> u32 {
    crate::pow2_at_most(x).min(cap) as u32
}

/// Rows few enough that a matmul streams B at memory speed (2m flops per
/// element of B): the CPU device keeps them in one workgroup.
const SKINNY_ROWS: u64 = 32;
/// The narrowest column slice a core takes where the rows are few.
const MIN_COLUMNS: u64 = 256;

/// Whether a workgroup's f32 output tile fits in its workgroup memory.
pub fn smem_epilogue_fits(cta: GemmTile, device: &DeviceInfo) -> bool {
    u64::from(cta.m) * u64::from(cta.n) * 4 <= u64::from(device.limits.max_workgroup_storage_bytes)
}

/// Slices of k for the CPU device: where the output tiles are fewer than
/// the cores, enough slices to give each core one, while each keeps at
/// least `MIN_SLICE` of k (the sum stage reads every slice's partial
/// products once). One workgroup of 8 x 256 x 16384 ran on one thread in
/// 1.13 ms and in 0.69 with two slices on two cores; numpy 2.0.
fn cpu_splitk(m: u64, n: u64, k: u64, cta: GemmTile, cores: usize) -> u32 {
    let tiles = m.div_ceil(u64::from(cta.m)) * n.div_ceil(u64::from(cta.n));
    let mut splitk = 1u64;
    while tiles * splitk < cores as u64
        && k.is_multiple_of(2 * splitk)
        && k / (2 * splitk) >= MIN_SLICE
    {
        splitk *= 2;
    }
    splitk as u32
}

/// The shortest slice of k `cpu_splitk` makes.
const MIN_SLICE: u64 = 512;

/// Columns of C an invocation takes on the CPU device by default: whole
/// rows, up to 4096.
pub(super) fn cpu_strip(n: u64) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX).min(4096)
}

#[cfg(test)]
mod tests {
    use super::{GemmTile, cpu_splitk, cpu_tiles};

    /// Up to 32 rows: one workgroup of rows, the columns split.
    #[test]
    fn few_rows_stay_in_one_workgroup_and_the_columns_split() {
        // 16 rows on 2 cores: one slice of rows, four of 1024 columns
        // (two a core), so B is streamed once, not once a slice of rows.
        let (cta, warp, instr) = cpu_tiles(16, 4096, 4096, 2);
        assert_eq!((cta.m, cta.n, cta.k), (16, 1024, 128));
        assert_eq!(warp, cta);
        assert_eq!((instr.m, instr.n, instr.k), (8, 1024, 1));
        // 24 rows: one ragged tile of 32.
        assert_eq!(cpu_tiles(24, 4096, 4096, 2).0.m, 32);
        // Too few columns to split, or rows enough to split: as before.
        assert_eq!(cpu_tiles(16, 512, 4096, 2).0.n, 512);
        let (cta, _, _) = cpu_tiles(256, 4096, 4096, 2);
        assert_eq!((cta.m, cta.n), (64, 4096));
    }

    /// Slices of k only where the output tiles leave cores idle, and none
    /// shorter than 512.
    #[test]
    fn the_cpu_splits_k_for_idle_cores() {
        let tile = GemmTile::new(8, 256, 128);
        assert_eq!(cpu_splitk(8, 256, 16384, tile, 2), 2);
        assert_eq!(cpu_splitk(8, 256, 16384, tile, 16), 16);
        assert_eq!(cpu_splitk(8, 256, 4096, tile, 16), 8);
        assert_eq!(cpu_splitk(8, 256, 1000, tile, 2), 1);
        assert_eq!(cpu_splitk(16, 256, 16384, tile, 2), 1);
        assert_eq!(cpu_splitk(8, 512, 16384, tile, 4), 2);
    }
}
