//! Index expressions over loop variables, compiled for evaluation: a lane
//! step evaluates a few (its loads' and store's offsets, guards, whether
//! it is a reduction's first visit), and walking their trees cost a 64 x
//! 64 softmax a fifth of its instructions.

use tilefuse_sched::ir::{Index, Var};

/// An index expression over loop variables, compiled to a flat sum of
/// variables and of quotients and remainders of such sums (see [`Form`]),
/// which evaluates without walking the tree: a staged, circular-buffered
/// matmul evaluated its bounds and stage indices (`(i + 1) % 3`) tree by
/// tree, half of its time.
#[derive(Clone, Debug)]
pub(super) struct LoopIndex {
    index: Index,
    form: Option<Form>,
}

/// `constant + Σ coefficient × env[variable] + Σ coefficient × part`, each
/// part a quotient or a remainder of another such sum.
#[derive(Clone, Debug)]
struct Form {
    constant: i64,
    terms: Box<[(usize, i64)]>,
    parts: Box<[Part]>,
}

/// `coef × (inner / divisor)`, or `coef × (inner % divisor)` (rounding
/// down, as `Index::eval`).
#[derive(Clone, Debug)]
struct Part {
    inner: Form,
    divisor: i64,
    remainder: bool,
    coef: i64,
}

impl LoopIndex {
    pub(super) fn new(index: Index) -> LoopIndex {
        let form = Form::of(&index);
        LoopIndex { index, form }
    }

    /// The expression, for analyses.
    pub(super) fn index(&self) -> &Index {
        &self.index
    }

    /// Its value with the loop variables at `env`.
    #[inline]
    pub(super) fn eval(&self, env: &[i64]) -> i64 {
        match &self.form {
            Some(f) => f.eval(env),
            None => self.index.eval(&|v| loop_value(env, v)),
        }
    }
}

/// Whether every hoisted bound of a loop holds at `env` (see
/// `Step::Loop`): an iteration that fails one is skipped whole.
pub(super) fn all_below(bounds: &[(LoopIndex, i64)], env: &[i64]) -> bool {
    bounds.iter().all(|(x, bound)| x.eval(env) < *bound)
}

/// A loop variable's value in `env`.
pub(super) fn loop_value(env: &[i64], v: Var) -> i64 {
    match v {
        Var::Loop(l) => env[l.0 as usize],
        Var::Iter(_) => unreachable!("iterators are resolved before loop variables"),
    }
}

impl Form {
    /// `index` as a form, if it is over loop variables only.
    fn of(index: &Index) -> Option<Form> {
        let (constant, atoms) = index.linear_terms();
        let (mut terms, mut parts) = (Vec::new(), Vec::new());
        for (atom, coef) in atoms {
            let remainder = matches!(atom, Index::Mod(..));
            match atom {
                Index::Var(Var::Loop(l)) => terms.push((l.0 as usize, coef)),
                Index::Div(inner, divisor) | Index::Mod(inner, divisor) => parts.push(Part {
                    inner: Form::of(&inner)?,
                    divisor,
                    remainder,
                    coef,
                }),
                _ => return None,
            }
        }
        Some(Form {
            constant,
            terms: terms.into(),
            parts: parts.into(),
        })
    }

    #[inline]
    fn eval(&self, env: &[i64]) -> i64 {
        let sum = (self.terms.iter()).fold(self.constant, |sum, &(v, c)| sum + c * env[v]);
        (self.parts.iter()).fold(sum, |sum, p| {
            let x = p.inner.eval(env);
            sum + p.coef
                * match p.remainder {
                    true => x.rem_euclid(p.divisor),
                    false => x.div_euclid(p.divisor),
                }
        })
    }
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
            ((var(0) + var(1) * 4 + Index::Const(2)) * 64 + var(2), 0),
            (var(0) * 3 + var(0) * 2 + Index::Const(9), 0),
            (Index::Const(11), 0),
            ((var(0) * 8 + var(1)) / 4 + var(2) % 3, 2),
            (((var(0) + Index::Const(-9)) / 4 % 3) * -2 + var(1), 1),
        ];
        for (index, parts) in cases {
            let compiled = LoopIndex::new(index.clone());
            let form = compiled.form.as_ref().expect("over loop variables");
            assert_eq!(form.parts.len(), parts, "{index:?}");
            let want = index.eval(&|v| loop_value(&env, v));
            assert_eq!(compiled.eval(&env), want, "{index:?}");
        }
    }
}
