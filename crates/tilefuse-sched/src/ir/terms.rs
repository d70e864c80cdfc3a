//! The sum an index expression simplifies to ([`Index::simplified`]):
//! like atoms collected, and quotients and remainders of one division
//! folded back into their dividend.

use super::Index;

/// A sum being collected by [`Index::simplified`]: atoms (variables,
/// quotients, remainders) with their coefficients, and a constant.
#[derive(Default)]
pub(super) struct Terms {
    pub(super) terms: Vec<(Index, i64)>,
    pub(super) constant: i64,
}

impl Terms {
    /// The terms of `x` simplified ([`Index::simplified`]), zero
    /// coefficients dropped.
    pub(super) fn of(x: &Index) -> Terms {
        let mut sum = Terms::default();
        for term in x.sum_terms() {
            sum.add(term, 1);
        }
        while let Some((x, s)) = (sum.take_divided_pair()).or_else(|| sum.take_remainder_pair()) {
            for term in x.sum_terms() {
                sum.add(term, s);
            }
        }
        sum.terms.retain(|(_, c)| *c != 0);
        sum
    }

    /// Adds `term * scale`.
    fn add(&mut self, term: Index, scale: i64) {
        let (atom, coef) = match term {
            Index::Mul(a, c) => (*a, c * scale),
            other => (other, scale),
        };
        let atom = match atom {
            Index::Const(c) => return self.constant += c * coef,
            Index::Div(x, d) => x.simplified() / d,
            Index::Mod(x, d) => x.simplified() % d,
            other => other,
        };
        match self.terms.iter_mut().find(|(a, _)| *a == atom) {
            Some((_, c)) => *c += coef,
            None => self.terms.push((atom, coef)),
        }
    }

    /// Removes a pair `y / m` (coefficient `s * m`) and `y % m`
    /// (coefficient `s`), returning `y` and `s`. The quotient may stand as
    /// `x / (m * b)` for `y = x / b`: three or more fused loops' indices
    /// (`x / 2048`, `x / 128 % 16`, `x % 128`) fold pair by pair.
    fn take_divided_pair(&mut self) -> Option<(Index, i64)> {
        let (i, j) = (0..self.terms.len()).find_map(|i| {
            let (Index::Div(x, d), q) = &self.terms[i] else {
                return None;
            };
            let pairs = |y: &Index, m: i64| match y {
                y if y == &**x => m == *d,
                Index::Div(inner, b) => inner == x && m * b == *d,
                _ => false,
            };
            let j = self.terms.iter().position(|(a, s)| match a {
                Index::Mod(y, m) => pairs(y, *m) && *s != 0 && *q == s * m,
                _ => false,
            })?;
            Some((i, j))
        })?;
        let s = self.terms[j].1;
        let (Index::Mod(x, _), _) = self.terms.remove(j) else {
            unreachable!("found as a remainder")
        };
        self.terms.remove(if i > j { i - 1 } else { i });
        Some((*x, s))
    }

    /// Removes a pair `x / d % b` (coefficient `s * d`) and `x % d`
    /// (coefficient `s`), returning `x % (b * d)` and `s`: two inner axes
    /// of a fused loop whose outer axis binds apart (split over
    /// workgroups, `w / 16` rather than `x / 784`) still fold together.
    fn take_remainder_pair(&mut self) -> Option<(Index, i64)> {
        let (i, j, x, bd) = (0..self.terms.len()).find_map(|i| {
            let (Index::Mod(y, b), q) = &self.terms[i] else {
                return None;
            };
            let Index::Div(x, d) = &**y else { return None };
            let j = self.terms.iter().position(|(a, s)| {
                matches!(a, Index::Mod(z, m) if z == x && m == d) && *s != 0 && *q == s * d
            })?;
            Some((i, j, (**x).clone(), b * d))
        })?;
        let s = self.terms[j].1;
        self.terms.remove(i.max(j));
        self.terms.remove(i.min(j));
        Some((x % bd, s))
    }
}
