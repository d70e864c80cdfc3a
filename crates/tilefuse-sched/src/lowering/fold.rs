//! Constant folding: a subexpression of literals becomes its value,
//! computed with the reference evaluator's semantics, and a load of a
//! buffer that holds one literal everywhere (an empty reduction's result, a
//! copy of one) becomes that literal. WGSL evaluates literal arithmetic at
//! shader creation and rejects what leaves the finite range (`log(0.0)`); a
//! GPU compiler that finds a private buffer's constant on its own folds the
//! arithmetic around it as if values were finite (lavapipe gave
//! `3 / (a @ b)` with k = 0 as 0, not inf). As a literal, codegen spells
//! out the IEEE result as it does for every literal zero.

use std::collections::HashMap;

use tilefuse_ir::{
    BinaryOp, DType, ReduceOp, Scalar, binary_scalar, reduce_identity, unary_scalar,
};

use super::{LowerError, Lowered};
use crate::ir::{Block, BlockId, BufferId, Expr, Kernel};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let blocks = l.kernel.blocks_in_order();
    let mut known = HashMap::new();
    // A reduction keeps its loads: reading the partials of an rfactor from
    // workgroup memory is what makes its lanes combine there, not by
    // subgroup shuffles (`cross_invocation`).
    let none = HashMap::new();
    loop {
        for &b in &blocks {
            let block = l.kernel.block_mut(b);
            let substituted = if block.reduce.is_some() {
                &none
            } else {
                &known
            };
            block.value = folded(&block.value, substituted);
        }
        let found = known_buffers(&l.kernel, &blocks);
        if found.len() == known.len() {
            return Ok(());
        }
        known = found;
    }
}

/// `e` with loads of `known` buffers read as their literal and every
/// subexpression of literals evaluated.
fn folded(e: &Expr, known: &HashMap<BufferId, Literal>) -> Expr {
    let f = |x: &Expr| folded(x, known);
    let out = match e {
        Expr::Const { .. } => return e.clone(),
        Expr::Load { buffer, .. } => match known.get(buffer) {
            Some(&(value, dtype)) => return Expr::Const { value, dtype },
            None => return e.clone(),
        },
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(f(a))),
        Expr::Binary(op, a, b) => Expr::Binary(*op, Box::new(f(a)), Box::new(f(b))),
        Expr::Select(c, a, b) => Expr::Select(Box::new(f(c)), Box::new(f(a)), Box::new(f(b))),
        Expr::Cast(dtype, a) => Expr::Cast(*dtype, Box::new(f(a))),
    };
    evaluated(&out).unwrap_or(out)
}

/// The value of an op whose operands are literals.
fn evaluated(e: &Expr) -> Option<Expr> {
    let (value, dtype) = match e {
        Expr::Unary(op, a) => {
            let (x, dtype) = scalar(a)?;
            (unary_scalar(*op, x), dtype)
        }
        // A comparison with a NaN literal is known whatever the other side
        // (the driver would find it too, through the NaN test of
        // `shaders/math.wgsl`, and fold the arithmetic around it as if
        // values were finite: `(x == NaN) * inf` gave 0, not NaN).
        Expr::Binary(op, a, b) if op.is_comparison() && (is_nan(a) || is_nan(b)) => {
            (Scalar::B(*op == BinaryOp::Ne), DType::Bool)
        }
        // So is `x < x` and `x > x` (False, NaN or not): lavapipe found it
        // and gave `(x < x) * inf` as 0.
        Expr::Binary(BinaryOp::Lt | BinaryOp::Gt, a, b) if a == b => {
            (Scalar::B(false), DType::Bool)
        }
        Expr::Binary(op, a, b) => {
            let ((x, dtype), (y, _)) = (scalar(a)?, scalar(b)?);
            let dtype = if op.is_comparison() {
                DType::Bool
            } else {
                dtype
            };
            (binary_scalar(*op, x, y), dtype)
        }
        // A literal condition picks its branch (and leaves no literal bool
        // where a vec4 select expects a vector).
        Expr::Select(c, a, b) => {
            return Some(if scalar(c)?.0.as_bool() { a } else { b }.as_ref().clone());
        }
        Expr::Cast(dtype, a) => (scalar(a)?.0, *dtype),
        Expr::Const { .. } | Expr::Load { .. } => return None,
    };
    Some(Expr::Const {
        value: value.to(dtype).as_f64(),
        dtype,
    })
}

fn is_nan(e: &Expr) -> bool {
    matches!(e, Expr::Const { value, dtype: DType::F32 } if value.is_nan())
}

fn scalar(e: &Expr) -> Option<(Scalar, DType)> {
    match e {
        Expr::Const { value, dtype } => Some((Scalar::F(*value).to(*dtype), *dtype)),
        _ => None,
    }
}

/// A literal: its value, as converted to its dtype, and the dtype.
type Literal = (f64, DType);

/// The buffers every write of which stores one literal (inputs have no
/// writers).
fn known_buffers(k: &Kernel, blocks: &[BlockId]) -> HashMap<BufferId, Literal> {
    let mut writers: HashMap<BufferId, Vec<&Block>> = HashMap::new();
    for &b in blocks {
        let block = k.block(b);
        writers.entry(block.buffer).or_default().push(block);
    }
    writers
        .into_iter()
        .filter_map(|(id, w)| Some((id, one_value(&w)?)))
        .collect()
}

/// The one literal that `writers` leave in their buffer, if they agree on
/// one. A reduction's init (a plain write of its identity) is overwritten
/// by its terms, of which there is at least one per element (an empty
/// domain is lowered as one term).
fn one_value(writers: &[&Block]) -> Option<Literal> {
    let reductions: Vec<ReduceOp> = writers.iter().filter_map(|b| b.reduce).collect();
    let is_init = |b: &Block, value: Literal| {
        b.reduce.is_none()
            && reductions
                .iter()
                .any(|&op| same(value, literal(reduce_identity(op, value.1), value.1)))
    };
    let mut result: Option<Literal> = None;
    for b in writers {
        let Expr::Const { value, dtype } = b.value else {
            return None;
        };
        let value = (value, dtype);
        if is_init(b, value) {
            continue;
        }
        let stored = match b.reduce {
            None | Some(ReduceOp::Max | ReduceOp::Min) => value,
            // A sum of +0 terms from -0 is +0; of anything else, it depends
            // on how many terms there are.
            Some(ReduceOp::Sum | ReduceOp::Mean) if same(value, (0.0, value.1)) => value,
            Some(_) => return None,
        };
        match result {
            Some(r) if !same(r, stored) => return None,
            _ => result = Some(stored),
        }
    }
    result
}

fn literal(s: Scalar, dtype: DType) -> Literal {
    (s.as_f64(), dtype)
}

/// The same literal, bit for bit (NaN equals NaN, -0 does not equal +0).
fn same(a: Literal, b: Literal) -> bool {
    a.1 == b.1 && a.0.to_bits() == b.0.to_bits()
}
