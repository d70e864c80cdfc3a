//! The reference evaluator: plain loops over flat indices, every op computed
//! in double precision (f32) or with WGSL's integer semantics, rounded once
//! per op. It is the ground truth scheduled kernels are checked against, so
//! it favours being obviously right over being fast.

use crate::dtype::DType;
use crate::error::{FusionError, Result};
use crate::fusion::{Fusion, TensorId};
use crate::infer::{TensorType, matmul_dims};
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::shape::{broadcast_index, numel, strides};
use crate::tensor::{Data, Scalar, Tensor};
use crate::view::{AsTensorRef, TensorRef, check_arguments};

/// Runs `fusion` on `inputs` (one per fusion input, in order) and returns
/// its outputs.
pub fn evaluate<T: AsTensorRef>(fusion: &Fusion, inputs: &[T]) -> Result<Vec<Tensor>> {
    let inputs: Vec<TensorRef> = inputs.iter().map(AsTensorRef::as_tensor_ref).collect();
    check_arguments(fusion, &inputs)?;
    if fusion.outputs().is_empty() {
        return Err(FusionError::Output(
            "the fusion has no outputs; call output() first".into(),
        ));
    }
    let mut values: Vec<Tensor> = Vec::with_capacity(fusion.nodes().len());
    let mut next_input = inputs.iter();
    for (i, node) in fusion.nodes().iter().enumerate() {
        if crate::interrupt::requested() {
            return Err(FusionError::Interrupted);
        }
        let ty = fusion.ty(TensorId(i))?;
        let args: Vec<&Tensor> = node.args.iter().map(|a| &values[a.0]).collect();
        let value = match &node.op {
            Op::Input { .. } => next_input
                .next()
                .expect("arguments were counted")
                .to_tensor(),
            op => eval_op(op, &args, ty)?,
        };
        values.push(value);
    }
    Ok(fusion
        .outputs()
        .iter()
        .map(|t| values[t.0].clone())
        .collect())
}

fn eval_op(op: &Op, args: &[&Tensor], ty: &TensorType) -> Result<Tensor> {
    let n = numel(&ty.shape);
    let out = &ty.shape;
    // Operands of the output's shape (most of them) skip the broadcast
    // index, which allocates: a 16M-element chain's reference took 6 s.
    let at = |t: &Tensor, i: usize| {
        let index = if t.shape == *out {
            i
        } else {
            broadcast_index(i, out, &t.shape)
        };
        t.data.get(index)
    };
    let data = match op {
        Op::Input { .. } => unreachable!("inputs are bound by evaluate"),
        Op::Constant { value, dtype } => {
            Data::from_fn(*dtype, 1, |_| Scalar::F(value.0).to(*dtype))
        }
        Op::Unary { func } => {
            Data::from_fn(ty.dtype, n, |i| unary_scalar(*func, args[0].data.get(i)))
        }
        Op::Binary { func } => Data::from_fn(ty.dtype, n, |i| {
            binary_scalar(*func, at(args[0], i), at(args[1], i))
        }),
        Op::Where => Data::from_fn(ty.dtype, n, |i| {
            if at(args[0], i).as_bool() {
                at(args[1], i)
            } else {
                at(args[2], i)
            }
        }),
        Op::Cast { dtype } => Data::from_fn(*dtype, n, |i| args[0].data.get(i).to(*dtype)),
        Op::Broadcast { .. } => Data::from_fn(ty.dtype, n, |i| at(args[0], i)),
        Op::Reshape { .. } => Ok(args[0].data.clone()),
        Op::Permute { perm } => permute(args[0], perm, ty),
        Op::Reduce { func, axes, .. } => reduce(*func, args[0], axes, ty.dtype),
        Op::Matmul {
            transpose_a,
            transpose_b,
            ..
        } => matmul(args[0], args[1], *transpose_a, *transpose_b, ty),
    };
    Ok(Tensor {
        shape: ty.shape.clone(),
        data: data?,
    })
}

/// tanh-approximated GELU, as in `torch.nn.functional.gelu(approximate="tanh")`:
/// `0.5 x (1 + tanh u)` computed as `x / (1 + e^-2u)`, which does not
/// cancel to 0 for negative `x` (the GPU's f32 keeps its relative
/// precision there too).
pub fn gelu(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    x / (1.0 + (-2.0 * c * (x + 0.044715 * x * x * x)).exp())
}

/// One element of a unary op, with the reference semantics (f32 computed
/// in f64; i32 wrapping).
pub fn unary_scalar(func: UnaryOp, x: Scalar) -> Scalar {
    match x {
        Scalar::F(x) => Scalar::F(match func {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            // NaN stays NaN, as in torch's relu and numpy's maximum(x, 0).
            UnaryOp::Relu => {
                if x > 0.0 || x.is_nan() {
                    x
                } else {
                    0.0
                }
            }
            UnaryOp::Gelu => gelu(x),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Reciprocal => 1.0 / x,
        }),
        Scalar::I(x) => Scalar::I(match func {
            UnaryOp::Neg => x.wrapping_neg(),
            UnaryOp::Abs => x.wrapping_abs(),
            UnaryOp::Relu => x.max(0),
            _ => unreachable!("verification admits only neg, abs, relu on i32"),
        }),
        _ => unreachable!("verification admits unary ops only on f32 and i32"),
    }
}

/// `maximum` / `minimum`: NaN wins (as in numpy); of +0 and -0, max takes
/// +0 and min -0 in either order (IEEE 754-2019).
fn float_extreme(a: f64, b: f64, take_max: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        let bits = if take_max {
            a.to_bits() & b.to_bits()
        } else {
            a.to_bits() | b.to_bits()
        };
        f64::from_bits(bits)
    } else if (a > b) == take_max {
        a
    } else {
        b
    }
}

fn compare<T: PartialOrd + Copy>(func: BinaryOp, a: T, b: T) -> bool {
    match func {
        BinaryOp::Eq => a == b,
        BinaryOp::Ne => a != b,
        BinaryOp::Lt => a < b,
        BinaryOp::Le => a <= b,
        BinaryOp::Gt => a > b,
        BinaryOp::Ge => a >= b,
        _ => unreachable!("not a comparison"),
    }
}

/// One element of a binary op, with the reference semantics (WGSL integer
/// division, numpy's NaN-propagating max / min).
pub fn binary_scalar(func: BinaryOp, a: Scalar, b: Scalar) -> Scalar {
    if func.is_comparison() {
        return Scalar::B(match (a, b) {
            (Scalar::F(a), Scalar::F(b)) => compare(func, a, b),
            (Scalar::I(a), Scalar::I(b)) => compare(func, a, b),
            (Scalar::U(a), Scalar::U(b)) => compare(func, a, b),
            (Scalar::B(a), Scalar::B(b)) => compare(func, a, b),
            _ => unreachable!("verification makes operand dtypes equal"),
        });
    }
    match (a, b) {
        (Scalar::F(a), Scalar::F(b)) => Scalar::F(match func {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max => float_extreme(a, b, true),
            BinaryOp::Min => float_extreme(a, b, false),
            BinaryOp::Pow => a.powf(b),
            _ => unreachable!("comparisons handled above"),
        }),
        // WGSL integer semantics: wrapping arithmetic; x / 0 and
        // i32::MIN / -1 give x.
        (Scalar::I(a), Scalar::I(b)) => Scalar::I(match func {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Div => a.checked_div(b).unwrap_or(a),
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
            _ => unreachable!("verification admits no pow on i32"),
        }),
        (Scalar::U(a), Scalar::U(b)) => Scalar::U(match func {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Div => a.checked_div(b).unwrap_or(a),
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
            _ => unreachable!("verification admits no pow on u32"),
        }),
        _ => unreachable!("verification makes operand dtypes equal and numeric"),
    }
}

fn permute(x: &Tensor, perm: &[usize], ty: &TensorType) -> Result<Data> {
    let in_strides = strides(&x.shape);
    let out_strides = strides(&ty.shape);
    Data::from_fn(ty.dtype, numel(&ty.shape), |flat| {
        let src: usize = (0..perm.len())
            .map(|axis| (flat / out_strides[axis]) % ty.shape[axis] * in_strides[perm[axis]])
            .sum();
        x.data.get(src)
    })
}

fn reduce(func: ReduceOp, x: &Tensor, axes: &[usize], dtype: DType) -> Result<Data> {
    // Output index of each input element: its coordinates with the reduced
    // axes dropped (keepdims does not change the flat layout).
    let kept: Vec<usize> = (0..x.shape.len()).filter(|a| !axes.contains(a)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&a| x.shape[a]).collect();
    let kept_strides = strides(&kept_shape);
    let in_strides = strides(&x.shape);
    let count: usize = axes.iter().map(|&a| x.shape[a]).product();
    let mut acc: Vec<Option<Scalar>> = vec![None; numel(&kept_shape)];
    for flat in 0..x.data.len() {
        if flat % (1 << 16) == 0 && crate::interrupt::requested() {
            return Err(FusionError::Interrupted);
        }
        let out: usize = kept
            .iter()
            .zip(&kept_strides)
            .map(|(&a, &s)| (flat / in_strides[a]) % x.shape[a] * s)
            .sum();
        let v = x.data.get(flat);
        acc[out] = Some(match acc[out] {
            None => v,
            Some(a) => match func {
                ReduceOp::Sum | ReduceOp::Mean => binary_scalar(BinaryOp::Add, a, v),
                ReduceOp::Max => binary_scalar(BinaryOp::Max, a, v),
                ReduceOp::Min => binary_scalar(BinaryOp::Min, a, v),
            },
        });
    }
    Data::from_fn(dtype, acc.len(), |i| match (func, acc[i]) {
        (ReduceOp::Mean, Some(s)) => Scalar::F(s.as_f64() / count as f64),
        (_, Some(s)) => s,
        // The mean of nothing is 0/0, as numpy says; the others start from
        // their identity (sum 0, max -inf, min +inf).
        (ReduceOp::Mean, None) => Scalar::F(f64::NAN).to(dtype),
        (ReduceOp::Sum, None) => Scalar::F(0.0).to(dtype),
        (_, None) => reduce_identity(func, dtype),
    })
}

/// The value a reduction starts from: -0 for float sums (the one value
/// `x + identity` leaves unchanged for every x, +0 and -0 too, so a sum is
/// its terms' sum on every device, whatever order or folding a compiler
/// picks), 0 for integer sums, the lowest (highest) value of the dtype for
/// max (min). The sum of no terms is +0 (see `evaluate`).
pub fn reduce_identity(func: ReduceOp, dtype: DType) -> Scalar {
    match func {
        ReduceOp::Sum | ReduceOp::Mean => Scalar::F(-0.0).to(dtype),
        ReduceOp::Max => Scalar::F(f64::NEG_INFINITY).to(dtype),
        ReduceOp::Min => Scalar::F(f64::INFINITY).to(dtype),
    }
}

fn matmul(a: &Tensor, b: &Tensor, ta: bool, tb: bool, ty: &TensorType) -> Result<Data> {
    let dims = matmul_dims(&a.ty(), &b.ty(), ta, tb).expect("verified matmul");
    let (m, k, n) = (dims.m, dims.k, dims.n);
    let batch_a = &a.shape[..a.shape.len() - 2];
    let batch_b = &b.shape[..b.shape.len() - 2];
    let mut out = Vec::with_capacity(numel(&ty.shape));
    for batch in 0..numel(&dims.batch) {
        let lhs = operand(a, broadcast_index(batch, &dims.batch, batch_a), m, k, ta);
        let rhs = operand(b, broadcast_index(batch, &dims.batch, batch_b), k, n, tb);
        for r in 0..m {
            let row = &lhs[r * k..(r + 1) * k];
            if crate::interrupt::requested() {
                return Err(FusionError::Interrupted);
            }
            // Each element sums its terms in order from the identity -0,
            // so one term -0 stays -0; no terms give +0. Row by row over
            // `rhs` (not a dot product per element): the same sums, read
            // in memory order.
            let mut acc = vec![if k == 0 { 0.0 } else { -0.0 }; n];
            for (&x, rhs_row) in row.iter().zip(rhs.chunks_exact(n.max(1))) {
                for (acc, &y) in acc.iter_mut().zip(rhs_row) {
                    *acc += x * y;
                }
            }
            out.extend(acc);
        }
    }
    Data::from_fn(ty.dtype, out.len(), |i| Scalar::F(out[i]))
}

/// The `batch`-th matrix of `t` as a matmul reads it: `rows` x `cols`,
/// row-major, in f64; stored transposed (`cols` x `rows`) when
/// `transposed`.
fn operand(t: &Tensor, batch: usize, rows: usize, cols: usize, transposed: bool) -> Vec<f64> {
    let base = batch * rows * cols;
    (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            let stored = if transposed { c * rows + r } else { i };
            t.data.get(base + stored).as_f64()
        })
        .collect()
}
