//! What heuristics and caches know about a device: the runtime fills it
//! in, schedulers read it.

use serde::{Deserialize, Serialize};

/// Limits that decide whether a kernel can launch.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceLimits {
    pub max_workgroup_size: [u32; 3],
    pub max_invocations_per_workgroup: u32,
    pub max_workgroups_per_dimension: u32,
    pub max_workgroup_storage_bytes: u32,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_stage: u32,
    /// Loop iterations after which the driver silently ends an invocation's
    /// loops (llvmpipe / lavapipe: 65535 in all, counted across loops).
    pub max_loop_iterations_per_invocation: Option<u64>,
}

/// A device as heuristics see it (serialized, as a remote worker
/// describes its device to the tuner).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// `"cpu"` for the CPU device, else the wgpu backend (`"vulkan"`, ...).
    pub backend: String,
    pub vendor: u32,
    pub name: String,
    /// `"cpu"` (the CPU device or a CPU Vulkan such as lavapipe),
    /// `"discrete_gpu"`, `"integrated_gpu"`, `"virtual_gpu"` or `"other"`.
    pub adapter_type: String,
    pub driver: String,
    pub limits: DeviceLimits,
    pub features: Vec<String>,
    /// Smallest and largest subgroup size, where the adapter has subgroups.
    pub subgroup_sizes: Option<(u32, u32)>,
    /// Hardware threads (CPU device).
    pub cores: usize,
    /// f32 lanes of the widest SIMD unit (CPU device).
    pub simd_width: u32,
}

impl DeviceInfo {
    pub fn is_gpu(&self) -> bool {
        self.backend != "cpu"
    }
}
