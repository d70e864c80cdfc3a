//! Value expressions of block bodies.

use tilefuse_ir::{BinaryOp, DType, UnaryOp};

use super::index::{BufferId, Index, Var};

/// A scalar expression evaluated once per block instance.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant, already converted to `dtype`.
    Const {
        value: f64,
        dtype: DType,
    },
    Load {
        buffer: BufferId,
        indices: Vec<Index>,
    },
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(DType, Box<Expr>),
}

/// The deepest a block's expression may nest. Every pass over a kernel
/// (lowering, code generation, the CPU device's tapes, even dropping it)
/// walks expressions recursively, and a chain of 10,000 inlined ops
/// overflowed the stack; inlining stops short of this depth and keeps the
/// intermediate in a buffer instead (`Schedule::compute_inline_all`), or
/// refuses (`Schedule::compute_inline`).
pub const MAX_EXPR_DEPTH: usize = 256;

impl Expr {
    /// How deeply the expression nests: a constant or a load is 1, and
    /// `load_depth` may count a load as more (the depth of what would be
    /// inlined there).
    pub fn depth_with(&self, load_depth: &impl Fn(BufferId) -> usize) -> usize {
        let depth = |e: &Expr| e.depth_with(load_depth);
        match self {
            Expr::Const { .. } => 1,
            Expr::Load { buffer, .. } => load_depth(*buffer),
            Expr::Unary(_, a) | Expr::Cast(_, a) => 1 + depth(a),
            Expr::Binary(_, a, b) => 1 + depth(a).max(depth(b)),
            Expr::Select(c, a, b) => 1 + depth(c).max(depth(a)).max(depth(b)),
        }
    }

    pub fn depth(&self) -> usize {
        self.depth_with(&|_| 1)
    }

    pub fn dtype(&self, buffer_dtype: &impl Fn(BufferId) -> DType) -> DType {
        match self {
            Expr::Const { dtype, .. } | Expr::Cast(dtype, _) => *dtype,
            Expr::Load { buffer, .. } => buffer_dtype(*buffer),
            Expr::Unary(_, a) => a.dtype(buffer_dtype),
            Expr::Binary(op, _, _) if op.is_comparison() => DType::Bool,
            Expr::Binary(_, a, _) => a.dtype(buffer_dtype),
            Expr::Select(_, a, _) => a.dtype(buffer_dtype),
        }
    }

    /// Visits every load.
    pub fn loads<'a>(&'a self, out: &mut Vec<(BufferId, &'a [Index])>) {
        match self {
            Expr::Const { .. } => {}
            Expr::Load { buffer, indices } => out.push((*buffer, indices)),
            Expr::Unary(_, a) | Expr::Cast(_, a) => a.loads(out),
            Expr::Binary(_, a, b) => {
                a.loads(out);
                b.loads(out);
            }
            Expr::Select(c, a, b) => {
                c.loads(out);
                a.loads(out);
                b.loads(out);
            }
        }
    }

    pub fn reads(&self, buffer: BufferId) -> bool {
        self.count_loads(buffer) > 0
    }

    /// How many loads of `buffer` the expression has (a walk, no allocation).
    pub fn count_loads(&self, buffer: BufferId) -> usize {
        match self {
            Expr::Const { .. } => 0,
            Expr::Load { buffer: b, .. } => usize::from(*b == buffer),
            Expr::Unary(_, a) | Expr::Cast(_, a) => a.count_loads(buffer),
            Expr::Binary(_, a, b) => a.count_loads(buffer) + b.count_loads(buffer),
            Expr::Select(c, a, b) => {
                c.count_loads(buffer) + a.count_loads(buffer) + b.count_loads(buffer)
            }
        }
    }

    /// Rewrites every load with `f` (which may return a whole expression).
    pub fn map_loads(&self, f: &mut impl FnMut(BufferId, &[Index]) -> Expr) -> Expr {
        match self {
            Expr::Const { .. } => self.clone(),
            Expr::Load { buffer, indices } => f(*buffer, indices),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(a.map_loads(f))),
            Expr::Cast(d, a) => Expr::Cast(*d, Box::new(a.map_loads(f))),
            Expr::Binary(op, a, b) => {
                Expr::Binary(*op, Box::new(a.map_loads(f)), Box::new(b.map_loads(f)))
            }
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(c.map_loads(f)),
                Box::new(a.map_loads(f)),
                Box::new(b.map_loads(f)),
            ),
        }
    }

    /// Substitutes index variables in every load.
    pub fn subst(&self, f: &impl Fn(Var) -> Option<Index>) -> Expr {
        self.map_loads(&mut |buffer, indices| Expr::Load {
            buffer,
            indices: indices.iter().map(|i| i.subst(f)).collect(),
        })
    }
}
