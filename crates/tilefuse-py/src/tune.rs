//! The autotuner and the heuristic cache, for `tilefuse.tune` and
//! `tilefuse.cache`. Results and entries cross as JSON-shaped dicts.

use std::cell::RefCell;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tilefuse::params::{HeuristicParams, ParamsError, SchedulerKind};
use tilefuse::sched::DeviceInfo;
use tilefuse::schedulers::pick;
use tilefuse::tune::seeds::builtin;
use tilefuse::tune::{
    AutotunerHeuristic, Bundle, Cache, CacheKey, Entry, Family, ReplayExecutor, SeedContext,
    Written, layers, tune_with,
};

use crate::arrays;
use crate::errors::{OrRaise, guard, params_error};
use crate::fusion::PyFusion;
use crate::json_value::{to_py, to_value};
use crate::observer::{observer, tune_error};
use crate::remote::PyExecutor;
use crate::replay;
use crate::schedule::PyDevice;
use crate::tune_options;

/// A Python seed heuristic, already found eligible by the Python side:
/// its seeds, and its `neighbors(params_dict)` if it has one.
struct PyHeuristic<'py> {
    name: String,
    seeds: Vec<HeuristicParams>,
    neighbors: Option<Bound<'py, PyAny>>,
}

impl<'py> PyHeuristic<'py> {
    fn new(item: &Bound<'py, PyAny>) -> PyResult<Self> {
        let (name, seeds, neighbors): (String, Vec<Bound<'py, PyAny>>, Option<Bound<'py, PyAny>>) =
            item.extract()?;
        let seeds = seeds
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let value = to_value(s)?;
                HeuristicParams::from_value(value)
                    .map_err(|e| e.within(&format!("{name}.seed_configs[{i}]")))
                    .or_raise(item.py())
            })
            .collect::<PyResult<_>>()?;
        Ok(PyHeuristic {
            name,
            seeds,
            neighbors,
        })
    }
}

impl AutotunerHeuristic for PyHeuristic<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_eligible(&self, _: &SeedContext) -> Result<bool, String> {
        Ok(true)
    }

    fn seed_configs(&self, _: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        Ok(self.seeds.clone())
    }

    fn neighbors(
        &self,
        params: &HeuristicParams,
        _: &SeedContext,
    ) -> Result<Vec<HeuristicParams>, String> {
        let Some(f) = &self.neighbors else {
            return Ok(Vec::new());
        };
        let py = f.py();
        let near = to_py(py, &params.to_value())
            .and_then(|p| f.call1((p,)))
            .and_then(|r| r.extract::<Vec<Bound<'_, PyAny>>>())
            .map_err(|e| format!("neighbors raised {e}"))?;
        near.iter()
            .map(|p| {
                let value = to_value(p).map_err(|e| e.to_string())?;
                HeuristicParams::from_value(value).map_err(|e| e.to_string())
            })
            .collect()
    }
}

/// Tunes `fusion` on `device`, seeded by the built-in heuristics (unless
/// `builtin_heuristics` is false) and by `heuristics`, `(name, seeds,
/// neighbors or None)` of the Python ones that apply; `progress(trial,
/// best_time)` is called after each trial; candidates run on `inputs`
/// (one array per fusion input) where given, else on random ones, and
/// must give the `expected` outputs for them (one array per fusion
/// output; by default the reference evaluator's). With
/// an `executor` (see `remote::PyExecutor`), candidates are measured
/// there and `device` is the info dict of its workers' device; with
/// `replay` (a `Recording`'s JSON) their times are read from it. Returns
/// the result as a dict.
#[pyfunction]
#[pyo3(signature = (
    fusion, device, options, progress=None, heuristics=Vec::new(), builtin_heuristics=true,
    inputs=None, expected=None, executor=None, replay=None,
))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub fn tune<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &Bound<'py, PyAny>,
    options: &Bound<'py, PyDict>,
    progress: Option<Bound<'py, PyAny>>,
    heuristics: Vec<Bound<'py, PyAny>>,
    builtin_heuristics: bool,
    inputs: Option<Bound<'py, PyTuple>>,
    expected: Option<Bound<'py, PyTuple>>,
    executor: Option<Bound<'py, PyAny>>,
    replay: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    guard(|| {
        fusion.check_outputs(py)?;
        let mut opts = tune_options::options(&to_value(options.as_any())?).or_raise(py)?;
        let reference = arrays::Reference::new(&fusion.inner, inputs, expected)?;
        (opts.inputs, opts.expected) = (reference.inputs, reference.expected);
        let ours = if builtin_heuristics {
            builtin()
        } else {
            Vec::new()
        };
        let theirs = (heuristics.iter())
            .map(PyHeuristic::new)
            .collect::<PyResult<Vec<_>>>()?;
        let seeders: Vec<&dyn AutotunerHeuristic> = (ours.iter().map(|h| h.as_ref()))
            .chain(theirs.iter().map(|h| h as &dyn AutotunerHeuristic))
            .collect();
        let raised = RefCell::new(None);
        let mut observe = observer(py, progress.as_ref(), &raised);
        let info = device_info(device)?;
        let result = match (executor, replay) {
            (Some(executor), _) => {
                let mut remote = PyExecutor::new(executor, &raised);
                tune_with(
                    &fusion.inner,
                    &info,
                    &opts,
                    &seeders,
                    &mut remote,
                    &mut observe,
                )
            }
            (None, Some(text)) => {
                let recording = replay::recording(py, text)?;
                let mut replay = ReplayExecutor::new(&recording, 1);
                tune_with(
                    &fusion.inner,
                    &info,
                    &opts,
                    &seeders,
                    &mut replay,
                    &mut observe,
                )
            }
            (None, None) => {
                let device = device.cast::<PyDevice>()?.borrow();
                tilefuse::tune::tune(&fusion.inner, &device.inner, &opts, &seeders, &mut observe)
            }
        };
        match result {
            Ok(r) => to_py(py, &serde_json::to_value(&r).expect("a result serializes")),
            Err(e) => Err(tune_error(py, e, &raised)),
        }
    })
}

/// A `Device`'s info, or an info dict (of a remote worker's device).
fn device_info(device: &Bound<'_, PyAny>) -> PyResult<DeviceInfo> {
    if let Ok(d) = device.cast::<PyDevice>() {
        return Ok(d.borrow().inner.info());
    }
    serde_json::from_value(to_value(device)?)
        .map_err(|e| params_error(device.py(), "device", format!("not a device's info: {e}")))
}

fn open(directory: Option<String>) -> Result<Cache, ParamsError> {
    Cache::open(layers::directory(directory.map(PathBuf::from))?)
        .map_err(|e| ParamsError::new("cache", e.to_string()))
}

fn key(
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
) -> Result<CacheKey, ParamsError> {
    let kind = scheduler_of(fusion, scheduler)?;
    Ok(CacheKey::new(&fusion.inner, kind, &device.inner.info()))
}

/// The scheduler named, or the one that takes `fusion`.
pub(crate) fn scheduler_of(
    fusion: &PyFusion,
    scheduler: Option<&str>,
) -> Result<SchedulerKind, ParamsError> {
    match scheduler {
        Some(s) => s.parse().map_err(|e| ParamsError::new("scheduler", e)),
        None => pick(&fusion.inner).map_err(|e| ParamsError::new("scheduler", e)),
    }
}

fn entry_to_py<'py>(py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, &layers::entry_value(e))
}

/// `(entry or None, layer, warnings)` of a lookup.
type Found<'py> = (Option<Bound<'py, PyAny>>, Option<String>, Vec<String>);

/// `(entry or None, layer, warnings)`: the winner for `fusion` on
/// `device` from the user's cache, else from the first of `bundles` that
/// has one; `layer` is `"cache"` or the bundle's path. A bundle that does
/// not load is a warning.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None, directory=None, bundles=Vec::new()))]
pub fn cache_get<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
    directory: Option<String>,
    bundles: Vec<String>,
) -> PyResult<Found<'py>> {
    guard(|| {
        let key = key(fusion, device, scheduler).or_raise(py)?;
        let dir = layers::directory(directory.map(PathBuf::from)).or_raise(py)?;
        let found = layers::lookup(&dir, &key, &bundles).or_raise(py)?;
        let entry = found.entry.map(|e| to_py(py, &e)).transpose()?;
        Ok((entry, found.layer, found.warnings))
    })
}

/// Writes every entry of the cache to the bundle file `path`;
/// `(entries, warnings)`.
#[pyfunction]
#[pyo3(signature = (path, directory=None))]
pub fn bundle_export(
    py: Python<'_>,
    path: PathBuf,
    directory: Option<String>,
) -> PyResult<(usize, Vec<String>)> {
    guard(|| {
        let cache = open(directory).or_raise(py)?;
        let (b, warnings) = Bundle::export(&cache).or_raise(py)?;
        b.save(&path).or_raise(py)?;
        Ok((b.len(), warnings))
    })
}

/// Every entry of the bundle file `path`.
#[pyfunction]
pub fn bundle_entries<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Vec<Bound<'py, PyAny>>> {
    guard(|| {
        let b = layers::bundle(&path).or_raise(py)?;
        b.entries().map(|e| entry_to_py(py, e)).collect()
    })
}

/// Merges the bundle files `inputs` into `output` (the faster entry per
/// key); how many entries it has.
#[pyfunction]
pub fn bundle_merge(py: Python<'_>, output: PathBuf, inputs: Vec<PathBuf>) -> PyResult<usize> {
    guard(|| {
        let mut merged = Bundle::default();
        for p in &inputs {
            merged.merge(Bundle::load(p).or_raise(py)?);
        }
        merged.save(&output).or_raise(py)?;
        Ok(merged.len())
    })
}

/// Imports the bundle file `path` into the cache; `(stored, entries,
/// warnings)`.
#[pyfunction]
#[pyo3(signature = (path, directory=None))]
pub fn bundle_import(
    py: Python<'_>,
    path: PathBuf,
    directory: Option<String>,
) -> PyResult<(usize, usize, Vec<String>)> {
    guard(|| {
        let cache = open(directory).or_raise(py)?;
        let b = Bundle::load(&path).or_raise(py)?;
        let (stored, warnings) = b.import_into(&cache).or_raise(py)?;
        Ok((stored, b.len(), warnings))
    })
}

/// `(params dicts, warnings)`: the winners of `fusion`'s family (its
/// structure at any sizes) for `scheduler` on `device` (a `Device` or a
/// worker's info dict), in the user's cache and in `bundles`, nearest
/// sizes first, at most `limit`: a tuning run's warm start.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler, directory=None, bundles=Vec::new(), limit=4))]
pub fn cache_warm_start<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &Bound<'py, PyAny>,
    scheduler: &str,
    directory: Option<String>,
    bundles: Vec<String>,
    limit: usize,
) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<String>)> {
    guard(|| {
        let kind = scheduler
            .parse()
            .map_err(|e| params_error(py, "scheduler", e))?;
        let key = CacheKey::new(&fusion.inner, kind, &device_info(device)?);
        let dir = layers::directory(directory.map(PathBuf::from)).or_raise(py)?;
        let (near, warnings) =
            layers::family_winners(&dir, &key, &fusion.inner, &bundles, limit).or_raise(py)?;
        let params = near
            .iter()
            .map(|e| to_py(py, &e.params))
            .collect::<PyResult<_>>()?;
        Ok((params, warnings))
    })
}

/// Stores a tuning winner as the entry of its key (`samples`: its time in
/// each round of the final run; `space`: the digest of the space it was
/// tuned over); `(stored, warnings)`, `stored` false when a faster entry
/// was there.
#[pyfunction]
#[pyo3(signature = (fusion, device, params, best_time, default_time=None, trials=0, strategy=String::new(), heuristics=Vec::new(), samples=Vec::new(), space=String::new(), directory=None))]
#[allow(clippy::too_many_arguments)] // keyword arguments from Python
pub fn cache_put(
    py: Python<'_>,
    fusion: &PyFusion,
    device: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    best_time: f64,
    default_time: Option<f64>,
    trials: usize,
    strategy: String,
    heuristics: Vec<String>,
    samples: Vec<f64>,
    space: String,
    directory: Option<String>,
) -> PyResult<(bool, Vec<String>)> {
    guard(|| {
        let params = HeuristicParams::from_value(to_value(params)?).or_raise(py)?;
        let key = CacheKey::new(&fusion.inner, params.kind(), &device_info(device)?);
        let mut entry = Entry::measured(key, params.to_value(), best_time);
        entry.family = Family::of(&fusion.inner);
        entry.signature = fusion.inner.signature();
        entry.default_time = default_time;
        entry.trials = trials;
        entry.strategy = strategy;
        entry.heuristics = heuristics;
        entry.samples = samples;
        entry.space = space;
        let cache = open(directory).or_raise(py)?;
        let (written, warnings) = cache.put(&entry).or_raise(py)?;
        Ok((written == Written::Stored, warnings))
    })
}

/// `(entries, warnings)`: every whole entry of the cache.
#[pyfunction]
#[pyo3(signature = (directory=None))]
pub fn cache_entries<'py>(
    py: Python<'py>,
    directory: Option<String>,
) -> PyResult<(Vec<Bound<'py, PyAny>>, Vec<String>)> {
    guard(|| {
        let cache = open(directory).or_raise(py)?;
        let (entries, warnings) = cache.entries().or_raise(py)?;
        let entries = entries
            .iter()
            .map(|e| entry_to_py(py, e))
            .collect::<PyResult<_>>()?;
        Ok((entries, warnings))
    })
}

/// Removes every entry; how many there were.
#[pyfunction]
#[pyo3(signature = (directory=None))]
pub fn cache_clear(py: Python<'_>, directory: Option<String>) -> PyResult<usize> {
    guard(|| {
        let cache = open(directory).or_raise(py)?;
        cache.clear().or_raise(py)
    })
}

/// Removes the entries no lookup can serve any more (an older params
/// format or scheduler/codegen version), corrupt files set aside and dead
/// writers' temporary files; how many entries it removed.
#[pyfunction]
#[pyo3(signature = (directory=None))]
pub fn cache_prune(py: Python<'_>, directory: Option<String>) -> PyResult<usize> {
    guard(|| {
        let cache = open(directory).or_raise(py)?;
        cache.prune().or_raise(py)
    })
}

/// The cache directory in use (`TILEFUSE_CACHE` or the user cache).
#[pyfunction]
pub fn cache_dir() -> Option<String> {
    Cache::default_dir().map(|d| d.display().to_string())
}

/// `[(entry, differing key fields), ...]`: the entries nearest the key of
/// `fusion` on `device`, fewest differences first.
#[pyfunction]
#[pyo3(signature = (fusion, device, scheduler=None, directory=None))]
pub fn cache_explain<'py>(
    py: Python<'py>,
    fusion: &PyFusion,
    device: &PyDevice,
    scheduler: Option<&str>,
    directory: Option<String>,
) -> PyResult<Vec<(Bound<'py, PyAny>, Vec<String>)>> {
    guard(|| {
        let want = key(fusion, device, scheduler).or_raise(py)?;
        let cache = open(directory).or_raise(py)?;
        let (entries, _) = cache.entries().or_raise(py)?;
        let mut near: Vec<(Entry, Vec<String>)> = entries
            .into_iter()
            .map(|e| {
                let d = want.differences(&e.key);
                (e, d)
            })
            .collect();
        near.sort_by_key(|(_, d)| d.len());
        near.iter()
            .take(5)
            .map(|(e, d)| Ok((entry_to_py(py, e)?, d.clone())))
            .collect()
    })
}
