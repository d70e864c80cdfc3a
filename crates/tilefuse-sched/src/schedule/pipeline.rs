//! `pipeline`: software pipelining of a loop whose body starts with copies
//! (TVM's `software_pipeline_stage` annotation, nvFuser's circular
//! buffering). Like the loop annotations it leaves the sequential meaning
//! alone; it is lowered after buffer realization (`software_pipeline`).

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{LoopId, LoopKind};

/// The most rotating stages a pipelined buffer gets (each multiplies its
/// memory).
pub const MAX_STAGES: u32 = 8;

impl Schedule {
    /// Pipelines loop `l`: the copies at the front of its body (filling
    /// workgroup or private buffers that only the rest of the body reads)
    /// write into `stages` rotating copies of their buffers and run
    /// `prefetch_gap` iterations ahead, a prologue filling the first
    /// stages before the loop. A copy then overlaps the iterations that
    /// come before its data is used, and a workgroup needs one barrier per
    /// iteration instead of two.
    ///
    /// Preconditions: `l` is serial or unrolled (it may carry a reduction:
    /// its iterations keep their order); `2 ≤ stages ≤ MAX_STAGES`,
    /// `prefetch_gap < stages`; its body starts with one or more copy
    /// nests and has more after them. A copy nest's blocks do not reduce,
    /// write workgroup- or private-scope buffers that only blocks under
    /// `l` use, no later sibling writes and some later sibling reads, and
    /// read nothing written under `l` (so they may run early).
    pub fn pipeline(&mut self, l: LoopId, stages: u32, prefetch_gap: u32) -> Result<()> {
        const P: &str = "pipeline";
        self.check_loop(l)?;
        if !(2..=MAX_STAGES).contains(&stages) {
            return Err(ScheduleError::pre(
                P,
                format!("stages must be between 2 and {MAX_STAGES}, got {stages}"),
            )
            .loops([self.loop_name(l)]));
        }
        if prefetch_gap >= stages {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "prefetch_gap must be less than stages ({stages}), got {prefetch_gap}: \
                     a copy cannot run further ahead than there are buffers"
                ),
            )
            .loops([self.loop_name(l)]));
        }
        self.kernel
            .copies_ahead(l)
            .map_err(|why| ScheduleError::pre(P, why).loops([self.loop_name(l)]))?;
        let unrolled = self.kernel.loop_(l).kind == LoopKind::Unrolled;
        let kind = LoopKind::Pipelined {
            stages,
            prefetch: prefetch_gap,
            unrolled,
        };
        if unrolled {
            self.kernel.loop_mut(l).kind = kind;
        } else {
            self.set_kind(P, l, kind, true)?;
        }
        self.record(Instruction::Pipeline {
            loop_: l,
            stages,
            prefetch_gap,
        });
        Ok(())
    }
}
