//! What a tuning run records: each candidate's trial and the result.

use serde::{Deserialize, Serialize};
use tilefuse_params::SchedulerKind;

use crate::seeding::HeuristicReport;
use crate::space::Point;
use crate::strategy::Strategy;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked and timed.
    Ok,
    /// Refused by the scheduler, or failed to build or run.
    Failed,
    /// Ran, but its outputs differ from the reference: disqualified.
    Wrong,
    /// The same kernel as an earlier candidate: not measured again (its
    /// time is the earlier one's).
    Duplicate,
    /// Much slower than the best in a short timing: not measured in full.
    Cut,
}

impl Status {
    /// The time a strategy learns from: a measurement of the candidate's
    /// point (a duplicate's is its original's, a cut one's the short
    /// timing); none for a failed or wrong candidate.
    pub(crate) fn observed(self, time: Option<f64>) -> Option<f64> {
        match self {
            Status::Ok | Status::Duplicate | Status::Cut => time,
            Status::Failed | Status::Wrong => None,
        }
    }
}

/// Where a candidate came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Source {
    /// `"default"`, `"warm_start"`, `"seed"`, `"heuristic_neighbor"`,
    /// `"random"`, `"neighbor"` or `"exhaustive"`.
    pub origin: &'static str,
    /// The seed heuristic of a seed or its neighbour.
    pub heuristic: Option<String>,
}

impl Source {
    pub(crate) fn of(origin: &'static str) -> Source {
        Source {
            origin,
            heuristic: None,
        }
    }

    /// Whether this is the default heuristic's candidate.
    pub(crate) fn is_default(&self) -> bool {
        self.origin == "default"
    }
}

/// One candidate.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    /// In the order candidates were proposed.
    pub id: usize,
    pub params: serde_json::Value,
    /// Its point in the space (the nearest, for seeds).
    pub point: Point,
    #[serde(flatten)]
    pub source: Source,
    pub status: Status,
    /// Median seconds: the faster of the short and the full timing (the
    /// short timing of a cut candidate).
    pub time: Option<f64>,
    pub error: Option<String>,
    /// The fingerprint of the device that measured it, where known.
    pub device: Option<String>,
    /// Seconds since tuning started.
    pub at: f64,
    /// Its time in the second look before the final run, for those given
    /// one (the eight fastest after the four fastest, which keep the
    /// faster of the two).
    pub look: Option<f64>,
    /// Kernel launches its measurement made (see [`crate::Measured`]).
    #[serde(default)]
    pub launches: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct TuneResult {
    pub scheduler: SchedulerKind,
    pub strategy: Strategy,
    /// The tuned fields and their number of values: the space's shape.
    pub fields: Vec<String>,
    pub sizes: Vec<usize>,
    /// [`crate::space_digest`] of the tuned fields.
    pub space: String,
    pub best_params: serde_json::Value,
    /// Median seconds of the winner in the final interleaved run (and in
    /// its confirmation, where one bore out a winner other than the
    /// default's params).
    pub best_time: f64,
    /// The winner's seconds in each round of those runs: what its median
    /// is of, and how much it spread.
    pub best_samples: Vec<f64>,
    pub default_params: serde_json::Value,
    /// The default heuristic's median in the same rounds (`None` if it
    /// failed).
    pub default_time: Option<f64>,
    /// By id.
    pub trials: Vec<Trial>,
    /// The seed heuristics that applied.
    pub heuristics: Vec<HeuristicReport>,
    /// Seed heuristics that failed and were skipped.
    pub warnings: Vec<String>,
    pub elapsed: f64,
}
