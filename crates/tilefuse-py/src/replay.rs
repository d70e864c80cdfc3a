//! Recorded spaces, for `tilefuse.replay`: every point's time measured
//! once, then search strategies compared against the recording offline.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tilefuse::tune::replay::trials_over_seeds;
use tilefuse::tune::{Recording, Strategy};

use crate::errors::{OrRaise, guard, params_error};
use crate::fusion::PyFusion;
use crate::json_value::to_value;
use crate::observer::{observer, tune_error};
use crate::schedule::PyDevice;
use crate::tune_options;

/// A recording (`Recording` JSON) to replay.
pub fn recording(py: Python<'_>, text: &str) -> PyResult<Recording> {
    serde_json::from_str(text)
        .map_err(|e| params_error(py, "replay", format!("not a recording: {e}")))
}

/// Every point of the space of `fusion` on `device` (narrowed to
/// `options["fields"]`) with its time, as `Recording` JSON: what `replay`
/// reads. With `passes` above 1 each point's time is the median of that
/// many exhaustive runs, so that a slow spell of the machine moves one
/// pass only; the fastest kernels are then confirmed
/// (`Recording::confirm`). `progress(trial, best)` is called after each
/// trial.
#[pyfunction]
#[pyo3(signature = (fusion, device, options, description=String::new(), passes=1, progress=None))]
pub fn record(
    py: Python<'_>,
    fusion: &PyFusion,
    device: &PyDevice,
    options: &Bound<'_, PyDict>,
    description: String,
    passes: usize,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<String> {
    guard(|| {
        let opts = tune_options::options(&to_value(options.as_any())?).or_raise(py)?;
        let raised = RefCell::new(None);
        let mut observe = observer(py, progress.as_ref(), &raised);
        let mut runs = Vec::new();
        for _ in 0..passes.max(1) {
            let run = Recording::record(
                &fusion.inner,
                &device.inner,
                &opts,
                &description,
                &mut observe,
            );
            runs.push(run.map_err(|e| tune_error(py, e, &raised))?);
        }
        let mut r = Recording::median_of(&runs);
        r.confirm(&fusion.inner, &device.inner, &opts)
            .map_err(|e| tune_error(py, e, &raised))?;
        Ok(serde_json::to_string(&r).expect("a recording serializes"))
    })
}

/// Trials `strategy` takes on `recording` (its JSON) to get within
/// `tolerance` of its best, for each seed in `first..first + seeds`,
/// fewest first (the whole space for a seed that never gets there).
#[pyfunction]
pub fn replay_trials(
    py: Python<'_>,
    recording: &str,
    strategy: &str,
    tolerance: f64,
    first: u64,
    seeds: u64,
) -> PyResult<Vec<usize>> {
    let r = self::recording(py, recording)?;
    let strategy: Strategy = serde_json::from_value(strategy.into())
        .map_err(|e| params_error(py, "strategy", e.to_string()))?;
    if tolerance.is_nan() || tolerance < 0.0 {
        let message = format!("{tolerance} is not a fraction ≥ 0");
        return Err(params_error(py, "tolerance", message));
    }
    let seeds = first..first.saturating_add(seeds);
    Ok(py.detach(|| trials_over_seeds(&r, strategy, tolerance, seeds)))
}
