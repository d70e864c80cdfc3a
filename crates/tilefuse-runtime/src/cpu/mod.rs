//! The CPU device: runs scheduled kernels with their sequential meaning,
//! parallel and workgroup-bound loops on threads, innermost loops a chunk
//! of lanes at a time.

mod lanes;
mod memory;
mod program;

use tilefuse_ir::{Tensor, check_arguments};
use tilefuse_sched::Schedule;
use tilefuse_sched::ir::Role;

use crate::error::{Result, RuntimeError};
use memory::Storage;
use program::Program;

/// The CPU as a device.
#[derive(Clone, Debug)]
pub struct CpuDevice {
    pub threads: usize,
}

impl Default for CpuDevice {
    fn default() -> Self {
        CpuDevice {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct CpuKernel {
    schedule: Schedule,
    program: Program,
    threads: usize,
}

impl CpuDevice {
    pub fn build(&self, schedule: &Schedule) -> CpuKernel {
        CpuKernel {
            program: Program::compile(schedule.kernel()),
            schedule: schedule.clone(),
            threads: self.threads,
        }
    }
}

impl CpuKernel {
    /// Runs the kernel on host tensors, one per fusion input.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        check_arguments(self.schedule.fusion(), inputs)
            .map_err(|e| RuntimeError::Argument(e.to_string()))?;
        let kernel = self.schedule.kernel();
        let mut storage: Vec<Storage> = kernel
            .buffers
            .iter()
            .map(|b| match b.role {
                Role::Input(i) => Storage(inputs[i].data.clone()),
                _ => Storage::zeros(b.dtype, b.numel() as usize),
            })
            .collect();
        let views: Vec<_> = storage.iter_mut().map(Storage::view).collect();
        self.program.run(&views, self.threads);
        let mut outputs: Vec<(usize, Tensor)> = kernel
            .buffers
            .iter()
            .zip(storage)
            .filter_map(|(b, s)| match b.role {
                Role::Output(j) => Some((
                    j,
                    Tensor {
                        shape: b.shape.iter().map(|&d| d as usize).collect(),
                        data: s.0,
                    },
                )),
                _ => None,
            })
            .collect();
        outputs.sort_by_key(|(j, _)| *j);
        if outputs.len() != self.schedule.fusion().outputs().len() {
            return Err(RuntimeError::Internal(
                "an output buffer is missing from the kernel".into(),
            ));
        }
        Ok(outputs.into_iter().map(|(_, t)| t).collect())
    }
}
