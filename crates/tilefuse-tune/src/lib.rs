//! The tilefuse autotuner and its heuristic cache.
//!
//! [`tune`] searches a scheduler's params space for one fusion on one
//! device: candidates from a [`Strategy`] over the fields the scheduler
//! declares tunable, each scheduled, built, checked against the reference
//! evaluator and timed; winners go to a [`Cache`] keyed by the fusion's
//! structure, the scheduler, the device and the versions that could change
//! the kernel.

mod bundle;
mod cache;
mod candidate;
mod clock;
mod drift;
mod ending;
mod executor;
mod far_moves;
mod file_memo;
mod key;
pub mod layers;
pub mod learned;
pub mod measure;
mod options;
pub mod replay;
mod search;
mod seeding;
pub mod seeds;
mod space;
mod strategy;
mod surrogate;
mod trial;
mod verdict;
mod warm;

pub use bundle::Bundle;
pub use cache::{Cache, CacheError, Entry, Lookup, Origin, Written};
pub use candidate::{Candidate, Finalist, Measured, Timing};
pub use drift::Stopwatch;
pub use executor::{Executor, LocalExecutor};
pub use key::{CODEGEN_VERSION, CacheKey, DeviceKey, Family};
pub use measure::Problem;
pub use options::{Effort, Observer, Options, TuneError};
pub use replay::{Recording, ReplayExecutor};
pub use search::{Search, tune, tune_with};
pub use seeding::HeuristicReport;
pub use seeds::{AutotunerHeuristic, DeviceKind, SeedContext};
pub use space::{Grid, Observation, Point, Space, digest as space_digest};
pub use strategy::Strategy;
pub use trial::{Source, Status, Trial, TuneResult};
pub use verdict::{FINAL_GAIN, RoundTimes};
pub use warm::nearest;
