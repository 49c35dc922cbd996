//! `diff`: what changed between two checkpoints, root by root. Subtrees with equal ids are
//! skipped without being read.

use serde::Serialize;

use crate::error::Result;
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::{Entry, EntryKind, Tree};
use crate::store::Store;

/// One difference.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Change {
    /// "added", "removed", "modified", "type", "mode" (mode/owner), "mtime", "xattr".
    pub change: String,
    /// `ROOT/PATH`.
    pub path: String,
}

/// Differences from `a` to `b`.
pub fn diff(store: &Store, a: &Checkpoint, b: &Checkpoint) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    let mut names: Vec<&String> = a.roots.keys().chain(b.roots.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        match (a.roots.get(name), b.roots.get(name)) {
            (Some(x), Some(y)) => diff_trees(store, Some(x.tree), Some(y.tree), name, &mut out)?,
            (Some(x), None) => diff_trees(store, Some(x.tree), None, name, &mut out)?,
            (None, Some(y)) => diff_trees(store, None, Some(y.tree), name, &mut out)?,
            (None, None) => {}
        }
    }
    Ok(out)
}

fn load(store: &Store, id: Option<ObjectId>) -> Result<Tree> {
    match id {
        Some(id) => store.read_tree(&id),
        None => Ok(Tree::default()),
    }
}

fn diff_trees(
    store: &Store,
    a: Option<ObjectId>,
    b: Option<ObjectId>,
    prefix: &str,
    out: &mut Vec<Change>,
) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let (ta, tb) = (load(store, a)?, load(store, b)?);
    let (mut i, mut j) = (0, 0);
    while i < ta.entries.len() || j < tb.entries.len() {
        let ea = ta.entries.get(i);
        let eb = tb.entries.get(j);
        let ord = match (ea, eb) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match (ord, ea, eb) {
            (std::cmp::Ordering::Less, Some(x), _) => {
                one_side(store, x, prefix, "removed", out)?;
                i += 1;
            }
            (std::cmp::Ordering::Greater, _, Some(y)) => {
                one_side(store, y, prefix, "added", out)?;
                j += 1;
            }
            (_, Some(x), Some(y)) => {
                both(store, x, y, prefix, out)?;
                i += 1;
                j += 1;
            }
            _ => break,
        }
    }
    Ok(())
}

fn path_of(prefix: &str, e: &Entry) -> String {
    format!("{prefix}/{}", String::from_utf8_lossy(&e.name))
}

fn one_side(
    store: &Store,
    e: &Entry,
    prefix: &str,
    what: &str,
    out: &mut Vec<Change>,
) -> Result<()> {
    let p = path_of(prefix, e);
    out.push(Change {
        change: what.into(),
        path: p.clone(),
    });
    if let EntryKind::Dir { tree, .. } = &e.kind {
        let (a, b) = if what == "removed" {
            (Some(*tree), None)
        } else {
            (None, Some(*tree))
        };
        diff_trees(store, a, b, &p, out)?;
    }
    Ok(())
}

fn both(store: &Store, x: &Entry, y: &Entry, prefix: &str, out: &mut Vec<Change>) -> Result<()> {
    let p = path_of(prefix, x);
    let mut push = |c: &str| {
        out.push(Change {
            change: c.into(),
            path: p.clone(),
        })
    };
    match (&x.kind, &y.kind) {
        (EntryKind::Dir { tree: a, .. }, EntryKind::Dir { tree: b, .. }) => {
            if (x.mode, x.uid, x.gid) != (y.mode, y.uid, y.gid) {
                push("mode");
            }
            if x.xattrs != y.xattrs {
                push("xattr");
            }
            let (a, b) = (*a, *b);
            return diff_trees(store, Some(a), Some(b), &p, out);
        }
        (EntryKind::File { chunks: a }, EntryKind::File { chunks: b }) => {
            if a != b {
                push("modified");
            } else if x.mtime_ns != y.mtime_ns {
                push("mtime");
            }
        }
        (EntryKind::Symlink { target: a }, EntryKind::Symlink { target: b }) => {
            if a != b {
                push("modified");
            }
        }
        _ => {
            push("type");
            return Ok(());
        }
    }
    if (x.mode, x.uid, x.gid) != (y.mode, y.uid, y.gid) {
        push("mode");
    }
    if x.xattrs != y.xattrs {
        push("xattr");
    }
    Ok(())
}
