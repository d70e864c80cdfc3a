//! A block's value compiled into an expression tree over loads, shared
//! by the interpreter and the tapes.

use tilefuse_ir::{DType, Scalar};
use tilefuse_sched::ir::Index;

/// A load: a buffer and the flat offset, over block iterators, plus (in
/// lane steps) the offset as `coef * lane + rest` over loop variables.
#[derive(Debug)]
pub(super) struct Access {
    pub buffer: usize,
    pub offset: Index,
    pub linear: Option<(i64, Index)>,
}

#[derive(Debug)]
pub(super) enum Value {
    Const(Scalar, DType),
    Load(Access),
    Unary(tilefuse_ir::UnaryOp, Box<Value>),
    Binary(tilefuse_ir::BinaryOp, Box<Value>, Box<Value>),
    Select(Box<Value>, Box<Value>, Box<Value>),
    Cast(DType, Box<Value>),
}
