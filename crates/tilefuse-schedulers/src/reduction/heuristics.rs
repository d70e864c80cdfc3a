//! The reduction scheduler's default params per device kind.

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::ReductionParams;

use super::topology::{Topology, topology};
use super::{LOOPS, UNROLL_ROWS};
use crate::step::StepError;
use crate::{largest_divisor, lavapipe, pow2_at_most};
use tilefuse_sched::lowering::SHORT_NEST;
use tilefuse_sched::{DeviceInfo, DeviceKind};

/// Default params. The CPU device: rows spread over threads by
/// workgroups of up to 1024 rows (see [`rows_per_workgroup`]), each
/// reduced serially as SIMD lanes, intermediates kept per row (rows of
/// 257 to 2048 through several nests: each nest over all rows before the
/// next); outer reductions in column blocks a thread each, or, too narrow
/// for that, all columns in one block and the rows spread over threads.
/// GPUs: inner reductions spread each row over up to 256 invocations
/// whose partials fold as a tree in workgroup memory, in one persistent
/// kernel, with vec4 loads. A CPU Vulkan (lavapipe) pays for every barrier:
/// it gets one subgroup a row, partials shuffled together and rows
/// recomputed (no workgroup memory, no barrier) where it has subgroups and
/// rows are not too long, up to 16 short rows a workgroup (see
/// [`lavapipe::short_rows`]); otherwise fewer, larger steps per invocation,
/// within its per-invocation loop budget, and one dispatch per reduction.
/// Outer reductions give each invocation columns (coalesced) and several
/// invocations per column when columns alone would leave the GPU idle.
pub fn reduction_heuristics(fusion: &Fusion, device: &DeviceInfo) -> ReductionParams {
    let topo = topology(fusion).expect("can_schedule checked the fusion");
    let mut p = ReductionParams {
        fastest_dim: topo.inner() == 1,
        persistent_kernel: true,
        project_persistent_buffers: true,
        ..ReductionParams::default()
    };
    let r = topo.reduced();
    let max = u64::from(device.limits.max_invocations_per_workgroup);
    if !device.is_gpu() {
        return cpu_heuristics(p, fusion, &topo, device);
    }
    let cpu_vulkan = device.kind() == DeviceKind::CpuVulkan;
    if p.fastest_dim {
        let v = [4u32, 2, 1]
            .into_iter()
            .find(|&v| r.is_multiple_of(u64::from(v)))
            .unwrap_or(1);
        p.vectorization_factor_reduction = v;
        let v = u64::from(v);
        let subgroup = device
            .subgroup_sizes
            .map_or(0, |(min, _)| u64::from(min).min(max));
        // Discrete GPUs: many invocations a row, partials folded as a tree
        // in workgroup memory, four unrolled steps each (softmax 4096x4096
        // on an H100 in 0.056 ms with 256, 0.103 with one subgroup of 32 and
        // shuffles; layernorm 0.055, 0.098; the same run). lavapipe: one
        // subgroup a row, shuffled (softmax 42 ms, 80 with 128 invocations
        // a row); without subgroups, a dispatch per reduction (a softmax ran
        // 2.3x faster so than as one persistent kernel, `benches/sweep.py softmax`).
        let shuffles =
            cpu_vulkan && subgroup >= 2 && r >= subgroup * v && r / (subgroup * v) <= 1024;
        let (t, unroll_from) = match (cpu_vulkan, shuffles) {
            (false, _) => (pow2_at_most(r / (4 * v)).clamp(1, max.min(256)), Some(4)),
            (true, true) => (subgroup, Some(8)),
            (true, false) => (pow2_at_most(r / 32).clamp(1, max.min(256)), None),
        };
        p.cross_invocation_inner_reduction = t > 1;
        p.subgroup_inner_reduction = shuffles;
        p.compile.use_subgroups = shuffles;
        p.reduction_invocations = t as u32;
        p.launch.workgroup_size = Some([t as u32, 1, 1]);
        if unroll_from.is_some_and(|steps| r / (t * v) >= steps) {
            p.unroll_factor_reduction = 4;
        }
        if shuffles {
            lavapipe::short_rows(&mut p, r, t * v, topo.outer());
            lavapipe::long_rows(&mut p, r, t * v, topo.outer());
        }
        p.persistent_kernel = !cpu_vulkan || shuffles;
        // A discrete GPU keeps the exp / centred row on chip when it fits
        // with room to spare (split tails pad it); lavapipe recomputes it.
        let fits = 4 * r <= u64::from(device.limits.max_workgroup_storage_bytes) / 4;
        p.project_persistent_buffers = cpu_vulkan || t == 1 || !fits;
    } else {
        let columns = topo.inner();
        let (x, y) = if cpu_vulkan {
            lavapipe::reduction_columns(&mut p, columns, r, max)
        } else {
            // A discrete GPU wants a hundred thousand invocations in
            // hundreds of workgroups: column sums of 4096x4096 on an H100
            // took 6.3 ms with one invocation per column (64 columns a
            // workgroup), 0.035 ms with 32 per column, 16 columns a
            // workgroup and steps unrolled by 4 (softmax: 0.29 ms).
            let x = pow2_at_most(columns / 256).clamp(1, max.min(64));
            let y = pow2_at_most((1 << 17) / columns.max(1))
                .min(r / 64)
                .clamp(1, (max / x).min(32));
            if r / y >= 16 {
                p.unroll_factor_reduction = 4;
            }
            (x, y)
        };
        p.cross_invocation_outer_reduction = y > 1;
        p.reduction_invocations = y as u32;
        p.launch.workgroup_size = Some([(x * y) as u32, 1, 1]);
        p.rows_per_workgroup = Some(x as u32);
        p.schedule_3d = topo.three_d();
    }
    within_loop_budget(within_unroll_budget(p, fusion, device), fusion, device)
}

/// `p`, with an outer reduction's rows spread over workgroups where an
/// invocation's walk down its columns would pass the device's loop budget
/// (lavapipe stops a loop silently after 65535 iterations: a max over the
/// first four axes of 32 x 32 x 100 x 32 x 8, 8 invocations a column,
/// was refused).
fn within_loop_budget(p: ReductionParams, fusion: &Fusion, device: &DeviceInfo) -> ReductionParams {
    if p.fastest_dim || !refused_for(LOOPS, fusion, &p, device) {
        return p;
    }
    let spread = ReductionParams {
        cross_workgroup_outer_reduction: true,
        persistent_kernel: false,
        schedule_3d: false,
        ..p.clone()
    };
    match super::schedule_reduction(fusion, &spread, device) {
        Ok(_) => spread,
        Err(_) => p,
    }
}

/// `p`, with its rows not unrolled where the code the copies make would
/// exceed a WGSL stage's budget: rows that are not contiguous (a
/// full-shape output of a reduction over scattered axes writes each row
/// in loops of its own, and four copies of those passed the budget before
/// they were split across the row's invocations).
fn within_unroll_budget(
    mut p: ReductionParams,
    fusion: &Fusion,
    device: &DeviceInfo,
) -> ReductionParams {
    if p.unroll_factor_iteration > 1 && refused_for(UNROLL_ROWS, fusion, &p, device) {
        p.unroll_factor_iteration = 1;
    }
    p
}

/// Whether the scheduler refuses `p` for `field` (the heuristics' check
/// of their own params against the limits the schedule meets).
fn refused_for(field: &str, fusion: &Fusion, p: &ReductionParams, device: &DeviceInfo) -> bool {
    super::schedule_reduction(fusion, p, device)
        .is_err_and(|e| matches!(e, StepError::Params(e) if e.path == field))
}

/// The CPU device's defaults (see [`reduction_heuristics`]).
fn cpu_heuristics(
    mut p: ReductionParams,
    fusion: &Fusion,
    topo: &Topology,
    device: &DeviceInfo,
) -> ReductionParams {
    let threads = device.cores.max(1) as u64;
    let nest_by_nest = p.fastest_dim
        && topo.reduced() > SHORT_NEST
        && !row_by_row(topo.reduced(), topo.outer().saturating_mul(topo.reduced()))
        && !one_nest(fusion);
    p.persistent_kernel = !nest_by_nest;
    let rows = if p.fastest_dim {
        rows_per_workgroup(fusion, topo, threads, nest_by_nest)
    } else {
        1
    };
    p.launch.workgroup_size = Some([rows as u32, 1, 1]);
    p.reduction_invocations = 1;
    p.project_persistent_buffers = false;
    if !p.fastest_dim {
        // Column blocks a thread each, 1024 at most (4096² column sums:
        // 2.4 ms with 1024 a block on 2 threads, 3.3 with 512, 2.8 with
        // 4096; numpy 2.1), each reduced row by row in its own nest (see
        // the module docs).
        let w = narrow_columns(&mut p, topo, threads);
        p.launch.workgroup_size = Some([w as u32, 1, 1]);
        p.rows_per_workgroup = Some(w as u32);
        p.persistent_kernel = false;
    }
    p
}

/// The column block of an outer reduction on the CPU. Columns that would
/// give a thread less than a block of 1024 go in one block (of any width)
/// for each index of the axes before the reduced ones; where those blocks
/// are too few to share among the threads, the rows spread over them
/// instead: each workgroup reduces a slice of rows into partials that a
/// second stage combines, and each pointwise nest takes the same slices
/// (`nest::spread_rows`; 2 threads, column sums: 32768 x 256
/// took 2.3 ms in two column blocks, 0.8 so; 131072 x 64 3.0 and 0.8;
/// 8192 x 1024 1.6 and 0.8; 1024 x 300 0.047 and 0.035; numpy 0.04-2.4.
/// Softmax and batch norm over the columns of 16384 x 256 11.6 and 9.3 ms,
/// 4.3 and 4.6; of 65536 x 64 23 and 21, 4.2 and 7.1; numpy 8-15. Sums
/// over the middle axis of 64 x 512 x 256: 1.7 ms in blocks of 128, 0.65
/// in blocks of 256, 1.3 spread; numpy 1.7).
fn narrow_columns(p: &mut ReductionParams, topo: &Topology, threads: u64) -> u64 {
    let split = pow2_at_most((topo.inner() / threads).clamp(1, 1024));
    let whole = topo.inner().clamp(1, 1024);
    let blocks = topo.outer() * topo.inner().div_ceil(whole);
    if split == 1024 {
        return split;
    }
    // No blocks (no output elements) leave no rows to spread.
    if blocks == 0 || blocks >= 4 * threads {
        return whole;
    }
    let Some(groups) = row_groups(topo.reduced()) else {
        return split;
    };
    p.cross_workgroup_outer_reduction = true;
    p.launch.grid = Some([blocks as u32, groups as u32, 1]);
    whole
}

/// The workgroups an outer reduction's `rows` spread over on the CPU
/// (see `cpu_heuristics`): the most, up to 256, that take 16 rows or more
/// each and divide the rows evenly (an uneven last slice runs row by row:
/// 1000 x 128 took 6x the time of 1024 x 128); `None` where no such count
/// is 2 or more.
fn row_groups(rows: u64) -> Option<u64> {
    largest_divisor(rows, 2..=(rows / 16).min(256))
}

/// Whether the CPU device runs the nests of rows longer than `SHORT_NEST`
/// row by row through every nest (sharing a row in cache, the next one
/// prefetched: `cpu/prefetch.rs`) rather than nest by nest over all rows,
/// for rows of `reduced` in `elements` in all. Row by row reads the input
/// once but pays each nest's start once a row; nest by nest reads it once
/// a nest, from cache where it fits there. Softmax, layer norm, RMS norm
/// and log-softmax on 2 threads of an AVX-512 Emerald Rapids (`benches/ab_builds.py`),
/// row by row against nest by nest: rows of 768 to 2048 in 2^21 to 2^24
/// elements 0.59-1.04x the time (2^23 and 2^24: 0.59-1.00x), in 2^18 and
/// 2^20 0.82-1.17x; rows of 512 in 2^21 1.06-1.12x, in 2^22 0.89-1.08x,
/// in 2^24 0.83-0.99x. Past 2048, row by row at every size (rows of 4096
/// took 1.05-1.31x the time nest by nest, before the prefetch).
fn row_by_row(reduced: u64, elements: u64) -> bool {
    let from = if reduced <= 512 { 1 << 23 } else { 1 << 21 };
    reduced > 2048 || elements >= from
}

/// Rows a CPU workgroup reduces, for rows reduced along their fastest
/// dimension: a workgroup of one costs more than a short row (row sums
/// of 65536 x 16 on 2 threads: 5.2 ms one a workgroup, 1.8 with 128; 1000
/// x 16: 0.10 ms, 0.01 with 64). Up to `MAX_ROWS` share one, as many as
/// keep the workgroup's elements within 32768 (its intermediates in L2:
/// 1024 rows of 96 or 128 took 3-7x the time of 128) and four workgroups
/// a thread (fewer would idle threads). Rows of more than
/// `SHORT_NEST` run each of their nests a row at a time (the CPU lowering
/// distributes only shorter rows' nests), so they share a workgroup only where
/// each nest runs over all rows before the next: a lone reduction (8192 x
/// 512 row sums 0.7x the time) or `nest_by_nest` (a persistent softmax's
/// rows over its intermediates cost 1.03-1.08x).
fn rows_per_workgroup(fusion: &Fusion, topo: &Topology, threads: u64, nest_by_nest: bool) -> u64 {
    if topo.reduced() > SHORT_NEST && !one_nest(fusion) && !nest_by_nest {
        return 1;
    }
    let rows = pow2_at_most((32768 / topo.reduced().max(1)).min(topo.outer() / (4 * threads)));
    within_a_run(rows.min(MAX_ROWS), topo)
}

/// The most rows a CPU workgroup reduces. Softmax, layer norm, RMS norm,
/// log-softmax and row sums of 4096 to 65536 rows on 2 threads (Zen 3),
/// against 128 rows a workgroup (the cap before): rows of 16 and 32, in
/// 1024, 0.67-1.02x the time (median 0.89); rows of 64, in 512,
/// 0.90-1.05x (median 0.97); rows of 96 and 128, in 256, 0.87-1.07x
/// (median 1.00) (`benches/sweep.py softmax --device gpu`).
const MAX_ROWS: u64 = 1024;

/// `rows`, or where more axes come before it, the most rows up to `rows`
/// that divide the last of them and number at least 8: a workgroup's rows
/// then lie within one run of that axis. Across runs, the rows' indices
/// keep a div and a mod in the row, and the executor runs them a row at a
/// time (row sums of 64 x 16 x 16 x 64: 0.83 ms in workgroups of 128
/// rows, 0.10 in 16; of 8 x 16 x 128 x 64 with the middle axes swapped:
/// 0.87 and 0.24; numpy 0.43).
fn within_a_run(rows: u64, topo: &Topology) -> u64 {
    let first = topo.axes[0];
    let Some(&run) = topo.shape[..first].last().filter(|_| first >= 2) else {
        return rows;
    };
    largest_divisor(run, 8..=rows.min(run)).unwrap_or(rows)
}

/// Whether `fusion` is one reduction and what feeds it (every output is
/// that reduction): its schedule is one nest.
fn one_nest(fusion: &Fusion) -> bool {
    let reduces = |n: &tilefuse_ir::Node| matches!(n.op, Op::Reduce { .. });
    (fusion.nodes().iter()).filter(|n| reduces(n)).count() == 1
        && (fusion.outputs().iter()).all(|&t| reduces(fusion.node(t)))
}
