//! The kernel → program compiler: each node becomes a step, a loop
//! around a single block a lane step (with a tape where its value and
//! store allow), recognized nests the GEMM or row-by-row fast paths.

use tilefuse_sched::ir::{Index, Kernel, LoopId, Node, Var, flat_offset};

use super::block::compile_block;
use super::coalesce::coalesced;
use super::code::{Counted, MIN_PARALLEL_WORK, RowsCode, Step, TapeStore};
use super::gemm_match::gemm_code;
use super::loop_index::LoopIndex;
use super::nest::{hoisted_bounds, in_one_thread, single_block, through_units};
use super::prefetch;

pub(super) fn compile_node(kernel: &Kernel, node: &Node) -> Step {
    match node {
        Node::Block(b) => Step::Block(compile_block(kernel, kernel.block(*b), None)),
        Node::Loop(..) if let Some(g) = gemm_code(kernel, node) => Step::Gemm(Box::new(g)),
        Node::Loop(l, body) if let Some(r) = rows_code(kernel, *l, body) => Step::Rows(Box::new(r)),
        Node::Loop(l, body) if let Some(s) = coalesced(kernel, *l, body) => s,
        Node::Loop(l, body) => {
            let lp = kernel.loop_(*l);
            let parallel = !in_one_thread(kernel, *l);
            match single_block(kernel, body) {
                Some(b) if !parallel => Step::Lanes {
                    var: l.0 as usize,
                    extent: lp.extent as i64,
                    block: compile_block(kernel, kernel.block(b), Some(Var::Loop(*l))),
                    parallel: false,
                },
                _ => {
                    let mut steps: Vec<Step> =
                        body.iter().map(|n| compile_node(kernel, n)).collect();
                    if lp.extent > 1 {
                        prefetch::plan(kernel, *l, &mut steps);
                    }
                    let work = lp.extent.saturating_mul(Step::total_work(&steps));
                    Step::Loop {
                        var: l.0 as usize,
                        extent: lp.extent as i64,
                        parallel: parallel && work >= MIN_PARALLEL_WORK,
                        bounds: (hoisted_bounds(kernel, *l).into_iter())
                            .map(|(x, b)| (LoopIndex::new(x), b))
                            .collect(),
                        body: steps,
                    }
                }
            }
        }
    }
}

/// Multiply-adds of the GEMM micro-kernel per block instance of the
/// estimate: they come 16 to a vector instruction (a 32^3 matmul on two
/// threads: 4.9 µs serially, 6.2 through the pool).
const FMAS_PER_INSTANCE: u64 = 16;

impl Step {
    /// Block instances the step runs (an estimate of its work).
    pub(super) fn work(&self) -> u64 {
        match self {
            Step::Block(_) => 1,
            Step::Lanes { extent, .. } => *extent as u64,
            Step::Rows(r) => (r.r.extent as u64).saturating_mul(r.lanes.extent as u64),
            Step::Gemm(g) => {
                (g.k as u64)
                    .saturating_mul(g.rows as u64)
                    .saturating_mul(g.lanes as u64)
                    / FMAS_PER_INSTANCE
            }
            Step::Loop { extent, body, .. } => {
                (*extent as u64).saturating_mul(Step::total_work(body))
            }
        }
    }

    pub(super) fn total_work(steps: &[Step]) -> u64 {
        steps.iter().fold(0, |sum, s| sum.saturating_add(s.work()))
    }
}

/// The outer-reduction nest under loop `r`, if `body` is one: a serial
/// loop over lanes `j` (through loops of one iteration) whose block has a
/// combining tape, stores to elements that do not move with `r`, reads
/// loads that move linearly with it, has bounds that do not move with `r`
/// either, and whose reduce iterators, flattened in order, `r` drives
/// upward (so only `r = 0` can be an element's first visit; a fused
/// loop's quotient and remainder flatten back into it).
pub(super) fn rows_code(kernel: &Kernel, r: LoopId, body: &[Node]) -> Option<RowsCode> {
    let mut units = Vec::new();
    let Node::Loop(j, j_body) = through_units(kernel, body, &mut units)? else {
        return None;
    };
    if !in_one_thread(kernel, r) || !in_one_thread(kernel, *j) {
        return None;
    }
    let id = single_block(kernel, j_body)?;
    let block = compile_block(kernel, kernel.block(id), Some(Var::Loop(*j)));
    let tape = block.tape.as_ref()?;
    // Bounds hold for the same lanes in every row (checked once a call).
    let rv = Var::Loop(r);
    let moves = |x: &LoopIndex| x.index().mentions(rv);
    if block.uniform.iter().any(|(x, _)| moves(x)) || block.prefix.iter().any(|p| moves(&p.rest)) {
        return None;
    }
    // The reduce iterators flattened in their order (a fused loop's
    // quotient and remainder recombine into it) rise with `r`.
    let iters = &kernel.block(id).iters;
    let (indices, extents): (Vec<Index>, Vec<u64>) = (block.reduce_iters.iter())
        .map(|&i| (block.bindings[i].index().clone(), iters[i].extent))
        .unzip();
    let flat = kernel.within_loops(&flat_offset(&indices, &extents));
    let drives_up = flat.linear_in(rv).is_some_and(|(coef, _)| coef > 0);
    let combines = matches!(tape.into, TapeStore::Combine(_)) && tape.scatter.is_none();
    if !combines || tape.store.index().mentions(rv) || !tape.tape.linear_in(rv) || !drives_up {
        return None;
    }
    Some(RowsCode {
        r: Counted::of(kernel, r),
        lanes: Counted::of(kernel, *j),
        block,
    })
}

/// The steps a schedule compiles to on the CPU, for tests of which paths
/// run.
#[cfg(test)]
pub(super) fn compiled(schedule: &tilefuse_sched::Schedule) -> Vec<Step> {
    let kernel = tilefuse_sched::lower(schedule.kernel(), tilefuse_sched::Target::Cpu)
        .unwrap()
        .kernel;
    kernel
        .body
        .iter()
        .map(|n| compile_node(&kernel, n))
        .collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prefetch_tests;
