//! A kernel's temporaries, reused across launches instead of allocated per
//! call: a launch takes a set (allocating one only when every set is in
//! use by a concurrent launch) and gives it back when it finishes. Each
//! starts at a fixed offset within a 4 KiB page ([`PLACES`]).

use std::sync::{Mutex, PoisonError};

use tilefuse_ir::DType;

use super::memory::{RawBuf, Storage, element_size};
use crate::error::Result;

/// Where temporaries start within a 4 KiB page, taken in turn. Rows of an
/// input and of a temporary at the same offset within their pages alias in
/// the CPU's store-to-load forwarding (4 KiB aliasing): a column sum's
/// partials, wherever the allocator put them, made kernels of the same
/// params 1.3x apart, and an input 16 bytes into a page (where large
/// numpy arrays usually start) took 1.4x the time of one 2 KiB in. These
/// offsets keep temporaries 2 KiB and 3 KiB from those inputs, and 1 KiB
/// from each other.
const PLACES: [usize; 2] = [2048 + 64, 3072 + 64];

/// One temporary: `len` elements from `start` of its storage.
#[derive(Debug)]
pub struct Temp {
    storage: Storage,
    start: usize,
    len: usize,
}

impl Temp {
    /// `len` elements of `dtype` starting `place` bytes into a page.
    fn placed(dtype: DType, len: usize, place: usize) -> Result<Temp> {
        let size = element_size(dtype);
        let mut storage = Storage::try_new(dtype, len + PAGE / size)?;
        let start = (place + PAGE - storage.address() % PAGE) % PAGE / size;
        Ok(Temp {
            storage,
            start,
            len,
        })
    }

    pub fn view(&mut self) -> RawBuf {
        self.storage.view_of(self.start, self.len)
    }
}

const PAGE: usize = 4096;

#[derive(Debug)]
pub struct Arena {
    /// Dtype and elements of each temporary, in buffer order.
    layout: Vec<(DType, usize)>,
    free: Mutex<Vec<Vec<Temp>>>,
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
    pub fn take(&self) -> Result<Vec<Temp>> {
        if let Some(set) = self.lock().pop() {
            return Ok(set);
        }
        (self.layout.iter().enumerate())
            .map(|(i, &(dtype, len))| Temp::placed(dtype, len, PLACES[i % PLACES.len()]))
            .collect()
    }

    pub fn give_back(&self, set: Vec<Temp>) {
        let mut free = self.lock();
        if free.len() < self.keep {
            free.push(set);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<Temp>>> {
        // A set is pushed or popped whole, so a panic elsewhere cannot
        // leave the list half-changed.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every temporary starts at its place within a page, whatever the
    /// allocator returned, and has its own length, of any element type.
    #[test]
    fn temporaries_start_at_their_places_within_a_page() {
        let layout = vec![
            (DType::F32, 64 * 1024),
            (DType::I32, 7),
            (DType::Bool, 5),
            (DType::F32, 0),
            (DType::U32, 3000),
        ];
        let arena = Arena::new(layout.clone(), 1);
        for _ in 0..3 {
            let mut set = arena.take().unwrap();
            for (i, (t, &(dtype, len))) in set.iter_mut().zip(&layout).enumerate() {
                let view = t.view();
                assert_eq!((view.dtype, view.len()), (dtype, len), "temporary {i}");
                assert_eq!(view.address() % PAGE, PLACES[i % 2], "temporary {i}");
            }
            arena.give_back(set);
        }
    }
}
