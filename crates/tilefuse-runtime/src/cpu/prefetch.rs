//! Prefetching in a loop's passes. A loop whose body reads the same rows
//! of an input in several passes (a softmax's max, then its `exp`; a
//! layer norm's mean, variance and normalization) reads them from memory
//! in its first pass only, and its later passes compute on cached rows
//! while the memory system idles. So the last pass that reads such a load
//! asks for the lanes that the loop's next iteration will read, tile by
//! tile, and the next first pass finds them in cache. Threads run a
//! parallel loop's iterations in runs of consecutive ones
//! (`Ctx::parallel_nest`), so the next iteration is most often their own.
//! That pass also asks for the elements a later pass of the iteration
//! stores (a softmax's division writes its row of the output), so that
//! those stores find their lines in cache instead of waiting for them.
//!
//! The 4096² softmax (`benches/ab_builds.py`): 0.92x the time with the
//! next row prefetched during its `exp`, 0.78x (one thread) and 0.84x
//! (two) with the output's row as well; the layer norm 0.89-0.91x
//! (BENCHMARKS.md).

use tilefuse_sched::ir::{BufferId, Index, Kernel, LoopId, Role, Scope, Var};

use super::code::{BlockCode, Step, TapeCode, TapeStore};

/// Lanes an iteration's pass may read for the loop to prefetch them: 256
/// KB of f32, what a core's L2 holds beside the pass's own (rows up to
/// 65536 gained 5-18 %).
const MAX_LANES: i64 = 1 << 16;

/// A run of elements as the passes of one iteration compare them: buffer
/// and offset at lane 0, with the variables of loops of one iteration at
/// 0 (each pass has its own such loops around its lanes).
type Run = (usize, Index);

/// A pass of an iteration: a serial lane step with a tape, its lanes, and
/// whether it runs once an iteration (under loops of one iteration only).
struct Pass<'s> {
    lanes: i64,
    once: bool,
    block: &'s mut BlockCode,
}

/// Marks, in the tapes of `body` (the body of loop `l`), what to
/// prefetch: in the last pass that reads an input that an earlier pass
/// read at the same offsets, those offsets one iteration of `l` ahead
/// (where they move with `l`); and, in that pass, the elements that later
/// passes store, where all of them run once an iteration over the same
/// lanes. A tape that an inner loop marked keeps its marks.
pub(super) fn plan(kernel: &Kernel, l: LoopId, body: &mut [Step]) {
    let mut passes = Vec::new();
    collect(body, 1, &mut passes);
    let unit = |v: Var| match v {
        Var::Loop(id) if kernel.loop_(id).extent == 1 => Some(Index::Const(0)),
        _ => None,
    };
    let run = |buffer: usize, at: &Index| (buffer, at.subst(&unit).simplified());
    let reads: Vec<Vec<Run>> = (passes.iter())
        .map(|p| {
            let loads = tape_of(p.block).tape.consecutive_loads();
            loads.map(|(_, b, at)| run(b, at.index())).collect()
        })
        .collect();
    let stores: Vec<Option<Run>> = (passes.iter())
        .map(|p| {
            let code = tape_of(p.block);
            let buffer = p.block.store.buffer;
            let global = kernel.buffer(BufferId(buffer as u32)).scope == Scope::Global;
            let lanes = matches!(code.into, TapeStore::Lanes) && code.scatter.is_none();
            (lanes && global).then(|| run(buffer, code.store.index()))
        })
        .collect();
    let input = |b: usize| matches!(kernel.buffer(BufferId(b as u32)).role, Role::Input(_));
    let next = |(b, at): &Run| {
        let (stride, _) = at.linear_in(Var::Loop(l))?;
        (stride > 0).then(|| (*b, (at.clone() + Index::Const(stride)).simplified()))
    };
    let shape: Vec<(i64, bool)> = passes.iter().map(|p| (p.lanes, p.once)).collect();
    for (k, pass) in passes.iter_mut().enumerate() {
        let last_reread = |read: &&Run| {
            let in_pass = |pass: &Vec<Run>| pass.contains(read);
            input(read.0) && reads[..k].iter().any(in_pass) && !reads[k + 1..].iter().any(in_pass)
        };
        let mut ahead: Vec<Run> = reads[k]
            .iter()
            .filter(last_reread)
            .filter_map(next)
            .collect();
        let tape = &mut tape_of_mut(pass.block).tape;
        if ahead.is_empty() || tape.ahead().next().is_some() {
            continue;
        }
        let same_lanes = shape[k..].iter().all(|&s| s == (pass.lanes, true));
        if same_lanes {
            ahead.extend(stores[k + 1..].iter().flatten().cloned());
        }
        for (buffer, at) in ahead {
            tape.prefetch(buffer, at);
        }
    }
}

fn tape_of(block: &BlockCode) -> &TapeCode {
    block.tape.as_ref().expect("passes have tapes")
}

fn tape_of_mut(block: &mut BlockCode) -> &mut TapeCode {
    block.tape.as_mut().expect("passes have tapes")
}

/// The serial lane steps with tapes in `steps`, in the order they run,
/// that take at most [`MAX_LANES`] lanes an iteration of the loop around
/// `steps` (which runs them `runs` times): through serial loops, not
/// through other steps.
fn collect<'s>(steps: &'s mut [Step], runs: i64, out: &mut Vec<Pass<'s>>) {
    for step in steps {
        match step {
            Step::Lanes {
                extent,
                block,
                parallel: false,
                ..
            } if block.tape.is_some() && runs.saturating_mul(*extent) <= MAX_LANES => {
                out.push(Pass {
                    lanes: *extent,
                    once: runs == 1,
                    block,
                })
            }
            Step::Loop {
                extent,
                parallel: false,
                body,
                ..
            } => collect(body, runs.saturating_mul(*extent), out),
            _ => {}
        }
    }
}
