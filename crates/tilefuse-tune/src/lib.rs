//! The tilefuse autotuner and its heuristic cache.
//!
//! [`tune`] searches a scheduler's params space for one fusion on one
//! device: candidates from a [`Strategy`] over the fields the scheduler
//! declares tunable, each scheduled, built, checked against the reference
//! evaluator and timed; winners go to a [`Cache`] keyed by the fusion's
//! structure, the scheduler, the device and the versions that could change
//! the kernel.

mod cache;
mod key;
mod measure;
mod search;
mod space;

pub use cache::{Cache, CacheError, Entry, Lookup, Origin, Written};
pub use key::{CODEGEN_VERSION, CacheKey, DeviceKey};
pub use measure::Problem;
pub use search::{Effort, Options, Status, Strategy, Trial, TuneError, TuneResult, tune};
pub use space::{Point, Space};
