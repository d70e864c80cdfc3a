//! The compiler's choices of steps, each checked against the reference.

use tilefuse_ir::{BinaryOp, DType, Fusion, ReduceOp, UnaryOp, evaluate};
use tilefuse_sched::Schedule;
use tilefuse_sched::ir::LoopId;
use tilefuse_testing::{compare, inputs};

use super::super::code::{BlockCode, Step};
use super::compiled;

/// Extent and `parallel` of each lane step in `steps`, in order.
fn lane_steps(steps: &[Step], out: &mut Vec<(i64, bool)>) {
    let mut blocks = Vec::new();
    lane_blocks(steps, &mut blocks);
    out.extend(
        blocks
            .iter()
            .map(|&(extent, parallel, _)| (extent, parallel)),
    );
}

/// Each lane step in `steps`, in order: extent, `parallel`, block.
pub(super) fn lane_blocks<'a>(steps: &'a [Step], out: &mut Vec<(i64, bool, &'a BlockCode)>) {
    for step in steps {
        match step {
            Step::Lanes {
                extent,
                parallel,
                block,
                ..
            } => out.push((*extent, *parallel, block)),
            Step::Loop { body, .. } => lane_blocks(body, out),
            _ => {}
        }
    }
}

/// Iterations and lanes of each row-by-row step in `steps`, in order.
fn row_steps(steps: &[Step], out: &mut Vec<(i64, i64)>) {
    for step in steps {
        match step {
            Step::Rows(r) => out.push((r.r.extent, r.lanes.extent)),
            Step::Loop { body, .. } => row_steps(body, out),
            _ => {}
        }
    }
}

/// `a * 2` (plus a row-broadcast `bias`) over `rows` x `cols`, its
/// columns split into (unrolled, up to 1024) steps of 4 vectorized
/// lanes, as a GPU's stores, its rows maybe parallel: the lane steps
/// it compiles to, and its result on three threads against the
/// reference.
fn split_store(rows: usize, cols: usize, bias: bool, parallel: bool) -> Vec<(i64, bool)> {
    let mut f = Fusion::new();
    let a = f.input(&[rows, cols], DType::F32, Some("a")).unwrap();
    let two = f.constant(2.0, DType::F32).unwrap();
    let mut y = f.binary(BinaryOp::Mul, a, two).unwrap();
    if bias {
        let b = f.input(&[cols], DType::F32, Some("bias")).unwrap();
        y = f.binary(BinaryOp::Add, y, b).unwrap();
    }
    f.output(y).unwrap();
    let (mut s, rows_loop, parts) = columns_split(&f, 4);
    if cols <= 1024 {
        s.unroll(parts[0]).unwrap();
    }
    s.vectorize(parts[1]).unwrap();
    if parallel {
        s.parallel(rows_loop).unwrap();
    }
    runs_right(&f, &s, 3, 1e-6);
    let mut lanes = Vec::new();
    lane_steps(&compiled(&s), &mut lanes);
    lanes
}

/// `f` with everything inlined and its output's columns split by
/// `by`: the schedule, the rows' loop and the split's two loops.
fn columns_split(f: &Fusion, by: u64) -> (Schedule, LoopId, Vec<LoopId>) {
    let mut s = Schedule::new(f);
    s.compute_inline_all(&[]);
    let block = *s.get_blocks().last().unwrap();
    let loops = s.get_loops(block).unwrap();
    let parts = s.split(loops[1], &[None, Some(by)], None).unwrap();
    (s, loops[0], parts)
}

/// Contiguous loops become one lane step, as far out as every access
/// stays contiguous: all 8 x 64 elements, the bias wrapping around
/// each row of 64 (it does not move with the rows; rows of 100 start
/// the tiles of 256 lanes at other columns); each row's 8192
/// where rows are too long to wrap around (see `periodic`). A split that
/// does not divide the columns cuts each row's step at the edge. Lanes
/// through a parallel loop are shared by the threads where there are
/// enough of them.
#[test]
fn contiguous_loop_chains_run_as_one_lane_step() {
    assert_eq!(split_store(8, 64, false, false), [(512, false)]);
    assert_eq!(split_store(8, 64, true, false), [(512, false)]);
    assert_eq!(split_store(8, 100, true, false), [(800, false)]);
    assert_eq!(split_store(8, 66, false, false), [(68, false)]);
    assert_eq!(split_store(8, 64, false, true), [(512, false)]);
    assert_eq!(split_store(9, 1 << 13, false, true), [(9 << 13, true)]);
    assert_eq!(split_store(9, 1 << 13, true, true), [(1 << 13, false)]);
}

/// The CPU device's default params for `f` with each path set to its
/// value, and `f` scheduled by them.
pub(super) fn defaults_with(
    f: &Fusion,
    edits: &[(&str, serde_json::Value)],
) -> (tilefuse_params::HeuristicParams, Schedule) {
    use tilefuse_schedulers::{heuristics, schedule};
    let info = crate::Device::cpu().info();
    let mut params = heuristics(f, None, &info).unwrap();
    for (path, value) in edits {
        params = params.with(path, value.clone()).unwrap();
    }
    let s = schedule(f, &params, &info).unwrap();
    (params, s)
}

/// Asserts that `s` on `threads` threads gives the reference's result
/// for `f` on fresh inputs.
pub(super) fn runs_right(f: &Fusion, s: &Schedule, threads: usize, tolerance: f32) {
    let x = inputs(f, 7);
    let device = crate::Device::Cpu(crate::cpu::CpuDevice { threads });
    let got = device.build(s).unwrap().run(&x).unwrap();
    compare(&evaluate(f, &x).unwrap(), &got, tolerance).unwrap();
}

/// A matmul's B staged in workgroup memory (`async_gmem_load_operands`)
/// is copied a k step at a time as one lane step: the copy's fused
/// loop, split into the tile's rows and columns and flattened again,
/// reads as contiguous (it ran 4 lanes at a time, interpreted).
#[test]
fn a_staged_tile_copies_as_one_lane_step() {
    let f = tilefuse_testing::matmul(64, 256, 256);
    let (params, s) = defaults_with(&f, &[("async_gmem_load_operands", true.into())]);
    let tilefuse_params::HeuristicParams::Matmul(m) = &params else {
        panic!("matmul params")
    };
    let tile = m.tile_sizes.cta_tile;
    let mut lanes = Vec::new();
    lane_steps(&compiled(&s), &mut lanes);
    let copy = i64::from(tile.k) * i64::from(tile.n);
    assert!(lanes.contains(&(copy, false)), "{lanes:?}");
    runs_right(&f, &s, 2, 1e-5);
}

/// Split-k's sum of the partial products runs a slice of k at a time
/// over a row of 1024 lanes (it ran 2 lanes at a time, one output
/// element after another: 10 ms for 256^3 against 0.3 ms for the
/// whole matmul without split-k). Over a 200 x 100 output, the flat
/// lanes past its 20000 elements and the rows guarded as `i / 100 <
/// 200` (read as `i < 20000`) cut each row of lanes to a prefix (the
/// guard on the quotient was checked lane by lane: 0.93 ms for the
/// whole matmul with `splitk_factor` 8, now 0.19).
#[test]
fn a_split_k_sum_adds_a_slice_to_a_row_of_lanes() {
    for ([m, n, k], slices) in [([64, 48, 256], 4), ([200, 100, 64], 8)] {
        let f = tilefuse_testing::matmul(m, n, k);
        let (_, s) = defaults_with(&f, &[("splitk_factor", slices.into())]);
        let mut rows = Vec::new();
        row_steps(&compiled(&s), &mut rows);
        assert_eq!(rows, [(slices, 1024)], "{m}x{n}x{k}");
        runs_right(&f, &s, 2, 1e-5);
    }
}

/// A column sum over two leading axes fused into one loop runs row by
/// row: the loop's quotient and remainder flatten back into it (it ran
/// a lane step a row: 7.4 ms for 64 x 512 x 256, then 2.5).
#[test]
fn a_column_sum_over_fused_leading_axes_runs_row_by_row() {
    let mut f = Fusion::new();
    let x = f.input(&[8, 32, 64], DType::F32, Some("x")).unwrap();
    let y = f.reduce(ReduceOp::Sum, x, Some(&[0, 1]), false).unwrap();
    f.output(y).unwrap();
    // Column blocks, the rows not spread over workgroups.
    let edits = [
        ("cross_workgroup_outer_reduction", false.into()),
        ("launch.grid", serde_json::Value::Null),
    ];
    let (_, s) = defaults_with(&f, &edits);
    let mut rows = Vec::new();
    row_steps(&compiled(&s), &mut rows);
    assert!(
        !rows.is_empty() && rows.iter().all(|&(r, _)| r == 8 * 32),
        "{rows:?}"
    );
    runs_right(&f, &s, 2, 1e-5);
}

/// The tiles of A and of a transposed B staged in workgroup memory
/// have rows apart in memory: a k step's tile copies as one lane
/// step, its loads wrapping around each of its rows (4 lanes at a
/// time, then 8: 38 ms, then 0.8, for 256^3; then a row at a time:
/// 0.095 ms for 64 x 192 x 256, against 0.085 now).
#[test]
fn a_staged_tile_copies_as_one_lane_step_across_its_rows() {
    let f = tilefuse_testing::matmul_transposed(64, 192, 256, false, true);
    // k steps of 128 whatever this CPU's default (rows that wrap).
    let edits = [
        ("async_gmem_load_operands", true.into()),
        ("tile_sizes.warp_tile.k", 128.into()),
        ("tile_sizes.cta_tile.k", 128.into()),
    ];
    let (params, s) = defaults_with(&f, &edits);
    let tilefuse_params::HeuristicParams::Matmul(m) = &params else {
        panic!("matmul params")
    };
    let tile = &m.tile_sizes.cta_tile;
    let (a, b) = (i64::from(tile.m * tile.k), i64::from(tile.n * tile.k));
    let mut lanes = Vec::new();
    lane_steps(&compiled(&s), &mut lanes);
    assert!(tile.k < 256, "rows short enough to wrap around");
    assert!(
        lanes.contains(&(a, false)) && lanes.contains(&(b, false)),
        "{lanes:?}"
    );
    runs_right(&f, &s, 2, 1e-5);
}

/// A matmul in invocations of 4 x 4 elements (8 x 8 of them a 32 x 32
/// tile): the accumulator's start runs as one lane step over the
/// tile's 1024 elements, its store with the bias and relu a row of
/// the tile (32 lanes) at a time, both in the order of the elements
/// rather than the invocations' (they ran 4 lanes at a time).
#[test]
fn invocation_tiles_start_and_store_in_the_elements_order() {
    let f = tilefuse_testing::matmul_bias_relu(64, 96, 80);
    let tiles = super::super::gemm_match::tests::invocations_of_4x4();
    let (_, s) = defaults_with(&f, &[("tile_sizes", tiles)]);
    let mut lanes = Vec::new();
    lane_steps(&compiled(&s), &mut lanes);
    assert_eq!(lanes, [(1024, false), (32, false)]);
    runs_right(&f, &s, 2, 1e-5);
}

/// A swizzled grid over more rows of tiles than there are (8 rows of
/// tiles, 1 of them real): every block of a workgroup past the edge
/// fails the same predicate. Lowering clips the loop to the one that
/// runs (`clip_guarded_loops`) where the predicate is linear in it;
/// the loop checks the predicate once an iteration where it is not
/// (a fuzzed 8 x 256 x 100 matmul: 6.6 ms, 0.26).
#[test]
fn workgroups_past_a_swizzled_edge_skip_their_nests() {
    let f = tilefuse_testing::matmul_transposed(8, 96, 100, true, false);
    let (_, s) = defaults_with(&f, &[("grid_swizzle_factor", 8.into())]);
    let steps = compiled(&s);
    // The grid: workgroup rows (one), then the swizzled workgroups.
    let [Step::Loop { body, .. }] = &steps[..] else {
        panic!("one workgroup-row loop")
    };
    let [
        Step::Loop {
            var,
            extent,
            bounds,
            ..
        },
    ] = &body[..]
    else {
        panic!("a loop of workgroups a row")
    };
    let mut env = vec![0; 64]; // more than the kernel's loops
    let runs = (0..*extent)
        .filter(|&i| {
            env[*var] = i;
            bounds.iter().all(|(x, b)| x.eval(&env) < *b)
        })
        .count();
    assert_eq!(runs, 1);
    runs_right(&f, &s, 2, 1e-5);
}

/// Columns split by 64 that do not divide 100: lanes past the edge
/// fail a predicate linear in them, so each row runs as one step of
/// the split's 128 lanes cut to its first 100, through the tape.
#[test]
fn a_ragged_edge_along_the_lanes_runs_its_prefix_through_the_tape() {
    let mut f = Fusion::new();
    let a = f.input(&[5, 100], DType::F32, Some("a")).unwrap();
    let y = f.unary(UnaryOp::Exp, a).unwrap();
    f.output(y).unwrap();
    let (mut s, _, parts) = columns_split(&f, 64);
    s.vectorize(parts[1]).unwrap();
    let mut blocks = Vec::new();
    let steps = compiled(&s);
    lane_blocks(&steps, &mut blocks);
    let [(128, false, code)] = blocks[..] else {
        panic!("one lane step of 128: {blocks:?}")
    };
    assert!(code.tape.is_some() && code.predicates.is_empty());
    assert_eq!(code.prefix.len(), 1);
    runs_right(&f, &s, 2, 1e-6);
}

/// The steps of the reductions (the blocks that fold or combine) in
/// `steps`: the extent of each lane step, whether it has a tape.
fn reduction_lanes(steps: &[Step]) -> Vec<(i64, bool)> {
    let mut blocks = Vec::new();
    lane_blocks(steps, &mut blocks);
    (blocks.iter())
        .filter(|(_, _, b)| b.reduce.is_some())
        .map(|&(extent, _, b)| (extent, b.tape.is_some()))
        .collect()
}

/// A row's reduction split into a GPU's unrolled and vectorized steps
/// (a 64-wide row in 16 x 2 x 2) folds as one lane step of the row
/// (it folded 2 lanes at a time: a 256 x 64 layer norm in 0.95 ms
/// against 0.06), one row a workgroup.
#[test]
fn a_split_row_reduction_folds_as_one_lane_step() {
    let f = tilefuse_testing::softmax(&[256, 64], 1);
    let (_, s) = defaults_with(
        &f,
        &[
            ("launch.workgroup_size", serde_json::json!([1, 1, 1])),
            ("persistent_kernel", false.into()),
            ("vectorization_factor_reduction", 2.into()),
            ("unroll_factor_reduction", 2.into()),
        ],
    );
    assert_eq!(reduction_lanes(&compiled(&s)), [(64, true), (64, true)]);
    runs_right(&f, &s, 2, 1e-5);
}

/// A row reduced by invocations, each taking every n-th element (or
/// pair of elements) of the row into its partial result before the
/// partials combine:
/// - with 2 invocations, each partial folds as one lane step (in a
///   loop over the two) of strided loads over its 128 elements (they
///   ran element by element: a 100 x 256 softmax in 8 ms, 0.11 now),
///   and the two partials of the workgroup's 64 rows as one of 128
///   (distributed from the rows' nests, the partials wrapping);
/// - with 512 for 64 columns (16 rows a workgroup), the 448
///   invocations past a row's end are clipped (`clip_guarded_loops`),
///   each row's partials fold row by row, and they combine as one step
///   of the 512 a row (2 lanes at a time before: 3.6 ms, then 0.17,
///   for a layer norm);
/// - with 2 invocations of pairs, each partial folds its pairs as one
///   lane step, its loads wrapping around each pair (2.5 ms in steps
///   of 2; then the row's 256 elements scattered into the partials as
///   one step, 0.55 ms on a later machine, where it takes 0.30 now),
///   the partials again as one step of 128.
#[test]
fn cross_invocation_partials_run_as_long_lane_steps() {
    for (shape, invocations, rows, vector, want, rows_of) in [
        ([100, 256], 2, None, 1, &[(128, true), (128, true)][..], 0),
        ([256, 64], 512, Some(16), 1, &[(512, true)], 64),
        ([100, 256], 2, None, 2, &[(128, true), (128, true)], 0),
    ] {
        let f = tilefuse_testing::softmax(&shape, 1);
        let (_, s) = defaults_with(
            &f,
            &[
                ("launch.workgroup_size", serde_json::Value::Null),
                ("persistent_kernel", false.into()),
                ("cross_invocation_inner_reduction", true.into()),
                ("reduction_invocations", invocations.into()),
                ("rows_per_workgroup", rows.into()),
                ("unroll_factor_reduction", 4.into()),
                ("vectorization_factor_reduction", vector.into()),
            ],
        );
        let steps = compiled(&s);
        assert_eq!(reduction_lanes(&steps), want.repeat(2), "{shape:?}");
        let mut row_by_row = Vec::new();
        row_steps(&steps, &mut row_by_row);
        let rows_want = if rows_of > 0 {
            vec![(1, rows_of); 2]
        } else {
            vec![]
        };
        assert_eq!(row_by_row, rows_want, "{shape:?}");
        runs_right(&f, &s, 2, 1e-5);
    }
}

/// `softmax(x) * w` over `rows` x `cols`, `w` along the rows.
pub(super) fn weighted_softmax(rows: usize, cols: usize) -> Fusion {
    let mut f = Fusion::new();
    let x = f.input(&[rows, cols], DType::F32, Some("x")).unwrap();
    let w = f.input(&[cols], DType::F32, Some("w")).unwrap();
    let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
    let d = f.binary(BinaryOp::Sub, x, m).unwrap();
    let e = f.unary(UnaryOp::Exp, d).unwrap();
    let sum = f.reduce(ReduceOp::Sum, e, Some(&[1]), true).unwrap();
    let y = f.binary(BinaryOp::Div, e, sum).unwrap();
    let y = f.binary(BinaryOp::Mul, y, w).unwrap();
    f.output(y).unwrap();
    f
}

/// A workgroup's 128 short rows run each nest that does not reduce as
/// one lane step over all their elements: the row's maximum and sum
/// repeat over the row's lanes and `w` restarts with each row (they
/// ran a lane step of 16 a row: a 65536 x 16 softmax took 13 ms, now
/// 3.8). Past a ragged edge (1000 rows), the workgroup's rows that do
/// not exist are cut off the end of its lanes.
#[test]
fn short_rows_run_as_one_lane_step_with_loads_wrapping_around_them() {
    for rows in [1024, 1000] {
        let f = weighted_softmax(rows, 16);
        let workgroup = serde_json::json!([128, 1, 1]);
        let (_, s) = defaults_with(&f, &[("launch.workgroup_size", workgroup)]);
        let steps = compiled(&s);
        let mut blocks = Vec::new();
        lane_blocks(&steps, &mut blocks);
        let pointwise = (blocks.iter()).filter(|(_, _, b)| b.reduce.is_none());
        let extents: Vec<i64> = pointwise.map(|&(extent, ..)| extent).collect();
        assert_eq!(extents, [128 * 16, 128 * 16], "{rows} rows");
        runs_right(&f, &s, 1, 1e-5);
        runs_right(&f, &s, 3, 1e-5);
    }
}

/// A workgroup's rows of 128 to 4096 reduce as one lane step each
/// reduction, row after row (a lane step a row cost a one-thread 16384
/// x 128 softmax a quarter of its time): a softmax's two reductions,
/// the last workgroup's rows cut at a ragged edge (1000 rows), and a
/// row sum whose workgroup's lanes are more than a run of the tape
/// takes between interrupt checks, so the runs end at whole rows; rows
/// of 4096 in a row sum. Longer rows keep a lane step each. (A
/// softmax's rows of more than 256 run all their nests a row at a time:
/// see `distribute_short_nests`.)
#[test]
fn rows_up_to_4096_reduce_as_one_lane_step_row_after_row() {
    let workgroup = |rows: u64| vec![("launch.workgroup_size", serde_json::json!([rows, 1, 1]))];
    for (rows, cols, per_workgroup) in [(256, 128, 128), (1000, 200, 256)] {
        let f = weighted_softmax(rows, cols);
        let (_, s) = defaults_with(&f, &workgroup(per_workgroup));
        let lanes = (per_workgroup as usize * cols) as i64;
        let want = [(lanes, true), (lanes, true)];
        assert_eq!(reduction_lanes(&compiled(&s)), want, "{rows} x {cols}");
        runs_right(&f, &s, 1, 1e-5);
        runs_right(&f, &s, 3, 1e-5);
    }
    for (shape, per_workgroup, lanes) in [
        ([1000, 200], 512, 512 * 200),
        ([32, 4096], 16, 16 * 4096),
        ([32, 4100], 16, 4100),
    ] {
        let f = tilefuse_testing::sum(&shape, 1);
        let (_, s) = defaults_with(&f, &workgroup(per_workgroup));
        assert_eq!(reduction_lanes(&compiled(&s)), [(lanes, true)], "{shape:?}");
        runs_right(&f, &s, 1, 1e-5);
    }
}

/// Loads and stores a fixed stride apart run through the tape (they
/// ran lane by lane): `a * 2` over 64 x 8 elements, the rows' loop
/// innermost and the columns' parallel (so not reordered), moves both
/// by 8 elements a lane.
#[test]
fn strided_loads_and_stores_run_through_the_tape() {
    let mut f = Fusion::new();
    let a = f.input(&[64, 8], DType::F32, Some("a")).unwrap();
    let two = f.constant(2.0, DType::F32).unwrap();
    let y = f.binary(BinaryOp::Mul, a, two).unwrap();
    f.output(y).unwrap();
    let mut s = Schedule::new(&f);
    s.compute_inline_all(&[]);
    let block = *s.get_blocks().last().unwrap();
    let loops = s.get_loops(block).unwrap();
    s.reorder(&[loops[1], loops[0]]).unwrap();
    s.parallel(loops[1]).unwrap();
    let mut blocks = Vec::new();
    let steps = compiled(&s);
    lane_blocks(&steps, &mut blocks);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let (extent, _, code) = blocks[0];
    let scatter = code.tape.as_ref().and_then(|t| t.scatter.as_ref());
    assert_eq!(extent, 64);
    assert_eq!(
        scatter.map(|s| &s.digits[..]),
        Some(&[(i64::MAX, 8, false)][..])
    );
    runs_right(&f, &s, 2, 1e-6);
}

/// Sums over every axis of `shape` but `kept`, scheduled by the CPU
/// device's defaults.
fn channel_sum(shape: &[usize], kept: i64) -> (Fusion, Schedule) {
    let mut f = Fusion::new();
    let x = f.input(shape, DType::F32, Some("x")).unwrap();
    let axes: Vec<i64> = (0..shape.len() as i64).filter(|&a| a != kept).collect();
    let y = f.reduce(ReduceOp::Sum, x, Some(&axes), false).unwrap();
    f.output(y).unwrap();
    let (_, s) = defaults_with(&f, &[]);
    (f, s)
}

/// NCHW's channel sum reads each channel's H x W in one run: its fused
/// (N, H, W) loop splits back at H x W, not at W, whose lane steps of 32
/// took 16 x 64 x 32 x 32 10x the time.
#[test]
fn an_nchw_channel_sum_runs_lane_steps_over_h_and_w() {
    let (f, s) = channel_sum(&[4, 8, 16, 16], 1);
    let mut lanes = Vec::new();
    lane_steps(&compiled(&s), &mut lanes);
    assert!(lanes.iter().all(|&(n, _)| n >= 256), "{lanes:?}");
    runs_right(&f, &s, 2, 1e-5);
}

/// NHWC's channel sum, its (N, H, W) loop split over workgroups in runs
/// of 49 that cross rows of W (28), runs row by row: the offset, `(w *
/// 49 + f) / 28 % 28 * 896 + (w * 49 + f) % 28 * 32`, folds into one
/// linear in `f` (it ran a lane step a row: 1.8 ms, numpy 0.2; now
/// 0.07).
#[test]
fn an_nhwc_channel_sum_split_over_workgroups_runs_row_by_row() {
    let (f, s) = channel_sum(&[16, 28, 28, 32], 3);
    let mut rows = Vec::new();
    row_steps(&compiled(&s), &mut rows);
    assert!(rows.contains(&(49, 32)), "{rows:?}");
    runs_right(&f, &s, 2, 1e-4);
}
