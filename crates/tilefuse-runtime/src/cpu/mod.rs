//! The CPU device: runs scheduled kernels with their sequential meaning,
//! parallel and workgroup-bound loops on threads, innermost loops a chunk
//! of lanes at a time.

mod gemm;
mod lanes;
mod memory;
pub mod pool;
mod program;
mod simd_math;
mod tape;

use tilefuse_ir::{Tensor, check_arguments};
use tilefuse_sched::ir::Role;
use tilefuse_sched::{PrivateMemory, Schedule};

use crate::error::{Result, RuntimeError};
use memory::Storage;
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
            threads: pool::threads_from_env()
                .unwrap_or_else(|_| std::thread::available_parallelism().map_or(1, |n| n.get())),
        }
    }
}

/// A kernel compiled for the CPU.
#[derive(Debug)]
pub struct CpuKernel {
    schedule: Schedule,
    /// The schedule's kernel with workgroup / private buffers realized.
    kernel: tilefuse_sched::ir::Kernel,
    program: Program,
    threads: usize,
    /// Per buffer, whether a block of the kernel writes or reads it
    /// (intermediates folded away by inlining get no memory).
    used: Vec<bool>,
}

impl CpuDevice {
    /// Realizes the schedule's buffers and compiles it.
    pub fn build(&self, schedule: &Schedule) -> Result<CpuKernel> {
        let kernel = tilefuse_sched::realize(schedule.kernel(), PrivateMemory::PerWorkgroup)?;
        let mut used = vec![false; kernel.buffers.len()];
        for b in kernel.live_buffers() {
            used[b.0 as usize] = true;
        }
        Ok(CpuKernel {
            used,
            program: Program::compile(&kernel),
            kernel,
            schedule: schedule.clone(),
            threads: self.threads,
        })
    }
}

/// Buffers allocated for one or more launches.
pub struct Prepared {
    storage: Vec<Storage>,
}

impl CpuKernel {
    /// Checks the inputs and allocates every buffer.
    pub fn prepare(&self, inputs: &[Tensor]) -> Result<Prepared> {
        check_arguments(self.schedule.fusion(), inputs)
            .map_err(|e| RuntimeError::Argument(e.to_string()))?;
        let storage = self
            .kernel
            .buffers
            .iter()
            .zip(&self.used)
            .map(|(b, &used)| match b.role {
                Role::Input(i) => Ok(Storage(inputs[i].data.clone())),
                Role::Output(_) => Storage::try_zeros(b.dtype, b.numel() as usize),
                _ => Storage::try_zeros(b.dtype, if used { b.numel() as usize } else { 0 }),
            })
            .collect::<Result<_>>()?;
        Ok(Prepared { storage })
    }

    /// Runs the kernel once over prepared buffers; `Interrupted` when an
    /// interrupt was requested before it finished.
    pub fn launch(&self, prepared: &mut Prepared) -> Result<()> {
        let views: Vec<_> = prepared.storage.iter_mut().map(Storage::view).collect();
        if self.program.run(&views, self.threads) {
            Ok(())
        } else {
            Err(RuntimeError::Interrupted)
        }
    }

    /// Runs the kernel on host tensors, one per fusion input.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut prepared = self.prepare(inputs)?;
        self.launch(&mut prepared)?;
        let mut outputs: Vec<(usize, Tensor)> = self
            .kernel
            .buffers
            .iter()
            .zip(prepared.storage)
            .filter_map(|(b, s)| match b.role {
                Role::Output(j) => {
                    let shape = b.shape.iter().map(|&d| d as usize).collect();
                    Some((j, Tensor { shape, data: s.0 }))
                }
                _ => None,
            })
            .collect();
        outputs.sort_by_key(|(j, _)| *j);
        Ok(outputs.into_iter().map(|(_, t)| t).collect())
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{DType, Fusion, evaluate};
    use tilefuse_sched::fixtures::{compare, fusions, inputs};
    use tilefuse_sched::schedulers::{heuristics, schedule};

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
