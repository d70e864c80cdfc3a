//! Scheduled kernels on the CPU device give the reference evaluator's
//! result, for a matrix of fusions and hand schedules.

use tilefuse_ir::{Data, Fusion, Tensor, evaluate};
use tilefuse_runtime::CpuDevice;
use tilefuse_sched::Schedule;
use tilefuse_sched::fixtures::{fusions, recipes};

fn random(shape: &[usize], seed: u64) -> Tensor {
    // xorshift: deterministic, dependency-free, never all zeros.
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect();
    Tensor::new(shape.to_vec(), Data::F32(data)).unwrap()
}

fn check(name: &str, f: &Fusion, schedule: &Schedule) {
    let inputs: Vec<Tensor> = f
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &t)| random(&f.ty(t).unwrap().shape, i as u64 + 7))
        .collect();
    let want = evaluate(f, &inputs).unwrap();
    let got = CpuDevice::default()
        .build(schedule)
        .unwrap()
        .run(&inputs)
        .unwrap();
    for (w, g) in want.iter().zip(&got) {
        let (Data::F32(w), Data::F32(g)) = (&w.data, &g.data) else {
            panic!("f32 outputs")
        };
        let scale = w.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
        for (i, (a, b)) in w.iter().zip(g).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale + 1e-5 * a.abs(),
                "{name}: element {i}: want {a}, got {b}\n{schedule}"
            );
        }
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
