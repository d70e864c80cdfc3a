//! tilefuse scheduling: the loop-nest kernel IR, schedule primitives with
//! recorded traces, and WGSL code generation.

pub mod codegen;
pub mod fixtures;
pub mod ir;
mod lower;
mod realize;
pub mod schedule;

pub use lower::lower;
pub use realize::realize;
pub use schedule::{Instruction, Schedule, ScheduleError};
