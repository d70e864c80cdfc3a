//! Helpers shared by the device test files.
#![allow(dead_code)] // each test file uses its own subset

use tilefuse_ir::{Fusion, evaluate};
use tilefuse_params::HeuristicParams;
use tilefuse_runtime::Device;
use tilefuse_schedulers::schedule;
use tilefuse_testing::{compare, inputs};

/// The GPU device; in CI (`CI=true`) a missing adapter is a failure, not a
/// skip: CI runs these on Mesa's lavapipe.
pub fn gpu() -> Option<Device> {
    match Device::gpu() {
        Ok(g) => Some(g),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI needs a GPU adapter (lavapipe): {e}")
        }
        Err(e) => {
            eprintln!("GPU checks skipped: {e}");
            None
        }
    }
}

/// The GPU device on the path adapters without IEEE SPIR-V take: the WGSL
/// that wgpu translates itself (lavapipe takes SPIR-V otherwise).
pub fn wgsl_only() -> Option<Device> {
    opened(tilefuse_runtime::gpu::OpenOptions {
        ieee_spirv: false,
        ..Default::default()
    })
}

/// The GPU device on the path adapters without `shader-f16` take: f16
/// packed two to a `u32` word (lavapipe has f16 arrays otherwise).
pub fn f16_in_words() -> Option<Device> {
    opened(tilefuse_runtime::gpu::OpenOptions {
        shader_f16: false,
        ..Default::default()
    })
}

/// The GPU device opened with `options`, where an adapter is found (see
/// [`gpu`]).
pub fn opened(options: tilefuse_runtime::gpu::OpenOptions) -> Option<Device> {
    gpu()?;
    let device = tilefuse_runtime::gpu::GpuDevice::open(options).expect("the adapter opened once");
    Some(Device::Gpu(std::sync::Arc::new(device)))
}

/// A property test's case count: `PROPTEST_CASES` where set (longer runs
/// by hand), else `default` (what CI runs).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The CPU device and, where there is one, the GPU.
pub fn devices() -> Vec<Device> {
    let mut out = vec![Device::cpu()];
    out.extend(gpu());
    out
}

/// Schedules `f` with `params` for `device`, runs it on fresh inputs and
/// compares with the reference.
pub fn run(f: &Fusion, params: &HeuristicParams, device: &Device) -> Result<(), String> {
    let s = schedule(f, params, &device.info()).map_err(|e| e.to_string())?;
    let x = inputs(f, 11);
    let got = device
        .build(&s)
        .map_err(|e| e.to_string())?
        .run(&x)
        .map_err(|e| e.to_string())?;
    compare(&evaluate(f, &x).unwrap(), &got, 1e-5)
}

/// `base` with `change` merged in: objects key by key, other values
/// replaced.
pub fn merged_value(base: &serde_json::Value, change: &serde_json::Value) -> serde_json::Value {
    fn merge(into: &mut serde_json::Value, change: &serde_json::Value) {
        match (into, change) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v.clone(),
        }
    }
    let mut v = base.clone();
    merge(&mut v, change);
    v
}

/// `base` with `change` merged in (see `merged_value`), as params.
pub fn merged(base: &serde_json::Value, change: &serde_json::Value) -> HeuristicParams {
    HeuristicParams::from_value(merged_value(base, change))
        .unwrap_or_else(|e| panic!("{change}: {e}"))
}

/// The WGSL of `f` scheduled with `params` for `device`.
pub fn wgsl(f: &Fusion, params: &HeuristicParams, device: &Device) -> String {
    let s = schedule(f, params, &device.info()).unwrap_or_else(|e| panic!("{e}"));
    tilefuse_sched::codegen::generate(s.kernel())
        .unwrap()
        .source
}

/// Each field, changed alone from `base`, keeps every result right on
/// every device and changes the WGSL of the first fusion (others may have
/// nothing for a field to change: one block has no persistence).
pub fn check_fields(
    fusion: fn(&str) -> Fusion,
    fusions: &[&str],
    base: &serde_json::Value,
    changes: &[serde_json::Value],
) {
    let devices = devices();
    for name in fusions {
        let f = fusion(name);
        let reference = wgsl(&f, &merged(base, &serde_json::json!({})), &devices[0]);
        let primary = name == &fusions[0];
        for change in changes {
            let p = merged(base, change);
            for device in &devices {
                run(&f, &p, device)
                    .unwrap_or_else(|e| panic!("{name} {change} on {}: {e}", device.info().name));
            }
            if primary {
                assert_ne!(
                    wgsl(&f, &p, &devices[0]),
                    reference,
                    "{name}: {change} left the kernel unchanged"
                );
            }
        }
    }
}

/// Device descriptions of the three kinds heuristics tell apart: the CPU
/// device, a discrete GPU and a CPU Vulkan (lavapipe).
pub fn device_kinds() -> [tilefuse_sched::DeviceInfo; 3] {
    let cpu = Device::cpu().info();
    let mut gpu = cpu.clone();
    gpu.backend = "vulkan".into();
    gpu.adapter_type = "discrete_gpu".into();
    gpu.limits.max_invocations_per_workgroup = 1024;
    gpu.subgroup_sizes = Some((32, 32));
    let mut lavapipe = gpu.clone();
    lavapipe.adapter_type = "cpu".into();
    lavapipe.subgroup_sizes = Some((8, 8));
    lavapipe.limits.max_loop_iterations_per_invocation =
        Some(tilefuse_runtime::gpu::LLVMPIPE_LOOP_LIMIT);
    [cpu, gpu, lavapipe]
}
