//! The Python exception hierarchy, mapped from the Rust error enums in this
//! one place:
//!
//! ```text
//! TilefuseError(Exception)
//! ├── FusionError(TilefuseError, ValueError)    ← FusionError, RuntimeError::Argument
//! ├── ParamsError(TilefuseError, ValueError)    ← ParamsError (.path, .message)
//! ├── ScheduleError(TilefuseError, ValueError)  ← ScheduleError
//! └── DeviceError(TilefuseError, RuntimeError)  ← RuntimeError::{Limit, Gpu, Internal}
//! ```

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use tilefuse::{FusionError, ParamsError, RuntimeError, ScheduleError};

create_exception!(
    tilefuse,
    TilefuseError,
    PyException,
    "Base class of every tilefuse error."
);

/// One exception class of the hierarchy: its name, its standard-library
/// base, its doc, and the cell it is created in once.
struct Class {
    name: &'static str,
    std_base: fn(Python<'_>) -> Bound<'_, PyType>,
    doc: &'static str,
    cell: PyOnceLock<Py<PyType>>,
}

static FUSION: Class = Class {
    name: "FusionError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "A fusion that is not well formed, or arguments that do not fit it: the message names the op and the shapes or dtypes.",
    cell: PyOnceLock::new(),
};
static PARAMS: Class = Class {
    name: "ParamsError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "Params that cannot be used. `.path` is the field path (e.g. 'tile_sizes.cta_tile.m'), `.message` what is wrong there.",
    cell: PyOnceLock::new(),
};
static SCHEDULE: Class = Class {
    name: "ScheduleError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "A schedule primitive whose precondition fails, naming the block or loop and the condition.",
    cell: PyOnceLock::new(),
};
static DEVICE: Class = Class {
    name: "DeviceError",
    std_base: |py| py.get_type::<PyRuntimeError>(),
    doc: "A kernel the device cannot run (the message names the limit), or a device failure.",
    cell: PyOnceLock::new(),
};

impl Class {
    /// `class NAME(TilefuseError, std_base)`.
    fn get<'py>(&'static self, py: Python<'py>) -> PyResult<&'py Bound<'py, PyType>> {
        self.cell
            .get_or_try_init(py, || {
                let bases =
                    PyTuple::new(py, [py.get_type::<TilefuseError>(), (self.std_base)(py)])?;
                let dict = PyDict::new(py);
                dict.set_item("__module__", "tilefuse")?;
                dict.set_item("__doc__", self.doc)?;
                let ty = py.get_type::<PyType>().call1((self.name, bases, dict))?;
                Ok::<_, PyErr>(ty.cast_into::<PyType>()?.unbind())
            })
            .map(|ty| ty.bind(py))
    }

    fn err(&'static self, py: Python<'_>, message: String) -> PyErr {
        match self.get(py) {
            Ok(ty) => PyErr::from_type(ty.clone(), message),
            Err(e) => e,
        }
    }
}

/// Converts the Rust errors of the crates below into Python exceptions.
pub trait ToPyErr {
    fn to_py_err(self, py: Python<'_>) -> PyErr;
}

impl ToPyErr for FusionError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        FUSION.err(py, self.to_string())
    }
}

impl ToPyErr for ScheduleError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        SCHEDULE.err(py, self.to_string())
    }
}

impl ToPyErr for RuntimeError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            RuntimeError::Argument(m) => FUSION.err(py, m),
            RuntimeError::Schedule(e) => e.to_py_err(py),
            other => DEVICE.err(py, other.to_string()),
        }
    }
}

impl ToPyErr for ParamsError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        let make = || -> PyResult<PyErr> {
            let err = PARAMS.get(py)?.call1((self.to_string(),))?;
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
    for class in [&FUSION, &PARAMS, &SCHEDULE, &DEVICE] {
        m.add(class.name, class.get(py)?)?;
    }
    Ok(())
}
