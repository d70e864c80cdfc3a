//! Traces: every applied primitive as a small serde record. Ids are
//! deterministic (arenas only grow), so a trace replays on a fresh schedule
//! of the same fusion to the same kernel.

use serde::{Deserialize, Serialize};

use super::{Result, Schedule};
use crate::ir::{BlockId, LoopId, Scope, ThreadAxis};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "primitive", rename_all = "snake_case", deny_unknown_fields)]
pub enum Instruction {
    Split {
        #[serde(rename = "loop")]
        loop_: LoopId,
        factors: Vec<Option<u64>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        names: Option<Vec<String>>,
    },
    Fuse {
        loops: Vec<LoopId>,
    },
    Reorder {
        loops: Vec<LoopId>,
    },
    Bind {
        #[serde(rename = "loop")]
        loop_: LoopId,
        axis: ThreadAxis,
    },
    Parallel {
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    Vectorize {
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    Unroll {
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    Pipeline {
        #[serde(rename = "loop")]
        loop_: LoopId,
        stages: u32,
        prefetch_gap: u32,
    },
    Rfactor {
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    DecomposeReduction {
        block: BlockId,
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    CacheRead {
        block: BlockId,
        buffer: String,
        scope: Scope,
    },
    CacheWrite {
        block: BlockId,
        scope: Scope,
    },
    SetScope {
        block: BlockId,
        scope: Scope,
    },
    ComputeAt {
        block: BlockId,
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    ReverseComputeAt {
        block: BlockId,
        #[serde(rename = "loop")]
        loop_: LoopId,
    },
    ComputeInline {
        block: BlockId,
    },
    ReverseComputeInline {
        block: BlockId,
    },
}

impl Schedule {
    /// Applies one recorded primitive (and records it again).
    pub fn apply(&mut self, inst: &Instruction) -> Result<()> {
        match inst {
            Instruction::Split {
                loop_,
                factors,
                names,
            } => self.split(*loop_, factors, names.as_deref()).map(drop),
            Instruction::Fuse { loops } => self.fuse(loops).map(drop),
            Instruction::Reorder { loops } => self.reorder(loops),
            Instruction::Bind { loop_, axis } => self.bind(*loop_, *axis),
            Instruction::Parallel { loop_ } => self.parallel(*loop_),
            Instruction::Vectorize { loop_ } => self.vectorize(*loop_),
            Instruction::Unroll { loop_ } => self.unroll(*loop_),
            Instruction::Pipeline {
                loop_,
                stages,
                prefetch_gap,
            } => self.pipeline(*loop_, *stages, *prefetch_gap),
            Instruction::Rfactor { loop_ } => self.rfactor(*loop_).map(drop),
            Instruction::DecomposeReduction { block, loop_ } => {
                self.decompose_reduction(*block, *loop_).map(drop)
            }
            Instruction::CacheRead {
                block,
                buffer,
                scope,
            } => self.cache_read(*block, buffer, *scope).map(drop),
            Instruction::CacheWrite { block, scope } => self.cache_write(*block, *scope).map(drop),
            Instruction::SetScope { block, scope } => self.set_scope(*block, *scope),
            Instruction::ComputeAt { block, loop_ } => self.compute_at(*block, *loop_),
            Instruction::ReverseComputeAt { block, loop_ } => {
                self.reverse_compute_at(*block, *loop_)
            }
            Instruction::ComputeInline { block } => self.compute_inline(*block),
            Instruction::ReverseComputeInline { block } => self.reverse_compute_inline(*block),
        }
    }

    /// The trace as JSON.
    pub fn trace_json(&self) -> String {
        serde_json::to_string_pretty(self.trace()).expect("trace serializes")
    }

    /// Replays a JSON trace on a fresh schedule of `fusion`.
    pub fn replay_json(fusion: &tilefuse_ir::Fusion, json: &str) -> Result<Schedule> {
        let trace: Vec<Instruction> =
            serde_json::from_str(json).map_err(|e| super::ScheduleError::Trace(e.to_string()))?;
        Schedule::replay(fusion, &trace)
    }
}
