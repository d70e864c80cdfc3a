//! Recognizing the GEMM micro-kernel's loop nest in a kernel.

use tilefuse_ir::{DType, ReduceOp};
use tilefuse_sched::ir::{BufferId, Expr, Index, Kernel, LoopId, Node, Var, flat_offset};

use super::code::{Counted, GemmCode, Operand};
use super::nest::{is_serial, through_units};

/// The micro-kernel's loop nest under loop `k`, if `body` is one: a serial
/// loop over at most `gemm::MAX_ROWS` rows `r`, then a serial loop over `j` with one
/// block that accumulates (without starting itself, no guards) `C += A *
/// B` in f32, where C moves with `r` and one step per `j` but not with `k`,
/// A with `r` and `k` but not `j`, and B with `k` and one step per `j` but
/// not `r`.
pub(super) fn gemm_code(kernel: &Kernel, k: LoopId, body: &[Node]) -> Option<GemmCode> {
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
    let f32s = |b: BufferId| kernel.buffer(b).dtype == DType::F32;
    if block.reduce != Some(ReduceOp::Sum)
        || block.init
        || !kernel.needs_guard(*id).is_empty()
        || !kernel.live_predicates(*id).is_empty()
        || !f32s(block.buffer)
    {
        return None;
    }
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
    // Strides of an access per loop, and its offset with those loops at 0.
    let form = |buffer: BufferId, indices: &[Index]| {
        let offset = block
            .over_loops(&[flat_offset(indices, &kernel.buffer(buffer).shape)])
            .remove(0)
            .simplified();
        let (sj, rest) = offset.linear_in(Var::Loop(*j))?;
        let (sr, rest) = rest.linear_in(Var::Loop(*r))?;
        let (sk, rest) = rest.linear_in(Var::Loop(k))?;
        let zero = |v| {
            if units.contains(&v) {
                Some(Index::Const(0))
            } else {
                None
            }
        };
        let rest = rest.subst(&|v| match v {
            Var::Loop(l) => zero(l.0 as usize),
            Var::Iter(_) => None,
        });
        Some((
            Operand {
                buffer: buffer.0 as usize,
                offset: rest,
                per_row: sr,
                per_k: sk,
            },
            sj,
        ))
    };
    let (c, c_lane) = form(block.buffer, &block.indices)?;
    let (a, b) = match (form(*xb, xi)?, form(*yb, yi)?) {
        ((p, 0), (q, 1)) | ((q, 1), (p, 0)) => (p, q),
        _ => return None,
    };
    let (c_id, a_id, b_id) = (block.buffer.0 as usize, a.buffer, b.buffer);
    let f32s = |b: usize| f32s(BufferId(b as u32));
    let distinct = a_id != c_id && b_id != c_id;
    if !(distinct && f32s(a_id) && f32s(b_id) && c_lane == 1 && c.per_k == 0 && b.per_row == 0) {
        return None;
    }
    let lanes = Counted::of(kernel, *j);
    // Rows of C must not overlap: each is held in registers on its own.
    let disjoint_rows = rows == 1 || c.per_row >= lanes.extent;
    if c.per_row < 0 || a.per_row < 0 || a.per_k < 0 || b.per_k < 0 || !disjoint_rows {
        return None;
    }
    Some(GemmCode {
        k: Counted::of(kernel, k),
        rows: Counted::of(kernel, *r),
        lanes,
        units,
        c,
        a,
        b,
    })
}
