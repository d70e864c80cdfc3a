//! Lookups through the cache's layers: the user's cache, then each
//! registered bundle in order, then the learned heuristics in the cache's
//! `learned/` folder. A file is read, parsed and checked again only when
//! it changed, which is what keeps a cache hit of `Fusion.heuristics`
//! within microseconds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tilefuse_ir::Fusion;
use tilefuse_params::{HeuristicParams, ParamsError, SchedulerKind};
use tilefuse_sched::DeviceInfo;

use crate::file_memo::FileMemo;
pub use crate::learned::{LEARNED_DIR, save_learned};
use crate::learned::{LearnedHeuristic, Match, Pick, learned_files};
use crate::warm::nearest;
use crate::{Bundle, Cache, CacheError, CacheKey, Entry, Family};

/// Bundles already read.
static BUNDLES: FileMemo<Bundle> = FileMemo::new();
/// Learned heuristics already read.
static LEARNED: FileMemo<LearnedHeuristic> = FileMemo::new();

/// Cache entries as [`served`] makes them.
static SERVED: FileMemo<Value> = FileMemo::new();

/// What a lookup found.
#[derive(Debug, Default)]
pub struct Found {
    /// The entry as [`served`] makes it, where a layer has one.
    pub entry: Option<Arc<Value>>,
    /// `"cache"`, or the path of the bundle that had it.
    pub layer: Option<String>,
    /// Files set aside or skipped on the way.
    pub warnings: Vec<String>,
}

/// `directory`, else the user's cache directory (`TILEFUSE_CACHE` or the
/// platform's cache directory).
pub fn directory(directory: Option<PathBuf>) -> Result<PathBuf, ParamsError> {
    directory
        .or_else(Cache::default_dir)
        .ok_or_else(|| ParamsError::new("cache", "no cache directory (set TILEFUSE_CACHE)"))
}

/// `key`'s winner from the cache in `dir`, else from the first of
/// `bundles` that has one; a bundle that does not load is a warning.
pub fn lookup(dir: &Path, key: &CacheKey, bundles: &[String]) -> Result<Found, ParamsError> {
    let cache = Cache::at(dir);
    let mut warnings = Vec::new();
    let entry = SERVED.get(&cache.path(key), || {
        let lookup = cache.get(key);
        warnings = lookup.warnings;
        lookup.entry.as_ref().map(served).transpose()
    })?;
    if entry.is_some() {
        let layer = Some("cache".into());
        return Ok(Found {
            entry,
            layer,
            warnings,
        });
    }
    for path in bundles {
        if let Some(b) = layer(path, &mut warnings)
            && let Some(e) = b.get(key)
        {
            let entry = Some(Arc::new(served(e)?));
            let layer = Some(path.clone());
            return Ok(Found {
                entry,
                layer,
                warnings,
            });
        }
    }
    Ok(Found {
        warnings,
        ..Found::default()
    })
}

/// The winners of `fusion`'s family (its structure at any sizes) for
/// `key`'s scheduler and device, in the cache in `dir` and in `bundles`,
/// nearest sizes first, at most `limit`: a tuning run's warm start;
/// warnings about files set aside.
pub fn family_winners(
    dir: &Path,
    key: &CacheKey,
    fusion: &Fusion,
    bundles: &[String],
    limit: usize,
) -> Result<(Vec<Entry>, Vec<String>), CacheError> {
    let (mut entries, mut warnings) = match dir.is_dir() {
        true => Cache::at(dir).entries()?,
        false => (Vec::new(), Vec::new()),
    };
    for path in bundles {
        if let Some(b) = layer(path, &mut warnings) {
            entries.extend(b.entries().cloned());
        }
    }
    let near = nearest(&entries, key, &Family::of(fusion), limit);
    Ok((near.into_iter().cloned().collect(), warnings))
}

/// The bundle at `path`, read again only when the file changed.
pub fn bundle(path: &Path) -> Result<Arc<Bundle>, CacheError> {
    let loaded = BUNDLES.get(path, || Bundle::load(path).map(Some))?;
    Ok(loaded.expect("a loaded bundle is kept"))
}

/// The bundle at `path` as a lookup layer; one that does not load is
/// skipped with a warning.
fn layer(path: &str, warnings: &mut Vec<String>) -> Option<Arc<Bundle>> {
    bundle(Path::new(path))
        .map_err(|e| warnings.push(format!("tilefuse bundle skipped: {e}")))
        .ok()
}

/// An entry as JSON, with its `id` (the digest of its key, its file's
/// name in the cache) and whether it is `stale` (of an older params
/// format or scheduler version).
pub fn entry_value(e: &Entry) -> Value {
    let mut value = serde_json::to_value(e).expect("an entry serializes");
    value["id"] = e.key.file_stem().into();
    value["stale"] = (!e.key.is_current()).into();
    value
}

/// An entry as a lookup serves it: [`entry_value`], its params complete
/// and checked (a file may have been edited).
fn served(e: &Entry) -> Result<Value, ParamsError> {
    let mut e = e.clone();
    e.params = HeuristicParams::from_value(e.params)?.to_value();
    Ok(entry_value(&e))
}

/// What a learned heuristic picked, and which: its file, and the device
/// it was learned on where that is another device of the same kind.
#[derive(Debug)]
pub struct Learned {
    pub pick: Pick,
    pub path: PathBuf,
    pub learned_on: Option<String>,
}

/// The pick of the first learned heuristic in `dir`'s `learned/` folder
/// (by file name), then in each of `bundles` (by name), learned for
/// `fusion`'s family and `scheduler` on `device`; else of the first of
/// them learned on another device of the same kind and capabilities. A
/// file or bundle that does not load, or a heuristic that does not pick,
/// is skipped with a warning. A bundle's heuristic is named
/// `BUNDLE#NAME`.
pub fn learned(
    dir: &Path,
    fusion: &Fusion,
    scheduler: SchedulerKind,
    device: &DeviceInfo,
    bundles: &[String],
) -> (Option<Learned>, Vec<String>) {
    let mut warnings = Vec::new();
    let skip = |path: &Path, why: String| {
        format!(
            "tilefuse learned heuristic {} skipped: {why}",
            path.display()
        )
    };
    let mut candidates: Vec<(PathBuf, Arc<LearnedHeuristic>)> = Vec::new();
    for path in learned_files(dir) {
        let loaded = LEARNED.get(&path, || {
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            LearnedHeuristic::parse(&text).map(Some)
        });
        match loaded {
            Ok(Some(h)) => candidates.push((path, h)),
            Ok(None) => {}
            Err(e) => warnings.push(skip(&path, e)),
        }
    }
    for b in bundles {
        if let Some(bundle) = layer(b, &mut warnings) {
            let named = |h: &LearnedHeuristic| PathBuf::from(format!("{b}#{}", h.name));
            candidates.extend(bundle.learned().map(|h| (named(h), Arc::new(h.clone()))));
        }
    }
    let mut alike = None;
    for (path, h) in candidates {
        let Some(how) = h.serves(fusion, scheduler, device) else {
            continue;
        };
        if how == Match::SameKind && alike.is_some() {
            continue;
        }
        let found = match h.pick(fusion) {
            Ok(pick) => Learned {
                pick,
                learned_on: (how == Match::SameKind).then(|| h.device.name.clone()),
                path,
            },
            Err(e) => {
                warnings.push(skip(&path, e));
                continue;
            }
        };
        match how {
            Match::Exact => return (Some(found), warnings),
            Match::SameKind => alike = Some(found),
        }
    }
    (alike, warnings)
}
