//! Records the spaces the strategy-replay tests and benchmarks run on:
//! every point's time, the median of `PASSES` exhaustive runs, its
//! fastest kernels confirmed (`Recording::confirm`).
//!
//! ```text
//! cargo run --release -p tilefuse-tune --example record_spaces -- crates/tilefuse-tune/tests/fixtures
//! ```
//!
//! Re-record after a scheduler or codegen change that moves the timings
//! much; the replay tests only need the landscape to be a real one. The
//! chain and the softmax were chosen for defaults off their best (1.23x
//! and 1.13x when recorded), so that a search has something to find; the
//! spaces recorded before (a 512 x 1024 chain, a 256 x 1024 softmax) came
//! to have their defaults within 5% of the best. No matmul tried on
//! lavapipe (256³, A^T 256³, 64 x 512 x 512) had its default off the
//! best over these five fields once measured three times.

use std::path::PathBuf;

use tilefuse_ir::{BinaryOp, DType, Fusion, UnaryOp};
use tilefuse_runtime::Device;
use tilefuse_testing::softmax;
use tilefuse_tune::{Options, Recording};

/// Exhaustive runs per space.
const PASSES: usize = 3;

fn chain() -> Fusion {
    let mut f = Fusion::new();
    let mut x = f.input(&[2048, 2048], DType::F32, Some("x")).unwrap();
    let half = f.constant(0.5, DType::F32).unwrap();
    for i in 0..8 {
        x = match i % 2 {
            0 => f.unary(UnaryOp::Tanh, x).unwrap(),
            _ => f.binary(BinaryOp::Mul, x, half).unwrap(),
        };
    }
    f.output(x).unwrap();
    f
}

fn matmul() -> Fusion {
    let mut f = Fusion::new();
    let a = f.input(&[64, 512], DType::F32, Some("a")).unwrap();
    let b = f.input(&[512, 512], DType::F32, Some("b")).unwrap();
    let c = f.matmul(a, b, false, false).unwrap();
    f.output(c).unwrap();
    f
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("an output directory"));
    let fields = |paths: &[&str]| Options {
        fields: Some(paths.iter().map(|p| (*p).to_owned()).collect()),
        repeat: 5,
        ..Options::default()
    };
    let gpu = Device::gpu().expect("a GPU adapter (lavapipe will do)");
    let cases = [
        (
            "chain_cpu",
            "8-op pointwise chain 2048x2048, CPU device",
            chain(),
            Device::cpu(),
            fields(&[
                "launch.workgroup_size",
                "vectorization_factor",
                "unroll_factor_inner",
                "unroll_factor_outer",
            ]),
        ),
        (
            "softmax_gpu",
            "softmax 1000x1000, wgpu device",
            softmax(&[1000, 1000], -1),
            gpu.clone(),
            fields(&[
                "reduction_invocations",
                "rows_per_workgroup",
                "unroll_factor_reduction",
                "vectorization_factor_reduction",
            ]),
        ),
        (
            "matmul_gpu",
            "matmul 64x512x512, wgpu device",
            matmul(),
            gpu,
            fields(&[
                "tile_sizes.cta_tile.m",
                "tile_sizes.cta_tile.n",
                "tile_sizes.cta_tile.k",
                "tile_sizes.instruction_tile.m",
                "tile_sizes.instruction_tile.n",
            ]),
        ),
    ];
    // Pass by pass over all spaces, so that the passes of one space lie
    // minutes apart and a slow spell of the machine hits one pass only.
    let mut passes = vec![Vec::new(); cases.len()];
    for pass in 0..PASSES {
        for ((name, description, fusion, device, options), recorded) in
            cases.iter().zip(&mut passes)
        {
            let description = format!("{description} ({})", device.info().name);
            eprintln!("{name}: pass {} of {PASSES}", pass + 1);
            recorded.push(
                Recording::record(fusion, device, options, &description, &mut |_, _| true).unwrap(),
            );
        }
    }
    for ((name, _, fusion, device, options), passes) in cases.iter().zip(passes) {
        let mut r = Recording::median_of(&passes);
        r.confirm(fusion, device, options).unwrap();
        let path = out.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(&r).unwrap()).unwrap();
        let ok = r.times.iter().filter(|(_, t)| t.is_some()).count();
        println!(
            "{}: {} points ({ok} ran), best {:.4} ms",
            path.display(),
            r.size(),
            r.best() * 1e3
        );
    }
}
