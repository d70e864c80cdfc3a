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

impl Expr {
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
