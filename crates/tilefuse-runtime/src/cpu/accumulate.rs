//! Reducing into a buffer element: the first visit of an element stores,
//! later ones combine with what is there.
//!
//! Unsafe code: only the element accesses of `RawBuf`, under the contract
//! in `memory.rs`: a verified schedule keeps concurrent writes disjoint
//! and ordered before their reads.
#![allow(unsafe_code)]

use tilefuse_ir::{BinaryOp, DType, ReduceOp, Scalar, binary_scalar, reduce_identity};

use super::memory::RawBuf;

/// `acc` combined with `v` by reduction `op`.
pub(super) fn combine(op: ReduceOp, acc: Scalar, v: Scalar) -> Scalar {
    let f = match op {
        ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Min => BinaryOp::Min,
    };
    binary_scalar(f, acc, v)
}

/// Combines `v` into element `off` of `buf`, or stores it on the
/// element's `first` visit.
pub(super) fn accumulate(
    buf: &RawBuf,
    off: usize,
    op: ReduceOp,
    dtype: DType,
    first: bool,
    v: Scalar,
) {
    let acc = if first {
        reduce_identity(op, dtype)
    } else {
        unsafe { buf.read(off) }
    };
    unsafe { buf.write(off, combine(op, acc, v)) };
}

/// Combines a folded chunk of lanes into element `off` (or stores it, on
/// the element's first visit).
pub(super) fn fold_into(
    buf: &RawBuf,
    off: usize,
    op: ReduceOp,
    dtype: DType,
    first: bool,
    folded: f32,
) {
    accumulate(buf, off, op, dtype, first, Scalar::F(f64::from(folded)));
}
