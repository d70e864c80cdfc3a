//! WGSL code generation.

mod ast;
mod depth;
mod sync;
mod wgsl;

pub use wgsl::{BindingInfo, StageInfo, WgslKernel, generate, stages};
