//! The wgpu device: generated WGSL run as compute pipelines, one dispatch
//! per stage, timed with timestamp queries when the adapter has them.

mod buffers;
mod kernel;
mod launches;
mod sequence;
mod spare;
mod spirv;

pub use kernel::GpuKernel;
pub use sequence::{GpuSequence, Wiring};
pub use spare::SPARE_BYTES;

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tilefuse_sched::codegen::{Extensions, WgslKernel, emit};
use tilefuse_sched::lowering::{MAX_STAGE_BYTES, verify_launch};
use tilefuse_sched::{Schedule, Target, lower};

use crate::error::{Result, RuntimeError};
use tilefuse_sched::{DeviceInfo, DeviceLimits};

/// llvmpipe (Mesa's CPU driver, lavapipe's core) stops every loop of an
/// invocation once their iterations add up to this, without an error.
pub const LLVMPIPE_LOOP_LIMIT: u64 = 65_535;

/// A wgpu adapter opened as a device.
pub struct GpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: DeviceInfo,
    timestamps: bool,
    /// Kernel inputs and outputs are mapped by the host where they lie (a
    /// CPU adapter such as lavapipe, whose device memory is host memory):
    /// one copy up and one down per call, no staging buffers.
    host_mapped: bool,
    /// The first wgpu error no scope caught (wgpu would panic otherwise);
    /// taken and reported by the next `wait`.
    uncaptured: Arc<Mutex<Option<String>>>,
    /// The SPIR-V kernels are translated to, with float controls that keep
    /// IEEE semantics, where the adapter supports them (see [`spirv`]);
    /// `None` hands WGSL to wgpu.
    ieee_spirv: Option<spirv::SpirvTarget>,
    /// What the device offers that generated WGSL uses (`shader-f16`).
    extensions: Extensions,
    /// Compiled pipelines by WGSL hash, shared by kernels with equal code.
    pipelines: Mutex<PipelineCache>,
    /// Buffers of dropped kernels, for the next ones.
    spare: Mutex<spare::Spare<wgpu::Buffer>>,
}

type Pipelines = Arc<Vec<wgpu::ComputePipeline>>;

/// A stage's shader module and its layout (see [`spirv::stage_layout`]).
type StageModule = (wgpu::ShaderModule, wgpu::PipelineLayout);

/// Pipelines by the hash of their WGSL and each stage's bindings (one text
/// can bind different buffers: a stage's loops that run zero times emit
/// nothing of the blocks inside), bounded: an entry lives while a kernel
/// holds it or while it is among the [`PipelineCache::RECENT`] last built
/// (a kernel rebuilt soon after, as a tuner does, is not compiled again).
#[derive(Default)]
struct PipelineCache {
    by_hash: HashMap<u64, Weak<Vec<wgpu::ComputePipeline>>>,
    recent: VecDeque<Pipelines>,
}

impl PipelineCache {
    const RECENT: usize = 64;

    fn get(&self, key: u64) -> Option<Pipelines> {
        self.by_hash.get(&key).and_then(Weak::upgrade)
    }

    fn insert(&mut self, key: u64, pipelines: &Pipelines) {
        self.by_hash.retain(|_, p| p.strong_count() > 0);
        self.by_hash.insert(key, Arc::downgrade(pipelines));
        if self.recent.len() == Self::RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(Arc::clone(pipelines));
    }
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The least warm-up before timing: an idle discrete GPU runs at a
/// fraction of its clock (an H100 at 345 of 1980 MHz) until it has been
/// busy a while: after two warm-up launches, timestamps put a 1.6 ms
/// matmul at 9.1 ms.
pub const WARM_UP: std::time::Duration = std::time::Duration::from_millis(200);

fn gpu_err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Gpu(e.to_string())
}

/// How [`GpuDevice::open`] uses the adapter; both paths are the default
/// where the adapter has them, and tests turn each off to cover the path
/// other adapters take, on lavapipe.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// Kernel buffers mapped by the host where the adapter allows it (a
    /// CPU adapter); `false` copies through staging buffers as on a
    /// discrete GPU.
    pub map_host: bool,
    /// Shaders passed to the driver as SPIR-V that keeps NaN, infinities
    /// and signed zeros, where the adapter can; `false` leaves the WGSL to
    /// wgpu, as on adapters without (Metal, DX12, older Vulkan).
    pub ieee_spirv: bool,
    /// f16 inputs and outputs as WGSL `f16` arrays where the adapter has
    /// `shader-f16`; `false` packs them in `u32` words, as on adapters
    /// without.
    pub shader_f16: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            map_host: true,
            ieee_spirv: true,
            shader_f16: true,
        }
    }
}

impl GpuDevice {
    /// Opens the best available adapter (a discrete GPU over an integrated
    /// one over a CPU implementation such as lavapipe).
    pub fn new() -> Result<GpuDevice> {
        GpuDevice::open(OpenOptions::default())
    }

    /// [`GpuDevice::new`] with `options`.
    pub fn open(options: OpenOptions) -> Result<GpuDevice> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        }))
        .map_err(|e| RuntimeError::Gpu(format!("no GPU adapter: {e}")))?;
        let host_mapped = options.map_host
            && adapter.get_info().device_type == wgpu::DeviceType::Cpu
            && adapter
                .features()
                .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        let mut features =
            adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP);
        if host_mapped {
            features |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
        }
        let ieee_spirv = spirv::float_controls(&adapter).filter(|_| options.ieee_spirv);
        if ieee_spirv.is_some() {
            features |= wgpu::Features::PASSTHROUGH_SHADERS;
        }
        if options.shader_f16 {
            features |= adapter.features() & wgpu::Features::SHADER_F16;
        }
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("tilefuse"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(gpu_err)?;
        let a = adapter.get_info();
        let info = DeviceInfo {
            backend: a.backend.to_string().to_lowercase(),
            vendor: a.vendor,
            name: a.name.clone(),
            adapter_type: match a.device_type {
                wgpu::DeviceType::Cpu => "cpu",
                wgpu::DeviceType::DiscreteGpu => "discrete_gpu",
                wgpu::DeviceType::IntegratedGpu => "integrated_gpu",
                wgpu::DeviceType::VirtualGpu => "virtual_gpu",
                wgpu::DeviceType::Other => "other",
            }
            .into(),
            driver: format!("{} {}", a.driver, a.driver_info).trim().to_owned(),
            limits: DeviceLimits {
                max_workgroup_size: [
                    limits.max_compute_workgroup_size_x,
                    limits.max_compute_workgroup_size_y,
                    limits.max_compute_workgroup_size_z,
                ],
                max_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
                max_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
                max_workgroup_storage_bytes: limits.max_compute_workgroup_storage_size,
                max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
                max_storage_buffers_per_stage: limits.max_storage_buffers_per_shader_stage,
                max_loop_iterations_per_invocation: a
                    .name
                    .contains("llvmpipe")
                    .then_some(LLVMPIPE_LOOP_LIMIT),
            },
            features: (features
                - wgpu::Features::MAPPABLE_PRIMARY_BUFFERS
                - wgpu::Features::PASSTHROUGH_SHADERS)
                .iter_names()
                .map(|(n, _)| n.to_lowercase())
                .chain(ieee_spirv.map(|_| "signed_zero_inf_nan_preserve".to_owned()))
                .collect(),
            subgroup_sizes: features
                .contains(wgpu::Features::SUBGROUP)
                .then_some((a.subgroup_min_size, a.subgroup_max_size)),
            cores: 0,
            simd_width: 0,
        };
        let uncaptured = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert(e.to_string());
            }
        }));
        Ok(GpuDevice {
            device,
            queue,
            uncaptured,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            host_mapped,
            ieee_spirv,
            extensions: Extensions {
                f16: features.contains(wgpu::Features::SHADER_F16),
            },
            info,
            pipelines: Mutex::default(),
            spare: Mutex::default(),
        })
    }

    /// Compiled pipelines the cache holds (those kernels use, and the most
    /// recent): bounded, however many kernels were ever built.
    pub fn cached_pipelines(&self) -> usize {
        self.pipelines.lock().map_or(0, |c| {
            let recent: Vec<*const _> = c.recent.iter().map(Arc::as_ptr).collect();
            let held = c.by_hash.values().filter_map(Weak::upgrade);
            recent.len() + held.filter(|p| !recent.contains(&Arc::as_ptr(p))).count()
        })
    }

    /// Bytes of idle buffers kept for later kernels: at most
    /// [`SPARE_BYTES`], however many kernels were dropped.
    pub fn spare_bytes(&self) -> u64 {
        self.spare().bytes()
    }

    /// A buffer of `size` bytes for `usage`: a spare one of exactly that
    /// size and usage (its contents stale) or a new one.
    fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        let spare = self.spare().take(size, usage);
        spare.unwrap_or_else(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        })
    }

    /// Keeps `buffers` (idle and unmapped) for later kernels.
    fn recycle(&self, buffers: impl IntoIterator<Item = wgpu::Buffer>) {
        let mut spare = self.spare();
        buffers
            .into_iter()
            .for_each(|b| spare.put(b.size(), b.usage(), b));
    }

    fn spare(&self) -> MutexGuard<'_, spare::Spare<wgpu::Buffer>> {
        // `put` and `take` leave the list whole.
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Lowers the schedule once, checks its launches against the device
    /// limits, generates its WGSL and compiles it.
    pub fn build(self: &Arc<Self>, schedule: &Schedule) -> Result<GpuKernel> {
        let lowered = lower(schedule.kernel(), Target::Wgsl)?;
        verify_launch(&lowered, &self.info).map_err(|e| RuntimeError::Limit(e.to_string()))?;
        let wgsl = emit(&lowered, self.extensions);
        check_stage_bytes(&wgsl)?;
        let pipelines = self.pipelines(&wgsl)?;
        Ok(GpuKernel::new(
            Arc::clone(self),
            schedule.clone(),
            wgsl,
            pipelines,
        ))
    }

    fn pipelines(&self, wgsl: &WgslKernel) -> Result<Pipelines> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        wgsl.source.hash(&mut hasher);
        for stage in &wgsl.stages {
            stage.bindings.hash(&mut hasher);
        }
        let key = hasher.finish();
        let mut cache = self
            .pipelines
            .lock()
            .map_err(|_| RuntimeError::Internal("pipeline cache poisoned".into()))?;
        if let Some(p) = cache.get(key) {
            return Ok(p);
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let modules = match self.ieee_spirv {
            Some(target) => spirv::passthrough_modules(&self.device, wgsl, target)
                .map_err(|e| RuntimeError::Internal(format!("generated WGSL was rejected: {e}")))?,
            None => {
                let module = self.wgsl_module(wgsl);
                let layout = |bindings| spirv::stage_layout(&self.device, wgsl, bindings);
                (wgsl.stages.iter())
                    .map(|stage| (module.clone(), layout(&stage.bindings)))
                    .collect()
            }
        };
        let pipelines: Vec<_> = wgsl
            .stages
            .iter()
            .zip(&modules)
            .map(|(stage, (module, layout))| {
                self.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(&stage.entry_point),
                        layout: Some(layout),
                        module,
                        entry_point: Some(&stage.entry_point),
                        compilation_options: Default::default(),
                        cache: None,
                    })
            })
            .collect();
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(RuntimeError::Internal(format!(
                "generated WGSL was rejected: {e}"
            )));
        }
        let pipelines = Arc::new(pipelines);
        cache.insert(key, &pipelines);
        Ok(pipelines)
    }

    fn wgsl_module(&self, wgsl: &WgslKernel) -> wgpu::ShaderModule {
        self.device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("tilefuse kernel"),
                source: wgpu::ShaderSource::Wgsl(wgsl.source.as_str().into()),
            })
    }

    /// Waits for submitted work, then reports any wgpu error it raised.
    fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(gpu_err)?;
        match self.uncaptured.lock().map(|mut e| e.take()) {
            Ok(Some(e)) => Err(RuntimeError::Gpu(e)),
            Ok(None) => Ok(()),
            Err(_) => Err(RuntimeError::Internal("error slot poisoned".into())),
        }
    }
}

/// Refuses a stage whose WGSL is past [`MAX_STAGE_BYTES`] before any driver
/// compiles it (for minutes, or until it gives up).
fn check_stage_bytes(wgsl: &WgslKernel) -> Result<()> {
    match wgsl
        .stages
        .iter()
        .find(|s| s.source_bytes > MAX_STAGE_BYTES)
    {
        Some(s) => Err(RuntimeError::Limit(format!(
            "{} is {} bytes of WGSL, past the limit of {MAX_STAGE_BYTES} bytes a stage \
             (MAX_STAGE_BYTES): unroll fewer steps, or split the fusion",
            s.entry_point, s.source_bytes
        ))),
        None => Ok(()),
    }
}
