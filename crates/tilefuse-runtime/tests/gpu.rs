//! The fixture matrix on the GPU device. In CI (`CI=true`) a missing
//! adapter is a failure, not a skip: CI runs these on Mesa's lavapipe.

mod common;

use common::{gpu, opened, wgsl_only};
use tilefuse_ir::{Fusion, evaluate};
use tilefuse_runtime::Device;
use tilefuse_runtime::gpu::{GpuDevice, OpenOptions};
use tilefuse_sched::Schedule;
use tilefuse_testing::{compare, fusions, inputs, recipes};

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
    every_schedule(&device);
}

/// The copies through staging buffers that a discrete GPU makes, on any
/// adapter (lavapipe's own buffers are mapped by the host otherwise).
#[test]
fn schedules_match_the_reference_through_staging_buffers() {
    let staged = OpenOptions {
        map_host: false,
        ..OpenOptions::default()
    };
    if let Some(device) = opened(staged) {
        every_schedule(&device);
    }
}

/// The WGSL that wgpu translates itself, as on adapters without IEEE
/// SPIR-V (lavapipe takes SPIR-V otherwise): every stage's layout comes
/// from its bindings, as on the SPIR-V path.
#[test]
fn schedules_match_the_reference_through_wgsl() {
    if let Some(device) = wgsl_only() {
        every_schedule(&device);
        one_text_binding_different_buffers(&device);
    }
}

#[test]
fn one_text_binding_different_buffers_on_the_default_path() {
    if let Some(device) = gpu() {
        one_text_binding_different_buffers(&device);
    }
}

/// `a + b` and `a * a` on (3, 0) arrays with the empty loop unrolled: one
/// WGSL text (the loop emits nothing) whose stage binds three buffers in
/// one kernel and two in the other. Pipelines cached by the text alone
/// gave the second kernel the first one's layout.
/// Inputs and outputs large enough that the host copies them on several
/// threads, with a partial last piece, arrive whole on both paths: the
/// buffers the host maps (lavapipe) and the staging buffers of a discrete
/// GPU. f32, i32 and mask outputs each take their own read.
#[test]
fn large_arrays_are_copied_whole_on_several_threads() {
    use tilefuse_ir::{BinaryOp, DType};
    let mut f = Fusion::new();
    let n = 1_300_007; // over the 4 MiB a copy splits at, in no whole piece
    let a = f.input(&[n], DType::F32, Some("a")).unwrap();
    let b = f.input(&[n], DType::F32, Some("b")).unwrap();
    let y = f.binary(BinaryOp::Mul, a, b).unwrap();
    let thousand = f.constant(1000.0, DType::F32).unwrap();
    let scaled = f.binary(BinaryOp::Mul, a, thousand).unwrap();
    let whole = f.cast(scaled, DType::I32).unwrap();
    let mask = f.binary(BinaryOp::Gt, a, b).unwrap();
    for t in [y, whole, mask] {
        f.output(t).unwrap();
    }
    let staged = OpenOptions {
        map_host: false,
        ..OpenOptions::default()
    };
    for device in gpu().into_iter().chain(opened(staged)) {
        let p = tilefuse_schedulers::heuristics(&f, None, &device.info()).unwrap();
        let s = tilefuse_schedulers::schedule(&f, &p, &device.info()).unwrap();
        check("large arrays", &f, &s, &device);
    }
}

fn one_text_binding_different_buffers(device: &Device) {
    use tilefuse_ir::{BinaryOp, DType};
    let build = |op: BinaryOp, same: bool| {
        let mut f = Fusion::new();
        let a = f.input(&[3, 0], DType::F32, Some("a")).unwrap();
        let b = f.input(&[3, 0], DType::F32, Some("b")).unwrap();
        let y = f.binary(op, a, if same { a } else { b }).unwrap();
        f.output(y).unwrap();
        let mut s = Schedule::new(&f);
        let block = *s.get_blocks().last().unwrap();
        let inner = s.get_loops(block).unwrap()[1];
        s.unroll(inner).unwrap();
        (device.build(&s).unwrap(), inputs(&f, 0))
    };
    let (sum, x) = build(BinaryOp::Add, false);
    let (square, _) = build(BinaryOp::Mul, true);
    assert_eq!(sum.wgsl().unwrap().source, square.wgsl().unwrap().source);
    for k in [sum, square] {
        assert_eq!(k.run(&x).unwrap()[0].shape, vec![3, 0]);
    }
}

fn every_schedule(device: &Device) {
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
            check(&format!("{fname} / {sname}"), &f, &s, device);
        }
    }
}

/// However few warm-up launches are asked for, a GPU is kept busy for
/// `WARM_UP` before the timed ones, so that its clocks have ramped up;
/// none asked for (a later chunk of interleaved timing) times at once.
#[test]
fn timing_warms_the_gpu_up_first() {
    let Some(device) = gpu() else { return };
    let (_, f) = fusions().into_iter().next().unwrap();
    let kernel = device.build(&Schedule::new(&f)).unwrap();
    let x = inputs(&f, 1);
    let start = std::time::Instant::now();
    let t = kernel.benchmark(&x, 1, 1).unwrap();
    assert!(start.elapsed() >= tilefuse_runtime::gpu::WARM_UP);
    assert_eq!(t.samples.len(), 1);
    let start = std::time::Instant::now();
    let t = kernel.benchmark(&x, 0, 1).unwrap();
    assert!(start.elapsed() < tilefuse_runtime::gpu::WARM_UP);
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

/// The pipeline cache keeps what kernels use plus the most recent builds,
/// not every kernel ever built (~250 KB each on lavapipe). On a device of
/// its own: the shared one also caches the kernels other tests hold.
#[test]
fn the_pipeline_cache_is_bounded() {
    use tilefuse_ir::{BinaryOp, DType};
    if gpu().is_none() {
        return;
    }
    let gpu = GpuDevice::open(OpenOptions::default()).expect("the adapter opened once already");
    let gpu = std::sync::Arc::new(gpu);
    let device = Device::Gpu(std::sync::Arc::clone(&gpu));
    let build = |c: f64| {
        let mut f = Fusion::new();
        let x = f.input(&[64], DType::F32, Some("x")).unwrap();
        let k = f.constant(c, DType::F32).unwrap();
        let y = f.binary(BinaryOp::Add, x, k).unwrap();
        f.output(y).unwrap();
        device.build(&Schedule::new(&f)).unwrap()
    };
    let kept: Vec<_> = (0..10).map(|i| build(f64::from(i))).collect();
    for i in 0..150 {
        drop(build(1000.0 + f64::from(i))); // each a distinct WGSL source
    }
    let cached = gpu.cached_pipelines();
    assert!(cached <= 64 + kept.len(), "{cached} pipelines cached");
    assert!(cached >= 64, "{cached}: the most recent builds stay cached");
}

/// A dropped kernel's buffers serve the next kernels of the same sizes,
/// their contents stale: every result still comes from its own inputs, and
/// what the device keeps stays bounded.
#[test]
fn kernels_take_the_buffers_of_dropped_ones() {
    let Some(device) = gpu() else { return };
    let Device::Gpu(g) = &device else {
        panic!("gpu() gives the GPU device")
    };
    for round in 0..3 {
        for (name, f) in fusions() {
            let kernel = device.build(&Schedule::new(&f)).unwrap();
            for seed in [round, round + 10] {
                let x = inputs(&f, seed);
                let want = evaluate(&f, &x).unwrap();
                let got = kernel.run(&x).unwrap();
                compare(&want, &got, 1e-5).unwrap_or_else(|e| panic!("{name}, seed {seed}: {e}"));
            }
            drop(kernel);
            assert!(g.spare_bytes() <= tilefuse_runtime::gpu::SPARE_BYTES);
        }
    }
}
