//! Compares the search strategies on the recorded spaces (no device): for
//! each space and strategy, over ten seeds (or `SEEDS`), how often a tenth
//! of the space gets within 5% of the best point, and how many trials it
//! takes to get there (the whole space when never). Trials count as a
//! tuning run counts them: a point whose kernel was measured already is
//! free.
//!
//! ```text
//! cargo run --release -p tilefuse-tune --example replay_strategies [SEEDS]
//! ```
//!
//! `SEEDS` (default 10) seeds a strategy; more give steadier means.

use tilefuse_tune::replay::trials_to_within;
use tilefuse_tune::{Recording, Strategy};

fn main() {
    let seeds: u64 = std::env::args()
        .nth(1)
        .map_or(10, |s| s.parse().expect("a seed count"));
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    println!(
        "| space | points | strategy | within 5% with 10% of the space | mean trials to within 5% |"
    );
    println!("|---|---|---|---|---|");
    for name in ["chain_cpu", "softmax_gpu", "matmul_gpu"] {
        let text = std::fs::read_to_string(format!("{dir}/{name}.json")).unwrap();
        let r: Recording = serde_json::from_str(&text).unwrap();
        for strategy in [Strategy::Random, Strategy::Pattern, Strategy::Surrogate] {
            let runs: Vec<usize> = (0..seeds)
                .map(|seed| {
                    trials_to_within(&r, strategy, 0.05, seed, r.size()).unwrap_or(r.size())
                })
                .collect();
            let hits = runs.iter().filter(|&&n| n <= r.size() / 10).count();
            let mean = runs.iter().sum::<usize>() as f64 / runs.len() as f64;
            println!(
                "| {name} | {} | {strategy:?} | {hits}/{seeds} | {mean:.1} |",
                r.size()
            );
        }
    }
}
