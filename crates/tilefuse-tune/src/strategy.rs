//! Search strategies: which point of the space to try next.

use std::collections::HashSet;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use crate::space::{Point, Space};

/// How the next candidates are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly random points.
    Random,
    /// Neighbour descent from the best point, random restarts when every
    /// neighbour was tried.
    Pattern,
    /// Every point, in order (small spaces).
    Exhaustive,
}

/// The candidates a strategy proposes, in order, without repeats.
pub(crate) struct Points {
    strategy: Strategy,
    rng: StdRng,
    tried: HashSet<Point>,
    queue: Vec<(Point, &'static str)>,
}

impl Points {
    pub(crate) fn new(space: &Space, strategy: Strategy, seed: u64) -> Points {
        let mut tried = HashSet::new();
        tried.insert(space.base_point());
        let queue = match strategy {
            Strategy::Exhaustive => space
                .all()
                .into_iter()
                .rev()
                .map(|p| (p, "exhaustive"))
                .collect(),
            _ => Vec::new(),
        };
        Points {
            strategy,
            rng: StdRng::seed_from_u64(seed),
            tried,
            queue,
        }
    }

    pub(crate) fn next(
        &mut self,
        space: &Space,
        best: Option<&Point>,
    ) -> Option<(Point, &'static str)> {
        loop {
            let candidate = match self.strategy {
                Strategy::Exhaustive => self.queue.pop()?,
                Strategy::Random => (space.random(&mut self.rng), "random"),
                Strategy::Pattern => {
                    let base = space.base_point();
                    let fresh = space
                        .neighbors(best.unwrap_or(&base))
                        .into_iter()
                        .find(|p| !self.tried.contains(p));
                    match fresh {
                        Some(p) => (p, "neighbor"),
                        None => (space.random(&mut self.rng), "random"),
                    }
                }
            };
            if self.tried.len() as u64 >= space.size() {
                return None;
            }
            if self.tried.insert(candidate.0.clone()) {
                return Some(candidate);
            }
        }
    }
}
