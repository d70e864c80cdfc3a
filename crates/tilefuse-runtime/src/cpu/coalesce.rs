//! Loop chains around one storing block run as one lane step: in their
//! nest's order where that is contiguous, else in the order of how far
//! each loop moves the store.

use tilefuse_sched::ir::{Block, Index, Kernel, LoopId, Node, Scope, Var, flat_offset};

use super::block::{all_loads, compile_block, tape_into};
use super::code::{BlockCode, LaneBound, MIN_PARALLEL_WORK, Step, TapeCode, TapeStore};
use super::gemm_match::gemm_code;
use super::nest::{in_one_thread, loop_chain, through_units};
use super::scatter::Scatter;
use super::tape::{Period, TILE, transposed};
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
    // A reduction's lanes fold into shared elements: in one thread only;
    // and a nest the GEMM micro-kernel takes is left to it.
    if reduces && (!chain.iter().all(|&l| in_one_thread(kernel, l)) || holds_gemm(kernel, body)) {
        return None;
    }
    if chain.len() >= 2
        && let Some(step) = lane_step(kernel, &chain, block)
    {
        return Some(step);
    }
    // Another order must give a longer lane step than the innermost loop
    // where that runs through a tape. A reduction whose innermost loop
    // folds, or combines into consecutive elements, in long steps keeps
    // its order (reordered, a column sum's rows would fold as gathers).
    // A reduction's short steps, and a fold's rows of up to
    // `MAX_FOLDED_ROW`, give way to the whole chain scattering its
    // stores (its rows fold one after another). Stores that do not
    // reduce keep their short steps: a fuzzed matmul's staged copies
    // scattered took it from 1.8 to 2.7-3.8 ms (a scattered lane stores
    // alone; a short step's lanes together).
    let last = *chain.last()?;
    let extent = kernel.loop_(last).extent as i64;
    let innermost = compile_block(kernel, block, Some(Var::Loop(last)));
    let rows = iterations(kernel, &chain[..chain.len() - 1]);
    let folds = matches!(
        innermost.tape.as_ref().map(|t| t.into),
        Some(TapeStore::Fold(_))
    );
    let in_rows = (extent < STAGED_BELOW || folds && extent <= MAX_FOLDED_ROW)
        && reduces
        && rows >= MIN_ROWS_IN_CHAIN;
    let short = innermost.tape.is_none() || extent < LONG_LANES || in_rows;
    if reduces && !short && innermost.tape.as_ref().is_some_and(|t| t.scatter.is_none()) {
        return None;
    }
    let more_than = if innermost.tape.is_some() { extent } else { 1 };
    reordered(kernel, &chain, block, more_than).or_else(|| {
        (short && reduces)
            .then(|| scattered(kernel, &chain, block, innermost))
            .flatten()
            .filter(|step| extent < STAGED_BELOW || folds_rows(step))
    })
}

/// Whether `step` is a lane step whose lanes fold in rows (`scatter`'s
/// segments): a long row scattered lane by lane would cost far more than
/// a lane step of its own.
fn folds_rows(step: &Step) -> bool {
    let Step::Lanes { block, .. } = step else {
        return false;
    };
    (block.tape.as_ref()).is_some_and(|t| t.in_rows().is_some())
}

/// Lanes per step from which a lane step's fixed cost (some 50 ns) no
/// longer matters beside the lanes' work, even at the 1-2 ns a lane of a
/// scattered store.
const LONG_LANES: i64 = 64;

/// A reduction's innermost steps shorter than this give way to its whole
/// chain scattering its lanes even where they do not fold in rows (their
/// lanes staged, then combined lane by lane); longer ones only where they
/// do, or a long row would be combined lane by lane.
const STAGED_BELOW: i64 = 128;

/// Rows a chain must hold for its reduction to fold in rows (see
/// `scatter::Segments`) rather than each in a lane step of its own.
const MIN_ROWS_IN_CHAIN: i64 = 8;

/// Longer rows fold one after another through the tape (see
/// `scatter::Segments`) up to this length, instead of a lane step each:
/// a row's lane step cost some 100 ns of index evaluation before its
/// lanes, a quarter of a one-thread 16384 x 128 softmax. Past it, that
/// cost no longer shows.
const MAX_FOLDED_ROW: i64 = 4096;

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
    let mut code = compile_block(kernel, block, Some(Var::Loop(lane)));
    if !contiguous(kernel, chain, block, &code.store)
        || !loads_and_bounds_as_one(kernel, chain, block, &code)
    {
        return None;
    }
    wrap_loads(kernel, chain, code.tape.as_mut()?)?;
    wrap_bounds(kernel, chain, &mut code);
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

/// Whether a loop of the chain in `body` starts a nest the GEMM matcher
/// takes (it is tried at each loop before the chain around it).
fn holds_gemm(kernel: &Kernel, mut body: &[Node]) -> bool {
    while let Some(node @ Node::Loop(_, inner)) = through_units(kernel, body, &mut Vec::new()) {
        if gemm_code(kernel, node).is_some() {
            return true;
        }
        body = inner;
    }
    false
}

/// The iterations of a nest of `loops`.
fn iterations(kernel: &Kernel, loops: &[LoopId]) -> i64 {
    (loops.iter())
        .map(|&l| kernel.loop_(l).extent as i64)
        .product()
}

/// Whether `x` moves with the `chain` as one variable would: each loop by
/// the inner loops' extents times the innermost's step.
fn as_one(kernel: &Kernel, chain: &[LoopId], x: &Index, lane_step: i64) -> bool {
    let mut step = lane_step;
    chain.windows(2).rev().all(|pair| {
        step *= kernel.loop_(pair[1]).extent as i64;
        (x.linear_in(Var::Loop(pair[0]))).is_some_and(|(coef, _)| coef == step)
    })
}

/// Whether access `a` of `block` moves with the `chain` as one variable.
fn contiguous(kernel: &Kernel, chain: &[LoopId], block: &Block, a: &Access) -> bool {
    let step = a.linear.as_ref().map_or(0, |(coef, _)| *coef);
    as_one(
        kernel,
        chain,
        &kernel.offset_over_loops(block, &a.offset),
        step,
    )
}

/// Whether every load of `code` moves with the `chain` as one variable
/// (or wraps around its inner loops, see [`periodic`]), and every bound
/// either does not move with it or holds for a prefix of that variable
/// (the lanes run as one past the innermost extent).
fn loads_and_bounds_as_one(
    kernel: &Kernel,
    chain: &[LoopId],
    block: &Block,
    code: &BlockCode,
) -> bool {
    let moves = |x: &Index| in_chain(chain, x) && periodic(kernel, chain, x, 0).is_none();
    let wraps = |a: &Access| {
        (a.linear.as_ref()).is_some_and(|(coef, rest)| {
            *coef >= 0 && periodic(kernel, chain, rest, *coef as usize).is_some()
        })
    };
    all_loads(&code.value, &|a| {
        contiguous(kernel, chain, block, a) || wraps(a)
    }) && !code.uniform.iter().any(|(x, _)| moves(x.index()))
        && (code.prefix.iter()).all(|p| as_one(kernel, chain, p.rest.index(), p.coef))
}

/// `(period, step)` of a load whose offset (`x` over loop variables but
/// the lane's, `stride` along the lane) the `chain`'s inner loops move as
/// one variable and its outer loops as another, but not all as one: in a
/// lane step over the chain, lane `i` reads `(i / period) * step + (i %
/// period) * stride` past lane 0 (`period` the inner loops' iterations,
/// at most [`MAX_PERIOD`]). A short row's statistic (its maximum, read
/// by each element of the row) made softmax rows of 16 run a lane step a
/// row, and so did a layer norm's weights.
fn periodic(kernel: &Kernel, chain: &[LoopId], x: &Index, stride: usize) -> Option<Period> {
    let extent = |k: usize| kernel.loop_(chain[k]).extent as i64;
    let mut coefs = (chain[..chain.len() - 1].iter())
        .map(|&l| Some(x.linear_in(Var::Loop(l))?.0))
        .collect::<Option<Vec<i64>>>()?;
    coefs.push(stride as i64);
    // Loops `split..` move the load as one: each by the next one's extent
    // times the next one's step.
    let split = (1..chain.len())
        .rev()
        .find(|&k| coefs[k - 1] != coefs[k] * extent(k))?;
    let period = iterations(kernel, &chain[split..]);
    let step = coefs[split - 1];
    let outer_as_one = (1..split).all(|k| coefs[k - 1] == coefs[k] * extent(k));
    (outer_as_one && step >= 0 && (period <= MAX_PERIOD || transposed(step as usize, stride)))
        .then_some((period as usize, step as usize))
}

/// Lanes past which a row runs as a lane step of its own rather than
/// wrapping loads around it: a long row's fixed cost no longer matters,
/// and gathering its loads would cost more than reading them in place
/// (softmax rows of 512 and 1024 wrapped took 1.06x the time). A
/// transposed read (its rows nearer than its lanes) wraps at any length:
/// the lane step's runs of many rows then gather it a column at a time
/// (`LaneLoad::gather_transposed`).
const MAX_PERIOD: i64 = TILE as i64;

/// Gives the loads of `code`'s tape the periods [`periodic`] finds over
/// the `chain`; `None` where that makes more loads than a tape reads.
fn wrap_loads(kernel: &Kernel, chain: &[LoopId], code: &mut TapeCode) -> Option<()> {
    (code.tape)
        .wrap_loads(|x, stride| periodic(kernel, chain, x, stride))
        .then_some(())
}

/// Turns the bounds of `code` the same in every lane of the innermost
/// loop but moving with the `chain`'s outer loops (whole rows past a
/// ragged edge) into bounds on a prefix of the lanes, rows of `period`.
fn wrap_bounds(kernel: &Kernel, chain: &[LoopId], code: &mut BlockCode) {
    let (wrapped, uniform) = std::mem::take(&mut code.uniform)
        .into_iter()
        .partition(|(x, _)| in_chain(chain, x.index()));
    code.uniform = uniform;
    for (x, bound) in wrapped {
        let (period, coef) = periodic(kernel, chain, x.index(), 0).expect("checked");
        code.prefix.push(LaneBound {
            rest: x,
            coef: coef as i64,
            bound,
            period: period as i64,
        });
    }
}

/// Whether `x` moves with a loop of the `chain`.
fn in_chain(chain: &[LoopId], x: &Index) -> bool {
    chain.iter().any(|&l| x.mentions(Var::Loop(l)))
}

/// `block` as one lane step over the `chain` in one thread whose loads
/// move as one variable but whose store does not: its lanes scatter (see
/// `scatter`), each loop moving the store by its own step. Where the
/// loops drive reduce iterators, they must drive them upward: a lane
/// starts its element where all of them are at 0. `code` is the block
/// compiled for lanes of the innermost loop.
fn scattered(
    kernel: &Kernel,
    chain: &[LoopId],
    block: &Block,
    mut code: BlockCode,
) -> Option<Step> {
    let lane = *chain.last()?;
    let one_thread = chain.iter().all(|&l| in_one_thread(kernel, l));
    if !one_thread || code.per_lane {
        return None;
    }
    if !loads_and_bounds_as_one(kernel, chain, block, &code) {
        return None;
    }
    let store = kernel.offset_over_loops(block, &code.store.offset);
    // Whether `l` drives a reduce iterator (upward; `None`: otherwise).
    let drives = |l: LoopId| {
        (code.reduce_iters.iter()).try_fold(false, |any, &i| {
            match code.bindings[i].index().linear_in(Var::Loop(l))?.0 {
                0 => Some(any),
                1.. => Some(true),
                _ => None,
            }
        })
    };
    let digits = (chain.iter())
        .map(|&l| {
            let step = store.linear_in(Var::Loop(l))?.0;
            Some((kernel.loop_(l).extent as i64, step, drives(l)?))
        })
        .collect::<Option<Vec<_>>>()?;
    let into = block.reduce.map_or(TapeStore::Lanes, TapeStore::Combine);
    let mut tape = tape_into(
        kernel,
        &code.value,
        &code.store,
        into,
        Some(Scatter::over(digits)),
    )?;
    wrap_loads(kernel, chain, &mut tape)?;
    wrap_bounds(kernel, chain, &mut code);
    Some(Step::Lanes {
        var: lane.0 as usize,
        extent: iterations(kernel, chain),
        block: BlockCode {
            tape: Some(tape),
            ..code
        },
        parallel: false,
    })
}
