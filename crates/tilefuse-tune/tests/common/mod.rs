//! Fusions and device descriptions the tuner's tests share.
#![allow(dead_code)] // each test file uses its own subset

use tilefuse_ir::{BinaryOp, DType, Fusion, UnaryOp};
use tilefuse_sched::{DeviceInfo, DeviceLimits};

/// A GPU of `adapter_type` (`"discrete_gpu"`, `"cpu"` for lavapipe, ...)
/// with `invocations` per workgroup.
pub fn gpu(adapter_type: &str, invocations: u32) -> DeviceInfo {
    DeviceInfo {
        backend: "vulkan".into(),
        vendor: 0,
        name: format!("test {adapter_type}"),
        adapter_type: adapter_type.into(),
        driver: String::new(),
        limits: DeviceLimits {
            max_workgroup_size: [invocations, invocations, 64],
            max_invocations_per_workgroup: invocations,
            max_workgroups_per_dimension: 65535,
            max_workgroup_storage_bytes: 32768,
            max_storage_buffer_binding_size: 1 << 30,
            max_storage_buffers_per_stage: 8,
            max_loop_iterations_per_invocation: None,
        },
        features: Vec::new(),
        subgroup_sizes: Some((8, 32)),
        cores: 0,
        simd_width: 0,
    }
}

/// This machine's CPU device, then a GPU of each kind: lavapipe, discrete
/// and integrated.
pub fn device_kinds() -> [DeviceInfo; 4] {
    [
        tilefuse_runtime::Device::cpu().info(),
        gpu("cpu", 256),
        gpu("discrete_gpu", 1024),
        gpu("integrated_gpu", 128),
    ]
}

pub fn chain(ops: usize) -> Fusion {
    let mut f = Fusion::new();
    let mut x = f.input(&[64, 256], DType::F32, Some("x")).unwrap();
    let half = f.constant(0.5, DType::F32).unwrap();
    for i in 0..ops {
        x = match i % 2 {
            0 => f.unary(UnaryOp::Tanh, x).unwrap(),
            _ => f.binary(BinaryOp::Mul, x, half).unwrap(),
        };
    }
    f.output(x).unwrap();
    f
}
