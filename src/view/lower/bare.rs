//! The bare lower view: the workspaces' lower view (same namespace, same pin) for checkpoint
//! roots that hold no extended attribute anywhere, so it can answer GETXATTR and LISTXATTR
//! with ENOSYS. The kernel then marks the whole FUSE connection `no_getxattr`/`no_listxattr`
//! and stops asking: overlayfs otherwise sends one GETXATTR per lower file it looks up
//! (`trusted.overlay.metacopy`) and per lower directory (`trusted.overlay.origin`), which
//! nothing in FUSE caches (108k round trips, half the first `git status` of a 100k-file
//! repository).
//!
//! What it serves: `checkpoints/<id>/<root>` only once a walk of that root has found no
//! xattr on the root directory (its record) nor on any entry below it; otherwise the lookup
//! fails with [`REFUSED`] (not ENOENT, which the kernel would keep as a negative entry), and
//! the workspace stacks on the full lower view instead (`workspace::lower::lower_root`). A
//! root whose trees cannot be read is refused too (the full view then reports the bad object
//! where it is, as it always does). The result of each tree is remembered for the daemon's
//! life (a few dozen bytes per tree), so the next checkpoint of a branch, or a sibling
//! branch, costs only the trees it changed.
//!
//! Fail closed: should an entry with xattrs ever be met below a root the view serves, the
//! request fails with EIO and a log line; it is never shown without its xattrs.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::RootRecord;
use crate::store::tree::{Entry, EntryKind};
use crate::view::{lock, View};

/// The errno of a checkpoint root the bare view will not serve ("Wrong medium type"): an
/// error the kernel does not cache, unlike ENOENT, and that nothing else in the view answers.
pub const REFUSED: i32 = libc::EMEDIUMTYPE;

/// Threads loading trees for a verification walk (they mostly wait for the disk).
const WALK_THREADS: usize = 8;

/// Trees a walk holds decoded at a time.
const WALK_BATCH: usize = 1024;

/// Per tree id: whether it and everything below it is free of xattrs.
#[derive(Default)]
pub(in crate::view) struct Bare {
    known: Mutex<HashMap<ObjectId, bool>>,
}

/// Whether `e` is the bare view's refusal of a checkpoint root.
pub fn is_refusal(e: &Error) -> bool {
    e.errno() == REFUSED
}

fn refusal(what: String) -> Error {
    Error::io_op(what, std::io::Error::from_raw_os_error(REFUSED))
}

impl View {
    /// Makes this view the bare lower view (see the module doc). Call before mounting.
    pub fn serve_bare(&mut self) {
        self.bare = Some(Bare::default());
    }

    /// Whether this is the bare lower view (it answers GETXATTR and LISTXATTR with ENOSYS).
    pub fn is_bare(&self) -> bool {
        self.bare.is_some()
    }

    /// For the bare view: refuses ([`REFUSED`]) root `root` of checkpoint `id` unless neither
    /// its record nor any entry below has an xattr. Any other view: nothing to check.
    pub(in crate::view) fn check_bare_root(
        &self,
        id: &ObjectId,
        root: &str,
        rec: &RootRecord,
    ) -> Result<()> {
        let Some(bare) = &self.bare else {
            return Ok(());
        };
        let what = || format!("{}:{root}", id.short());
        if !rec.xattrs.is_empty() {
            log::debug!("{}: the root directory has xattrs: not served bare", what());
            return Err(refusal(format!("{}: has xattrs", what())));
        }
        let t = std::time::Instant::now();
        match self.tree_is_bare(bare, &rec.tree, &what) {
            Ok(true) => {
                log::debug!("{}: no xattrs (checked in {:?})", what(), t.elapsed());
                Ok(())
            }
            Ok(false) => {
                log::debug!("{}: has xattrs: not served bare", what());
                Err(refusal(format!("{}: has xattrs", what())))
            }
            Err(e) => {
                log::warn!("{}: not served bare: {e}", what());
                Err(refusal(format!("{}: {e}", what())))
            }
        }
    }

    /// Fail closed: for the bare view, EIO (and a log line) for an entry that has xattrs.
    pub(in crate::view) fn refuse_xattrs(&self, dir: crate::view::Ino, e: &Entry) -> Result<()> {
        if self.bare.is_none() || e.xattrs.is_empty() {
            return Ok(());
        }
        let path = self.path_with(dir, &e.name);
        log::error!("{path}: has xattrs, below a root the bare view serves; refusing it");
        Err(Error::Corrupt(format!(
            "{path}: has xattrs the bare lower view cannot show"
        )))
    }

    /// Whether tree `top` and everything below it is free of xattrs: a breadth-first walk of
    /// the trees not known yet, [`WALK_BATCH`] at a time loaded by [`WALK_THREADS`] threads, that stops at the first
    /// xattr. A clean walk records every tree it saw as clean; a dirty one, the tree holding
    /// the xattr and the trees above it as dirty.
    fn tree_is_bare(&self, bare: &Bare, top: &ObjectId, what: &dyn Fn() -> String) -> Result<bool> {
        if let Some(&b) = lock(&bare.known).get(top) {
            return Ok(b);
        }
        // Each tree seen, with the tree it was found in (for marking a dirty path).
        let mut parent: HashMap<ObjectId, Option<ObjectId>> = HashMap::new();
        parent.insert(*top, None);
        let mut queue = std::collections::VecDeque::from([*top]);
        while !queue.is_empty() {
            let frontier: Vec<ObjectId> = queue.drain(..queue.len().min(WALK_BATCH)).collect();
            let loaded = self.load_trees(&frontier, what)?;
            let mut known = lock(&bare.known);
            for (id, tree) in frontier.iter().zip(loaded) {
                let mut dirty = false;
                for e in &tree.entries {
                    if !e.xattrs.is_empty() {
                        dirty = true;
                        break;
                    }
                    if let EntryKind::Dir { tree: sub, .. } = &e.kind {
                        match known.get(sub) {
                            Some(true) => {}
                            Some(false) => {
                                dirty = true;
                                break;
                            }
                            None => {
                                if !parent.contains_key(sub) {
                                    parent.insert(*sub, Some(*id));
                                    queue.push_back(*sub);
                                }
                            }
                        }
                    }
                }
                if dirty {
                    let mut at = Some(*id);
                    while let Some(t) = at {
                        known.insert(t, false);
                        at = parent.get(&t).copied().flatten();
                    }
                    return Ok(false);
                }
            }
        }
        let mut known = lock(&bare.known);
        for id in parent.into_keys() {
            known.insert(id, true);
        }
        Ok(true)
    }

    /// Loads `ids` (in order) through the tree cache, several at a time.
    fn load_trees(
        &self,
        ids: &[ObjectId],
        what: &dyn Fn() -> String,
    ) -> Result<Vec<std::sync::Arc<crate::store::tree::Tree>>> {
        let what = what();
        let name = || what.clone();
        if ids.len() < 2 * WALK_THREADS {
            return ids.iter().map(|id| self.tree(id, &name)).collect();
        }
        let per = ids.len().div_ceil(WALK_THREADS);
        std::thread::scope(|s| {
            let parts: Vec<_> = ids
                .chunks(per)
                .map(|part| {
                    s.spawn(|| {
                        part.iter()
                            .map(|id| self.tree(id, &name))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(ids.len());
            for p in parts {
                match p.join() {
                    Ok(r) => out.extend(r?),
                    Err(_) => {
                        return Err(Error::Invalid(format!(
                            "{what}: a thread checking trees for xattrs panicked"
                        )))
                    }
                }
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::store::Store;
    use crate::view::tests::{capture_main, store_over};
    use crate::view::{Namespace, ViewOptions, ROOT_INO};

    /// `checkpoints/<id>/work` looked up in `v`.
    fn root_of(v: &View, id: &ObjectId) -> Result<crate::view::Node> {
        let cps = v.lookup(ROOT_INO, b"checkpoints")?;
        let c = v.lookup(cps.attr.ino, id.to_hex().as_bytes())?;
        v.lookup(c.attr.ino, b"work")
    }

    #[test]
    fn serves_only_roots_without_xattrs_and_fails_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::create_dir_all(src.join("c")).unwrap();
        fs::write(src.join("a/b/f"), b"x").unwrap();
        fs::write(src.join("c/g"), b"y").unwrap();
        let store = store_over(tmp.path(), &src);
        let clean = capture_main(&store);
        if xattr::set(src.join("a/b/f"), "user.x", b"1").is_err() {
            return; // no user xattrs on this filesystem
        }
        let dirty = capture_main(&store);
        let mut v = View::new(store, Namespace::Browse, &ViewOptions::default()).unwrap();
        v.serve_bare();
        assert!(root_of(&v, &clean).is_ok());
        let e = root_of(&v, &dirty).unwrap_err();
        assert!(is_refusal(&e), "{e}");
        let (root_tree, c_tree) = {
            let c = v.checkpoint(&dirty).unwrap();
            let t = c.roots["work"].tree;
            let top = v.tree(&t, &String::new).unwrap();
            let sub = top.entries.iter().find(|e| e.name == b"c").unwrap();
            let EntryKind::Dir { tree, .. } = sub.kind else {
                panic!("c is a directory")
            };
            (t, tree)
        };
        {
            let known = lock(&v.bare.as_ref().unwrap().known);
            // The root and the path down to the xattr are dirty; `c` is shared with the clean
            // checkpoint, already known clean.
            assert_eq!(known.get(&root_tree), Some(&false));
            assert_eq!(known.get(&c_tree), Some(&true));
        }
        // A full view shows the same root and its xattr.
        let full = View::new(
            Store::open(&tmp.path().join("store")).unwrap(),
            Namespace::Browse,
            &ViewOptions::default(),
        )
        .unwrap();
        let r = root_of(&full, &dirty).unwrap();
        let a = full.lookup(r.attr.ino, b"a").unwrap();
        let b = full.lookup(a.attr.ino, b"b").unwrap();
        let f = full.lookup(b.attr.ino, b"f").unwrap();
        assert_eq!(
            full.getxattr(f.attr.ino, b"user.x").unwrap(),
            Some(b"1".to_vec())
        );
        // Fail closed: were the bare view to serve that root, the entry with xattrs is EIO.
        lock(&v.bare.as_ref().unwrap().known).insert(root_tree, true);
        let r = root_of(&v, &dirty).unwrap();
        let a = v.lookup(r.attr.ino, b"a").unwrap();
        let b = v.lookup(a.attr.ino, b"b").unwrap();
        let e = v.lookup(b.attr.ino, b"f").unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "{e}");
        assert_eq!(
            v.dir_entry_unopened(b.attr.ino, 2).unwrap_err().errno(),
            libc::EIO
        );
    }
}
