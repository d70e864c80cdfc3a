//! Index expressions over loop variables, compiled for evaluation: a lane
//! step evaluates a few (its loads' and store's offsets, guards, whether
//! it is a reduction's first visit), and walking their trees cost a 64 x
//! 64 softmax a fifth of its instructions.

use tilefuse_sched::ir::{Index, Var};

/// An index expression over loop variables, with its affine form
/// `constant + Σ coefficient × env[variable]` where it has one (no
/// quotient or remainder), which evaluates without walking the tree.
#[derive(Clone, Debug)]
pub(super) struct LoopIndex {
    index: Index,
    affine: Option<Affine>,
}

/// `constant + Σ coefficient × env[variable]`.
#[derive(Clone, Debug)]
struct Affine {
    constant: i64,
    terms: Box<[(usize, i64)]>,
}

impl LoopIndex {
    pub(super) fn new(index: Index) -> LoopIndex {
        let affine = affine_form(&index);
        LoopIndex { index, affine }
    }

    /// The expression, for analyses.
    pub(super) fn index(&self) -> &Index {
        &self.index
    }

    /// Its value with the loop variables at `env`.
    #[inline]
    pub(super) fn eval(&self, env: &[i64]) -> i64 {
        match &self.affine {
            Some(a) => (a.terms.iter()).fold(a.constant, |sum, &(v, c)| sum + c * env[v]),
            None => self.index.eval(&|v| loop_value(env, v)),
        }
    }
}

/// A loop variable's value in `env`.
pub(super) fn loop_value(env: &[i64], v: Var) -> i64 {
    match v {
        Var::Loop(l) => env[l.0 as usize],
        Var::Iter(_) => unreachable!("iterators are resolved before loop variables"),
    }
}

/// The constant and the coefficient of each loop variable, if `index` is
/// affine in loop variables.
fn affine_form(index: &Index) -> Option<Affine> {
    let (constant, terms) = index.affine()?;
    let terms = (terms.into_iter())
        .map(|(v, c)| match v {
            Var::Loop(l) => Some((l.0 as usize, c)),
            Var::Iter(_) => None,
        })
        .collect::<Option<_>>()?;
    Some(Affine { constant, terms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilefuse_sched::ir::LoopId;

    fn var(l: u32) -> Index {
        Index::var(Var::Loop(LoopId(l)))
    }

    #[test]
    fn affine_and_other_expressions_evaluate_as_their_trees() {
        let env = [3, 5, 7];
        let cases = [
            ((var(0) + var(1) * 4 + Index::Const(2)) * 64 + var(2), true),
            (var(0) * 3 + var(0) * 2 + Index::Const(9), true),
            (Index::Const(11), true),
            ((var(0) * 8 + var(1)) / 4 + var(2) % 3, false),
        ];
        for (index, affine) in cases {
            let compiled = LoopIndex::new(index.clone());
            assert_eq!(compiled.affine.is_some(), affine, "{index:?}");
            let want = index.eval(&|v| loop_value(&env, v));
            assert_eq!(compiled.eval(&env), want, "{index:?}");
        }
    }
}
