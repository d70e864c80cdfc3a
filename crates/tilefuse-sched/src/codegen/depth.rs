//! Bounds how deeply expressions nest: naga's WGSL parser (like drivers'
//! compilers) limits recursion, and an inlined chain of n ops is one
//! expression n levels deep. Subexpressions are bound to `let`s placed
//! just before their statement, so the meaning is unchanged.

use super::ast::{Expr, Stmt};

/// The deepest an expression may nest before a piece of it is bound.
const MAX_DEPTH: usize = 32;

/// Rewrites `stmts` (and the statements nested in them) so that no
/// expression nests deeper than [`MAX_DEPTH`].
pub fn bound_depth(stmts: &mut Vec<Stmt>) {
    let mut next = 0;
    bound_in(stmts, &mut next);
}

fn bound_in(stmts: &mut Vec<Stmt>, next: &mut usize) {
    let mut out = Vec::with_capacity(stmts.len());
    for mut stmt in stmts.drain(..) {
        let mut lets = Vec::new();
        match &mut stmt {
            Stmt::Let(_, e) | Stmt::Var(_, e) => {
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
            Stmt::Scope(body) => bound_in(body, next),
            Stmt::VarArray(..) | Stmt::Call(_) | Stmt::Comment(_) => {}
        }
        out.extend(lets);
        out.push(stmt);
    }
    *stmts = out;
}

/// Binds the children of `e` that reach [`MAX_DEPTH`] to `let`s (pushed to
/// `lets` in the order they must run); returns `e`'s depth afterwards.
fn shallow(e: &mut Expr, lets: &mut Vec<Stmt>, next: &mut usize) -> usize {
    let children: Vec<&mut Expr> = match e {
        Expr::Raw(_) => return 1,
        // The right side of && and || runs only on the left's say: it stays.
        Expr::Binary("&&" | "||", a, _) => vec![a.as_mut()],
        Expr::Binary(_, a, b) => vec![a.as_mut(), b.as_mut()],
        Expr::Unary(_, a) => vec![a.as_mut()],
        Expr::Call(_, args) => args.iter_mut().collect(),
        Expr::Index(_, i) => vec![i.as_mut()],
    };
    let mut depth = 0;
    for child in children {
        let mut d = shallow(child, lets, next);
        if d >= MAX_DEPTH {
            let name = format!("tf_d{next}");
            *next += 1;
            let bound = std::mem::replace(child, Expr::raw(name.clone()));
            lets.push(Stmt::Let(name, bound));
            d = 1;
        }
        depth = depth.max(d);
    }
    depth + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> Expr {
        (0..n).fold(Expr::raw("x"), |e, _| Expr::bin("+", e, Expr::raw("1.0")))
    }

    fn depth(e: &Expr) -> usize {
        match e {
            Expr::Raw(_) => 1,
            Expr::Binary(_, a, b) => 1 + depth(a).max(depth(b)),
            Expr::Unary(_, a) => 1 + depth(a),
            Expr::Call(_, args) => 1 + args.iter().map(depth).max().unwrap_or(0),
            Expr::Index(_, i) => 1 + depth(i),
        }
    }

    #[test]
    fn deep_expressions_are_bound_to_lets_in_order() {
        let mut stmts = vec![Stmt::Scope(vec![Stmt::Assign(Expr::raw("y"), chain(100))])];
        bound_depth(&mut stmts);
        let Stmt::Scope(body) = &stmts[0] else {
            panic!("a scope")
        };
        let lets: Vec<&str> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let(name, e) => {
                    assert!(depth(e) <= MAX_DEPTH);
                    Some(name.as_str())
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
        assert_eq!(text.matches("\"1.0\"").count(), 100);
    }

    #[test]
    fn shallow_code_is_unchanged() {
        let original = vec![Stmt::Assign(Expr::raw("y"), chain(10))];
        let mut stmts = original.clone();
        bound_depth(&mut stmts);
        assert_eq!(stmts, original);
    }
}
