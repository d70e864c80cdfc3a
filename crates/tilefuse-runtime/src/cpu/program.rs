//! A kernel compiled for the CPU: an executable tree of steps, and running
//! it. The passes, in order of use: `compile` (with `gemm_match` and
//! `nest`) turns the lowered kernel into `code`'s steps over `value`
//! expressions; `interpret` runs them in a `ctx`.
//!
//! Loops become counted loops over an environment of loop variables. A
//! loop whose body is a single block becomes a *lane step* (so does a
//! chain of loops over contiguous elements around one): f32 blocks
//! whose loads and store are contiguous in the lane (or lane-invariant)
//! run the whole loop through a register-resident tape (see `tape`); the
//! rest run chunks of consecutive iterations at once (`chunk`), over
//! columns (see `lanes`), where loads linear in the lane variable read
//! contiguous or strided runs and anything else gathers. Parallel and
//! workgroup-bound loops are spread over threads.

use std::cell::{Cell, RefCell};
use std::sync::atomic::AtomicBool;

use tilefuse_ir::DType;
use tilefuse_sched::ir::{Kernel, Scope};

use super::code::Step;
use super::compile::compile_node;
use super::ctx::Ctx;
use super::memory::RawBuf;
use super::stream;

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct Program {
    steps: Vec<Step>,
    n_loops: usize,
    /// Workgroup / private buffers (id, dtype, elements): each thread of a
    /// parallel loop gets its own.
    locals: Vec<(usize, DType, usize)>,
}

impl Program {
    pub fn compile(kernel: &Kernel) -> Program {
        let steps = kernel
            .body
            .iter()
            .map(|n| compile_node(kernel, n))
            .collect();
        let locals = kernel
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.scope != Scope::Global)
            .map(|(i, b)| (i, b.dtype, b.numel() as usize))
            .collect();
        Program {
            steps,
            n_loops: kernel.loops.len(),
            locals,
        }
    }

    /// Runs every step on `buffers` (indexed by buffer id); false when an
    /// interrupt was [requested](tilefuse_ir::interrupt::requested) first.
    pub fn run(&self, buffers: &[RawBuf], threads: usize) -> bool {
        let mut env = vec![0i64; self.n_loops];
        let stop = AtomicBool::new(false);
        let ctx = Ctx {
            buffers,
            threads,
            locals: &self.locals,
            registers: RefCell::default(),
            stop: &stop,
            asks: Cell::default(),
        };
        for step in &self.steps {
            ctx.step(step, &mut env, true);
        }
        stream::fence();
        !stop.into_inner()
    }
}
