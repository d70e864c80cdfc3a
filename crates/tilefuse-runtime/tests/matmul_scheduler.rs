//! The matmul scheduler driven by its params, on the CPU and the GPU.

mod common;

use common::{check_fields, device_kinds, devices, merged, merged_value, run, wgsl};
use serde_json::{Value, json};
use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, MatmulParams, ParamsStruct};
use tilefuse_runtime::Device;
use tilefuse_schedulers::{heuristics, schedule};
use tilefuse_testing::matmul_fusions;

#[test]
fn default_heuristics_match_the_reference() {
    for device in devices() {
        for (name, f) in matmul_fusions() {
            let p = heuristics(&f, None, &device.info()).unwrap();
            assert_eq!(p.scheduler(), "matmul", "{name}");
            run(&f, &p, &device)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}\n{p:?}", device.info().name));
        }
    }
}

/// A discrete GPU's defaults (the output tile stored through workgroup
/// memory, where it fits) give the reference on every device here too:
/// CI has no discrete GPU to take them by default.
#[test]
fn discrete_gpu_defaults_match_the_reference_everywhere() {
    let discrete = &device_kinds()[1];
    for (name, f) in matmul_fusions() {
        let p = heuristics(&f, None, discrete).unwrap();
        let HeuristicParams::Matmul(m) = &p else {
            panic!("matmul params")
        };
        assert!(m.use_smem_epilogue, "{name}");
        for device in devices() {
            run(&f, &p, &device)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}\n{p:?}", device.info().name));
        }
    }
}

fn fusion(name: &str) -> Fusion {
    matmul_fusions()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

fn base_params() -> HeuristicParams {
    merged(&base(), &json!({}))
}

/// 16×16 workgroup tiles of 4×4 register tiles: 16 invocations.
fn base() -> Value {
    let mut v = MatmulParams::default().to_value();
    v["tile_sizes"] = json!({
        "cta_tile": {"m": 16, "n": 16, "k": 8},
        "warp_tile": {"m": 8, "n": 16, "k": 8},
        "instruction_tile": {"m": 4, "n": 4, "k": 4},
    });
    v["launch"]["workgroup_size"] = json!([4, 4, 1]);
    v
}

#[test]
fn every_field_changes_the_kernel_and_keeps_the_result() {
    let tiles = |cta: [u32; 3], warp: [u32; 3], instr: [u32; 3], wg: [u32; 3]| {
        let t = |[m, n, k]: [u32; 3]| json!({"m": m, "n": n, "k": k});
        json!({"tile_sizes": {"cta_tile": t(cta), "warp_tile": t(warp), "instruction_tile": t(instr)},
               "launch": {"workgroup_size": wg}})
    };
    check_fields(
        fusion,
        &["matmul_bias_relu", "batched_gelu_residual"],
        &base(),
        &[
            tiles([32, 16, 8], [16, 16, 8], [4, 4, 4], [4, 8, 1]),
            tiles([16, 16, 8], [16, 8, 8], [4, 4, 4], [4, 4, 1]),
            tiles([16, 16, 8], [8, 16, 4], [4, 4, 4], [4, 4, 1]),
            tiles([16, 16, 8], [8, 16, 8], [2, 4, 2], [4, 8, 1]),
            json!({"async_gmem_load_operands": true}),
            json!({"async_gmem_load_operands": true, "supported_vec_size": {"a": 1}}),
            json!({"async_gmem_load_operands": true, "supported_vec_size": {"b": 2}}),
            json!({"async_gmem_load_operands": true,
                   "circular_buffer_options": {"smem_write": true}}),
            json!({"async_gmem_load_operands": true,
                   "circular_buffer_options": {"smem_write": true, "stages": 3}}),
            json!({"async_gmem_load_operands": true,
                   "circular_buffer_options": {"smem_write": true, "prefetch_gap": 0}}),
            // smem_read changes GPU kernels only: see
            // circular_buffers_rotate_and_need_one_barrier_per_step.
            json!({"supported_vec_size": {"epilogue": 1}}),
            json!({"cta_order": "column_major"}),
            json!({"grid_swizzle_factor": 2}),
            json!({"cta_order": "column_major", "grid_swizzle_factor": 3}),
            json!({"use_smem_epilogue": true}),
            json!({"tiling_strategy": "distribute_tiles_across_workgroups",
                   "launch": {"grid": [3, 1, 1]}}),
            json!({"launch": {"grid": [1, 1, 1]}}),
        ],
    );
    check_fields(
        fusion,
        &["matmul_bias_relu", "matmul_scaled"],
        &base(),
        &[json!({"splitk_factor": 2}), json!({"splitk_factor": 3})],
    );
}

/// Fields with no meaning in this scheduler, or on this device, leave the
/// kernel as it is (they are documented as ignored): on the CPU device,
/// `smem_read`'s register fragments too.
#[test]
fn ignored_fields_change_nothing() {
    let f = fusion("matmul_bias_relu");
    let device = Device::cpu();
    let unchanged = |from: Value, changes: &[Value]| {
        let reference = wgsl(&f, &merged(&base(), &from), &device);
        for change in changes {
            let p = merged(&merged_value(&base(), &from), change);
            assert_eq!(wgsl(&f, &p, &device), reference, "{change}");
        }
    };
    unchanged(
        json!({}),
        &[
            json!({"promote_prologue_smem_reuse": true}),
            json!({"circular_buffer_options": {"stages": 4, "prefetch_gap": 2}}),
            json!({"compile": {"fast_math": true}}),
        ],
    );
    unchanged(
        staged(&json!({})),
        &[json!({"circular_buffer_options": {"smem_read": true}})],
    );
    // 20 rows make two row tiles: a wider swizzle walks them as 2 does,
    // without idle workgroups.
    unchanged(
        json!({"grid_swizzle_factor": 2}),
        &[
            json!({"grid_swizzle_factor": 4}),
            json!({"grid_swizzle_factor": 8}),
        ],
    );
}

#[test]
fn unusable_params_name_the_field() {
    let info = Device::cpu().info();
    let f = fusion("matmul_bias_relu");
    for (change, path) in [
        (
            json!({"circular_buffer_options": {"smem_write": true}}),
            "circular_buffer_options.smem_write",
        ),
        (
            json!({"circular_buffer_options": {"smem_read": true}}),
            "circular_buffer_options.smem_read",
        ),
        (
            json!({"async_gmem_load_operands": true,
                   "circular_buffer_options": {"smem_write": true, "stages": 1, "prefetch_gap": 0}}),
            "circular_buffer_options.stages",
        ),
        (
            json!({"compile": {"use_subgroups": true}}),
            "compile.use_subgroups",
        ),
        (
            json!({"compile": {"index_type": "i32"}}),
            "compile.index_type",
        ),
        (json!({"splitk_factor": 5}), "splitk_factor"),
        (
            json!({"launch": {"workgroup_size": [8, 4, 1]}}),
            "launch.workgroup_size",
        ),
    ] {
        let err = schedule(&f, &merged(&base(), &change), &info).unwrap_err();
        assert_eq!(err.path, path, "{change}: {err}");
    }
    let mut small = info.clone();
    small.limits.max_workgroup_storage_bytes = 1024;
    let staged_epilogue = json!({"async_gmem_load_operands": true, "use_smem_epilogue": true});
    let err = schedule(&f, &merged(&base(), &staged_epilogue), &small).unwrap_err();
    assert_eq!(err.path, "tile_sizes.cta_tile", "{err}");
    // 16×8 + 8×16 floats a stage fit in 1024 bytes once, not in 3 stages.
    small.limits.max_workgroup_storage_bytes = 1024;
    let circular = json!({"smem_write": true, "stages": 3});
    let err = schedule(&f, &merged(&base(), &staged(&circular)), &small).unwrap_err();
    assert_eq!(err.path, "circular_buffer_options.stages", "{err}");
    assert!(err.to_string().contains("3072 bytes"), "{err}");
    let mut narrow = info;
    narrow.limits.max_workgroup_size = [256, 2, 64];
    let flat = json!({"launch": {"workgroup_size": [16, 1, 1]}});
    let err = schedule(&f, &merged(&base(), &flat), &narrow).unwrap_err();
    assert_eq!(err.path, "tile_sizes.instruction_tile", "{err}");
    let mut capped = Device::cpu().info();
    capped.backend = "vulkan".into();
    capped.limits.max_loop_iterations_per_invocation = Some(4);
    let err = schedule(&f, &base_params(), &capped).unwrap_err();
    assert_eq!(err.path, "tile_sizes.instruction_tile", "{err}");
    let batched = fusion("batched_gelu_residual");
    let err = schedule(
        &batched,
        &merged(&base(), &json!({"splitk_factor": 2})),
        &Device::cpu().info(),
    )
    .unwrap_err();
    assert_eq!(err.path, "splitk_factor", "{err}");
}

#[test]
fn heuristics_differ_by_device_kind() {
    let f = fusion("matmul_scaled");
    let [c, g, l] = device_kinds().map(|d| heuristics(&f, None, &d).unwrap());
    assert_ne!(c, g);
    assert_ne!(g, l);
    let HeuristicParams::Matmul(l) = l else {
        panic!("matmul params")
    };
    assert!(
        !l.async_gmem_load_operands,
        "lavapipe reads operands from global memory"
    );
}

fn staged(cb: &Value) -> Value {
    json!({"async_gmem_load_operands": true, "circular_buffer_options": cb})
}

/// Circular-buffered copies into workgroup memory: `stages` rotating
/// buffers, the copy for k step `i + prefetch_gap` issued in step `i`, one
/// barrier per k step (after the compute) where unpipelined staging has
/// two (after the copies and after the compute).
#[test]
fn circular_buffers_rotate_and_need_one_barrier_per_step() {
    let f = fusion("matmul_bias_relu");
    let device = Device::cpu();
    // Barriers after the last operand copy in the text: in the k loop.
    let in_loop = |cb: Value| {
        let src = wgsl(&f, &merged(&base(), &staged(&cb)), &device);
        let tail = src.rsplit("// block a_wg\n").next().unwrap().to_owned();
        (src, tail.matches("workgroupBarrier()").count())
    };
    let (plain, barriers) = in_loop(json!({}));
    assert_eq!(barriers, 2, "{plain}");
    assert!(plain.contains("array<f32, 128>"), "{plain}");
    for (stages, gap) in [(2, 1), (3, 1), (2, 0), (4, 3)] {
        let (src, barriers) =
            in_loop(json!({"smem_write": true, "stages": stages, "prefetch_gap": gap}));
        assert_eq!(barriers, 1, "{stages} stages, gap {gap}:\n{src}");
        let tile = 128 * stages;
        assert!(
            src.contains(&format!("var<workgroup> b6_a_wg: array<f32, {tile}>")),
            "{src}"
        );
        // The copy writes the stage `gap` steps ahead of the one read.
        let stage = |ahead: u32| match ahead {
            0 => format!("(l15 % {stages}u) * 128u)"),
            a => format!("(({a}u + l15) % {stages}u) * 128u)"),
        };
        assert!(src.contains(&format!("b6_a_wg[(({}", stage(gap))), "{src}");
        assert!(src.contains(&format!("b6_a_wg[(({}", stage(0))), "{src}");
    }
    // smem_read on a GPU: two register buffers of each invocation's
    // fragments, their steps unrolled (constant stage indices keep them
    // registers).
    let p = merged(&base(), &staged(&json!({"smem_read": true})));
    let gpu = schedule(&f, &p, &device_kinds()[1]).unwrap();
    let src = tilefuse_sched::codegen::generate(gpu.kernel())
        .unwrap()
        .source;
    assert!(src.contains("var b8_a_wg_local: array<f32, 32>"), "{src}");
    let text = gpu.to_string();
    assert!(
        text.contains("# pipelined: 2 stages, copies 1 ahead, unrolled"),
        "{text}"
    );
}

/// Circular buffering on every fixture and device: the copies fill
/// rotating stages ahead of their use, and results stay right.
#[test]
fn circular_buffering_keeps_the_result() {
    for device in devices() {
        for (name, f) in matmul_fusions() {
            for cb in [
                json!({"smem_write": true, "stages": 2, "prefetch_gap": 1}),
                json!({"smem_write": true, "stages": 3, "prefetch_gap": 1}),
                json!({"smem_write": true, "stages": 2, "prefetch_gap": 0}),
                json!({"smem_write": true, "stages": 4, "prefetch_gap": 3}),
                json!({"smem_read": true}),
                json!({"smem_write": true, "smem_read": true, "stages": 3, "prefetch_gap": 1}),
            ] {
                let p = merged(&base(), &staged(&cb));
                run(&f, &p, &device)
                    .unwrap_or_else(|e| panic!("{name} {cb} on {}: {e}", device.info().name));
            }
        }
    }
}
