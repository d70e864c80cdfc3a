//! tilefuse devices: the CPU executor of scheduled kernels (and, with the
//! `gpu` module, wgpu).

pub mod cpu;
mod error;

pub use cpu::{CpuDevice, CpuKernel};
pub use error::{Result, RuntimeError};
