//! Resolving `CHECKPOINT[:ROOT[/PATH]]` specs and walking stored trees.

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::{Checkpoint, RootRecord};
use crate::store::tree::{Entry, EntryKind};
use crate::store::Store;

/// A resolved location inside a checkpoint.
pub struct Located {
    pub checkpoint: ObjectId,
    pub record: Checkpoint,
    pub root: String,
    /// Path components below the root (empty = the root itself).
    pub path: Vec<Vec<u8>>,
    /// The entry at `path`; `None` for the root directory itself.
    pub entry: Option<Entry>,
}

impl Located {
    /// The tree id when the location is a directory.
    pub fn dir_tree(&self) -> Option<ObjectId> {
        match &self.entry {
            None => self.record.roots.get(&self.root).map(|r| r.tree),
            Some(Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            }) => Some(*tree),
            Some(_) => None,
        }
    }
}

/// Splits `SPEC[:ROOT[/PATH]]`.
pub fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.split_once(':') {
        Some((c, rest)) => (c, Some(rest)),
        None => (spec, None),
    }
}

/// Resolves `CHECKPOINT[:ROOT[/PATH]]`. Without a root, the only root is used when there is
/// exactly one.
///
/// # Errors
/// `NotFound` naming the checkpoint, root or path; `Usage` when a root must be named.
pub fn locate(store: &Store, spec: &str) -> Result<Located> {
    let (cspec, rest) = split_spec(spec);
    let checkpoint = store.resolve(cspec)?;
    let record = store.read_checkpoint(&checkpoint)?;
    let rest = rest.unwrap_or("").trim_start_matches('/');
    let (root, path) = match rest.split_once('/') {
        Some((r, p)) => (r.to_string(), p),
        None => (rest.to_string(), ""),
    };
    let root = if root.is_empty() {
        if record.roots.len() == 1 {
            record.roots.keys().next().cloned().unwrap_or_default()
        } else {
            let names: Vec<&str> = record.roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "{spec}: name a root (CHECKPOINT:ROOT/PATH); roots are {}",
                names.join(", ")
            )));
        }
    } else {
        root
    };
    // A root the user named that the checkpoint does not have: what was typed is wrong.
    let rec: &RootRecord = record.roots.get(&root).ok_or_else(|| {
        let names: Vec<&str> = record.roots.keys().map(String::as_str).collect();
        Error::Usage(format!(
            "{spec}: no root {root:?} in checkpoint {} (its roots: {})",
            checkpoint.short(),
            names.join(", ")
        ))
    })?;
    let comps: Vec<Vec<u8>> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(|c| c.as_bytes().to_vec())
        .collect();
    let mut tree_id = rec.tree;
    let mut entry = None;
    for (i, c) in comps.iter().enumerate() {
        if c == b".." {
            return Err(Error::Usage(format!(
                "{spec}: '..' is not allowed in paths"
            )));
        }
        let tree = store.read_tree(&tree_id)?;
        let e = tree.get(c).cloned().ok_or_else(|| {
            Error::NotFound(format!(
                "{root}/{} in checkpoint {}",
                String::from_utf8_lossy(&comps[..=i].join(&b'/')),
                checkpoint.short()
            ))
        })?;
        if i + 1 < comps.len() {
            match &e.kind {
                EntryKind::Dir { tree, .. } => tree_id = *tree,
                _ => {
                    return Err(Error::NotFound(format!(
                        "{root}/{}: not a directory",
                        String::from_utf8_lossy(&comps[..=i].join(&b'/'))
                    )))
                }
            }
        }
        entry = Some(e);
    }
    Ok(Located {
        checkpoint,
        record: record.clone(),
        root,
        path: comps,
        entry,
    })
}

/// Visits every entry below tree `id` depth-first (parents before children), with its path
/// relative to the tree. Stops at the first error from `f` or from reading a tree. Iterative
/// (an explicit stack of open trees), so a stored tree of any depth walks.
pub fn walk_tree(
    store: &Store,
    id: &ObjectId,
    prefix: &[u8],
    f: &mut dyn FnMut(&[u8], &Entry) -> Result<()>,
) -> Result<()> {
    // Each level: the tree's entries, the next one to visit, and the level's path.
    let mut stack = vec![(store.read_tree(id)?.entries.into_iter(), prefix.to_vec())];
    while let Some((entries, prefix)) = stack.last_mut() {
        let Some(e) = entries.next() else {
            stack.pop();
            continue;
        };
        let mut path = prefix.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&e.name);
        f(&path, &e)?;
        if let EntryKind::Dir { tree, .. } = &e.kind {
            stack.push((store.read_tree(tree)?.entries.into_iter(), path));
        }
    }
    Ok(())
}
