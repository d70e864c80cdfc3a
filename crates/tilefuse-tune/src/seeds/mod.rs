//! Seed heuristics (Helion's `AutotunerHeuristic`): expert rules that know
//! a kind of fusion and propose params for it. Every eligible heuristic's
//! seeds enter the search right after the default heuristic's params, and
//! its neighbours of the best params so far join the search as it goes. A
//! heuristic that fails is skipped with a warning; tuning goes on.
//!
//! The built-in ones, one per file: [`SkinnyMatmul`], [`LargeMatmul`],
//! [`ShortRows`], [`LongChain`], [`OuterReduction`].

mod large_matmul;
mod long_chain;
mod outer_reduction;
mod short_rows;
mod skinny_matmul;

use serde_json::Value;
use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, SchedulerKind};
use tilefuse_sched::DeviceInfo;
pub use tilefuse_sched::DeviceKind;
use tilefuse_schedulers::Features;

pub use large_matmul::LargeMatmul;
pub use long_chain::LongChain;
pub use outer_reduction::OuterReduction;
pub use short_rows::ShortRows;
pub use skinny_matmul::SkinnyMatmul;

/// What a heuristic sees of the tuning problem.
pub struct SeedContext<'a> {
    pub fusion: &'a Fusion,
    pub device: &'a DeviceInfo,
    pub features: &'a Features,
    /// The default heuristic's params: seeds are usually edits of them.
    pub default: &'a HeuristicParams,
}

/// An expert rule that proposes params for the fusions it knows.
pub trait AutotunerHeuristic {
    fn name(&self) -> &str;

    /// The schedulers it is for; every one when empty.
    fn schedulers(&self) -> &[SchedulerKind] {
        &[]
    }

    /// The device kinds it is for; every one when empty.
    fn devices(&self) -> &[DeviceKind] {
        &[]
    }

    /// Whether it applies to this fusion on this device.
    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String>;

    /// Its proposals, best first.
    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String>;

    /// Params worth trying near `params` (the best so far), besides the
    /// strategy's own neighbours.
    fn neighbors(
        &self,
        _params: &HeuristicParams,
        _cx: &SeedContext,
    ) -> Result<Vec<HeuristicParams>, String> {
        Ok(Vec::new())
    }
}

/// The built-in heuristics.
pub fn builtin() -> Vec<Box<dyn AutotunerHeuristic>> {
    vec![
        Box::new(SkinnyMatmul),
        Box::new(LargeMatmul),
        Box::new(ShortRows),
        Box::new(LongChain),
        Box::new(OuterReduction),
    ]
}

/// Whether `h` is for this scheduler and device and says it applies.
pub fn applies(h: &dyn AutotunerHeuristic, cx: &SeedContext) -> Result<bool, String> {
    let for_scheduler =
        h.schedulers().is_empty() || h.schedulers().contains(&cx.features.scheduler);
    let kind = cx.device.kind();
    let for_device = h.devices().is_empty() || h.devices().contains(&kind);
    Ok(for_scheduler && for_device && h.is_eligible(cx)?)
}

/// Each list of edits applied to `base`, less those that leave it as it
/// is: seeds for a heuristic that describes its proposals as changed
/// fields.
fn edited(
    base: &HeuristicParams,
    seeds: &[Vec<(&str, Value)>],
) -> Result<Vec<HeuristicParams>, String> {
    let mut out: Vec<HeuristicParams> = Vec::new();
    for edits in seeds {
        let p = (base.with_all(edits.iter().cloned())).map_err(|e| e.to_string())?;
        if p != *base && !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// The largest power of two at most `n` (1 for 0).
fn pow2_at_most(n: u64) -> u64 {
    1 << (63 - n.max(1).leading_zeros())
}

/// `[n, 1, 1]` as a workgroup size value.
fn workgroup(n: u64) -> Value {
    Value::from(vec![n, 1, 1])
}
