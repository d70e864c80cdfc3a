//! Compares the search strategies on recorded spaces (no device): for
//! each space and strategy, over ten seeds (or `SEEDS`), how often a tenth
//! of the space gets within 5% of the best point, and how many trials it
//! takes to get there (the whole space when never): the mean, and the
//! budget that gets nine seeds in ten there (the issue's "in at least 9
//! of 10 seeds" asks for that budget; a strategy that is fast on average
//! but sometimes lost shows there). Trials count as a tuning run counts
//! them: a point whose kernel was measured already is free.
//!
//! ```text
//! cargo run --release -p tilefuse-tune --example replay_strategies [SEEDS] [RECORDING.json ...]
//! ```
//!
//! `SEEDS` (default 10) seeds a strategy; more give steadier means. The
//! recordings default to the test fixtures; `record_spaces` makes more.
//! The last rows sum each strategy's trials over the spaces.

use std::path::{Path, PathBuf};

use tilefuse_tune::replay::trials_over_seeds;
use tilefuse_tune::{Recording, Strategy};

const STRATEGIES: [Strategy; 3] = [Strategy::Random, Strategy::Pattern, Strategy::Surrogate];

fn main() {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().map_or(10, |s| s.parse().expect("a seed count"));
    let mut paths: Vec<PathBuf> = args.map(PathBuf::from).collect();
    if paths.is_empty() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        paths = ["chain_cpu", "softmax_gpu", "matmul_gpu"]
            .map(|name| dir.join(format!("{name}.json")))
            .into();
    }
    println!(
        "| space | points | strategy | within 5% with 10% of the space | mean trials to within 5% | trials for 9 in 10 seeds |"
    );
    println!("|---|---|---|---|---|---|");
    let mut totals = [(0.0, 0); STRATEGIES.len()];
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("a readable recording");
        let r: Recording = serde_json::from_str(&text).expect("a recording");
        let name = path.file_stem().unwrap().to_string_lossy();
        for (strategy, total) in STRATEGIES.into_iter().zip(&mut totals) {
            let runs = trials_over_seeds(&r, strategy, 0.05, 0..seeds);
            let hits = runs.iter().filter(|&&n| n <= r.size() / 10).count();
            let mean = runs.iter().sum::<usize>() as f64 / runs.len() as f64;
            let ninth = runs[(runs.len() * 9).div_ceil(10) - 1];
            *total = (total.0 + mean, total.1 + ninth);
            println!(
                "| {name} | {} | {strategy:?} | {hits}/{seeds} | {mean:.1} | {ninth} |",
                r.size()
            );
        }
    }
    for (strategy, (mean, ninth)) in STRATEGIES.into_iter().zip(totals) {
        println!("| all | | {strategy:?} | | {mean:.1} | {ninth} |");
    }
}
