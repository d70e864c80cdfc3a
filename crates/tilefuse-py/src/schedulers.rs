//! The automatic schedulers: which accept a fusion, their default params,
//! and scheduling with given params.

use pyo3::prelude::*;
use tilefuse::params::{HeuristicParams, ParamsError, SchedulerKind, Tunable};
use tilefuse::schedulers as auto;

use crate::errors::{OrRaise, guard};
use crate::fusion::PyFusion;
use crate::json_value::{to_py, to_value};
use crate::schedule::{PyDevice, PySchedule};

/// `[(scheduler, None if it accepts the fusion else the reason), ...]`.
#[pyfunction]
pub fn schedulers(fusion: &PyFusion) -> PyResult<Vec<(&'static str, Option<String>)>> {
    guard(|| {
        Ok(SchedulerKind::ALL
            .iter()
            .map(|&s| (s.as_str(), auto::can_schedule(&fusion.inner, s).err()))
            .collect())
    })
}

/// The default heuristic's params (a dict with its `"scheduler"` tag).
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None))]
pub fn heuristics<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        fusion.check_outputs(py)?;
        let kind = parse_kind(scheduler).or_raise(py)?;
        let params = auto::heuristics(&fusion.inner, kind, &device.inner.info()).or_raise(py)?;
        to_py(py, &params.to_value())
    })
}

/// A scheduler named at the Python edge (`None`: the first that takes the
/// fusion).
fn parse_kind(name: Option<&str>) -> Result<Option<SchedulerKind>, ParamsError> {
    name.map(|n| n.parse().map_err(|e| ParamsError::new("scheduler", e)))
        .transpose()
}

/// `(scheduler, [{"path", "domain", "values"}, ...])`: the fields a tuner
/// may set when `scheduler` (or the first that takes the fusion) schedules
/// it for `device`.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None))]
pub fn tunables<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
    guard(|| {
        let (kind, fields) = tunable_fields(py, fusion, device, scheduler)?;
        let fields: Vec<serde_json::Value> = fields
            .iter()
            .map(|t| serde_json::json!({"path": t.path, "domain": t.domain, "values": t.domain.values()}))
            .collect();
        Ok((kind.as_str(), to_py(py, &serde_json::Value::from(fields))?))
    })
}

/// The digest of the space the tuner searches for `fusion` on `device`
/// (`tilefuse::tune::space_digest`): a cache entry tuned over another
/// lacks fields or values the scheduler declares now.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None))]
pub fn space_digest(
    py: Python<'_>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let (_, fields) = tunable_fields(py, fusion, device, scheduler)?;
        Ok(tilefuse::tune::space_digest(&fields))
    })
}

/// The scheduler named (or the first that takes `fusion`) and the fields a
/// tuner may set when it schedules `fusion` for `device`.
fn tunable_fields(
    py: Python<'_>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
) -> PyResult<(SchedulerKind, Vec<Tunable>)> {
    fusion.check_outputs(py)?;
    let kind = parse_kind(scheduler).or_raise(py)?;
    auto::tunables(&fusion.inner, kind, &device.inner.info()).or_raise(py)
}

/// What seed heuristics decide on: the scheduler that takes `fusion`, its
/// compute ops, the matmul's `[m, n, k]`, the reduction's shape.
#[pyfunction]
pub fn features<'py>(py: Python<'py>, fusion: &PyFusion) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        fusion.check_outputs(py)?;
        let f = auto::features(&fusion.inner)
            .map_err(|e| ParamsError::new("scheduler", e))
            .or_raise(py)?;
        to_py(py, &serde_json::to_value(f).expect("features serialize"))
    })
}

/// Schedules `fusion` with params given as a dict.
#[pyfunction]
pub fn schedule(
    py: Python<'_>,
    fusion: &PyFusion,
    params: &Bound<'_, PyAny>,
    device: &PyDevice,
) -> PyResult<PySchedule> {
    guard(|| {
        fusion.check_outputs(py)?;
        let params = HeuristicParams::from_value(to_value(params)?).or_raise(py)?;
        let inner = auto::schedule(&fusion.inner, &params, &device.inner.info()).or_raise(py)?;
        Ok(PySchedule::wrap(inner))
    })
}

/// `[(segment fusion, scheduler, parent input ids, parent output ids), ...]`.
#[pyfunction]
#[allow(clippy::type_complexity)] // the tuple is the Python-facing shape
pub fn segments(
    py: Python<'_>,
    fusion: &PyFusion,
) -> PyResult<Vec<(PyFusion, &'static str, Vec<usize>, Vec<usize>)>> {
    guard(|| {
        fusion.check_outputs(py)?;
        let parts = auto::segments(&fusion.inner)
            .map_err(|e| ParamsError::new("scheduler", e))
            .or_raise(py)?;
        let ids = |ts: &[tilefuse::TensorId]| ts.iter().map(|t| t.0).collect();
        Ok(parts
            .into_iter()
            .map(|s| {
                (
                    PyFusion::wrap(s.fusion),
                    s.scheduler.as_str(),
                    ids(&s.inputs),
                    ids(&s.outputs),
                )
            })
            .collect())
    })
}
