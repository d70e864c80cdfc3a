//! Warm start: the cached winners of a fusion's family (the same
//! structure at other sizes, see `Fusion::family`) on the same device
//! are the first candidates a new tuning run tries after the default.
//! A winner at a nearby size is a better first guess than any heuristic:
//! it was measured on this very device.

use serde::{Deserialize, Serialize};
use tilefuse_ir::Fusion;

use crate::cache::Entry;
use crate::key::CacheKey;

/// Which fusions a cached winner is a first guess for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Family {
    /// `Fusion::family`: the structure without the extents.
    pub id: String,
    /// The extents of the fusion's inputs, to rank members by closeness.
    pub sizes: Vec<Vec<usize>>,
}

impl Family {
    pub fn of(fusion: &Fusion) -> Family {
        let types = fusion.types();
        Family {
            id: fusion.family(),
            sizes: (fusion.inputs().iter())
                .map(|t| types[t.0].shape.clone())
                .collect(),
        }
    }

    /// How far apart two members' sizes are: the sum over their inputs'
    /// dimensions of |ln| of the ratio of extents (0 for the same sizes).
    fn distance(&self, other: &Family) -> f64 {
        let dims = self
            .sizes
            .iter()
            .flatten()
            .zip(other.sizes.iter().flatten());
        dims.map(|(&a, &b)| ((a as f64 + 1.0) / (b as f64 + 1.0)).ln().abs())
            .sum()
    }
}

/// The winners among `entries` of `family`'s members for `key`'s
/// scheduler, device and versions, nearest sizes first (the entry of
/// `key` itself first), at most `limit`.
pub fn nearest<'e>(
    entries: impl IntoIterator<Item = &'e Entry>,
    key: &CacheKey,
    family: &Family,
    limit: usize,
) -> Vec<&'e Entry> {
    let same_target = |k: &CacheKey| {
        k.scheduler == key.scheduler
            && k.device == key.device
            && k.params_version == key.params_version
            && k.codegen_version == key.codegen_version
    };
    let mut found: Vec<(f64, &Entry)> = (entries.into_iter())
        .filter(|e| e.family.id == family.id && same_target(&e.key))
        .map(|e| (family.distance(&e.family), e))
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found.into_iter().take(limit).map(|(_, e)| e).collect()
}
