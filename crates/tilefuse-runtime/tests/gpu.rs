//! The fixture matrix on the GPU device. In CI (`CI=true`) a missing
//! adapter is a failure, not a skip: CI runs these on Mesa's lavapipe.

mod common;

use common::gpu;
use tilefuse_ir::{Fusion, evaluate};
use tilefuse_runtime::Device;
use tilefuse_sched::Schedule;
use tilefuse_sched::fixtures::{compare, fusions, inputs, recipes};

fn check(name: &str, f: &Fusion, s: &Schedule, device: &Device) {
    let x = inputs(f, 3);
    let want = evaluate(f, &x).unwrap();
    let got = device
        .build(s)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .run(&x)
        .unwrap();
    if let Err(e) = compare(&want, &got, 1e-5) {
        panic!("{name}: {e}");
    }
}

#[test]
fn schedules_match_the_reference_on_the_gpu() {
    let Some(device) = gpu() else { return };
    eprintln!("GPU: {:?}", device.info().name);
    // lavapipe (CI) has subgroups of 8 or more; other adapters may not.
    let subgroups = device
        .info()
        .subgroup_sizes
        .is_some_and(|(min, _)| min >= 8);
    if !subgroups {
        eprintln!(
            "rfactor+subgroup skipped: {:?}",
            device.info().subgroup_sizes
        );
    }
    for (fname, f) in fusions() {
        for (sname, apply) in recipes() {
            if ["rfactor+subgroup", "rfactor+tree"].contains(&sname) && !subgroups {
                continue;
            }
            let mut s = Schedule::new(&f);
            apply(&mut s);
            check(&format!("{fname} / {sname}"), &f, &s, &device);
        }
    }
}

/// However few warm-up launches are asked for, a GPU is kept busy for
/// `WARM_UP` before the timed ones, so that its clocks have ramped up.
#[test]
fn timing_warms_the_gpu_up_first() {
    let Some(device) = gpu() else { return };
    let (_, f) = fusions().into_iter().next().unwrap();
    let kernel = device.build(&Schedule::new(&f)).unwrap();
    let x = inputs(&f, 1);
    let start = std::time::Instant::now();
    let t = kernel.benchmark(&x, 0, 1).unwrap();
    assert!(start.elapsed() >= tilefuse_runtime::gpu::WARM_UP);
    assert_eq!(t.samples.len(), 1);
}

#[test]
fn timing_reports_positive_medians() {
    let Some(device) = gpu() else { return };
    let (_, f) = fusions().into_iter().next().unwrap();
    let s = Schedule::new(&f);
    let t = device
        .build(&s)
        .unwrap()
        .benchmark(&inputs(&f, 1), 1, 3)
        .unwrap();
    assert_eq!(t.samples.len(), 3);
    assert!(
        t.median > 0.0 && t.min <= t.median && t.median <= t.max,
        "{t:?}"
    );
}

/// Every `Device::gpu()` shares one device (and its pipeline cache):
/// NVIDIA's Vulkan driver stopped loading after a few dozen in a process.
#[test]
fn the_gpu_is_opened_once() {
    let Some(Device::Gpu(first)) = gpu() else {
        return;
    };
    for _ in 0..3 {
        let Ok(Device::Gpu(again)) = Device::gpu() else {
            panic!("the GPU opened once and then failed")
        };
        assert!(std::sync::Arc::ptr_eq(&first, &again));
    }
}
