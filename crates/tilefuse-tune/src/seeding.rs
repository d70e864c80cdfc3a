//! The seed heuristics' part of a tuning run: which applied, the seeds
//! they gave (tried right after the default), the neighbours they propose
//! around each new best, and the warnings of those that failed.

use std::collections::{HashSet, VecDeque};

use serde::Serialize;
use tilefuse_params::HeuristicParams;

use crate::seeds::{AutotunerHeuristic, SeedContext, applies};

/// Seeds tried per heuristic, best first.
const MAX_SEEDS: usize = 8;

/// What one heuristic contributed to a run.
#[derive(Clone, Debug, Serialize)]
pub struct HeuristicReport {
    pub name: String,
    /// Its seeds, as params JSON.
    pub seeds: Vec<serde_json::Value>,
    /// Whether one of its seeds won.
    pub won: bool,
}

/// A params value a heuristic proposed.
pub(crate) struct Proposal {
    pub(crate) params: HeuristicParams,
    pub(crate) heuristic: String,
    /// `"seed"` or `"heuristic_neighbor"`.
    pub(crate) origin: &'static str,
}

pub(crate) struct Seeding<'h> {
    /// The heuristics that applied (a report each, same order), `None`
    /// once one failed.
    applied: Vec<Option<&'h dyn AutotunerHeuristic>>,
    pub(crate) reports: Vec<HeuristicReport>,
    pub(crate) warnings: Vec<String>,
    /// The best params neighbours were last asked for.
    asked: Option<HeuristicParams>,
    /// Every params value proposed so far (printed).
    proposed: HashSet<String>,
    queue: VecDeque<Proposal>,
}

impl<'h> Seeding<'h> {
    /// Asks each heuristic whether it applies; those that do give seeds.
    pub(crate) fn new(heuristics: &[&'h dyn AutotunerHeuristic], cx: &SeedContext) -> Self {
        let mut s = Seeding {
            applied: Vec::new(),
            reports: Vec::new(),
            warnings: Vec::new(),
            asked: None,
            proposed: HashSet::new(),
            queue: VecDeque::new(),
        };
        for &h in heuristics {
            let seeds = applies(h, cx).and_then(|yes| match yes {
                true => h.seed_configs(cx).map(Some),
                false => Ok(None),
            });
            match seeds {
                Ok(Some(mut seeds)) => {
                    seeds.truncate(MAX_SEEDS);
                    s.reports.push(HeuristicReport {
                        name: h.name().to_owned(),
                        seeds: seeds.iter().map(HeuristicParams::to_value).collect(),
                        won: false,
                    });
                    for p in seeds {
                        s.propose(p, h.name(), "seed");
                    }
                    s.applied.push(Some(h));
                }
                Ok(None) => {}
                Err(e) => s.fail(h.name(), &e),
            }
        }
        s
    }

    fn fail(&mut self, name: &str, error: &str) {
        self.warnings.push(format!(
            "seed heuristic '{name}' failed and is skipped: {error}"
        ));
    }

    fn propose(&mut self, params: HeuristicParams, name: &str, origin: &'static str) {
        if self.proposed.insert(params.to_value().to_string()) {
            self.queue.push_back(Proposal {
                params,
                heuristic: name.to_owned(),
                origin,
            });
        }
    }

    /// The next seed or neighbour to try,
    /// asking the heuristics for neighbours of `best` when it is new.
    pub(crate) fn next(
        &mut self,
        best: Option<&HeuristicParams>,
        cx: &SeedContext,
    ) -> Option<Proposal> {
        if self.queue.is_empty()
            && let Some(best) = best
            && self.asked.as_ref() != Some(best)
        {
            self.asked = Some(best.clone());
            self.ask_neighbors(best, cx);
        }
        self.queue.pop_front()
    }

    fn ask_neighbors(&mut self, best: &HeuristicParams, cx: &SeedContext) {
        for i in 0..self.applied.len() {
            let Some(h) = self.applied[i] else { continue };
            match h.neighbors(best, cx) {
                Ok(near) => {
                    for p in near {
                        self.propose(p, h.name(), "heuristic_neighbor");
                    }
                }
                Err(e) => {
                    self.fail(h.name(), &e);
                    self.applied[i] = None;
                }
            }
        }
    }

    /// Records that a seed of `name` won.
    pub(crate) fn won(&mut self, name: &str) {
        for r in &mut self.reports {
            r.won |= r.name == name;
        }
    }
}
