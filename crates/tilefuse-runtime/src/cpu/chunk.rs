//! A lane step's chunk of consecutive iterations, evaluated over
//! columns (see `lanes`).
//!
//! Unsafe code: only the element accesses of `RawBuf` (chunks load and store kernel buffers through `RawBuf` views),
//! under the contract in `memory.rs`: a verified schedule keeps concurrent
//! writes disjoint and ordered before their reads.
#![allow(unsafe_code)]

use tilefuse_ir::{DType, ReduceOp};
use tilefuse_sched::ir::Var;

use super::accumulate::{accumulate, fold_into};
use super::code::BlockCode;
use super::ctx::{Ctx, Lane, lane_values};
use super::lanes::Column;
use super::loop_index::loop_value;
use super::value::{Access, Value};

/// Lanes per chunk: small enough that a block's columns stay in L1.
pub(super) const CHUNK: usize = 512;

/// One chunk of lanes being evaluated.
pub(super) struct Chunk<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) iters: &'a [Vec<i64>],
    pub(super) env: &'a [i64],
    pub(super) start: i64,
    pub(super) n: usize,
    pub(super) mask: Option<&'a [bool]>,
}

impl Chunk<'_> {
    /// Stores the chunk's `value` (a block without reduction).
    pub(super) fn store(&self, b: &BlockCode, value: &Column) {
        let buf = &self.ctx.buffers[b.store.buffer];
        match (&b.store.linear, self.mask) {
            (Some((1, rest)), None) => {
                let at = rest.eval(&|v| loop_value(self.env, v));
                value.write(buf, (at + self.start) as usize)
            }
            _ => value.scatter(buf, &self.offsets(&b.store), self.mask),
        }
    }

    /// Combines the chunk's `value` into the elements it reduces to.
    pub(super) fn reduce(&self, b: &BlockCode, op: ReduceOp, value: &Column) {
        let buf = &self.ctx.buffers[b.store.buffer];
        let at = |v| loop_value(self.env, v);
        let first_lane = |k: usize| b.init && b.reduce_iters.iter().all(|&r| self.iters[r][k] == 0);
        match (&b.store.linear, self.mask) {
            // Lanes are consecutive elements, equally first or not.
            (Some((1, rest)), None) if !b.lane_reduces => {
                let start_at = (rest.eval(&at) + self.start) as usize;
                if value.reduce_into(buf, start_at, op, first_lane(0)) {
                    return;
                }
            }
            // Every lane lands on one element: fold, then combine once.
            // Lanes visit the element in order, so only lane 0 can be its
            // first visit.
            (Some((0, rest)), None) if b.lane_reduces => {
                if let Some(folded) = value.fold(op) {
                    let off = rest.eval(&at) as usize;
                    return fold_into(buf, off, op, b.dtype, first_lane(0), folded);
                }
            }
            _ => {}
        }
        let offsets = self.offsets(&b.store);
        for k in 0..self.n {
            if self.mask.is_some_and(|m| !m[k]) {
                continue;
            }
            let off = offsets[k] as usize;
            let first = match (b.per_lane, b.lane_reduces) {
                (true, _) => first_lane(k),
                // Only lane 0 can be the first visit (see above).
                (false, true) => k == 0 && first_lane(0),
                (false, false) => first_lane(0),
            };
            accumulate(buf, off, op, b.dtype, first, value.get(k));
        }
    }

    pub(super) fn offsets(&self, a: &Access) -> Vec<i64> {
        match &a.linear {
            Some((coef, rest)) => {
                let base = rest.eval(&|v| loop_value(self.env, v)) + coef * self.start;
                (0..self.n as i64).map(|k| base + coef * k).collect()
            }
            None => lane_values(&a.offset, self.n, &|v| match v {
                Var::Iter(i) => Lane::Each(&self.iters[i as usize]),
                other => Lane::Same(loop_value(self.env, other)),
            }),
        }
    }

    /// `dst[k] += c * src[k]` over consecutive lanes, straight between the
    /// buffers (the inner loop of a matmul with the spatial `j` innermost):
    /// a sum reduction of a lane-invariant operand times a contiguous load
    /// into a contiguous store, first visits storing instead of adding.
    pub(super) fn axpy(&self, b: &BlockCode, first: bool) -> bool {
        let (Some(ReduceOp::Sum), None, Some((1, out_rest)), false) =
            (b.reduce, self.mask, &b.store.linear, b.lane_reduces)
        else {
            return false;
        };
        let Value::Binary(tilefuse_ir::BinaryOp::Mul, x, y) = &b.value else {
            return false;
        };
        let (c, src) = match (self.uniform_f32(x), self.uniform_f32(y)) {
            (Some(c), None) => (c, &**y),
            (None, Some(c)) => (c, &**x),
            _ => return false,
        };
        let Value::Load(Access {
            buffer,
            linear: Some((1, rest)),
            ..
        }) = src
        else {
            return false;
        };
        let (dst_buf, src_buf) = (
            &self.ctx.buffers[b.store.buffer],
            &self.ctx.buffers[*buffer],
        );
        if *buffer == b.store.buffer || dst_buf.dtype != DType::F32 || src_buf.dtype != DType::F32 {
            return false;
        }
        let at = |v| loop_value(self.env, v);
        let src = unsafe { src_buf.slice::<f32>((rest.eval(&at) + self.start) as usize, self.n) };
        let dst =
            unsafe { dst_buf.slice_mut::<f32>((out_rest.eval(&at) + self.start) as usize, self.n) };
        super::simd_math::axpy(dst, c, src, first);
        true
    }

    /// The value of an f32 operand that is equal in every lane.
    pub(super) fn uniform_f32(&self, v: &Value) -> Option<f32> {
        match v {
            Value::Const(c, DType::F32) => Some(c.as_f64() as f32),
            Value::Load(a)
                if self.mask.is_none() && self.ctx.buffers[a.buffer].dtype == DType::F32 =>
            {
                match &a.linear {
                    Some((0, rest)) => {
                        let at = rest.eval(&|v| loop_value(self.env, v)) as usize;
                        Some(unsafe { self.ctx.buffers[a.buffer].slice::<f32>(at, 1)[0] })
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    pub(super) fn column(&self, v: &Value) -> Column {
        match v {
            Value::Const(s, d) => Column::splat(*s, *d, self.n),
            Value::Load(a) => {
                let buf = &self.ctx.buffers[a.buffer];
                match (&a.linear, self.mask) {
                    (Some((1, rest)), None) => {
                        let base = rest.eval(&|v| loop_value(self.env, v)) + self.start;
                        Column::read(buf, base as usize, self.n)
                    }
                    (Some((0, rest)), None) => {
                        let at = rest.eval(&|v| loop_value(self.env, v)) as usize;
                        Column::splat(unsafe { buf.read(at) }, buf.dtype, self.n)
                    }
                    _ => Column::gather(buf, &self.offsets(a), self.mask),
                }
            }
            Value::Unary(op, x) => self.column(x).unary(*op),
            Value::Binary(op, x, y) => {
                // An operand that is the same in every lane (a constant, or
                // a load that does not move with the lane) is applied in
                // place as a scalar, never splatted into a column.
                if let Some(c) = self.uniform_f32(y) {
                    return self
                        .column(x)
                        .binary_const(*op, c, false)
                        .unwrap_or_else(|lhs| lhs.binary(*op, &self.column(y)));
                }
                if let Some(c) = self.uniform_f32(x) {
                    return self
                        .column(y)
                        .binary_const(*op, c, true)
                        .unwrap_or_else(|rhs| self.column(x).binary(*op, &rhs));
                }
                self.column(x).binary(*op, &self.column(y))
            }
            Value::Select(c, x, y) => self.column(c).select(&self.column(x), &self.column(y)),
            Value::Cast(d, x) => self.column(x).cast(*d),
        }
    }
}
