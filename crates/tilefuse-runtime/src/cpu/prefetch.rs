//! Prefetching in a loop's passes. A loop whose body reads the same rows
//! of an input in several passes (a softmax's max, then its `exp`; a
//! layer norm's mean, variance and normalization) reads them from memory
//! in its first pass only, and its later passes compute on cached rows
//! while the memory system idles. So the last pass that reads such a load
//! asks for the lanes that the loop's next iteration will read, tile by
//! tile, and the next first pass finds them in cache. Threads run a
//! parallel loop's iterations in runs of consecutive ones
//! (`Ctx::parallel_nest`), so the next iteration is most often their own.
//! An earlier pass also asks for the elements that a later pass of the
//! iteration stores (a softmax's division writes its row of the output),
//! so that those stores find their lines in cache instead of waiting,
//! unless they stream past the caches (`cpu/stream.rs`).
//!
//! `benches/ab_builds.py`, 4096², two threads: the softmax 0.92x the time
//! with the next row prefetched, 0.84x with the output's row as well; the
//! layer norm 0.89x, then 0.88x of that; the RMS norm 0.82x.

use tilefuse_sched::ir::{BufferId, Index, Kernel, LoopId, Role, Scope, Var};

use super::code::{BlockCode, Step, TapeCode, TapeStore};

/// Lanes an iteration's pass may read for the loop to prefetch them: 256
/// KB of f32, what a core's L2 holds beside the pass's own (rows up to
/// 65536 gained 5-18 %).
const MAX_LANES: i64 = 1 << 16;

/// Elements an input needs for its loops to prefetch it: 8 MB of f32,
/// more than the L2 of the cores reading it holds. Smaller ones stay in
/// cache between passes, and asking again only costs: a softmax of 100 x
/// 10000 took 1.10x the time prefetched, one of 400 x 10000 0.87x.
const MIN_ELEMENTS: u64 = 1 << 21;

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
/// prefetch. In the last pass that reads a large input that an earlier
/// pass read at the same offsets (or the one before it: [`next_reads`]):
/// those offsets one iteration of `l` ahead (where they move with `l`).
/// Then, in a body that does so, the elements each later pass stores with
/// plain stores (streamed ones need no line in cache): in that pass when
/// it comes before the store, else in the pass just before the store (a
/// layer norm's variance, whose normalization both reads last and
/// stores), where the passes from the one that asks to the store run once
/// an iteration over the same lanes. A tape that an inner loop marked
/// keeps its marks.
pub(super) fn plan(kernel: &Kernel, l: LoopId, body: &mut [Step]) {
    let mut passes = Vec::new();
    collect(body, 1, &mut passes);
    let marks = marks(kernel, l, &passes);
    for (pass, ahead) in passes.into_iter().zip(marks) {
        let tape = &mut tape_of_mut(pass.block).tape;
        if tape.ahead().next().is_none() {
            for (buffer, at) in ahead {
                tape.prefetch(buffer, at);
            }
        }
    }
}

/// What each pass prefetches (see [`plan`]).
fn marks(kernel: &Kernel, l: LoopId, passes: &[Pass<'_>]) -> Vec<Vec<Run>> {
    let unit = |v: Var| match v {
        Var::Loop(id) if kernel.loop_(id).extent == 1 => Some(Index::Const(0)),
        _ => None,
    };
    let run = |buffer: usize, at: &Index| (buffer, at.subst(&unit).simplified());
    // Each run once a pass (a variance's `(x - mean) * (x - mean)` loads
    // its row twice).
    let reads: Vec<Vec<Run>> = (passes.iter())
        .map(|p| {
            let loads = tape_of(p.block).tape.consecutive_loads();
            loads.fold(Vec::new(), |mut runs, (_, b, at)| {
                let read = run(b, at.index());
                if !runs.contains(&read) {
                    runs.push(read);
                }
                runs
            })
        })
        .collect();
    let mut marks = next_reads(kernel, l, passes, &reads);
    let Some(reader) = marks.iter().rposition(|m| !m.is_empty()) else {
        return marks;
    };
    for (j, pass) in passes.iter().enumerate().skip(1) {
        let Some((buffer, at)) = stored(kernel, pass) else {
            continue;
        };
        let asker = if reader < j { reader } else { j - 1 };
        let alike = |p: &Pass<'_>| p.once && p.lanes == pass.lanes;
        if passes[asker..=j].iter().all(alike) && tape_of(passes[asker].block).tape.runs_tiles() {
            marks[asker].push(run(buffer, at));
        }
    }
    marks
}

/// Per pass that runs tiles, the large inputs it prefetches one iteration
/// of `l` ahead (where they move with `l`): those it reads last of the
/// passes that read them at the same offsets (`reads`). But where that
/// pass streams its stores and two passes before it read them too (a
/// layer norm's normalization), the one before it asks: prefetches and
/// streamed stores wait on the same line-fill buffers (a C layer norm of
/// 4096², two threads: 3.5 ms asked a pass earlier, 3.8-4.0 ms with the
/// stores; here 0.95-0.98x the time).
fn next_reads(
    kernel: &Kernel,
    l: LoopId,
    passes: &[Pass<'_>],
    reads: &[Vec<Run>],
) -> Vec<Vec<Run>> {
    let input = |b: usize| {
        let buffer = kernel.buffer(BufferId(b as u32));
        matches!(buffer.role, Role::Input(_)) && buffer.numel() >= MIN_ELEMENTS
    };
    let next = |(b, at): &Run| {
        let (stride, _) = at.linear_in(Var::Loop(l))?;
        (stride > 0).then(|| (*b, (at.clone() + Index::Const(stride)).simplified()))
    };
    let streams = |k: usize| matches!(tape_of(passes[k].block).into, TapeStore::Stream);
    let asker = |read: &Run| {
        let readers: Vec<usize> = (0..reads.len())
            .filter(|&k| reads[k].contains(read))
            .collect();
        match readers[..] {
            [_, .., before, last] if streams(last) => Some(before),
            [_, .., last] => Some(last),
            _ => None,
        }
    };
    (0..passes.len())
        .map(|k| {
            if !tape_of(passes[k].block).tape.runs_tiles() {
                return Vec::new();
            }
            let asks = |read: &&Run| input(read.0) && asker(read) == Some(k);
            reads[k].iter().filter(asks).filter_map(next).collect()
        })
        .collect()
}

/// The elements a pass stores, consecutively into a global buffer: the
/// buffer and lane 0's offset.
fn stored<'p>(kernel: &Kernel, pass: &'p Pass<'_>) -> Option<(usize, &'p Index)> {
    let code = tape_of(pass.block);
    let buffer = pass.block.store.buffer;
    let global = kernel.buffer(BufferId(buffer as u32)).scope == Scope::Global;
    let lanes = matches!(code.into, TapeStore::Lanes) && code.scatter.is_none();
    (lanes && global).then(|| (buffer, code.store.index()))
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
