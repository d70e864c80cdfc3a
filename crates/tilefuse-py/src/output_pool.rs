//! Large output buffers, recycled. A fresh allocation of tens of megabytes
//! is new pages that the OS faults in and zeroes on first touch: for a
//! 2^24-element call that cost more than a third of the kernel's time.
//! So the memory of a large output array goes back to this pool when the
//! array is freed, and the next call that needs that many bytes writes
//! into it (torch's caching allocator does the same for GPU memory). The
//! pool keeps at most [`CAP`] bytes, the most recently freed first.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc, dealloc};
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;

/// Outputs smaller than this come from numpy: the C allocator recycles
/// them already.
pub const MIN_BYTES: usize = 1 << 20;
/// The most bytes of freed buffers kept.
const CAP: usize = 256 << 20;
/// Cache-line alignment, the most any kernel's vector loads could use.
const ALIGN: usize = 64;

/// Memory of `layout`, not initialized.
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a block is plain memory owned by whoever holds it; it has no
// interior state to race on.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

static FREE: Mutex<VecDeque<Block>> = Mutex::new(VecDeque::new());

/// The free blocks. Nothing panics while holding them, and a list of
/// whole blocks is valid whatever happened: a poisoned lock is used as is.
fn free_blocks() -> MutexGuard<'static, VecDeque<Block>> {
    FREE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Owns the memory of one output array (its numpy `base`); gives it back
/// to the pool when the array is freed.
#[pyclass(frozen, module = "tilefuse._native")]
pub struct PooledBuffer {
    /// `None` only while it is given back.
    block: Option<Block>,
}

impl PooledBuffer {
    /// `bytes` of memory (recycled when the pool has a block of that
    /// size), or `MemoryError`.
    pub fn new(bytes: usize) -> PyResult<PooledBuffer> {
        let layout = Layout::from_size_align(bytes, ALIGN)
            .map_err(|e| PyMemoryError::new_err(e.to_string()))?;
        let recycled = {
            let mut free = free_blocks();
            let i = free.iter().position(|b| b.layout == layout);
            i.and_then(|i| free.remove(i))
        };
        let block = match recycled {
            Some(b) => b,
            None => fresh(layout)?,
        };
        Ok(PooledBuffer { block: Some(block) })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.block
            .as_ref()
            .expect("held until dropped")
            .ptr
            .as_ptr()
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let mut free = free_blocks();
        free.push_front(block);
        let mut kept = 0;
        free.retain(|b| {
            kept += b.layout.size();
            kept <= CAP
        });
    }
}

fn fresh(layout: Layout) -> PyResult<Block> {
    // SAFETY: `layout` has a non-zero size (at least MIN_BYTES).
    let ptr = NonNull::new(unsafe { alloc(layout) }).ok_or_else(|| {
        PyMemoryError::new_err(format!("cannot allocate {} bytes", layout.size()))
    })?;
    Ok(Block { ptr, layout })
}
