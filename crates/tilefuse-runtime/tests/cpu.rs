//! Scheduled kernels on the CPU device give the reference evaluator's
//! result, for a matrix of fusions and hand schedules.

use tilefuse_ir::{Data, Fusion, Tensor, evaluate};
use tilefuse_runtime::Device;
use tilefuse_sched::Schedule;
use tilefuse_testing::{compare, fusions, inputs, recipes};

fn check(name: &str, f: &Fusion, schedule: &Schedule) {
    let x = inputs(f, 7);
    let want = evaluate(f, &x).unwrap();
    let got = Device::cpu().build(schedule).unwrap().run(&x).unwrap();
    if let Err(e) = compare(&want, &got, 1e-5) {
        panic!("{name}: {e}\n{schedule}");
    }
}

#[test]
fn schedules_match_the_reference_on_the_cpu() {
    for (fname, f) in fusions() {
        for (sname, apply) in recipes() {
            let mut s = Schedule::new(&f);
            apply(&mut s);
            check(&format!("{fname} / {sname}"), &f, &s);
        }
    }
}

#[test]
fn integer_reductions_take_the_generic_path() {
    use tilefuse_ir::{DType, ReduceOp};
    for axis in [0i64, 1] {
        let mut f = Fusion::new();
        let x = f.input(&[37, 700], DType::I32, Some("x")).unwrap();
        let s = f.reduce(ReduceOp::Sum, x, Some(&[axis]), false).unwrap();
        f.output(s).unwrap();
        let data: Vec<i32> = (0..37 * 700).map(|i| (i * 7919 % 201) - 100).collect();
        let input = Tensor::new(vec![37, 700], Data::I32(data)).unwrap();
        let want = evaluate(&f, std::slice::from_ref(&input)).unwrap();
        let got = Device::cpu()
            .build(&Schedule::new(&f))
            .unwrap()
            .run(&[input])
            .unwrap();
        assert_eq!(want, got, "axis {axis}");
    }
}

#[test]
fn matmul_with_the_spatial_axis_innermost_takes_the_axpy_path() {
    let (_, f) = fusions()
        .into_iter()
        .find(|(n, _)| *n == "matmul_bias_relu")
        .unwrap();
    let mut s = Schedule::new(&f);
    let mm = s.get_blocks()[0];
    let loops = s.get_loops(mm).unwrap();
    s.reorder(&[loops[0], loops[2], loops[1]]).unwrap(); // i, k, j
    s.parallel(loops[0]).unwrap();
    check("matmul i,k,j", &f, &s);
}

/// Blocks that run through register-resident tapes: non-commutative ops
/// with a leaf on either side, an expression deeper than the tape's
/// registers (which falls back to columns), rows that are not a whole
/// number of tiles, a lane-invariant load, sums into consecutive elements
/// (over an outer loop) and into one element (over the lanes), of an
/// expression or of a load as it is.
#[test]
fn tapes_match_the_reference() {
    use tilefuse_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
    for cols in [1usize, 255, 256, 1000, 4099] {
        let mut f = Fusion::new();
        let a = f.input(&[3, cols], DType::F32, Some("a")).unwrap();
        let b = f.input(&[3, cols], DType::F32, Some("b")).unwrap();
        let two = f.constant(2.0, DType::F32).unwrap();
        let ab = f.binary(BinaryOp::Mul, a, b).unwrap();
        let two_minus = f.binary(BinaryOp::Sub, two, ab).unwrap();
        let eb = f.unary(UnaryOp::Exp, b).unwrap();
        let quotient = f.binary(BinaryOp::Div, a, eb).unwrap();
        let mixed = f.binary(BinaryOp::Sub, two_minus, quotient).unwrap();
        let abs = f.unary(UnaryOp::Abs, a).unwrap();
        let base = f.binary(BinaryOp::Add, abs, two).unwrap();
        let power = f.binary(BinaryOp::Pow, base, b).unwrap();
        // `(a*b) - ((a*b) - (...))`: every level needs one more register.
        let mut deep = f.binary(BinaryOp::Add, a, b).unwrap();
        for _ in 0..10 {
            let left = f.binary(BinaryOp::Mul, a, b).unwrap();
            deep = f.binary(BinaryOp::Sub, left, deep).unwrap();
        }
        let row_max = f.reduce(ReduceOp::Max, a, Some(&[1]), true).unwrap();
        let centered = f.binary(BinaryOp::Sub, a, row_max).unwrap();
        let column_sums = f.reduce(ReduceOp::Sum, mixed, Some(&[0]), false).unwrap();
        let row_sums = f.reduce(ReduceOp::Sum, power, Some(&[1]), false).unwrap();
        // Folds of a load as it is, straight from the input.
        let loaded = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Mean]
            .map(|op| f.reduce(op, b, Some(&[1]), false).unwrap());
        for out in [mixed, power, deep, centered, column_sums, row_sums]
            .into_iter()
            .chain(loaded)
        {
            f.output(out).unwrap();
        }
        let mut s = Schedule::new(&f);
        s.compute_inline_all(&[]);
        check(&format!("tapes, {cols} columns"), &f, &s);
    }
}

/// A NaN reaches a max folded over the lanes and one combined into
/// consecutive elements, as numpy's `max` propagates it.
#[test]
fn tape_reductions_propagate_nan() {
    use tilefuse_ir::{DType, ReduceOp};
    let mut f = Fusion::new();
    let x = f.input(&[4, 600], DType::F32, Some("x")).unwrap();
    for axis in [0i64, 1] {
        let m = f.reduce(ReduceOp::Max, x, Some(&[axis]), false).unwrap();
        f.output(m).unwrap();
    }
    let mut input = inputs(&f, 3);
    let Data::F32(v) = &mut input[0].data else {
        unreachable!("an f32 input")
    };
    v[600 + 517] = f32::NAN; // row 1, column 517
    let got = Device::cpu()
        .build(&Schedule::new(&f))
        .unwrap()
        .run(&input)
        .unwrap();
    let (Data::F32(columns), Data::F32(rows)) = (&got[0].data, &got[1].data) else {
        unreachable!("f32 outputs")
    };
    let nan_at = |v: &[f32]| -> Vec<usize> { (0..v.len()).filter(|&i| v[i].is_nan()).collect() };
    assert_eq!(nan_at(columns), vec![517]);
    assert_eq!(nan_at(rows), vec![1]);
}
