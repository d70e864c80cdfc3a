//! Host tensors: what `evaluate` takes and returns, and what devices upload
//! and download.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{FusionError, Result};
use crate::infer::TensorType;
use crate::shape::{Shape, numel};

/// Row-major element storage of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    Bool(Vec<bool>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// One element, widened: f32 values are held as f64 so that the reference
/// evaluator computes each op in double precision and rounds once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i32),
    U(u32),
    B(bool),
}

impl Data {
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::Bool(_) => DType::Bool,
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        self.view().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Scalar {
        match self {
            Data::F32(v) => Scalar::F(f64::from(v[i])),
            Data::I32(v) => Scalar::I(v[i]),
            Data::U32(v) => Scalar::U(v[i]),
            Data::Bool(v) => Scalar::B(v[i]),
            Data::F16(v) => Scalar::F(f64::from(v[i])),
            Data::BF16(v) => Scalar::F(f64::from(v[i])),
        }
    }

    /// Builds `len` elements of `dtype` from `f`, converting each scalar
    /// with `Scalar::to`'s rules (f64 rounds to f32 here). The memory is
    /// reserved fallibly, and the work stops when an interrupt is
    /// [requested](crate::interrupt::requested).
    pub fn from_fn(dtype: DType, len: usize, f: impl Fn(usize) -> Scalar) -> Result<Data> {
        Ok(match dtype {
            DType::F32 => Data::F32(fill(len, |i| f(i).as_f64() as f32)?),
            DType::I32 => Data::I32(fill(len, |i| f(i).as_i32())?),
            DType::U32 => Data::U32(fill(len, |i| f(i).as_u32())?),
            DType::Bool => Data::Bool(fill(len, |i| f(i).as_bool())?),
            DType::F16 => Data::F16(fill(len, |i| f16::from_f64(f(i).as_f64()))?),
            DType::BF16 => Data::BF16(fill(len, |i| bf16::from_f64(f(i).as_f64()))?),
        })
    }
}

/// Conversions between element types, with WGSL's meaning: float to integer
/// truncates toward zero and saturates (NaN gives 0), i32 and u32 reinterpret
/// bits, anything to bool is `!= 0`.
impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F(x) => x,
            Scalar::I(x) => f64::from(x),
            Scalar::U(x) => f64::from(x),
            Scalar::B(x) => f64::from(u8::from(x)),
        }
    }

    pub fn as_i32(self) -> i32 {
        match self {
            Scalar::F(x) => x as i32,
            Scalar::I(x) => x,
            Scalar::U(x) => x as i32,
            Scalar::B(x) => i32::from(x),
        }
    }

    pub fn as_u32(self) -> u32 {
        match self {
            Scalar::F(x) => x as u32,
            Scalar::I(x) => x as u32,
            Scalar::U(x) => x,
            Scalar::B(x) => u32::from(x),
        }
    }

    pub fn as_bool(self) -> bool {
        match self {
            Scalar::F(x) => x != 0.0,
            Scalar::I(x) => x != 0,
            Scalar::U(x) => x != 0,
            Scalar::B(x) => x,
        }
    }

    /// Converts to the representation of `dtype` (floats stay widened,
    /// rounded to the dtype's precision, to nearest even).
    pub fn to(self, dtype: DType) -> Scalar {
        match dtype {
            DType::F32 => Scalar::F(f64::from(self.as_f64() as f32)),
            DType::F16 => Scalar::F(f64::from(f16::from_f64(self.as_f64()))),
            DType::BF16 => Scalar::F(f64::from(bf16::from_f64(self.as_f64()))),
            DType::I32 => Scalar::I(self.as_i32()),
            DType::U32 => Scalar::U(self.as_u32()),
            DType::Bool => Scalar::B(self.as_bool()),
        }
    }
}

/// A host tensor: a shape and row-major data.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Shape,
    pub data: Data,
}

impl Tensor {
    /// Pairs a shape with data, checking that the element count matches.
    pub fn new(shape: Shape, data: Data) -> Result<Self, String> {
        if numel(&shape) != data.len() {
            return Err(format!(
                "shape {shape:?} has {} elements but the data has {}",
                numel(&shape),
                data.len()
            ));
        }
        Ok(Tensor { shape, data })
    }

    pub fn ty(&self) -> TensorType {
        TensorType::new(self.shape.clone(), self.data.dtype())
    }
}

/// `len` elements from `f`, a chunk at a time between interrupt checks.
fn fill<T>(len: usize, f: impl Fn(usize) -> T) -> Result<Vec<T>> {
    const CHUNK: usize = 1 << 16;
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| FusionError::OutOfMemory {
            what: format!("a tensor of {len} elements"),
            bytes: (len as u64).saturating_mul(size_of::<T>() as u64),
        })?;
    for start in (0..len).step_by(CHUNK) {
        if crate::interrupt::requested() {
            return Err(FusionError::Interrupted);
        }
        out.extend((start..len.min(start + CHUNK)).map(&f));
    }
    Ok(out)
}
