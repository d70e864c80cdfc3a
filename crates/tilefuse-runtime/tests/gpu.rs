//! The fixture matrix on the GPU device. In CI (`CI=true`) a missing
//! adapter is a failure, not a skip: CI runs these on Mesa's lavapipe.

use tilefuse_ir::{Data, Fusion, Tensor, evaluate};
use tilefuse_runtime::Device;
use tilefuse_sched::Schedule;
use tilefuse_sched::fixtures::{fusions, recipes};

fn gpu() -> Option<Device> {
    match Device::gpu() {
        Ok(d) => Some(d),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI needs a GPU adapter (lavapipe): {e}")
        }
        Err(e) => {
            eprintln!("skipping GPU tests: {e}");
            None
        }
    }
}

fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..shape.iter().product())
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect();
    Tensor::new(shape.to_vec(), Data::F32(data)).unwrap()
}

fn check(name: &str, f: &Fusion, s: &Schedule, device: &Device) {
    let inputs: Vec<Tensor> = f
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &t)| random(&f.ty(t).unwrap().shape, i as u64 + 3))
        .collect();
    let want = evaluate(f, &inputs).unwrap();
    let got = device
        .build(s)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
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
                "{name}: element {i}: want {a}, got {b}"
            );
        }
    }
}

#[test]
fn schedules_match_the_reference_on_the_gpu() {
    let Some(device) = gpu() else { return };
    eprintln!("GPU: {:?}", device.info().name);
    for (fname, f) in fusions() {
        for (sname, apply) in recipes() {
            let mut s = Schedule::new(&f);
            apply(&mut s);
            check(&format!("{fname} / {sname}"), &f, &s, &device);
        }
    }
}

#[test]
fn timing_reports_positive_medians() {
    let Some(device) = gpu() else { return };
    let (_, f) = fusions().into_iter().next().unwrap();
    let s = Schedule::new(&f);
    let inputs: Vec<Tensor> = f
        .inputs()
        .iter()
        .map(|&t| random(&f.ty(t).unwrap().shape, 1))
        .collect();
    let t = device.build(&s).unwrap().benchmark(&inputs, 1, 3).unwrap();
    assert_eq!(t.samples.len(), 3);
    assert!(
        t.median > 0.0 && t.min <= t.median && t.median <= t.max,
        "{t:?}"
    );
}
