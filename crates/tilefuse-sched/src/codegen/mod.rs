//! Code generation from a lowered kernel: WGSL for wgpu devices.

pub mod wgsl;

pub use wgsl::{BindingInfo, Extensions, StageInfo, WgslKernel, emit, generate};
