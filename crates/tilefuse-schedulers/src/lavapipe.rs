//! The default heuristics' choices for a CPU Vulkan (lavapipe,
//! [`DeviceKind::CpuVulkan`]), which runs shaders on the host's cores: a
//! barrier or a workgroup-memory round trip costs what it costs a CPU, a
//! workgroup has a fixed cost of its own, and a loop of more than 65535
//! iterations ends silently. Discrete GPUs take the other branch of each
//! scheduler's heuristics; the numbers here are lavapipe's (`benches/sweep.py
//! --device gpu` and `benches/handwritten.py` on a machine without a GPU).
//!
//! [`DeviceKind::CpuVulkan`]: tilefuse_sched::DeviceKind::CpuVulkan

use tilefuse_params::{GemmTile, ReductionParams};

use crate::pow2_at_most;
use crate::tiles::register_tiles;

/// A matmul's tiles: 8x16 register tiles (four vec4 accumulators a row)
/// in workgroups of 8x8 of them, k steps of 16 and 2. They run 1024^3 in
/// 0.35x the time of the hand-written 4x4 kernel (`benches/handwritten.py`).
pub(crate) fn matmul_tiles(mnk: [u64; 3]) -> (GemmTile, GemmTile, GemmTile) {
    register_tiles(mnk, (8, 16), (8, 8), (16, 2))
}

/// Outer reductions: the columns a workgroup takes and the
/// invocations a column.
pub(crate) fn reduction_columns(
    p: &mut ReductionParams,
    columns: u64,
    r: u64,
    max: u64,
) -> (u64, u64) {
    let x = pow2_at_most(columns).clamp(1, max.min(64));
    // Narrow tensors: several invocations a column, and at most 16 columns
    // a workgroup (column sums of 64 to 200 columns 0.51-1.02x the time
    // with 64, of 33 and 50 0.77-1.01x with 32; 24 shapes of 1000 to
    // 16384 rows).
    let (x, y) = if columns < 4 * x && r >= 64 {
        let x = x.min(16);
        (x, (max / x).min(8))
    } else {
        (x, 1)
    };
    // An invocation that walks a whole column gains from four steps
    // unrolled (column sums of 1024² 0.53x the time, 4096² and 64x16384
    // 0.80x and 0.61x, softmax and batch norm over axis 0 0.70-0.81x);
    // several invocations a column lost by it (3000 x 20 to 3000 x 200:
    // 1.10-1.26x).
    if y == 1 && r >= 16 {
        p.unroll_factor_reduction = 4;
    }
    (x, y)
}

/// Rows of at most four subgroup steps (`per_step` elements
/// each): a workgroup takes up to 16 rows one after another, so that
/// lavapipe's cost per workgroup is paid once for them, keeping 64
/// workgroups or more and none ragged; and a row's steps are unrolled
/// when they divide it evenly. Softmax, layer norm, RMS norm, log-softmax
/// and row sums of 1000 to 16384 rows of 32 to 128: 0.60-0.90x the time
/// (median 0.86x over 110 shapes); rows of 100 (three ragged steps)
/// 0.74-1.10x.
pub(crate) fn short_rows(p: &mut ReductionParams, r: u64, per_step: u64, rows: u64) {
    let steps = r / per_step;
    if !(1..=4).contains(&steps) {
        return;
    }
    let shared = [16, 8, 4]
        .into_iter()
        .find(|&k| rows.is_multiple_of(k) && rows / k >= 64);
    p.rows_per_workgroup = shared.map(|k| k as u32);
    if r.is_multiple_of(per_step) && steps.is_power_of_two() {
        p.unroll_factor_reduction = steps as u32;
    }
}

/// Rows of 32 subgroup steps or more, in fours: an invocation
/// takes four rows' steps in turn rather than four steps of one row
/// (softmax, layer norm, RMS norm and log-softmax over rows of 1024 to
/// 8192: 0.71-1.00x the time, row sums 0.95-1.02x, median 0.93 over 35
/// shapes; rows of 256, 8 steps, lost 1.14-1.24x).
pub(crate) fn long_rows(p: &mut ReductionParams, r: u64, per_step: u64, rows: u64) {
    if r / per_step >= 32 && rows.is_multiple_of(4) {
        p.unroll_factor_reduction = 1;
        p.unroll_factor_iteration = 4;
    }
}
