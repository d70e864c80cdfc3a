//! Integer index expressions: loop-variable bindings of block iterators and
//! buffer indices. Kept simplified as they are built, so printed schedules
//! and generated WGSL stay readable.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::terms::Terms;

/// A loop's id in the kernel's loop arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LoopId(pub u32);

/// A buffer of a kernel (an index into `Kernel::buffers`), what loads and
/// stores address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BufferId(pub u32);

/// A variable of an index expression: a loop variable (in bindings) or a
/// block iterator (in block bodies, by position).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    Loop(LoopId),
    Iter(u32),
}

/// `floor`-semantics integer expressions over non-negative variables.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Index {
    Const(i64),
    Var(Var),
    Add(Box<Index>, Box<Index>),
    Mul(Box<Index>, i64),
    Div(Box<Index>, i64),
    Mod(Box<Index>, i64),
}

impl Index {
    pub fn var(v: Var) -> Index {
        Index::Var(v)
    }

    fn sum(a: Index, b: Index) -> Index {
        match (a, b) {
            (Index::Const(x), Index::Const(y)) => Index::Const(x + y),
            (Index::Const(0), e) | (e, Index::Const(0)) => e,
            (a, b) => match Index::recombine(&a, &b).or_else(|| Index::recombine(&b, &a)) {
                Some(e) => e,
                None => Index::Add(Box::new(a), Box::new(b)),
            },
        }
    }

    /// `x / c * c + x % c = x` and `x / c % b * c + x % c = x % (b * c)`:
    /// a fused loop split back into dimensions and flattened again (a
    /// buffer offset) is the fused loop, which keeps vector accesses
    /// recognizable.
    fn recombine(high: &Index, low: &Index) -> Option<Index> {
        let (Index::Mul(q, c), Index::Mod(x, m)) = (high, low) else {
            return None;
        };
        if c != m {
            return None;
        }
        match &**q {
            Index::Div(y, d) if d == c && y == x => Some((**x).clone()),
            Index::Mod(inner, b) => match &**inner {
                Index::Div(y, d) if d == c && y == x => {
                    Some(Index::remainder((**x).clone(), b * c))
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn scaled(a: Index, c: i64) -> Index {
        match (a, c) {
            (_, 0) => Index::Const(0),
            (a, 1) => a,
            (Index::Const(x), c) => Index::Const(x * c),
            (Index::Mul(e, d), c) => Index::Mul(e, d * c),
            (a, c) => Index::Mul(Box::new(a), c),
        }
    }

    /// `a / c`. A divisor of 0 comes only from a dimension of extent 0
    /// (fused, reshaped or split), whose iterations never run: the index is
    /// then 0, which keeps the algebra defined.
    fn quotient(a: Index, c: i64) -> Index {
        match (a, c) {
            (_, 0) => Index::Const(0),
            (a, 1) => a,
            (Index::Const(x), c) => Index::Const(x.div_euclid(c)),
            (Index::Div(x, d), c) => Index::Div(x, d * c),
            (a, c) => Index::Div(Box::new(a), c),
        }
    }

    /// `a % c`; 0 for a divisor of 0, as in [`Index::quotient`].
    fn remainder(a: Index, c: i64) -> Index {
        match (a, c) {
            (_, 0 | 1) => Index::Const(0),
            (Index::Const(x), c) => Index::Const(x.rem_euclid(c)),
            (a, c) => Index::Mod(Box::new(a), c),
        }
    }

    /// Replaces variables for which `f` gives an expression.
    pub fn subst(&self, f: &impl Fn(Var) -> Option<Index>) -> Index {
        match self {
            Index::Const(c) => Index::Const(*c),
            Index::Var(v) => f(*v).unwrap_or(Index::Var(*v)),
            Index::Add(a, b) => a.subst(f) + b.subst(f),
            Index::Mul(a, c) => a.subst(f) * *c,
            Index::Div(a, c) => a.subst(f) / *c,
            Index::Mod(a, c) => a.subst(f) % *c,
        }
    }

    pub fn eval(&self, env: &impl Fn(Var) -> i64) -> i64 {
        match self {
            Index::Const(c) => *c,
            Index::Var(v) => env(*v),
            Index::Add(a, b) => a.eval(env) + b.eval(env),
            Index::Mul(a, c) => a.eval(env) * c,
            Index::Div(a, c) => a.eval(env).div_euclid(*c),
            Index::Mod(a, c) => a.eval(env).rem_euclid(*c),
        }
    }

    /// Inclusive bounds over variables in the given inclusive ranges.
    pub fn bounds(&self, range: &impl Fn(Var) -> (i64, i64)) -> (i64, i64) {
        match self {
            Index::Const(c) => (*c, *c),
            Index::Var(v) => range(*v),
            Index::Add(a, b) => {
                let ((al, ah), (bl, bh)) = (a.bounds(range), b.bounds(range));
                (al + bl, ah + bh)
            }
            Index::Mul(a, c) => {
                let (l, h) = a.bounds(range);
                if *c >= 0 {
                    (l * c, h * c)
                } else {
                    (h * c, l * c)
                }
            }
            Index::Div(a, c) => {
                let (l, h) = a.bounds(range);
                (l.div_euclid(*c), h.div_euclid(*c))
            }
            Index::Mod(a, c) => {
                let (l, h) = a.bounds(range);
                if l >= 0 && h < *c { (l, h) } else { (0, c - 1) }
            }
        }
    }

    /// Every variable the expression mentions.
    pub fn vars(&self, out: &mut Vec<Var>) {
        match self {
            Index::Const(_) => {}
            Index::Var(v) => {
                if !out.contains(v) {
                    out.push(*v);
                }
            }
            Index::Add(a, b) => {
                a.vars(out);
                b.vars(out);
            }
            Index::Mul(a, _) | Index::Div(a, _) | Index::Mod(a, _) => a.vars(out),
        }
    }

    pub fn mentions(&self, v: Var) -> bool {
        let mut vars = Vec::new();
        self.vars(&mut vars);
        vars.contains(&v)
    }

    /// `(coefficient, rest)` when the expression is `coefficient * v + rest`
    /// with `rest` free of `v`; used to vectorize innermost loops.
    pub fn linear_in(&self, v: Var) -> Option<(i64, Index)> {
        if !self.mentions(v) {
            return Some((0, self.clone()));
        }
        match self {
            Index::Var(w) if *w == v => Some((1, Index::Const(0))),
            Index::Add(a, b) => {
                let (ca, ra) = a.linear_in(v)?;
                let (cb, rb) = b.linear_in(v)?;
                Some((ca + cb, ra + rb))
            }
            Index::Mul(a, c) => {
                let (ca, ra) = a.linear_in(v)?;
                Some((ca * c, ra * *c))
            }
            _ => None,
        }
    }

    /// The expression as a list of terms whose sum it is (products
    /// distributed over sums; quotients and remainders are single terms).
    pub fn sum_terms(&self) -> Vec<Index> {
        match self {
            Index::Add(a, b) => {
                let mut out = a.sum_terms();
                out.extend(b.sum_terms());
                out
            }
            Index::Mul(a, c) => a.sum_terms().into_iter().map(|t| t * *c).collect(),
            atom => vec![atom.clone()],
        }
    }

    /// The expression as a sum of distinct terms with their coefficients
    /// collected (so `(a + b + c) - (a + b)` becomes `c`); quotients and
    /// remainders are simplified inside and kept as terms, but for a
    /// quotient and remainder of one division that make up the dividend
    /// (`x / d * d * s + x % d * s` is `x * s`), wherever the two stand in
    /// the sum: a tile copied row by row out of a fused loop and flattened
    /// again reads as that loop.
    pub fn simplified(&self) -> Index {
        let sum = Terms::of(self);
        (sum.terms.into_iter()).fold(Index::Const(sum.constant), |acc, (atom, c)| acc + atom * c)
    }

    /// The constant and each variable's coefficient, when the simplified
    /// expression is affine (no quotient or remainder is left).
    pub fn affine(&self) -> Option<(i64, Vec<(Var, i64)>)> {
        let (constant, terms) = self.linear_terms();
        let terms = (terms.into_iter())
            .map(|(atom, c)| match atom {
                Index::Var(v) => Some((v, c)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some((constant, terms))
    }

    /// The expression as `constant + Σ coefficient × atom`, like atoms
    /// collected (those of [`Index::simplified`]): each atom a variable, a
    /// quotient or a remainder.
    pub fn linear_terms(&self) -> (i64, Vec<(Index, i64)>) {
        let sum = Terms::of(self);
        (sum.constant, sum.terms)
    }

    /// Whether the two expressions are equal as sums of terms (products
    /// distributed, like terms collected; divisions and remainders compared
    /// as written).
    pub fn same_sum(&self, other: &Index) -> bool {
        self.terms() == other.terms()
    }

    /// Coefficient per atom (a variable, quotient or remainder) and the
    /// constant (under the key `Const(1)`), zero coefficients dropped.
    fn terms(&self) -> std::collections::BTreeMap<String, i64> {
        fn walk(ix: &Index, scale: i64, out: &mut std::collections::BTreeMap<String, i64>) {
            match ix {
                Index::Const(c) => *out.entry("1".into()).or_default() += c * scale,
                Index::Add(a, b) => {
                    walk(a, scale, out);
                    walk(b, scale, out);
                }
                Index::Mul(a, c) => walk(a, scale * c, out),
                atom => *out.entry(format!("{atom:?}")).or_default() += scale,
            }
        }
        let mut out = std::collections::BTreeMap::new();
        walk(self, 1, &mut out);
        out.retain(|_, c| *c != 0);
        out
    }

    /// Prints with variables named by `name`.
    pub fn display<'a>(&'a self, name: &'a dyn Fn(Var) -> String) -> impl fmt::Display + 'a {
        IndexDisplay { index: self, name }
    }
}

/// Index arithmetic simplifies as it builds: constants fold, `x * 1`,
/// `x / 1` and `x + 0` vanish, `x % 1` is 0.
impl std::ops::Add for Index {
    type Output = Index;
    fn add(self, rhs: Index) -> Index {
        Index::sum(self, rhs)
    }
}

impl std::ops::Mul<i64> for Index {
    type Output = Index;
    fn mul(self, rhs: i64) -> Index {
        Index::scaled(self, rhs)
    }
}

impl std::ops::Div<i64> for Index {
    type Output = Index;
    fn div(self, rhs: i64) -> Index {
        Index::quotient(self, rhs)
    }
}

impl std::ops::Rem<i64> for Index {
    type Output = Index;
    fn rem(self, rhs: i64) -> Index {
        Index::remainder(self, rhs)
    }
}

/// The row-major element offset of `indices` into a buffer of `shape`.
pub fn flat_offset(indices: &[Index], shape: &[u64]) -> Index {
    let mut offset = Index::Const(0);
    let mut stride = 1i64;
    for (idx, &extent) in indices.iter().zip(shape).rev() {
        offset = idx.clone() * stride + offset;
        stride *= extent as i64;
    }
    offset
}

struct IndexDisplay<'a> {
    index: &'a Index,
    name: &'a dyn Fn(Var) -> String,
}

impl<'a> IndexDisplay<'a> {
    fn sub(&self, index: &'a Index) -> IndexDisplay<'a> {
        IndexDisplay {
            index,
            name: self.name,
        }
    }
}

impl fmt::Display for IndexDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sub = |i| self.sub(i);
        match self.index {
            Index::Const(c) => write!(f, "{c}"),
            Index::Var(v) => write!(f, "{}", (self.name)(*v)),
            Index::Add(a, b) => write!(f, "{} + {}", sub(a), sub(b)),
            Index::Mul(a, c) => match **a {
                Index::Add(..) => write!(f, "({}) * {c}", sub(a)),
                _ => write!(f, "{} * {c}", sub(a)),
            },
            Index::Div(a, c) => write!(f, "({}) / {c}", sub(a)),
            Index::Mod(a, c) => write!(f, "({}) % {c}", sub(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::LoopId;

    /// `(w * 128 + x / 256) * 256 + (j * 256 + x % 256)`: a tile of a
    /// fused loop `x` flattened again, with another term between the
    /// quotient and the remainder, is `w * 32768 + j * 256 + x`; a pair
    /// of another divisor or scale stays as it is.
    #[test]
    fn a_quotient_and_remainder_anywhere_in_a_sum_make_up_their_dividend() {
        let v = |l| Index::var(Var::Loop(LoopId(l)));
        let x = v(1) * 8 + v(2) * 4 + v(3);
        let offset = (v(0) * 128 + x.clone() / 256) * 256 + (v(4) * 256 + x.clone() % 256);
        let want = v(0) * 32768 + v(4) * 256 + x.clone();
        assert!(
            offset.simplified().same_sum(&want),
            "{:?}",
            offset.simplified()
        );
        let scaled = (x.clone() / 4) * 12 + (x.clone() % 4) * 3;
        assert!(scaled.simplified().same_sum(&(x.clone() * 3)));
        let other = (x.clone() / 4) * 8 + x % 4;
        assert!(other.simplified().linear_in(Var::Loop(LoopId(3))).is_none());
    }

    /// Three axes of 8 x 16 x 128 fused into `f` and flattened again into
    /// rows of 64 (`f / 2048`, `f / 128 % 16`, `f % 128`) fold pair by
    /// pair into `f * 64`; the same indices permuted (the middle axes
    /// swapped) are no multiple of `f` and stay.
    #[test]
    fn indices_of_three_fused_axes_fold_into_the_fused_loop() {
        let f = Index::var(Var::Loop(LoopId(0)));
        let (b, h, s) = (f.clone() / 2048, f.clone() / 128 % 16, f.clone() % 128);
        let rows = b.clone() * 131072 + h.clone() * 8192 + s.clone() * 64;
        assert!(
            rows.simplified().same_sum(&(f * 64)),
            "{:?}",
            rows.simplified()
        );
        let swapped = b * 131072 + h * 64 + s * 1024;
        assert!(
            swapped
                .simplified()
                .linear_in(Var::Loop(LoopId(0)))
                .is_none()
        );
    }
}
