//! Reductions across invocations: a loop bound to `invocation.*` that
//! carries a block's reduction, expanded as subgroup shuffles or as a tree
//! through workgroup memory (lowering's `cross_invocation` chose and
//! checked it).

use tilefuse_ir::reduce_identity;

use super::Gen;
use super::ast::{Barrier, BinOp, Builtin, Expr, Func, Name, Stmt};
use super::expr::{combine, literal, select};
use super::stmt::iter_lets;
use crate::ir::{self, BlockId, CrossInvocation, Index, LoopId, Scope, Var};

impl Gen<'_> {
    /// A reduction that loop `l`, bound to the invocation axis `lane`,
    /// spreads over its invocations. With shuffles, every lane evaluates
    /// its term (the identity where the block's guards fail) and a
    /// butterfly of `subgroupShuffleXor`s leaves the combined value in
    /// every lane. In a tree, lanes below each half fold the term of the
    /// lane a half above into theirs, in the workgroup buffer that holds
    /// them, a barrier per step, until lane 0's term holds all. The update
    /// then runs as lane 0's (the iterators rebound with the loop at 0) —
    /// by lane 0 alone when other invocations share the target. Only lanes
    /// whose row passes the block's guards fold or combine.
    pub(super) fn cross_invocation_block(
        &self,
        l: LoopId,
        id: BlockId,
        how: CrossInvocation,
        lane: Builtin,
    ) -> Stmt {
        let b = self.kernel.block(id);
        let extent = self.kernel.loop_(l).extent;
        let mut stmts = vec![Stmt::Comment(format!(
            "block {}, reduced across {extent} invocations {}",
            b.name,
            match how {
                CrossInvocation::Shuffles => "with subgroup shuffles",
                CrossInvocation::Tree => "in a tree through workgroup memory",
            }
        ))];
        let result = match (how, &b.value) {
            (CrossInvocation::Tree, ir::Expr::Load { buffer, indices }) => {
                let rows = self.guard(id, b);
                if rows.is_some() {
                    // The guard reads the iterators.
                    stmts.extend(iter_lets(b));
                }
                stmts.extend(self.tree(l, b, *buffer, indices, lane, rows.as_ref()));
                // Read as lane 0's, below.
                self.value(&b.value)
            }
            _ => {
                stmts.extend(iter_lets(b));
                stmts.extend(self.shuffles(l, id, b));
                Expr::Var(Name::Subgroup)
            }
        };
        let mut first_lane = vec![Stmt::Let(Name::Loop(l.0), Expr::u32(0))];
        first_lane.extend(iter_lets(b));
        first_lane.extend(self.update(id, b, result));
        if self.kernel.buffer(b.buffer).scope == Scope::Private {
            stmts.push(Stmt::Scope(first_lane));
        } else {
            let lane_0 = Expr::bin(BinOp::Eq, Expr::Builtin(lane), Expr::u32(0));
            stmts.push(Stmt::If(lane_0, first_lane));
        }
        Stmt::Scope(stmts)
    }

    /// Halves of loop `l`'s extent, largest first.
    fn halves(&self, l: LoopId) -> impl Iterator<Item = u64> {
        let extent = self.kernel.loop_(l).extent;
        std::iter::successors(Some(extent / 2), |h| Some(h / 2)).take_while(|&h| h > 0)
    }

    /// Folds each lane's term in `buffer` (at `indices`) in halves, where
    /// the block's `rows` guard holds: a row past the end has no terms of
    /// its own, and its indices may land on another row's (lowering made
    /// sure the guard does not depend on the lane).
    fn tree(
        &self,
        l: LoopId,
        b: &ir::Block,
        buffer: ir::BufferId,
        indices: &[Index],
        lane: Builtin,
        rows: Option<&Expr>,
    ) -> Vec<Stmt> {
        let op = b.reduce.expect("a reducing block");
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let lane_var = Var::Loop(l);
        let mut stmts = Vec::new();
        for half in self.halves(l) {
            let above: Vec<Index> = indices
                .iter()
                .map(|ix| {
                    ix.subst(&|v| {
                        (v == lane_var).then(|| Index::var(lane_var) + Index::Const(half as i64))
                    })
                })
                .collect();
            let mine = self.element(buffer, indices);
            let theirs = self.element(buffer, &above);
            let fold = Stmt::Assign(mine.clone(), combine(op, mine, theirs, dtype, false));
            let below = Expr::bin(BinOp::Lt, Expr::Builtin(lane), Expr::u32(half));
            let folds = match rows {
                Some(rows) => Expr::bin(BinOp::And, below, rows.clone()),
                None => below,
            };
            stmts.push(Stmt::If(folds, vec![fold]));
            stmts.push(Stmt::Barrier(Barrier::Workgroup));
        }
        stmts
    }

    /// Every lane's term (the identity where it does not exist), combined
    /// across the subgroup into `tf_sg` by a butterfly of shuffles.
    fn shuffles(&self, l: LoopId, id: BlockId, b: &ir::Block) -> Vec<Stmt> {
        let op = b.reduce.expect("a reducing block");
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let term = self.value(&b.value);
        let term = match self.guard(id, b) {
            None => term,
            Some(cond) => select(literal(reduce_identity(op, dtype), dtype), term, cond),
        };
        let acc = || Expr::Var(Name::Subgroup);
        let mut stmts = vec![Stmt::Var(Name::Subgroup, term)];
        for half in self.halves(l) {
            let other = Expr::call(Func::SubgroupShuffleXor, vec![acc(), Expr::u32(half)]);
            stmts.push(Stmt::Assign(acc(), combine(op, acc(), other, dtype, false)));
        }
        stmts
    }
}
