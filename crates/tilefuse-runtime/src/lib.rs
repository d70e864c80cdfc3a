//! tilefuse devices: the CPU executor of scheduled kernels and the wgpu GPU
//! device, behind one [`Device`] / [`Kernel`] pair.

pub mod cpu;
mod device;
mod error;
pub mod gpu;

pub use cpu::{CpuDevice, CpuKernel};
pub use device::{Device, Kernel, Timing};
pub use error::{Result, RuntimeError};
pub use gpu::{GpuDevice, GpuKernel};
pub use tilefuse_sched::{DeviceInfo, DeviceLimits};
