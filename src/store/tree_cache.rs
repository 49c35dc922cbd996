//! Decoded trees kept for the length of one operation that reads the same trees several times
//! (a merge diffs base->ours and base->theirs, walks the three trees, then counts what
//! changed). A tree object is immutable, so a decoded copy stays right for as long as it is
//! kept; reading one again costs an open, a read, SHA-256 and a decode.
//!
//! The cache is bounded by the entries it holds ([`TreeCache::DEFAULT_ENTRIES`]), least
//! recently used first out; a tree bigger than the whole budget is read but not kept.

use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use super::tree::Tree;
use super::Store;
use crate::error::Result;
use crate::id::ObjectId;

/// Cached trees with their entry counts, and the total.
struct Inner {
    trees: LruCache<ObjectId, Arc<Tree>>,
    entries: usize,
    hits: u64,
    misses: u64,
}

/// Trees read through this cache are decoded once while they stay in it.
pub struct TreeCache<'s> {
    store: &'s Store,
    inner: Mutex<Inner>,
    budget: usize,
}

impl<'s> TreeCache<'s> {
    /// Entries kept by [`TreeCache::new`]: about a million, a few hundred MB at most (an entry
    /// is its name, chunk list and xattrs), enough for both sides of a room of 500k files.
    pub const DEFAULT_ENTRIES: usize = 1 << 20;

    /// A cache of at most [`TreeCache::DEFAULT_ENTRIES`] entries.
    pub fn new(store: &'s Store) -> TreeCache<'s> {
        TreeCache::with_budget(store, TreeCache::DEFAULT_ENTRIES)
    }

    /// A cache holding at most `entries` entries (0: keeps nothing, every read goes to the
    /// store).
    pub fn with_budget(store: &'s Store, entries: usize) -> TreeCache<'s> {
        TreeCache {
            store,
            inner: Mutex::new(Inner {
                trees: LruCache::unbounded(),
                entries: 0,
                hits: 0,
                misses: 0,
            }),
            budget: entries,
        }
    }

    pub fn store(&self) -> &'s Store {
        self.store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The cache holds no invariant a panic elsewhere could break half-way.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tree `id`, from the cache or read (and checked) from the store.
    ///
    /// # Errors
    /// As [`Store::read_tree`].
    pub fn read(&self, id: &ObjectId) -> Result<Arc<Tree>> {
        {
            let mut g = self.lock();
            if let Some(t) = g.trees.get(id).cloned() {
                g.hits += 1;
                return Ok(t);
            }
            g.misses += 1;
        }
        let tree = Arc::new(self.store.read_tree(id)?);
        let n = tree.entries.len().max(1);
        if n <= self.budget {
            let mut g = self.lock();
            if g.trees.put(*id, tree.clone()).is_none() {
                g.entries += n;
            }
            while g.entries > self.budget {
                match g.trees.pop_lru() {
                    Some((_, t)) => g.entries -= t.entries.len().max(1),
                    None => break,
                }
            }
        }
        Ok(tree)
    }

    /// Reads answered from the cache and reads that went to the store.
    pub fn counts(&self) -> (u64, u64) {
        let g = self.lock();
        (g.hits, g.misses)
    }

    /// Trees held now.
    pub fn len(&self) -> usize {
        self.lock().trees.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tree::{Entry, EntryKind};

    fn tree(names: &[&str]) -> Tree {
        Tree {
            entries: names
                .iter()
                .map(|n| Entry {
                    name: n.as_bytes().to_vec(),
                    kind: EntryKind::Symlink {
                        target: b"t".to_vec(),
                    },
                    mode: 0o777,
                    uid: 0,
                    gid: 0,
                    mtime_ns: 0,
                    size: 1,
                    xattrs: Vec::new(),
                    ctime_ns: 0,
                    ino: 0,
                    nlink: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn a_tree_is_read_once_and_the_budget_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::temp_store(dir.path());
        let batch = crate::store::object::ObjectBatch::new(&store);
        let a = batch.ensure_tree(&tree(&["a", "b"])).unwrap();
        let b = batch.ensure_tree(&tree(&["c", "d", "e"])).unwrap();
        batch.commit().unwrap();

        let cache = TreeCache::with_budget(&store, 4);
        assert_eq!(cache.read(&a).unwrap().entries.len(), 2);
        assert_eq!(cache.read(&a).unwrap().entries.len(), 2);
        assert_eq!(cache.counts(), (1, 1));
        // 2 + 3 entries pass the budget of 4: the older tree goes.
        assert_eq!(cache.read(&b).unwrap().entries.len(), 3);
        assert_eq!(cache.len(), 1);
        cache.read(&a).unwrap();
        assert_eq!(cache.counts(), (1, 3));

        let none = TreeCache::with_budget(&store, 0);
        none.read(&a).unwrap();
        none.read(&a).unwrap();
        assert_eq!((none.counts(), none.len()), ((0, 2), 0));
    }
}
