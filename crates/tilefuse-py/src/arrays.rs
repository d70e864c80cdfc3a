//! numpy arrays ↔ kernel arguments. Inputs are read where numpy keeps them
//! (C-contiguous, aligned arrays of the input's dtype are borrowed; other
//! layouts take one copy); outputs are numpy arrays the kernel writes in
//! place: new, uninitialized ones, or the caller's (`out=`).
//!
//! `unsafe` is allowed here for one thing: creating an uninitialized numpy
//! array (numpy's `empty`, through its C API so that a refused allocation
//! is a `MemoryError`, over a recycled buffer when it is large), which
//! every kernel writes in full.
#![allow(unsafe_code)]

use numpy::npyffi::{self, PY_ARRAY_API, npy_intp};
use numpy::{
    Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::ops::Range;
use std::os::raw::c_int;
use std::sync::Arc;
use tilefuse::ir::{check_arguments, check_count, check_results};
use tilefuse::{
    DType, Data, DataMut, DataRef, Fusion, FusionError, RuntimeError, Tensor, TensorId, TensorMut,
    TensorRef, bf16, f16,
};

use crate::errors::{OrRaise, ToPyErr};
use crate::output_pool::{self, PooledBuffer};

/// One input of a call, borrowed from numpy.
pub enum Input<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    I32(PyReadonlyArrayDyn<'py, i32>),
    U32(PyReadonlyArrayDyn<'py, u32>),
    F16(PyReadonlyArrayDyn<'py, f16>),
    /// `ml_dtypes.bfloat16`.
    BF16(PyReadonlyArrayDyn<'py, bf16>),
    /// numpy's bool is a byte that may hold any value (`.view(bool)` of
    /// other bytes); reading it as Rust's `bool` would be undefined, so the
    /// bytes are copied (once, in any layout) and any nonzero byte is true.
    Bool(Vec<usize>, Vec<bool>),
}

impl Input<'_> {
    pub fn view(&self) -> TensorRef<'_> {
        fn of<'a, T: Element>(
            a: &'a PyReadonlyArrayDyn<'_, T>,
            data: impl FnOnce(&'a [T]) -> DataRef<'a>,
        ) -> TensorRef<'a> {
            let slice = a.as_slice().expect("borrowed arrays are contiguous");
            TensorRef {
                shape: a.shape(),
                data: data(slice),
            }
        }
        match self {
            Input::F32(a) => of(a, DataRef::F32),
            Input::I32(a) => of(a, DataRef::I32),
            Input::U32(a) => of(a, DataRef::U32),
            Input::F16(a) => of(a, DataRef::F16),
            Input::BF16(a) => of(a, DataRef::BF16),
            Input::Bool(shape, v) => TensorRef {
                shape,
                data: DataRef::Bool(v),
            },
        }
    }

    /// The bytes it spans, to tell whether an `out` array overlaps it.
    fn span(&self) -> Range<usize> {
        match self {
            Input::F32(a) => span(a),
            Input::I32(a) => span(a),
            Input::U32(a) => span(a),
            Input::F16(a) => span(a),
            Input::BF16(a) => span(a),
            Input::Bool(..) => 0..0,
        }
    }
}

fn span<T: Element>(a: &Bound<'_, PyArrayDyn<T>>) -> Range<usize> {
    let start = a.data() as usize;
    start..start + a.len() * size_of::<T>()
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// C-contiguous and aligned: readable as a Rust slice where it lies.
fn in_place(a: &Bound<'_, PyUntypedArray>) -> bool {
    a.is_c_contiguous() && a.is_aligned()
}

/// Borrows one numpy array as an input; `what`, `index` and `label` name
/// it in errors.
fn input<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    index: usize,
    label: &str,
) -> PyResult<Input<'py>> {
    let Ok(untyped) = obj.cast::<PyUntypedArray>() else {
        return Err(wrong_input(
            obj,
            what,
            index,
            label,
            obj.get_type().name()?.to_string(),
        ));
    };
    if obj.cast::<PyArrayDyn<bool>>().is_ok() {
        // Read as bytes in any layout: the one copy is the normalization.
        let bytes = obj.call_method1("view", ("u1",))?;
        let bytes = bytes.cast::<PyArrayDyn<u8>>()?.try_readonly()?;
        let v = bytes.as_array().iter().map(|&b| b != 0).collect();
        return Ok(Input::Bool(bytes.shape().to_vec(), v));
    }
    let obj = &if in_place(untyped) {
        obj.clone()
    } else {
        obj.call_method1("copy", ("C",))?
    };
    if let Ok(a) = obj.cast::<PyArrayDyn<f32>>() {
        Ok(Input::F32(a.try_readonly()?))
    } else if let Ok(a) = obj.cast::<PyArrayDyn<i32>>() {
        Ok(Input::I32(a.try_readonly()?))
    } else if let Ok(a) = obj.cast::<PyArrayDyn<u32>>() {
        Ok(Input::U32(a.try_readonly()?))
    } else if let Ok(a) = obj.cast::<PyArrayDyn<f16>>() {
        Ok(Input::F16(a.try_readonly()?))
    } else if is_bfloat16(untyped)? {
        Ok(Input::BF16(obj.cast::<PyArrayDyn<bf16>>()?.try_readonly()?))
    } else {
        let dtype = format!("an array of {}", untyped.dtype().str()?);
        Err(wrong_input(obj, what, index, label, dtype))
    }
}

/// Whether `a` holds `ml_dtypes.bfloat16`, asked by name: numpy has no
/// bf16 of its own, and looking the dtype up where ml_dtypes was never
/// imported fails.
fn is_bfloat16(a: &Bound<'_, PyUntypedArray>) -> PyResult<bool> {
    Ok(a.dtype().getattr("name")?.extract::<String>()? == "bfloat16")
}

fn wrong_input(
    obj: &Bound<'_, PyAny>,
    what: &str,
    index: usize,
    label: &str,
    got: String,
) -> PyErr {
    let e = FusionError::Argument(format!(
        "{what} {index} ({label}): expected a numpy array of float32, float16, bfloat16, int32, uint32 or bool, got {got}"
    ));
    e.to_py_err(obj.py())
}

/// One call of a kernel (or a sequence of them) on numpy arrays: borrows
/// the inputs, makes or checks the outputs (the fusion's tensors `ids`),
/// runs `run` with the GIL released, and copies results into `out` arrays
/// that overlap an input. Returns the output arrays.
pub fn call<'py>(
    py: Python<'py>,
    fusion: &Fusion,
    ids: &[TensorId],
    arrays: &Bound<'py, PyTuple>,
    out: Option<&Bound<'py, PyAny>>,
    run: impl Send + FnOnce(&[TensorRef<'_>], &mut [TensorMut<'_>]) -> Result<(), RuntimeError>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let inputs = inputs(fusion, arrays)?;
    let mut outputs = outputs(py, fusion, ids, out, &inputs)?;
    let shapes = ids
        .iter()
        .map(|&t| Ok(fusion.ty(t)?.shape.clone()))
        .collect::<Result<Vec<_>, FusionError>>()
        .or_raise(py)?;
    let views: Vec<_> = inputs.iter().map(Input::view).collect();
    let mut outs: Vec<_> = outputs
        .arrays
        .iter_mut()
        .zip(&shapes)
        .map(|(o, shape)| o.view(shape))
        .collect();
    py.detach(|| run(&views, &mut outs)).or_raise(py)?;
    drop((outs, views));
    drop(inputs);
    let mut results: Vec<_> = outputs.arrays.iter().map(Output::array).collect();
    // Release the borrows before numpy writes the aliased arrays.
    drop(outputs.arrays);
    for (j, target) in outputs.copy_into {
        py.import("numpy")?
            .getattr("copyto")?
            .call1((&target, &results[j]))?;
        results[j] = target;
    }
    Ok(results)
}

/// Borrows the call's arrays as inputs, naming each in errors.
pub fn inputs<'py>(fusion: &Fusion, arrays: &Bound<'py, PyTuple>) -> PyResult<Vec<Input<'py>>> {
    borrow(fusion, fusion.inputs(), "input", arrays)
}

/// Borrows `arrays`, one per tensor of `ids` (the fusion's `what`s).
fn borrow<'py>(
    fusion: &Fusion,
    ids: &[TensorId],
    what: &str,
    arrays: &Bound<'py, PyTuple>,
) -> PyResult<Vec<Input<'py>>> {
    check_count(what, ids.len(), arrays.len()).or_raise(arrays.py())?;
    (arrays.iter().zip(ids).enumerate())
        .map(|(i, (a, &t))| input(&a, what, i, &fusion.label(t)))
        .collect()
}

/// A workload's inputs and the outputs they must give, from Python.
pub struct Reference {
    pub inputs: Option<Arc<[Tensor]>>,
    pub expected: Option<Arc<[Tensor]>>,
}

impl Reference {
    /// Copies `inputs` (one array per fusion input) and `expected` (one
    /// per output), checked against the fusion's types.
    pub fn new(
        fusion: &Fusion,
        inputs: Option<Bound<'_, PyTuple>>,
        expected: Option<Bound<'_, PyTuple>>,
    ) -> PyResult<Reference> {
        Ok(Reference {
            inputs: inputs.map(|a| input_tensors(fusion, &a)).transpose()?,
            expected: (expected.map(|a| output_tensors(fusion, &a))).transpose()?,
        })
    }
}

/// Copies `arrays` into tensors: the fusion's inputs, checked as a call's.
fn input_tensors(fusion: &Fusion, arrays: &Bound<'_, PyTuple>) -> PyResult<Arc<[Tensor]>> {
    tensors(fusion, fusion.inputs(), "input", arrays, check_arguments)
}

/// Copies `arrays` into tensors: outputs the fusion must give (a
/// reference's), checked against its outputs' types.
fn output_tensors(fusion: &Fusion, arrays: &Bound<'_, PyTuple>) -> PyResult<Arc<[Tensor]>> {
    tensors(
        fusion,
        fusion.outputs(),
        "expected output",
        arrays,
        check_results,
    )
}

/// Copies `arrays`, one per tensor of `ids` (the fusion's `what`s), into
/// tensors once `check` accepts them.
fn tensors(
    fusion: &Fusion,
    ids: &[TensorId],
    what: &str,
    arrays: &Bound<'_, PyTuple>,
    check: fn(&Fusion, &[TensorRef<'_>]) -> tilefuse::ir::Result<()>,
) -> PyResult<Arc<[Tensor]>> {
    let given = borrow(fusion, ids, what, arrays)?;
    let views: Vec<_> = given.iter().map(Input::view).collect();
    check(fusion, &views).or_raise(arrays.py())?;
    Ok(views.iter().map(TensorRef::to_tensor).collect())
}

/// One output of a call: a numpy array borrowed for writing.
pub enum Output<'py> {
    F32(PyReadwriteArrayDyn<'py, f32>),
    I32(PyReadwriteArrayDyn<'py, i32>),
    U32(PyReadwriteArrayDyn<'py, u32>),
    Bool(PyReadwriteArrayDyn<'py, bool>),
    F16(PyReadwriteArrayDyn<'py, f16>),
    BF16(PyReadwriteArrayDyn<'py, bf16>),
}

impl Output<'_> {
    /// The array as the kernel's output of `shape` (the fusion's, which
    /// the array was checked or made to have).
    pub fn view<'a>(&'a mut self, shape: &'a [usize]) -> TensorMut<'a> {
        let data = match self {
            Output::F32(a) => a.as_slice_mut().map(DataMut::F32),
            Output::I32(a) => a.as_slice_mut().map(DataMut::I32),
            Output::U32(a) => a.as_slice_mut().map(DataMut::U32),
            Output::Bool(a) => a.as_slice_mut().map(DataMut::Bool),
            Output::F16(a) => a.as_slice_mut().map(DataMut::F16),
            Output::BF16(a) => a.as_slice_mut().map(DataMut::BF16),
        };
        TensorMut {
            shape,
            data: data.expect("output arrays are contiguous"),
        }
    }

    pub fn array<'py>(&self) -> Bound<'py, PyAny>
    where
        Self: 'py,
    {
        match self {
            Output::F32(a) => a.as_any().clone(),
            Output::I32(a) => a.as_any().clone(),
            Output::U32(a) => a.as_any().clone(),
            Output::Bool(a) => a.as_any().clone(),
            Output::F16(a) => a.as_any().clone(),
            Output::BF16(a) => a.as_any().clone(),
        }
    }
}

/// A new, uninitialized numpy array for output `id` (the kernel writes
/// every element), its memory recycled when it is large (see
/// [`output_pool`]); `MemoryError` when it cannot be allocated.
fn new_output<'py>(py: Python<'py>, fusion: &Fusion, id: TensorId) -> PyResult<Output<'py>> {
    fn make<'py, T: Element>(
        py: Python<'py>,
        shape: &[usize],
    ) -> PyResult<PyReadwriteArrayDyn<'py, T>> {
        let mut dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
        let bytes = shape.iter().product::<usize>() * size_of::<T>();
        let owner = (bytes >= output_pool::MIN_BYTES)
            .then(|| PooledBuffer::new(bytes))
            .transpose()?;
        let data = owner
            .as_ref()
            .map_or(std::ptr::null_mut(), |o| o.ptr().cast());
        // SAFETY: numpy's `empty` (a C-order array of `T` with these
        // dimensions), over `data` when that is given: `data` holds
        // `bytes`, aligned, and the array's base below keeps it alive. A
        // null result is an error numpy has set.
        let a = unsafe {
            let ptr = PY_ARRAY_API.PyArray_NewFromDescr(
                py,
                npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
                T::get_dtype(py).into_dtype_ptr(),
                dims.len() as c_int,
                dims.as_mut_ptr(),
                std::ptr::null_mut(),
                data,
                if data.is_null() {
                    0
                } else {
                    npyffi::flags::NPY_ARRAY_CARRAY
                },
                std::ptr::null_mut(),
            );
            Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked::<PyArrayDyn<T>>()
        };
        if let Some(owner) = owner {
            let owner = Bound::new(py, owner)?;
            // SAFETY: `a` is a new array without a base; the call takes
            // the reference to `owner` whether it succeeds or not.
            let status = unsafe {
                PY_ARRAY_API.PyArray_SetBaseObject(py, a.as_array_ptr(), owner.into_ptr())
            };
            if status < 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(a.try_readwrite()?)
    }
    let ty = fusion.ty(id).or_raise(py)?;
    Ok(match ty.dtype {
        DType::F32 => Output::F32(make(py, &ty.shape)?),
        DType::I32 => Output::I32(make(py, &ty.shape)?),
        DType::U32 => Output::U32(make(py, &ty.shape)?),
        DType::Bool => Output::Bool(make(py, &ty.shape)?),
        DType::F16 => Output::F16(make(py, &ty.shape)?),
        DType::BF16 => {
            import_bfloat16(py)?;
            Output::BF16(make(py, &ty.shape)?)
        }
    })
}

/// Checks that a caller's array can be output `index` (`id` in the
/// fusion): its shape and dtype, C-contiguous, aligned and writeable.
fn check_out(obj: &Bound<'_, PyAny>, fusion: &Fusion, index: usize, id: TensorId) -> PyResult<()> {
    let py = obj.py();
    let ty = fusion.ty(id).or_raise(py)?;
    let problem = match obj.cast::<PyUntypedArray>() {
        Err(_) => Some(obj.get_type().name()?.to_string()),
        Ok(a)
            if a.shape() != ty.shape.as_slice()
                || !a.dtype().is_equiv_to(&dtype_of(py, ty.dtype)?) =>
        {
            Some(format!("an array of {}{:?}", a.dtype().str()?, a.shape()))
        }
        Ok(a) if !in_place(a) => Some("an array that is not C-contiguous and aligned".into()),
        Ok(a) if !a.getattr("flags")?.getattr("writeable")?.is_truthy()? => {
            Some("a read-only array".into())
        }
        Ok(_) => None,
    };
    match problem {
        None => Ok(()),
        Some(got) => Err(FusionError::Argument(format!(
            "out {index} ({}): expected a writeable C-contiguous numpy array of {ty}, got {got}",
            fusion.label(id)
        )))
        .or_raise(py),
    }
}

fn dtype_of(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, numpy::PyArrayDescr>> {
    Ok(match dtype {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::I32 => numpy::dtype::<i32>(py),
        DType::U32 => numpy::dtype::<u32>(py),
        DType::Bool => numpy::dtype::<bool>(py),
        DType::F16 => numpy::dtype::<f16>(py),
        DType::BF16 => {
            import_bfloat16(py)?;
            numpy::dtype::<bf16>(py)
        }
    })
}

/// Imports ml_dtypes, which gives numpy its `bfloat16`: a bf16 array
/// cannot be made or named before.
fn import_bfloat16(py: Python<'_>) -> PyResult<()> {
    py.import("ml_dtypes").map(drop)
}

/// The bytes a checked `out` array spans.
fn out_span(obj: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Range<usize>> {
    Ok(match dtype {
        DType::F32 => span(obj.cast::<PyArrayDyn<f32>>()?),
        DType::I32 => span(obj.cast::<PyArrayDyn<i32>>()?),
        DType::U32 => span(obj.cast::<PyArrayDyn<u32>>()?),
        DType::Bool => span(obj.cast::<PyArrayDyn<bool>>()?),
        DType::F16 => span(obj.cast::<PyArrayDyn<f16>>()?),
        DType::BF16 => span(obj.cast::<PyArrayDyn<bf16>>()?),
    })
}

/// Borrows a checked `out` array for writing.
fn borrow_out<'py>(obj: &Bound<'py, PyAny>, dtype: DType) -> PyResult<Output<'py>> {
    Ok(match dtype {
        DType::F32 => Output::F32(obj.cast::<PyArrayDyn<f32>>()?.try_readwrite()?),
        DType::I32 => Output::I32(obj.cast::<PyArrayDyn<i32>>()?.try_readwrite()?),
        DType::U32 => Output::U32(obj.cast::<PyArrayDyn<u32>>()?.try_readwrite()?),
        DType::Bool => Output::Bool(obj.cast::<PyArrayDyn<bool>>()?.try_readwrite()?),
        DType::F16 => Output::F16(obj.cast::<PyArrayDyn<f16>>()?.try_readwrite()?),
        DType::BF16 => Output::BF16(obj.cast::<PyArrayDyn<bf16>>()?.try_readwrite()?),
    })
}

/// Where a call writes its outputs.
struct Outputs<'py> {
    arrays: Vec<Output<'py>>,
    /// The caller's `out` arrays that overlap an input: the kernel writes
    /// new arrays (`arrays`), copied into these when it has finished.
    copy_into: Vec<(usize, Bound<'py, PyAny>)>,
}

/// The outputs of a call (the fusion's tensors `ids`): the caller's `out`
/// arrays (an array, or as for numpy's ufuncs a tuple with one array or
/// `None` per output), new arrays elsewhere.
fn outputs<'py>(
    py: Python<'py>,
    fusion: &Fusion,
    ids: &[TensorId],
    out: Option<&Bound<'py, PyAny>>,
    inputs: &[Input<'py>],
) -> PyResult<Outputs<'py>> {
    let given: Vec<Option<Bound<'py, PyAny>>> = match out {
        None => vec![None; ids.len()],
        Some(o) if o.is_instance_of::<PyTuple>() => o
            .try_iter()?
            .map(|a| a.map(|a| (!a.is_none()).then_some(a)))
            .collect::<PyResult<_>>()?,
        Some(o) => vec![Some(o.clone())],
    };
    if given.len() != ids.len() {
        return Err(FusionError::Argument(format!(
            "out: the fusion has {} outputs, got {} arrays",
            ids.len(),
            given.len()
        )))
        .or_raise(py);
    }
    let spans: Vec<_> = inputs.iter().map(Input::span).collect();
    let mut out_spans: Vec<(usize, Range<usize>)> = Vec::new();
    let mut result = Outputs {
        arrays: Vec::with_capacity(ids.len()),
        copy_into: Vec::new(),
    };
    for (j, (&id, given)) in ids.iter().zip(given).enumerate() {
        let Some(obj) = given else {
            result.arrays.push(new_output(py, fusion, id)?);
            continue;
        };
        check_out(&obj, fusion, j, id)?;
        let dtype = fusion.ty(id).or_raise(py)?.dtype;
        let span = out_span(&obj, dtype)?;
        if let Some((i, _)) = out_spans.iter().find(|(_, s)| overlap(s, &span)) {
            return Err(FusionError::Argument(format!(
                "out {j} ({}) overlaps out {i} ({}): each output needs memory of its own",
                fusion.label(id),
                fusion.label(ids[*i])
            )))
            .or_raise(py);
        }
        out_spans.push((j, span.clone()));
        // An empty array is copied into too: nothing to write, and an
        // input that is the same array is borrowed already.
        if span.is_empty() || spans.iter().any(|s| overlap(s, &span)) {
            // Aliases an input: the kernel may overwrite elements it has
            // yet to read, so numpy copies the result in afterwards.
            result.arrays.push(new_output(py, fusion, id)?);
            result.copy_into.push((j, obj));
        } else {
            result.arrays.push(borrow_out(&obj, dtype)?);
        }
    }
    Ok(result)
}

/// Moves a tensor into a new numpy array.
pub fn to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    fn make<'py, T: Element>(
        py: Python<'py>,
        v: Vec<T>,
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(numpy::PyArray1::from_vec(py, v).reshape(shape)?.into_any())
    }
    match t.data {
        Data::F32(v) => make(py, v, &t.shape),
        Data::I32(v) => make(py, v, &t.shape),
        Data::U32(v) => make(py, v, &t.shape),
        Data::Bool(v) => make(py, v, &t.shape),
        Data::F16(v) => make(py, v, &t.shape),
        Data::BF16(v) => {
            import_bfloat16(py)?;
            make(py, v, &t.shape)
        }
    }
}
