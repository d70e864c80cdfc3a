//! Element types of fusion tensors.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The element type of a tensor. `f32` is first class; `f16` and `bf16`
/// are storage types whose arithmetic runs in f32 and rounds each op's
/// result to the dtype (`docs/semantics.md`); the integer and boolean
/// types exist for indices and masks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    I32,
    U32,
    Bool,
    F16,
    BF16,
}

impl DType {
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::I32,
        DType::U32,
        DType::Bool,
        DType::F16,
        DType::BF16,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The 16-bit floats, held in f32 while computed.
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// Types that support arithmetic (everything but `bool`).
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }

    /// Types that have a sign (`neg`, `abs`).
    pub fn is_signed(self) -> bool {
        self.is_float() || self == DType::I32
    }

    /// The bytes one element takes in memory (a device buffer, a numpy
    /// array); what the schedulers count where bytes decide.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// The smallest relative tolerance results of this dtype are checked
    /// with: two units of its precision (2^-10 for f16, 2^-7 for bf16), as
    /// a result rounded from a device's f32 may land one step away from
    /// the reference's and an intermediate's step carries on; 0 for f32,
    /// whose callers choose.
    pub fn rtol_floor(self) -> f64 {
        match self {
            DType::F16 => 2.0 * 2f64.powi(-10),
            DType::BF16 => 2.0 * 2f64.powi(-7),
            _ => 0.0,
        }
    }

    /// `rtol` for results of this dtype: at least [`DType::rtol_floor`].
    pub fn rtol(self, rtol: f64) -> f64 {
        rtol.max(self.rtol_floor())
    }

    /// The dtype arithmetic on `self` runs in: f32 for the half types.
    pub fn compute(self) -> DType {
        if self.is_half() { DType::F32 } else { self }
    }

    /// The common dtype of two float operands: the wider, and f32 for f16
    /// with bf16 (neither holds the other; torch's rule). `None` unless
    /// both are floats.
    pub fn promote_floats(a: DType, b: DType) -> Option<DType> {
        match (a, b) {
            _ if !a.is_float() || !b.is_float() => None,
            _ if a == b => Some(a),
            _ => Some(DType::F32),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a dtype name that tilefuse does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown dtype {0:?}: expected one of \"f32\", \"f16\", \"bf16\", \"i32\", \"u32\", \"bool\""
)]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    /// Accepts the tilefuse names and numpy's spellings (`float32`,
    /// `float16`, `bfloat16` as ml_dtypes names it, `int32`, ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" | "float32" => Ok(DType::F32),
            "f16" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            "i32" | "int32" => Ok(DType::I32),
            "u32" | "uint32" => Ok(DType::U32),
            "bool" => Ok(DType::Bool),
            other => Err(UnknownDType(other.to_string())),
        }
    }
}
