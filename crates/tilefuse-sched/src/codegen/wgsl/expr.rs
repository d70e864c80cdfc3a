//! Expressions: buffer accesses (scalar, or a `vec4` element), literals,
//! index arithmetic in `u32`, and every op of the IR with its documented
//! semantics (`docs/semantics.md`): NaN-propagating `max` / `min`,
//! saturating float-to-int casts, masks stored as `u32`.

use tilefuse_ir::{BinaryOp, DType, ReduceOp, Scalar as Value, UnaryOp};

use super::ast::{BinOp, Expr, Func, Lit, Scalar, Ty};
use super::scalar_of;
use super::{Gen, Packed};
use crate::ir::{self, BufferId, Index, Var, flat_offset};

impl Gen<'_> {
    fn buffer(&self, b: BufferId) -> Expr {
        Expr::Var(self.name(b))
    }

    /// The element offset of `indices` in `b`. An empty buffer's accesses
    /// never run (each sits under a guard that fails), but its array is
    /// declared with one element, and naga rejects a constant index past
    /// it (an unrolled loop's `let l = 1u;`): they all read index 0.
    fn offset(&self, b: BufferId, indices: &[Index]) -> Expr {
        let buffer = self.kernel.buffer(b);
        if buffer.numel() == 0 {
            return Expr::u32(0);
        }
        index_expr(&flat_offset(indices, &buffer.shape))
    }

    /// One element: `b[o]`, or `b[o / 4u][o % 4u]` in a vec4 buffer.
    pub(super) fn element(&self, b: BufferId, indices: &[Index]) -> Expr {
        let o = self.offset(b, indices);
        if self.l.vectors.buffers.contains(&b) {
            let vec = Expr::index(
                self.buffer(b),
                Expr::bin(BinOp::Div, o.clone(), Expr::u32(4)),
            );
            Expr::index(vec, Expr::bin(BinOp::Rem, o, Expr::u32(4)))
        } else {
            Expr::index(self.buffer(b), o)
        }
    }

    /// The `vec4` of a vec4 buffer that starts at element `indices`.
    pub(super) fn vector_element(&self, b: BufferId, indices: &[Index]) -> Expr {
        let o = self.offset(b, indices);
        Expr::index(self.buffer(b), Expr::bin(BinOp::Div, o, Expr::u32(4)))
    }

    fn dtype(&self, e: &ir::Expr) -> DType {
        e.dtype(&self.kernel.buffer_dtype())
    }

    pub(super) fn value(&self, e: &ir::Expr) -> Expr {
        match e {
            ir::Expr::Const { value, dtype } => literal(Value::F(*value), *dtype),
            ir::Expr::Load { buffer, indices } => {
                if let Some(packed) = self.packed(*buffer) {
                    return self.load_half(*buffer, indices, packed);
                }
                let load = self.element(*buffer, indices);
                if self.kernel.buffer(*buffer).dtype == DType::Bool {
                    Expr::bin(BinOp::Ne, load, Expr::u32(0))
                } else {
                    load
                }
            }
            ir::Expr::Unary(op, a) => unary(*op, self.value(a), self.dtype(a).compute(), false),
            ir::Expr::Binary(op, a, b) => {
                let (x, y) = (self.value(a), self.value(b));
                let dtype = self.dtype(a).compute();
                with_zero(*op, (a, &x), (b, &y), dtype, false)
                    .unwrap_or_else(|| binary(*op, x, y, dtype, false))
            }
            ir::Expr::Select(c, a, b) => select(self.value(b), self.value(a), self.value(c)),
            ir::Expr::Cast(to, a) => {
                let from = self.dtype(a);
                if from == *to {
                    return self.value(a);
                }
                let x = cast(self.value(a), from.compute(), to.compute());
                match to {
                    DType::F16 => helper("round_f16", x),
                    DType::BF16 => helper("round_bf16", x),
                    _ => x,
                }
            }
        }
    }

    /// Element `indices` of a packed buffer of halves, widened to f32.
    fn load_half(&self, b: BufferId, indices: &[Index], packed: Packed) -> Expr {
        let Packed::Words { dtype, atomic } = packed else {
            let element = self.element(b, indices);
            return Expr::call(Func::Construct(Ty::Scalar(Scalar::F32)), vec![element]);
        };
        let (word, lane) = self.half_word(b, indices);
        let word = if atomic {
            Expr::call(Func::Builtin("atomicLoad"), vec![Expr::Ref(Box::new(word))])
        } else {
            word
        };
        let at = if dtype == DType::F16 {
            "f16_at"
        } else {
            "bf16_at"
        };
        Expr::call(
            Func::Helper {
                name: at,
                vec4: false,
            },
            vec![word, lane],
        )
    }

    /// The word of a packed buffer that holds element `indices`, and the
    /// element's lane in it (0 the low half).
    pub(super) fn half_word(&self, b: BufferId, indices: &[Index]) -> (Expr, Expr) {
        let o = self.offset(b, indices);
        let word = Expr::index(
            self.buffer(b),
            Expr::bin(BinOp::Div, o.clone(), Expr::u32(2)),
        );
        (word, Expr::bin(BinOp::Rem, o, Expr::u32(2)))
    }

    /// The four lanes of a vectorized loop at once: each load, as lowering's
    /// `vectorize` found it (`contiguous`, in `Expr::loads` order), a `vec4`
    /// element or one element splat to all lanes.
    pub(super) fn vector_value(
        &self,
        e: &ir::Expr,
        contiguous: &mut impl Iterator<Item = bool>,
    ) -> Expr {
        let mut v = |x: &ir::Expr| self.vector_value(x, contiguous);
        match e {
            ir::Expr::Const { value, dtype } => splat(literal(Value::F(*value), *dtype)),
            ir::Expr::Load { buffer, indices } => match contiguous.next() {
                Some(true) => self.vector_element(*buffer, indices),
                _ => splat(self.element(*buffer, indices)),
            },
            ir::Expr::Unary(op, a) => unary(*op, v(a), DType::F32, true),
            ir::Expr::Binary(op, a, b) => {
                let (x, y) = (v(a), v(b));
                with_zero(*op, (a, &x), (b, &y), DType::F32, true)
                    .unwrap_or_else(|| binary(*op, x, y, DType::F32, true))
            }
            ir::Expr::Select(c, x, y) => {
                let (c, x, y) = (v(c), v(x), v(y));
                select(y, x, c)
            }
            ir::Expr::Cast(..) => unreachable!("vectorize admits no casts"),
        }
    }
}

fn helper(name: &'static str, x: Expr) -> Expr {
    Expr::call(Func::Helper { name, vec4: false }, vec![x])
}

/// `x` of scalar dtype `from` converted to `to` (neither a half).
fn cast(x: Expr, from: DType, to: DType) -> Expr {
    match (from, to) {
        (f, t) if f == t => x,
        (_, DType::Bool) => binary(BinaryOp::Ne, x, literal(Value::I(0), from), from, false),
        // Saturating, NaN to 0 (WGSL leaves both to the driver).
        (DType::F32, DType::I32) => helper("f32_to_i32", x),
        (DType::F32, DType::U32) => helper("f32_to_u32", x),
        (_, t) => Expr::call(Func::Construct(Ty::Scalar(scalar_of(t))), vec![x]),
    }
}

fn splat(x: Expr) -> Expr {
    Expr::call(Func::Construct(Ty::Vec4(Scalar::F32)), vec![x])
}

/// WGSL's `select(if_false, if_true, cond)`.
pub(super) fn select(if_false: Expr, if_true: Expr, cond: Expr) -> Expr {
    Expr::call(Func::Builtin("select"), vec![if_false, if_true, cond])
}

/// A literal of `dtype`.
pub(super) fn literal(v: Value, dtype: DType) -> Expr {
    Expr::Lit(match v.to(dtype) {
        Value::F(x) => Lit::F32(x as f32),
        Value::I(x) => Lit::I32(x),
        Value::U(x) => Lit::U32(u64::from(x)),
        Value::B(x) => Lit::Bool(x),
    })
}

/// An index in `u32` arithmetic.
pub(super) fn index_expr(ix: &Index) -> Expr {
    let u = |c: i64| Expr::u32(c.unsigned_abs());
    match ix {
        Index::Const(c) if *c < 0 => Expr::bin(BinOp::Sub, Expr::u32(0), u(*c)),
        Index::Const(c) => u(*c),
        Index::Var(Var::Loop(l)) => Expr::Var(super::Name::Loop(l.0)),
        Index::Var(Var::Iter(i)) => Expr::Var(super::Name::Iter(*i)),
        // Rebased indices subtract: `a + b * -c` prints as `a - b * c`
        // (u32 arithmetic wraps, and the final index is non-negative).
        Index::Add(a, b) => match &**b {
            Index::Mul(x, c) if *c < 0 => {
                Expr::bin(BinOp::Sub, index_expr(a), index_expr(&(*x.clone() * -c)))
            }
            Index::Const(c) if *c < 0 => Expr::bin(BinOp::Sub, index_expr(a), u(*c)),
            _ => Expr::bin(BinOp::Add, index_expr(a), index_expr(b)),
        },
        Index::Mul(a, c) if *c < 0 => Expr::bin(
            BinOp::Sub,
            Expr::u32(0),
            Expr::bin(BinOp::Mul, index_expr(a), u(*c)),
        ),
        Index::Mul(a, c) => Expr::bin(BinOp::Mul, index_expr(a), u(*c)),
        Index::Div(a, c) => Expr::bin(BinOp::Div, index_expr(a), u(*c)),
        Index::Mod(a, c) => Expr::bin(BinOp::Rem, index_expr(a), u(*c)),
    }
}

/// A unary op on a scalar of `dtype`, or on a `vec4<f32>` with `vec4`
/// (the helpers of `shaders/math.wgsl` have a `4` form for vectors).
fn unary(op: UnaryOp, x: Expr, dtype: DType, vec4: bool) -> Expr {
    let helper = |name| Func::Helper { name, vec4 };
    let func = match op {
        UnaryOp::Neg => return Expr::Neg(Box::new(x)),
        UnaryOp::Reciprocal => {
            let one = Expr::Lit(Lit::F32(1.0));
            let one = if vec4 { splat(one) } else { one };
            return Expr::bin(BinOp::Div, one, x);
        }
        UnaryOp::Abs => Func::Builtin("abs"),
        UnaryOp::Exp => helper("exp"),
        UnaryOp::Log => Func::Builtin("log"),
        UnaryOp::Sqrt => Func::Builtin("sqrt"),
        UnaryOp::Rsqrt => Func::Builtin("inverseSqrt"),
        UnaryOp::Sin => Func::Builtin("sin"),
        UnaryOp::Cos => Func::Builtin("cos"),
        UnaryOp::Tanh => helper("tanh"),
        UnaryOp::Sigmoid => helper("sigmoid"),
        UnaryOp::Gelu => helper("gelu"),
        UnaryOp::Relu if vec4 => helper("relu"),
        UnaryOp::Relu if dtype == DType::I32 => helper("relu_i32"),
        UnaryOp::Relu => helper("relu_f32"),
    };
    Expr::call(func, vec![x])
}

/// A binary op on operands of `dtype`, scalars or `vec4<f32>` with `vec4`.
/// Float comparisons go through `shaders/math.wgsl`, which tests NaN
/// operands by their bits: WGSL's `!=` is false for NaN on Vulkan (naga
/// writes SPIR-V's ordered not-equal), and a driver may fold comparisons as
/// if there were no NaNs.
fn binary(op: BinaryOp, x: Expr, y: Expr, dtype: DType, vec4: bool) -> Expr {
    if op.is_comparison() && (vec4 || dtype == DType::F32) {
        let name = comparison_helper(op);
        return Expr::call(Func::Helper { name, vec4 }, vec![x, y]);
    }
    let infix = match op {
        BinaryOp::Max => return extreme("max", x, y, dtype, vec4),
        BinaryOp::Min => return extreme("min", x, y, dtype, vec4),
        BinaryOp::Pow => return Expr::call(Func::Helper { name: "pow", vec4 }, vec![x, y]),
        BinaryOp::Add => BinOp::Add,
        BinaryOp::Sub => BinOp::Sub,
        BinaryOp::Mul => BinOp::Mul,
        BinaryOp::Div => BinOp::Div,
        BinaryOp::Eq => BinOp::Eq,
        BinaryOp::Ne => BinOp::Ne,
        BinaryOp::Lt => BinOp::Lt,
        BinaryOp::Le => BinOp::Le,
        BinaryOp::Gt => BinOp::Gt,
        BinaryOp::Ge => BinOp::Ge,
    };
    Expr::bin(infix, x, y)
}

/// The `shaders/math.wgsl` helper of a float comparison.
fn comparison_helper(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Eq => "eq",
        BinaryOp::Ne => "ne",
        BinaryOp::Lt => "lt",
        BinaryOp::Le => "le",
        BinaryOp::Gt => "gt",
        BinaryOp::Ge => "ge",
        _ => unreachable!("{op:?} is not a comparison"),
    }
}

/// The sign bit of an f32.
const SIGN: u64 = 0x8000_0000;

/// The sign bit of a float literal zero: `Some(0)` for `+0`, `Some(SIGN)`
/// for `-0`, `None` for anything else.
fn zero_sign(e: &ir::Expr) -> Option<u64> {
    match e {
        ir::Expr::Const { value, .. } if *value == 0.0 => {
            Some(if value.is_sign_negative() { SIGN } else { 0 })
        }
        _ => None,
    }
}

/// Float arithmetic with a literal zero operand, through the helpers of
/// `shaders/math.wgsl` that spell out its IEEE result (compilers fold
/// `x * 0` and its kin as if `x` were finite); `None` for other ops.
fn with_zero(
    op: BinaryOp,
    (a, x): (&ir::Expr, &Expr),
    (b, y): (&ir::Expr, &Expr),
    dtype: DType,
    vec4: bool,
) -> Option<Expr> {
    if dtype != DType::F32 {
        return None;
    }
    let call = |name, args| Some(Expr::call(Func::Helper { name, vec4 }, args));
    let sign = |z: u64| Expr::u32(z);
    match (op, zero_sign(a), zero_sign(b)) {
        // Both zero: no x to protect, WGSL's arithmetic on literals is exact.
        (_, Some(_), Some(_)) => None,
        (BinaryOp::Mul, Some(z), None) => call("times_zero", vec![y.clone(), sign(z)]),
        (BinaryOp::Mul, None, Some(z)) => call("times_zero", vec![x.clone(), sign(z)]),
        (BinaryOp::Div, None, Some(z)) => call("over_zero", vec![x.clone(), sign(z)]),
        (BinaryOp::Div, Some(z), None) => call("zero_over", vec![sign(z), y.clone()]),
        (BinaryOp::Add, Some(z), None) => call("plus_zero", vec![y.clone(), sign(z)]),
        (BinaryOp::Add, None, Some(z)) => call("plus_zero", vec![x.clone(), sign(z)]),
        (BinaryOp::Sub, None, Some(z)) => call("plus_zero", vec![x.clone(), sign(z ^ SIGN)]),
        (BinaryOp::Sub, Some(z), None) => call("zero_minus", vec![sign(z), y.clone()]),
        _ => None,
    }
}

/// `max` / `min`: on floats NaN wins, as in numpy (WGSL's builtins may
/// return either operand), so floats go through `shaders/math.wgsl`.
fn extreme(name: &'static str, x: Expr, y: Expr, dtype: DType, vec4: bool) -> Expr {
    let func = match (dtype, vec4) {
        (_, true) | (DType::F32, false) => Func::Helper { name, vec4 },
        _ => Func::Builtin(name),
    };
    Expr::call(func, vec![x, y])
}

/// One reduction step: `acc` combined with `value` (of `dtype`, or
/// `vec4<f32>` with `vec4`). A float sum of products (a matmul's) steps by
/// `fma`: the SPIR-V forbids the driver to fuse a multiply and an add
/// itself (`NoContraction`, see `tilefuse-runtime`'s `gpu/spirv.rs`).
/// Both factors have the sum's type: a vector step's operands are all
/// `vec4<f32>`.
pub(super) fn combine(op: ReduceOp, acc: Expr, value: Expr, dtype: DType, vec4: bool) -> Expr {
    match (op, value) {
        (ReduceOp::Sum | ReduceOp::Mean, Expr::Binary(BinOp::Mul, a, b)) if dtype == DType::F32 => {
            Expr::call(Func::Builtin("fma"), vec![*a, *b, acc])
        }
        (ReduceOp::Sum | ReduceOp::Mean, value) => Expr::bin(BinOp::Add, acc, value),
        (ReduceOp::Max, value) => extreme("max", acc, value, dtype, vec4),
        (ReduceOp::Min, value) => extreme("min", acc, value, dtype, vec4),
    }
}

/// Converts a value for storing into a buffer of `dtype`.
pub(super) fn to_storage(value: Expr, dtype: DType) -> Expr {
    if dtype == DType::Bool {
        select(Expr::u32(0), Expr::u32(1), value)
    } else {
        value
    }
}
