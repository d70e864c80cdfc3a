//! Random sequences of primitives with random (often wrong) arguments:
//! every call returns Ok or a typed error, never panics, and whatever the
//! schedule becomes, the CPU device still computes the reference result.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use tilefuse_ir::evaluate;
use tilefuse_runtime::Device;
use tilefuse_sched::Schedule;
use tilefuse_sched::ir::{BlockId, LoopId, Scope, ThreadAxis};
use tilefuse_testing::{compare, fusions, inputs};

#[derive(Clone, Debug)]
enum Call {
    Split(u32, Option<u64>, u64),
    Fuse(u32, u32),
    Reorder(u32, u32),
    Bind(u32, usize),
    Parallel(u32),
    Vectorize(u32),
    Unroll(u32),
    Rfactor(u32),
    ComputeInline(u32),
    ReverseComputeInline(u32),
    ComputeAt(u32, u32),
    ReverseComputeAt(u32, u32),
    CacheRead(u32, usize),
    CacheWrite(u32, bool),
    SetScope(u32, bool),
}

fn call() -> impl Strategy<Value = Call> {
    let id = 0u32..40;
    prop_oneof![
        (id.clone(), prop::option::of(1u64..9), 1u64..9).prop_map(|(l, a, b)| Call::Split(l, a, b)),
        (id.clone(), id.clone()).prop_map(|(a, b)| Call::Fuse(a, b)),
        (id.clone(), id.clone()).prop_map(|(a, b)| Call::Reorder(a, b)),
        (id.clone(), 0usize..6).prop_map(|(l, a)| Call::Bind(l, a)),
        id.clone().prop_map(Call::Parallel),
        id.clone().prop_map(Call::Vectorize),
        id.clone().prop_map(Call::Unroll),
        id.clone().prop_map(Call::Rfactor),
        id.clone().prop_map(Call::ComputeInline),
        id.clone().prop_map(Call::ReverseComputeInline),
        (id.clone(), id.clone()).prop_map(|(b, l)| Call::ComputeAt(b, l)),
        (id.clone(), id.clone()).prop_map(|(b, l)| Call::ReverseComputeAt(b, l)),
        (id.clone(), 0usize..3).prop_map(|(b, i)| Call::CacheRead(b, i)),
        (id.clone(), any::<bool>()).prop_map(|(b, w)| Call::CacheWrite(b, w)),
        (id, any::<bool>()).prop_map(|(b, w)| Call::SetScope(b, w)),
    ]
}

fn scope(workgroup: bool) -> Scope {
    if workgroup {
        Scope::Workgroup
    } else {
        Scope::Private
    }
}

fn apply(s: &mut Schedule, c: &Call) {
    let (l, b) = (LoopId, BlockId);
    // Errors are expected; only panics would fail the test.
    let _ = match *c {
        Call::Split(x, f, g) => s.split(l(x), &[f, Some(g)], None).map(drop),
        Call::Fuse(x, y) => s.fuse(&[l(x), l(y)]).map(drop),
        Call::Reorder(x, y) => s.reorder(&[l(x), l(y)]),
        Call::Bind(x, a) => s.bind(l(x), ThreadAxis::ALL[a]),
        Call::Parallel(x) => s.parallel(l(x)),
        Call::Vectorize(x) => s.vectorize(l(x)),
        Call::Unroll(x) => s.unroll(l(x)),
        Call::Rfactor(x) => s.rfactor(l(x)).map(drop),
        Call::ComputeInline(x) => s.compute_inline(b(x)),
        Call::ReverseComputeInline(x) => s.reverse_compute_inline(b(x)),
        Call::ComputeAt(x, y) => s.compute_at(b(x), l(y)),
        Call::ReverseComputeAt(x, y) => s.reverse_compute_at(b(x), l(y)),
        Call::CacheRead(x, i) => {
            let names: Vec<String> = s.kernel().buffers.iter().map(|b| b.name.clone()).collect();
            s.cache_read(b(x), &names[i % names.len()], Scope::Workgroup)
                .map(drop)
        }
        Call::CacheWrite(x, wg) => s.cache_write(b(x), scope(wg)).map(drop),
        Call::SetScope(x, wg) => s.set_scope(b(x), scope(wg)),
    };
}

/// Applies `calls` to a fixture fusion and checks the result on `device`
/// (schedules the device cannot build are skipped: that is a typed error).
fn check(device: &Device, which: usize, calls: &[Call]) -> Result<(), TestCaseError> {
    let (name, f) = fusions().swap_remove(which);
    let mut s = Schedule::new(&f);
    for c in calls {
        apply(&mut s, c);
    }
    let replayed = Schedule::replay_json(&f, &s.trace_json());
    prop_assert!(
        replayed.is_ok(),
        "{name}: trace does not replay: {:?}",
        replayed.err()
    );
    let Ok(kernel) = device.build(&s) else {
        return Ok(());
    };
    let x = inputs(&f, 5);
    let want = evaluate(&f, &x).unwrap();
    let got = kernel.run(&x).unwrap();
    if let Err(e) = compare(&want, &got, 1e-4) {
        prop_assert!(false, "{name}: {e} after {calls:?}\n{s}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(500), ..ProptestConfig::default() })]

    #[test]
    fn random_primitives_never_panic_and_keep_the_meaning(which in 0usize..6, calls in prop::collection::vec(call(), 1..12)) {
        check(&Device::cpu(), which, &calls)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(40), ..ProptestConfig::default() })]

    /// The same on the GPU (lavapipe in CI, where a missing adapter fails).
    #[test]
    fn random_schedules_run_right_on_the_gpu(which in 0usize..6, calls in prop::collection::vec(call(), 1..12)) {
        if let Some(gpu) = common::gpu() {
            check(&gpu, which, &calls)?;
        }
    }

    /// And through the WGSL that wgpu translates itself, the path of
    /// adapters without IEEE SPIR-V.
    #[test]
    fn random_schedules_run_right_through_wgsl(which in 0usize..6, calls in prop::collection::vec(call(), 1..12)) {
        if let Some(gpu) = wgsl_device() {
            check(gpu, which, &calls)?;
        }
    }
}

/// One device for every case: each opening creates a wgpu instance.
fn wgsl_device() -> Option<&'static Device> {
    static DEVICE: OnceLock<Option<Device>> = OnceLock::new();
    DEVICE.get_or_init(common::wgsl_only).as_ref()
}
