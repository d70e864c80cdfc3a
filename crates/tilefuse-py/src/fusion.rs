//! `tilefuse._native.Fusion`: the Rust fusion with tensors as integer ids.
//! The operator sugar (`x + y`, `x.sum(axis=1)`) lives in Python.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tilefuse::{BinaryOp, DType, Fusion, FusionError, ReduceOp, TensorId, UnaryOp, evaluate};

use crate::arrays::{self, Input, to_numpy};
use crate::errors::{OrRaise, guard};
use crate::json_value::to_py;

#[pyclass(module = "tilefuse._native", name = "Fusion", eq)]
#[derive(Clone, PartialEq)]
pub struct PyFusion {
    /// Shared with calls in progress (`evaluate` runs on its own `Arc`
    /// without holding a borrow of this object); writes copy it first if
    /// such a call still holds it, so threads never see "Already borrowed".
    pub inner: Arc<Fusion>,
}

fn parse_dtype(name: &str) -> Result<DType, FusionError> {
    name.parse()
        .map_err(|e: tilefuse::ir::UnknownDType| FusionError::Name(e.to_string()))
}

fn lookup<T: Copy>(
    kind: &str,
    name: &str,
    all: &[T],
    of: fn(T) -> &'static str,
) -> Result<T, FusionError> {
    all.iter().copied().find(|&f| of(f) == name).ok_or_else(|| {
        let known: Vec<&str> = all.iter().map(|&f| of(f)).collect();
        FusionError::Name(format!(
            "unknown {kind} op {name:?}; expected one of {}",
            known.join(", ")
        ))
    })
}

fn extents(op: &str, shape: &[i64]) -> Result<Vec<usize>, FusionError> {
    shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| FusionError::Name(format!("{op}: shape {shape:?} has a negative extent")))
}

impl PyFusion {
    pub fn wrap(inner: Fusion) -> Self {
        PyFusion {
            inner: Arc::new(inner),
        }
    }

    fn make_mut(&mut self) -> &mut Fusion {
        Arc::make_mut(&mut self.inner)
    }

    /// `FusionError` for a fusion with no outputs, which nothing can
    /// schedule, build or evaluate.
    pub fn check_outputs(&self, py: Python<'_>) -> PyResult<()> {
        if self.inner.outputs().is_empty() {
            return Err(FusionError::Output(
                "the fusion has no outputs; call output() first".into(),
            ))
            .or_raise(py);
        }
        Ok(())
    }
}

#[pymethods]
impl PyFusion {
    #[new]
    fn new() -> PyResult<Self> {
        guard(|| Ok(PyFusion::wrap(Fusion::new())))
    }

    #[pyo3(signature = (shape, dtype, name=None))]
    fn input(
        &mut self,
        py: Python<'_>,
        shape: Vec<i64>,
        dtype: &str,
        name: Option<&str>,
    ) -> PyResult<usize> {
        guard(|| {
            let shape = extents("input", &shape).or_raise(py)?;
            let dtype = parse_dtype(dtype).or_raise(py)?;
            self.make_mut()
                .input(&shape, dtype, name)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn constant(&mut self, py: Python<'_>, value: f64, dtype: &str) -> PyResult<usize> {
        guard(|| {
            let dtype = parse_dtype(dtype).or_raise(py)?;
            self.make_mut()
                .constant(value, dtype)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn unary(&mut self, py: Python<'_>, func: &str, x: usize) -> PyResult<usize> {
        guard(|| {
            let func = lookup("unary", func, UnaryOp::ALL, UnaryOp::name).or_raise(py)?;
            self.make_mut()
                .unary(func, TensorId(x))
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn binary(&mut self, py: Python<'_>, func: &str, a: usize, b: usize) -> PyResult<usize> {
        guard(|| {
            let func = lookup("binary", func, BinaryOp::ALL, BinaryOp::name).or_raise(py)?;
            self.make_mut()
                .binary(func, TensorId(a), TensorId(b))
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    #[pyo3(name = "where")]
    fn where_(&mut self, py: Python<'_>, cond: usize, a: usize, b: usize) -> PyResult<usize> {
        guard(|| {
            self.make_mut()
                .where_(TensorId(cond), TensorId(a), TensorId(b))
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn cast(&mut self, py: Python<'_>, x: usize, dtype: &str) -> PyResult<usize> {
        guard(|| {
            let dtype = parse_dtype(dtype).or_raise(py)?;
            self.make_mut()
                .cast(TensorId(x), dtype)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn broadcast(&mut self, py: Python<'_>, x: usize, shape: Vec<i64>) -> PyResult<usize> {
        guard(|| {
            let shape = extents("broadcast", &shape).or_raise(py)?;
            self.make_mut()
                .broadcast(TensorId(x), &shape)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    #[pyo3(signature = (func, x, axes=None, keepdims=false))]
    fn reduce(
        &mut self,
        py: Python<'_>,
        func: &str,
        x: usize,
        axes: Option<Vec<i64>>,
        keepdims: bool,
    ) -> PyResult<usize> {
        guard(|| {
            let func = lookup("reduction", func, ReduceOp::ALL, ReduceOp::name).or_raise(py)?;
            self.make_mut()
                .reduce(func, TensorId(x), axes.as_deref(), keepdims)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn permute(&mut self, py: Python<'_>, x: usize, perm: Vec<i64>) -> PyResult<usize> {
        guard(|| {
            self.make_mut()
                .permute(TensorId(x), &perm)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn reshape(&mut self, py: Python<'_>, x: usize, shape: Vec<i64>) -> PyResult<usize> {
        guard(|| {
            self.make_mut()
                .reshape(TensorId(x), &shape)
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    #[pyo3(signature = (a, b, transpose_a=false, transpose_b=false, out_dtype=None))]
    fn matmul(
        &mut self,
        py: Python<'_>,
        a: usize,
        b: usize,
        transpose_a: bool,
        transpose_b: bool,
        out_dtype: Option<&str>,
    ) -> PyResult<usize> {
        guard(|| {
            let out_dtype = out_dtype.map(parse_dtype).transpose().or_raise(py)?;
            self.make_mut()
                .matmul_to(
                    TensorId(a),
                    TensorId(b),
                    transpose_a,
                    transpose_b,
                    out_dtype,
                )
                .map(|t| t.0)
                .or_raise(py)
        })
    }

    fn output(&mut self, py: Python<'_>, t: usize) -> PyResult<()> {
        guard(|| self.make_mut().output(TensorId(t)).or_raise(py))
    }

    fn set_name(&mut self, py: Python<'_>, t: usize, name: &str) -> PyResult<()> {
        guard(|| self.make_mut().set_name(TensorId(t), name).or_raise(py))
    }

    fn shape(&self, py: Python<'_>, t: usize) -> PyResult<Vec<usize>> {
        guard(|| {
            self.inner
                .ty(TensorId(t))
                .map(|ty| ty.shape.clone())
                .or_raise(py)
        })
    }

    fn dtype(&self, py: Python<'_>, t: usize) -> PyResult<&'static str> {
        guard(|| {
            self.inner
                .ty(TensorId(t))
                .map(|ty| ty.dtype.name())
                .or_raise(py)
        })
    }

    fn name(&self, py: Python<'_>, t: usize) -> PyResult<Option<String>> {
        guard(|| {
            self.inner.ty(TensorId(t)).or_raise(py)?;
            Ok(self.inner.node(TensorId(t)).name.clone())
        })
    }

    /// The tensor's name, or `t{id}` when it has none.
    fn label(&self, t: usize) -> PyResult<String> {
        guard(|| Ok(self.inner.label(TensorId(t))))
    }

    /// The op that produces the tensor (`"exp"`, `"matmul"`, `"input"`, ...).
    fn op(&self, py: Python<'_>, t: usize) -> PyResult<&'static str> {
        guard(|| {
            self.inner.ty(TensorId(t)).or_raise(py)?;
            Ok(self.inner.node(TensorId(t)).op.name())
        })
    }

    #[getter]
    fn inputs(&self) -> PyResult<Vec<usize>> {
        guard(|| Ok(self.inner.inputs().iter().map(|t| t.0).collect()))
    }

    #[getter]
    fn outputs(&self) -> PyResult<Vec<usize>> {
        guard(|| Ok(self.inner.outputs().iter().map(|t| t.0).collect()))
    }

    fn __len__(&self) -> PyResult<usize> {
        guard(|| Ok(self.inner.nodes().len()))
    }

    #[pyo3(signature = (indent=false))]
    fn to_json(&self, indent: bool) -> PyResult<String> {
        guard(|| {
            Ok(if indent {
                self.inner.to_json_pretty()
            } else {
                self.inner.to_json()
            })
        })
    }

    #[staticmethod]
    fn from_json(py: Python<'_>, text: &str) -> PyResult<Self> {
        guard(|| Fusion::from_json(text).map(PyFusion::wrap).or_raise(py))
    }

    fn fingerprint(&self) -> PyResult<String> {
        guard(|| Ok(self.inner.fingerprint()))
    }

    /// `{"complexity": {...}, "matmuls": [...], "reductions": [...]}`
    /// (`tilefuse_ir::summarize`).
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let summary = tilefuse::ir::summarize(&self.inner);
            to_py(
                py,
                &serde_json::to_value(summary).expect("summary serializes"),
            )
        })
    }

    fn __str__(&self) -> PyResult<String> {
        guard(|| Ok(self.inner.to_string()))
    }

    /// Runs the reference evaluator; returns one numpy array per output.
    #[pyo3(signature = (*arrays))]
    fn evaluate<'py>(
        slf: &Bound<'py, Self>,
        arrays: &Bound<'py, PyTuple>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let py = slf.py();
        guard(|| {
            // Its own handle: no borrow of `slf` is held while detached.
            let fusion = Arc::clone(&slf.borrow().inner);
            let inputs = arrays::inputs(&fusion, arrays)?;
            let views: Vec<_> = inputs.iter().map(Input::view).collect();
            let outputs = py.detach(|| evaluate(&fusion, &views)).or_raise(py)?;
            outputs.into_iter().map(|t| to_numpy(py, t)).collect()
        })
    }
}
