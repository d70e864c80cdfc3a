//! The matmul scheduler's default params per device kind.

use tilefuse_ir::Fusion;
use tilefuse_params::{GemmTile, MatmulParams};

use super::analysis::{batches, fusion_has_batch, problem};
use crate::lavapipe;
use crate::tiles::{pow2_at_most, register_tiles};
use tilefuse_sched::{DeviceInfo, DeviceKind};

/// Default params. The CPU device: invocations of 8 whole rows (the
/// executor's register-blocked micro-kernel), up to 256 rows a workgroup
/// (512 with AVX2) that share each k step's rows of B from cache, the
/// columns cut before the rows (`cpu_tiles`), workgroups in parallel on threads (at least two
/// per core; k split across the cores where the output tiles are fewer
/// than them). A CPU Vulkan (lavapipe): 8×16 register tiles read straight from global memory,
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
        // Two workgroups a core, the batch's matrices counted.
        let workgroups = (2 * device.cores.max(1) as u64).div_ceil(batches(fusion).max(1));
        let blocking = CpuBlocking::for_width(device.simd_width);
        cpu_tiles([m, n, k], workgroups, blocking)
    } else {
        match device.kind() {
            DeviceKind::CpuVulkan => lavapipe::matmul_tiles([m, n, k]),
            _ => gpu_tiles([m, n, k], device.limits.max_invocations_per_workgroup),
        }
    };
    p.tile_sizes.cta_tile = cta;
    p.tile_sizes.warp_tile = warp;
    p.tile_sizes.instruction_tile = instr;
    // GPUs that are not CPUs store the output tile through workgroup
    // memory, the whole workgroup storing rows of it: on an H100 1.17x at
    // 2048³, 1.47x at 512³ and 1.55x at 1024³ (0.181 → 0.117 ms;
    // `benches/tune.py --device gpu --case matmul`). On lavapipe it was 2-9 % slower (256³, 512³).
    p.use_smem_epilogue = device.kind() == DeviceKind::Gpu && smem_epilogue_fits(cta, device);
    if !device.is_gpu() && !fusion_has_batch(fusion) {
        p.splitk_factor = cpu_splitk(m, n, k, cta, device.cores);
    }
    p.supported_vec_size.epilogue = [4u32, 2, 1]
        .into_iter()
        .find(|&v| instr.n.is_multiple_of(v) && n.is_multiple_of(u64::from(v)))
        .unwrap_or(1);
    p
}

/// The CPU device's tiles: `(cta, warp, instruction)`. Invocations of
/// up to 8 whole rows (the executor's micro-kernel); the output is cut
/// into slices of rows and of columns by [`cpu_slices`], each slice of
/// rows a whole number of invocations, each of columns a whole number of
/// AVX-512 vectors, both as even as that allows; k in steps of up to
/// `blocking.k_step`.
fn cpu_tiles(
    [m, n, k]: [u64; 3],
    workgroups: u64,
    blocking: CpuBlocking,
) -> (GemmTile, GemmTile, GemmTile) {
    let (m, n) = (m.max(1), n.max(1)); // empty outputs take one tile
    let rows = pow2_at_most(m, 8);
    let (row_slices, column_slices) = cpu_slices([m, n, k], u64::from(rows), workgroups, blocking);
    let tile_rows = m.div_ceil(row_slices).next_multiple_of(u64::from(rows));
    let columns = if column_slices == 1 {
        u64::from(cpu_strip(m, n))
    } else {
        n.div_ceil(column_slices).next_multiple_of(LANES)
    };
    let narrow = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let k_step = pow2_at_most(k, blocking.k_step);
    let cta = GemmTile::new(narrow(tile_rows), narrow(columns), k_step);
    (cta, cta, GemmTile::new(rows, narrow(columns), 1))
}

/// How many slices of rows and of columns the CPU device cuts C into, for
/// `workgroups` workgroups (two a core, fewer for a batch of matrices) or
/// more. Every slice of rows streams all of B and every slice of columns
/// all of A, so rows stay together up to `blocking.max_rows` and the
/// columns are cut first; where k takes more than one step, a tile of C
/// stays within `blocking.tile_bytes`, as the micro-kernel loads and
/// stores it once a step (4096 x 64 x 4096, one step, ran in 14.8 ms in
/// tiles of 4096 columns and in 16.6 in tiles of 512); rows are cut further only where the columns
/// are too few to cut. One row (a vector-matrix product) takes whole rows
/// of B where k is long enough for `cpu_splitk` to share it over the cores:
/// the micro-kernel then streams B row after row (1 x 4096 x 4096: 2.2-3.5
/// ms in four slices of 1024 columns, 1.2-1.6 so; numpy 1.1-1.6). On 2 cores
/// against rows cut alone (`benches/fusions.py --only matmul`): 48 x 4096 x
/// 4096 34-38 → 11.5 ms, 128 x 4096 x 4096 36-37 → 24-25 (numpy 11.4-12.0
/// and 24.3-25.4).
fn cpu_slices(
    [m, n, k]: [u64; 3],
    rows: u64,
    workgroups: u64,
    blocking: CpuBlocking,
) -> (u64, u64) {
    let whole_rows = n.div_ceil(u64::from(cpu_strip(m, n)));
    if m == 1 && k >= MIN_SLICE * workgroups / 2 {
        return (1, whole_rows);
    }
    let row_slices = m.div_ceil(blocking.max_rows);
    let tile_bytes = 4 * m.div_ceil(row_slices) * n;
    let for_cache = if k > blocking.k_step {
        tile_bytes.div_ceil(blocking.tile_bytes)
    } else {
        1
    };
    let column_slices = (workgroups.div_ceil(row_slices))
        .max(for_cache)
        .max(whole_rows)
        .min((n / MIN_COLUMNS).max(1));
    let row_slices = (row_slices.max(workgroups.div_ceil(column_slices))).min(m.div_ceil(rows));
    (row_slices, column_slices)
}

/// A GPU's tiles: 4x4 register tiles (registers are scarcer than on a
/// CPU Vulkan, see [`lavapipe::matmul_tiles`]), workgroups of 8x8 to
/// 16x32 of them by the invocations a workgroup may have.
fn gpu_tiles(mnk: [u64; 3], max_invocations: u32) -> (GemmTile, GemmTile, GemmTile) {
    let sides = match max_invocations {
        ..=255 => (8, 8),
        256..=511 => (16, 16),
        _ => (16, 32),
    };
    register_tiles(mnk, (4, 4), sides, (32, 4))
}

/// How the CPU device blocks a matmul for its vector width. The
/// micro-kernel packs each k step's B in strips (k × 64 columns with
/// AVX-512, 16 without; `gemm/blocked.rs`) that stay in L1 across the
/// tile's rows, so a strip stays within 32 KB: k steps of 128 with
/// AVX-512, 512 with AVX2. Longer steps load and store the tile of C fewer
/// times: on a 2-core Zen 3 (AVX2), steps of 512 against 128 took 1024^3
/// in 0.92x the time, 512^3 0.60x, 64 x 1024 x 4096 0.70x (`benches/fusions.py
/// --only matmul`).
#[derive(Clone, Copy, Debug)]
struct CpuBlocking {
    /// The longest k step.
    k_step: u64,
    /// The most rows a workgroup takes: they share each k step's strips
    /// of B, packed once a workgroup (1024^3 on one core of an AVX-512
    /// Xeon: 19.0 ms at 64 rows and k 64, 16.1 at 256 and 128, 18.1 at
    /// 512 and 128).
    max_rows: u64,
    /// The most bytes of C a workgroup's tile holds where k takes more than
    /// one step. AVX-512: half of a 1 MB L2, beside the strips of A and B
    /// (1024^3, interleaved: 12.4-15.3 ms in tiles of 256 rows of 1024
    /// columns, 1 MB, bimodal; 10.9-11.1 in 512), measured before the
    /// blocked loops of `gemm/blocked.rs`, which pass over C once a strip
    /// and step: with them, on a 2-core Zen 3 (AVX2), tiles of 512 rows
    /// and 1 MB (B packed half as often) took 1024^3 in 0.95x the time
    /// (`benches/ab_builds.py`, matmul 1024x1024x1024). AVX-512 keeps 256 rows and
    /// 512 KB: on a 2-core Emerald Rapids, 512 rows and 1 MB took 1024^3
    /// in 0.98-0.99x the time but 512^3 in 1.10x, 1000^3 and 4096 x 1024
    /// x 1024 in 0.97x (`benches/ab_builds.py`, the same cases).
    tile_bytes: u64,
}

impl CpuBlocking {
    fn for_width(simd_width: u32) -> CpuBlocking {
        let avx512 = simd_width >= 16;
        let strip: u64 = if avx512 { 64 } else { 16 };
        CpuBlocking {
            k_step: (32 << 10) / (4 * strip),
            max_rows: if avx512 { 256 } else { 512 },
            tile_bytes: if avx512 { 512 << 10 } else { 1 << 20 },
        }
    }
}

/// The narrowest slice of columns a CPU workgroup takes (eight blocks of
/// the micro-kernel's 16).
const MIN_COLUMNS: u64 = 128;
/// f32 lanes of an AVX-512 vector: slices of columns are whole vectors.
const LANES: u64 = 16;

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
/// rows, up to 4096, or up to 16384 (64 KB, within L2) for one row, which
/// then reads B row after row as one stream (1 x 8192 x 8192 on 2 cores:
/// 8.0 ms in halves of 4096 columns, 5.3-5.4 in whole rows; numpy 5.5).
pub(super) fn cpu_strip(m: u64, n: u64) -> u32 {
    let cap = if m == 1 { 16384 } else { 4096 };
    u32::try_from(n.max(1)).unwrap_or(u32::MAX).min(cap)
}

#[cfg(test)]
mod tests {
    use super::{CpuBlocking, GemmTile, cpu_splitk, cpu_tiles};

    /// Rows stay in one workgroup up to 256, the columns are cut first (two
    /// workgroups a core, tiles of C within 512 KB), rows only where the
    /// columns are too few.
    #[test]
    fn rows_stay_together_and_the_columns_are_cut_first() {
        let tiles = |m, n, k| {
            let (cta, warp, instr) = cpu_tiles([m, n, k], 4, CpuBlocking::for_width(16));
            assert_eq!(warp, cta);
            assert_eq!((instr.n, instr.k, cta.k), (cta.n, 1, 128.min(k as u32)));
            (cta.m, cta.n, instr.m)
        };
        // Few rows: one slice of rows, four of columns (two a core), so B
        // is streamed once, not once a slice of rows.
        assert_eq!(tiles(16, 4096, 4096), (16, 1024, 8));
        assert_eq!(tiles(24, 4096, 4096), (24, 1024, 8));
        assert_eq!(tiles(48, 4096, 4096), (48, 1024, 8));
        // One row: whole rows, k split over the cores (`cpu_splitk`), where
        // k is long enough; else the columns are cut.
        assert_eq!(tiles(1, 4096, 4096), (1, 4096, 1));
        assert_eq!(tiles(1, 4096, 512), (1, 1024, 1));
        assert_eq!(tiles(1, 8192, 8192), (1, 8192, 1));
        assert_eq!(tiles(1, 32768, 8192), (1, 16384, 1));
        // Tiles of C within 512 KB: 256 rows of 512 columns.
        assert_eq!(tiles(1024, 1024, 1024), (256, 512, 8));
        assert_eq!(tiles(256, 4096, 4096), (256, 512, 8));
        // One k step: C is loaded and stored once, whatever its tile.
        assert_eq!(tiles(4096, 4096, 64), (256, 4096, 8));
        // Ragged: slices as even as whole invocations and vectors allow.
        assert_eq!(tiles(300, 1000, 1000), (152, 512, 8));
        // Columns too few to cut: the rows are cut instead.
        assert_eq!(tiles(4096, 16, 4096), (256, 16, 8));
        assert_eq!(tiles(128, 128, 64), (32, 128, 8));
        // A batch of matrices for the workgroups: one tile a matrix.
        assert_eq!(
            cpu_tiles([128, 128, 64], 1, CpuBlocking::for_width(16)).0.m,
            128
        );
        assert_eq!(tiles(16, 512, 4096), (16, 128, 8));
        assert_eq!(tiles(16, 200, 4096), (8, 200, 8));
        // Without AVX-512 the strips of B are 16 columns wide: k steps of
        // 512, and tiles of up to 512 rows and 1 MB.
        let avx2 = |m, n, k| cpu_tiles([m, n, k], 4, CpuBlocking::for_width(8)).0;
        assert_eq!(avx2(1024, 1024, 1024), GemmTile::new(512, 512, 512));
        assert_eq!(avx2(2048, 2048, 2048), GemmTile::new(512, 512, 512));
        assert_eq!(avx2(256, 4096, 4096), GemmTile::new(256, 1024, 512));
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
