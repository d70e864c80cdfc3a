//! Automatic schedulers: each reads a params struct and builds a schedule
//! with the same primitives a user calls by hand. Each is a [`Scheduler`]
//! (which fusions it takes, its default heuristic, the schedule it builds,
//! the fields a tuner may set), found by its [`SchedulerKind`] in
//! [`scheduler`]; the functions below dispatch through it on the
//! canonical form of the fusion, with panics contained.

mod canonical;
mod features;
mod launch;
mod lavapipe;
mod matmul;
mod pointwise;
mod reduction;
mod segment;
mod step;
mod tiles;

use std::borrow::Cow;

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::{HeuristicParams, ParamsError, SchedulerKind, Tunable};

pub use features::{Features, ReductionShape, features};
pub use matmul::{Matmul, matmul_heuristics, smem_epilogue_fits};
pub use pointwise::{Pointwise, pointwise_heuristics};
pub use reduction::{Reduction, reduction_heuristics};
pub use segment::{Segment, segments};

use canonical::canonical;
use tilefuse_sched::{DeviceInfo, Schedule};

/// An automatic scheduler, over the canonical form of a fusion.
pub trait Scheduler: Sync {
    /// Its params struct.
    type Params: Clone + Into<HeuristicParams>;
    const KIND: SchedulerKind;

    /// `Ok` when it takes `fusion`, else why not.
    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String>;

    /// The default heuristic's params for `fusion` on `device`.
    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> Self::Params;

    /// The schedule `params` make; params that cannot work for this fusion
    /// or device are a `ParamsError` naming the field.
    fn schedule(
        &self,
        fusion: &Fusion,
        params: &Self::Params,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError>;

    /// The fields a tuner may set for `fusion` on `device`, with the values
    /// worth trying.
    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable>;

    /// Its params, out of the tagged union.
    fn params(params: &HeuristicParams) -> Option<&Self::Params>;
}

/// A [`Scheduler`] with its params type erased, for the registry.
pub trait AnyScheduler: Sync {
    fn kind(&self) -> SchedulerKind;
    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String>;
    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> HeuristicParams;
    fn schedule(
        &self,
        fusion: &Fusion,
        params: &HeuristicParams,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError>;
    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable>;
}

impl<S: Scheduler> AnyScheduler for S {
    fn kind(&self) -> SchedulerKind {
        S::KIND
    }

    fn can_schedule(&self, fusion: &Fusion) -> Result<(), String> {
        Scheduler::can_schedule(self, fusion)
    }

    fn heuristics(&self, fusion: &Fusion, device: &DeviceInfo) -> HeuristicParams {
        Scheduler::heuristics(self, fusion, device).into()
    }

    fn schedule(
        &self,
        fusion: &Fusion,
        params: &HeuristicParams,
        device: &DeviceInfo,
    ) -> Result<Schedule, ParamsError> {
        let mine = S::params(params).ok_or_else(|| {
            let msg = format!(
                "{} params given to the {} scheduler",
                params.kind(),
                S::KIND
            );
            ParamsError::new("scheduler", msg)
        })?;
        Scheduler::schedule(self, fusion, mine, device)
    }

    fn tunables(&self, fusion: &Fusion, device: &DeviceInfo) -> Vec<Tunable> {
        Scheduler::tunables(self, fusion, device)
    }
}

/// The largest of `within` that divides `n` (none where none does).
fn largest_divisor(n: u64, within: std::ops::RangeInclusive<u64>) -> Option<u64> {
    within.rev().find(|d| n.is_multiple_of(*d))
}

/// The largest power of two at most `n` (1 for 0).
fn pow2_at_most(n: u64) -> u64 {
    1 << (63 - n.max(1).leading_zeros())
}

/// Whether some op of `fusion` satisfies `pred`.
fn has_op(fusion: &Fusion, pred: fn(&Op) -> bool) -> bool {
    fusion.nodes().iter().any(|n| pred(&n.op))
}

/// The scheduler of `kind`.
pub fn scheduler(kind: SchedulerKind) -> &'static dyn AnyScheduler {
    match kind {
        SchedulerKind::Pointwise => &Pointwise,
        SchedulerKind::Reduction => &Reduction,
        SchedulerKind::Matmul => &Matmul,
    }
}

/// `Ok` when the `kind` scheduler accepts `fusion`, else the reason.
pub fn can_schedule(fusion: &Fusion, kind: SchedulerKind) -> Result<(), String> {
    scheduler(kind).can_schedule(&*canonical(fusion)?)
}

/// The first scheduler that accepts `fusion`.
pub fn pick(fusion: &Fusion) -> Result<SchedulerKind, String> {
    first_taker(&*canonical(fusion)?)
}

/// The first scheduler that accepts the canonical `fusion`, or every
/// scheduler's reason.
fn first_taker(fusion: &Fusion) -> Result<SchedulerKind, String> {
    let mut reasons = Vec::new();
    for kind in SchedulerKind::ALL {
        match scheduler(kind).can_schedule(fusion) {
            Ok(()) => return Ok(kind),
            Err(why) => reasons.push(format!("{kind}: {why}")),
        }
    }
    Err(format!(
        "no scheduler accepts the fusion ({})",
        reasons.join("; ")
    ))
}

/// The canonical form of `fusion` and the scheduler that takes it: `kind`,
/// or the first that accepts it.
fn accepted(
    fusion: &Fusion,
    kind: Option<SchedulerKind>,
) -> Result<(SchedulerKind, Cow<'_, Fusion>), ParamsError> {
    let fail = |e| ParamsError::new("scheduler", e);
    let canon = canonical(fusion).map_err(fail)?;
    let kind = match kind {
        Some(k) => k,
        None => first_taker(&canon).map_err(fail)?,
    };
    scheduler(kind).can_schedule(&canon).map_err(fail)?;
    Ok((kind, canon))
}

/// The default heuristic's params for `fusion` on `device`.
pub fn heuristics(
    fusion: &Fusion,
    kind: Option<SchedulerKind>,
    device: &DeviceInfo,
) -> Result<HeuristicParams, ParamsError> {
    let (kind, fusion) = accepted(fusion, kind)?;
    contained(kind, || Ok(scheduler(kind).heuristics(&fusion, device)))
}

/// Schedules `fusion` with `params` for `device`; params that cannot work
/// for this fusion or device are a `ParamsError` naming the field.
pub fn schedule(
    fusion: &Fusion,
    params: &HeuristicParams,
    device: &DeviceInfo,
) -> Result<Schedule, ParamsError> {
    params.validate()?;
    let (kind, fusion) = accepted(fusion, Some(params.kind()))?;
    contained(kind, || scheduler(kind).schedule(&fusion, params, device))
}

/// The fields a tuner may set when the `kind` scheduler (or the first that
/// takes the fusion) schedules `fusion` for `device`.
pub fn tunables(
    fusion: &Fusion,
    kind: Option<SchedulerKind>,
    device: &DeviceInfo,
) -> Result<(SchedulerKind, Vec<Tunable>), ParamsError> {
    let (kind, fusion) = accepted(fusion, kind)?;
    contained(kind, || {
        Ok((kind, scheduler(kind).tunables(&fusion, device)))
    })
}

/// Runs a scheduler, turning a broken internal assumption (a panic) into a
/// `ParamsError` at `scheduler` instead of unwinding into the caller (a
/// Python `PanicException` is not even an `Exception`). Params that cannot
/// work are meant to be rejected before that; this is the safety net.
fn contained<T>(
    scheduler: SchedulerKind,
    run: impl FnOnce() -> Result<T, ParamsError>,
) -> Result<T, ParamsError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(ParamsError::new(
            "scheduler",
            format!(
                "internal error in the {scheduler} scheduler ({what}); these params should have \
                 been accepted or rejected with a reason, please report them"
            ),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::{SchedulerKind, contained};
    use crate::step::StepError;
    use tilefuse_params::ParamsError;
    use tilefuse_sched::ScheduleError;

    #[test]
    fn a_panicking_scheduler_is_a_params_error() {
        let err =
            contained::<()>(SchedulerKind::Matmul, || panic!("a loop went missing")).unwrap_err();
        assert_eq!(err.path, "scheduler");
        assert!(err.to_string().contains("a loop went missing"), "{err}");
        assert_eq!(contained(SchedulerKind::Matmul, || Ok(7)).unwrap(), 7);
    }

    #[test]
    fn a_refused_step_is_a_params_error_naming_the_primitive() {
        let refused = ScheduleError::pre("split", "factors must be positive").loops(["i"]);
        let err = ParamsError::from(StepError::from(refused));
        assert_eq!(err.path, "scheduler");
        let text = err.to_string();
        assert!(
            text.contains("split") && text.contains("factors must be positive"),
            "{text}"
        );
    }
}
