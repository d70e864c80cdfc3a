//! The Python exception hierarchy, mapped from the Rust error enums in this
//! one place:
//!
//! ```text
//! TilefuseError(Exception)
//! ├── FusionError(TilefuseError, ValueError)    ← FusionError, RuntimeError::Argument
//! ├── ParamsError(TilefuseError, ValueError)    ← ParamsError (.path, .message)
//! ├── ScheduleError(TilefuseError, ValueError)  ← ScheduleError (.primitive,
//! │                                                .blocks, .loops),
//! │                                                LowerError (.lowering_pass)
//! ├── DeviceError(TilefuseError, RuntimeError)  ← RuntimeError::{Limit, Gpu, OutOfMemory}
//! └── InternalError(TilefuseError, RuntimeError) ← RuntimeError::Internal, and any Rust panic
//! KeyboardInterrupt ← Interrupted (Ctrl-C during native work; see `interrupt`)
//! MemoryError       ← OutOfMemory (names the bytes)
//! OSError           ← CacheError::Io (the subclass its errno names, with the
//!                     file: FileNotFoundError, PermissionError, ...)
//! ParamsError       ← CacheError::Invalid (at path "cache")
//! ```
//!
//! Every entry point of the module runs inside [`guard`], so a panic (a
//! broken invariant of tilefuse) reaches Python as `InternalError`, which
//! `except Exception` catches, never as pyo3's `PanicException`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::thread::ThreadId;

use pyo3::create_exception;
use pyo3::exceptions::{
    PyException, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use tilefuse::tune::CacheError;
use tilefuse::{FusionError, LowerError, ParamsError, RuntimeError, ScheduleError};

create_exception!(
    tilefuse,
    TilefuseError,
    PyException,
    "Base class of every tilefuse error."
);

/// One exception class of the hierarchy: its name, its standard-library
/// base, its doc, the attributes an instance carries (with class-level
/// defaults, so that an error raised from Python has them too), and the
/// cell it is created in once.
struct Class {
    name: &'static str,
    std_base: fn(Python<'_>) -> Bound<'_, PyType>,
    doc: &'static str,
    attributes: &'static [(&'static str, Unset)],
    cell: PyOnceLock<Py<PyType>>,
}

/// An attribute's value where the error does not set it.
#[derive(Clone, Copy)]
enum Unset {
    None,
    EmptyTuple,
}

static FUSION: Class = Class {
    name: "FusionError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "A fusion that is not well formed, or arguments that do not fit it: the message names the op and the shapes or dtypes.",
    attributes: &[],
    cell: PyOnceLock::new(),
};
static PARAMS: Class = Class {
    name: "ParamsError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "Params that cannot be used. `.path` is the field path (e.g. 'tile_sizes.cta_tile.m'), `.message` what is wrong there.",
    attributes: &[],
    cell: PyOnceLock::new(),
};
static SCHEDULE: Class = Class {
    name: "ScheduleError",
    std_base: |py| py.get_type::<PyValueError>(),
    doc: "A schedule primitive whose precondition fails, naming the block or loop and the condition (`.primitive` names the primitive; `.blocks` and `.loops` are tuples of the names of the blocks and loops at fault), or a schedule the device's lowering cannot take (`.lowering_pass` names the pass); `.primitive` and `.lowering_pass` are None and `.blocks` and `.loops` empty where they do not apply.",
    attributes: &[
        ("primitive", Unset::None),
        ("lowering_pass", Unset::None),
        ("blocks", Unset::EmptyTuple),
        ("loops", Unset::EmptyTuple),
    ],
    cell: PyOnceLock::new(),
};
static DEVICE: Class = Class {
    name: "DeviceError",
    std_base: |py| py.get_type::<PyRuntimeError>(),
    doc: "A kernel the device cannot run (the message names the limit), or a device failure.",
    attributes: &[],
    cell: PyOnceLock::new(),
};

static INTERNAL: Class = Class {
    name: "InternalError",
    std_base: |py| py.get_type::<PyRuntimeError>(),
    doc: "A broken invariant of tilefuse itself (a bug): the message says what failed. Please report it with the code that raised it.",
    attributes: &[],
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
                for &(name, unset) in self.attributes {
                    match unset {
                        Unset::None => dict.set_item(name, py.None())?,
                        Unset::EmptyTuple => dict.set_item(name, PyTuple::empty(py))?,
                    }
                }
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
        match self {
            FusionError::Interrupted => PyKeyboardInterrupt::new_err(()),
            FusionError::OutOfMemory { .. } => PyMemoryError::new_err(self.to_string()),
            other => FUSION.err(py, other.to_string()),
        }
    }
}

/// What a Python `ScheduleError` carries beside its message: `.primitive`
/// and `.lowering_pass` (`None` where they do not apply), `.blocks` and
/// `.loops` (tuples of the names at fault, empty where none is).
#[derive(Default)]
struct AtFault<'a> {
    primitive: Option<&'a str>,
    pass: Option<&'a str>,
    blocks: &'a [String],
    loops: &'a [String],
}

fn schedule_err(py: Python<'_>, message: String, at: AtFault<'_>) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let err = SCHEDULE.get(py)?.call1((message,))?;
        err.setattr("primitive", at.primitive)?;
        err.setattr("lowering_pass", at.pass)?;
        err.setattr("blocks", PyTuple::new(py, at.blocks)?)?;
        err.setattr("loops", PyTuple::new(py, at.loops)?)?;
        Ok(PyErr::from_value(err))
    };
    make().unwrap_or_else(|e| e)
}

impl ToPyErr for ScheduleError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        let primitive = match &self {
            ScheduleError::Precondition { primitive, .. } => Some(*primitive),
            _ => None,
        };
        let at = AtFault {
            primitive,
            blocks: self.blocks_at_fault(),
            loops: self.loops_at_fault(),
            ..AtFault::default()
        };
        schedule_err(py, self.to_string(), at)
    }
}

impl ToPyErr for LowerError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        let at = AtFault {
            pass: Some(self.pass),
            ..AtFault::default()
        };
        schedule_err(py, self.to_string(), at)
    }
}

impl ToPyErr for RuntimeError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            RuntimeError::Argument(m) => FUSION.err(py, m),
            RuntimeError::Schedule(e) => e.to_py_err(py),
            RuntimeError::Lower(e) => e.to_py_err(py),
            RuntimeError::Interrupted => PyKeyboardInterrupt::new_err(()),
            RuntimeError::OutOfMemory { .. } => PyMemoryError::new_err(self.to_string()),
            RuntimeError::Internal(m) => INTERNAL.err(py, m),
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

impl ToPyErr for CacheError {
    fn to_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            // OSError(errno, strerror, filename) is the subclass errno names.
            CacheError::Io { path, source } => match source.raw_os_error() {
                Some(errno) => {
                    let strerror = std::io::Error::from_raw_os_error(errno).to_string();
                    let strerror = strerror.trim_end_matches(&format!(" (os error {errno})"));
                    PyOSError::new_err((errno, strerror.to_owned(), path.display().to_string()))
                }
                None => PyOSError::new_err(format!("{}: {source}", path.display())),
            },
            invalid @ CacheError::Invalid { .. } => params_error(py, "cache", invalid.to_string()),
        }
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
    for class in [&FUSION, &PARAMS, &SCHEDULE, &DEVICE, &INTERNAL] {
        m.add(class.name, class.get(py)?)?;
    }
    Ok(())
}

/// Runs an entry point's body, turning a panic into `InternalError` with
/// the panic's message.
pub fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Python::attach(|py| {
            Err(INTERNAL.err(
                py,
                format!("internal error (a bug in tilefuse; please report it): {what}"),
            ))
        })
    })
}

/// A `ParamsError` raised from the bindings, at `path`.
pub fn params_error(py: Python<'_>, path: &str, message: String) -> PyErr {
    ParamsError::new(path, message).to_py_err(py)
}

/// The interrupt hook of the native crates: Python's signal handlers run
/// (on the main thread, where Python delivers signals), and a pending
/// Ctrl-C stops the native work, which then raises `KeyboardInterrupt`.
pub fn install_interrupt_hook() {
    static MAIN: OnceLock<ThreadId> = OnceLock::new();
    MAIN.get_or_init(|| std::thread::current().id());
    tilefuse::ir::interrupt::set_hook(|| {
        MAIN.get() == Some(&std::thread::current().id())
            && Python::attach(|py| py.check_signals().is_err())
    });
}
