//! Warm start: the cached winners of a fusion's family (the same
//! structure at other sizes, see `Fusion::family`) on the same device
//! are the first candidates a new tuning run tries after the default.
//! A winner at a nearby size is a better first guess than any heuristic:
//! it was measured on this very device.

use crate::cache::Entry;
use crate::key::{CacheKey, Family};

/// The winners among `entries` of `family`'s members for `key`'s
/// scheduler, device and versions, nearest sizes first (the entry of
/// `key` itself first), at most `limit`.
pub fn nearest<'e>(
    entries: impl IntoIterator<Item = &'e Entry>,
    key: &CacheKey,
    family: &Family,
    limit: usize,
) -> Vec<&'e Entry> {
    // Every key field but the fusion must match.
    let same_target = |k: &CacheKey| key.differences(k).iter().all(|d| d == "fusion");
    let mut found: Vec<(f64, &Entry)> = (entries.into_iter())
        .filter(|e| e.family.id == family.id && same_target(&e.key))
        .map(|e| (family.distance(&e.family), e))
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    found.into_iter().take(limit).map(|(_, e)| e).collect()
}
