//! Register-tiled matmul tiles, shared by the GPU and CPU Vulkan
//! heuristics.

use tilefuse_params::GemmTile;

/// Workgroup, warp and instruction tiles of `registers` (rows, columns an
/// invocation), `sides` register tiles a workgroup side at most, and k
/// steps of `k_steps` (workgroup, instruction) at most; each capped by
/// the problem's sizes.
pub(crate) fn register_tiles(
    [m, n, k]: [u64; 3],
    registers: (u64, u64),
    sides: (u64, u64),
    k_steps: (u64, u64),
) -> (GemmTile, GemmTile, GemmTile) {
    let (ri, rj) = (pow2_at_most(m, registers.0), pow2_at_most(n, registers.1));
    let (tm, tn) = (
        ri * pow2_at_most(m.div_ceil(u64::from(ri)), sides.0),
        rj * pow2_at_most(n.div_ceil(u64::from(rj)), sides.1),
    );
    let kk = pow2_at_most(k, k_steps.0);
    let ik = pow2_at_most(k, k_steps.1);
    (
        GemmTile::new(tm, tn, kk),
        GemmTile::new((tm / 2).max(ri), (tn / 2).max(rj), kk),
        GemmTile::new(ri, rj, ik),
    )
}

/// The largest power of two at most `x` and at most `cap` (1 for 0).
pub(crate) fn pow2_at_most(x: u64, cap: u64) -> u32 {
    crate::pow2_at_most(x).min(cap) as u32
}
