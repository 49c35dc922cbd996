//! Materialized files: whole copies of big files, assembled from their verified chunks into
//! anonymous files under `STORE/cache/`, so the FUSE adapter can hand the kernel a real backing
//! file (passthrough) and warm reads run at the speed of the local filesystem's page cache.
//!
//! Each copy is an `O_TMPFILE` (unnamed) file: it never appears in the directory, needs no
//! fsync, cannot be half-written after a crash (it vanishes with the last descriptor, so a
//! daemon killed by SIGKILL leaves nothing behind), and its space returns to the filesystem when
//! the LRU drops it and the kernel closes the last passthrough open. The cache is bounded by a
//! byte budget per daemon and rebuilt on demand: it only ever holds bytes that were hash-checked
//! on their way in.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use crate::view::Ino;

/// Files at least this big are served by passthrough from a materialized copy; smaller files
/// stay in the FUSE page cache (`KEEP_CACHE`), where one chunk is the whole file.
pub const PASSTHROUGH_MIN_BYTES: u64 = 1 << 20;

/// Default disk budget of one daemon's materialized files.
pub const DEFAULT_FILE_CACHE_BYTES: u64 = 4 << 30;

/// Copies currently cached, by inode, with the bytes they occupy, and the total.
type Copies = (LruCache<Ino, (Arc<File>, u64)>, u64);

/// A byte-budgeted LRU of materialized files, keyed by inode.
pub struct FileCache {
    dir: PathBuf,
    budget: u64,
    copies: Mutex<Copies>,
    /// One lock per inode being materialized, so concurrent opens build it once.
    building: Mutex<HashMap<Ino, Arc<Mutex<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FileCache {
    /// A cache writing its copies into `dir` (created on first use), holding at most `budget`
    /// bytes of copies.
    pub fn new(dir: PathBuf, budget: u64) -> FileCache {
        FileCache {
            dir,
            budget,
            copies: Mutex::new((LruCache::unbounded(), 0)),
            building: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a file of `size` bytes would be kept (fits the budget at all).
    pub fn accepts(&self, size: u64) -> bool {
        size <= self.budget
    }

    /// Bytes held by cached copies.
    pub fn bytes(&self) -> u64 {
        lock(&self.copies).1
    }

    /// The read-only copy of `ino`, built with `fill` (which writes the whole content through
    /// the given file at its offsets) when it is not cached.
    ///
    /// # Errors
    /// Whatever `fill` returns; creating the anonymous file (e.g. ENOSPC).
    pub fn get_or_build<E>(
        &self,
        ino: Ino,
        size: u64,
        io_err: impl Fn(io::Error) -> E,
        fill: impl FnOnce(&File) -> Result<(), E>,
    ) -> Result<Arc<File>, E> {
        if let Some((f, _)) = lock(&self.copies).0.get(&ino) {
            return Ok(f.clone());
        }
        let gate = lock(&self.building).entry(ino).or_default().clone();
        let result = {
            let _building = lock(&gate);
            // Someone else may have finished it while we waited.
            let cached = lock(&self.copies).0.get(&ino).map(|(f, _)| f.clone());
            match cached {
                Some(f) => Ok(f),
                None => self.build(size, io_err, fill).map(|f| {
                    let f = Arc::new(f);
                    self.insert(ino, f.clone(), size);
                    f
                }),
            }
        };
        lock(&self.building).remove(&ino);
        result
    }

    fn build<E>(
        &self,
        size: u64,
        io_err: impl Fn(io::Error) -> E,
        fill: impl FnOnce(&File) -> Result<(), E>,
    ) -> Result<File, E> {
        std::fs::create_dir_all(&self.dir).map_err(&io_err)?;
        let rw = anonymous_file(&self.dir).map_err(&io_err)?;
        rw.set_len(size).map_err(&io_err)?;
        fill(&rw)?;
        // The kernel reads through a descriptor that cannot write.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&rw);
        File::open(format!("/proc/self/fd/{fd}")).map_err(io_err)
    }

    fn insert(&self, ino: Ino, f: Arc<File>, size: u64) {
        let mut g = lock(&self.copies);
        let (copies, total) = &mut *g;
        if let Some((_, old)) = copies.put(ino, (f, size)) {
            *total -= old;
        }
        *total += size;
        while *total > self.budget {
            match copies.pop_lru() {
                Some((_, (_, b))) => *total -= b,
                None => break,
            }
        }
    }
}

/// An unnamed file in `dir` (`O_TMPFILE`), or, where the filesystem lacks it, a named temp
/// file unlinked at once.
fn anonymous_file(dir: &Path) -> io::Result<File> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
    {
        Ok(f) => Ok(f),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
            ) =>
        {
            let name = dir.join(format!(
                ".materialize-{}-{}",
                std::process::id(),
                crate::text::time::now_ns()
            ));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&name)?;
            std::fs::remove_file(&name)?;
            Ok(f)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileExt;

    #[test]
    fn builds_once_and_evicts_over_budget() {
        let dir = tempfile_dir();
        let cache = FileCache::new(dir.clone(), 10);
        let mut calls = 0;
        let a = cache
            .get_or_build(
                1,
                6,
                |e| e,
                |f| {
                    calls += 1;
                    f.write_all_at(b"abcdef", 0)
                },
            )
            .unwrap();
        let again = cache
            .get_or_build(1, 6, |e| e, |_| panic!("rebuilt"))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(calls, 1);
        let mut s = String::new();
        (&*a).read_to_string(&mut s).unwrap();
        assert_eq!(s, "abcdef");
        // Nothing named appears in the directory.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        cache
            .get_or_build(2, 6, |e| e, |f| f.write_all_at(b"ghijkl", 0))
            .unwrap();
        assert_eq!(cache.bytes(), 6, "inode 1 evicted to fit the budget");
        // The evicted copy stays readable through descriptors still held.
        let mut buf = vec![0u8; 6];
        a.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, b"abcdef");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ckptfs-materialize-{}-{}",
            std::process::id(),
            crate::text::time::now_ns()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
