//! Lane steps whose lanes store to elements that are not consecutive. A
//! lane's element is lane 0's plus, for each loop the lanes stand for, the
//! loop's step times its iteration: the lane's digit in the mixed radix of
//! the loops' extents. The tape computes the lanes into a contiguous run
//! first; they are then stored or combined one by one in lane order, which
//! is the nest's order, so each element takes its values in the order the
//! loops would give them. A GPU schedule's partial sums (each invocation's
//! vec2 of every n-th pair of a row) come this way: 2 lanes a step, they
//! took a 100 x 256 softmax 2.5 ms.
#![allow(unsafe_code)]

use std::ops::Range;

use tilefuse_ir::ReduceOp;

use super::ctx::Ctx;
use super::lanes::combine_into;
use super::tape::{Registers, Tape};

/// Where lanes store, past lane 0's element.
#[derive(Debug)]
pub(super) struct Scatter {
    /// Extent and step of each loop, outermost first, and whether it
    /// drives a reduce iterator upward (a lane can be its element's first
    /// visit only where every such loop is at 0).
    pub(super) digits: Vec<(i64, i64, bool)>,
}

impl Scatter {
    /// Lane `i` at `i * stride`.
    pub(super) fn strided(stride: i64) -> Scatter {
        Scatter {
            digits: vec![(i64::MAX, stride, false)],
        }
    }

    /// Lanes over loops described as [`Scatter::digits`].
    pub(super) fn over(digits: Vec<(i64, i64, bool)>) -> Scatter {
        Scatter { digits }
    }

    /// The offset of each of the lanes `lanes`, in order, and whether
    /// every loop that drives a reduce iterator is at 0 there: an odometer
    /// over the digits, started at the first lane's.
    fn offsets(&self, lanes: Range<i64>) -> impl Iterator<Item = (i64, bool)> + '_ {
        let mut digit = vec![0; self.digits.len()];
        let mut rest = lanes.start;
        for (d, &(extent, ..)) in digit.iter_mut().zip(&self.digits).rev() {
            (*d, rest) = (rest % extent, rest / extent);
        }
        let mut at: i64 = (digit.iter().zip(&self.digits))
            .map(|(d, &(_, step, _))| d * step)
            .sum();
        let mut driven = (digit.iter().zip(&self.digits))
            .filter(|&(&d, &(.., drives))| drives && d > 0)
            .count();
        lanes.map(move |_| {
            let here = (at, driven == 0);
            for (d, &(extent, step, drives)) in digit.iter_mut().zip(&self.digits).rev() {
                *d += 1;
                at += step;
                driven += usize::from(drives && *d == 1);
                if *d < extent {
                    break;
                }
                at -= step * extent;
                driven -= usize::from(drives);
                *d = 0;
            }
            here
        })
    }
}

impl Ctx<'_> {
    /// Lanes `lanes` (start, count) of a lane step whose tape scatters
    /// from element `base`, stored or combined by `op` (`first`: lane 0
    /// is its element's first visit).
    pub(super) fn scatter_lanes(
        &self,
        (tape, op): (&Tape, Option<ReduceOp>),
        scatter: &Scatter,
        (base, buffer): (i64, usize),
        (lanes, registers): ((usize, usize), &mut Registers),
        env: &[i64],
        first: bool,
    ) {
        let buf = &self.buffers[buffer];
        let range = lanes.0 as i64..(lanes.0 + lanes.1) as i64;
        // SAFETY: the lanes' own elements (module docs of `memory`), in
        // bounds as the schedule's are.
        let element = |at: i64| unsafe { &mut buf.slice_mut::<f32>((base + at) as usize, 1)[0] };
        tape.run_staged(self.buffers, env, lanes, registers, |values| {
            let lanes = values.iter().zip(scatter.offsets(range));
            let Some(op) = op else {
                lanes.for_each(|(&v, (at, _))| *element(at) = v);
                return;
            };
            // Consecutive lanes of one element (a short row's) combine in
            // a register, in lane order, and the element is written once.
            let mut run: Option<(i64, f32)> = None;
            for (&v, (at, start)) in lanes {
                if let Some((here, acc)) = run.take_if(|(here, _)| *here != at) {
                    *element(here) = acc;
                }
                let value = if first && start {
                    v
                } else {
                    let mut cell = [run.map_or_else(|| *element(at), |(_, acc)| acc)];
                    combine_into(&mut cell, &[v], op, false);
                    cell[0]
                };
                run = Some((at, value));
            }
            if let Some((here, acc)) = run {
                *element(here) = acc;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Scatter;

    /// Lanes over loops of 2 x 3 (steps 10 and 1, the inner one reducing),
    /// from lane 2: the odometer carries into the outer loop after each 3,
    /// and a lane starts its element where the inner loop is at 0.
    #[test]
    fn offsets_count_in_the_loops_mixed_radix() {
        let s = Scatter::over(vec![(2, 10, false), (3, 1, true)]);
        let lanes: Vec<(i64, bool)> = s.offsets(2..6).collect();
        assert_eq!(lanes, [(2, false), (10, true), (11, false), (12, false)]);
        let strided = Scatter::strided(4);
        let lanes: Vec<i64> = strided.offsets(1..4).map(|(at, _)| at).collect();
        assert_eq!(lanes, [4, 8, 12]);
    }
}
