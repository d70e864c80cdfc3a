//! Recognizing the GEMM micro-kernel's loop nest in a kernel.

use tilefuse_ir::{DType, ReduceOp};
use tilefuse_sched::ir::{BlockId, BufferId, Expr, Index, Kernel, LoopId, Node, Var, flat_offset};

use super::code::{Counted, GemmCode, Operand};
use super::nest::{is_serial, through_units};

/// The micro-kernel's loop nest under loop `k`, if `body` is one: a serial
/// loop over at most `gemm::MAX_ROWS` rows `r`, then a serial loop over `j` with one
/// block that accumulates (without starting itself, no guards) `C += A *
/// B` in f32, where C moves with `r` and one step per `j` but not with `k`,
/// A with `r` and `k` but not `j`, and B with `k` and one step per `j` but
/// not `r`.
pub(super) fn gemm_code(kernel: &Kernel, k: LoopId, body: &[Node]) -> Option<GemmCode> {
    let nest = MicroNest::find(kernel, k, body)?;
    let block = kernel.block(nest.block);
    let Expr::Binary(tilefuse_ir::BinaryOp::Mul, x, y) = &block.value else {
        return None;
    };
    let (
        Expr::Load {
            buffer: xb,
            indices: xi,
        },
        Expr::Load {
            buffer: yb,
            indices: yi,
        },
    ) = (&**x, &**y)
    else {
        return None;
    };
    let (c, c_lane) = nest.operand(kernel, block.buffer, &block.indices)?;
    let (a, b) = match (
        nest.operand(kernel, *xb, xi)?,
        nest.operand(kernel, *yb, yi)?,
    ) {
        ((p, 0), (q, 1)) | ((q, 1), (p, 0)) => (p, q),
        _ => return None,
    };
    let (c_id, a_id, b_id) = (block.buffer.0 as usize, a.buffer, b.buffer);
    let f32s = |b: usize| kernel.buffer(BufferId(b as u32)).dtype == DType::F32;
    let distinct = a_id != c_id && b_id != c_id;
    if !(distinct && f32s(a_id) && f32s(b_id) && c_lane == 1 && c.per_k == 0 && b.per_row == 0) {
        return None;
    }
    let lanes = Counted::of(kernel, nest.j);
    // Rows of C must not overlap: each is held in registers on its own.
    let rows = kernel.loop_(nest.r).extent;
    let disjoint_rows = rows == 1 || c.per_row >= lanes.extent;
    if c.per_row < 0 || a.per_row < 0 || a.per_k < 0 || b.per_k < 0 || !disjoint_rows {
        return None;
    }
    Some(GemmCode {
        k: Counted::of(kernel, k),
        rows: Counted::of(kernel, nest.r),
        lanes,
        units: nest.units,
        c,
        a,
        b,
    })
}

/// The micro-kernel's loops: `k`, then rows `r`, then lanes `j` around one
/// accumulating block; `units` are the loops of one iteration between.
struct MicroNest {
    k: LoopId,
    r: LoopId,
    j: LoopId,
    block: BlockId,
    units: Vec<usize>,
}

impl MicroNest {
    /// The nest under `k`, when its loops are serial, it has at most
    /// `gemm::MAX_ROWS` rows, and its block accumulates a product in f32
    /// without starting itself or being guarded.
    fn find(kernel: &Kernel, k: LoopId, body: &[Node]) -> Option<MicroNest> {
        let serial = |l| is_serial(kernel, l);
        if !serial(k) {
            return None;
        }
        let mut units = Vec::new();
        let Node::Loop(r, r_body) = through_units(kernel, body, &mut units)? else {
            return None;
        };
        let Node::Loop(j, j_body) = through_units(kernel, r_body, &mut units)? else {
            return None;
        };
        let [Node::Block(id)] = j_body.as_slice() else {
            return None;
        };
        let rows = kernel.loop_(*r).extent;
        if !serial(*r) || !serial(*j) || rows > super::gemm::MAX_ROWS as u64 {
            return None;
        }
        let block = kernel.block(*id);
        if block.reduce != Some(ReduceOp::Sum)
            || block.init
            || !kernel.needs_guard(*id).is_empty()
            || !kernel.live_predicates(*id).is_empty()
            || kernel.buffer(block.buffer).dtype != DType::F32
        {
            return None;
        }
        let (r, j, block) = (*r, *j, *id);
        Some(MicroNest {
            k,
            r,
            j,
            block,
            units,
        })
    }

    /// An access's strides per row and per `k`, its offset with those
    /// loops at 0, and its stride per lane.
    fn operand(
        &self,
        kernel: &Kernel,
        buffer: BufferId,
        indices: &[Index],
    ) -> Option<(Operand, i64)> {
        let offset = (kernel.block(self.block))
            .over_loops(&[flat_offset(indices, &kernel.buffer(buffer).shape)])
            .remove(0)
            .simplified();
        let (sj, rest) = offset.linear_in(Var::Loop(self.j))?;
        let (sr, rest) = rest.linear_in(Var::Loop(self.r))?;
        let (sk, rest) = rest.linear_in(Var::Loop(self.k))?;
        let rest = rest.subst(&|v| match v {
            Var::Loop(l) if self.units.contains(&(l.0 as usize)) => Some(Index::Const(0)),
            _ => None,
        });
        let operand = Operand {
            buffer: buffer.0 as usize,
            offset: rest,
            per_row: sr,
            per_k: sk,
        };
        Some((operand, sj))
    }
}
