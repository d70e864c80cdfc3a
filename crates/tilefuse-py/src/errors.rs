//! The Python exception hierarchy, mapped from the Rust error enums in this
//! one place:
//!
//! ```text
//! TilefuseError(Exception)
//! ├── FusionError(TilefuseError, ValueError)   ← tilefuse_ir::FusionError
//! └── ParamsError(TilefuseError, ValueError)   ← tilefuse_params::ParamsError (.path, .message)
//! ```

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use tilefuse::{FusionError, ParamsError};

create_exception!(
    tilefuse,
    TilefuseError,
    PyException,
    "Base class of every tilefuse error."
);

static FUSION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static PARAMS_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `class NAME(TilefuseError, ValueError)`: a `ValueError` to callers that
/// only know Python, a `TilefuseError` to callers that catch ours.
fn value_error_subclass<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    doc: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let bases = PyTuple::new(
            py,
            [
                py.get_type::<TilefuseError>(),
                py.get_type::<PyValueError>(),
            ],
        )?;
        let dict = PyDict::new(py);
        dict.set_item("__module__", "tilefuse")?;
        dict.set_item("__doc__", doc)?;
        let ty = py.get_type::<PyType>().call1((name, bases, dict))?;
        Ok::<_, PyErr>(ty.cast_into::<PyType>()?.unbind())
    })
    .map(|ty| ty.bind(py))
}

fn fusion_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    value_error_subclass(
        py,
        &FUSION_ERROR,
        "FusionError",
        "A fusion that is not well formed: the message names the op and the shapes or dtypes.",
    )
}

fn params_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    value_error_subclass(
        py,
        &PARAMS_ERROR,
        "ParamsError",
        "Params that cannot be used. `.path` is the field path (e.g. \
         'tile_sizes.cta_tile.m'), `.message` what is wrong there.",
    )
}

/// Converts the Rust errors of the crates below into Python exceptions.
pub trait ToPyErr {
    fn to_py_err(self, py: Python<'_>) -> PyErr;
}

impl ToPyErr for FusionError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match fusion_error_type(py) {
            Ok(ty) => PyErr::from_type(ty.clone(), self.to_string()),
            Err(e) => e,
        }
    }
}

impl ToPyErr for ParamsError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        let make = || -> PyResult<PyErr> {
            let err = params_error_type(py)?.call1((self.to_string(),))?;
            err.setattr("path", &self.path)?;
            err.setattr("message", &self.message)?;
            Ok(PyErr::from_value(err))
        };
        make().unwrap_or_else(|e| e)
    }
}

/// `result.or_raise(py)?` turns a crate error into the Python exception.
pub trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T, E: ToPyErr> OrRaise<T> for Result<T, E> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| e.to_py_err(py))
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TilefuseError", py.get_type::<TilefuseError>())?;
    m.add("FusionError", fusion_error_type(py)?)?;
    m.add("ParamsError", params_error_type(py)?)?;
    Ok(())
}
