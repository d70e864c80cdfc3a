//! Lowering: every pass between a schedule and code, in order, in one list
//! (Halide's `Lower.cpp`). A scheduled kernel is lowered once per build;
//! WGSL codegen, the CPU device and the schedulers' limit checks all read
//! the one [`Lowered`] it yields. Passes that only one target needs are
//! guarded by the [`Target`], so a CPU build never forms WGSL and a GPU
//! kernel keeps its nests as scheduled.
//!
//! `TILEFUSE_DUMP=lower` prints the state after each pass to stderr
//! ("(unchanged)" when the pass changed nothing); [`lower_steps`] returns
//! the same as data (Python's `Schedule.lower()`).

mod barriers;
mod bindings;
mod clip;
mod cross_invocation;
mod distribute;
mod fold;
mod launch;
mod localize;
mod realize;
mod software_pipeline;
mod spine;
mod unfuse;
mod vectorize;

use std::fmt;

pub use barriers::{Barrier, Barriers};
pub use distribute::SHORT_NEST;
pub use launch::{
    Launch, LaunchError, LaunchLimit, MAX_COPIED_LOOP_STEPS, MAX_STAGE_BYTES, MAX_UNROLLED_BLOCKS,
    launch_violations, verify_launch,
};
pub use vectorize::{VecStep, Vectors};

use crate::DeviceInfo;
use crate::ir::Kernel;

/// What a kernel is lowered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The CPU device: a workgroup's invocations run in turn on one thread,
    /// so private buffers are per workgroup; no WGSL-only passes.
    Cpu,
    /// WGSL for a wgpu device: one private copy per invocation, vec4
    /// steps, launch grids, barriers.
    Wgsl,
}

impl Target {
    /// The target a device runs kernels as.
    pub fn of(device: &DeviceInfo) -> Target {
        if device.is_gpu() {
            Target::Wgsl
        } else {
            Target::Cpu
        }
    }
}

/// A pass that could not lower the kernel: the schedule asks for something
/// the target cannot do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{pass}: {message}")]
pub struct LowerError {
    /// The pass that failed (a name from [`PASSES`]).
    pub pass: &'static str,
    pub message: String,
}

/// A kernel after lowering: the rewritten kernel and what the analyses
/// found (empty where the target skipped them).
#[derive(Clone, Debug)]
pub struct Lowered {
    pub target: Target,
    pub kernel: Kernel,
    /// Loops run as one `vec4` step (`vectorize`).
    pub vectors: Vectors,
    /// One per root loop nest: grid, workgroup and resources (`launch`).
    pub launches: Vec<Launch>,
    /// Where invocations wait for each other (`place_barriers`).
    pub barriers: Barriers,
}

type Run = fn(&mut Lowered) -> Result<(), LowerError>;

/// One pass: its name (the dump's heading), the one target that needs it
/// (`None`: every target), and what it does.
pub struct Pass {
    pub name: &'static str,
    pub only: Option<Target>,
    run: Run,
}

/// Every pass after scheduling, in the order they run.
pub const PASSES: &[Pass] = &[
    // Literal arithmetic evaluated; loads of a buffer that holds one
    // literal (an empty reduction's result) read it. First, so that every
    // analysis sees the loads codegen emits.
    pass("fold_constants", WGSL, fold::run),
    // Iterator bindings simplified within the loops' ranges: a fused loop
    // split at the inner axis's extent binds without a division.
    pass("simplify_bindings", ALL, bindings::run),
    // Workgroup and private buffers shrink to the region one iteration uses.
    pass("realize_buffers", ALL, realize::run),
    // Pipelined loops get rotating stages, a prologue and copies ahead.
    pass("software_pipeline", ALL, software_pipeline::run),
    // A fused serial loop read only as quotient and remainder of one
    // divisor becomes two loops (lanes that move linearly on the CPU).
    pass("split_fused_loops", CPU, unfuse::run),
    // A loop of short nests, each iteration writing its own elements,
    // becomes one loop per nest (long lane steps on the CPU).
    pass("distribute_short_nests", CPU, distribute::run),
    // No workgroup-bound loop under a loop with several children.
    pass("verify_workgroup_spine", WGSL, spine::run),
    // Which vectorized loops become one vec4 step.
    pass("vectorize", WGSL, vectorize::run),
    // Each root nest's grid, workgroup size, loop budget and memory.
    pass("launch", ALL, launch::run),
    // Loop tails no block under them runs (a workgroup wider than its
    // row) dropped, after the launch is checked as scheduled.
    pass("clip_guarded_loops", CPU, clip::run),
    // Reductions across invocations span their axis; subgroup widths.
    pass("cross_invocation", WGSL, cross_invocation::run),
    // Barriers where invocations hand data to each other.
    pass("place_barriers", WGSL, barriers::run),
    // Local-buffer accesses over loop variables, simplified.
    pass("localize_indices", WGSL, localize::run),
];

const ALL: Option<Target> = None;
const WGSL: Option<Target> = Some(Target::Wgsl);
const CPU: Option<Target> = Some(Target::Cpu);

const fn pass(name: &'static str, only: Option<Target>, run: Run) -> Pass {
    Pass { name, only, run }
}

/// Lowers a scheduled kernel for `target`, running every pass in
/// [`PASSES`] the target needs (and dumping each with
/// `TILEFUSE_DUMP=lower`).
pub fn lower(kernel: &Kernel, target: Target) -> Result<Lowered, LowerError> {
    if !dump_enabled() {
        return run_passes(kernel, target, None);
    }
    run_passes(
        kernel,
        target,
        Some(&mut |name, text, changed| {
            eprintln!(
                "[lower] {name}\n{}",
                if changed { text } else { "(unchanged)\n" }
            );
        }),
    )
}

/// One pass as [`lower_steps`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LowerStep {
    pub pass: &'static str,
    /// The state after the pass: the kernel, then what analyses found.
    pub text: String,
    /// Whether the pass changed the state.
    pub changed: bool,
}

/// Each pass `target` runs with the state it leaves: for reading what
/// lowering does (Python's `Schedule.lower()`).
pub fn lower_steps(kernel: &Kernel, target: Target) -> Result<Vec<LowerStep>, LowerError> {
    let mut steps = Vec::new();
    run_passes(
        kernel,
        target,
        Some(&mut |pass, text, changed| {
            steps.push(LowerStep {
                pass,
                text: text.to_owned(),
                changed,
            });
        }),
    )?;
    Ok(steps)
}

/// Told each pass's name, the state it left (printed) and whether that
/// differs from the state before it.
type Observer<'a> = &'a mut dyn FnMut(&'static str, &str, bool);

/// Runs the passes `target` needs; the state is printed only for an
/// observer.
fn run_passes(
    kernel: &Kernel,
    target: Target,
    mut observer: Option<Observer<'_>>,
) -> Result<Lowered, LowerError> {
    let mut l = Lowered {
        target,
        kernel: kernel.clone(),
        vectors: Vectors::default(),
        launches: Vec::new(),
        barriers: Barriers::default(),
    };
    let mut last = observer.as_ref().map(|_| l.to_string());
    for p in PASSES {
        if p.only.is_some_and(|only| only != target) {
            continue;
        }
        (p.run)(&mut l)?;
        if let (Some(after), Some(last)) = (observer.as_mut(), last.as_mut()) {
            let now = l.to_string();
            after(p.name, &now, now != *last);
            *last = now;
        }
    }
    Ok(l)
}

fn dump_enabled() -> bool {
    std::env::var("TILEFUSE_DUMP").is_ok_and(|v| v.split(',').any(|w| w.trim() == "lower"))
}

impl fmt::Display for Lowered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.kernel)?;
        write!(f, "{}", self.vectors.display(&self.kernel))?;
        for (i, launch) in self.launches.iter().enumerate() {
            writeln!(f, "# stage{i}: {launch}")?;
        }
        write!(f, "{}", self.barriers.display(&self.kernel))
    }
}
