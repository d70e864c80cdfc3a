//! Bundles: a whole cache in one JSON file, to ship with a package, share
//! between machines or merge. A bundle is a read-only layer under the
//! user's cache (lookups fall through to it), or is imported into a cache
//! (its entries marked [`Origin::Imported`]: served, but never preferred
//! to a winner measured here).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cache::{Cache, CacheError, Entry, Origin, Written, io};
use crate::key::CacheKey;

/// What a bundle file says it is.
const FORMAT: &str = "tilefuse-cache-bundle";
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct File1 {
    format: String,
    version: u32,
    entries: Vec<Entry>,
}

/// Entries by key, at most one per key.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    entries: BTreeMap<String, Entry>,
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
        Ok(bundle)
    }

    /// Writes the bundle atomically (temporary file, sync, rename).
    pub fn save(&self, path: &Path) -> Result<(), CacheError> {
        let file = File1 {
            format: FORMAT.to_owned(),
            version: VERSION,
            entries: self.entries.values().cloned().collect(),
        };
        let text = serde_json::to_string_pretty(&file).expect("a bundle serializes");
        write_atomically(path, &text)
    }

    /// Every entry of `cache`.
    pub fn export(cache: &Cache) -> Result<(Bundle, Vec<String>), CacheError> {
        let (entries, warnings) = cache.entries()?;
        let mut bundle = Bundle::default();
        for e in entries {
            bundle.add(e);
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

    /// Every entry of `other` added (the faster per key).
    pub fn merge(&mut self, other: Bundle) {
        for e in other.entries.into_values() {
            self.add(e);
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<&Entry> {
        self.entries.get(&key.file_stem()).filter(|e| e.key == *key)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Stores every entry in `cache` as imported; how many were stored
    /// (an entry measured there, or a faster one, stays).
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
        Ok((stored, warnings))
    }
}

/// Writes `text` to `path` atomically: a temporary file beside it,
/// synced, then renamed over it, so that a reader or a crash never sees
/// half a file.
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), CacheError> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}
