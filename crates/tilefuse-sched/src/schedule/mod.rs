//! Schedules: a kernel plus the trace of primitives that made it. Each
//! primitive family lives in its own module with its preconditions
//! documented; a failed precondition is a [`ScheduleError`], never a panic.

mod annotate;
mod cache;
mod compute_at;
mod error;
mod inline;
mod loops;
mod pipeline;
mod python;
mod rfactor;
mod trace;

use tilefuse_ir::Fusion;

pub use error::ScheduleError;
pub use pipeline::MAX_STAGES;
pub use trace::Instruction;

use crate::initial::initial_kernel;
use crate::ir::{BlockId, Kernel, LoopId, Node};

pub type Result<T, E = ScheduleError> = std::result::Result<T, E>;

/// A fusion's kernel being scheduled, with the trace that replays it.
#[derive(Clone, Debug)]
pub struct Schedule {
    fusion: Fusion,
    kernel: Kernel,
    trace: Vec<Instruction>,
}

impl Schedule {
    /// The initial schedule: one block per op in its own loop nest.
    pub fn new(fusion: &Fusion) -> Self {
        Schedule {
            fusion: fusion.clone(),
            kernel: initial_kernel(fusion),
            trace: Vec::new(),
        }
    }

    /// Applies `trace` to a fresh schedule of `fusion`.
    pub fn replay(fusion: &Fusion, trace: &[Instruction]) -> Result<Self> {
        let mut s = Schedule::new(fusion);
        for inst in trace {
            s.apply(inst)?;
        }
        Ok(s)
    }

    pub fn fusion(&self) -> &Fusion {
        &self.fusion
    }

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn trace(&self) -> &[Instruction] {
        &self.trace
    }

    /// The block named `name` (a tensor name, or `op_N` for unnamed tensors).
    pub fn get_block(&self, name: &str) -> Result<BlockId> {
        let live = self.kernel.blocks_in_order();
        live.iter()
            .copied()
            .find(|&b| self.kernel.block(b).name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = live
                    .iter()
                    .map(|&b| self.kernel.block(b).name.as_str())
                    .collect();
                ScheduleError::NoBlock {
                    name: name.to_owned(),
                    known: names.join(", "),
                }
            })
    }

    /// Every block in execution order.
    pub fn get_blocks(&self) -> Vec<BlockId> {
        self.kernel.blocks_in_order()
    }

    /// The loops around `block`, outermost first.
    pub fn get_loops(&self, block: BlockId) -> Result<Vec<LoopId>> {
        self.kernel
            .path_to(&Node::Block(block))
            .ok_or_else(|| ScheduleError::StaleBlock(self.block_name(block)))
    }

    pub fn block_name(&self, block: BlockId) -> String {
        self.kernel
            .blocks
            .get(block.0 as usize)
            .map_or_else(|| format!("#{}", block.0), |b| b.name.clone())
    }

    pub fn loop_name(&self, l: LoopId) -> String {
        self.kernel
            .loops
            .get(l.0 as usize)
            .map_or_else(|| format!("#{}", l.0), |l| l.name.clone())
    }

    fn check_loop(&self, l: LoopId) -> Result<()> {
        match self.kernel.loops.get(l.0 as usize) {
            Some(_) if self.kernel.loop_node(l).is_some() => Ok(()),
            _ => Err(ScheduleError::StaleLoop(self.loop_name(l))),
        }
    }

    fn check_block(&self, b: BlockId) -> Result<()> {
        self.get_loops(b).map(|_| ())
    }

    /// A block under `l` whose reduction `l` carries (`Kernel::carried_iter`:
    /// no spatial iterator moves with it, as one does after `rfactor`), with
    /// that iterator's name.
    fn carried_reduction(&self, l: LoopId) -> Option<(String, String)> {
        self.kernel.blocks_under(l).into_iter().find_map(|b| {
            let block = self.kernel.block(b);
            self.kernel
                .carried_iter(l, b)
                .map(|i| (block.name.clone(), block.iters[i].name.clone()))
        })
    }

    fn record(&mut self, inst: Instruction) {
        self.trace.push(inst);
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kernel.fmt(f)
    }
}
