//! Scheduled kernels on the CPU device give the reference evaluator's
//! result, for a matrix of fusions and hand schedules.

use tilefuse_ir::{Data, Fusion, Tensor, evaluate};
use tilefuse_runtime::CpuDevice;
use tilefuse_sched::Schedule;
use tilefuse_sched::fixtures::{compare, fusions, inputs, recipes};

fn check(name: &str, f: &Fusion, schedule: &Schedule) {
    let x = inputs(f, 7);
    let want = evaluate(f, &x).unwrap();
    let got = CpuDevice::default()
        .build(schedule)
        .unwrap()
        .run(&x)
        .unwrap();
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
        let got = CpuDevice::default()
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
