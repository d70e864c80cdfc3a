//! The reduction scheduler's default params per device kind.

use tilefuse_ir::Fusion;
use tilefuse_params::ReductionParams;

use super::topology::{Topology, topology};
use tilefuse_sched::DeviceInfo;

/// Default params. The CPU device: one row per workgroup (rows run on
/// threads; 128 a workgroup when there are thousands of short ones), each
/// reduced serially as SIMD lanes, intermediates kept per row. GPUs: inner reductions spread each row over up to 256 invocations
/// whose partials fold as a tree in workgroup memory, in one persistent
/// kernel, with vec4 loads. A CPU Vulkan (lavapipe) pays for every barrier:
/// it gets one subgroup a row, partials shuffled together and rows
/// recomputed (no workgroup memory, no barrier) where it has subgroups and
/// rows are not too long; otherwise fewer, larger steps per invocation,
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
        return cpu_heuristics(p, &topo, device);
    }
    let cpu_vulkan = device.adapter_type == "cpu";
    let pow2_at_most = |n: u64| 1u64 << (63 - n.max(1).leading_zeros());
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
        // 2.3x faster so than as one persistent kernel, BENCHMARKS.md).
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
        p.persistent_kernel = !cpu_vulkan || shuffles;
        // A discrete GPU keeps the exp / centred row on chip when it fits
        // with room to spare (split tails pad it); lavapipe recomputes it.
        let fits = 4 * r <= u64::from(device.limits.max_workgroup_storage_bytes) / 4;
        p.project_persistent_buffers = cpu_vulkan || t == 1 || !fits;
    } else {
        let columns = topo.inner();
        let (x, y) = if cpu_vulkan {
            let x = pow2_at_most(columns).clamp(1, max.min(64));
            let y = if columns < 4 * x && r >= 64 {
                (max / x).min(8)
            } else {
                1
            };
            (x, y)
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
    p
}

/// The CPU device's defaults (see [`reduction_heuristics`]).
fn cpu_heuristics(mut p: ReductionParams, topo: &Topology, device: &DeviceInfo) -> ReductionParams {
    let threads = device.cores.max(1) as u64;
    // Thousands of short rows: a workgroup of one costs more than its
    // row, so 128 rows share one (row sums of 65536 x 16 on 2 threads:
    // 5.2 ms one a workgroup, 1.8 with 128; 16384 x 64 and x 256 1.1x;
    // softmax and layernorm 1.0-1.06x; fewer rows would idle threads).
    let short = p.fastest_dim && topo.reduced() <= 256 && topo.outer() >= 512 * threads;
    p.launch.workgroup_size = Some([if short { 128 } else { 1 }, 1, 1]);
    p.reduction_invocations = 1;
    p.project_persistent_buffers = false;
    if !p.fastest_dim {
        // Column blocks a thread each, 1024 at most (4096² column sums:
        // 2.4 ms with 1024 a block on 2 threads, 3.3 with 512, 2.8 with
        // 4096; numpy 2.1), each reduced row by row in its own nest (see
        // the module docs).
        let w = (topo.inner() / threads).clamp(1, 1024);
        let w = 1 << (63 - w.leading_zeros());
        p.launch.workgroup_size = Some([w as u32, 1, 1]);
        p.rows_per_workgroup = Some(w as u32);
        p.persistent_kernel = false;
    }
    p
}
