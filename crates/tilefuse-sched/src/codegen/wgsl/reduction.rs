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
    /// whose row passes the block's guards fold or combine. Loops between
    /// `l` and the block (its rows, see `Kernel::reduction_chain`) run
    /// inside each step: one tree, one barrier per step, for all rows.
    pub(super) fn cross_invocation_block(
        &self,
        l: LoopId,
        id: BlockId,
        how: CrossInvocation,
        lane: Builtin,
    ) -> Stmt {
        let b = self.kernel.block(id);
        let (rows_loops, _) = self.kernel.reduction_chain(l).expect("lowering checked");
        let extent = self.kernel.loop_(l).extent;
        let mut stmts = vec![Stmt::Comment(format!(
            "block {}, reduced across {extent} invocations {}",
            b.name,
            match how {
                CrossInvocation::Shuffles => "with subgroup shuffles",
                CrossInvocation::Tree => "in a tree through workgroup memory",
            }
        ))];
        let mut first_lane = vec![Stmt::Let(Name::Loop(l.0), Expr::u32(0))];
        first_lane.extend(iter_lets(b));
        match (how, &b.value) {
            (CrossInvocation::Tree, ir::Expr::Load { buffer, indices }) => {
                stmts.extend(self.tree(l, id, *buffer, indices, lane, &rows_loops));
                // Read as lane 0's.
                first_lane.extend(self.update(id, b, self.value(&b.value)));
                let update = self.within(&rows_loops, first_lane);
                stmts.push(self.by_first_lane(b, lane, update));
            }
            _ => {
                // No barriers: each row's terms are shuffled, then combined.
                let mut each_row = iter_lets(b);
                each_row.extend(self.shuffles(l, id, b));
                first_lane.extend(self.update(id, b, Expr::Var(Name::Subgroup)));
                each_row.push(self.by_first_lane(b, lane, first_lane));
                stmts.extend(self.within(&rows_loops, each_row));
            }
        }
        Stmt::Scope(stmts)
    }

    /// `stmts` run by every invocation where each has its own copy of the
    /// block's target, else by lane 0 alone.
    fn by_first_lane(&self, b: &ir::Block, lane: Builtin, stmts: Vec<Stmt>) -> Stmt {
        if self.kernel.buffer(b.buffer).scope == Scope::Private {
            Stmt::Scope(stmts)
        } else {
            let lane_0 = Expr::bin(BinOp::Eq, Expr::Builtin(lane), Expr::u32(0));
            Stmt::If(lane_0, stmts)
        }
    }

    /// Halves of loop `l`'s extent, largest first.
    fn halves(&self, l: LoopId) -> impl Iterator<Item = u64> {
        let extent = self.kernel.loop_(l).extent;
        std::iter::successors(Some(extent / 2), |h| Some(h / 2)).take_while(|&h| h > 0)
    }

    /// The tree's steps, each followed by a barrier: lanes below each half
    /// fold the term of the lane a half above into theirs (in `buffer`,
    /// at `indices`), for each of the block's rows that `rows` walk, and
    /// only where the block's guard holds: a row past the end has no terms
    /// of its own, and its indices may land on another row's (lowering
    /// made sure the guard does not depend on the lane).
    fn tree(
        &self,
        l: LoopId,
        id: BlockId,
        buffer: ir::BufferId,
        indices: &[Index],
        lane: Builtin,
        rows: &[LoopId],
    ) -> Vec<Stmt> {
        let b = self.kernel.block(id);
        let guard = self.guard(id, b);
        let mut stmts = Vec::new();
        for (half, fold) in self.folds(l, b, buffer, indices) {
            let below = Expr::bin(BinOp::Lt, Expr::Builtin(lane), Expr::u32(half));
            stmts.push(match &guard {
                // The lanes' test is the same for every row: once, outside.
                None => Stmt::If(below, self.within(rows, vec![fold])),
                // The guard reads the iterators, which the rows move.
                Some(guard) => {
                    let mut each_row = iter_lets(b);
                    let folds = Expr::bin(BinOp::And, below, guard.clone());
                    each_row.push(Stmt::If(folds, vec![fold]));
                    Stmt::Scope(self.within(rows, each_row))
                }
            });
            stmts.push(Stmt::Barrier(Barrier::Workgroup));
        }
        stmts
    }

    /// Per half of loop `l`'s extent, largest first, the fold of the term
    /// a half above into this lane's.
    fn folds(
        &self,
        l: LoopId,
        b: &ir::Block,
        buffer: ir::BufferId,
        indices: &[Index],
    ) -> Vec<(u64, Stmt)> {
        let op = b.reduce.expect("a reducing block");
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let lane_var = Var::Loop(l);
        let folds = self.halves(l).map(|half| {
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
            (
                half,
                Stmt::Assign(mine.clone(), combine(op, mine, theirs, dtype, false)),
            )
        });
        folds.collect()
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
