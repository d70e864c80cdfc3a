//! Every shader the fixtures produce is valid WGSL (naga parses and
//! validates it), and trace replay reproduces it exactly.

use tilefuse_sched::Schedule;
use tilefuse_sched::codegen::generate;
use tilefuse_sched::fixtures::{fusions, recipes};

fn validate(source: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{what}: {}\n{source}", e.emit_to_string(source)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
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
