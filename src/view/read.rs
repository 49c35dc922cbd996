//! Reading files: chunk maps (per handle, and per inode for reads without one), verified
//! chunk loads, byte ranges across chunk boundaries, the byte-budgeted LRU that caches trees
//! and chunks, and the materialized copies big files are passed through to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::{lock, materialize, Handle, Ino, Kind, View};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::tree::{Chunk, Entry, EntryKind};

/// Chunk maps of files kept for reads without open handles.
pub(super) const FILE_MAPS: usize = 4096;

/// An open file: its chunk list and where each chunk starts.
#[derive(Debug)]
pub struct OpenFile {
    pub ino: Ino,
    pub(super) chunks: Vec<Chunk>,
    pub(super) starts: Vec<u64>,
    pub(super) size: u64,
    /// Chunks below this index have been prefetched.
    pub(super) advised: AtomicUsize,
    /// Chunks prefetched ahead of the one read (grows for a lazily fetched file), and the
    /// chunk whose read may grow it next.
    pub(super) window: AtomicUsize,
    pub(super) grow_at: AtomicUsize,
}

/// Cached values with their charged size, and the total charged.
type Charged<V> = (LruCache<ObjectId, (V, usize)>, usize);

/// Values bigger than a whole budget kept at a time, outside it (see [`ByteLru`]).
pub(super) const OVERSIZED: usize = 2;

/// A byte-budgeted LRU of immutable values keyed by object id.
///
/// A value bigger than the whole budget (the tree of a directory of some 100k entries, with
/// the default budget) is kept too, in a slot of its own that holds the [`OVERSIZED`] most
/// recent ones: it must be decoded whole to answer any request about it, so dropping it
/// made every READDIRPLUS and LOOKUP in such a directory decode it again, and a listing
/// quadratic in its size (200k entries listed in 74 s). Memory: the few biggest values in
/// use, which each request held anyway while it ran.
pub(super) struct ByteLru<V: Clone> {
    inner: Mutex<Charged<V>>,
    oversized: Mutex<LruCache<ObjectId, V>>,
    budget: usize,
}

impl<V: Clone> ByteLru<V> {
    pub(super) fn new(budget: usize) -> Self {
        ByteLru {
            inner: Mutex::new((LruCache::unbounded(), 0)),
            oversized: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(OVERSIZED).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            budget,
        }
    }

    pub(super) fn get(&self, id: &ObjectId) -> Option<V> {
        if let Some((v, _)) = lock(&self.inner).0.get(id) {
            return Some(v.clone());
        }
        lock(&self.oversized).get(id).cloned()
    }

    pub(super) fn insert(&self, id: ObjectId, v: V, bytes: usize) {
        if bytes > self.budget {
            lock(&self.oversized).put(id, v);
            return;
        }
        let mut g = lock(&self.inner);
        let (cache, total) = &mut *g;
        if let Some((_, old)) = cache.put(id, (v, bytes)) {
            *total -= old;
        }
        *total += bytes;
        while *total > self.budget {
            match cache.pop_lru() {
                Some((_, (_, b))) => *total -= b,
                None => break,
            }
        }
    }

    pub(super) fn bytes(&self) -> usize {
        lock(&self.inner).1
    }
}

impl View {
    /// Bytes currently held by the tree and chunk caches.
    pub fn cache_usage(&self) -> (usize, usize) {
        (self.trees.bytes(), self.chunks.bytes())
    }

    /// Opens a file for reading; returns a handle for [`View::read`].
    ///
    /// # Errors
    /// EISDIR for a directory, EINVAL-mapped for other non-files.
    pub fn open(&self, ino: Ino) -> Result<u64> {
        let f = self.load_file(ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Handle::File(f));
        Ok(fh)
    }

    /// The chunk map of a file, from the per-inode cache (for reads without an open handle:
    /// the adapter lets the kernel skip OPEN and RELEASE).
    pub(super) fn file_by_ino(&self, ino: Ino) -> Result<Arc<OpenFile>> {
        if let Some(f) = lock(&self.files).get(&ino) {
            return Ok(f.clone());
        }
        let f = self.load_file(ino)?;
        lock(&self.files).put(ino, f.clone());
        Ok(f)
    }

    fn load_file(&self, ino: Ino) -> Result<Arc<OpenFile>> {
        let node = self.node(ino)?;
        if node.attr.kind == Kind::Dir {
            return Err(Error::io_op(
                self.path_of(ino),
                std::io::Error::from_raw_os_error(libc::EISDIR),
            ));
        }
        let chunks = match self.stored_entry(&node)? {
            Some(Entry {
                kind: EntryKind::File { chunks },
                ..
            }) => {
                if let Some(r) = node.entry {
                    self.prefetch_siblings(&r);
                }
                chunks
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "{} is not a regular file",
                    self.path_of(ino)
                )))
            }
        };
        let mut starts = Vec::with_capacity(chunks.len());
        let mut pos = 0u64;
        for c in &chunks {
            starts.push(pos);
            pos += u64::from(c.len);
        }
        Ok(Arc::new(OpenFile {
            ino,
            chunks,
            starts,
            size: pos,
            advised: AtomicUsize::new(0),
            window: AtomicUsize::new(super::prefetch::CHUNKS_AHEAD),
            grow_at: AtomicUsize::new(0),
        }))
    }

    pub(super) fn open_file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Error::io_op(
                format!("file handle {fh}"),
                std::io::Error::from_raw_os_error(libc::EBADF),
            )),
        }
    }

    /// Loads a verified chunk (cached).
    fn chunk(&self, f: &OpenFile, c: &Chunk) -> Result<Arc<Vec<u8>>> {
        if let Some(d) = self.chunks.get(&c.id) {
            return Ok(d);
        }
        let data = Arc::new(self.load_chunk(f, c)?);
        self.chunks.insert(c.id, data.clone(), data.len() + 64);
        Ok(data)
    }

    /// Reads and checks one chunk (not cached).
    fn load_chunk(&self, f: &OpenFile, c: &Chunk) -> Result<Vec<u8>> {
        // `read_chunk` holds the object to the tree's length before it allocates anything and
        // checks its hash: a corrupt or hostile object is EIO, never wrong bytes.
        self.store.read_chunk(c).map_err(|e| {
            let path = self.path_of(f.ino);
            log::error!("{path}: object {}: {e}", c.id);
            Error::Corrupt(format!("{path}: object {}: {e}", c.id))
        })
    }

    /// Reads up to `size` bytes at `offset` and passes them to `f` (a slice of the cached
    /// chunk when the range lies in one chunk, so the common case copies once).
    pub fn read_with<R>(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let file = self.open_file(fh)?;
        self.read_file_with(&file, offset, size, f)
    }

    /// As [`View::read_with`], for a file read without an open handle.
    pub fn read_ino_with<R>(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let file = self.file_by_ino(ino)?;
        self.read_file_with(&file, offset, size, f)
    }

    fn read_file_with<R>(
        &self,
        file: &Arc<OpenFile>,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        if offset >= file.size || size == 0 {
            return Ok(f(&[]));
        }
        let end = file.size.min(offset + u64::from(size));
        let mut i = file.starts.partition_point(|s| *s <= offset) - 1;
        if file.chunks.len() > 1 {
            self.prefetch_chunks(file, i);
        }
        let first_end = file.starts[i] + u64::from(file.chunks[i].len);
        if end <= first_end {
            let data = self.chunk(file, &file.chunks[i])?;
            let a = (offset - file.starts[i]) as usize;
            let b = (end - file.starts[i]) as usize;
            return Ok(f(&data[a..b]));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let data = self.chunk(file, &file.chunks[i])?;
            let a = (pos - file.starts[i]) as usize;
            let b = ((end - file.starts[i]) as usize).min(data.len());
            out.extend_from_slice(&data[a..b]);
            pos = file.starts[i] + b as u64;
            i += 1;
        }
        Ok(f(&out))
    }

    /// Reads up to `size` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.read_with(fh, offset, size, <[u8]>::to_vec)
    }

    /// Size of a regular file, from its chunk map.
    ///
    /// # Errors
    /// As for reading: not a file, a missing or corrupt tree.
    pub fn file_size(&self, ino: Ino) -> Result<u64> {
        self.file_by_ino(ino).map(|f| f.size)
    }

    /// Whether every chunk of a file is in the store (always, but for a clone whose objects
    /// come from a remote on first read; see `crate::remote::cache`).
    pub fn chunks_local(&self, ino: Ino) -> bool {
        if self.store.object_source().is_none() {
            return true;
        }
        self.file_by_ino(ino)
            .is_ok_and(|f| f.chunks.iter().all(|c| self.store.has_object(&c.id)))
    }

    /// Whether a file of this size is worth a materialized copy (big enough, fits the budget).
    pub fn wants_copy(&self, size: u64) -> bool {
        size >= materialize::PASSTHROUGH_MIN_BYTES && self.copies.accepts(size)
    }

    /// A read-only, complete copy of a file in `STORE/cache/materialized/` (unnamed), built
    /// from its hash-checked chunks on first use and kept in a disk-budgeted LRU.
    ///
    /// # Errors
    /// A missing or corrupt chunk (logged with path and object, as for reads); ENOSPC.
    pub fn materialized(&self, ino: Ino) -> Result<Arc<std::fs::File>> {
        let file = self.file_by_ino(ino)?;
        let what = self.path_of(ino);
        let io_err = |e| Error::io_op(format!("{what}: materializing into cache/"), e);
        self.copies.get_or_build(ino, file.size, io_err, |out| {
            for (i, c) in file.chunks.iter().enumerate() {
                if file.chunks.len() > 1 {
                    self.prefetch_chunks(&file, i);
                }
                let data = match self.chunks.get(&c.id) {
                    Some(d) => d,
                    None => Arc::new(self.load_chunk(&file, c)?),
                };
                std::os::unix::fs::FileExt::write_all_at(out, &data, file.starts[i])
                    .map_err(io_err)?;
            }
            Ok::<(), Error>(())
        })
    }

    /// Whether big files should be materialized for passthrough at all (a non-zero budget).
    pub fn passthrough_wanted(&self) -> bool {
        self.copies.accepts(materialize::PASSTHROUGH_MIN_BYTES)
    }

    /// Bytes held by materialized copies.
    pub fn copies_bytes(&self) -> u64 {
        self.copies.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_over_the_whole_budget_are_kept_a_few_at_a_time() {
        let lru: ByteLru<u32> = ByteLru::new(100);
        let ids: Vec<ObjectId> = (0u8..4).map(|i| ObjectId::of(&[i])).collect();
        lru.insert(ids[0], 0, 1000);
        assert_eq!(lru.get(&ids[0]), Some(0));
        lru.insert(ids[1], 1, 60);
        lru.insert(ids[2], 2, 60);
        // The budgeted ones evict each other; the oversized one stays.
        assert_eq!(lru.get(&ids[1]), None);
        assert_eq!(lru.get(&ids[0]), Some(0));
        for (i, id) in ids.iter().enumerate().skip(1) {
            lru.insert(*id, i as u32, 1000);
        }
        assert_eq!(
            lru.get(&ids[0]),
            None,
            "at most {OVERSIZED} oversized values"
        );
        assert_eq!(lru.get(&ids[3]), Some(3));
    }
}
