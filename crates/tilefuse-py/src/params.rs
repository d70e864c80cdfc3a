//! The params format, by struct name. Python builds its classes from this
//! table and the JSON Schemas, so no struct is translated by hand.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use serde_json::Value;
use tilefuse::params::{HeuristicParams, ParamsError, StructInfo, structs};

use crate::errors::{OrRaise, guard};
use crate::json_value::{to_py, to_value};

fn lookup(name: &str) -> PyResult<StructInfo> {
    structs()
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = structs().iter().map(|s| s.name).collect();
            PyKeyError::new_err(format!(
                "no params struct {name:?}; known: {}",
                known.join(", ")
            ))
        })
}

fn normalize(name: &str, value: Value) -> PyResult<Result<Value, ParamsError>> {
    if name == "HeuristicParams" {
        return Ok(HeuristicParams::from_value(value).map(|p| p.to_value()));
    }
    Ok((lookup(name)?.normalize)(value))
}

/// `[(name, scheduler tag or None), ...]` for every params struct.
#[pyfunction]
pub fn params_structs() -> PyResult<Vec<(&'static str, Option<&'static str>)>> {
    guard(|| Ok(structs().iter().map(|s| (s.name, s.scheduler)).collect()))
}

/// The JSON Schema of a params struct, as a dict.
#[pyfunction]
pub fn params_schema<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    guard(|| to_py(py, (lookup(name)?.schema)()))
}

/// Validates a possibly partial dict and returns it complete.
#[pyfunction]
pub fn params_normalize<'py>(
    py: Python<'py>,
    name: &str,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        let normalized = normalize(name, to_value(value)?)?.or_raise(py)?;
        to_py(py, &normalized)
    })
}

/// Parses JSON text and returns the complete dict.
#[pyfunction]
pub fn params_from_json<'py>(
    py: Python<'py>,
    name: &str,
    text: &str,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ParamsError::new("", format!("invalid JSON: {e}")))
            .or_raise(py)?;
        let normalized = normalize(name, value)?.or_raise(py)?;
        to_py(py, &normalized)
    })
}
