//! Search strategies: which point of the space to try next, from what was
//! observed so far.

use std::collections::HashSet;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::space::{Grid, Observation, Point, best_point};
use crate::surrogate;

/// How the next candidates are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly random points.
    Random,
    /// Neighbour descent from the best point, random restarts when every
    /// neighbour was tried.
    Pattern,
    /// A pattern descent from the default, then a random forest's
    /// likeliest-good points near the best, in diverse batches (see
    /// `surrogate`). The default when the space exceeds the budget.
    Surrogate,
    /// Every point, in order (small spaces).
    Exhaustive,
}

/// The candidates a strategy proposes, in order, without repeats.
pub(crate) struct Points {
    strategy: Strategy,
    rng: StdRng,
    tried: HashSet<Point>,
    /// Proposed and not yet handed out (popped from the end).
    queue: Vec<(Point, &'static str)>,
}

impl Points {
    /// Proposals over `grid`, whose `base` point is measured already.
    pub(crate) fn new(grid: &Grid, base: &Point, strategy: Strategy, seed: u64) -> Points {
        let queue = match strategy {
            Strategy::Exhaustive => (grid.all().into_iter().rev())
                .map(|p| (p, "exhaustive"))
                .collect(),
            _ => Vec::new(),
        };
        Points {
            strategy,
            rng: StdRng::seed_from_u64(seed),
            tried: HashSet::from([base.clone()]),
            queue,
        }
    }

    /// The next untried point and what proposed it; `None` when every
    /// point was tried.
    pub(crate) fn next(
        &mut self,
        grid: &Grid,
        history: &[Observation],
    ) -> Option<(Point, &'static str)> {
        loop {
            if self.tried.len() as u64 >= grid.size() {
                return None;
            }
            let candidate = match self.queue.pop() {
                Some(c) => c,
                None => self.propose(grid, history)?,
            };
            if self.tried.insert(candidate.0.clone()) {
                return Some(candidate);
            }
        }
    }

    fn propose(&mut self, grid: &Grid, history: &[Observation]) -> Option<(Point, &'static str)> {
        let random = |rng: &mut StdRng| (grid.random(rng), "random");
        Some(match self.strategy {
            Strategy::Exhaustive => return None,
            Strategy::Random => random(&mut self.rng),
            Strategy::Pattern => {
                let best = best_point(history);
                let fresh = best
                    .map(|b| grid.neighbors(b))
                    .unwrap_or_default()
                    .into_iter()
                    .find(|p| !self.tried.contains(p));
                match fresh {
                    Some(p) => (p, "neighbor"),
                    None => random(&mut self.rng),
                }
            }
            Strategy::Surrogate => {
                let batch = surrogate::propose(grid, history, &self.tried, &mut self.rng);
                self.queue
                    .extend(batch.into_iter().rev().map(|p| (p, "surrogate")));
                self.queue.pop().unwrap_or_else(|| random(&mut self.rng))
            }
        })
    }
}
