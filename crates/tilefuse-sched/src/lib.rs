//! tilefuse scheduling: the loop-nest kernel IR, schedule primitives with
//! recorded traces, the lowering passes after scheduling, and WGSL code
//! generation.

pub mod codegen;
mod initial;
pub mod ir;
pub mod lowering;
pub mod schedule;
mod target;

pub use lowering::{LowerError, Lowered, Target, lower};
pub use schedule::{Instruction, Schedule, ScheduleError};
pub use target::{DeviceInfo, DeviceKind, DeviceLimits};
