//! WGSL code generation from a lowered kernel.

mod ast;
mod depth;
mod wgsl;

pub use wgsl::{BindingInfo, StageInfo, WgslKernel, emit, generate};
