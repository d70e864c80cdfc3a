//! The kernels of a segmented fusion as one GPU submission: each segment
//! binds the device buffers that earlier segments wrote, so intermediates
//! never cross to the host; only the inputs go up and the results come
//! back, with one wait.

use std::collections::HashMap;
use std::sync::Arc;

use tilefuse_ir::shape::numel;
use tilefuse_ir::{Fusion, TensorId, TensorMut, TensorRef, check_arguments, check_outputs};
use tilefuse_sched::ir::Role;

use super::GpuDevice;
use super::buffers::{upload, upload_buffer};
use super::kernel::{
    GpuKernel, Host, elements, read_from, read_staged, staging_buffer, storage_buffer,
};
use super::launches::{Buffers, Launches};
use crate::device::Kernel;
use crate::error::{Result, RuntimeError};

/// The parent fusion's tensors one segment reads and writes, in the order
/// of its own fusion's inputs and outputs.
#[derive(Clone, Debug)]
pub struct Wiring {
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

/// Kernels run in order as one submission (see the module docs).
pub struct GpuSequence {
    device: Arc<GpuDevice>,
    fusion: Fusion,
    kernels: Vec<Arc<Kernel>>,
    wiring: Vec<Wiring>,
    results: Vec<TensorId>,
    launches: Launches<SequenceLaunch>,
}

/// Device buffers of one call: one per parent tensor that is an input, a
/// result or crosses between segments; each segment's temporaries and bind
/// groups; a staging buffer per non-empty result and per non-empty input
/// (none where the host maps the storage buffers).
struct SequenceLaunch {
    tensors: HashMap<TensorId, wgpu::Buffer>,
    temps: Vec<wgpu::Buffer>,
    groups: Vec<Vec<wgpu::BindGroup>>,
    staging: Vec<Option<wgpu::Buffer>>,
    /// In the order of the parent fusion's inputs.
    uploads: Vec<Option<wgpu::Buffer>>,
}

impl Buffers for SequenceLaunch {
    fn into_buffers(self) -> impl Iterator<Item = wgpu::Buffer> {
        let staged = self.staging.into_iter().chain(self.uploads).flatten();
        self.tensors.into_values().chain(self.temps).chain(staged)
    }
}

impl GpuSequence {
    /// Checks that every kernel runs on the same GPU, that each segment's
    /// tensors have the types its kernel takes and returns, and that each
    /// reads only parent inputs or what earlier segments wrote.
    pub fn new(
        fusion: Fusion,
        kernels: Vec<Arc<Kernel>>,
        wiring: Vec<Wiring>,
        results: Vec<TensorId>,
    ) -> Result<GpuSequence> {
        let bad = |m: String| Err(RuntimeError::Argument(m));
        let Some(first) = kernels.first().and_then(|k| k.gpu()) else {
            return bad("a GPU sequence needs at least one kernel built for a GPU".into());
        };
        let device = Arc::clone(first.device());
        if kernels.len() != wiring.len() {
            return bad(format!(
                "{} kernels, {} wirings",
                kernels.len(),
                wiring.len()
            ));
        }
        let mut known: Vec<TensorId> = fusion.inputs().to_vec();
        for (s, (k, w)) in kernels.iter().zip(&wiring).enumerate() {
            let Some(g) = k.gpu().filter(|g| Arc::ptr_eq(g.device(), &device)) else {
                return bad(format!(
                    "segment {s}: its kernel is not built for the same GPU"
                ));
            };
            let own = g.fusion();
            let sides = [
                ("input", own.inputs(), &w.inputs),
                ("output", own.outputs(), &w.outputs),
            ];
            for (what, own_ids, parent_ids) in sides {
                if own_ids.len() != parent_ids.len() {
                    return bad(format!(
                        "segment {s}: its kernel has {} {what}s, the wiring {}",
                        own_ids.len(),
                        parent_ids.len()
                    ));
                }
                for (&o, &p) in own_ids.iter().zip(parent_ids.iter()) {
                    let (want, got) = (own.ty(o), fusion.ty(p));
                    if want.is_err() || got.is_err() || want.ok() != got.ok() {
                        return bad(format!(
                            "segment {s}: {what} t{} does not match its kernel's",
                            p.0
                        ));
                    }
                }
            }
            if let Some(t) = w.inputs.iter().find(|t| !known.contains(t)) {
                return bad(format!(
                    "segment {s} reads t{}, which no earlier segment writes",
                    t.0
                ));
            }
            known.extend(&w.outputs);
        }
        if let Some(t) = results.iter().find(|t| !known.contains(t)) {
            return bad(format!(
                "result t{} is neither an input nor written by a segment",
                t.0
            ));
        }
        Ok(GpuSequence {
            fusion,
            kernels,
            wiring,
            results,
            launches: Launches::new(Arc::clone(&device)),
            device,
        })
    }

    /// Runs every segment on `inputs` (one per parent fusion input) and
    /// reads the results back into `outputs`.
    pub fn run_into(&self, inputs: &[TensorRef<'_>], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        let arg = |e: tilefuse_ir::FusionError| RuntimeError::Argument(e.to_string());
        check_arguments(&self.fusion, inputs).map_err(arg)?;
        check_outputs(&self.fusion, &self.results, outputs).map_err(arg)?;
        let launch = self.take_launch()?;
        let mut encoder = self
            .device
            .device
            .create_command_encoder(&Default::default());
        let uploads = (self.fusion.inputs().iter().zip(&launch.uploads).zip(inputs))
            .map(|((id, staging), t)| (&launch.tensors[id], staging.as_ref(), t.data));
        upload(&self.device, uploads, &mut encoder)?;
        for (g, groups) in self.gpu_kernels().zip(&launch.groups) {
            g.encode(groups, &mut encoder, None);
        }
        for (id, staging) in self.results.iter().zip(&launch.staging) {
            if let Some(staging) = staging {
                encoder.copy_buffer_to_buffer(&launch.tensors[id], 0, staging, 0, staging.size());
            }
        }
        self.device.queue.submit([encoder.finish()]);
        let mut sources = Vec::new();
        for (j, (id, staging)) in self.results.iter().zip(&launch.staging).enumerate() {
            let elements = self.elements(*id)?;
            if let Some(from) = read_from(elements, &launch.tensors[id], staging.as_ref()) {
                sources.push((j, from));
            }
        }
        read_staged(&self.device, sources.into_iter(), outputs)?;
        self.launches.give_back(launch);
        Ok(())
    }

    fn gpu_kernels(&self) -> impl Iterator<Item = &GpuKernel> {
        self.kernels
            .iter()
            .map(|k| k.gpu().expect("checked by new"))
    }

    fn take_launch(&self) -> Result<SequenceLaunch> {
        let kept = self.launches.take();
        kept.map_or_else(|| self.new_launch(), Ok)
    }

    /// Parent inputs are written by the host, results (that are not also
    /// inputs) read by it.
    fn host(&self, id: TensorId) -> Host {
        if self.fusion.inputs().contains(&id) {
            Host::Writes
        } else if self.results.contains(&id) {
            Host::Reads
        } else {
            Host::Nothing
        }
    }

    fn elements(&self, id: TensorId) -> Result<u64> {
        let ty = self
            .fusion
            .ty(id)
            .map_err(|e| RuntimeError::Internal(e.to_string()))?;
        Ok(numel(&ty.shape) as u64)
    }

    fn new_launch(&self) -> Result<SequenceLaunch> {
        let mut tensors = HashMap::new();
        let crossing = self
            .wiring
            .iter()
            .flat_map(|w| w.inputs.iter().chain(&w.outputs));
        for &id in self
            .fusion
            .inputs()
            .iter()
            .chain(&self.results)
            .chain(crossing)
        {
            let (elements, host) = (self.elements(id)?, self.host(id));
            tensors.entry(id).or_insert_with(|| {
                storage_buffer(&self.device, &format!("t{}", id.0), elements, host)
            });
        }
        let mut temps = Vec::new();
        let mut groups = Vec::new();
        for (g, w) in self.gpu_kernels().zip(&self.wiring) {
            let own: Vec<Option<wgpu::Buffer>> = g
                .wgsl
                .bindings
                .iter()
                .map(|b| {
                    let temp = b.role == Role::Temp;
                    temp.then(|| storage_buffer(&self.device, &b.name, elements(b), Host::Nothing))
                })
                .collect();
            let buffers: Vec<&wgpu::Buffer> = g
                .wgsl
                .bindings
                .iter()
                .zip(&own)
                .map(|(b, own)| match b.role {
                    Role::Input(i) => &tensors[&w.inputs[i]],
                    Role::Output(j) => &tensors[&w.outputs[j]],
                    Role::Temp => own.as_ref().expect("made above"),
                })
                .collect();
            groups.push(g.bind_groups(&buffers));
            temps.extend(own.into_iter().flatten());
        }
        let staging = self
            .results
            .iter()
            .map(|&id| {
                let host_reads = self.host(id) == Host::Reads;
                Ok(staging_buffer(&self.device, self.elements(id)?, host_reads))
            })
            .collect::<Result<_>>()?;
        let uploads = (self.fusion.inputs().iter())
            .map(|&id| Ok(upload_buffer(&self.device, self.elements(id)?)))
            .collect::<Result<_>>()?;
        Ok(SequenceLaunch {
            tensors,
            temps,
            groups,
            staging,
            uploads,
        })
    }
}
