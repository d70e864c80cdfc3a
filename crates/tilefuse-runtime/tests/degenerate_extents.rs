//! Default heuristics at extents 0 and 1 for every device kind: they
//! schedule (never panic) and their params compute the reference on the
//! CPU device. The fuzz tests run only the devices at hand, so a discrete
//! GPU's heuristics were untested at these extents until one ran them
//! (column sums with no columns divided by zero on an H100).

mod common;

use common::{device_kinds, run};
use tilefuse_ir::Fusion;
use tilefuse_runtime::Device;
use tilefuse_schedulers::{heuristics, schedule};
use tilefuse_testing::{matmul, softmax, sum};

const EXTENTS: [usize; 3] = [0, 1, 3];

/// Every fusion kind the schedulers take, at every mix of the extents.
fn fusions() -> Vec<(String, Fusion)> {
    let mut out = Vec::new();
    for m in EXTENTS {
        for n in EXTENTS {
            for axis in [0, 1] {
                out.push((
                    format!("softmax [{m}, {n}] axis {axis}"),
                    softmax(&[m, n], axis),
                ));
                out.push((format!("sum [{m}, {n}] axis {axis}"), sum(&[m, n], axis)));
            }
            for k in EXTENTS {
                out.push((format!("matmul {m}x{k} @ {k}x{n}"), matmul(m, n, k)));
            }
        }
    }
    out
}

#[test]
fn default_heuristics_schedule_and_compute_at_extents_0_and_1_on_every_device_kind() {
    let cpu = Device::cpu();
    for (name, f) in fusions() {
        for device in device_kinds() {
            let on = format!("{name} with {} heuristics", device.adapter_type);
            let p = heuristics(&f, None, &device).unwrap_or_else(|e| panic!("{on}: {e}"));
            schedule(&f, &p, &device).unwrap_or_else(|e| panic!("{on}: {e}"));
            run(&f, &p, &cpu).unwrap_or_else(|e| panic!("{on}, run on the CPU: {e}"));
        }
    }
}
