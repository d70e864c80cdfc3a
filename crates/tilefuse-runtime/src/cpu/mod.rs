//! The CPU device: runs scheduled kernels with their sequential meaning,
//! parallel and workgroup-bound loops on threads, innermost loops a chunk
//! of lanes at a time.

mod accumulate;
mod arena;
mod block;
mod chunk;
mod coalesce;
mod code;
mod compile;
mod ctx;
mod gemm;
mod gemm_call;
mod gemm_match;
mod halves;
mod interpret;
mod lanes;
mod loop_index;
mod memory;
mod nest;
mod pack;
mod parallel_nest;
pub mod pool;
mod prefetch;
mod program;
mod scatter;
mod simd_math;
mod stream;
mod tape;
mod value;

use tilefuse_ir::{TensorMut, TensorRef, check_arguments, check_outputs};
use tilefuse_sched::ir::Role;
use tilefuse_sched::{Schedule, Target, lower};

use crate::error::{Result, RuntimeError};
use arena::Arena;
use memory::RawBuf;
pub(crate) use memory::Storage;
use program::Program;

/// f32 lanes per vector of the widest extension the executor's kernels use.
pub(crate) fn simd_width() -> u32 {
    match simd_math::detected() {
        simd_math::Simd::Avx512 => 16,
        simd_math::Simd::Avx2 => 8,
        simd_math::Simd::Baseline => 4,
    }
}

/// The CPU as a device.
#[derive(Clone, Debug)]
pub struct CpuDevice {
    pub threads: usize,
}

impl Default for CpuDevice {
    /// `TILEFUSE_NUM_THREADS` threads (the machine's parallelism when unset
    /// or not valid; `Device::cpu_from_env` reports an invalid value).
    fn default() -> Self {
        CpuDevice {
            threads: pool::threads_from_env().unwrap_or_else(|_| pool::machine_parallelism()),
        }
    }
}

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct CpuKernel {
    schedule: Schedule,
    /// The schedule's kernel lowered for the CPU.
    kernel: tilefuse_sched::ir::Kernel,
    program: Program,
    threads: usize,
    temps: Arena,
}

impl CpuDevice {
    /// Lowers the schedule for the CPU and compiles it.
    pub fn build(&self, schedule: &Schedule) -> Result<CpuKernel> {
        let kernel = lower(schedule.kernel(), Target::Cpu)?.kernel;
        if let Some(b) = kernel
            .blocks_in_order()
            .into_iter()
            .find(|&b| matches!(kernel.buffer(kernel.block(b).buffer).role, Role::Input(_)))
        {
            // Inputs are borrowed from the caller read-only.
            return Err(RuntimeError::Internal(format!(
                "block {} writes an input buffer",
                kernel.block(b).name
            )));
        }
        let mut used = vec![false; kernel.buffers.len()];
        for b in kernel.live_buffers() {
            used[b.0 as usize] = true;
        }
        // Every buffer but the caller's inputs and outputs comes from the
        // arena; those no block touches get no memory.
        let layout = kernel
            .buffers
            .iter()
            .zip(used)
            .filter(|(b, _)| b.role == Role::Temp)
            .map(|(b, used)| (b.dtype, if used { b.numel() as usize } else { 0 }))
            .collect();
        Ok(CpuKernel {
            program: Program::compile(&kernel),
            temps: Arena::new(layout, self.threads),
            kernel,
            schedule: schedule.clone(),
            threads: self.threads,
        })
    }
}

impl CpuKernel {
    /// Runs the kernel once: reads `inputs` (one per fusion input) where
    /// they lie and writes `outputs` (one per fusion output) in place;
    /// `Interrupted` when an interrupt was requested before it finished.
    pub fn run_into(&self, inputs: &[TensorRef<'_>], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        let fusion = self.schedule.fusion();
        check_arguments(fusion, inputs).map_err(|e| RuntimeError::Argument(e.to_string()))?;
        check_outputs(fusion, fusion.outputs(), outputs)
            .map_err(|e| RuntimeError::Argument(e.to_string()))?;
        let outs: Vec<RawBuf> = outputs
            .iter_mut()
            .map(|t| RawBuf::of_output(&mut t.data))
            .collect();
        let mut temps = self.temps.take()?;
        let mut next_temp = temps.iter_mut();
        let views: Vec<RawBuf> = self
            .kernel
            .buffers
            .iter()
            .map(|b| match b.role {
                Role::Input(i) => RawBuf::of_input(inputs[i].data),
                Role::Output(j) => outs[j],
                Role::Temp => next_temp.next().expect("one arena buffer per temp").view(),
            })
            .collect();
        let finished = self.program.run(&views, self.threads);
        self.temps.give_back(temps);
        if finished {
            Ok(())
        } else {
            Err(RuntimeError::Interrupted)
        }
    }

    pub fn fusion(&self) -> &tilefuse_ir::Fusion {
        self.schedule.fusion()
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{DType, Fusion, evaluate};
    use tilefuse_schedulers::{heuristics, schedule};
    use tilefuse_testing::{compare, fusions, inputs};

    use super::simd_math::{Simd, at_most, detected};

    /// Each copy `multiversion!` and the micro-kernel make (baseline, AVX2,
    /// AVX-512: those this CPU can run) gives the reference result for the
    /// fixtures under their default heuristics (tapes, folds), and a
    /// matmul whose tiles divide it (the micro-kernel, with tail columns).
    #[test]
    fn every_vector_extension_gives_the_reference_result() {
        let device = crate::Device::cpu();
        let info = device.info();
        let mut gemm = Fusion::new();
        let a = gemm.input(&[16, 64], DType::F32, Some("a")).unwrap();
        let b = gemm.input(&[64, 40], DType::F32, Some("b")).unwrap();
        let c = gemm.matmul(a, b, false, false).unwrap();
        gemm.output(c).unwrap();
        let kernels: Vec<_> = fusions()
            .into_iter()
            .chain([("gemm", gemm)])
            .filter_map(|(name, f)| {
                let params = heuristics(&f, None, &info).ok()?;
                let kernel = device
                    .build(&schedule(&f, &params, &info).unwrap())
                    .unwrap();
                Some((name, f, kernel))
            })
            .collect();
        for level in [Simd::Baseline, Simd::Avx2, Simd::Avx512] {
            if level > detected() {
                continue;
            }
            at_most(level, || {
                for (name, f, kernel) in &kernels {
                    let x = inputs(f, 11);
                    let want = evaluate(f, &x).unwrap();
                    let got = kernel.run(&x).unwrap();
                    if let Err(e) = compare(&want, &got, 1e-5) {
                        panic!("{name} at {level:?}: {e}");
                    }
                }
            });
        }
    }
}
