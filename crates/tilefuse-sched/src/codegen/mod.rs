//! WGSL code generation.

mod ast;
mod wgsl;

pub use wgsl::{BindingInfo, StageInfo, WgslKernel, generate, stages};
