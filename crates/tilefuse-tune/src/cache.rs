//! The heuristic cache: one JSON document per key in a directory (the
//! user's cache directory, or `TILEFUSE_CACHE`). Nothing a user saved is
//! lost or corrupted by a crash or a concurrent writer:
//!
//! - an entry is written to a temporary file, synced, then renamed over
//!   the old one, so a reader sees the old entry or the new, whole;
//! - writers of one key take its lock file in turn, and the faster
//!   measurement stays (a slower one is dropped);
//! - an entry that does not parse is moved aside (`*.corrupt`) with a
//!   warning, never served and never fatal.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::key::{CacheKey, Family};

/// Where an entry's measurement was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Tuned on this machine.
    #[default]
    Measured,
    /// Merged in from a bundle: served, but re-checked before it is trusted
    /// against a local measurement.
    Imported,
}

/// One cached winner. Fields added later take defaults, so older entries
/// keep loading.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub key: CacheKey,
    /// The winning params (`HeuristicParams` as JSON, with its tag).
    pub params: serde_json::Value,
    /// Median seconds of the winner.
    pub best_time: f64,
    /// The winner's seconds in each round of the tuner's final run and of
    /// its confirmation (none in entries older than this field).
    #[serde(default)]
    pub samples: Vec<f64>,
    /// Median seconds of the default heuristic's params.
    #[serde(default)]
    pub default_time: Option<f64>,
    #[serde(default)]
    pub trials: usize,
    #[serde(default)]
    pub strategy: String,
    /// Seed heuristics that applied.
    #[serde(default)]
    pub heuristics: Vec<String>,
    #[serde(default)]
    pub tilefuse_version: String,
    /// Seconds since the Unix epoch when it was measured.
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub origin: Origin,
    /// The fusions it is a first guess for (none, in entries older than
    /// warm start).
    #[serde(default)]
    pub family: Family,
    /// What the fusion is, for people listing the cache
    /// (`Fusion::signature`; empty in entries older than this field).
    #[serde(default)]
    pub signature: String,
    /// The space it was tuned over (`space::digest`; empty in entries
    /// older than this field).
    #[serde(default)]
    pub space: String,
}

impl Entry {
    /// A fresh entry measured here, now.
    pub fn measured(key: CacheKey, params: serde_json::Value, best_time: f64) -> Entry {
        Entry {
            key,
            params,
            best_time,
            samples: Vec::new(),
            default_time: None,
            trials: 0,
            strategy: String::new(),
            heuristics: Vec::new(),
            tilefuse_version: env!("CARGO_PKG_VERSION").to_owned(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            origin: Origin::Measured,
            family: Family::default(),
            signature: String::new(),
            space: String::new(),
        }
    }

    /// Whether this entry should replace `old` of the same key: a
    /// measurement made here beats an imported one whatever their times
    /// (times from another machine do not compare), else the faster wins.
    pub(crate) fn replaces(&self, old: &Entry) -> bool {
        match (self.origin, old.origin) {
            (Origin::Measured, Origin::Imported) => true,
            (Origin::Imported, Origin::Measured) => false,
            _ => self.best_time < old.best_time,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What a lookup found, with warnings about entries set aside.
#[derive(Debug, Default)]
pub struct Lookup {
    pub entry: Option<Entry>,
    pub warnings: Vec<String>,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The entry is stored.
    Stored,
    /// A faster measurement of the same key (or one measured here, when
    /// the new one is imported) was there already and stays.
    KeptFaster,
}

/// How old a temporary file must be for [`Cache::prune`] to take its
/// writer for dead: writing an entry takes milliseconds.
const DEAD_WRITER: Duration = Duration::from_secs(3600);

/// Whether `path` was last modified over `age` ago.
fn older_than(path: &Path, age: Duration) -> bool {
    (fs::metadata(path).and_then(|m| m.modified()))
        .is_ok_and(|t| t.elapsed().is_ok_and(|e| e > age))
}

/// A cache directory.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// `TILEFUSE_CACHE`, else the user's cache directory's `tilefuse`.
    pub fn default_dir() -> Option<PathBuf> {
        match std::env::var_os("TILEFUSE_CACHE") {
            Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
            _ => dirs::cache_dir().map(|d| d.join("tilefuse")),
        }
    }

    /// The cache in `dir`, created if missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Cache, CacheError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        Ok(Cache { dir })
    }

    /// The cache in `dir` for reading: a missing directory is an empty
    /// cache, and nothing is created (a lookup costs no `mkdir`).
    pub fn at(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `key`'s entry.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.json", key.file_stem()))
    }

    /// The entry of `key`, if one is stored and whole.
    pub fn get(&self, key: &CacheKey) -> Lookup {
        let mut lookup = Lookup::default();
        lookup.entry = self
            .read(&self.path(key), &mut lookup.warnings)
            .filter(|e| e.key == *key);
        lookup
    }

    /// Reads an entry file; one that does not parse is set aside with a
    /// warning.
    fn read(&self, path: &Path, warnings: &mut Vec<String>) -> Option<Entry> {
        let text = fs::read_to_string(path).ok()?;
        match serde_json::from_str::<Entry>(&text) {
            Ok(entry) => Some(entry),
            Err(e) => {
                let aside = path.with_extension(format!("corrupt-{}", std::process::id()));
                let moved = fs::rename(path, &aside).is_ok();
                warnings.push(format!(
                    "tilefuse cache: {} is not a valid entry ({e}); {}",
                    path.display(),
                    if moved {
                        format!("moved aside to {}", aside.display())
                    } else {
                        "ignored".to_owned()
                    }
                ));
                None
            }
        }
    }

    /// Stores `entry` unless a faster measurement of its key is there (or
    /// one measured here, when `entry` is imported).
    pub fn put(&self, entry: &Entry) -> Result<(Written, Vec<String>), CacheError> {
        let path = self.path(&entry.key);
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            entry.key.file_stem(),
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let text = serde_json::to_string_pretty(entry).expect("an entry serializes");
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(text.as_bytes()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        drop(file);
        let lock_path = path.with_extension("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        let mut warnings = Vec::new();
        let existing = self.read(&path, &mut warnings);
        let written = match existing {
            Some(old) if old.key == entry.key && !entry.replaces(&old) => {
                let _ = fs::remove_file(&tmp);
                Written::KeptFaster
            }
            _ => {
                fs::rename(&tmp, &path).map_err(io(&path))?;
                // The rename itself is durable once the directory is synced.
                File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io(&self.dir))?;
                Written::Stored
            }
        };
        lock.unlock().map_err(io(&lock_path))?;
        Ok((written, warnings))
    }

    /// Every file of the cache directory, with its extension.
    fn files(&self) -> Result<Vec<(PathBuf, String)>, CacheError> {
        let mut out = Vec::new();
        for item in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let path = item.map_err(io(&self.dir))?.path();
            let ext = path.extension().map(|e| e.to_string_lossy().into_owned());
            out.push((path, ext.unwrap_or_default()));
        }
        Ok(out)
    }

    /// Every whole entry, and warnings about those set aside.
    pub fn entries(&self) -> Result<(Vec<Entry>, Vec<String>), CacheError> {
        let mut warnings = Vec::new();
        let mut out = Vec::new();
        for (path, ext) in self.files()? {
            if ext == "json" {
                out.extend(self.read(&path, &mut warnings));
            }
        }
        out.sort_by_cached_key(|e| e.key.file_stem());
        Ok((out, warnings))
    }

    /// Removes what can never be served: entries of an older params format
    /// or scheduler/codegen version ([`CacheKey::is_current`]) with their
    /// lock files, files set aside as corrupt, and temporary files of
    /// writers that died (an hour old: a live writer's is younger).
    /// Returns how many entries it removed.
    pub fn prune(&self) -> Result<usize, CacheError> {
        let mut n = 0;
        for (path, ext) in self.files()? {
            let stale = ext == "json"
                && (self.read(&path, &mut Vec::new())).is_some_and(|e| !e.key.is_current());
            let dead = ext == "tmp" && older_than(&path, DEAD_WRITER);
            if stale {
                n += 1;
                let _ = fs::remove_file(path.with_extension("lock"));
            }
            if stale || dead || ext.starts_with("corrupt-") {
                fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        Ok(n)
    }

    /// Removes every entry (and lock and temporary file); returns how many
    /// entries there were.
    pub fn clear(&self) -> Result<usize, CacheError> {
        let mut n = 0;
        for (path, ext) in self.files()? {
            if matches!(ext.as_str(), "json" | "lock" | "tmp") {
                n += usize::from(ext == "json");
                fs::remove_file(&path).map_err(io(&path))?;
            }
        }
        Ok(n)
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
