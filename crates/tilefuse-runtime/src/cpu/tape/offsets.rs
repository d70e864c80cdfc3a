//! Where a tape's loads read at one point of the loops, and how that moves
//! from one lane step to the next.

use super::{AHEAD, SOURCES};

/// Where a tape's loads read (lane 0 of each contiguous load, and each
/// uniform load) and where its prefetches ask (lane 0) at one point of
/// the loops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Offsets {
    pub(super) loads: [i64; SOURCES],
    pub(super) uniforms: [i64; SOURCES],
    pub(super) ahead: [i64; AHEAD],
}

impl Offsets {
    /// Each offset's change from `self` to `to`.
    pub fn step_to(&self, to: &Offsets) -> Offsets {
        let mut d = Offsets::default();
        for (i, x) in d.loads.iter_mut().enumerate() {
            *x = to.loads[i] - self.loads[i];
        }
        for (i, x) in d.uniforms.iter_mut().enumerate() {
            *x = to.uniforms[i] - self.uniforms[i];
        }
        for (i, x) in d.ahead.iter_mut().enumerate() {
            *x = to.ahead[i] - self.ahead[i];
        }
        d
    }

    pub fn advance(&mut self, by: &Offsets) {
        self.advance_times(by, 1);
    }

    /// `times` steps of `by` at once.
    pub fn advance_times(&mut self, by: &Offsets, times: i64) {
        for (x, d) in self.loads.iter_mut().zip(&by.loads) {
            *x += d * times;
        }
        for (x, d) in self.uniforms.iter_mut().zip(&by.uniforms) {
            *x += d * times;
        }
        for (x, d) in self.ahead.iter_mut().zip(&by.ahead) {
            *x += d * times;
        }
    }
}
