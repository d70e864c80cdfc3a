//! WGSL code generation.

mod ast;
mod sync;
mod wgsl;

pub use wgsl::{BindingInfo, StageInfo, WgslKernel, generate, stages};
