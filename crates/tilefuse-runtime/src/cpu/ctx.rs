//! The state a program runs in (buffers, threads, per-thread locals and
//! registers, the stop flag) and index evaluation in it, lane by lane.

use super::memory::RawBuf;
use super::tape::Registers;
use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicBool;
use tilefuse_ir::DType;
use tilefuse_sched::ir::{Index, Var};

pub(super) struct Ctx<'a> {
    pub(super) buffers: &'a [RawBuf],
    pub(super) threads: usize,
    pub(super) locals: &'a [(usize, DType, usize)],
    /// This thread's tape registers.
    pub(super) registers: RefCell<Registers>,
    /// Set once an interrupt is requested: every thread stops at its next
    /// loop iteration.
    pub(super) stop: &'a AtomicBool,
    /// Times this thread asked [`Ctx::interrupted`] (a field, not a
    /// thread-local: in a shared library, each thread-local access is a
    /// call).
    pub(super) asks: Cell<u32>,
}

/// An index expression's value in each of `n` lanes.
/// A variable across the lanes of a chunk.
pub(super) enum Lane<'a> {
    /// The same in every lane (an outer loop).
    Same(i64),
    /// `start + k` in lane `k` (the lane loop).
    From(i64),
    /// Given per lane (an iterator already evaluated).
    Each(&'a [i64]),
}

/// An index expression's value in each of `n` lanes, one node at a time
/// over all lanes (so the arithmetic vectorizes); `at(v)` says how
/// variable `v` varies across the lanes.
pub(super) fn lane_values<'a>(x: &Index, n: usize, at: &dyn Fn(Var) -> Lane<'a>) -> Vec<i64> {
    let each = |a: &Index, f: &dyn Fn(i64) -> i64| {
        let mut v = lane_values(a, n, at);
        v.iter_mut().for_each(|x| *x = f(*x));
        v
    };
    match x {
        Index::Const(c) => vec![*c; n],
        Index::Var(v) => match at(*v) {
            Lane::Same(c) => vec![c; n],
            Lane::From(s) => (s..s + n as i64).collect(),
            Lane::Each(values) => values[..n].to_vec(),
        },
        Index::Add(a, b) => {
            let mut a = lane_values(a, n, at);
            let b = lane_values(b, n, at);
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            a
        }
        Index::Mul(a, c) => each(a, &|x| x * c),
        Index::Div(a, c) => each(a, &|x| x.div_euclid(*c)),
        Index::Mod(a, c) => each(a, &|x| x.rem_euclid(*c)),
    }
}
