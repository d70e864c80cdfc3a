//! Automatic schedulers: each reads a params struct and builds a schedule
//! with the same primitives a user calls by hand. `can_schedule` says which
//! accept a fusion, `heuristics` picks params for a fusion on a device.

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

/// The scheduler kinds, as their params' `"scheduler"` tags.
pub const SCHEDULERS: [&str; 3] = tilefuse_params::SCHEDULERS;

/// `Ok` when `scheduler` accepts `fusion`, else the reason.
pub fn can_schedule(fusion: &Fusion, scheduler: &str) -> Result<(), String> {
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
    match scheduler {
        "pointwise" => Ok(pointwise_heuristics(fusion, device).into()),
        "reduction" => Ok(reduction_heuristics(fusion, device).into()),
        "matmul" => Ok(matmul_heuristics(fusion, device).into()),
        _ => unreachable!("can_schedule admits only available schedulers"),
    }
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
    match params {
        HeuristicParams::Pointwise(p) => schedule_pointwise(fusion, p, device),
        HeuristicParams::Reduction(p) => schedule_reduction(fusion, p, device),
        HeuristicParams::Matmul(p) => schedule_matmul(fusion, p, device),
    }
}
