//! Shape and dtype inference: the verification every op passes when it is
//! added to a fusion or loaded from JSON.

use crate::dtype::DType;
use crate::error::{FusionError, Result};
use crate::op::{BinaryOp, Op, ReduceOp};
use crate::shape::{Shape, broadcast_shapes, broadcasts_to, format_shape, numel};

/// The static type of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Shape,
    pub dtype: DType,
}

impl TensorType {
    pub fn new(shape: Shape, dtype: DType) -> Self {
        TensorType { shape, dtype }
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(", "))
    }
}

/// Infers the type of `op` applied to `args`, or says why it does not apply.
pub fn infer(op: &Op, args: &[&TensorType]) -> Result<TensorType> {
    let name = op.name();
    let fail = |message: String| FusionError::op(name, message);
    if args.len() != op.arity() {
        return Err(fail(format!(
            "takes {} arguments, got {}",
            op.arity(),
            args.len()
        )));
    }
    match op {
        Op::Input { shape, dtype } => Ok(TensorType::new(shape.clone(), *dtype)),
        Op::Constant { dtype, .. } => Ok(TensorType::new(vec![], *dtype)),
        Op::Unary { func } => unary(func.float_only(), args[0]).map_err(fail),
        Op::Binary { func } => binary(name, *func, args[0], args[1]),
        Op::Where => select(name, args[0], args[1], args[2]),
        Op::Cast { dtype } => Ok(TensorType::new(args[0].shape.clone(), *dtype)),
        Op::Broadcast { shape } => broadcast_to(args[0], shape).map_err(fail),
        Op::Reduce {
            func,
            axes,
            keepdims,
        } => reduce(name, *func, axes, *keepdims, args[0]),
        Op::Permute { perm } => permute(perm, args[0]).map_err(fail),
        Op::Reshape { shape } => reshape(shape, args[0]).map_err(fail),
        Op::Matmul {
            transpose_a,
            transpose_b,
            out_dtype,
        } => infer_matmul(args[0], args[1], *transpose_a, *transpose_b, *out_dtype).map_err(fail),
    }
}

fn unary(float_only: bool, x: &TensorType) -> std::result::Result<TensorType, String> {
    let ok = if float_only {
        x.dtype.is_float()
    } else {
        x.dtype.is_signed()
    };
    if !ok {
        let want = if float_only {
            "float (f32, f16, bf16)"
        } else {
            "float or i32"
        };
        return Err(format!("expected a {want} operand, got {}", x.dtype));
    }
    Ok(x.clone())
}

fn binary(
    name: &'static str,
    func: BinaryOp,
    a: &TensorType,
    b: &TensorType,
) -> Result<TensorType> {
    let fail = |message: String| FusionError::op(name, message);
    if a.dtype != b.dtype {
        return Err(fail(format!(
            "operand dtypes differ: {} and {} (cast one first)",
            a.dtype, b.dtype
        )));
    }
    let allowed = match func {
        BinaryOp::Pow => a.dtype.is_float(),
        BinaryOp::Eq | BinaryOp::Ne => true,
        _ => a.dtype.is_numeric(),
    };
    if !allowed {
        return Err(fail(format!("not defined for {} operands", a.dtype)));
    }
    let shape = broadcast(name, &a.shape, &b.shape)?;
    let dtype = if func.is_comparison() {
        DType::Bool
    } else {
        a.dtype
    };
    Ok(TensorType::new(shape, dtype))
}

/// `where(c, a, b)`.
fn select(
    name: &'static str,
    c: &TensorType,
    a: &TensorType,
    b: &TensorType,
) -> Result<TensorType> {
    let fail = |message: String| FusionError::op(name, message);
    if c.dtype != DType::Bool {
        return Err(fail(format!("condition must be bool, got {}", c.dtype)));
    }
    if a.dtype != b.dtype {
        return Err(fail(format!(
            "branch dtypes differ: {} and {}",
            a.dtype, b.dtype
        )));
    }
    let shape = broadcast(name, &broadcast(name, &c.shape, &a.shape)?, &b.shape)?;
    Ok(TensorType::new(shape, a.dtype))
}

fn broadcast_to(x: &TensorType, shape: &Shape) -> std::result::Result<TensorType, String> {
    if !broadcasts_to(&x.shape, shape) {
        return Err(format!(
            "cannot broadcast shape {} to {}",
            format_shape(&x.shape),
            format_shape(shape)
        ));
    }
    Ok(TensorType::new(shape.clone(), x.dtype))
}

fn reduce(
    name: &'static str,
    func: ReduceOp,
    axes: &[usize],
    keepdims: bool,
    x: &TensorType,
) -> Result<TensorType> {
    let ok = match func {
        ReduceOp::Mean => x.dtype.is_float(),
        _ => x.dtype.is_numeric(),
    };
    if !ok {
        let message = format!("not defined for {} operands", x.dtype);
        return Err(FusionError::op(name, message));
    }
    check_axes(name, axes, x.shape.len())?;
    let shape = x
        .shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(shape, x.dtype))
}

fn permute(perm: &[usize], x: &TensorType) -> std::result::Result<TensorType, String> {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    if sorted != (0..x.shape.len()).collect::<Vec<_>>() {
        return Err(format!(
            "{perm:?} is not a permutation of the {} axes of shape {}",
            x.shape.len(),
            format_shape(&x.shape)
        ));
    }
    let shape = perm.iter().map(|&p| x.shape[p]).collect();
    Ok(TensorType::new(shape, x.dtype))
}

fn reshape(shape: &Shape, x: &TensorType) -> std::result::Result<TensorType, String> {
    if numel(shape) != numel(&x.shape) {
        return Err(format!(
            "cannot reshape {} ({} elements) to {} ({} elements)",
            format_shape(&x.shape),
            numel(&x.shape),
            format_shape(shape),
            numel(shape)
        ));
    }
    Ok(TensorType::new(shape.clone(), x.dtype))
}

fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    broadcast_shapes(a, b).ok_or_else(|| {
        FusionError::op(
            op,
            format!(
                "cannot broadcast shapes {} and {}",
                format_shape(a),
                format_shape(b)
            ),
        )
    })
}

fn check_axes(op: &'static str, axes: &[usize], rank: usize) -> Result<()> {
    if axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(FusionError::op(
            op,
            format!("axes {axes:?} must be sorted and unique"),
        ));
    }
    if let Some(bad) = axes.iter().find(|&&a| a >= rank) {
        return Err(FusionError::op(
            op,
            format!("axis {bad} is out of range for rank {rank}"),
        ));
    }
    Ok(())
}

/// The `(m, k)` and `(k, n)` matrices of a matmul operand pair, after the
/// transposes, and the broadcast batch shape.
pub struct MatmulDims {
    pub batch: Shape,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// Reads the matmul dimensions, or explains why the operands do not fit.
pub fn matmul_dims(
    a: &TensorType,
    b: &TensorType,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<MatmulDims, String> {
    for (label, t) in [("a", a), ("b", b)] {
        if t.shape.len() < 2 {
            return Err(format!(
                "operand {label} has shape {}; matmul needs at least 2 axes",
                format_shape(&t.shape)
            ));
        }
    }
    let last2 = |t: &TensorType, transpose: bool| {
        let r = t.shape.len();
        let (rows, cols) = (t.shape[r - 2], t.shape[r - 1]);
        if transpose {
            (cols, rows)
        } else {
            (rows, cols)
        }
    };
    let (m, k) = last2(a, transpose_a);
    let (kb, n) = last2(b, transpose_b);
    if k != kb {
        return Err(format!(
            "inner dimensions differ: a {} gives k={k}, b {} gives k={kb}",
            format_shape(&a.shape),
            format_shape(&b.shape)
        ));
    }
    let batch_a = &a.shape[..a.shape.len() - 2];
    let batch_b = &b.shape[..b.shape.len() - 2];
    let batch = broadcast_shapes(batch_a, batch_b).ok_or_else(|| {
        format!(
            "batch shapes {} and {} do not broadcast",
            format_shape(batch_a),
            format_shape(batch_b)
        )
    })?;
    Ok(MatmulDims { batch, m, k, n })
}

fn infer_matmul(
    a: &TensorType,
    b: &TensorType,
    transpose_a: bool,
    transpose_b: bool,
    out_dtype: Option<DType>,
) -> Result<TensorType, String> {
    if !a.dtype.is_float() || a.dtype != b.dtype {
        return Err(format!(
            "operands must be floats of one dtype, got {} and {}",
            a.dtype, b.dtype
        ));
    }
    let dtype = out_dtype.unwrap_or(a.dtype);
    if !dtype.is_float() {
        return Err(format!(
            "out_dtype must be a float (f32, f16, bf16), got {dtype}"
        ));
    }
    let dims = matmul_dims(a, b, transpose_a, transpose_b)?;
    let mut shape = dims.batch;
    shape.extend([dims.m, dims.n]);
    Ok(TensorType::new(shape, dtype))
}
