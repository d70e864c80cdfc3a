//! The operations a fusion is built from.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::shape::Shape;

/// Defines a fieldless op-function enum with its snake_case name table, so
/// that serde, the printer and the Python builder all agree on one spelling.
macro_rules! op_fns {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Looks an op up by its name, as serde and the printer spell it.
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $($text => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

op_fns!(
    /// Elementwise functions of one operand.
    UnaryOp {
        Neg = "neg", Abs = "abs", Exp = "exp", Log = "log", Sqrt = "sqrt", Rsqrt = "rsqrt",
        Tanh = "tanh", Sigmoid = "sigmoid", Relu = "relu", Gelu = "gelu", Sin = "sin",
        Cos = "cos", Reciprocal = "reciprocal",
    }
);

op_fns!(
    /// Elementwise functions of two operands, broadcast with numpy rules.
    BinaryOp {
        Add = "add", Sub = "sub", Mul = "mul", Div = "div", Max = "max", Min = "min",
        Pow = "pow", Eq = "eq", Ne = "ne", Lt = "lt", Le = "le", Gt = "gt", Ge = "ge",
    }
);

op_fns!(
    /// Reductions over a set of axes.
    ReduceOp { Sum = "sum", Max = "max", Min = "min", Mean = "mean" }
);

impl UnaryOp {
    /// Whether the function is only defined for floating-point operands.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// One node's operation. Attributes are everything needed to infer the
/// node's shape and dtype from its arguments; nothing inferred is stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// A fusion input; inputs are numbered in the order they were added.
    Input {
        shape: Shape,
        dtype: DType,
    },
    /// A scalar constant of the given dtype.
    Constant {
        value: ConstValue,
        dtype: DType,
    },
    Unary {
        #[serde(rename = "fn")]
        func: UnaryOp,
    },
    Binary {
        #[serde(rename = "fn")]
        func: BinaryOp,
    },
    /// `where(cond, a, b)`: `a` where `cond` is true, else `b`, broadcast.
    Where,
    Cast {
        dtype: DType,
    },
    /// Broadcasts the argument to `shape` with numpy rules.
    Broadcast {
        shape: Shape,
    },
    /// Reduces over `axes` (sorted, unique, non-negative).
    Reduce {
        #[serde(rename = "fn")]
        func: ReduceOp,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// Reorders axes: output axis `i` is input axis `perm[i]`.
    Permute {
        perm: Vec<usize>,
    },
    Reshape {
        shape: Shape,
    },
    /// `a @ b` over the last two axes, batch axes broadcast; either operand
    /// may be read transposed. Sums in f32 (f64 in the reference) and
    /// rounds once to `out_dtype`, the operands' dtype when absent (f32
    /// out of half operands keeps the sums unrounded, as Triton's
    /// `tl.dot(..., out_dtype=tl.float32)`).
    Matmul {
        transpose_a: bool,
        transpose_b: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out_dtype: Option<DType>,
    },
}

impl Op {
    /// The op's name as errors and the printer show it (`exp`, `matmul`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Constant { .. } => "constant",
            Op::Unary { func } => func.name(),
            Op::Binary { func } => func.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::Broadcast { .. } => "broadcast",
            Op::Reduce { func, .. } => func.name(),
            Op::Permute { .. } => "permute",
            Op::Reshape { .. } => "reshape",
            Op::Matmul { .. } => "matmul",
        }
    }

    /// Whether the op computes values, rather than bringing them in
    /// (inputs, constants) or only re-indexing them (broadcast, permute,
    /// reshape). Casts compute.
    pub fn computes(&self) -> bool {
        !matches!(
            self,
            Op::Input { .. }
                | Op::Constant { .. }
                | Op::Broadcast { .. }
                | Op::Permute { .. }
                | Op::Reshape { .. }
        )
    }

    /// How many tensor arguments the op takes.
    pub fn arity(&self) -> usize {
        match self {
            Op::Input { .. } | Op::Constant { .. } => 0,
            Op::Binary { .. } | Op::Matmul { .. } => 2,
            Op::Where => 3,
            _ => 1,
        }
    }
}

/// A constant's value. Equal when the bits are equal, so that a `nan`
/// constant survives a JSON round trip equal to itself.
#[derive(Clone, Copy, Debug)]
pub struct ConstValue(pub f64);

impl PartialEq for ConstValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for ConstValue {}

/// JSON has no infinities or NaN; constants such as `-inf` (a max-reduction
/// identity) are written as the strings `"inf"`, `"-inf"` and `"nan"`.
impl Serialize for ConstValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            v if v.is_nan() => s.serialize_str("nan"),
            f64::INFINITY => s.serialize_str("inf"),
            f64::NEG_INFINITY => s.serialize_str("-inf"),
            v => s.serialize_f64(v),
        }
    }
}

impl<'de> Deserialize<'de> for ConstValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Number(f64),
            Name(String),
        }
        let value = match Repr::deserialize(d)? {
            Repr::Number(v) => v,
            Repr::Name(name) => match name.as_str() {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" => f64::NAN,
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "expected a number, \"inf\", \"-inf\" or \"nan\", got {name:?}"
                    )));
                }
            },
        };
        Ok(ConstValue(value))
    }
}
