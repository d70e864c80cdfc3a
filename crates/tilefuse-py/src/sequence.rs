//! `tilefuse._native.KernelSequence`: the GPU kernels of a segmented fusion
//! run as one submission, intermediates kept on the device.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tilefuse::TensorId;
use tilefuse::runtime::gpu::{GpuSequence, Wiring};

use crate::arrays;
use crate::errors::{OrRaise, guard};
use crate::fusion::PyFusion;
use crate::schedule::PyKernel;

#[pyclass(module = "tilefuse._native", name = "KernelSequence", frozen)]
pub struct PySequence {
    inner: GpuSequence,
    fusion: tilefuse::Fusion,
    results: Vec<TensorId>,
}

#[pymethods]
impl PySequence {
    /// `kernels[i]` reads the parent fusion's tensors `wiring[i][0]` and
    /// writes `wiring[i][1]`; a call returns the tensors `results`.
    #[new]
    fn new(
        py: Python<'_>,
        fusion: &PyFusion,
        kernels: Vec<PyRef<'_, PyKernel>>,
        wiring: Vec<(Vec<usize>, Vec<usize>)>,
        results: Vec<usize>,
    ) -> PyResult<Self> {
        guard(|| {
            let ids = |v: Vec<usize>| v.into_iter().map(TensorId).collect::<Vec<_>>();
            let wiring = wiring
                .into_iter()
                .map(|(inputs, outputs)| Wiring {
                    inputs: ids(inputs),
                    outputs: ids(outputs),
                })
                .collect();
            let fusion = (*fusion.inner).clone();
            let results = ids(results);
            let kernels = kernels.iter().map(|k| Arc::clone(k.kernel())).collect();
            let inner =
                GpuSequence::new(fusion.clone(), kernels, wiring, results.clone()).or_raise(py)?;
            Ok(PySequence {
                inner,
                fusion,
                results,
            })
        })
    }

    /// Runs every kernel: numpy arrays in (one per parent fusion input), a
    /// list of numpy arrays out, `out` as for `Kernel.run`.
    #[pyo3(signature = (*arrays, out=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        arrays: &Bound<'py, PyTuple>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        guard(|| {
            arrays::call(
                py,
                &self.fusion,
                &self.results,
                arrays,
                out,
                |inputs, outputs| self.inner.run_into(inputs, outputs),
            )
        })
    }
}
