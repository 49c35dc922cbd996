//! Prefetch: what readers and walkers will ask for next is read ahead, so one disk read at a
//! time is not what they wait on. Chunk files and the first objects of sibling files get
//! `POSIX_FADV_WILLNEED` (the kernel cannot know that separate object files belong together);
//! subdirectory trees are decoded by background threads into the tree cache. Failures are
//! left for the real access to report.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{lock, EntryRef, OpenFile, View};
use crate::id::ObjectId;
use crate::store::tree::{EntryKind, Tree};

/// Chunks of an open file whose objects are prefetched (`POSIX_FADV_WILLNEED`) ahead of the
/// one being read: at 256 KiB average, 4 MiB of kernel readahead into the store's files.
pub(super) const CHUNKS_AHEAD: usize = 16;
/// The window a sequential reader of a lazily fetched file (a clone's) grows to, as the
/// kernel's readahead grows: doubling from [`CHUNKS_AHEAD`] each time the reader has read
/// through the last window and meets chunks still on the remote. At 256 KiB average, 32 MiB
/// queued ahead: enough for the remote source's fetchers to keep several large ranged GETs in
/// flight. A jump past what was prefetched starts it over.
const REMOTE_CHUNKS_AHEAD: usize = 128;
/// Files after the one being opened, in the same directory, whose first object is prefetched:
/// `grep -r`, `tar` and `cp -r` open a directory's files in listing order.
const SIBLINGS_AHEAD: u32 = 16;
/// Subdirectory trees prefetched when a directory is opened: walkers (`find`, `ls -R`,
/// `du`) open them next, and one disk read per directory in sequence is what makes a cold
/// walk slow.
const SUBDIRS_AHEAD: usize = 256;
/// Threads decoding subdirectory trees ahead of a walk. They mostly wait for the disk, so
/// more than the cores: cold `find` of the large room took 2.55-3.02 s with 2, 2.14-2.55 s
/// with 8.
pub(super) const TREE_PREFETCH_THREADS: usize = 8;
/// Directories whose sibling-prefetch position is remembered.
pub(super) const PREFETCH_DIRS: usize = 1024;

impl View {
    /// Asks the kernel to start reading an object's file (readahead across chunk files,
    /// which are separate files the kernel cannot know belong together). True when the
    /// object is not in the store (a clone's: queued for its remote's fetchers).
    fn advise(&self, id: &ObjectId) -> bool {
        // Not waiting for a remote: a clone's missing object is queued for its fetcher.
        match self.store.open_object_nowait(id) {
            Ok(Some((f, path, _))) => {
                use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
                if let Err(e) = posix_fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_WILLNEED) {
                    log::debug!("fadvise {}: {e}", path.display());
                }
                false
            }
            Ok(None) => {
                log::debug!("prefetch: object {id} missing");
                true
            }
            Err(e) => {
                log::debug!("prefetch: {e}");
                false
            }
        }
    }

    /// Loads the subdirectory trees of `tree` (and theirs) into the tree cache in the
    /// background, so a walker finds them decoded; falls back to kernel readahead when the
    /// prefetch threads are busy. Failures are left for the real access to report.
    pub(super) fn prefetch_subtrees(&self, tree: &Tree) {
        let subdirs: Vec<ObjectId> = tree
            .entries
            .iter()
            .filter_map(|e| match &e.kind {
                EntryKind::Dir { tree: sub, .. } => Some(*sub),
                _ => None,
            })
            .filter(|id| self.trees.get(id).is_none())
            .take(SUBDIRS_AHEAD)
            .collect();
        if subdirs.is_empty() {
            return;
        }
        let busy = self.tree_prefetches.fetch_add(1, Ordering::AcqRel);
        if busy >= TREE_PREFETCH_THREADS {
            self.tree_prefetches.fetch_sub(1, Ordering::AcqRel);
            for id in &subdirs {
                self.advise(id);
            }
            return;
        }
        let (store, trees, count) = (
            self.store.clone(),
            self.trees.clone(),
            self.tree_prefetches.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tree-prefetch".into())
            .spawn(move || {
                // Two levels, breadth first: the children, then the grandchildren.
                let load = |id: &ObjectId| -> Option<Arc<Tree>> {
                    if let Some(t) = trees.get(id) {
                        return Some(t);
                    }
                    let data = store.read_object(id).ok()?;
                    let t = Arc::new(Tree::decode(&data).ok()?);
                    trees.insert(*id, t.clone(), data.len() * 2 + 64);
                    Some(t)
                };
                let mut grandchildren = Vec::new();
                for id in &subdirs {
                    if let Some(t) = load(id) {
                        grandchildren.extend(t.entries.iter().filter_map(|e| match &e.kind {
                            EntryKind::Dir { tree: sub, .. } => Some(*sub),
                            _ => None,
                        }));
                    }
                }
                for id in grandchildren.iter().take(SUBDIRS_AHEAD) {
                    load(id);
                }
                count.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.tree_prefetches.fetch_sub(1, Ordering::AcqRel);
            log::debug!("tree prefetch thread: {e}");
        }
    }

    /// Prefetches the chunks after chunk `i` of an open file, once each; the window grows
    /// while they come from a remote (see [`REMOTE_CHUNKS_AHEAD`]).
    pub(super) fn prefetch_chunks(&self, f: &OpenFile, i: usize) {
        let mut window = f.window.load(Ordering::Relaxed);
        if i > f.advised.load(Ordering::Relaxed) && window > CHUNKS_AHEAD {
            // Not sequential: a jump past what was prefetched.
            window = CHUNKS_AHEAD;
            f.window.store(window, Ordering::Relaxed);
            f.grow_at.store(i, Ordering::Relaxed);
        }
        let want = (i + 1 + window).min(f.chunks.len());
        let done = f.advised.fetch_max(want, Ordering::Relaxed);
        let mut remote = false;
        for c in &f.chunks[done.max(i + 1).min(want)..want] {
            remote |= self.advise(&c.id);
        }
        if remote && window < REMOTE_CHUNKS_AHEAD && i >= f.grow_at.load(Ordering::Relaxed) {
            f.window
                .store((window * 2).min(REMOTE_CHUNKS_AHEAD), Ordering::Relaxed);
            f.grow_at.store(i + window, Ordering::Relaxed);
        }
    }

    /// Prefetches the first object of the files that follow entry `r` in its directory.
    pub(super) fn prefetch_siblings(&self, r: &EntryRef) {
        let start = r.index + 1;
        let end = start + SIBLINGS_AHEAD;
        {
            let mut map = lock(&self.sibling_prefetch);
            let done = map.get(&r.tree).copied().unwrap_or(0);
            // Only once the reader has consumed half of what was prefetched.
            if done > start + SIBLINGS_AHEAD / 2 {
                return;
            }
            map.put(r.tree, end);
        }
        let Some(tree) = self.trees.get(&r.tree) else {
            return;
        };
        for e in tree
            .entries
            .iter()
            .skip(start as usize)
            .take(SIBLINGS_AHEAD as usize)
        {
            if let EntryKind::File { chunks } = &e.kind {
                if let Some(c) = chunks.first() {
                    self.advise(&c.id);
                }
            }
        }
    }
}
