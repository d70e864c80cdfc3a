//! Learned heuristics: a decision tree over a fusion's shape features that
//! picks one of a few params configs, or keeps the default heuristic,
//! learned from the tuned shapes of one fusion family on one device
//! (`tilefuse.learn`). Plain data: a versioned JSON document that lookups
//! read from the cache directory's `learned/` folder, after the exact
//! cache entry and before the default heuristic.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, SchedulerKind};
use tilefuse_sched::DeviceInfo;
use tilefuse_schedulers::{Features, features};

use crate::cache::{CacheError, io, write_atomically};
use crate::key::DeviceKey;

/// The document format's version; a document of another is not served.
pub const LEARNED_VERSION: u32 = 1;

/// The shape features a tree splits on, in the order of
/// [`shape_features`]: log2 of the sizes the scheduler sees (a reduction's
/// rows, reduced length and inner length; a matmul's m, n and k), of the
/// elements, and of the reduced length over the rows (or k over m * n).
pub const FEATURES: [&str; 6] = [
    "log2_a",
    "log2_b",
    "log2_c",
    "log2_elements",
    "log2_ratio",
    "compute_ops",
];

/// The [`FEATURES`] of a fusion whose scheduler's view is `f`.
pub fn shape_features(f: &Features) -> [f64; FEATURES.len()] {
    let [a, b, c] = match (f.matmul, &f.reduction) {
        (Some([m, n, k]), _) => [m, n, k],
        (None, Some(r)) => [r.outer, r.reduced, r.inner],
        (None, None) => [1, 1, 1],
    };
    let log2 = |x: u64| (x.max(1) as f64).log2();
    let ratio = match f.matmul {
        Some(_) => log2(c) - log2(a) - log2(b),
        None => log2(b) - log2(a),
    };
    [
        log2(a),
        log2(b),
        log2(c),
        log2(a) + log2(b) + log2(c),
        ratio,
        f.compute_ops as f64,
    ]
}

/// A node of the tree: a split (`features[feature] <= threshold` goes
/// left) or a leaf naming a config (`None`: keep the default heuristic).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Node {
    Split {
        feature: usize,
        threshold: f64,
        left: usize,
        right: usize,
    },
    Leaf {
        leaf: Option<usize>,
    },
}

/// A learned heuristic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnedHeuristic {
    pub version: u32,
    /// The name `params_source` gives it (its family's workload, say).
    pub name: String,
    /// `Fusion::family` of the fusions it is for.
    pub family: String,
    pub scheduler: SchedulerKind,
    /// The device it was learned on.
    pub device: DeviceKey,
    /// [`FEATURES`] when it was learned.
    pub features: Vec<String>,
    /// The tree, its root first; children come after their parent.
    pub nodes: Vec<Node>,
    /// The params of each config a leaf may name.
    pub configs: Vec<Value>,
    /// The training shapes, quality and anything else the learner
    /// recorded; not read by lookups.
    #[serde(default)]
    pub meta: Value,
}

/// How a learned heuristic serves a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// It was learned on this device.
    Exact,
    /// It was learned on another device of the same kind and capabilities.
    SameKind,
}

/// What a learned heuristic picked for a fusion.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    /// The config's params, or `None`: the default heuristic's.
    pub params: Option<Value>,
    /// The index of the leaf that chose.
    pub leaf: usize,
}

impl LearnedHeuristic {
    /// Parses and checks a document: its version, its features, its
    /// configs (valid params of its scheduler, completed with defaults),
    /// and a tree whose every index is in range and whose children follow
    /// their parent (so that a walk ends).
    pub fn parse(text: &str) -> Result<LearnedHeuristic, String> {
        serde_json::from_str::<LearnedHeuristic>(text)
            .map_err(|e| e.to_string())?
            .checked()
    }

    /// [`LearnedHeuristic::parse`] of a document already read as JSON.
    pub fn from_value(value: Value) -> Result<LearnedHeuristic, String> {
        serde_json::from_value::<LearnedHeuristic>(value)
            .map_err(|e| e.to_string())?
            .checked()
    }

    fn checked(mut self) -> Result<LearnedHeuristic, String> {
        let h = &mut self;
        if h.version != LEARNED_VERSION {
            return Err(format!("version {}, not {LEARNED_VERSION}", h.version));
        }
        if h.features != FEATURES {
            return Err(format!("features {:?}, not {FEATURES:?}", h.features));
        }
        if h.nodes.is_empty() {
            return Err("an empty tree".into());
        }
        for (i, config) in h.configs.iter_mut().enumerate() {
            let params = HeuristicParams::from_value(config.take())
                .map_err(|e| format!("config {i}: {e}"))?;
            if params.kind() != h.scheduler {
                return Err(format!("config {i} is {:?} params", params.kind()));
            }
            *config = params.to_value();
        }
        for (i, node) in h.nodes.iter().enumerate() {
            let fine = match *node {
                Node::Split {
                    feature,
                    left,
                    right,
                    ..
                } => {
                    feature < FEATURES.len()
                        && i < left.min(right)
                        && left.max(right) < h.nodes.len()
                }
                Node::Leaf { leaf } => leaf.is_none_or(|c| c < h.configs.len()),
            };
            if !fine {
                return Err(format!("node {i} points outside the tree or its configs"));
            }
        }
        Ok(self)
    }

    /// A document named `name` (its file's name: letters, digits, `-`,
    /// `_` and `.`) for `fusion`'s family under `scheduler` on `device`:
    /// `nodes` over `configs`, checked as [`LearnedHeuristic::parse`]
    /// checks a file.
    pub fn new(
        name: &str,
        fusion: &Fusion,
        scheduler: SchedulerKind,
        device: &DeviceInfo,
        nodes: Vec<Node>,
        configs: Vec<Value>,
        meta: Value,
    ) -> Result<LearnedHeuristic, String> {
        let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) {
            return Err(format!(
                "name {name:?}: letters, digits, '-', '_' and '.' only"
            ));
        }
        let h = LearnedHeuristic {
            version: LEARNED_VERSION,
            name: name.to_owned(),
            family: fusion.family(),
            scheduler,
            device: DeviceKey::of(device),
            features: FEATURES.iter().map(|s| s.to_string()).collect(),
            nodes,
            configs,
            meta,
        };
        LearnedHeuristic::parse(&serde_json::to_string(&h).expect("a document serializes"))
    }

    /// How well it serves `fusion` (by family) under `scheduler` on
    /// `device`: learned there, learned on another device of the same
    /// kind and capabilities (backend, vendor, adapter type, limits; the
    /// name, driver or thread count may differ), or not at all.
    pub fn serves(
        &self,
        fusion: &Fusion,
        scheduler: SchedulerKind,
        device: &DeviceInfo,
    ) -> Option<Match> {
        if self.scheduler != scheduler || self.family != fusion.family() {
            return None;
        }
        let (a, b) = (&self.device, &DeviceKey::of(device));
        let alike = a.backend == b.backend
            && a.vendor == b.vendor
            && a.adapter_type == b.adapter_type
            && a.limits == b.limits;
        match (a == b, alike) {
            (true, _) => Some(Match::Exact),
            (false, true) => Some(Match::SameKind),
            (false, false) => None,
        }
    }

    /// The config the tree picks for `fusion`.
    pub fn pick(&self, fusion: &Fusion) -> Result<Pick, String> {
        let x = shape_features(&features(fusion)?);
        let mut at = 0;
        loop {
            match self.nodes[at] {
                Node::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => at = if x[feature] <= threshold { left } else { right },
                Node::Leaf { leaf } => {
                    let params = leaf.map(|c| self.configs[c].clone());
                    return Ok(Pick { params, leaf: at });
                }
            }
        }
    }
}

/// The folder of the cache directory learned heuristics are kept in.
pub const LEARNED_DIR: &str = "learned";

/// Writes `h` into `dir`'s `learned/` folder as `NAME.json`, atomically;
/// the file's path.
pub fn save_learned(dir: &Path, h: &LearnedHeuristic) -> Result<PathBuf, CacheError> {
    let folder = dir.join(LEARNED_DIR);
    std::fs::create_dir_all(&folder).map_err(io(&folder))?;
    let path = folder.join(format!("{}.json", h.name));
    let text = serde_json::to_string_pretty(h).expect("a learned heuristic serializes");
    write_atomically(&path, &text)?;
    Ok(path)
}

/// The learned heuristics' files in the cache directory `dir`, by name.
pub(crate) fn learned_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(dir.join(LEARNED_DIR)) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilefuse_testing::softmax;

    fn heuristic(nodes: Vec<Node>, configs: Vec<Value>) -> LearnedHeuristic {
        LearnedHeuristic {
            version: LEARNED_VERSION,
            name: "softmax".into(),
            family: String::new(),
            scheduler: SchedulerKind::Reduction,
            device: DeviceKey::of(&tilefuse_runtime::Device::cpu().info()),
            features: FEATURES.iter().map(|s| s.to_string()).collect(),
            nodes,
            configs,
            meta: Value::Null,
        }
    }

    #[test]
    fn the_tree_splits_on_the_shape_and_a_leaf_may_keep_the_default() {
        // Rows of more than 2^6 elements: config 0; else the default.
        let nodes = vec![
            Node::Split {
                feature: 1,
                threshold: 6.0,
                left: 1,
                right: 2,
            },
            Node::Leaf { leaf: None },
            Node::Leaf { leaf: Some(0) },
        ];
        let config = serde_json::json!({"scheduler": "reduction", "unroll_factor_reduction": 2});
        let h = heuristic(nodes, vec![config]);
        let text = serde_json::to_string(&h).unwrap();
        let h = LearnedHeuristic::parse(&text).unwrap();
        let short = h.pick(&softmax(&[16, 32], -1)).unwrap();
        assert_eq!((short.params, short.leaf), (None, 1));
        let long = h.pick(&softmax(&[16, 256], -1)).unwrap();
        assert_eq!(long.leaf, 2);
        assert_eq!(long.params.unwrap()["unroll_factor_reduction"], 2);
    }

    #[test]
    fn a_document_that_could_loop_or_point_nowhere_is_refused() {
        let split = |left, right| Node::Split {
            feature: 0,
            threshold: 1.0,
            left,
            right,
        };
        for (nodes, configs) in [
            (vec![split(0, 1), Node::Leaf { leaf: None }], vec![]),
            (vec![split(1, 5), Node::Leaf { leaf: None }], vec![]),
            (vec![Node::Leaf { leaf: Some(1) }], vec![Value::Null]),
            (vec![], vec![]),
        ] {
            let text = serde_json::to_string(&heuristic(nodes, configs)).unwrap();
            assert!(LearnedHeuristic::parse(&text).is_err(), "{text}");
        }
        let mut h = heuristic(vec![Node::Leaf { leaf: None }], vec![]);
        h.version = 0;
        let text = serde_json::to_string(&h).unwrap();
        assert!(
            LearnedHeuristic::parse(&text)
                .unwrap_err()
                .contains("version 0")
        );
    }
}
