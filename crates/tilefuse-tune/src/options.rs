//! What a tuning run is asked to do ([`Options`], [`Effort`]) and how it
//! ends without a result ([`TuneError`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tilefuse_ir::{Fusion, Tensor};
use tilefuse_params::HeuristicParams;

use crate::candidate::Measured;
use crate::candidate::Timing;
use crate::measure::{Problem, RTOL};
use crate::strategy::Strategy;
use crate::trial::Trial;

/// How a runtime error reads when Ctrl-C interrupted the work.
pub(crate) const INTERRUPTED: &str = "interrupted";

/// How much tuning to do when no budget is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    /// The default heuristic (or the cache) only.
    None,
    Quick,
    Full,
}

impl Effort {
    /// The trial budget when none is given. Quick's 48 is 30 % of full's
    /// (Helion's quick spends 31-38 % of full's time): replayed over the 96
    /// recorded spaces, 24 trials reached 91 % of full's gain over the
    /// default, 40 96 %, 48 98 % (`cargo run --release -p tilefuse-tune
    /// --example replay_efforts`). `seconds` still ends a
    /// quick tune of a slow kernel at 30 s.
    pub fn trials(self) -> usize {
        match self {
            Effort::None => 0,
            Effort::Quick => 48,
            Effort::Full => 160,
        }
    }

    pub(crate) fn seconds(self) -> f64 {
        match self {
            Effort::None => 0.0,
            Effort::Quick => 30.0,
            Effort::Full => 600.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub effort: Effort,
    /// `None`: exhaustive when the space fits the trial budget, else the
    /// surrogate (which starts with a pattern descent).
    pub strategy: Option<Strategy>,
    pub trials: Option<usize>,
    /// Bounds the whole run: the search stops when the second look and the
    /// final run, estimated from the times so far, would end past it.
    pub seconds: Option<f64>,
    /// Fixes the inputs and the strategy's choices: a run is reproducible.
    pub seed: u64,
    /// The inputs candidates are checked and timed on (a workload's);
    /// random ones made from `seed` when `None`.
    pub inputs: Option<Arc<[Tensor]>>,
    /// The outputs candidates must give on `inputs` (a workload's own
    /// reference's); the reference evaluator's when `None`.
    pub expected: Option<Arc<[Tensor]>>,
    /// How close a candidate's f32 outputs must be to them (see
    /// [`crate::measure::RTOL`]).
    pub rtol: f64,
    /// Warm-up launches of each finalist before the final round (a
    /// candidate is warmed up by its check and its short timing).
    pub warmup: usize,
    /// Launches of a candidate's full timing and of each final round.
    pub repeat: usize,
    /// Tune only these fields (paths of the scheduler's tunable fields);
    /// every one when `None`.
    pub fields: Option<Vec<String>>,
    /// Fault injection for tests: the outputs of the trial with this index
    /// are corrupted before the reference check, which must disqualify it.
    pub corrupt_trial: Option<usize>,
    /// The fingerprint of the device tuned for: trials carry it, and
    /// results measured on another device are refused.
    pub fingerprint: Option<String>,
    /// Cached winners of the fusion's family on this device, nearest
    /// first (see [`crate::nearest`]): tried right after the default.
    pub warm_start: Vec<HeuristicParams>,
    /// Results recorded by an earlier run of the same tuning (a journal),
    /// by params JSON: a candidate found here is not measured again.
    pub recorded: HashMap<String, Measured>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            effort: Effort::Quick,
            strategy: None,
            trials: None,
            seconds: None,
            seed: 0,
            inputs: None,
            expected: None,
            rtol: RTOL,
            warmup: 2,
            repeat: 10,
            fields: None,
            corrupt_trial: None,
            fingerprint: None,
            warm_start: Vec::new(),
            recorded: HashMap::new(),
        }
    }
}

impl Options {
    /// What candidates of `fusion` are checked and timed on: the inputs
    /// and expected outputs given, or random ones from the seed.
    pub(crate) fn problem(&self, fusion: &Fusion) -> Result<Problem, TuneError> {
        Problem::of(
            fusion,
            self.inputs.clone(),
            self.expected.clone(),
            self.seed,
            self.rtol,
        )
        .map_err(TuneError::Failed)
    }

    pub(crate) fn timing(&self) -> Timing {
        Timing {
            warmup: self.warmup,
            repeat: self.repeat,
        }
    }
}

/// Why tuning ended without a result.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The observer asked to stop, or Ctrl-C interrupted a measurement.
    #[error("tuning was stopped")]
    Stopped,
    #[error("{0}")]
    Failed(String),
}

impl TuneError {
    /// A runtime error: `Stopped` when Ctrl-C caused it.
    pub(crate) fn from_runtime(e: String) -> TuneError {
        match e.as_str() {
            INTERRUPTED => TuneError::Stopped,
            _ => TuneError::Failed(e),
        }
    }
}

/// Sees each trial and the best time so far; returns false to stop.
pub type Observer<'a> = dyn FnMut(&Trial, Option<f64>) -> bool + 'a;
