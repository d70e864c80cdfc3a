//! What travels between a search and the executors that measure for it:
//! a [`Candidate`] out, its [`Measured`] result back, the [`Finalist`]s of
//! the final round, the [`Timing`] they are measured with. Plain data,
//! serializable, so that an executor may measure anywhere.

use serde::{Deserialize, Serialize};

use crate::space::Point;
use crate::trial::Status;

/// Launches per timing.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Timing {
    pub warmup: usize,
    pub repeat: usize,
}

/// One candidate to schedule, build, check and time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Candidate {
    /// Its trial's id in the run.
    pub id: usize,
    pub params: serde_json::Value,
    /// Its point in the space (what a replay reads its time by).
    pub point: Point,
    /// The best median so far: a short timing over `CUT_RATIO` times it
    /// is cut before the full measurement.
    pub best: Option<f64>,
    /// Fault injection for tests: corrupt its outputs before the check.
    #[serde(default)]
    pub corrupt: bool,
    /// Launches of its full timing.
    pub timing: Timing,
    /// The default heuristic's time as the search measured it, once
    /// known: an executor that pairs timings with the default's kernel
    /// (see `Stopwatch`) gives each candidate its ratio to that kernel's
    /// time just after it, times this, so that every worker's times are
    /// at the speed of one trial.
    #[serde(default)]
    pub anchor: Option<f64>,
}

/// A candidate of the final round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finalist {
    pub params: serde_json::Value,
    pub point: Point,
}

/// What measuring a candidate found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// `Ok`, `Failed` (refused, failed to build or to run), `Wrong` or `Cut`.
    pub status: Status,
    /// Median seconds: the faster of the short and the full timing (the
    /// short timing of a cut candidate, the first launch of one cut at
    /// once).
    pub time: Option<f64>,
    pub error: Option<String>,
    /// The fingerprint of the device that measured it, where the executor
    /// knows it: a search refuses timings of another device.
    #[serde(default)]
    pub device: Option<String>,
    /// Seconds its build took (schedule, lower, codegen, pipeline), where
    /// the executor knows: a search's time budget keeps room for the
    /// builds of its final run.
    #[serde(default)]
    pub build: Option<f64>,
    /// Kernel launches its check and timing made, those of the kernel its
    /// time was paired with included (see `Stopwatch`).
    #[serde(default)]
    pub launches: usize,
}

impl Measured {
    /// What measuring found, before an executor adds where and how long.
    pub(crate) fn new(status: Status, time: Option<f64>, error: Option<String>) -> Measured {
        Measured {
            status,
            time,
            error,
            device: None,
            build: None,
            launches: 0,
        }
    }

    /// A candidate that ran correctly in `time` seconds.
    pub fn ran(time: f64) -> Measured {
        Measured::new(Status::Ok, Some(time), None)
    }

    pub(crate) fn failed(error: String) -> Measured {
        Measured::new(Status::Failed, None, Some(error))
    }
}
