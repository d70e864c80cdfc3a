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

/// The kind of processor a device's kernels run on, which heuristics
/// branch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The CPU device.
    Cpu,
    /// A Vulkan driver that runs shaders on the host's cores (lavapipe):
    /// a GPU device to wgpu, whose barriers and workgroup memory cost what
    /// they cost a CPU.
    CpuVulkan,
    /// A GPU: discrete, integrated or virtual.
    Gpu,
}

impl DeviceInfo {
    pub fn kind(&self) -> DeviceKind {
        match (self.backend.as_str(), self.adapter_type.as_str()) {
            ("cpu", _) => DeviceKind::Cpu,
            (_, "cpu") => DeviceKind::CpuVulkan,
            _ => DeviceKind::Gpu,
        }
    }

    /// Whether kernels run through wgpu (a GPU or a CPU Vulkan).
    pub fn is_gpu(&self) -> bool {
        self.kind() != DeviceKind::Cpu
    }

    /// Whether kernels compute on the host's cores (the CPU device or a
    /// CPU Vulkan), at the speed of a machine others may share.
    pub fn on_the_host(&self) -> bool {
        self.kind() != DeviceKind::Gpu
    }
}
