//! Bundles: a whole cache in one JSON file, to ship with a package, share
//! between machines or merge: its entries and its learned heuristics. A
//! bundle is a read-only layer under the user's cache (lookups fall
//! through to it), or is imported into a cache (its entries marked
//! [`Origin::Imported`]: served, but never preferred to a winner measured
//! here; its learned heuristics added beside the cache's own, which keep
//! their names).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cache::{Cache, CacheError, Entry, Origin, Written, io, write_atomically};
use crate::key::CacheKey;
use crate::learned::{LEARNED_DIR, LearnedHeuristic, learned_files, save_learned};

/// What a bundle file says it is.
const FORMAT: &str = "tilefuse-cache-bundle";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct File1 {
    format: String,
    version: u32,
    entries: Vec<Entry>,
    /// Absent from bundles of caches without learned heuristics (and so
    /// from those written before bundles carried them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    learned: Vec<serde_json::Value>,
}

/// Entries by key, at most one per key; learned heuristics by name.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    entries: BTreeMap<String, Entry>,
    learned: BTreeMap<String, LearnedHeuristic>,
}

impl Bundle {
    /// Reads a bundle file.
    pub fn load(path: &Path) -> Result<Bundle, CacheError> {
        let text = fs::read_to_string(path).map_err(io(path))?;
        let file: File1 = serde_json::from_str(&text).map_err(|e| CacheError::Invalid {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        if file.format != FORMAT || file.version > VERSION {
            return Err(CacheError::Invalid {
                path: path.to_owned(),
                message: format!(
                    "not a {FORMAT} of version {VERSION} or older (format {:?}, version {})",
                    file.format, file.version
                ),
            });
        }
        let mut bundle = Bundle::default();
        for e in file.entries {
            bundle.add(e);
        }
        for (i, doc) in file.learned.into_iter().enumerate() {
            let h = LearnedHeuristic::from_value(doc).map_err(|e| CacheError::Invalid {
                path: path.to_owned(),
                message: format!("learned[{i}]: {e}"),
            })?;
            bundle.learned.entry(h.name.clone()).or_insert(h);
        }
        Ok(bundle)
    }

    /// Writes the bundle atomically (temporary file, sync, rename).
    pub fn save(&self, path: &Path) -> Result<(), CacheError> {
        let file = File1 {
            format: FORMAT.to_owned(),
            version: VERSION,
            entries: self.entries.values().cloned().collect(),
            learned: self
                .learned
                .values()
                .map(|h| serde_json::to_value(h).expect("a learned heuristic serializes"))
                .collect(),
        };
        let text = serde_json::to_string_pretty(&file).expect("a bundle serializes");
        write_atomically(path, &text)
    }

    /// Every entry and learned heuristic of `cache` (a learned file that
    /// does not load is left out, with a warning).
    pub fn export(cache: &Cache) -> Result<(Bundle, Vec<String>), CacheError> {
        let (entries, mut warnings) = cache.entries()?;
        let mut bundle = Bundle::default();
        for e in entries {
            bundle.add(e);
        }
        for path in learned_files(cache.dir()) {
            let loaded = fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| LearnedHeuristic::parse(&text));
            match loaded {
                Ok(h) => {
                    bundle.learned.insert(h.name.clone(), h);
                }
                Err(e) => warnings.push(format!(
                    "learned heuristic {} left out: {e}",
                    path.display()
                )),
            }
        }
        Ok((bundle, warnings))
    }

    /// Adds `entry` unless the bundle prefers the one of its key it has.
    pub fn add(&mut self, entry: Entry) -> Written {
        let stem = entry.key.file_stem();
        match self.entries.get(&stem) {
            Some(old) if !entry.replaces(old) => Written::KeptFaster,
            _ => {
                self.entries.insert(stem, entry);
                Written::Stored
            }
        }
    }

    /// Every entry of `other` added (the faster per key), and its learned
    /// heuristics of names this one lacks.
    pub fn merge(&mut self, other: Bundle) {
        for e in other.entries.into_values() {
            self.add(e);
        }
        for (name, h) in other.learned {
            self.learned.entry(name).or_insert(h);
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<&Entry> {
        self.entries.get(&key.file_stem()).filter(|e| e.key == *key)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// Its learned heuristics, by name.
    pub fn learned(&self) -> impl Iterator<Item = &LearnedHeuristic> {
        self.learned.values()
    }

    /// Its entries and learned heuristics.
    pub fn len(&self) -> usize {
        self.entries.len() + self.learned.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores every entry in `cache` as imported, and every learned
    /// heuristic whose name the cache has none of; how many of either were
    /// stored (an entry measured there, or a faster one, stays; so does a
    /// learned heuristic of the same name).
    pub fn import_into(&self, cache: &Cache) -> Result<(usize, Vec<String>), CacheError> {
        let mut stored = 0;
        let mut warnings = Vec::new();
        for e in self.entries.values() {
            let imported = Entry {
                origin: Origin::Imported,
                ..e.clone()
            };
            let (written, w) = cache.put(&imported)?;
            stored += usize::from(written == Written::Stored);
            warnings.extend(w);
        }
        let folder = cache.dir().join(LEARNED_DIR);
        for h in self.learned.values() {
            if !folder.join(format!("{}.json", h.name)).exists() {
                save_learned(cache.dir(), h)?;
                stored += 1;
            }
        }
        Ok((stored, warnings))
    }
}
