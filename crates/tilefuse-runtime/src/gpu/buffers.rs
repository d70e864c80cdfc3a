//! Host ↔ device copies. Storage has no `bool`, so masks travel as `u32`.

use std::sync::{Mutex, PoisonError};

use tilefuse_ir::{DataMut, DataRef};

use super::{GpuDevice, gpu_err};
use crate::cpu::pool;
use crate::error::Result;

/// Host copies of at least this many bytes are split among the CPU
/// device's threads: one thread writing mapped memory, or faulting in the
/// pages of a fresh output array, moves a fraction of what the machine's
/// memory can (`benches/gpu_call.py`, its `np.copyto` rows).
const PARALLEL_COPY: usize = 4 << 20;

/// The bytes one thread copies at a time in a split copy.
const COPY_PIECE: usize = 1 << 20;

/// Copies `src` into `dst` (of the same length), split among the CPU
/// device's threads when it is large. `dst` is write-only: a mapped buffer
/// may be write-combined memory.
fn copy_bytes(mut dst: wgpu::WriteOnly<'_, [u8]>, src: &[u8]) {
    if src.len() < PARALLEL_COPY {
        dst.copy_from_slice(src);
        return;
    }
    // Whole pieces are arrays, which a thread may be sent (a `WriteOnly`
    // slice may not); each is taken by the one thread that claims it.
    let (whole, mut rest) = dst.into_chunks::<COPY_PIECE>();
    let (from_whole, from_rest) = src.split_at(src.len() - rest.len());
    let pieces: Vec<_> = (whole.into_iter())
        .zip(from_whole.chunks_exact(COPY_PIECE))
        .map(|(to, from)| Mutex::new(Some((to, from))))
        .collect();
    let threads = pool::threads_from_env().unwrap_or_else(|_| pool::machine_parallelism());
    pool::share(threads, pieces.len(), &|tasks: &mut pool::Tasks<'_>| {
        for t in tasks {
            let piece = pieces[t]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let (to, from) = piece.expect("a piece is copied once");
            wgpu::WriteOnly::<[u8]>::from(to).copy_from_slice(from);
        }
    });
    rest.copy_from_slice(from_rest);
}

/// The size of a storage buffer of `elements` 32-bit words: shaders may
/// read a binding as `vec4`s, so at least one, and whole ones (an empty
/// tensor still gets a buffer to bind).
pub fn buffer_size(elements: u64) -> u64 {
    (4 * elements).next_multiple_of(16).max(16)
}

/// The 32-bit words of `data` as bytes (masks widened to `u32`, halves
/// two to a word, the last one padded).
fn words(data: DataRef<'_>) -> std::borrow::Cow<'_, [u8]> {
    match data {
        DataRef::F16(v) => padded(bytemuck::cast_slice(v)),
        DataRef::BF16(v) => padded(bytemuck::cast_slice(v)),
        DataRef::F32(v) => bytemuck::cast_slice(v).into(),
        DataRef::I32(v) => bytemuck::cast_slice(v).into(),
        DataRef::U32(v) => bytemuck::cast_slice(v).into(),
        DataRef::Bool(v) => v
            .iter()
            .flat_map(|&b| u32::from(b).to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
    }
}

/// `bytes` as whole 32-bit words: copied with zeros appended only where
/// they end mid-word.
fn padded(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if bytes.len().is_multiple_of(4) {
        return bytes.into();
    }
    let mut words = bytes.to_vec();
    words.resize(bytes.len().next_multiple_of(4), 0);
    words.into()
}

/// Maps every buffer (after the work submitted before), waiting once.
pub fn map_all<'a>(
    device: &GpuDevice,
    buffers: impl Iterator<Item = &'a wgpu::Buffer>,
    mode: wgpu::MapMode,
) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut pending = 0;
    for buffer in buffers {
        let tx = tx.clone();
        buffer.map_async(mode, .., move |r| drop(tx.send(r)));
        pending += 1;
    }
    device.wait()?;
    for _ in 0..pending {
        rx.recv().map_err(gpu_err)?.map_err(gpu_err)?;
    }
    Ok(())
}

/// A buffer the host writes an input of `elements` words into for the
/// device to copy from: none for no words, or where the host maps the
/// storage buffer itself. Kept with a launch, so a call allocates none.
pub fn upload_buffer(device: &GpuDevice, elements: u64) -> Option<wgpu::Buffer> {
    let usage = wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC;
    (elements > 0 && !device.host_mapped)
        .then(|| device.buffer("tilefuse upload", 4 * elements, usage))
}

/// Copies each input into its buffer, waiting once: into the mapped buffer
/// itself where the host maps it (no staging buffer), else into its
/// staging buffer, which `encoder` then copies on the device (submit it
/// before the work that reads the inputs).
pub fn upload<'a>(
    device: &GpuDevice,
    inputs: impl Iterator<Item = (&'a wgpu::Buffer, Option<&'a wgpu::Buffer>, DataRef<'a>)>,
    encoder: &mut wgpu::CommandEncoder,
) -> Result<()> {
    let inputs: Vec<_> = inputs.filter(|(_, _, d)| !d.is_empty()).collect();
    let written = inputs
        .iter()
        .map(|&(buffer, staging, _)| staging.unwrap_or(buffer));
    map_all(device, written, wgpu::MapMode::Write)?;
    for (buffer, staging, data) in inputs {
        let bytes = words(data);
        let size = bytes.len() as u64;
        let written = staging.unwrap_or(buffer);
        let mut view = written.get_mapped_range_mut(..size).map_err(gpu_err)?;
        copy_bytes(view.slice(..), &bytes);
        drop(view);
        written.unmap();
        if let Some(staging) = staging {
            encoder.copy_buffer_to_buffer(staging, 0, buffer, 0, size);
        }
    }
    Ok(())
}

/// Copies the 32-bit words of a mapped buffer into `out` (halves two to a
/// word).
pub fn read_into(bytes: &[u8], out: &mut DataMut<'_>) {
    match out {
        DataMut::F32(v) => copy_words(bytes, v),
        DataMut::I32(v) => copy_words(bytes, v),
        DataMut::U32(v) => copy_words(bytes, v),
        DataMut::F16(v) => copy_words(bytes, v),
        DataMut::BF16(v) => copy_words(bytes, v),
        DataMut::Bool(v) => {
            for (o, w) in v.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = w != [0; 4];
            }
        }
    }
}

/// Copies bytes into `out`'s bytes: a mapping need not be aligned for `T`.
fn copy_words<T: bytemuck::Pod>(bytes: &[u8], out: &mut [T]) {
    let len = size_of_val(out);
    copy_bytes(bytemuck::cast_slice_mut(out).into(), &bytes[..len]);
}

/// A buffer of `size` bytes that a device buffer is copied into for the
/// host to read.
pub fn readback_buffer(device: &GpuDevice, size: u64) -> wgpu::Buffer {
    let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
    device.buffer("tilefuse readback", size, usage)
}

/// Copies `size` bytes of `buffer` to the host.
fn read_back(device: &GpuDevice, buffer: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
    let staging = readback_buffer(device, size);
    let mut encoder = device.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
    device.queue.submit([encoder.finish()]);
    map_all(device, std::iter::once(&staging), wgpu::MapMode::Read)?;
    let bytes = staging.get_mapped_range(..).map_err(gpu_err)?.to_vec();
    staging.unmap();
    device.recycle([staging]);
    Ok(bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_copies_write_every_byte_once() {
        // Under, at and over the split size, with and without a partial
        // last piece.
        for len in [
            0,
            7,
            PARALLEL_COPY - 1,
            PARALLEL_COPY,
            PARALLEL_COPY + 3 * COPY_PIECE + 13,
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0xAA; len];
            copy_bytes(wgpu::WriteOnly::from_mut(dst.as_mut_slice()), &src);
            assert!(dst == src, "a copy of {len} bytes differs");
        }
    }

    #[test]
    fn words_are_read_from_an_unaligned_mapping() {
        let words = [1.5f32, -0.0, f32::NAN, 7.0];
        let mut bytes = vec![0u8];
        bytes.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        let mut out = [0f32; 4];
        read_into(&bytes[1..], &mut DataMut::F32(&mut out));
        assert_eq!(out.map(f32::to_bits), words.map(f32::to_bits));
    }
}
