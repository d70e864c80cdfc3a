//! A kernel's temporaries, reused across launches instead of allocated per
//! call: a launch takes a set (allocating one only when every set is in
//! use by a concurrent launch) and gives it back when it finishes.

use std::sync::{Mutex, PoisonError};

use tilefuse_ir::DType;

use super::memory::Storage;
use crate::error::Result;

#[derive(Debug)]
pub struct Arena {
    /// Dtype and elements of each temporary, in buffer order.
    layout: Vec<(DType, usize)>,
    free: Mutex<Vec<Vec<Storage>>>,
    /// The most sets kept between launches (more are freed on return).
    keep: usize,
}

impl Arena {
    pub fn new(layout: Vec<(DType, usize)>, keep: usize) -> Arena {
        Arena {
            layout,
            free: Mutex::default(),
            keep: keep.max(1),
        }
    }

    /// A set of temporaries: a kept one, or a new one. Their contents are
    /// whatever the last launch left (kernels write before they read).
    pub fn take(&self) -> Result<Vec<Storage>> {
        if let Some(set) = self.lock().pop() {
            return Ok(set);
        }
        self.layout
            .iter()
            .map(|&(dtype, len)| Storage::try_new(dtype, len))
            .collect()
    }

    pub fn give_back(&self, set: Vec<Storage>) {
        let mut free = self.lock();
        if free.len() < self.keep {
            free.push(set);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<Storage>>> {
        // A set is pushed or popped whole, so a panic elsewhere cannot
        // leave the list half-changed.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
