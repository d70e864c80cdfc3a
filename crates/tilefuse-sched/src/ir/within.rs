//! Index expressions simplified within their variables' ranges: a fused
//! loop's quotients and remainders, once split, tiled or spread over
//! workgroups, read as the linear accesses they are.

use super::index::{Index, Var};
use super::terms::Terms;

impl Index {
    /// The expression with each quotient that cannot change over the
    /// variables' ranges (`i / 8` for `i` in `0..8`) made a constant and
    /// each remainder whose dividend stays within `0..divisor` (`i % 8`)
    /// made its dividend, so that a fused loop's variable reads as linear.
    pub fn within(&self, range: &impl Fn(Var) -> (i64, i64)) -> Index {
        match self {
            Index::Const(_) | Index::Var(_) => self.clone(),
            Index::Add(a, b) => a.within(range) + b.within(range),
            Index::Mul(a, c) => a.within(range) * *c,
            Index::Div(a, c) => {
                let (whole, a) = a.within(range).multiples_of(*c);
                whole
                    + match a.bounds(range) {
                        (l, h) if l.div_euclid(*c) == h.div_euclid(*c) => {
                            Index::Const(l.div_euclid(*c))
                        }
                        _ => match a.pinned(range).within(range).peeled(*c, range) {
                            Ok(Peeled { high, g, .. }) => high / (c / g),
                            Err(a) => a / *c,
                        },
                    }
            }
            Index::Mod(a, c) => {
                let (_, a) = a.within(range).multiples_of(*c);
                match a.bounds(range) {
                    (l, h) if l >= 0 && h < *c => a,
                    _ => match a.pinned(range).within(range).peeled(*c, range) {
                        Ok(Peeled { high, g, low }) => high % (c / g) * g + low,
                        Err(a) => a % *c,
                    },
                }
            }
        }
    }

    /// The expression as `c * whole + rest`, `whole` the terms (and part
    /// of the constant) whose coefficients `c` divides: `(w * 392 + f) /
    /// 56` is `w * 7 + f / 56` and `(w * 392 + f) % 56` is `f % 56`
    /// whatever the ranges (a fused loop split over workgroups, its axes
    /// taken apart again). The expression itself where there are none.
    fn multiples_of(self, c: i64) -> (Index, Index) {
        if c <= 1 {
            return (Index::Const(0), self);
        }
        let sum = Terms::of(&self);
        let whole_constant = sum.constant.div_euclid(c);
        let divides = |k: &i64| k % c == 0;
        if whole_constant == 0 && !sum.terms.iter().any(|(_, k)| divides(k)) {
            return (Index::Const(0), self);
        }
        let (whole, rest): (Vec<_>, Vec<_>) = sum.terms.into_iter().partition(|(_, k)| divides(k));
        let whole = (whole.into_iter()).fold(Index::Const(whole_constant), |acc, (atom, k)| {
            acc + atom * (k / c)
        });
        let rest = (rest.into_iter()).fold(
            Index::Const(sum.constant.rem_euclid(c)),
            |acc, (atom, k)| acc + atom * k,
        );
        (whole, rest)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::LoopId;

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

    /// An NHWC (N, H, W) loop of 16 x 28 x 28 split over workgroups in
    /// runs of 49, `g = w * 49 + f`, its axes bound as `w / 16`, `g / 28 %
    /// 28` and `g % 28`: the flattened offset is linear in both loops. With
    /// runs of 392 (a multiple of W), the axes bind without `g` at all.
    #[test]
    fn an_nhwc_loop_split_over_workgroups_flattens_linearly() {
        let (w, f) = (Var::Loop(LoopId(0)), Var::Loop(LoopId(1)));
        let range = |v| if v == w { (0, 255) } else { (0, 48) };
        let g = Index::var(w) * 49 + Index::var(f);
        let offset = Index::var(w) / 16 * 784 + g.clone() / 28 % 28 * 28 + g % 28;
        let flat = offset
            .within(&range)
            .simplified()
            .within(&range)
            .simplified();
        assert_eq!(flat.linear_in(f).unwrap().0, 1);
        assert_eq!(flat.linear_in(w).unwrap().0, 49);
        for (i, j, _) in grid(256, 49, 1) {
            let env = |v: Var| if v == w { i } else { j };
            assert_eq!(flat.eval(&env), offset.eval(&env), "{i} {j}");
        }
        let g = Index::var(w) * 392 + Index::var(f);
        let range = |v| if v == w { (0, 255) } else { (0, 391) };
        let quotient = (g.clone() / 56).within(&range);
        assert_eq!(quotient, Index::var(w) * 7 + Index::var(f) / 56);
        assert_eq!((g % 56).within(&range), Index::var(f) % 56);
    }

    fn grid(a: i64, b: i64, c: i64) -> impl Iterator<Item = (i64, i64, i64)> {
        (0..a).flat_map(move |i| (0..b).flat_map(move |j| (0..c).map(move |l| (i, j, l))))
    }
}
