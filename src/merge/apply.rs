//! Writing a merge into a mounted workspace, as `git merge` updates a work tree: the changes
//! from one tree (what the workspace holds) to another (the merge, or for `--abort` the
//! state before it) applied to the workspace's roots through their overlays.
//!
//! The workspace is the agent's: each root is opened at its mountpoint and everything below
//! is reached through held directory fds, no symlink followed (`crate::fs::safe`). A new
//! version of an entry is made under a temporary name beside it, created exclusively with its
//! metadata given through its fd (as `restore` materializes entries), then renamed over the
//! old one; a directory that only changed inside is entered, not rewritten. Subtrees whose
//! ids agree are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::history::diff::Side;
use crate::id::ObjectId;
use crate::meta::{apply_meta_fd, Meta};
use crate::progress::Progress;
use crate::store::tree::{check_depth, names_in, Entry, EntryKind};
use crate::store::Store;
use crate::transfer::restore::{materialize_entry, Links};

/// What applying changed in the workspace.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Applied {
    /// Entries written (a new directory counts once, with all it holds).
    pub written: u64,
    /// Entries removed (a directory counts once).
    pub removed: u64,
}

/// Checks that `to` has the same roots as `from`: a workspace cannot mount a root the merge
/// adds, nor drop one it removes.
///
/// # Errors
/// `Conflict` naming the root.
pub fn check_roots(from: &Side, to: &Side) -> Result<()> {
    let a: BTreeSet<&String> = from.roots.keys().collect();
    let b: BTreeSet<&String> = to.roots.keys().collect();
    if let Some(r) = a.symmetric_difference(&b).next() {
        return Err(Error::Conflict(format!(
            "the merge {} root {r}, which a mounted workspace cannot do: unmount the \
             workspace (`ckptfs umount`) and merge again",
            if b.contains(r) { "adds" } else { "removes" }
        )));
    }
    Ok(())
}

/// Applies the changes from `from` to `to` to the workspace roots mounted at `mounts`
/// (root name -> mountpoint). Call [`check_roots`] first.
///
/// # Errors
/// A tree or chunk that does not read; I/O in the workspace (an entry the agent swapped
/// meanwhile is named, never followed).
pub fn apply(
    store: &Store,
    from: &Side,
    to: &Side,
    mounts: &BTreeMap<String, PathBuf>,
) -> Result<Applied> {
    let mut w = Writer {
        store,
        from,
        to,
        links: Links::default(),
        done: Applied::default(),
        next: 0,
        progress: Progress::hidden(),
    };
    for (name, b) in &to.roots {
        let Some(a) = from.roots.get(name) else {
            continue;
        };
        if a == b {
            continue;
        }
        let mp = mounts.get(name).ok_or_else(|| {
            Error::Conflict(format!("root {name} is not mounted in this workspace"))
        })?;
        let dir = Dir::open(mp)?;
        w.dir(*a, *b, &dir, name)?;
    }
    Ok(w.done)
}

/// Writes the entries of `to` at `paths` (`ROOT/PATH`s) into the workspace, each replacing
/// what is there (or removing it, where `to` has nothing).
///
/// # Errors
/// A path whose directory the workspace no longer has; as [`apply`].
pub fn apply_paths(
    store: &Store,
    to: &Side,
    paths: &[String],
    mounts: &BTreeMap<String, PathBuf>,
) -> Result<Applied> {
    let mut w = Writer {
        store,
        from: to,
        to,
        links: Links::default(),
        done: Applied::default(),
        next: 0,
        progress: Progress::hidden(),
    };
    for path in paths {
        let mut parts: Vec<&str> = path.split('/').collect();
        let (Some(name), true) = (parts.pop(), !parts.is_empty()) else {
            return Err(Error::Invalid(format!("{path}: not a path in a root")));
        };
        let root = parts.remove(0);
        let mp = mounts.get(root).ok_or_else(|| {
            Error::Conflict(format!("root {root} is not mounted in this workspace"))
        })?;
        let mut at = Dir::open(mp)?;
        for d in parts {
            at = at.open_dir(d)?;
        }
        let name = OsStr::new(name);
        let here = at.stat(name)?.map(|st| st.is_dir());
        match to.entry_at(store, path)? {
            Some(y) => w.place(&at, name, here, &y)?,
            None if here.is_some() => {
                at.remove_all(name)?;
                w.done.removed += 1;
            }
            None => {}
        }
    }
    Ok(w.done)
}

struct Writer<'a> {
    store: &'a Store,
    from: &'a Side,
    to: &'a Side,
    links: Links,
    done: Applied,
    next: u64,
    progress: Progress,
}

/// Equal but for times and inode number.
fn same(a: &Entry, b: &Entry) -> bool {
    (&a.kind, a.mode, a.uid, a.gid, &a.xattrs, a.nlink)
        == (&b.kind, b.mode, b.uid, b.gid, &b.xattrs, b.nlink)
}

impl Writer<'_> {
    fn dir(&mut self, a: ObjectId, b: ObjectId, at: &Dir, path: &str) -> Result<()> {
        if a == b {
            return Ok(());
        }
        check_depth(path.split('/').count() - 1, || path.to_string())?;
        let ta = self.from.tree(self.store, &a)?;
        let tb = self.to.tree(self.store, &b)?;
        for name in names_in(&[&ta, &tb]) {
            let os = OsStr::from_bytes(name);
            let p = format!("{path}/{}", String::from_utf8_lossy(name));
            match (ta.get(name), tb.get(name)) {
                (None, None) => {}
                (Some(_), None) => {
                    at.remove_all(os)?;
                    self.done.removed += 1;
                }
                (Some(x), Some(y)) => match (&x.kind, &y.kind) {
                    (EntryKind::Dir { tree: tx, .. }, EntryKind::Dir { tree: ty, .. }) => {
                        let sub = at.open_dir(os)?;
                        self.dir(*tx, *ty, &sub, &p)?;
                        if (x.mode, x.uid, x.gid, &x.xattrs) != (y.mode, y.uid, y.gid, &y.xattrs)
                            || tx != ty
                        {
                            apply_meta_fd(&sub, sub.path(), &Meta::of_entry(y))?;
                        }
                    }
                    // Only the time: set, so the workspace records what `to` does.
                    _ if same(x, y) && x.mtime_ns != y.mtime_ns => {
                        at.set_times(os, y.mtime_ns, y.mtime_ns)?;
                    }
                    _ if same(x, y) => {}
                    _ => self.place(at, os, Some(x.is_dir()), y)?,
                },
                (None, Some(y)) => self.place(at, os, None, y)?,
            }
        }
        Ok(())
    }

    /// Writes `y` as `name` in `at`, replacing what the workspace holds there (`x_dir`:
    /// whether that is a directory; `None`: nothing).
    fn place(&mut self, at: &Dir, name: &OsStr, x_dir: Option<bool>, y: &Entry) -> Result<()> {
        self.next += 1;
        let tmp = OsString::from(format!(
            ".ckptfs-merge-{}-{}",
            std::process::id(),
            self.next
        ));
        let mut counts = (0, 0);
        let made = materialize_entry(
            self.store,
            y,
            at,
            &tmp,
            &mut counts,
            &self.progress,
            &mut self.links,
        );
        let moved = made.and_then(|()| {
            // A directory is neither replaced by a rename nor replaces anything.
            let replace = x_dir != Some(true) && !y.is_dir();
            if !replace && x_dir.is_some() {
                at.remove_all(name)?;
            }
            at.rename(&tmp, at, name, replace)
        });
        if let Err(e) = moved {
            if let Err(e2) = at.remove_all(&tmp) {
                log::warn!(
                    "could not remove {} ({e2})",
                    at.display_path(&tmp).display()
                );
            }
            return Err(e);
        }
        if y.nlink > 1 {
            self.links.renamed(y.ino, &tmp, name);
        }
        self.done.written += 1;
        Ok(())
    }
}
