//! Loop chains around one storing block run as one lane step: in their
//! nest's order where that is contiguous, else in the order of how far
//! each loop moves the store.

use tilefuse_sched::ir::{Block, Index, Kernel, LoopId, Node, Scope, Var, flat_offset};

use super::block::{all_loads, compile_block};
use super::code::{MIN_PARALLEL_WORK, Step};
use super::nest::{in_one_thread, loop_chain};
use super::value::Access;

/// A chain of loops, each the only child of the one before (looking
/// through loops of one iteration), around one block that stores through
/// a tape, when the chain is contiguous: each loop moves every access by
/// the inner loops' extents times the innermost's step. One lane step
/// over all their iterations then runs the chain (their variables stay
/// 0), spread over the threads where the chain has a parallel or
/// workgroup loop and does not reduce. Schedulers split a GPU's stores
/// into unrolled vec4s and bind rows to workgroups; lane by lane, a
/// 64-wide store in 16 steps of 4 cost a 64^3 matmul 40 % of its time in
/// index evaluation, and a 256 x 128 chain a row at a time 25 %; a 256 x
/// 64 layer norm's rows reduced in 32 steps of 2 took 0.95 ms, 0.06 as
/// one fold. A chain in one thread that is contiguous only in another
/// order runs in that order (see [`reordered`]).
pub(super) fn coalesced(kernel: &Kernel, outer: LoopId, body: &[Node]) -> Option<Step> {
    let (inner, id) = loop_chain(kernel, body, &mut Vec::new())?;
    let chain: Vec<LoopId> = std::iter::once(outer).chain(inner).collect();
    let block = kernel.block(id);
    let reduces = block.reduce.is_some();
    // A reduction's lanes fold into shared elements: in one thread only.
    if reduces && !chain.iter().all(|&l| in_one_thread(kernel, l)) {
        return None;
    }
    if chain.len() >= 2
        && let Some(step) = lane_step(kernel, &chain, block)
    {
        return Some(step);
    }
    // Another order must give a longer lane step than the innermost loop
    // where that runs through a tape, and a reduction whose innermost
    // loop folds, or combines into contiguous elements, keeps its order
    // (reordered, a column sum's rows would fold as gathers).
    let last = *chain.last()?;
    let more_than = match compile_block(kernel, block, Some(Var::Loop(last))).tape {
        None => 1,
        Some(t) if reduces && t.stride <= 1 => return None,
        Some(_) => kernel.loop_(last).extent as i64,
    };
    reordered(kernel, &chain, block, more_than)
}

/// The chain's loops sorted by how far each moves the store, outermost
/// first, when all run in one thread and no load reads the stored buffer
/// (so no iteration depends on another): the longest run of innermost
/// loops of that order that is contiguous, and longer than `more_than`
/// lanes, becomes one lane step, inside the other loops in their nest's
/// order. A GPU schedule splits a tile's rows and columns over
/// invocations and then within them (an invocation of 4 x 4 elements:
/// row, column, row, column), so its accumulator's start and store ran 4
/// lanes at a time; so they run 32 (a 256^3 matmul in such invocations:
/// 2.3 ms, then 0.5 ms). A reduction's own loops, which do not move its
/// store, sort innermost in their order, so each element still takes its
/// values in order: a cross-invocation reduction's partial sums (each
/// invocation's every `n`-th element of a row) become folds of strided
/// loads (a 100 x 256 softmax in 2 invocations a row: 8 ms, then 0.11).
fn reordered(kernel: &Kernel, chain: &[LoopId], block: &Block, more_than: i64) -> Option<Step> {
    let store = flat_offset(&block.indices, &kernel.buffer(block.buffer).shape);
    let store = kernel.offset_over_loops(block, &store);
    let mut order: Vec<(i64, LoopId)> = (chain.iter())
        .map(|&l| Some((store.linear_in(Var::Loop(l))?.0, l)))
        .collect::<Option<_>>()?;
    order.sort_by_key(|&(stride, _)| std::cmp::Reverse(stride));
    let order: Vec<LoopId> = order.into_iter().map(|(_, l)| l).collect();
    let mut loads = Vec::new();
    block.value.loads(&mut loads);
    let in_place = loads.iter().any(|&(b, _)| b == block.buffer);
    if order == chain || in_place || !chain.iter().all(|&l| in_one_thread(kernel, l)) {
        return None;
    }
    let (lanes, mut step) = (0..order.len())
        .filter(|&i| iterations(kernel, &order[i..]) > more_than)
        .find_map(|i| Some((&order[i..], lane_step(kernel, &order[i..], block)?)))?;
    for &l in chain.iter().rev().filter(|l| !lanes.contains(l)) {
        step = Step::Loop {
            var: l.0 as usize,
            extent: kernel.loop_(l).extent as i64,
            parallel: false,
            bounds: Vec::new(),
            body: vec![step],
        };
    }
    Some(step)
}

/// `block` as one lane step over the `chain` of loops (outermost first),
/// when they move every access as one variable would and the block
/// stores through a tape.
fn lane_step(kernel: &Kernel, chain: &[LoopId], block: &Block) -> Option<Step> {
    let lane = *chain.last()?;
    let code = compile_block(kernel, block, Some(Var::Loop(lane)));
    code.tape.as_ref()?;
    // Whether `x` moves with the chain as one variable would: each loop
    // by the inner loops' extents times the innermost's step.
    let as_one = |x: &Index, lane_step: i64| {
        let mut step = lane_step;
        chain.windows(2).rev().all(|pair| {
            step *= kernel.loop_(pair[1]).extent as i64;
            (x.linear_in(Var::Loop(pair[0]))).is_some_and(|(coef, _)| coef == step)
        })
    };
    let contiguous = |a: &Access| {
        let step = a.linear.as_ref().map_or(0, |(coef, _)| *coef);
        as_one(&kernel.offset_over_loops(block, &a.offset), step)
    };
    if !contiguous(&code.store) || !all_loads(&code.value, &contiguous) {
        return None;
    }
    // The chain's lanes run as one variable past the innermost extent: a
    // bound must not move with them, or hold for a prefix of that variable.
    let in_chain = |x: &Index| chain.iter().any(|&l| x.mentions(Var::Loop(l)));
    if code.uniform.iter().any(|(x, _)| in_chain(x.index()))
        || !code.prefix.iter().all(|p| as_one(p.rest.index(), p.coef))
    {
        return None;
    }
    // Across threads, every lane must be independent of the others and
    // of the thread: global buffers only, none both loaded and stored.
    let threaded = !chain.iter().all(|&l| in_one_thread(kernel, l));
    let global = |a: &Access| kernel.buffers[a.buffer].scope == Scope::Global;
    let independent = global(&code.store)
        && all_loads(&code.value, &|a| global(a) && a.buffer != code.store.buffer);
    if threaded && !independent {
        return None;
    }
    let extent = iterations(kernel, chain);
    Some(Step::Lanes {
        var: lane.0 as usize,
        extent,
        block: code,
        parallel: threaded && extent as u64 >= MIN_PARALLEL_WORK,
    })
}

/// The iterations of a nest of `loops`.
fn iterations(kernel: &Kernel, loops: &[LoopId]) -> i64 {
    (loops.iter())
        .map(|&l| kernel.loop_(l).extent as i64)
        .product()
}
