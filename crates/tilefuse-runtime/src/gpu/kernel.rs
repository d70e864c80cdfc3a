//! A kernel compiled for a GPU, and its launches. A call writes the inputs
//! into staging buffers, copies them up, runs every stage and copies the
//! outputs to staging buffers in one submission, then reads them back with
//! one wait; the device and staging buffers of a launch are kept for the
//! next call, and go to the device's spare buffers when the kernel drops.

use std::sync::Arc;
use std::time::Instant;

use tilefuse_ir::{TensorMut, TensorRef, check_arguments, check_outputs};
use tilefuse_sched::Schedule;
use tilefuse_sched::codegen::{BindingInfo, WgslKernel};
use tilefuse_sched::ir::Role;

use super::buffers::{
    self, buffer_size, map_all, read_into, readback_buffer, upload, upload_buffer,
};
use super::launches::{Buffers, Launches};
use super::{GpuDevice, Pipelines, WARM_UP, gpu_err};
use crate::error::{Result, RuntimeError};

/// What the host does with a buffer's contents between launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Host {
    Nothing,
    Writes,
    Reads,
}

/// A storage buffer of `elements` 32-bit words, mappable as `host` needs
/// on a device whose buffers the host maps ([`GpuDevice::host_mapped`]).
pub(super) fn storage_buffer(
    device: &GpuDevice,
    label: &str,
    elements: u64,
    host: Host,
) -> wgpu::Buffer {
    let mapped = match host {
        Host::Writes if device.host_mapped => wgpu::BufferUsages::MAP_WRITE,
        Host::Reads if device.host_mapped => wgpu::BufferUsages::MAP_READ,
        _ => wgpu::BufferUsages::empty(),
    };
    let usage = wgpu::BufferUsages::STORAGE
        | wgpu::BufferUsages::COPY_SRC
        | wgpu::BufferUsages::COPY_DST
        | mapped;
    device.buffer(label, buffer_size(elements), usage)
}

/// A buffer to read `elements` words back through: none for no words, or
/// where the host maps the storage buffer itself (`host_reads`).
pub(super) fn staging_buffer(
    device: &GpuDevice,
    elements: u64,
    host_reads: bool,
) -> Option<wgpu::Buffer> {
    (elements > 0 && !(host_reads && device.host_mapped))
        .then(|| readback_buffer(device, 4 * elements))
}

/// The buffer an output is read from: its staging buffer, or itself when
/// the host maps it (`None` when it is empty).
pub(super) fn read_from<'a>(
    elements: u64,
    buffer: &'a wgpu::Buffer,
    staging: Option<&'a wgpu::Buffer>,
) -> Option<&'a wgpu::Buffer> {
    (elements > 0).then_some(staging.unwrap_or(buffer))
}

/// How the host uses a kernel binding.
fn host_of(role: Role) -> Host {
    match role {
        Role::Input(_) => Host::Writes,
        Role::Output(_) => Host::Reads,
        Role::Temp => Host::Nothing,
    }
}

pub(super) fn elements(b: &BindingInfo) -> u64 {
    b.shape.iter().product()
}

/// Maps the staging buffers of submitted work (with the output index
/// each holds), waits once, and copies them into `outputs`.
pub(super) fn read_staged<'a>(
    device: &GpuDevice,
    staged: impl Iterator<Item = (usize, &'a wgpu::Buffer)>,
    outputs: &mut [TensorMut<'_>],
) -> Result<()> {
    let staged: Vec<_> = staged.collect();
    map_all(device, staged.iter().map(|(_, b)| *b), wgpu::MapMode::Read)?;
    for (j, staging) in staged {
        let bytes = staging.get_mapped_range(..).map_err(gpu_err)?;
        read_into(&bytes, &mut outputs[j].data);
        drop(bytes);
        staging.unmap();
    }
    Ok(())
}

/// A kernel compiled for a GPU.
pub struct GpuKernel {
    device: Arc<GpuDevice>,
    schedule: Schedule,
    pub wgsl: WgslKernel,
    pipelines: Pipelines,
    launches: Launches<Launch>,
}

/// Device buffers of one launch (one per binding), bind groups per stage,
/// and per binding a staging buffer for a non-empty output to be read back
/// through and one for a non-empty input to be written into (none where
/// the host maps the storage buffers).
struct Launch {
    buffers: Vec<wgpu::Buffer>,
    groups: Vec<wgpu::BindGroup>,
    staging: Vec<Option<wgpu::Buffer>>,
    uploads: Vec<Option<wgpu::Buffer>>,
}

impl Buffers for Launch {
    fn into_buffers(self) -> impl Iterator<Item = wgpu::Buffer> {
        let staged = self.staging.into_iter().chain(self.uploads).flatten();
        self.buffers.into_iter().chain(staged)
    }
}

impl GpuKernel {
    pub(super) fn new(
        device: Arc<GpuDevice>,
        schedule: Schedule,
        wgsl: WgslKernel,
        pipelines: Pipelines,
    ) -> GpuKernel {
        GpuKernel {
            launches: Launches::new(Arc::clone(&device)),
            device,
            schedule,
            wgsl,
            pipelines,
        }
    }

    pub(super) fn device(&self) -> &Arc<GpuDevice> {
        &self.device
    }

    pub fn fusion(&self) -> &tilefuse_ir::Fusion {
        self.schedule.fusion()
    }

    /// Runs the kernel once: uploads `inputs` (one per fusion input) and
    /// reads the results back into `outputs` (one per fusion output).
    pub fn run_into(&self, inputs: &[TensorRef<'_>], outputs: &mut [TensorMut<'_>]) -> Result<()> {
        check_outputs(self.fusion(), self.fusion().outputs(), outputs)
            .map_err(|e| RuntimeError::Argument(e.to_string()))?;
        let mut encoder = self
            .device
            .device
            .create_command_encoder(&Default::default());
        let launch = self.prepare(inputs, &mut encoder)?;
        self.encode(&launch.groups, &mut encoder, None);
        for (buffer, staging) in launch.buffers.iter().zip(&launch.staging) {
            if let Some(staging) = staging {
                encoder.copy_buffer_to_buffer(buffer, 0, staging, 0, staging.size());
            }
        }
        self.device.queue.submit([encoder.finish()]);
        let sources = self
            .wgsl
            .bindings
            .iter()
            .zip(&launch.buffers)
            .zip(&launch.staging)
            .filter_map(|((b, buffer), staging)| match b.role {
                Role::Output(j) => Some((j, read_from(elements(b), buffer, staging.as_ref())?)),
                _ => None,
            });
        read_staged(&self.device, sources, outputs)?;
        self.launches.give_back(launch);
        Ok(())
    }

    /// Times `repeat` launches after `warmup` ones, and, when `warmup` is
    /// not 0, after at least [`WARM_UP`] of them (`warmup == 0` times at
    /// once: a caller timing in chunks warms the GPU once, not per chunk);
    /// returns seconds per launch, from timestamp queries when the adapter
    /// has them.
    pub fn time(&self, inputs: &[TensorRef<'_>], warmup: usize, repeat: usize) -> Result<Vec<f64>> {
        let device = &self.device.device;
        let mut encoder = device.create_command_encoder(&Default::default());
        let launch = self.prepare(inputs, &mut encoder)?;
        // The copies up are not timed.
        self.device.queue.submit([encoder.finish()]);
        self.device.wait()?;
        let queries = self.device.timestamps.then(|| {
            device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("tilefuse timing"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            })
        });
        let mut samples = Vec::with_capacity(repeat.min(1 << 16));
        let warming = Instant::now();
        let mut warmed = 0;
        while samples.len() < repeat {
            if tilefuse_ir::interrupt::requested() {
                return Err(RuntimeError::Interrupted);
            }
            let mut encoder = device.create_command_encoder(&Default::default());
            self.encode(&launch.groups, &mut encoder, queries.as_ref());
            let resolved = queries
                .as_ref()
                .map(|q| buffers::resolve_timestamps(device, &mut encoder, q));
            let start = Instant::now();
            self.device.queue.submit([encoder.finish()]);
            self.device.wait()?;
            let host = start.elapsed().as_secs_f64();
            if warmed < warmup || (warmup > 0 && warming.elapsed() < WARM_UP) {
                warmed += 1;
                continue;
            }
            samples.push(match resolved {
                Some(buffer) => {
                    let ticks = buffers::read_timestamps(&self.device, &buffer)?;
                    ticks * f64::from(self.device.queue.get_timestamp_period()) * 1e-9
                }
                None => host,
            });
        }
        self.launches.give_back(launch);
        Ok(samples)
    }

    /// Checks the inputs and writes them into a launch, recording their
    /// copies up in `encoder`.
    fn prepare(
        &self,
        inputs: &[TensorRef<'_>],
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<Launch> {
        check_arguments(self.schedule.fusion(), inputs)
            .map_err(|e| RuntimeError::Argument(e.to_string()))?;
        let launch = self.take_launch();
        let bindings = self.wgsl.bindings.iter().zip(&launch.buffers);
        let uploads = bindings
            .zip(&launch.uploads)
            .filter_map(|((b, buffer), staging)| match b.role {
                Role::Input(i) => Some((buffer, staging.as_ref(), inputs[i].data)),
                _ => None,
            });
        upload(&self.device, uploads, encoder)?;
        Ok(launch)
    }

    fn take_launch(&self) -> Launch {
        let kept = self.launches.take();
        kept.unwrap_or_else(|| self.new_launch())
    }

    fn new_launch(&self) -> Launch {
        let buffers: Vec<wgpu::Buffer> = self
            .wgsl
            .bindings
            .iter()
            .map(|b| storage_buffer(&self.device, &b.name, elements(b), host_of(b.role)))
            .collect();
        let (mut staging, mut uploads) = (Vec::new(), Vec::new());
        for b in &self.wgsl.bindings {
            let n = elements(b);
            let output = matches!(b.role, Role::Output(_));
            staging.push(
                output
                    .then(|| staging_buffer(&self.device, n, true))
                    .flatten(),
            );
            let input = matches!(b.role, Role::Input(_));
            uploads.push(input.then(|| upload_buffer(&self.device, n)).flatten());
        }
        let groups = self.bind_groups(&buffers.iter().collect::<Vec<_>>());
        Launch {
            buffers,
            groups,
            staging,
            uploads,
        }
    }

    /// A bind group per stage over `buffers` (one per binding).
    pub(super) fn bind_groups(&self, buffers: &[&wgpu::Buffer]) -> Vec<wgpu::BindGroup> {
        self.wgsl
            .stages
            .iter()
            .zip(self.pipelines.iter())
            .map(|(stage, pipeline)| {
                let entries: Vec<wgpu::BindGroupEntry> = stage
                    .bindings
                    .iter()
                    .map(|&b| wgpu::BindGroupEntry {
                        binding: b,
                        resource: buffers[b as usize].as_entire_binding(),
                    })
                    .collect();
                self.device
                    .device
                    .create_bind_group(&wgpu::BindGroupDescriptor {
                        label: Some(&stage.entry_point),
                        layout: &pipeline.get_bind_group_layout(0),
                        entries: &entries,
                    })
            })
            .collect()
    }

    /// Records the kernel's dispatches over its bind `groups`.
    pub(super) fn encode(
        &self,
        groups: &[wgpu::BindGroup],
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<&wgpu::QuerySet>,
    ) {
        let last = self.wgsl.stages.len().saturating_sub(1) as u32;
        for (i, (stage, pipeline)) in self
            .wgsl
            .stages
            .iter()
            .zip(self.pipelines.iter())
            .enumerate()
        {
            // The first pass writes the start, the last the end.
            let (first, last) = ((i == 0).then_some(0), (i as u32 == last).then_some(1));
            let timestamp_writes = timestamps
                .filter(|_| first.is_some() || last.is_some())
                .map(|query_set| wgpu::ComputePassTimestampWrites {
                    query_set,
                    beginning_of_pass_write_index: first,
                    end_of_pass_write_index: last,
                });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(&stage.entry_point),
                timestamp_writes,
            });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &groups[i], &[]);
            let [x, y, z] = stage.workgroups;
            pass.dispatch_workgroups(x, y, z);
        }
    }
}
