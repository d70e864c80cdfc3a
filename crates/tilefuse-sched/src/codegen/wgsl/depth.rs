//! Bounds how deeply expressions nest: naga's WGSL parser (like drivers'
//! compilers) limits recursion, and an inlined chain of n ops is one
//! expression n levels deep. Subexpressions are bound to `let`s placed
//! just before their statement, so the meaning is unchanged.

use super::ast::{BinOp, Expr, Name, Stmt};

/// The deepest an expression may nest before a piece of it is bound.
const MAX_DEPTH: usize = 32;

/// Rewrites `stmts` (and the statements nested in them) so that no
/// expression nests deeper than [`MAX_DEPTH`].
pub fn bound_depth(stmts: &mut Vec<Stmt>) {
    let mut next = 0;
    bound_in(stmts, &mut next);
}

fn bound_in(stmts: &mut Vec<Stmt>, next: &mut u32) {
    let mut out = Vec::with_capacity(stmts.len());
    for mut stmt in stmts.drain(..) {
        let mut lets = Vec::new();
        match &mut stmt {
            Stmt::Let(_, e) | Stmt::Var(_, e) | Stmt::Call(e) => {
                shallow(e, &mut lets, next);
            }
            Stmt::Assign(lhs, e) => {
                shallow(lhs, &mut lets, next);
                shallow(e, &mut lets, next);
            }
            Stmt::If(cond, body) => {
                shallow(cond, &mut lets, next);
                bound_in(body, next);
            }
            Stmt::For { end, body, .. } => {
                shallow(end, &mut lets, next);
                bound_in(body, next);
            }
            Stmt::Scope(body) | Stmt::Unrolled { body, .. } => bound_in(body, next),
            Stmt::VarArray(..) | Stmt::Barrier(_) | Stmt::Comment(_) => {}
        }
        out.extend(lets);
        out.push(stmt);
    }
    *stmts = out;
}

/// Binds the children of `e` that reach [`MAX_DEPTH`] to `let`s (pushed to
/// `lets` in the order they must run); returns `e`'s depth afterwards.
fn shallow(e: &mut Expr, lets: &mut Vec<Stmt>, next: &mut u32) -> usize {
    let mut bind = |child: &mut Expr| bind_deep(child, lets, next);
    1 + match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::Builtin(_) => 0,
        // The right side of && runs only on the left's say: it stays.
        Expr::Binary(BinOp::And, a, _) => bind(a),
        Expr::Binary(_, a, b) => bind(a).max(bind(b)),
        Expr::Neg(a) | Expr::Index(_, a) | Expr::Ref(a) => bind(a),
        Expr::Call(_, args) => args.iter_mut().map(bind).max().unwrap_or(0),
    }
}

/// `child`'s depth after [`shallow`], binding it to a `let` (depth 1) when
/// it still reaches [`MAX_DEPTH`].
fn bind_deep(child: &mut Expr, lets: &mut Vec<Stmt>, next: &mut u32) -> usize {
    let d = shallow(child, lets, next);
    if d < MAX_DEPTH {
        return d;
    }
    let name = Name::Bound(*next);
    *next += 1;
    let bound = std::mem::replace(child, Expr::Var(name.clone()));
    lets.push(Stmt::Let(name, bound));
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::codegen::wgsl::ast::Lit;

    fn x() -> Expr {
        Expr::Var(Name::Iter(0))
    }

    fn chain(n: usize) -> Expr {
        (0..n).fold(x(), |e, _| {
            Expr::bin(BinOp::Add, e, Expr::Lit(Lit::F32(1.0)))
        })
    }

    fn depth(e: &Expr) -> usize {
        match e {
            Expr::Lit(_) | Expr::Var(_) | Expr::Builtin(_) => 1,
            Expr::Binary(_, a, b) => 1 + depth(a).max(depth(b)),
            Expr::Neg(a) | Expr::Ref(a) => 1 + depth(a),
            Expr::Call(_, args) => 1 + args.iter().map(depth).max().unwrap_or(0),
            Expr::Index(_, i) => 1 + depth(i),
        }
    }

    #[test]
    fn deep_expressions_are_bound_to_lets_in_order() {
        let mut stmts = vec![Stmt::Scope(vec![Stmt::Assign(x(), chain(100))])];
        bound_depth(&mut stmts);
        let Stmt::Scope(body) = &stmts[0] else {
            panic!("a scope")
        };
        let lets: Vec<String> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let(name, e) => {
                    assert!(depth(e) <= MAX_DEPTH);
                    Some(name.to_string())
                }
                _ => None,
            })
            .collect();
        assert_eq!(lets, ["tf_d0", "tf_d1", "tf_d2"]);
        let Some(Stmt::Assign(_, last)) = body.last() else {
            panic!("the assignment stays last")
        };
        assert!(depth(last) <= MAX_DEPTH);
        // The text still adds 100 ones to x, through the lets.
        let text: String = body.iter().map(|s| format!("{s:?}")).collect();
        assert_eq!(text.matches("F32(1.0)").count(), 100);
    }

    #[test]
    fn shallow_code_is_unchanged() {
        let original = vec![Stmt::Assign(x(), chain(10))];
        let mut stmts = original.clone();
        bound_depth(&mut stmts);
        assert_eq!(stmts, original);
    }
}
