//! `tilefuse._native`: PyO3 bindings over the `tilefuse` facade crate. This
//! crate holds no logic; the Python package `tilefuse` re-exports it.

// PyO3 extracts arguments as owned values (`Vec<i64>`, not `&[i64]`).
#![allow(clippy::needless_pass_by_value)]

mod arrays;
mod errors;
mod fusion;
mod json_value;
mod learned;
mod observer;
mod output_pool;
mod params;
mod remote;
mod replay;
mod schedule;
mod schedulers;
mod sequence;
mod tune;
mod tune_options;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FUSION_SCHEMA_VERSION", tilefuse::ir::FUSION_SCHEMA_VERSION)?;
    m.add("PARAMS_VERSION", tilefuse::params::PARAMS_VERSION)?;
    errors::register(m)?;
    errors::install_interrupt_hook();
    m.add_class::<fusion::PyFusion>()?;
    m.add_class::<schedule::PySchedule>()?;
    m.add_class::<schedule::PyDevice>()?;
    m.add_class::<schedule::PyKernel>()?;
    m.add_class::<sequence::PySequence>()?;
    m.add_class::<remote::PyTuneProblem>()?;
    m.add_function(wrap_pyfunction!(learned::learned_features, m)?)?;
    m.add_function(wrap_pyfunction!(learned::learned_save, m)?)?;
    m.add_function(wrap_pyfunction!(learned::learned_get, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::schedulers, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::heuristics, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::schedule, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::tunables, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::space_digest, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::segments, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_structs, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_schema, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_normalize, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_from_json, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune, m)?)?;
    m.add_function(wrap_pyfunction!(replay::record, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay_trials, m)?)?;
    m.add_function(wrap_pyfunction!(schedulers::features, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_get, m)?)?;
    m.add_function(wrap_pyfunction!(tune::bundle_export, m)?)?;
    m.add_function(wrap_pyfunction!(tune::bundle_entries, m)?)?;
    m.add_function(wrap_pyfunction!(tune::bundle_merge, m)?)?;
    m.add_function(wrap_pyfunction!(tune::bundle_import, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_put, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_prune, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_warm_start, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_entries, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_clear, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(tune::cache_explain, m)?)?;
    Ok(())
}
