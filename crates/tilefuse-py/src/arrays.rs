//! numpy arrays ↔ host tensors.

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use tilefuse::{Data, Tensor};

use crate::errors::OrRaise;
use tilefuse::FusionError;

/// Copies a numpy array (any memory layout) into a tensor; `index` and
/// `label` name the input in errors.
pub fn to_tensor(obj: &Bound<'_, PyAny>, index: usize, label: &str) -> PyResult<Tensor> {
    fn read<T: numpy::Element + Copy>(
        a: &Bound<'_, PyArrayDyn<T>>,
    ) -> PyResult<(Vec<usize>, Vec<T>)> {
        let view = a.try_readonly()?;
        Ok((
            a.shape().to_vec(),
            view.as_array().iter().copied().collect(),
        ))
    }
    let (shape, data) = if let Ok(a) = obj.cast::<PyArrayDyn<f32>>() {
        read(a).map(|(s, v)| (s, Data::F32(v)))?
    } else if let Ok(a) = obj.cast::<PyArrayDyn<i32>>() {
        read(a).map(|(s, v)| (s, Data::I32(v)))?
    } else if let Ok(a) = obj.cast::<PyArrayDyn<u32>>() {
        read(a).map(|(s, v)| (s, Data::U32(v)))?
    } else if obj.cast::<PyArrayDyn<bool>>().is_ok() {
        // numpy's bool is a byte that may hold any value (`.view(bool)` of
        // other bytes); reading it as Rust's `bool` would be undefined, so
        // the bytes are read and any nonzero byte is true.
        let bytes = obj.call_method1("view", ("u1",))?;
        let (shape, v) = read(bytes.cast::<PyArrayDyn<u8>>()?)?;
        (shape, Data::Bool(v.into_iter().map(|b| b != 0).collect()))
    } else {
        let got = match obj.getattr("dtype") {
            Ok(dtype) => format!("an array of {}", dtype.str()?),
            Err(_) => obj.get_type().name()?.to_string(),
        };
        return Err(FusionError::Argument(format!(
            "input {index} ({label}): expected a numpy array of float32, int32, uint32 or bool, got {got}"
        )))
        .or_raise(obj.py());
    };
    Ok(Tensor { shape, data })
}

/// Converts call arguments into tensors, naming each input in errors.
pub fn to_tensors(
    fusion: &tilefuse::Fusion,
    arrays: &Bound<'_, pyo3::types::PyTuple>,
) -> PyResult<Vec<Tensor>> {
    let inputs = fusion.inputs();
    arrays
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let label = inputs
                .get(i)
                .map_or_else(|| "extra".to_owned(), |&t| fusion.label(t));
            to_tensor(&a, i, &label)
        })
        .collect()
}

/// Moves a tensor into a new numpy array.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    fn make<'py, T: numpy::Element>(
        py: Python<'py>,
        v: Vec<T>,
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyArray1::from_vec(py, v).reshape(shape)?.into_any())
    }
    match t.data {
        Data::F32(v) => make(py, v, &t.shape),
        Data::I32(v) => make(py, v, &t.shape),
        Data::U32(v) => make(py, v, &t.shape),
        Data::Bool(v) => make(py, v, &t.shape),
    }
}
