//! Seed heuristics: every built-in one applies to the fusions it is for
//! and its seeds schedule on each kind of device it is for; a heuristic's
//! seeds and neighbours enter the search and are recorded; one that fails
//! is skipped with a warning.

mod common;

use common::{chain, device_kinds, gpu};
use tilefuse_ir::Fusion;
use tilefuse_params::HeuristicParams;
use tilefuse_runtime::Device;
use tilefuse_sched::DeviceInfo;
use tilefuse_schedulers::{features, heuristics, schedule};
use tilefuse_testing::{matmul, softmax, sum};
use tilefuse_tune::seeds::{LargeMatmul, OuterReduction, applies, builtin};
use tilefuse_tune::{AutotunerHeuristic, Options, SeedContext, Status, Strategy, tune};

/// `(name, fusion, the built-in heuristic made for it)`.
fn cases() -> Vec<(&'static str, Fusion, &'static str)> {
    vec![
        ("gemv-like 4x512x256", matmul(4, 512, 256), "skinny_matmul"),
        ("tall 1024x8x2048", matmul(1024, 8, 2048), "skinny_matmul"),
        ("square 512x512x512", matmul(512, 512, 512), "large_matmul"),
        (
            "square 2048x2048x64",
            matmul(2048, 2048, 64),
            "large_matmul",
        ),
        ("softmax 512x128", softmax(&[512, 128], -1), "short_rows"),
        ("softmax 64x1000", softmax(&[64, 1000], -1), "short_rows"),
        ("chain of 16", chain(16), "long_chain"),
        (
            "column sum 1024x256",
            sum(&[1024, 256], 0),
            "outer_reduction",
        ),
        ("column sum 96x18", sum(&[96, 18], 0), "outer_reduction"),
    ]
}

/// Runs `run` with the seed context of `f` on `info` (its features and
/// default params).
fn in_context<R>(f: &Fusion, info: &DeviceInfo, run: impl FnOnce(&SeedContext) -> R) -> R {
    let feats = features(f).unwrap();
    let default = heuristics(f, None, info).unwrap();
    run(&SeedContext {
        fusion: f,
        device: info,
        features: &feats,
        default: &default,
    })
}

#[test]
fn every_builtin_applies_where_meant_and_its_seeds_schedule() {
    let devices = device_kinds();
    let builtin = builtin();
    for (case, f, meant) in cases() {
        let mut applied_somewhere = false;
        for info in &devices {
            in_context(&f, info, |cx| {
                for h in builtin.iter().filter(|h| applies(h.as_ref(), cx).unwrap()) {
                    applied_somewhere |= h.name() == meant;
                    seeds_schedule(h.as_ref(), cx, case);
                }
            });
        }
        assert!(applied_somewhere, "{meant} never applied to {case}");
    }
}

/// `h` gives seeds for `case`, none the default, each of which schedules.
fn seeds_schedule(h: &dyn AutotunerHeuristic, cx: &SeedContext, case: &str) {
    let seeds = h.seed_configs(cx).unwrap();
    assert!(!seeds.is_empty(), "{} gave no seed for {case}", h.name());
    for p in seeds {
        assert_ne!(&p, cx.default, "{} seeds the default for {case}", h.name());
        if let Err(e) = schedule(cx.fusion, &p, cx.device) {
            let (name, device) = (h.name(), &cx.device.name);
            panic!("{name} on {case} for {device}: {e}\n{}", p.to_value());
        }
    }
}

#[test]
fn builtins_stay_out_of_fusions_not_theirs() {
    let small = matmul(32, 48, 256);
    let long_rows = softmax(&[16, 4096], -1);
    let info = gpu("discrete_gpu", 1024);
    for f in [small, long_rows, chain(3)] {
        in_context(&f, &info, |cx| {
            for h in builtin() {
                assert!(!applies(h.as_ref(), cx).unwrap(), "{}", h.name());
            }
        });
    }
}

/// The seeds of `large_matmul` for an m x n x k matmul on `info`, as
/// `(cta_tile.m, instruction_tile, splitk_factor)`.
fn large_matmul_seeds(info: &DeviceInfo, [m, n, k]: [usize; 3]) -> Vec<(u32, [u32; 3], u32)> {
    let seeds = in_context(&matmul(m, n, k), info, |cx| {
        if applies(&LargeMatmul, cx).unwrap() {
            LargeMatmul.seed_configs(cx).unwrap()
        } else {
            Vec::new()
        }
    });
    seeds
        .into_iter()
        .map(|p| match p {
            HeuristicParams::Matmul(p) => {
                let i = p.tile_sizes.instruction_tile;
                (p.tile_sizes.cta_tile.m, [i.m, i.n, i.k], p.splitk_factor)
            }
            _ => unreachable!("matmul params"),
        })
        .collect()
}

/// What the H100's full tunes found: a k step of 8, thinner workgroup
/// tiles at 1024³ (512 workgroups of 16 x 128), 8 x 8 register tiles at
/// 2048³, k split where the tiles cannot fill the device (512³); none of
/// it on lavapipe, whose default is its own.
#[test]
fn large_matmul_seeds_deepen_k_and_fill_the_device() {
    let h100 = gpu("discrete_gpu", 1024);
    let seeds = large_matmul_seeds(&h100, [1024, 1024, 1024]);
    assert!(seeds.iter().all(|s| s.1[2] == 8), "{seeds:?}");
    assert!(seeds.contains(&(16, [4, 4, 8], 1)), "{seeds:?}");
    assert!(!seeds.iter().any(|s| s.1 == [8, 8, 8]), "{seeds:?}");
    let big = large_matmul_seeds(&h100, [2048, 2048, 2048]);
    assert!(big.contains(&(128, [8, 8, 8], 1)), "{big:?}");
    let few = large_matmul_seeds(&h100, [512, 512, 512]);
    assert!(few.contains(&(32, [4, 4, 8], 4)), "{few:?}");
    assert!(large_matmul_seeds(&gpu("cpu", 256), [1024, 1024, 1024]).is_empty());
}

/// The seeds of `outer_reduction` for a column sum of `shape` on `info`,
/// as `(invocations per column, reduction unroll)`.
fn outer_reduction_seeds(info: &DeviceInfo, shape: &[usize]) -> Vec<(u32, u32)> {
    let seeds = in_context(&sum(shape, 0), info, |cx| {
        OuterReduction.seed_configs(cx).unwrap()
    });
    (seeds.into_iter())
        .map(|p| match p {
            HeuristicParams::Reduction(p) => (p.reduction_invocations, p.unroll_factor_reduction),
            _ => unreachable!("reduction params"),
        })
        .collect()
}

/// Loads in flight down a column: each invocation's loop is unrolled
/// (lavapipe's full tune of the 1024² column sum found unroll 8 with 16
/// invocations a column, 1.7x its default; the H100's sweep, unroll 4),
/// never so far that it runs fewer than eight steps.
#[test]
fn outer_reduction_seeds_unroll_the_loop_down_a_column() {
    let info = gpu("discrete_gpu", 1024);
    let seeds = outer_reduction_seeds(&info, &[1024, 1024]);
    assert!(seeds.contains(&(16, 8)), "{seeds:?}");
    assert!(seeds.contains(&(16, 1)), "{seeds:?}");
    for shape in [[1024, 1024], [96, 18], [4096, 64], [64, 512]] {
        for (per_column, unroll) in outer_reduction_seeds(&info, &shape) {
            let steps = shape[0] as u32 / per_column / unroll;
            assert!(
                unroll == 1 || steps >= 8,
                "{shape:?}: {per_column} x {unroll}"
            );
        }
    }
}

/// A heuristic that seeds one pointwise config and proposes one neighbour
/// of whatever is best.
struct Wide;

impl AutotunerHeuristic for Wide {
    fn name(&self) -> &str {
        "wide"
    }

    fn is_eligible(&self, _: &SeedContext) -> Result<bool, String> {
        Ok(true)
    }

    fn seed_configs(&self, cx: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        let p = cx.default.with("unroll_factor_outer", 4.into());
        Ok(vec![p.map_err(|e| e.to_string())?])
    }

    fn neighbors(
        &self,
        params: &HeuristicParams,
        _: &SeedContext,
    ) -> Result<Vec<HeuristicParams>, String> {
        let p = params.with("unroll_factor_inner", 2.into());
        Ok(vec![p.map_err(|e| e.to_string())?])
    }
}

struct Broken;

impl AutotunerHeuristic for Broken {
    fn name(&self) -> &str {
        "broken"
    }

    fn is_eligible(&self, _: &SeedContext) -> Result<bool, String> {
        Err("no idea".into())
    }

    fn seed_configs(&self, _: &SeedContext) -> Result<Vec<HeuristicParams>, String> {
        unreachable!("never eligible")
    }
}

#[test]
fn seeds_and_neighbours_enter_the_search_and_a_broken_heuristic_is_skipped() {
    let f = chain(4);
    let options = Options {
        strategy: Some(Strategy::Random),
        trials: Some(4),
        repeat: 1,
        ..Options::default()
    };
    let r = tune(
        &f,
        &Device::cpu(),
        &options,
        &[&Broken, &Wide],
        &mut |_, _| true,
    )
    .unwrap();
    let origins: Vec<_> = r
        .trials
        .iter()
        .map(|t| (t.source.origin, t.source.heuristic.as_deref()))
        .collect();
    assert_eq!(origins[0], ("default", None));
    assert_eq!(origins[1], ("seed", Some("wide")));
    assert_eq!(origins[2], ("heuristic_neighbor", Some("wide")));
    // The seed ran and was checked. A microsecond kernel timed once can
    // read 3x the default's time on a loaded machine and be cut: it still
    // ran, and that is what this asserts.
    assert!(
        matches!(r.trials[1].status, Status::Ok | Status::Cut),
        "{:?}",
        r.trials[1]
    );
    assert_eq!(r.heuristics.len(), 1);
    assert_eq!(r.heuristics[0].name, "wide");
    assert_eq!(r.heuristics[0].seeds, vec![r.trials[1].params.clone()]);
    let won = r.best_params == r.trials[1].params;
    assert_eq!(r.heuristics[0].won, won);
    assert_eq!(r.warnings.len(), 1);
    assert!(r.warnings[0].contains("'broken'") && r.warnings[0].contains("no idea"));
}
