//! Host ↔ device copies. Storage has no `bool`, so masks travel as `u32`.

use tilefuse_ir::{DType, Data, Tensor};

use super::{GpuDevice, gpu_err};
use crate::error::Result;

/// The size of a storage buffer of `elements` 32-bit words: shaders may
/// read a binding as `vec4`s, so at least one, and whole ones (an empty
/// tensor still gets a buffer to bind).
pub fn buffer_size(elements: u64) -> u64 {
    (4 * elements).next_multiple_of(16).max(16)
}

pub fn upload_bytes(data: &Data) -> Vec<u8> {
    match data {
        Data::F32(v) => bytemuck::cast_slice(v).to_vec(),
        Data::I32(v) => bytemuck::cast_slice(v).to_vec(),
        Data::U32(v) => bytemuck::cast_slice(v).to_vec(),
        Data::Bool(v) => v.iter().flat_map(|&b| u32::from(b).to_le_bytes()).collect(),
    }
}

/// Copies `size` bytes of `buffer` to the host.
fn read_back(device: &GpuDevice, buffer: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
    let staging = device.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("tilefuse readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
    device.queue.submit([encoder.finish()]);
    let (tx, rx) = std::sync::mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| drop(tx.send(r)));
    device.wait()?;
    rx.recv().map_err(gpu_err)?.map_err(gpu_err)?;
    let bytes = staging.get_mapped_range(..).map_err(gpu_err)?.to_vec();
    staging.unmap();
    Ok(bytes)
}

pub fn download(
    device: &GpuDevice,
    buffer: &wgpu::Buffer,
    dtype: DType,
    shape: &[u64],
) -> Result<Tensor> {
    let n = shape.iter().product::<u64>() as usize;
    let bytes = if n == 0 {
        Vec::new()
    } else {
        read_back(device, buffer, 4 * n as u64)?
    };
    // A `Vec<u8>` need not be aligned for `u32`: read the words by value.
    let words = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")));
    let data = match dtype {
        DType::F32 => Data::F32(words.map(f32::from_bits).collect()),
        DType::I32 => Data::I32(words.map(|w| w as i32).collect()),
        DType::U32 => Data::U32(words.collect()),
        DType::Bool => Data::Bool(words.map(|w| w != 0).collect()),
    };
    Ok(Tensor {
        shape: shape.iter().map(|&d| d as usize).collect(),
        data,
    })
}

/// Resolves the two timestamps of a launch into a buffer to read back.
pub fn resolve_timestamps(
    device: &wgpu::Device,
    encoder: &mut wgpu::CommandEncoder,
    q: &wgpu::QuerySet,
) -> wgpu::Buffer {
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("tilefuse timestamps"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    encoder.resolve_query_set(q, 0..2, &buffer, 0);
    buffer
}

/// Ticks between the two timestamps.
pub fn read_timestamps(device: &GpuDevice, buffer: &wgpu::Buffer) -> Result<f64> {
    let bytes = read_back(device, buffer, 16)?;
    let tick = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    Ok(tick(1).saturating_sub(tick(0)) as f64)
}
