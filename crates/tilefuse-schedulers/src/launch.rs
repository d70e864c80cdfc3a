//! Launch checks, grid binding and loop helpers shared by the schedulers.

use serde_json::{Value, json};
use tilefuse_params::{IndexType, ParamsError, Tunable};

use crate::step::{Step, StepError};
use tilefuse_sched::ir::{BlockId, IterKind, LoopId, ThreadAxis, Var};
use tilefuse_sched::lowering::{LaunchLimit, Target, launch_violations, lower};
use tilefuse_sched::{DeviceInfo, DeviceLimits, Schedule};

/// Params that cannot work: the field at fault and why.
pub(super) fn err(path: &str, message: impl Into<String>) -> StepError {
    StepError::Params(ParamsError::new(path, message))
}

/// Kernels index with u32: the only index type a scheduler accepts.
pub(super) fn check_index_type(index_type: IndexType) -> Step<()> {
    if index_type != IndexType::U32 {
        return Err(err(
            "compile.index_type",
            "only \"u32\" is supported: kernels index with u32",
        ));
    }
    Ok(())
}

/// The workgroup size (`launch.workgroup_size`, given or derived) within
/// the device's per-axis and total limits.
pub(super) fn check_workgroup(size: [u32; 3], limits: &DeviceLimits) -> Step<()> {
    for (d, (&size, &max)) in size.iter().zip(&limits.max_workgroup_size).enumerate() {
        if size > max {
            let axis = ["x", "y", "z"][d];
            return Err(err(
                &format!("launch.workgroup_size[{d}]"),
                format!("{size} exceeds the device's max_compute_workgroup_size_{axis} ({max})"),
            ));
        }
    }
    let n: u32 = size.iter().product();
    if n > limits.max_invocations_per_workgroup {
        return Err(err(
            "launch.workgroup_size",
            format!(
                "{n} invocations exceed the device's max_compute_invocations_per_workgroup ({})",
                limits.max_invocations_per_workgroup
            ),
        ));
    }
    Ok(())
}

/// Binds `grid` to the workgroup `axis`, first split so that at most `cap`
/// workgroups run along it (the rest becomes a serial grid-stride loop
/// around it); returns the bound loop.
pub(super) fn bind_capped(
    s: &mut Schedule,
    grid: LoopId,
    axis: ThreadAxis,
    cap: Option<u64>,
) -> Step<LoopId> {
    let extent = s.kernel().loop_(grid).extent;
    let bound = match cap {
        Some(c) if c < extent => s.split(grid, &[None, Some(c)], None)?[1],
        _ => grid,
    };
    s.bind(bound, axis)?;
    Ok(bound)
}

/// The most invocations a CPU device's flat workgroup takes (the pointwise
/// scheduler's, a matmul's later stages): lane steps that wide amortize
/// their index evaluation.
pub(crate) const CPU_WORKGROUP_LANES: u64 = 1024;

/// Moves the reduction loops of `b` inside `rows` (the invocation loop its
/// rows or lanes are bound to) outside it, keeping their order and that of
/// the other loops, where they are one chain of `b`'s own loops.
pub(crate) fn reduce_outside(s: &mut Schedule, b: BlockId, rows: LoopId) -> Step<()> {
    let block = s.kernel().block(b);
    let reduce: Vec<bool> = (block.iters.iter())
        .map(|it| it.kind == IterKind::Reduce)
        .collect();
    axes_outside(s, b, rows, &reduce)
}

/// Moves the loops inside `rows` that bind the iterators of `b` marked in
/// `outside` out of it, as [`reduce_outside`] does for reduction
/// iterators: a pointwise block over an outer reduction's domain then
/// walks its lanes along the kept, contiguous axis, as the reduction does.
pub(crate) fn axes_outside(
    s: &mut Schedule,
    b: BlockId,
    rows: LoopId,
    outside: &[bool],
) -> Step<()> {
    let loops = s.get_loops(b)?;
    let from = loops.iter().position(|&l| l == rows).expect("b's row loop");
    let block = s.kernel().block(b);
    let binds = |l: LoopId| {
        (block.bindings.iter().zip(outside)).any(|(x, &out)| out && x.mentions(Var::Loop(l)))
    };
    let (mut order, spatial): (Vec<LoopId>, Vec<LoopId>) =
        loops[from..].iter().partition(|&&l| binds(l));
    if order.is_empty() {
        return Ok(());
    }
    order.extend(spatial);
    // Where other blocks share these loops (a cross-workgroup stage's
    // partials, a combining block), the nest stays as it is: the same
    // result, with a strided walk per column.
    let _unchanged = s.reorder(&order).is_err();
    Ok(())
}

/// Fuses a chain of fresh loops (`None` when there are none).
pub(super) fn fuse(s: &mut Schedule, loops: &[LoopId]) -> Step<Option<LoopId>> {
    Ok(match loops {
        [] => None,
        [one] => Some(*one),
        _ => Some(s.fuse(loops)?),
    })
}

/// The field a limit's overrun is blamed on, and how to fix it.
#[derive(Clone, Copy)]
pub(super) struct Fix(pub &'static str, pub &'static str);

/// Workgroup memory, the per-invocation loop budget (llvmpipe's) and the
/// code unrolled loops copy out, checked on the schedule lowered for the
/// device, as `ParamsError`s on the given fields rather than `DeviceError`s
/// when the kernel is built.
pub(super) fn check_launch_limits(
    s: &Schedule,
    device: &DeviceInfo,
    storage: Fix,
    loops: Fix,
    unrolled: Fix,
) -> Step<()> {
    let lowered = lower(s.kernel(), Target::of(device))
        .map_err(|e| err("scheduler", format!("the generated kernel is invalid: {e}")))?;
    for e in launch_violations(&lowered, device) {
        let fix = match e.limit {
            LaunchLimit::WorkgroupStorage => storage,
            LaunchLimit::LoopIterations => loops,
            LaunchLimit::UnrolledBlocks | LaunchLimit::CopiedLoopSteps => unrolled,
            _ => continue,
        };
        return Err(err(fix.0, format!("{e}; {}", fix.1)));
    }
    Ok(())
}

/// `launch.workgroup_size` for a tuner: derived (`null`) or `[n, 1, 1]`
/// for powers of two from 32 to what the device allows.
pub(super) fn workgroup_sizes(device: &DeviceInfo) -> Tunable {
    let max = device
        .limits
        .max_invocations_per_workgroup
        .min(device.limits.max_workgroup_size[0]);
    let sizes = std::iter::successors(Some(32u32), |n| Some(n * 2))
        .take_while(|&n| n <= max)
        .map(|n| json!([n, 1, 1]));
    Tunable::choice(
        "launch.workgroup_size",
        std::iter::once(Value::Null).chain(sizes),
    )
}
