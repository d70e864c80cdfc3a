//! Random points of each scheduler's space on every device kind, repaired
//! before they are measured: few may still fail to schedule. A repair puts
//! back the field the scheduler names, or a changed field its message
//! names (a constraint between two fields), or the field or pair of fields
//! whose base values get furthest; an H100 refused 22 of 25 random matmul
//! points when only the first was put back.

mod common;

use common::{chain, device_kinds};
use tilefuse_ir::Fusion;
use tilefuse_sched::DeviceInfo;
use tilefuse_testing::{matmul, softmax, sum};
use tilefuse_tune::{Measured, Options, Search, Status, Strategy, Trial};

/// Of a random search's 100 counted trials (every candidate handed out
/// is told it ran; duplicates do not count), those whose params the
/// scheduler refused, and the refusals' errors.
fn refused(f: &Fusion, info: &DeviceInfo) -> (usize, Vec<String>) {
    let options = Options {
        strategy: Some(Strategy::Random),
        trials: Some(100),
        seed: 5,
        ..Options::default()
    };
    let mut errors = Vec::new();
    let mut observe = |t: &Trial, _: Option<f64>| {
        if t.status == Status::Failed {
            errors.push(format!("{} {}", t.error.as_deref().unwrap_or(""), t.params));
        }
        true
    };
    let mut search = Search::new(f, info, &options, &[], &mut observe).unwrap();
    while let Some(c) = search.ask() {
        search.tell(c.id, Measured::ran(1.0)).unwrap();
    }
    drop(search);
    (errors.len(), errors)
}

#[test]
fn random_points_repair_into_schedules_on_every_device_kind() {
    let devices = device_kinds();
    let fusions = [
        ("matmul 256^3", matmul(256, 256, 256)),
        ("softmax 64x1000", softmax(&[64, 1000], -1)),
        ("chain of 8", chain(8)),
        ("column sum 1024x256", sum(&[1024, 256], 0)),
    ];
    for (name, f) in &fusions {
        for info in &devices {
            let (n, errors) = refused(f, info);
            // None is refused on this machine; a column sum on a discrete
            // GPU kept 19 until pairs of fields could go back together
            // (reduction_invocations and cross_invocation_outer_reduction).
            assert!(
                n <= 5,
                "{name} on {}: {n} of 100 refused, e.g. {}",
                info.name,
                errors[0]
            );
        }
    }
}
