//! The launches (device and staging buffers, bind groups) of a kernel's or
//! a sequence's finished calls, kept for its next calls; the buffers of
//! those it does not keep, and of all of them when it drops, go to the
//! device's spare buffers for other kernels.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::GpuDevice;

/// Launches kept between calls: enough for a few concurrent callers.
pub(super) const KEEP_LAUNCHES: usize = 4;

/// A launch's buffers, all idle once its call has waited.
pub(super) trait Buffers {
    fn into_buffers(self) -> impl Iterator<Item = wgpu::Buffer>;
}

pub(super) struct Launches<L: Buffers> {
    device: Arc<GpuDevice>,
    kept: Mutex<Vec<L>>,
}

impl<L: Buffers> Launches<L> {
    pub fn new(device: Arc<GpuDevice>) -> Self {
        Launches {
            device,
            kept: Mutex::default(),
        }
    }

    /// A kept launch, if any is free.
    pub fn take(&self) -> Option<L> {
        self.kept().pop()
    }

    /// Keeps the launch of a finished call, or recycles its buffers.
    pub fn give_back(&self, launch: L) {
        let mut kept = self.kept();
        if kept.len() < KEEP_LAUNCHES {
            kept.push(launch);
        } else {
            self.device.recycle(launch.into_buffers());
        }
    }

    fn kept(&self) -> MutexGuard<'_, Vec<L>> {
        // A launch is pushed or popped whole: a panic cannot leave the list
        // half-changed.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<L: Buffers> Drop for Launches<L> {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut().unwrap_or_else(PoisonError::into_inner));
        self.device
            .recycle(kept.into_iter().flat_map(L::into_buffers));
    }
}
