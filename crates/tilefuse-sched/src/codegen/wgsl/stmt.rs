//! Statements: loops (bound, unrolled, `for`), blocks and their guarded
//! stores or reduction steps, `vec4` steps, and the barriers lowering
//! placed.
//!
//! Loops bound to `workgroup.*` / `invocation.*` read `workgroup_id` /
//! `local_invocation_id` (guarded when their extent is less than the
//! dispatch or workgroup size); a loop of one iteration is a `let`;
//! unrolled loops are repeated.

use tilefuse_ir::{DType, reduce_identity};

use super::ast::{BinOp, Builtin, Expr, Func, Lit, Name, Scalar, Stmt, Ty};
use super::expr::{combine, index_expr, literal, to_storage};
use super::{Gen, Packed};
use crate::ir::{self, BlockId, BufferId, Index, LoopId, LoopKind, Node};
use crate::lowering::{Barrier, Launch, VecStep};

impl Gen<'_> {
    /// Loop `l`'s body, with the barriers lowering placed between its
    /// children.
    fn nodes(&self, l: LoopId, body: &[Node], launch: &Launch) -> Vec<Stmt> {
        let mut out = Vec::new();
        for (i, n) in body.iter().enumerate() {
            out.extend(barrier_stmts(self.l.barriers.before(l, i)));
            out.extend(self.node(n, launch));
        }
        out
    }

    /// One iteration of loop `l`'s body, with the barrier its end needs.
    fn iteration(&self, l: LoopId, body: &[Node], launch: &Launch) -> Vec<Stmt> {
        let mut stmts = self.nodes(l, body, launch);
        stmts.extend(barrier_stmts(self.l.barriers.end_of_iteration(l)));
        stmts
    }

    pub(super) fn node(&self, node: &Node, launch: &Launch) -> Vec<Stmt> {
        let (l, body) = match node {
            Node::Block(b) => return vec![self.block(*b)],
            Node::Loop(l, body) => (*l, body),
        };
        let lp = self.kernel.loop_(l);
        let var = Name::Loop(l.0);
        match lp.kind {
            LoopKind::Bound(axis) => {
                let dim = axis.dim();
                let id = if axis.is_workgroup() {
                    Builtin::WorkgroupId(dim)
                } else {
                    Builtin::LocalInvocationId(dim)
                };
                if let Some((b, how)) = self.kernel.cross_invocation_reduction(l) {
                    // Lowering checked that the loop spans its axis
                    // (`cross_invocation`).
                    return vec![Stmt::Scope(vec![
                        Stmt::Let(var, Expr::Builtin(id)),
                        self.cross_invocation_block(l, b, how, id),
                    ])];
                }
                let inner = self.nodes(l, body, launch);
                let mut stmts = vec![Stmt::Let(var.clone(), Expr::Builtin(id))];
                if lp.extent < launch.extent(axis) {
                    let within = Expr::bin(BinOp::Lt, Expr::Var(var), Expr::u32(lp.extent));
                    stmts.push(Stmt::If(within, inner));
                } else {
                    stmts.extend(inner);
                }
                vec![Stmt::Scope(stmts)]
            }
            // A loop of one iteration needs no barrier between iterations.
            _ if one_step(lp) => vec![self.around(l, self.nodes(l, body, launch))],
            LoopKind::Vectorized if self.l.vectors.loops.contains_key(&l) => {
                vec![self.vector_block(l, &self.l.vectors.loops[&l])]
            }
            _ => vec![self.around(l, self.iteration(l, body, launch))],
        }
    }

    /// Loop `l` spelled around `body`, the statements of one iteration: a
    /// `let` when it has one step ([`one_step`]), repeated when unrolled,
    /// else a `for`.
    fn around(&self, l: LoopId, body: Vec<Stmt>) -> Stmt {
        let lp = self.kernel.loop_(l);
        let var = Name::Loop(l.0);
        match lp.kind {
            _ if one_step(lp) => {
                let mut stmts = vec![Stmt::Let(var, Expr::u32(0))];
                stmts.extend(body);
                Stmt::Scope(stmts)
            }
            LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => Stmt::Unrolled {
                var,
                count: lp.extent,
                body,
            },
            _ => Stmt::For {
                var,
                end: Expr::u32(lp.extent),
                body,
            },
        }
    }

    /// `body` inside `loops` (outermost first), serial or unrolled ones
    /// with nothing else in them (a cross-invocation reduction's rows).
    pub(super) fn within(&self, loops: &[LoopId], body: Vec<Stmt>) -> Vec<Stmt> {
        (loops.iter().rev()).fold(body, |body, &l| vec![self.around(l, body)])
    }

    /// A vectorized loop: lane 0's iterators, then all four lanes at once.
    fn vector_block(&self, l: LoopId, step: &VecStep) -> Stmt {
        let b = self.kernel.block(step.block);
        let mut stmts = vec![
            Stmt::Comment(format!(
                "block {}, 4 lanes of loop {} at once",
                b.name,
                self.kernel.loop_(l).name
            )),
            Stmt::Let(Name::Loop(l.0), Expr::u32(0)),
        ];
        stmts.extend(iter_lets(b));
        let target = self.vector_element(b.buffer, &b.indices);
        let value = self.vector_value(&b.value, &mut step.contiguous.iter().copied());
        let value = match b.reduce {
            None => value,
            Some(op) => combine(op, target.clone(), value, DType::F32, true),
        };
        stmts.push(Stmt::Assign(target, value));
        Stmt::Scope(stmts)
    }

    fn block(&self, id: BlockId) -> Stmt {
        let b = self.kernel.block(id);
        let mut stmts = vec![Stmt::Comment(format!("block {}", b.name))];
        stmts.extend(iter_lets(b));
        stmts.extend(self.update(id, b, self.value(&b.value)));
        Stmt::Scope(stmts)
    }

    /// The block's store (or its reduction step) of `value`, under its
    /// guards, its iterators already bound.
    pub(super) fn update(&self, id: BlockId, b: &ir::Block, value: Expr) -> Vec<Stmt> {
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let target = self.element(b.buffer, &b.indices);
        let mut body = Vec::new();
        match b.reduce {
            None if self.packed(b.buffer).is_some() => {
                body.extend(self.store_half(b.buffer, &b.indices, value, dtype));
            }
            None => body.push(Stmt::Assign(target, to_storage(value, dtype))),
            Some(op) => {
                let first = b
                    .iters
                    .iter()
                    .enumerate()
                    .filter(|(_, it)| it.kind == ir::IterKind::Reduce)
                    .map(|(i, _)| {
                        Expr::bin(BinOp::Eq, Expr::Var(Name::Iter(i as u32)), Expr::u32(0))
                    })
                    .reduce(|a, c| Expr::bin(BinOp::And, a, c))
                    .unwrap_or(Expr::Lit(Lit::Bool(true)));
                if b.init {
                    let identity = literal(reduce_identity(op, dtype), dtype);
                    body.push(Stmt::If(
                        first,
                        vec![Stmt::Assign(target.clone(), identity)],
                    ));
                }
                let step = combine(op, target.clone(), value, dtype, false);
                body.push(Stmt::Assign(target, step));
            }
        }
        match self.guard(id, b) {
            None => body,
            Some(cond) => vec![Stmt::If(cond, body)],
        }
    }

    /// Stores `value` (a half of `dtype` held in f32) into its lane of a
    /// packed buffer, leaving the other lane as it is; or into its element
    /// of an `array<f16>`, rounded first (WGSL's `f16(x)` is exact only
    /// where `x` is an f16: it leaves other values' rounding to the
    /// device, and overflow undefined).
    fn store_half(&self, b: BufferId, indices: &[Index], value: Expr, dtype: DType) -> Vec<Stmt> {
        let helper = |name, args| Expr::call(Func::Helper { name, vec4: false }, args);
        if self.packed(b) == Some(Packed::Native) {
            let half = Expr::call(
                Func::Construct(Ty::Scalar(Scalar::F16)),
                vec![helper("round_f16", vec![value])],
            );
            return vec![Stmt::Assign(self.element(b, indices), half)];
        }
        let (word, lane) = self.half_word(b, indices);
        let bits = if dtype == DType::F16 {
            helper("f16_bits", vec![value])
        } else {
            helper("bf16_bits", vec![value])
        };
        let update = |atomic, operand| {
            let args = vec![Expr::Ref(Box::new(word.clone())), operand];
            Stmt::Call(Expr::call(Func::Builtin(atomic), args))
        };
        vec![
            update("atomicAnd", helper("half_keep", vec![lane.clone()])),
            update("atomicOr", helper("half_place", vec![bits, lane])),
        ]
    }

    /// Whether the block's iteration exists: tails of uneven splits and
    /// predicates; `None` when it always does.
    pub(super) fn guard(&self, id: BlockId, b: &ir::Block) -> Option<Expr> {
        let mut conds: Vec<Expr> = self
            .kernel
            .needs_guard(id)
            .iter()
            .map(|&g| {
                let it = Expr::Var(Name::Iter(g as u32));
                Expr::bin(BinOp::Lt, it, Expr::u32(b.iters[g].extent))
            })
            .collect();
        conds.extend(
            self.kernel
                .live_predicates(id)
                .iter()
                .map(|(e, bound)| Expr::bin(BinOp::Lt, index_expr(e), Expr::u32(*bound))),
        );
        conds.into_iter().reduce(|a, c| Expr::bin(BinOp::And, a, c))
    }
}

/// `let itN = ...;` for each of the block's iterators.
pub(super) fn iter_lets(b: &ir::Block) -> Vec<Stmt> {
    b.bindings
        .iter()
        .enumerate()
        .map(|(i, binding)| Stmt::Let(Name::Iter(i as u32), index_expr(binding)))
        .collect()
}

fn barrier_stmts(barrier: Barrier) -> Vec<Stmt> {
    let mut out = Vec::new();
    if barrier.storage {
        out.push(Stmt::Barrier(super::ast::Barrier::Storage));
    }
    if barrier.workgroup {
        out.push(Stmt::Barrier(super::ast::Barrier::Workgroup));
    }
    out
}

/// A loop of one step that is written as a `let` of its one value: serial,
/// parallel, vectorized by one lane or pipelined (bound loops read their
/// builtin, unrolled ones copy their body). A driver takes far longer over
/// unrolled copies of a `for` than over straight-line code (see
/// `MAX_COPIED_LOOP_STEPS`).
fn one_step(lp: &ir::Loop) -> bool {
    let kind = matches!(
        lp.kind,
        LoopKind::Serial | LoopKind::Parallel | LoopKind::Vectorized | LoopKind::Pipelined { .. }
    );
    kind && lp.extent == 1
}
