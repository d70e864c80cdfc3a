//! Buffers of dropped kernels, kept for the next ones by size and usage
//! (PyTorch's caching allocator, without splitting blocks). A tuner builds
//! a kernel per candidate: on an H100, allocating and freeing the device
//! and staging memory of a 16M-element problem took more host time than
//! the candidate's launches.

use std::collections::VecDeque;

use wgpu::BufferUsages;

/// The most bytes kept spare; the oldest buffers are freed past it.
pub const SPARE_BYTES: u64 = 512 << 20;

/// Idle buffers `B` with their size and usage, oldest first. Only buffers
/// no submitted work still uses and that are not mapped come here (a
/// kernel's finished launches).
pub(super) struct Spare<B> {
    buffers: VecDeque<(u64, BufferUsages, B)>,
    bytes: u64,
}

impl<B> Default for Spare<B> {
    fn default() -> Self {
        Spare {
            buffers: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<B> Spare<B> {
    /// A kept buffer of exactly `size` bytes and `usage`, if there is one.
    pub fn take(&mut self, size: u64, usage: BufferUsages) -> Option<B> {
        let i = (self.buffers.iter()).position(|&(s, u, _)| s == size && u == usage)?;
        let (_, _, buffer) = self.buffers.remove(i)?;
        self.bytes -= size;
        Some(buffer)
    }

    /// Keeps `buffer`, freeing the oldest ones past [`SPARE_BYTES`].
    pub fn put(&mut self, size: u64, usage: BufferUsages, buffer: B) {
        self.bytes += size;
        self.buffers.push_back((size, usage, buffer));
        while self.bytes > SPARE_BYTES {
            let Some((old, _, _)) = self.buffers.pop_front() else {
                break;
            };
            self.bytes -= old;
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sizes_and_usages_are_taken_and_the_oldest_freed_first() {
        let (storage, read) = (BufferUsages::STORAGE, BufferUsages::MAP_READ);
        let mut spare = Spare::default();
        spare.put(64, storage, "a");
        spare.put(64, read, "b");
        spare.put(64, storage, "c");
        assert_eq!(spare.take(64, read), Some("b"));
        assert_eq!(spare.take(48, storage), None);
        assert_eq!(spare.take(64, storage), Some("a"));
        assert_eq!(spare.bytes(), 64);
        // Past the bound, the oldest go: "c", then "d".
        spare.put(SPARE_BYTES / 2, storage, "d");
        spare.put(SPARE_BYTES / 2, read, "e");
        assert_eq!(spare.bytes(), SPARE_BYTES);
        assert_eq!(spare.take(64, storage), None);
        spare.put(1, read, "f");
        assert_eq!(spare.take(SPARE_BYTES / 2, storage), None);
        assert_eq!(spare.take(SPARE_BYTES / 2, read), Some("e"));
        // One buffer over the bound is not kept at all.
        spare.put(SPARE_BYTES + 1, storage, "g");
        assert_eq!(spare.bytes(), 0);
    }
}
