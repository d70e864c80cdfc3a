//! Where a tape's loads read at one point of the loops, and how that moves
//! from one lane step to the next.

use super::{AHEAD, SOURCES, Tape, Uniform};

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
        for ((d, from), to) in d
            .offsets_mut()
            .into_iter()
            .zip(self.offsets())
            .zip(to.offsets())
        {
            for ((d, from), to) in d.iter_mut().zip(from).zip(to) {
                *d = to - from;
            }
        }
        d
    }

    pub fn advance(&mut self, by: &Offsets) {
        self.advance_times(by, 1);
    }

    /// `times` steps of `by` at once.
    pub fn advance_times(&mut self, by: &Offsets, times: i64) {
        for (xs, ds) in self.offsets_mut().into_iter().zip(by.offsets()) {
            for (x, d) in xs.iter_mut().zip(ds) {
                *x += d * times;
            }
        }
    }

    /// Every kind of offset, as one slice each.
    fn offsets(&self) -> [&[i64]; 3] {
        [&self.loads, &self.uniforms, &self.ahead]
    }

    fn offsets_mut(&mut self) -> [&mut [i64]; 3] {
        [&mut self.loads, &mut self.uniforms, &mut self.ahead]
    }
}

impl Tape {
    /// The offsets of the loads (at lane 0) with the loop variables at
    /// `env`.
    pub fn offsets(&self, env: &[i64]) -> Offsets {
        let mut o = Offsets::default();
        self.offsets_into(env, &mut o);
        o
    }

    /// [`Tape::offsets`] written into `o`: the slots this tape reads (the
    /// others keep what they held).
    pub(super) fn offsets_into(&self, env: &[i64], o: &mut Offsets) {
        for (slot, load) in o.loads.iter_mut().zip(&self.loads) {
            *slot = load.at.eval(env);
        }
        for (slot, u) in o.uniforms.iter_mut().zip(&self.uniforms) {
            if let Uniform::Load(_, rest) = u {
                *slot = rest.eval(env);
            }
        }
        for (slot, (_, at)) in o.ahead.iter_mut().zip(&self.ahead) {
            *slot = at.eval(env);
        }
    }
}
