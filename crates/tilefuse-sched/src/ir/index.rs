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

    /// The expression with each quotient that cannot change over the
    /// variables' ranges (`i / 8` for `i` in `0..8`) made a constant and
    /// each remainder whose dividend stays within `0..divisor` (`i % 8`)
    /// made its dividend, so that a fused loop's variable reads as linear.
    pub fn within(&self, range: &impl Fn(Var) -> (i64, i64)) -> Index {
        match self {
            Index::Const(_) | Index::Var(_) => self.clone(),
            Index::Add(a, b) => a.within(range) + b.within(range),
            Index::Mul(a, c) => a.within(range) * *c,
            Index::Div(a, c) => match a.bounds(range) {
                (l, h) if l.div_euclid(*c) == h.div_euclid(*c) => Index::Const(l.div_euclid(*c)),
                _ => match a.pinned(range).within(range).peeled(*c, range) {
                    Ok(Peeled { high, g, .. }) => high / (c / g),
                    Err(a) => a / *c,
                },
            },
            Index::Mod(a, c) => match a.bounds(range) {
                (l, h) if l >= 0 && h < *c => a.within(range),
                _ => match a.pinned(range).within(range).peeled(*c, range) {
                    Ok(Peeled { high, g, low }) => high % (c / g) * g + low,
                    Err(a) => a % *c,
                },
            },
        }
    }

    /// The expression with each variable whose range is one value (a loop
    /// of one iteration: a split's factor of 1) made that value, so that a
    /// quotient over it (`(w + t) / 128`, `t` in `0..1`) can be taken.
    fn pinned(&self, range: &impl Fn(Var) -> (i64, i64)) -> Index {
        self.subst(&|v| match range(v) {
            (l, h) if l == h => Some(Index::Const(l)),
            _ => None,
        })
    }

    /// The expression as `g * high + low` with `0 <= low < g` over the
    /// ranges, for the largest `g` that divides `c` and some term's
    /// coefficient, `low` mentioning a variable: then `self / c` is
    /// `high / (c / g)` and `self % c` is `high % (c / g) * g + low` (a
    /// fused loop's lanes, `i * 8 + lane`, that stay within a row `c`
    /// long read as linear in the lane). The expression itself otherwise.
    fn peeled(self, c: i64, range: &impl Fn(Var) -> (i64, i64)) -> Result<Peeled, Index> {
        let sum = Terms::of(&self);
        let mut gs: Vec<i64> = (sum.terms.iter()).map(|(_, k)| gcd(*k, c)).collect();
        gs.sort_unstable_by(|a, b| b.cmp(a));
        gs.dedup();
        for g in gs.into_iter().filter(|&g| g > 1) {
            let (high, low): (Vec<_>, Vec<_>) = (sum.terms.iter()).partition(|(_, k)| k % g == 0);
            let constant = Index::Const(sum.constant.rem_euclid(g));
            let low = (low.into_iter()).fold(constant, |acc, (atom, k)| acc + atom.clone() * *k);
            let (l, h) = low.bounds(range);
            if l >= 0 && h < g && !matches!(low, Index::Const(_)) {
                let constant = Index::Const(sum.constant.div_euclid(g));
                let high = (high.into_iter())
                    .fold(constant, |acc, (atom, k)| acc + atom.clone() * (k / g));
                return Ok(Peeled { high, g, low });
            }
        }
        Err(self)
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

/// See [`Index::peeled`].
struct Peeled {
    high: Index,
    g: i64,
    low: Index,
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
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

    #[test]
    fn within_reads_a_fused_variable_as_linear_only_where_its_range_allows() {
        let i = Index::var(Var::Loop(LoopId(0)));
        let fused = (i.clone() / 8) * 64 + (i.clone() % 8) * 8;
        let up_to = |n: i64| move |_| (0, n - 1);
        assert_eq!(fused.within(&up_to(8)).simplified(), (i * 8).simplified());
        assert_eq!(
            fused
                .within(&up_to(8))
                .linear_in(Var::Loop(LoopId(0)))
                .unwrap()
                .0,
            8
        );
        // Past 8 the quotient and remainder change with i: kept.
        assert_eq!(fused.within(&up_to(9)), fused);
        assert_eq!(
            fused.within(&up_to(9)).linear_in(Var::Loop(LoopId(0))),
            None
        );
    }

    /// A workgroup of one row over a fused loop: `(w + t) / 128` with `t`
    /// in `0..1` is `w / 128`, whose start a region over `t` can take; the
    /// `t` outside a quotient stays a variable.
    #[test]
    fn a_loop_of_one_iteration_is_its_value_inside_a_quotient() {
        let (w, t) = (
            Index::var(Var::Loop(LoopId(0))),
            Index::var(Var::Loop(LoopId(1))),
        );
        let range = |v| match v {
            Var::Loop(LoopId(0)) => (0, 4095),
            _ => (0, 0),
        };
        let row = w.clone() + t.clone();
        assert_eq!((row.clone() / 128).within(&range), w.clone() / 128);
        assert_eq!((row.clone() % 128).within(&range), w.clone() % 128);
        assert_eq!(row.within(&range), w + t);
    }

    /// A tile `128` wide copied out of a fused loop `i * 8 + j * 4 + l`:
    /// while the lanes `j * 4 + l` stay below 8 they never cross a row,
    /// so the offset is linear in both; with `j` up to 2 only `l` is.
    /// Peeled or not, the expression keeps its value everywhere.
    #[test]
    fn lanes_within_a_row_are_peeled_out_of_the_row_quotient() {
        let v = |l| Index::var(Var::Loop(LoopId(l)));
        let x = v(0) * 8 + v(1) * 4 + v(2) + Index::Const(3 * 128 + 8);
        let offset = (x.clone() / 128) * 256 + x % 128;
        for (j_max, linear_in_j) in [(1, true), (2, false)] {
            let range = |w: Var| match w {
                Var::Loop(LoopId(0)) => (0, 255),
                Var::Loop(LoopId(1)) => (0, j_max),
                _ => (0, 3),
            };
            let peeled = offset.within(&range).simplified();
            assert_eq!(peeled.linear_in(Var::Loop(LoopId(2))).unwrap().0, 1);
            let in_j = peeled.linear_in(Var::Loop(LoopId(1)));
            assert_eq!(in_j.map(|(c, _)| c), linear_in_j.then_some(4));
            for (i, j, l) in grid(256, j_max + 1, 4) {
                let env = |w: Var| match w {
                    Var::Loop(LoopId(0)) => i,
                    Var::Loop(LoopId(1)) => j,
                    _ => l,
                };
                assert_eq!(peeled.eval(&env), offset.eval(&env), "{i} {j} {l}");
            }
        }
    }

    fn grid(a: i64, b: i64, c: i64) -> impl Iterator<Item = (i64, i64, i64)> {
        (0..a).flat_map(move |i| (0..b).flat_map(move |j| (0..c).map(move |l| (i, j, l))))
    }
}
