//! tilefuse scheduling: the loop-nest kernel IR, schedule primitives with
//! recorded traces, and WGSL code generation.

pub mod codegen;
pub mod ir;
mod lower;
mod realize;
pub mod schedule;
pub mod schedulers;
mod software_pipeline;
mod target;

pub use lower::lower;
pub use realize::{PrivateMemory, realize};
pub use schedule::{Instruction, Schedule, ScheduleError};
pub use target::{DeviceInfo, DeviceLimits};
