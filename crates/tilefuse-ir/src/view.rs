//! Borrowed host tensors: what a device reads its inputs from and writes its
//! outputs into, so that a caller's memory (a numpy array, a `Vec`) is used
//! where it lies instead of being copied into a [`Tensor`].

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{FusionError, Result};
use crate::fusion::{Fusion, TensorId};
use crate::infer::TensorType;
use crate::shape::numel;
use crate::tensor::{Data, Tensor};

/// Borrowed row-major elements of one dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DataRef<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    Bool(&'a [bool]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

/// Mutably borrowed row-major elements of one dtype.
#[derive(Debug, PartialEq)]
pub enum DataMut<'a> {
    F32(&'a mut [f32]),
    I32(&'a mut [i32]),
    U32(&'a mut [u32]),
    Bool(&'a mut [bool]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
}

/// Applies `$body` to the slice inside any variant of a `DataRef` or
/// `DataMut`.
macro_rules! each {
    ($data:expr, $kind:ident, $v:ident => $body:expr) => {
        match $data {
            $kind::F32($v) => $body,
            $kind::I32($v) => $body,
            $kind::U32($v) => $body,
            $kind::Bool($v) => $body,
            $kind::F16($v) => $body,
            $kind::BF16($v) => $body,
        }
    };
}

impl DataRef<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            DataRef::F32(_) => DType::F32,
            DataRef::I32(_) => DType::I32,
            DataRef::U32(_) => DType::U32,
            DataRef::Bool(_) => DType::Bool,
            DataRef::F16(_) => DType::F16,
            DataRef::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        each!(self, DataRef, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DataMut<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            DataMut::F32(_) => DType::F32,
            DataMut::I32(_) => DType::I32,
            DataMut::U32(_) => DType::U32,
            DataMut::Bool(_) => DType::Bool,
            DataMut::F16(_) => DType::F16,
            DataMut::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        each!(self, DataMut, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A borrowed host tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorRef<'a> {
    pub shape: &'a [usize],
    pub data: DataRef<'a>,
}

/// A mutably borrowed host tensor, for a kernel to write an output into.
#[derive(Debug, PartialEq)]
pub struct TensorMut<'a> {
    pub shape: &'a [usize],
    pub data: DataMut<'a>,
}

impl TensorRef<'_> {
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.shape.to_vec(), self.data.dtype())
    }

    /// An owned copy.
    pub fn to_tensor(&self) -> Tensor {
        let data = match self.data {
            DataRef::F32(v) => Data::F32(v.to_vec()),
            DataRef::I32(v) => Data::I32(v.to_vec()),
            DataRef::U32(v) => Data::U32(v.to_vec()),
            DataRef::Bool(v) => Data::Bool(v.to_vec()),
            DataRef::F16(v) => Data::F16(v.to_vec()),
            DataRef::BF16(v) => Data::BF16(v.to_vec()),
        };
        Tensor {
            shape: self.shape.to_vec(),
            data,
        }
    }
}

impl TensorMut<'_> {
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.shape.to_vec(), self.data.dtype())
    }
}

impl Data {
    pub fn view(&self) -> DataRef<'_> {
        match self {
            Data::F32(v) => DataRef::F32(v),
            Data::I32(v) => DataRef::I32(v),
            Data::U32(v) => DataRef::U32(v),
            Data::Bool(v) => DataRef::Bool(v),
            Data::F16(v) => DataRef::F16(v),
            Data::BF16(v) => DataRef::BF16(v),
        }
    }

    pub fn view_mut(&mut self) -> DataMut<'_> {
        match self {
            Data::F32(v) => DataMut::F32(v),
            Data::I32(v) => DataMut::I32(v),
            Data::U32(v) => DataMut::U32(v),
            Data::Bool(v) => DataMut::Bool(v),
            Data::F16(v) => DataMut::F16(v),
            Data::BF16(v) => DataMut::BF16(v),
        }
    }
}

impl Tensor {
    pub fn view(&self) -> TensorRef<'_> {
        TensorRef {
            shape: &self.shape,
            data: self.data.view(),
        }
    }

    pub fn view_mut(&mut self) -> TensorMut<'_> {
        TensorMut {
            shape: &self.shape,
            data: self.data.view_mut(),
        }
    }
}

/// What a kernel reads an input from: a [`Tensor`] or a [`TensorRef`].
pub trait AsTensorRef {
    fn as_tensor_ref(&self) -> TensorRef<'_>;
}

impl AsTensorRef for Tensor {
    fn as_tensor_ref(&self) -> TensorRef<'_> {
        self.view()
    }
}

impl AsTensorRef for TensorRef<'_> {
    fn as_tensor_ref(&self) -> TensorRef<'_> {
        *self
    }
}

/// Checks that a call gives as many `what`s (inputs, outputs) as the
/// fusion has: checked before anything else, so a missing or extra
/// argument is reported as such rather than as a wrong type.
pub fn check_count(what: &str, want: usize, given: usize) -> Result<()> {
    if given == want {
        return Ok(());
    }
    let verb = if what == "input" { "takes" } else { "has" };
    let plural = if want == 1 { "" } else { "s" };
    Err(FusionError::Argument(format!(
        "the fusion {verb} {want} {what}{plural}, got {given}"
    )))
}

/// Checks that `given` (a shape, a dtype and an element count per tensor)
/// match `want` (the fusion's inputs or outputs, named `what` in errors).
fn check_tensors(
    fusion: &Fusion,
    what: &str,
    want: &[TensorId],
    given: impl ExactSizeIterator<Item = (TensorType, usize)>,
) -> Result<()> {
    check_count(what, want.len(), given.len())?;
    for (i, (&id, (ty, len))) in want.iter().zip(given).enumerate() {
        let label = fusion.label(id);
        let expected = fusion.ty(id)?;
        if &ty != expected {
            return Err(FusionError::Argument(format!(
                "{what} {i} ({label}): expected {expected}, got {ty}"
            )));
        }
        if len != numel(&ty.shape) {
            return Err(FusionError::Argument(format!(
                "{what} {i} ({label}): shape {:?} has {} elements but the data has {len}",
                ty.shape,
                numel(&ty.shape)
            )));
        }
    }
    Ok(())
}

/// Checks that `inputs` match the fusion's inputs in number, shape and
/// dtype, each with as many elements as its shape.
pub fn check_arguments(fusion: &Fusion, inputs: &[TensorRef<'_>]) -> Result<()> {
    let given = inputs.iter().map(|t| (t.ty(), t.data.len()));
    check_tensors(fusion, "input", fusion.inputs(), given)
}

/// Checks that `outputs` computed elsewhere (a workload's own reference)
/// match the fusion's outputs as [`check_arguments`] does its inputs.
pub fn check_results(fusion: &Fusion, outputs: &[TensorRef<'_>]) -> Result<()> {
    let given = outputs.iter().map(|t| (t.ty(), t.data.len()));
    check_tensors(fusion, "output", fusion.outputs(), given)
}

/// Checks that `outputs` match the fusion's tensors `ids` (its outputs, or
/// those a sequence of kernels returns) as [`check_arguments`] does its
/// inputs.
pub fn check_outputs(fusion: &Fusion, ids: &[TensorId], outputs: &[TensorMut<'_>]) -> Result<()> {
    let given = outputs.iter().map(|t| (t.ty(), t.data.len()));
    check_tensors(fusion, "output", ids, given)
}
