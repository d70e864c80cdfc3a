//! What a row loop's passes prefetch and which stores stream past the
//! caches, each checked against the reference.

use tilefuse_ir::{DType, Fusion, ReduceOp, UnaryOp};
use tilefuse_sched::Schedule;
use tilefuse_sched::ir::{BufferId, Role};

use super::super::code::{Step, TapeStore};
use super::compiled;
use super::tests::{defaults_with, lane_blocks, runs_right, weighted_softmax};

/// The buffers each lane step's tape in `steps` prefetches, in order.
fn prefetches(steps: &[Step]) -> Vec<Vec<usize>> {
    let mut blocks = Vec::new();
    lane_blocks(steps, &mut blocks);
    (blocks.iter())
        .map(|(_, _, b)| {
            b.tape
                .iter()
                .flat_map(|t| t.tape.ahead().map(|(b, _)| b))
                .collect()
        })
        .collect()
}

/// A row loop's last pass over a re-read input of 2^21 elements or more
/// prefetches its next row, and the output's row is prefetched before
/// the pass that stores it:
/// - a softmax: both in its `exp` pass, the second and last that reads
///   the row (the max's reads it from memory; the division stores);
/// - a layer norm: the output's row in its variance pass, the input's
///   next row in its normalization, which reads it last and stores.
///
/// A pointwise op, which reads each element once, prefetches nothing,
/// and neither does a softmax of an input that the caches hold. Each runs
/// right.
#[test]
fn the_last_pass_over_a_row_prefetches_the_next() {
    let softmax = tilefuse_testing::softmax(&[512, 4096], 1);
    let small = tilefuse_testing::softmax(&[64, 4096], 1);
    let norm = tilefuse_testing::batch_norm(&[512, 4096], 1);
    let pointwise = exp_of(&[512, 4096], false);
    for (f, want) in [
        (&softmax, &[&[][..], &[0, 1], &[], &[]][..]),
        (&small, &[&[], &[], &[], &[]]),
        (&norm, &[&[], &[1], &[0]]),
        (&pointwise, &[&[]]),
    ] {
        let (s, steps, want) = planned(f, want);
        assert_eq!(prefetches(&steps), want);
        runs_right(f, &s, 2, 1e-5);
    }
}

/// `f` scheduled by default and compiled, with `want` (per pass: 0 for
/// the input, 1 for the output) as buffer ids.
fn planned(f: &Fusion, want: &[&[usize]]) -> (Schedule, Vec<Step>, Vec<Vec<usize>>) {
    let (_, s) = defaults_with(f, &[]);
    let (x, y) = (buffer(&s, Role::Input(0)), buffer(&s, Role::Output(0)));
    let want = (want.iter())
        .map(|p| p.iter().map(|&i| [x, y][i]).collect())
        .collect();
    let steps = compiled(&s);
    (s, steps, want)
}

/// The id of the buffer with `role` in `s`'s kernel.
fn buffer(s: &Schedule, role: Role) -> usize {
    (s.kernel().buffers.iter())
        .position(|b| b.role == role)
        .unwrap()
}

/// Whether each lane step's tape in `steps` streams its stores, in order.
fn streamed(steps: &[Step]) -> Vec<bool> {
    let mut blocks = Vec::new();
    lane_blocks(steps, &mut blocks);
    (blocks.iter())
        .map(|(_, _, b)| (b.tape.iter()).any(|t| matches!(t.into, TapeStore::Stream)))
        .collect()
}

/// `exp(x)` over `shape`, and, with `sum`, its row sums as a second
/// output.
fn exp_of(shape: &[usize], sum: bool) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let e = f.unary(UnaryOp::Exp, x).unwrap();
    f.output(e).unwrap();
    if sum {
        let s = f.reduce(ReduceOp::Sum, e, Some(&[1]), false).unwrap();
        f.output(s).unwrap();
    }
    f
}

/// A store of 2^23 elements or more to an output that the kernel never
/// reads streams past the caches: a softmax's division, a layer norm's
/// normalization (whose next row the variance pass prefetches instead,
/// and which prefetches none of the output's lines), a pointwise op.
/// Smaller outputs keep plain stores. Each runs right.
#[test]
fn large_outputs_stream_past_the_caches() {
    let softmax = tilefuse_testing::softmax(&[2048, 4096], 1);
    let norm = tilefuse_testing::batch_norm(&[2048, 4096], 1);
    let pointwise = exp_of(&[2048, 4096], false);
    let smaller = tilefuse_testing::softmax(&[1024, 4096], 1);
    let no = [false; 4];
    for (f, prefetch, streams) in [
        (
            &softmax,
            &[&[][..], &[0], &[], &[]][..],
            &[false, false, false, true][..],
        ),
        (&norm, &[&[], &[0], &[]], &[false, false, true]),
        (&pointwise, &[&[]], &[true]),
        (&smaller, &[&[], &[0, 1], &[], &[]], &no),
    ] {
        let (s, steps, prefetch) = planned(f, prefetch);
        assert_eq!(
            (prefetches(&steps), streamed(&steps)),
            (prefetch, streams.to_vec())
        );
        runs_right(f, &s, 2, 1e-5);
    }
}

/// An output that the kernel reads back (`exp(x)`, then its row sums
/// from it) keeps plain stores: a streamed line leaves the caches.
#[test]
fn an_output_read_back_does_not_stream() {
    let f = exp_of(&[2048, 4096], true);
    let (_, s) = defaults_with(&f, &[]);
    let kernel = s.kernel();
    let e = BufferId(buffer(&s, Role::Output(0)) as u32);
    assert!(
        kernel.blocks.iter().any(|b| b.reads(e)),
        "the sums read `exp(x)`"
    );
    assert_eq!(streamed(&compiled(&s)), [false, false]);
    runs_right(&f, &s, 2, 1e-5);
}

/// Short rows stream too: a weighted softmax over 131072 rows of 64,
/// whose last lane step stores a workgroup's rows at once, `w` wrapping
/// around them, streams (the tiles start on the output's lines, not on
/// the rows). It runs right on two and three threads.
#[test]
fn short_rows_stream_their_output() {
    let f = weighted_softmax(131072, 64);
    let (_, s) = defaults_with(&f, &[]);
    assert_eq!(streamed(&compiled(&s)).last(), Some(&true));
    runs_right(&f, &s, 2, 1e-5);
    runs_right(&f, &s, 3, 1e-5);
}
