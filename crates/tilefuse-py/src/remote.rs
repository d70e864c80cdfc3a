//! Tuning with candidates measured elsewhere: [`PyExecutor`] is the
//! search's side of a Python executor (Ray workers, say), and
//! [`PyTuneProblem`] the worker's side, which measures the candidates.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::Value;
use tilefuse::Fusion;
use tilefuse::tune::measure::RTOL;
use tilefuse::tune::{
    Candidate, Executor, Finalist, Measured, Problem, Recording, ReplayExecutor, RoundTimes,
    Stopwatch, Timing, TuneError, measure,
};

use crate::arrays;
use crate::errors::{guard, params_error};
use crate::fusion::PyFusion;
use crate::json_value::{to_py, to_value};
use crate::replay;
use crate::schedule::PyDevice;

/// A Python executor: `capacity() -> int`, `submit(candidate: dict)`,
/// `next() -> (id, measured: dict)` and `final_round(params: list, warmup,
/// repeat, rounds) -> list[list[float]]`. An exception it raises stops
/// tuning and is raised again by `tune`.
pub struct PyExecutor<'a, 'py> {
    inner: Bound<'py, PyAny>,
    raised: &'a RefCell<Option<PyErr>>,
}

impl<'a, 'py> PyExecutor<'a, 'py> {
    pub fn new(inner: Bound<'py, PyAny>, raised: &'a RefCell<Option<PyErr>>) -> Self {
        PyExecutor { inner, raised }
    }

    /// `result`'s value, or `Stopped` with the exception kept for `tune`.
    fn kept<T>(&self, result: PyResult<T>) -> Result<T, TuneError> {
        result.map_err(|e| {
            *self.raised.borrow_mut() = Some(e);
            TuneError::Stopped
        })
    }

    fn decoded<T: serde::de::DeserializeOwned>(
        &self,
        obj: &Bound<'py, PyAny>,
        what: &str,
    ) -> PyResult<T> {
        serde_json::from_value(to_value(obj)?)
            .map_err(|e| params_error(obj.py(), what, format!("from the executor: {e}")))
    }
}

impl Executor for PyExecutor<'_, '_> {
    fn capacity(&self) -> usize {
        let n = self
            .inner
            .call_method0("capacity")
            .and_then(|n| n.extract());
        self.kept(n).unwrap_or(0)
    }

    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError> {
        let value = serde_json::to_value(&candidate).expect("a candidate serializes");
        let call =
            to_py(self.inner.py(), &value).and_then(|c| self.inner.call_method1("submit", (c,)));
        self.kept(call).map(|_| ())
    }

    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        let got = self.inner.call_method0("next").and_then(|r| {
            let (id, measured): (usize, Bound<'_, PyAny>) = r.extract()?;
            Ok((id, self.decoded(&measured, "measured")?))
        });
        self.kept(got)
    }

    fn final_round(
        &mut self,
        finalists: &[Finalist],
        timing: Timing,
        rounds: usize,
    ) -> Result<RoundTimes, TuneError> {
        let py = self.inner.py();
        let value = serde_json::to_value(finalists).expect("finalists serialize");
        let got = to_py(py, &value)
            .and_then(|f| {
                self.inner
                    .call_method1("final_round", (f, timing.warmup, timing.repeat, rounds))
            })
            .and_then(|r| r.extract::<RoundTimes>());
        let rounds = self.kept(got)?;
        if rounds.len() != finalists.len() || rounds.iter().any(Vec::is_empty) {
            let why = format!(
                "final_round gave times for {} finalists, not for each of {} in a round at least",
                rounds.len(),
                finalists.len()
            );
            return Err(TuneError::Failed(why));
        }
        Ok(rounds)
    }
}

/// What a worker measures candidates on: the fusion, its inputs (a
/// workload's, or random ones from `seed`) and the reference's outputs;
/// or a recording whose times it reads instead. A worker measures on one
/// device, one candidate at a time, each time paired with the default
/// heuristic's kernel (see `Stopwatch::with_default`).
#[pyclass(name = "TuneProblem", module = "tilefuse._native", frozen)]
pub struct PyTuneProblem {
    fusion: Arc<Fusion>,
    problem: Problem,
    stopwatch: Mutex<Option<Stopwatch>>,
    replay: Option<Recording>,
}

#[pymethods]
impl PyTuneProblem {
    /// See `tilefuse._native.tune` for `inputs` and `expected`; `rtol`
    /// by default `measure::RTOL`.
    #[new]
    #[pyo3(signature = (fusion, seed=0, inputs=None, expected=None, rtol=None, replay=None))]
    fn new(
        py: Python<'_>,
        fusion: &PyFusion,
        seed: u64,
        inputs: Option<Bound<'_, PyTuple>>,
        expected: Option<Bound<'_, PyTuple>>,
        rtol: Option<f64>,
        replay: Option<&str>,
    ) -> PyResult<Self> {
        guard(|| {
            let replay = replay.map(|text| replay::recording(py, text)).transpose()?;
            let r = arrays::Reference::new(&fusion.inner, inputs, expected)?;
            let rtol = rtol.unwrap_or(RTOL);
            let problem = Problem::of(&fusion.inner, r.inputs, r.expected, seed, rtol)
                .map_err(|e| params_error(py, "inputs", e))?;
            Ok(PyTuneProblem {
                fusion: Arc::clone(&fusion.inner),
                problem,
                stopwatch: Mutex::new(None),
                replay,
            })
        })
    }

    /// Schedules, builds, checks and times `candidate` (a dict: `id`,
    /// `params`, `best`, `corrupt`, `timing`) on `device`: a dict with
    /// `status`, `time`, `error`.
    fn measure<'py>(
        &self,
        py: Python<'py>,
        device: &PyDevice,
        candidate: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let c: Candidate = serde_json::from_value(to_value(candidate.as_any())?)
                .map_err(|e| params_error(py, "candidate", e.to_string()))?;
            let m = match &self.replay {
                Some(r) => r.measured(&c.point),
                None => {
                    let built = measure::build_timed(&self.fusion, &device.inner, &c.params);
                    let mut stopwatch = self
                        .stopwatch
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    (stopwatch.get_or_insert_with(|| {
                        let problem = self.problem.clone();
                        Stopwatch::with_default(
                            &self.fusion,
                            &device.inner,
                            problem,
                            c.timing.repeat,
                        )
                    }))
                    .measure(built, &c)
                }
            };
            to_py(py, &serde_json::to_value(m).expect("a result serializes"))
        })
    }

    /// `finalists` (`{params, point}` dicts) timed in `rounds` interleaved
    /// rounds on `device`: each one's median in each round.
    fn final_round(
        &self,
        py: Python<'_>,
        device: &PyDevice,
        finalists: &Bound<'_, PyAny>,
        warmup: usize,
        repeat: usize,
        rounds: usize,
    ) -> PyResult<RoundTimes> {
        guard(|| {
            let finalists: Vec<Finalist> = serde_json::from_value(to_value(finalists)?)
                .map_err(|e| params_error(py, "finalists", e.to_string()))?;
            let timing = Timing { warmup, repeat };
            let failed = |e: String| params_error(py, "final_round", e);
            if let Some(r) = &self.replay {
                let mut replay = ReplayExecutor::new(r, 1);
                return replay
                    .final_round(&finalists, timing, rounds)
                    .map_err(|e| failed(e.to_string()));
            }
            let params: Vec<Value> = finalists.into_iter().map(|f| f.params).collect();
            measure::final_round(
                &self.fusion,
                &device.inner,
                &self.problem,
                &params,
                timing,
                rounds,
            )
            .map_err(failed)
        })
    }
}
