//! Automatic schedulers: each reads a params struct and builds a schedule
//! with the same primitives a user calls by hand. `can_schedule` says which
//! accept a fusion, `heuristics` picks params for a fusion on a device.

mod canonical;
mod launch;
mod matmul;
mod pointwise;
mod reduction;
mod segment;

use tilefuse_ir::{Fusion, Op};
use tilefuse_params::{HeuristicParams, ParamsError};

pub use matmul::{matmul_heuristics, schedule_matmul};
pub use pointwise::{pointwise_heuristics, schedule_pointwise};
pub use reduction::{reduction_heuristics, schedule_reduction};
pub use segment::{Segment, segments};

use crate::{DeviceInfo, Schedule};
use canonical::canonical;

/// The scheduler kinds, as their params' `"scheduler"` tags.
pub const SCHEDULERS: [&str; 3] = tilefuse_params::SCHEDULERS;

/// `Ok` when `scheduler` accepts `fusion`, else the reason.
pub fn can_schedule(fusion: &Fusion, scheduler: &str) -> Result<(), String> {
    let fusion = &*canonical(fusion)?;
    let has = |pred: fn(&Op) -> bool| fusion.nodes().iter().any(|n| pred(&n.op));
    match scheduler {
        "pointwise" => {
            if fusion.outputs().is_empty() {
                Err("the fusion has no outputs".into())
            } else if has(|op| matches!(op, Op::Reduce { .. })) {
                Err("the fusion reduces; pointwise fusions have no reductions".into())
            } else if has(|op| matches!(op, Op::Matmul { .. })) {
                Err("the fusion has a matmul".into())
            } else {
                Ok(())
            }
        }
        "reduction" => {
            if has(|op| matches!(op, Op::Matmul { .. })) {
                Err("the fusion has a matmul".into())
            } else {
                reduction::topology(fusion).map(drop)
            }
        }
        "matmul" => matmul::accepts(fusion),
        other => Err(format!(
            "no scheduler {other:?}; expected one of {}",
            SCHEDULERS.join(", ")
        )),
    }
}

/// The first scheduler that accepts `fusion`.
pub fn pick(fusion: &Fusion) -> Result<&'static str, String> {
    let mut reasons = Vec::new();
    for s in SCHEDULERS {
        match can_schedule(fusion, s) {
            Ok(()) => return Ok(s),
            Err(why) => reasons.push(format!("{s}: {why}")),
        }
    }
    Err(format!(
        "no scheduler accepts the fusion ({})",
        reasons.join("; ")
    ))
}

/// The default heuristic's params for `fusion` on `device`.
pub fn heuristics(
    fusion: &Fusion,
    scheduler: Option<&str>,
    device: &DeviceInfo,
) -> Result<HeuristicParams, ParamsError> {
    let scheduler = match scheduler {
        Some(s) => s,
        None => pick(fusion).map_err(|e| ParamsError::new("scheduler", e))?,
    };
    can_schedule(fusion, scheduler).map_err(|e| ParamsError::new("scheduler", e))?;
    let fusion = &*canonical(fusion).map_err(|e| ParamsError::new("scheduler", e))?;
    contained(scheduler, || {
        Ok(match scheduler {
            "pointwise" => pointwise_heuristics(fusion, device).into(),
            "reduction" => reduction_heuristics(fusion, device).into(),
            "matmul" => matmul_heuristics(fusion, device).into(),
            _ => unreachable!("can_schedule admits only available schedulers"),
        })
    })
}

/// Schedules `fusion` with `params` for `device`; params that cannot work
/// for this fusion or device are a `ParamsError` naming the field.
pub fn schedule(
    fusion: &Fusion,
    params: &HeuristicParams,
    device: &DeviceInfo,
) -> Result<Schedule, ParamsError> {
    params.validate()?;
    can_schedule(fusion, params.scheduler()).map_err(|e| ParamsError::new("scheduler", e))?;
    let fusion = &*canonical(fusion).map_err(|e| ParamsError::new("scheduler", e))?;
    contained(params.scheduler(), || match params {
        HeuristicParams::Pointwise(p) => schedule_pointwise(fusion, p, device),
        HeuristicParams::Reduction(p) => schedule_reduction(fusion, p, device),
        HeuristicParams::Matmul(p) => schedule_matmul(fusion, p, device),
    })
}

/// Runs a scheduler, turning a broken internal assumption (a panic) into a
/// `ParamsError` at `scheduler` instead of unwinding into the caller (a
/// Python `PanicException` is not even an `Exception`). Params that cannot
/// work are meant to be rejected before that; this is the safety net.
fn contained<T>(
    scheduler: &str,
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
    use super::contained;

    #[test]
    fn a_panicking_scheduler_is_a_params_error() {
        let err = contained::<()>("matmul", || panic!("a loop went missing")).unwrap_err();
        assert_eq!(err.path, "scheduler");
        assert!(err.to_string().contains("a loop went missing"), "{err}");
        assert_eq!(contained("matmul", || Ok(7)).unwrap(), 7);
    }
}
