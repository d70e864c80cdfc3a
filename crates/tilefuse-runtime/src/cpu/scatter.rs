//! Lane steps whose lanes store to elements that are not consecutive. A
//! lane's element is lane 0's plus, for each loop the lanes stand for, the
//! loop's step times its iteration: the lane's digit in the mixed radix of
//! the loops' extents. The tape computes the lanes into a contiguous run
//! first; they are then stored or combined one by one in lane order, which
//! is the nest's order, so each element takes its values in the order the
//! loops would give them. A GPU schedule's partial sums (each invocation's
//! vec2 of every n-th pair of a row) come this way: 2 lanes a step, they
//! took a 100 x 256 softmax 2.5 ms. A reduction whose innermost lanes
//! are a row's (see [`Segments`]) folds its rows side by side (short
//! rows) or one after another.
#![allow(unsafe_code)]

use std::ops::Range;

use tilefuse_ir::ReduceOp;

use super::ctx::Ctx;
use super::lanes::{combine_into, fold_f32};
use super::tape::{Registers, Sink, TILE, Tape, fold_as_run};

/// Where lanes store, past lane 0's element.
#[derive(Debug)]
pub(super) struct Scatter {
    /// Extent and step of each loop, outermost first, and whether it
    /// drives a reduce iterator upward (a lane can be its element's first
    /// visit only where every such loop is at 0).
    pub(super) digits: Vec<(i64, i64, bool)>,
    /// Set where the lanes fold in rows of consecutive lanes.
    segments: Option<Segments>,
}

/// Lanes whose innermost digits reduce without moving the store: every
/// `len` consecutive lanes (a segment, from a multiple of `len`) fold into
/// one element, and the other digits (`rows`) give each segment its own.
/// Lane by lane, the digits' odometer and a combine per lane cost 2.5 ns,
/// 2.6 ms of a 65536 x 16 row sum. Segments are computed into a staged
/// run first, a few rows at a time (see [`STAGED_LANES`]), where the
/// shortest fold side by side, column by column, each still in its lanes'
/// order, and the others each as a whole; rows longer than a tile fold
/// one after another through the tape, as a lane step of their own would.
#[derive(Debug)]
struct Segments {
    len: usize,
    rows: Box<Scatter>,
}

/// Segments shorter than this fold side by side: one thread's 16384 x 64
/// row sum took 0.79 ms a lane step a row, 0.42 side by side and 0.25
/// each folded as a whole, which costs rows of 4 and 8 more than side by
/// side does (a 65536 x 4 softmax 1.28x the time).
const SIDE_BY_SIDE_BELOW: usize = 16;

impl Scatter {
    /// Lane `i` at `i * stride`.
    pub(super) fn strided(stride: i64) -> Scatter {
        Scatter {
            digits: vec![(i64::MAX, stride, false)],
            segments: None,
        }
    }

    /// Lanes over loops described as [`Scatter::digits`].
    pub(super) fn over(digits: Vec<(i64, i64, bool)>) -> Scatter {
        let inner = digits
            .iter()
            .rev()
            .take_while(|&&(_, step, drives)| step == 0 && drives);
        let len: i64 = inner.clone().map(|&(extent, ..)| extent).product();
        let rows = digits[..digits.len() - inner.count()].to_vec();
        let segments = (len > 1 && one_element_each(&rows)).then(|| Segments {
            len: len as usize,
            rows: Box::new(Scatter {
                digits: rows,
                segments: None,
            }),
        });
        Scatter { digits, segments }
    }

    /// The length of the rows the lanes fold in, if they do (see
    /// [`Segments`]).
    pub(super) fn in_rows(&self) -> Option<usize> {
        self.segments.as_ref().map(|g| g.len)
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

/// Whether digits that reduce nothing give every lane its own element:
/// sorted by the size of their steps, each steps past all the ones before.
fn one_element_each(digits: &[(i64, i64, bool)]) -> bool {
    let mut digits: Vec<_> = digits.iter().filter(|&&(extent, ..)| extent > 1).collect();
    digits.sort_by_key(|&&(_, step, _)| step.unsigned_abs());
    let mut span = 1u64;
    digits.into_iter().all(|&(extent, step, drives)| {
        let fits = !drives && step.unsigned_abs() >= span;
        span = step.unsigned_abs().saturating_mul(extent as u64);
        fits
    })
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
        if let (Some(op), Some(segments)) = (op, &scatter.segments)
            && lanes.0 % segments.len == 0
            && lanes.1 % segments.len == 0
        {
            let len = segments.len;
            let rows = (lanes.0 / len) as i64..((lanes.0 + lanes.1) / len) as i64;
            let elements = (segments.rows.offsets(rows)).map(|(at, _)| element(at));
            return self.fold_segments((tape, op), len, elements, (lanes, registers), env, first);
        }
        let offsets = tape.offsets(env);
        tape.run_staged(self.buffers, &offsets, lanes, registers, |values| {
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
                let value = match first && start {
                    true => v,
                    false => combined(
                        run.map_or_else(|| *element(at), |(_, acc)| acc),
                        v,
                        op,
                        false,
                    ),
                };
                run = Some((at, value));
            }
            if let Some((here, acc)) = run {
                *element(here) = acc;
            }
        });
    }
}

impl Ctx<'_> {
    /// Lanes `lanes` of whole segments of `len` (see [`Segments`]), each
    /// folded by `op` into its one of `elements`.
    fn fold_segments<'a>(
        &self,
        (tape, op): (&Tape, ReduceOp),
        len: usize,
        mut elements: impl Iterator<Item = &'a mut f32>,
        ((start, n), registers): ((usize, usize), &mut Registers),
        env: &[i64],
        first: bool,
    ) {
        let offsets = tape.offsets(env);
        // A tape that is one load folds its rows where they lie, as its
        // tape's lanes would fold (a tape run a row took a 16384 x 128
        // row sum 2.6x the time on one thread).
        if let Some(values) = tape.consecutive(self.buffers, &offsets, (start, n)) {
            return fold_segments_of(values, len, op, first, elements);
        }
        if len > TILE {
            for (row, e) in (start..start + n).step_by(len).zip(elements) {
                let sink = Sink::Fold(op);
                let folded = tape.run_from(self.buffers, &offsets, (row, len), registers, sink);
                *e = combined(*e, folded.expect("a fold returns its value"), op, first);
            }
            return;
        }
        let rows = STAGED_LANES / len;
        for from in (start..start + n).step_by(rows * len) {
            let lanes = (from, (rows * len).min(start + n - from));
            tape.run_staged(self.buffers, &offsets, lanes, registers, |values| {
                fold_segments_of(values, len, op, first, elements.by_ref())
            });
        }
    }
}

/// Lanes staged at a time where rows fold: 8 KB stay in L1 between the
/// tape's stores and the folds' loads (staged whole, a row sum's rows of
/// 256 took 2.3x the time). Rows of up to a tile run a few at a time,
/// not each a run of the tape of its own: a run's fixed cost (offsets,
/// gathers, a padded fold) was some 100 ns a row, 90 % of a one-thread
/// variance over rows of 128. Longer rows fold in their run's registers:
/// staged, an RMS norm over rows of 512-1024 took 1.1-1.15x the time.
const STAGED_LANES: usize = 2048;

/// Folds `values`, rows of `len`, into the next of `elements` each (see
/// `fold_rows` and `fold_each`).
fn fold_segments_of<'a>(
    values: &[f32],
    len: usize,
    op: ReduceOp,
    first: bool,
    elements: impl Iterator<Item = &'a mut f32>,
) {
    match len < SIDE_BY_SIDE_BELOW {
        true => fold_rows(values, len, op, first, elements),
        false => fold_each(values, len, op, first, elements),
    }
}

/// `element` combined with `v` by `op`, or `v` on the element's `first`
/// visit.
fn combined(element: f32, v: f32, op: ReduceOp, first: bool) -> f32 {
    let mut cell = [element];
    combine_into(&mut cell, &[v], op, first);
    cell[0]
}

/// Folds `values`, rows of `len`, into `elements`, one a row, each row
/// as a whole, as a tape's run over its lanes would (`first`: each row
/// starts its element).
fn fold_each<'a>(
    values: &[f32],
    len: usize,
    op: ReduceOp,
    first: bool,
    elements: impl Iterator<Item = &'a mut f32>,
) {
    let rows = values.chunks_exact(len).zip(elements);
    if len <= TILE && len.is_multiple_of(8) {
        // `fold_as_run`'s own choice for these rows, made once: made a
        // row, rows of 32 took 1.07x the time.
        rows.for_each(|(row, e)| *e = combined(*e, fold_f32(row, op), op, first));
    } else {
        rows.for_each(|(row, e)| *e = combined(*e, fold_as_run(row, op), op, first));
    }
}

/// Folds `values`, rows of `len`, into `elements`, one a row, rows side
/// by side (`first`: each row starts its element).
fn fold_rows<'a>(
    values: &[f32],
    len: usize,
    op: ReduceOp,
    first: bool,
    mut elements: impl Iterator<Item = &'a mut f32>,
) {
    const SIDE: usize = 64;
    let (mut acc, mut column) = ([0f32; SIDE], [0f32; SIDE]);
    let mut mine: Vec<&mut f32> = Vec::with_capacity(SIDE);
    for rows in values.chunks(SIDE * len) {
        let n = rows.len() / len;
        let (acc, column) = (&mut acc[..n], &mut column[..n]);
        let gather = |c: usize, into: &mut [f32]| {
            (into.iter_mut().zip(rows.chunks_exact(len))).for_each(|(x, row)| *x = row[c]);
        };
        mine.extend(elements.by_ref().take(n));
        if first {
            gather(0, acc);
        } else {
            acc.iter_mut().zip(&mine).for_each(|(a, e)| *a = **e);
            gather(0, column);
            combine_into(acc, column, op, false);
        }
        for c in 1..len {
            gather(c, column);
            combine_into(acc, column, op, false);
        }
        mine.drain(..).zip(acc.iter()).for_each(|(e, &v)| *e = v);
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::ReduceOp;

    use super::super::lanes::fold_f32;
    use super::{Scatter, fold_each, fold_rows};

    /// Rows of 3 lanes that reduce without moving the store, 4 rows a step
    /// apart: segments of 3. Rows whose reduce lanes move the store, or
    /// rows that would share elements, fold lane by lane.
    #[test]
    fn short_rows_of_lanes_are_segments() {
        let len = |d: Vec<(i64, i64, bool)>| Scatter::over(d).segments.map(|g| g.len);
        assert_eq!(len(vec![(4, 1, false), (3, 0, true)]), Some(3));
        assert_eq!(
            len(vec![(2, 8, false), (4, 1, false), (3, 0, true)]),
            Some(3)
        );
        assert_eq!(len(vec![(4, 1, false), (3, 1, true)]), None);
        assert_eq!(len(vec![(4, 1, false), (2, 2, false), (3, 0, true)]), None);
        assert_eq!(len(vec![(4, 0, true), (3, 0, true)]), Some(12));
    }

    /// Rows folded side by side give each element its row's fold in lane
    /// order, past a block of rows, from the element or (first) without it;
    /// a maximum keeps a row's NaN and the sign of zeros.
    #[test]
    fn rows_fold_side_by_side_in_lane_order() {
        let values: Vec<f32> = (0..70 * 3).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut got = vec![1.5f32; 70];
        fold_rows(&values, 3, ReduceOp::Sum, false, got.iter_mut());
        let want: Vec<f32> = (values.chunks(3))
            .map(|r| ((1.5 + r[0]) + r[1]) + r[2])
            .collect();
        assert_eq!(got, want);
        let rows = [1.0, f32::NAN, 2.0, -0.0, -0.0, -0.0, -3.0, -1.0, -2.0];
        let mut got = [7.0f32; 3];
        fold_rows(&rows, 3, ReduceOp::Max, true, got.iter_mut());
        assert!(got[0].is_nan(), "{got:?}");
        assert!(got[1] == 0.0 && got[1].is_sign_negative(), "{got:?}");
        assert_eq!(got[2], -1.0);
    }

    /// Rows folded each as a whole give each element its row's fold, as
    /// a tape's run over the row's lanes adds it (a row of 20 padded to 24
    /// with -0, one of 300 a tile at a time), combined with the element
    /// or (first) alone; a maximum keeps a row's NaN.
    #[test]
    fn rows_fold_each_as_a_whole() {
        for len in [20, 300] {
            let values: Vec<f32> = (0..5 * len).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut got = vec![1.5f32; 5];
            fold_each(&values, len, ReduceOp::Sum, false, got.iter_mut());
            let want: Vec<f32> = (values.chunks(len)).map(|r| 1.5 + as_a_run(r)).collect();
            assert_eq!(got, want, "rows of {len}");
        }
        let mut rows = vec![-2.0f32; 32];
        rows[3] = f32::NAN;
        rows[20] = 7.0;
        let mut got = [9.0f32; 2];
        fold_each(&rows, 16, ReduceOp::Max, true, got.iter_mut());
        assert!(got[0].is_nan(), "{got:?}");
        assert_eq!(got[1], 7.0);
    }

    /// A sum as `run_tiles` adds a row: tiles of 256 lanes added lane by
    /// lane into one, padded with -0 to a multiple of 8, then folded.
    fn as_a_run(row: &[f32]) -> f32 {
        let mut acc = vec![-0f32; row.len().min(256).next_multiple_of(8)];
        for tile in row.chunks(256) {
            acc.iter_mut().zip(tile).for_each(|(a, x)| *a += x);
        }
        fold_f32(&acc, ReduceOp::Sum)
    }

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
