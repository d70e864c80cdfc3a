//! The fields each scheduler declares tunable are real knobs: every value
//! of every domain either schedules or is refused with a `ParamsError`
//! (when loaded, against the other fields, or when scheduled; never an
//! internal error), and every field changes the schedule for some fusion
//! and device kind, alone or with one other tunable field set (a field may
//! only act once another enables it, as circular buffering needs staged
//! operands).

mod common;

use std::collections::BTreeSet;

use common::device_kinds;
use tilefuse_ir::Fusion;
use tilefuse_params::{Domain, HeuristicParams, SchedulerKind, Tunable};
use tilefuse_sched::DeviceInfo;
use tilefuse_schedulers::{heuristics, schedule, tunables};
use tilefuse_testing::{fusions, matmul_fusions, reduction_fusions};

/// One fusion on one device kind, with its scheduler's defaults.
struct Case {
    name: &'static str,
    fusion: Fusion,
    device: DeviceInfo,
    kind: SchedulerKind,
    fields: Vec<Tunable>,
    base: HeuristicParams,
    trace: String,
}

fn cases() -> Vec<Case> {
    let all = fusions()
        .into_iter()
        .chain(reduction_fusions())
        .chain(matmul_fusions());
    let mut out = Vec::new();
    for (name, fusion) in all {
        for device in device_kinds() {
            let (kind, fields) = tunables(&fusion, None, &device).unwrap();
            let base = heuristics(&fusion, Some(kind), &device).unwrap();
            let trace = schedule(&fusion, &base, &device).unwrap().trace_json();
            out.push(Case {
                name,
                fusion: fusion.clone(),
                device,
                kind,
                fields,
                base,
                trace,
            });
        }
    }
    out
}

/// Whether `params` schedule differently from the case's defaults; a
/// refusal must be a `ParamsError` with a reason, not an internal error.
fn changes(c: &Case, params: Result<HeuristicParams, tilefuse_params::ParamsError>) -> bool {
    match params.and_then(|p| schedule(&c.fusion, &p, &c.device)) {
        Ok(s) => s.trace_json() != c.trace,
        Err(e) => {
            let what = format!("{} on {}", c.name, c.device.adapter_type);
            assert!(!e.message.contains("internal error"), "{what}: {e}");
            false
        }
    }
}

#[test]
fn every_tunable_value_schedules_or_is_refused_and_every_field_matters() {
    let cases = cases();
    let mut declared = BTreeSet::new();
    let mut matter = BTreeSet::new();
    for c in &cases {
        for t in &c.fields {
            declared.insert((c.kind, t.path));
            for value in t.domain.values() {
                if changes(c, c.base.with(t.path, value)) {
                    matter.insert((c.kind, t.path));
                }
            }
        }
    }
    let alone: Vec<_> = declared.difference(&matter).copied().collect();
    for (kind, path) in alone {
        let with_others = cases
            .iter()
            .filter(|c| c.kind == kind)
            .any(|c| acts_with_others(c, path));
        assert!(
            with_others,
            "{kind} field {path} never changes the schedule"
        );
    }
}

/// Params the field at `path` may need set first: the defaults with one
/// or two flags on, each then with any one value of another field.
fn contexts(c: &Case, path: &str) -> Vec<HeuristicParams> {
    let flags: Vec<&str> = (c.fields.iter())
        .filter(|t| t.path != path && t.domain == Domain::Bool)
        .map(|t| t.path)
        .collect();
    let mut on = vec![c.base.clone()];
    for (i, f) in flags.iter().enumerate() {
        let Ok(one) = c.base.with(f, true.into()) else {
            continue;
        };
        on.extend(
            flags[i + 1..]
                .iter()
                .filter_map(|g| one.with(g, true.into()).ok()),
        );
        on.push(one);
    }
    let others = c.fields.iter().filter(|t| t.path != path);
    let mut out = on.clone();
    for other in others {
        for p in &on {
            out.extend(
                (other.domain.values().into_iter()).filter_map(|v| p.with(other.path, v).ok()),
            );
        }
    }
    out
}

/// Whether the field at `path` changes the schedule once other fields are
/// set (see [`contexts`]).
fn acts_with_others(c: &Case, path: &str) -> bool {
    let Some(field) = c.fields.iter().find(|t| t.path == path) else {
        return false; // not declared for this fusion or device
    };
    contexts(c, path).into_iter().any(|ctx| {
        let Ok(reference) = schedule(&c.fusion, &ctx, &c.device) else {
            return false;
        };
        let reference = reference.trace_json();
        field.domain.values().into_iter().any(|x| {
            (ctx.with(path, x)
                .and_then(|p| schedule(&c.fusion, &p, &c.device)))
            .is_ok_and(|s| s.trace_json() != reference)
        })
    })
}

/// On the CPU device a matmul's column tiles go from one AVX-512 vector
/// (16) to whole rows, even when the rows are not a power of two, and
/// the default (a quarter of the columns, two slices a core) is a point
/// of the domain with narrower and wider strips beside it (a domain of 1
/// to 8 once put 8 beside 1000 columns, 70x slower).
#[test]
fn cpu_matmul_column_tiles_run_from_a_vector_to_whole_rows() {
    let f = tilefuse_testing::matmul(64, 1000, 64);
    let device = tilefuse_runtime::Device::cpu().info();
    let (_, fields) = tunables(&f, None, &device).unwrap();
    let base = heuristics(&f, None, &device).unwrap();
    let expected: Vec<serde_json::Value> = [16, 32, 64, 128, 256, 512, 1000]
        .into_iter()
        .map(Into::into)
        .collect();
    for level in ["cta_tile", "warp_tile", "instruction_tile"] {
        let path = format!("tile_sizes.{level}.n");
        let field = fields.iter().find(|t| t.path == path).unwrap();
        assert_eq!(field.domain.values(), expected, "{path}");
        assert_eq!(base.get(&path), Some(256.into()), "{path}");
    }
}
