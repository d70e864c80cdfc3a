//! How much of `full` effort's speedup `quick` reaches on recorded spaces
//! (no device): for each space, over ten seeds (or `SEEDS`), the surrogate
//! replayed with each effort's trial budget, and the speedup of the best
//! point it found over the default's, as a JSON array with an object per
//! space, which `benches/report.py` renders (quick's gain over the default
//! as a share of full's, summed over the spaces).
//!
//! ```text
//! cargo run --release -p tilefuse-tune --example replay_efforts [SEEDS] RECORDING.json ... > efforts.json
//! ```
//!
//! A strategy's choices do not depend on its budget, so quick's run is the
//! start of full's, and full's ends at the space's best.

use std::path::PathBuf;

use tilefuse_tune::replay::{best_of, trials};
use tilefuse_tune::{Effort, Observation, Recording, Strategy};

fn main() {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().map_or(10, |s| s.parse().expect("a seed count"));
    let paths: Vec<PathBuf> = args.map(PathBuf::from).collect();
    let mut rows = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("a readable recording");
        let r: Recording = serde_json::from_str(&text).expect("a recording");
        let default = r.measured(&r.base).time.expect("the default ran");
        let best = r.best();
        let mut speedups = [0.0; 2];
        for seed in 0..seeds {
            // Past the space's best nothing improves: a space of fewer
            // kernels than full's budget would be walked to its end.
            let found = |o: &Observation| o.time == Some(best);
            let full = r.replay_until(Strategy::Surrogate, Effort::Full.trials(), seed, found);
            let quick = within_budget(&full, Effort::Quick.trials());
            for (s, history) in speedups.iter_mut().zip([quick, &full[..]]) {
                *s += default / best_of(history) / seeds as f64;
            }
        }
        rows.push(serde_json::json!({
            "space": path.file_stem().unwrap().to_string_lossy(),
            "points": r.size(),
            "seeds": seeds,
            "default_over_best": default / best,
            "quick_speedup": speedups[0],
            "full_speedup": speedups[1],
        }));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&rows).expect("plain numbers")
    );
}

/// The longest start of `history` that costs at most `budget` trials.
fn within_budget(history: &[Observation], budget: usize) -> &[Observation] {
    let end = (1..=history.len())
        .take_while(|&n| trials(&history[..n]) <= budget)
        .last()
        .unwrap_or(0);
    &history[..end]
}
