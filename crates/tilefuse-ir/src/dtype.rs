//! Element types of fusion tensors.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The element type of a tensor. `f32` is first class; the integer and
/// boolean types exist for indices and masks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    I32,
    U32,
    Bool,
}

impl DType {
    pub const ALL: [DType; 4] = [DType::F32, DType::I32, DType::U32, DType::Bool];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    pub fn is_float(self) -> bool {
        self == DType::F32
    }

    /// Types that support arithmetic (everything but `bool`).
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }

    /// Types that have a sign (`neg`, `abs`).
    pub fn is_signed(self) -> bool {
        matches!(self, DType::F32 | DType::I32)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a dtype name that is not one of `f32`, `i32`, `u32`, `bool`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype {0:?}: expected one of \"f32\", \"i32\", \"u32\", \"bool\"")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    /// Accepts the tilefuse names and numpy's spellings (`float32`, `int32`, ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" | "float32" => Ok(DType::F32),
            "i32" | "int32" => Ok(DType::I32),
            "u32" | "uint32" => Ok(DType::U32),
            "bool" => Ok(DType::Bool),
            other => Err(UnknownDType(other.to_string())),
        }
    }
}
