//! `tilefuse._native.Schedule`, `Device` and `Kernel`. Blocks and loops
//! cross the boundary as integer ids; the Python layer wraps them.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tilefuse::Device;
use tilefuse::sched::ir::{BlockId, LoopId, Role, Scope, ThreadAxis};
use tilefuse::sched::lowering::lower_steps;
use tilefuse::{Fusion, Kernel, Schedule, ScheduleError, Target};

use crate::arrays::{self, Input};
use crate::errors::{OrRaise, guard};
use crate::fusion::PyFusion;
use crate::json_value::to_py;

#[pyclass(module = "tilefuse._native", name = "Schedule")]
pub struct PySchedule {
    /// Copy-on-write, as `PyFusion::inner`: `build` works on its own `Arc`.
    pub(crate) inner: Arc<Schedule>,
}

impl PySchedule {
    pub fn wrap(inner: Schedule) -> Self {
        PySchedule {
            inner: Arc::new(inner),
        }
    }

    fn make_mut(&mut self) -> &mut Schedule {
        Arc::make_mut(&mut self.inner)
    }
}

fn loops(ids: &[u32]) -> Vec<LoopId> {
    ids.iter().map(|&l| LoopId(l)).collect()
}

fn ids(loops: &[LoopId]) -> Vec<u32> {
    loops.iter().map(|l| l.0).collect()
}

#[pymethods]
impl PySchedule {
    #[new]
    fn new(py: Python<'_>, fusion: &PyFusion) -> PyResult<Self> {
        guard(|| {
            fusion.check_outputs(py)?;
            Ok(PySchedule::wrap(Schedule::new(&fusion.inner)))
        })
    }

    /// Replays a JSON trace on a fresh schedule of `fusion`.
    #[staticmethod]
    fn replay(py: Python<'_>, fusion: &PyFusion, trace: &str) -> PyResult<Self> {
        guard(|| {
            Schedule::replay_json(&fusion.inner, trace)
                .map(PySchedule::wrap)
                .or_raise(py)
        })
    }

    fn get_block(&self, py: Python<'_>, name: &str) -> PyResult<u32> {
        guard(|| self.inner.get_block(name).map(|b| b.0).or_raise(py))
    }

    fn get_blocks(&self) -> PyResult<Vec<u32>> {
        guard(|| Ok(self.inner.get_blocks().iter().map(|b| b.0).collect()))
    }

    fn get_loops(&self, py: Python<'_>, block: u32) -> PyResult<Vec<u32>> {
        guard(|| {
            self.inner
                .get_loops(BlockId(block))
                .map(|l| ids(&l))
                .or_raise(py)
        })
    }

    fn block_name(&self, block: u32) -> PyResult<String> {
        guard(|| Ok(self.inner.block_name(BlockId(block))))
    }

    /// `(name, extent, kind)` of a loop; kind is `serial`, `parallel`,
    /// `vectorized`, `unrolled`, a thread axis such as `workgroup.x`, or
    /// `pipelined: ...` (`LoopKind::describe`).
    fn loop_info(&self, l: u32) -> PyResult<Option<(String, u64, String)>> {
        guard(|| {
            let lp = self.inner.kernel().loops.get(l as usize);
            Ok(lp.map(|lp| (lp.name.clone(), lp.extent, lp.kind.describe())))
        })
    }

    #[pyo3(signature = (loop_, factors, names=None))]
    fn split(
        &mut self,
        py: Python<'_>,
        loop_: u32,
        factors: Vec<Option<i64>>,
        names: Option<Vec<String>>,
    ) -> PyResult<Vec<u32>> {
        guard(|| {
            let factors = factors
                .iter()
                .map(|f| {
                    f.map(|x| {
                        u64::try_from(x).map_err(|_| {
                            negative_factors(&factors).loops([self.inner.loop_name(LoopId(loop_))])
                        })
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>, _>>()
                .or_raise(py)?;
            self.make_mut()
                .split(LoopId(loop_), &factors, names.as_deref())
                .map(|l| ids(&l))
                .or_raise(py)
        })
    }

    fn fuse(&mut self, py: Python<'_>, loops_: Vec<u32>) -> PyResult<u32> {
        guard(|| {
            self.make_mut()
                .fuse(&loops(&loops_))
                .map(|l| l.0)
                .or_raise(py)
        })
    }

    fn reorder(&mut self, py: Python<'_>, loops_: Vec<u32>) -> PyResult<()> {
        guard(|| self.make_mut().reorder(&loops(&loops_)).or_raise(py))
    }

    fn bind(&mut self, py: Python<'_>, loop_: u32, axis: &str) -> PyResult<()> {
        guard(|| {
            let axis = ThreadAxis::parse(axis)
                .ok_or_else(|| {
                    ScheduleError::pre(
                        "bind",
                        format!(
                            "unknown thread axis {axis:?}; expected one of {}",
                            ThreadAxis::ALL.map(ThreadAxis::name).join(", ")
                        ),
                    )
                    .loops([self.inner.loop_name(LoopId(loop_))])
                })
                .or_raise(py)?;
            self.make_mut().bind(LoopId(loop_), axis).or_raise(py)
        })
    }

    fn parallel(&mut self, py: Python<'_>, loop_: u32) -> PyResult<()> {
        guard(|| self.make_mut().parallel(LoopId(loop_)).or_raise(py))
    }

    fn vectorize(&mut self, py: Python<'_>, loop_: u32) -> PyResult<()> {
        guard(|| self.make_mut().vectorize(LoopId(loop_)).or_raise(py))
    }

    fn unroll(&mut self, py: Python<'_>, loop_: u32) -> PyResult<()> {
        guard(|| self.make_mut().unroll(LoopId(loop_)).or_raise(py))
    }

    fn pipeline(
        &mut self,
        py: Python<'_>,
        loop_: u32,
        stages: u32,
        prefetch_gap: u32,
    ) -> PyResult<()> {
        guard(|| {
            self.make_mut()
                .pipeline(LoopId(loop_), stages, prefetch_gap)
                .or_raise(py)
        })
    }

    fn rfactor(&mut self, py: Python<'_>, loop_: u32) -> PyResult<u32> {
        guard(|| {
            self.make_mut()
                .rfactor(LoopId(loop_))
                .map(|b| b.0)
                .or_raise(py)
        })
    }

    fn decompose_reduction(&mut self, py: Python<'_>, block: u32, loop_: u32) -> PyResult<u32> {
        guard(|| {
            self.make_mut()
                .decompose_reduction(BlockId(block), LoopId(loop_))
                .map(|b| b.0)
                .or_raise(py)
        })
    }

    fn compute_at(&mut self, py: Python<'_>, block: u32, loop_: u32) -> PyResult<()> {
        guard(|| {
            self.make_mut()
                .compute_at(BlockId(block), LoopId(loop_))
                .or_raise(py)
        })
    }

    fn reverse_compute_at(&mut self, py: Python<'_>, block: u32, loop_: u32) -> PyResult<()> {
        guard(|| {
            self.make_mut()
                .reverse_compute_at(BlockId(block), LoopId(loop_))
                .or_raise(py)
        })
    }

    fn cache_read(
        &mut self,
        py: Python<'_>,
        block: u32,
        buffer: &str,
        scope: &str,
    ) -> PyResult<u32> {
        guard(|| {
            let scope = parse_scope(scope).or_raise(py)?;
            self.make_mut()
                .cache_read(BlockId(block), buffer, scope)
                .map(|b| b.0)
                .or_raise(py)
        })
    }

    fn cache_write(&mut self, py: Python<'_>, block: u32, scope: &str) -> PyResult<u32> {
        guard(|| {
            let scope = parse_scope(scope).or_raise(py)?;
            self.make_mut()
                .cache_write(BlockId(block), scope)
                .map(|b| b.0)
                .or_raise(py)
        })
    }

    fn set_scope(&mut self, py: Python<'_>, block: u32, scope: &str) -> PyResult<()> {
        guard(|| {
            let scope = parse_scope(scope).or_raise(py)?;
            self.make_mut()
                .set_scope(BlockId(block), scope)
                .or_raise(py)
        })
    }

    fn compute_inline_all(&mut self, keep: Vec<u32>) -> PyResult<Vec<u32>> {
        guard(|| {
            let keep: Vec<BlockId> = keep.into_iter().map(BlockId).collect();
            let inlined = self.make_mut().compute_inline_all(&keep);
            Ok(inlined.into_iter().map(|b| b.0).collect())
        })
    }

    fn compute_inline(&mut self, py: Python<'_>, block: u32) -> PyResult<()> {
        guard(|| self.make_mut().compute_inline(BlockId(block)).or_raise(py))
    }

    fn reverse_compute_inline(&mut self, py: Python<'_>, block: u32) -> PyResult<()> {
        guard(|| {
            self.make_mut()
                .reverse_compute_inline(BlockId(block))
                .or_raise(py)
        })
    }

    /// The fusion the schedule was made for (an automatic scheduler's may
    /// be the canonical form of the one given); `replay` takes it back.
    fn fusion(&self) -> PyResult<PyFusion> {
        guard(|| Ok(PyFusion::wrap(self.inner.fusion().clone())))
    }

    /// The applied primitives as JSON.
    fn trace(&self) -> PyResult<String> {
        guard(|| Ok(self.inner.trace_json()))
    }

    /// The applied primitives as a Python script over `f`.
    fn trace_as_python(&self, py: Python<'_>) -> PyResult<String> {
        guard(|| self.inner.trace_as_python().or_raise(py))
    }

    fn __str__(&self) -> PyResult<String> {
        guard(|| Ok(self.inner.to_string()))
    }

    /// `[(pass, state after it), ...]` for every lowering pass `device`
    /// runs.
    fn lower(&self, py: Python<'_>, device: &PyDevice) -> PyResult<Vec<(&'static str, String)>> {
        guard(|| {
            let target = Target::of(&device.inner.info());
            let steps = lower_steps(self.inner.kernel(), target).or_raise(py)?;
            Ok(steps.into_iter().map(|s| (s.pass, s.text)).collect())
        })
    }

    /// Compiles the schedule for `device`.
    fn build(slf: &Bound<'_, Self>, device: &PyDevice) -> PyResult<PyKernel> {
        let py = slf.py();
        guard(|| {
            // Its own handle: no borrow of `slf` is held while detached.
            let schedule = Arc::clone(&slf.borrow().inner);
            let kernel = py.detach(|| device.inner.build(&schedule)).or_raise(py)?;
            Ok(PyKernel {
                inner: Arc::new(kernel),
                fusion: schedule.fusion().clone(),
            })
        })
    }
}

fn parse_scope(scope: &str) -> Result<Scope, ScheduleError> {
    match scope {
        "global" => Ok(Scope::Global),
        "workgroup" => Ok(Scope::Workgroup),
        "private" => Ok(Scope::Private),
        other => Err(ScheduleError::pre(
            "cache",
            format!("unknown scope {other:?}; expected \"global\", \"workgroup\" or \"private\""),
        )),
    }
}

fn negative_factors(factors: &[Option<i64>]) -> ScheduleError {
    ScheduleError::pre(
        "split",
        format!("factors must be positive, got {factors:?}"),
    )
}

#[pyclass(module = "tilefuse._native", name = "Device", frozen)]
pub struct PyDevice {
    pub(crate) inner: Device,
}

#[pymethods]
impl PyDevice {
    /// The GPU when wgpu finds an adapter, else the CPU; the environment
    /// variable `TILEFUSE_DEVICE=gpu|cpu` forces one.
    #[staticmethod]
    fn default(py: Python<'_>) -> PyResult<Self> {
        guard(|| {
            py.detach(Device::default)
                .map(|inner| PyDevice { inner })
                .or_raise(py)
        })
    }

    /// The CPU device; `TILEFUSE_NUM_THREADS` sets its threads.
    #[staticmethod]
    fn cpu(py: Python<'_>) -> PyResult<Self> {
        guard(|| {
            Device::cpu_from_env()
                .map(|inner| PyDevice { inner })
                .or_raise(py)
        })
    }

    #[staticmethod]
    fn gpu(py: Python<'_>) -> PyResult<Self> {
        guard(|| {
            py.detach(Device::gpu)
                .map(|inner| PyDevice { inner })
                .or_raise(py)
        })
    }

    /// What heuristics see: backend, vendor, name, adapter type, limits,
    /// features, subgroup sizes; cores and SIMD width on the CPU.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let info = serde_json::to_value(self.inner.info()).expect("device info serializes");
            to_py(py, &info)
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        guard(|| {
            let i = self.inner.info();
            Ok(format!(
                "<Device {} ({}, {})>",
                i.name, i.backend, i.adapter_type
            ))
        })
    }
}

#[pyclass(module = "tilefuse._native", name = "Kernel", frozen)]
pub struct PyKernel {
    inner: Arc<Kernel>,
    fusion: Fusion,
}

impl PyKernel {
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.inner
    }
}

#[pymethods]
impl PyKernel {
    /// Runs the kernel: numpy arrays in, a list of numpy arrays out (the
    /// caller's `out` arrays where given). The GIL is released meanwhile.
    #[pyo3(signature = (*arrays, out=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        arrays: &Bound<'py, PyTuple>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        guard(|| {
            let f = &self.fusion;
            arrays::call(py, f, f.outputs(), arrays, out, |inputs, outputs| {
                self.inner.run_into(inputs, outputs)
            })
        })
    }

    /// Median, min and max seconds per launch, and every sample.
    #[pyo3(signature = (*arrays, warmup=3, repeat=20))]
    fn benchmark(
        &self,
        py: Python<'_>,
        arrays: &Bound<'_, PyTuple>,
        warmup: usize,
        repeat: usize,
    ) -> PyResult<(f64, f64, f64, Vec<f64>)> {
        guard(|| {
            let inputs = arrays::inputs(&self.fusion, arrays)?;
            let views: Vec<_> = inputs.iter().map(Input::view).collect();
            let t = py
                .detach(|| self.inner.benchmark(&views, warmup, repeat))
                .or_raise(py)?;
            Ok((t.median, t.min, t.max, t.samples))
        })
    }

    #[getter]
    fn wgsl(&self, py: Python<'_>) -> PyResult<String> {
        guard(|| Ok(self.inner.wgsl().or_raise(py)?.source.clone()))
    }

    /// Binding index → buffer name, dtype, storage, shape, access and role.
    #[getter]
    fn bindings<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        guard(|| {
            self.inner
                .wgsl()
                .or_raise(py)?
                .bindings
                .iter()
                .map(|b| {
                    let d = PyDict::new(py);
                    d.set_item("binding", b.binding)?;
                    d.set_item("name", &b.name)?;
                    d.set_item("dtype", b.dtype.name())?;
                    d.set_item("storage", b.storage)?;
                    d.set_item("shape", b.shape.clone())?;
                    d.set_item("access", if b.writes { "read_write" } else { "read" })?;
                    let (role, index) = match b.role {
                        Role::Input(i) => ("input", Some(i)),
                        Role::Output(i) => ("output", Some(i)),
                        Role::Temp => ("temp", None),
                    };
                    d.set_item("role", role)?;
                    d.set_item("index", index)?;
                    Ok(d)
                })
                .collect()
        })
    }

    /// The WebGPU features the module needs (`"shader-f16"`, `"subgroups"`).
    #[getter]
    fn features(&self, py: Python<'_>) -> PyResult<Vec<&'static str>> {
        guard(|| Ok(self.inner.wgsl().or_raise(py)?.features.clone()))
    }

    /// One entry per dispatch, in order: entry point, workgroup count,
    /// workgroup size and the bindings it uses.
    #[getter]
    fn dispatch<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        guard(|| {
            self.inner
                .wgsl()
                .or_raise(py)?
                .stages
                .iter()
                .map(|s| {
                    let d = PyDict::new(py);
                    d.set_item("entry_point", &s.entry_point)?;
                    d.set_item("workgroups", s.workgroups.to_vec())?;
                    d.set_item("workgroup_size", s.workgroup_size.to_vec())?;
                    d.set_item("bindings", s.bindings.clone())?;
                    Ok(d)
                })
                .collect()
        })
    }
}
