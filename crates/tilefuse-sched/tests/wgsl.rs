//! Every shader the fixtures produce is valid WGSL (naga parses and
//! validates it), and trace replay reproduces it exactly.

use tilefuse_sched::Schedule;
use tilefuse_sched::codegen::generate;
use tilefuse_testing::{fusions, recipes};

fn validate(source: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{what}: {}\n{source}", e.emit_to_string(source)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        // Subgroup reductions shuffle; f16 converts with pack2x16float /
        // unpack2x16float (core WGSL, a capability to naga, which every
        // wgpu backend but GLES grants); nothing else needs a capability.
        naga::valid::Capabilities::SUBGROUP | naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32,
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}\n{source}", e.emit_to_string(source)));
}

#[test]
fn math_helpers_validate() {
    validate(
        include_str!("../../../shaders/math.wgsl"),
        "shaders/math.wgsl",
    );
}

#[test]
fn every_fixture_schedule_generates_valid_wgsl_and_replays() {
    for (fname, f) in fusions() {
        for (sname, apply) in recipes() {
            let mut s = Schedule::new(&f);
            apply(&mut s);
            let what = format!("{fname} / {sname}");
            let wgsl = generate(s.kernel()).unwrap_or_else(|e| panic!("{what}: {e}"));
            validate(&wgsl.source, &what);
            assert_eq!(wgsl.stages.len(), s.kernel().body.len(), "{what}");
            let replayed = Schedule::replay_json(&f, &s.trace_json()).unwrap();
            assert_eq!(
                generate(replayed.kernel()).unwrap().source,
                wgsl.source,
                "{what}: replay"
            );
        }
    }
}

#[test]
fn aligned_vectorized_loops_use_vec4() {
    let (_, f) = fusions()
        .into_iter()
        .find(|(n, _)| *n == "layernorm")
        .unwrap();
    let mut s = Schedule::new(&f);
    tilefuse_testing::vectorize_unroll(&mut s);
    let wgsl = generate(s.kernel()).unwrap().source;
    assert!(wgsl.contains("array<vec4<f32>>"), "{wgsl}");
    assert!(wgsl.contains("4 lanes of loop"), "{wgsl}");
    // A loop whose lanes straddle rows (130 is not a multiple of 4) stays scalar.
    let (_, f) = fusions()
        .into_iter()
        .find(|(n, _)| *n == "softmax")
        .unwrap();
    let mut s = Schedule::new(&f);
    tilefuse_testing::vectorize_unroll(&mut s);
    assert!(
        !generate(s.kernel())
            .unwrap()
            .source
            .contains("array<vec4<f32>>")
    );
}

/// Barriers order only the memory that siblings hand data through: a
/// staged copy in workgroup memory gets `workgroupBarrier()` alone,
/// partials in a storage buffer `storageBarrier()` alone.
#[test]
fn barriers_order_only_the_memory_siblings_share() {
    for (recipe, storage, workgroup) in [("cache_read workgroup", 0, 1), ("rfactor+bind", 4, 0)] {
        let (_, f) = fusions()
            .into_iter()
            .find(|(n, _)| *n == "softmax")
            .unwrap();
        let (_, apply) = recipes().into_iter().find(|(n, _)| *n == recipe).unwrap();
        let mut s = Schedule::new(&f);
        apply(&mut s);
        let wgsl = generate(s.kernel()).unwrap().source;
        assert_eq!(
            (
                wgsl.matches("storageBarrier").count(),
                wgsl.matches("workgroupBarrier").count()
            ),
            (storage, workgroup),
            "{recipe}\n{wgsl}"
        );
    }
}

/// A float sum of products steps by `fma`: the Vulkan path forbids the
/// driver to fuse a multiply and an add itself. Products that are not
/// summed stay multiplies.
#[test]
fn sums_of_products_step_by_fma() {
    for (name, fmas) in [("matmul_bias_relu", 1), ("pointwise", 0)] {
        let (_, f) = fusions().into_iter().find(|(n, _)| *n == name).unwrap();
        let wgsl = generate(Schedule::new(&f).kernel()).unwrap().source;
        let body = &wgsl[wgsl.find("@compute").unwrap()..];
        assert_eq!(body.matches("fma(").count(), fmas, "{name}\n{body}");
    }
}
