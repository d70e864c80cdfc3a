//! Learned heuristics for `tilefuse.learn` and `Fusion.heuristics`:
//! features, saving a document, and the lookup layer after the cache.

use std::path::PathBuf;

use pyo3::prelude::*;
use tilefuse::tune::layers;
use tilefuse::tune::learned::{FEATURES, LearnedHeuristic, Node, shape_features};

use crate::errors::{OrRaise, guard, params_error};
use crate::fusion::PyFusion;
use crate::json_value::{to_py, to_value};
use crate::schedule::PyDevice;
use crate::tune::scheduler_of;

/// `(names, values)`: the shape features a learned heuristic's tree
/// splits on, for `fusion`.
#[pyfunction]
pub fn learned_features(py: Python<'_>, fusion: &PyFusion) -> PyResult<(Vec<String>, Vec<f64>)> {
    guard(|| {
        let f = tilefuse::schedulers::features(&fusion.inner)
            .map_err(|e| params_error(py, "fusion", e))?;
        let names = FEATURES.iter().map(|s| s.to_string()).collect();
        Ok((names, shape_features(&f).to_vec()))
    })
}

/// Writes a learned heuristic named `name` for `fusion`'s family on
/// `device` (`nodes`, `configs` and `meta` as JSON-shaped values) into the
/// cache's `learned/` folder; its path.
#[pyfunction]
#[pyo3(signature = (fusion, device, name, nodes, configs, meta, directory=None))]
#[allow(clippy::too_many_arguments)] // keyword arguments from Python
pub fn learned_save(
    py: Python<'_>,
    fusion: &PyFusion,
    device: &PyDevice,
    name: &str,
    nodes: &Bound<'_, PyAny>,
    configs: &Bound<'_, PyAny>,
    meta: &Bound<'_, PyAny>,
    directory: Option<String>,
) -> PyResult<String> {
    guard(|| {
        let scheduler = scheduler_of(fusion, None).or_raise(py)?;
        let nodes: Vec<Node> = serde_json::from_value(to_value(nodes)?)
            .map_err(|e| params_error(py, "nodes", e.to_string()))?;
        let configs = serde_json::from_value(to_value(configs)?)
            .map_err(|e| params_error(py, "configs", e.to_string()))?;
        let info = device.inner.info();
        let h = LearnedHeuristic::new(
            name,
            &fusion.inner,
            scheduler,
            &info,
            nodes,
            configs,
            to_value(meta)?,
        )
        .map_err(|e| params_error(py, "learned heuristic", e))?;
        let dir = layers::directory(directory.map(PathBuf::from)).or_raise(py)?;
        Ok(layers::save_learned(&dir, &h)
            .or_raise(py)?
            .display()
            .to_string())
    })
}

/// What a learned heuristic picks for `fusion`: `(params or None, path or
/// None, leaf or None, learned_on or None, warnings)`; `params` is `None`
/// with a path where the leaf keeps the default heuristic; `learned_on`
/// names the device it was learned on where that is another of the same
/// kind.
type Picked<'py> = (
    Option<Bound<'py, PyAny>>,
    Option<String>,
    Option<usize>,
    Option<String>,
    Vec<String>,
);

/// The pick of the learned heuristic that serves `fusion` on `device`,
/// from the cache's `learned/` folder or `bundles`.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None, directory=None, bundles=Vec::new()))]
pub fn learned_get<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
    directory: Option<String>,
    bundles: Vec<String>,
) -> PyResult<Picked<'py>> {
    guard(|| {
        let kind = scheduler_of(fusion, scheduler).or_raise(py)?;
        let dir = layers::directory(directory.map(PathBuf::from)).or_raise(py)?;
        let info = device.inner.info();
        let (found, warnings) = layers::learned(&dir, &fusion.inner, kind, &info, &bundles);
        let Some(found) = found else {
            return Ok((None, None, None, None, warnings));
        };
        let params = found.pick.params.map(|p| to_py(py, &p)).transpose()?;
        let path = Some(found.path.display().to_string());
        Ok((
            params,
            path,
            Some(found.pick.leaf),
            found.learned_on,
            warnings,
        ))
    })
}
