//! Long pointwise chains (a dozen ops or more per element): the kernel is
//! bound by arithmetic and registers, not memory, so unrolling (more values
//! live at once) tends to hurt and wide vectors to help.

use tilefuse_params::{HeuristicParams, SchedulerKind};

use super::{AutotunerHeuristic, SeedContext, edited};

pub struct LongChain;

/// Compute ops from which a chain is long.
const LONG: usize = 12;

impl AutotunerHeuristic for LongChain {
    fn name(&self) -> &str {
        "long_chain"
    }

    fn schedulers(&self) -> &[SchedulerKind] {
        &[SchedulerKind::Pointwise]
    }

    fn is_eligible(&self, cx: &SeedContext) -> Result<bool, String> {
        Ok(cx.features.compute_ops >= LONG)
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let mut seeds = vec![vec![
            ("unroll_factor_inner", 1.into()),
            ("unroll_factor_outer", 1.into()),
        ]];
        for vector in [4, 2] {
            seeds.push(vec![
                ("vectorization_factor", vector.into()),
                ("unroll_factor_inner", 1.into()),
                ("unroll_factor_outer", 1.into()),
            ]);
        }
        edited(cx.default, &seeds)
    }
}
