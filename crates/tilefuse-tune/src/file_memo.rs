//! What was read from files, kept per path while the file is unchanged:
//! a bundle or a cache entry read once serves every later lookup.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Who a file is: tilefuse's writes rename a new file into place (a new
/// inode), and an edit in place changes the modification time or length
/// (only one of the same length within the filesystem's clock tick of the
/// last could go unseen).
type FileId = (u64, Option<SystemTime>, u64);

fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.modified().ok(), m.len()))
}

/// Values by the path of the file each was made from, with the file's
/// identity then.
type Kept<T> = HashMap<PathBuf, (FileId, Arc<T>)>;

/// Values made from files, kept while their files are unchanged.
pub struct FileMemo<T>(Mutex<Option<Kept<T>>>);

impl<T> FileMemo<T> {
    pub const fn new() -> Self {
        FileMemo(Mutex::new(None))
    }

    /// The value kept for `path` while its file is the one it was made
    /// from; else `load()`'s, kept when it is `Some` (the file is read
    /// without holding the lock).
    pub fn get<E>(
        &self,
        path: &Path,
        load: impl FnOnce() -> Result<Option<T>, E>,
    ) -> Result<Option<Arc<T>>, E> {
        let id = file_id(path);
        let kept = id.and_then(|id| {
            self.with(|memo| {
                memo.get(path)
                    .filter(|(seen, _)| *seen == id)
                    .map(|(_, v)| v.clone())
            })
        });
        if kept.is_some() {
            return Ok(kept);
        }
        let Some(value) = load()?.map(Arc::new) else {
            return Ok(None);
        };
        // A file replaced since `id` was taken is kept under the old
        // identity: the next lookup sees a new one and reads it again.
        if let Some(id) = id {
            self.with(|memo| memo.insert(path.to_owned(), (id, value.clone())));
        }
        Ok(Some(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Kept<T>) -> R) -> R {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(memo.get_or_insert_default())
    }
}
