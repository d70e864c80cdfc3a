//! A tuning run's trials as Python sees them: a progress callback called
//! with each, and the run's error as a Python exception.

use std::cell::RefCell;

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use tilefuse::tune::{Trial, TuneError};

use crate::errors::params_error;
use crate::json_value::to_py;

/// Calls `progress(trial, best)` (a Python callable) after each trial; an
/// exception it raises is kept in `raised` and stops the run.
pub(crate) fn observer<'a, 'py>(
    py: Python<'py>,
    progress: Option<&'a Bound<'py, PyAny>>,
    raised: &'a RefCell<Option<PyErr>>,
) -> impl FnMut(&Trial, Option<f64>) -> bool + 'a {
    move |trial, best| {
        let Some(cb) = progress else { return true };
        let call = serde_json::to_value(trial)
            .map_err(|e| params_error(py, "trial", e.to_string()))
            .and_then(|t| to_py(py, &t))
            .and_then(|t| cb.call1((t, best)));
        match call {
            Ok(_) => true,
            Err(e) => {
                *raised.borrow_mut() = Some(e);
                false
            }
        }
    }
}

/// A run's error as a Python exception: for a stopped run, what the
/// progress callback raised, else Ctrl-C.
pub(crate) fn tune_error(py: Python<'_>, e: TuneError, raised: &RefCell<Option<PyErr>>) -> PyErr {
    match e {
        TuneError::Stopped => (raised.take()).unwrap_or_else(|| PyKeyboardInterrupt::new_err(())),
        TuneError::Failed(e) => params_error(py, "scheduler", e),
    }
}
