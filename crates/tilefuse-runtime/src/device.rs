//! `Device` picks the GPU when there is one and the CPU otherwise;
//! `Kernel` is a schedule compiled for one of them.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use tilefuse_ir::shape::numel;
use tilefuse_ir::{AsTensorRef, Fusion, Tensor, TensorMut, TensorRef};
use tilefuse_sched::codegen::{WgslKernel, generate};
use tilefuse_sched::{LowerError, Schedule};

use crate::cpu::{CpuDevice, CpuKernel, Storage};
use crate::error::{Result, RuntimeError};
use crate::gpu::{GpuDevice, GpuKernel};
use tilefuse_sched::{DeviceInfo, DeviceLimits};

/// Where kernels run.
#[derive(Clone, Debug)]
pub enum Device {
    Cpu(CpuDevice),
    Gpu(Arc<GpuDevice>),
}

impl Device {
    /// The GPU if wgpu finds an adapter, else the CPU (Python's
    /// `Device.default()`). `TILEFUSE_DEVICE=gpu` or `=cpu` forces one
    /// (`gpu` fails when there is no adapter).
    #[allow(clippy::should_implement_trait)] // fallible: not `Default`
    pub fn default() -> Result<Device> {
        match std::env::var("TILEFUSE_DEVICE").as_deref() {
            Ok("cpu") => Device::cpu_from_env(),
            Ok("gpu") => Device::gpu(),
            Ok(other) if !other.is_empty() => Err(RuntimeError::Config(format!(
                "TILEFUSE_DEVICE={other:?}: expected \"gpu\" or \"cpu\""
            ))),
            _ => Device::gpu().or_else(|_| Device::cpu_from_env()),
        }
    }

    pub fn cpu() -> Device {
        Device::Cpu(CpuDevice::default())
    }

    /// The CPU, after checking `TILEFUSE_NUM_THREADS` (a `Config` error
    /// when it is set to anything but a positive integer).
    pub fn cpu_from_env() -> Result<Device> {
        crate::cpu::pool::threads_from_env()?;
        Ok(Device::cpu())
    }

    /// The GPU, opened once per process and shared (with its pipeline
    /// cache) by every later call: NVIDIA's Vulkan driver stopped loading
    /// after a few dozen devices opened in one test process. A failure is
    /// not remembered; the next call tries again.
    pub fn gpu() -> Result<Device> {
        static SHARED: Mutex<Option<Arc<GpuDevice>>> = Mutex::new(None);
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        let gpu = match &*shared {
            Some(g) => Arc::clone(g),
            None => Arc::clone(shared.insert(Arc::new(GpuDevice::new()?))),
        };
        Ok(Device::Gpu(gpu))
    }

    pub fn info(&self) -> DeviceInfo {
        match self {
            Device::Gpu(g) => g.info().clone(),
            Device::Cpu(c) => cpu_info(c),
        }
    }

    /// Compiles a schedule for this device. A GPU kernel is compiled from
    /// its WGSL; a CPU kernel makes its WGSL only when asked
    /// ([`Kernel::wgsl`]), so the CPU runs schedules WGSL cannot express.
    pub fn build(&self, schedule: &Schedule) -> Result<Kernel> {
        Ok(match self {
            Device::Cpu(c) => Kernel {
                wgsl: OnceLock::new(),
                exec: Exec::Cpu(c.build(schedule)?),
            },
            Device::Gpu(g) => {
                let k = g.build(schedule)?;
                Kernel {
                    wgsl: OnceLock::from(Ok(k.wgsl.clone())),
                    exec: Exec::Gpu(k),
                }
            }
        })
    }
}

fn cpu_info(c: &CpuDevice) -> DeviceInfo {
    let simd_width = crate::cpu::simd_width();
    DeviceInfo {
        backend: "cpu".into(),
        vendor: 0,
        name: format!("{} CPU", std::env::consts::ARCH),
        adapter_type: "cpu".into(),
        driver: "tilefuse".into(),
        limits: DeviceLimits {
            max_workgroup_size: [1024, 1024, 1024],
            max_invocations_per_workgroup: 1024,
            max_workgroups_per_dimension: u32::MAX,
            max_workgroup_storage_bytes: 1 << 20,
            max_storage_buffer_binding_size: u64::MAX,
            max_storage_buffers_per_stage: u32::MAX,
            max_loop_iterations_per_invocation: None,
        },
        features: Vec::new(),
        subgroup_sizes: None,
        cores: c.threads,
        simd_width,
    }
}

/// The most launches `benchmark` takes for its warm-up or its timed
/// repetitions (the samples of that many take 800 MB); more is a mistake.
pub const MAX_LAUNCHES: usize = 100_000_000;

fn check_count(name: &str, value: usize, min: usize) -> Result<()> {
    if (min..=MAX_LAUNCHES).contains(&value) {
        return Ok(());
    }
    Err(RuntimeError::Argument(format!(
        "benchmark: {name} must be from {min} to {MAX_LAUNCHES}, got {value}"
    )))
}

enum Exec {
    Cpu(CpuKernel),
    Gpu(GpuKernel),
}

/// A compiled kernel: run it, time it, or read its WGSL.
pub struct Kernel {
    /// Made at build on a GPU, on first request on the CPU.
    wgsl: OnceLock<std::result::Result<WgslKernel, LowerError>>,
    exec: Exec,
}

/// Seconds per launch over repeated runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<f64>,
}

impl Timing {
    fn from_samples(mut samples: Vec<f64>) -> Timing {
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n == 0 {
            f64::NAN
        } else if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        samples.shrink_to_fit();
        Timing {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            samples,
        }
    }
}

impl Kernel {
    /// The kernel as WGSL, with its bindings and dispatches (also for
    /// kernels built for the CPU, so any WebGPU host can run them).
    ///
    /// A `Lower` error when the schedule has no WGSL form (a workgroup
    /// loop below a loop with several children, which only the CPU runs).
    pub fn wgsl(&self) -> Result<&WgslKernel> {
        let made = self.wgsl.get_or_init(|| match &self.exec {
            Exec::Cpu(k) => generate(k.schedule().kernel()),
            Exec::Gpu(k) => Ok(k.wgsl.clone()),
        });
        made.as_ref().map_err(|e| RuntimeError::Lower(e.clone()))
    }

    /// Runs the kernel on `inputs` (one per fusion input) into new
    /// output tensors.
    pub fn run<T: AsTensorRef>(&self, inputs: &[T]) -> Result<Vec<Tensor>> {
        let mut outputs = self.new_outputs()?;
        let mut views: Vec<TensorMut> = outputs.iter_mut().map(Tensor::view_mut).collect();
        self.run_into(inputs, &mut views)?;
        Ok(outputs)
    }

    /// Tensors for the fusion's outputs, zero in release builds (poisoned
    /// in debug builds, see `Storage::try_new`).
    fn new_outputs(&self) -> Result<Vec<Tensor>> {
        let fusion = self.fusion();
        fusion
            .outputs()
            .iter()
            .map(|&t| {
                let ty = fusion
                    .ty(t)
                    .map_err(|e| RuntimeError::Internal(e.to_string()))?;
                Ok(Tensor {
                    data: Storage::try_new(ty.dtype, numel(&ty.shape))?.0,
                    shape: ty.shape.clone(),
                })
            })
            .collect()
    }

    /// Runs the kernel once, reading `inputs` (one per fusion input) where
    /// they lie and writing `outputs` (one per fusion output, each of the
    /// output's shape and dtype) in place.
    pub fn run_into<T: AsTensorRef>(
        &self,
        inputs: &[T],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<()> {
        let inputs: Vec<TensorRef> = inputs.iter().map(AsTensorRef::as_tensor_ref).collect();
        match &self.exec {
            Exec::Cpu(k) => k.run_into(&inputs, outputs),
            Exec::Gpu(k) => k.run_into(&inputs, outputs),
        }
    }

    /// The kernel as compiled for a GPU device, or `None` on the CPU.
    pub fn gpu(&self) -> Option<&GpuKernel> {
        match &self.exec {
            Exec::Gpu(k) => Some(k),
            Exec::Cpu(_) => None,
        }
    }

    fn fusion(&self) -> &Fusion {
        match &self.exec {
            Exec::Cpu(k) => k.fusion(),
            Exec::Gpu(k) => k.fusion(),
        }
    }

    /// Runs `warmup` untimed launches (on a GPU, when `warmup` is not 0,
    /// for at least [`crate::gpu::WARM_UP`], so its clocks have ramped up),
    /// then times `repeat` launches.
    /// Both counts are at most [`MAX_LAUNCHES`].
    pub fn benchmark<T: AsTensorRef>(
        &self,
        inputs: &[T],
        warmup: usize,
        repeat: usize,
    ) -> Result<Timing> {
        check_count("repeat", repeat, 1)?;
        check_count("warmup", warmup, 0)?;
        let inputs: Vec<TensorRef> = inputs.iter().map(AsTensorRef::as_tensor_ref).collect();
        let samples = match &self.exec {
            Exec::Gpu(k) => k.time(&inputs, warmup, repeat)?,
            Exec::Cpu(k) => {
                let mut outputs = self.new_outputs()?;
                let mut views: Vec<TensorMut> = outputs.iter_mut().map(Tensor::view_mut).collect();
                let mut samples = Vec::with_capacity(repeat.min(1 << 16));
                for i in 0..warmup + repeat {
                    if tilefuse_ir::interrupt::requested() {
                        return Err(RuntimeError::Interrupted);
                    }
                    let start = Instant::now();
                    k.run_into(&inputs, &mut views)?;
                    if i >= warmup {
                        samples.push(start.elapsed().as_secs_f64());
                    }
                }
                samples
            }
        };
        Ok(Timing::from_samples(samples))
    }
}
