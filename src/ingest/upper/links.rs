//! Hardlinks in a workspace checkpoint: the merged tree records every linked file's names as
//! one link group (`store::tree`), as the workspace shows them.
//!
//! Overlayfs (`index=on`) keeps the names of a lower hardlink joined: copying up one name puts
//! the file in the work dir's `index/` and links it there, and every other name, still lower,
//! then shows the indexed upper file. So the upper layer holds a changed linked file under
//! some of its names only, and the merge, which reads the upper layer, would record the other
//! names with their old content. This pass, run after the files are read and before the trees
//! are built, only when the upper holds a file with several links or hides a linked lower
//! file: it finds the link groups of the merged tree (upper files by their upper inode, lower
//! entries by the group their tree records, a copy joined to the group of the lower file it
//! came from, which it records the number of) and gives every name of a group the entry of its
//! upper file (content, metadata, inode number) and the group's size as its link count; a
//! group left with one name is a plain file again. Its cost is a walk of the whole merged tree
//! (trees the upper does not touch are read from the store, not rewritten unless a name in
//! them changes).

use std::collections::{HashMap, HashSet};

use super::{Ctx, MDir, MNode, Totals};
use crate::error::Result;
use crate::ingest::reader::FileData;
use crate::store::object::ObjectBatch;
use crate::store::tree::{Entry, EntryKind, Tree};

/// What the walk of the upper layer noted about links.
#[derive(Default)]
pub(super) struct Links {
    /// Upper files with more than one link (path from the root -> (st_dev, st_ino)). With
    /// `index=on` every copy of a linked lower file is one (its other link is in `index/`).
    pub(super) upper: HashMap<Vec<u8>, (u64, u64)>,
    /// A whiteout hides a linked lower file (its group lost a name).
    pub(super) hidden_linked: bool,
}

impl Links {
    fn needed(&self) -> bool {
        !self.upper.is_empty() || self.hidden_linked
    }
}

/// One file name of the merged tree that may belong to a group.
struct Member {
    path: Vec<u8>,
    entry: Entry,
    upper: Option<(u64, u64)>,
}

/// Rewrites the entries of `root` (the merged root, files read: `results`) so link groups are
/// whole; see the module doc.
pub(super) fn relink(
    ctx: &mut Ctx<'_>,
    batch: &ObjectBatch<'_>,
    root: &mut MDir,
    results: &[FileData],
) -> Result<()> {
    if !ctx.links.needed() {
        return Ok(());
    }
    let mut members = Vec::new();
    collect_dir(ctx, root, b"", results, &mut members)?;
    let patches = group(members);
    if patches.is_empty() {
        return Ok(());
    }
    let mut dirs: HashSet<Vec<u8>> = HashSet::new();
    for p in patches.keys() {
        let mut at = p.as_slice();
        while let Some(i) = at.iter().rposition(|&c| c == b'/') {
            at = &at[..i];
            dirs.insert(at.to_vec());
        }
    }
    let fix = Fix {
        patches: &patches,
        dirs: &dirs,
    };
    fix.apply_dir(ctx, batch, root, b"").map(|_| ())
}

fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        name.to_vec()
    } else {
        [rel, b"/", name].concat()
    }
}

/// Refuses a stored directory `rel` (from the root) nested deeper than the walks go.
fn check_rel_depth(rel: &[u8]) -> Result<()> {
    let depth = rel.split(|&c| c == b'/').count();
    crate::store::tree::check_depth(depth, || String::from_utf8_lossy(rel).into_owned())
}

fn collect_dir(
    ctx: &Ctx<'_>,
    dir: &MDir,
    rel: &[u8],
    results: &[FileData],
    out: &mut Vec<Member>,
) -> Result<()> {
    for (name, node) in &dir.children {
        let path = join(rel, name);
        match node {
            MNode::File(i) => push(ctx, out, path, results[*i].entry(name)),
            MNode::Keep(e) | MNode::Ready(e) => match &e.kind {
                EntryKind::File { .. } => push(ctx, out, path, e.clone()),
                EntryKind::Dir { tree, .. } => collect_tree(ctx, tree, &path, out)?,
                EntryKind::Symlink { .. } => {}
            },
            MNode::Dir(sub) => collect_dir(ctx, sub, &path, results, out)?,
        }
    }
    Ok(())
}

/// A stored tree the upper does not change (a lower directory, or a clean upper one).
fn collect_tree(
    ctx: &Ctx<'_>,
    tree: &crate::id::ObjectId,
    rel: &[u8],
    out: &mut Vec<Member>,
) -> Result<()> {
    check_rel_depth(rel)?;
    for e in ctx.store.read_tree(tree)?.entries {
        let path = join(rel, &e.name);
        match &e.kind {
            EntryKind::File { .. } => push(ctx, out, path, e),
            EntryKind::Dir { tree, .. } => collect_tree(ctx, tree, &path, out)?,
            EntryKind::Symlink { .. } => {}
        }
    }
    Ok(())
}

fn push(ctx: &Ctx<'_>, out: &mut Vec<Member>, path: Vec<u8>, entry: Entry) {
    let upper = ctx.links.upper.get(&path).copied();
    if upper.is_some() || entry.nlink > 1 {
        out.push(Member { path, entry, upper });
    }
}

/// The entry every name of each group must record, by path (only those that change).
fn group(members: Vec<Member>) -> HashMap<Vec<u8>, Entry> {
    // Union-find over members; groups join through a shared upper inode or a recorded number.
    let mut parent: Vec<usize> = (0..members.len()).collect();
    fn find(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut by_upper: HashMap<(u64, u64), usize> = HashMap::new();
    let mut by_ino: HashMap<u64, usize> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        let mut keys = Vec::new();
        if let Some(u) = m.upper {
            keys.push(*by_upper.entry(u).or_insert(i));
        }
        if m.entry.ino != 0 {
            keys.push(*by_ino.entry(m.entry.ino).or_insert(i));
        }
        for k in keys {
            let (a, b) = (find(&mut parent, i), find(&mut parent, k));
            parent[a] = b;
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..members.len() {
        let r = find(&mut parent, i);
        groups.entry(r).or_default().push(i);
    }
    let mut patches = HashMap::new();
    for ids in groups.values() {
        // The upper file is what every name shows; a copy that records a number other than
        // its upper inode's came from a lower file, and keeps that file's number.
        let pick = ids
            .iter()
            .copied()
            .filter(|&i| members[i].upper.is_some())
            .max_by_key(|&i| {
                let m = &members[i];
                m.upper.is_some_and(|(_, ino)| ino != m.entry.ino)
            })
            .unwrap_or(ids[0]);
        let canon = &members[pick].entry;
        let nlink = if ids.len() > 1 { ids.len() as u32 } else { 0 };
        for &i in ids {
            let m = &members[i];
            let want = Entry {
                name: m.entry.name.clone(),
                nlink,
                ..canon.clone()
            };
            if want != m.entry {
                patches.insert(m.path.clone(), want);
            }
        }
    }
    patches
}

struct Fix<'p> {
    patches: &'p HashMap<Vec<u8>, Entry>,
    /// Every directory above a patched name.
    dirs: &'p HashSet<Vec<u8>>,
}

impl Fix<'_> {
    /// Patches the names under `dir`; returns what that added to the totals, which each merged
    /// directory on the way also adds to its own `walk_delta`: the upper cache keeps a
    /// directory's tree with the patched entries and its delta, and a later checkpoint that
    /// takes the directory whole finds nothing left to patch in it.
    fn apply_dir(
        &self,
        ctx: &mut Ctx<'_>,
        batch: &ObjectBatch<'_>,
        dir: &mut MDir,
        rel: &[u8],
    ) -> Result<Totals> {
        let before = ctx.delta;
        for (name, node) in &mut dir.children {
            let path = join(rel, name);
            if let Some(want) = self.patches.get(&path) {
                match node {
                    // `build` counts a read file; a ready entry is already counted.
                    MNode::File(_) => {
                        ctx.delta.files += 1;
                        ctx.delta.bytes += want.size as i64;
                    }
                    MNode::Keep(e) | MNode::Ready(e) => {
                        ctx.delta.bytes += want.size as i64 - e.size as i64;
                    }
                    MNode::Dir(_) => continue,
                }
                *node = MNode::Ready(want.clone());
                continue;
            }
            if !self.dirs.contains(&path) {
                continue;
            }
            match node {
                MNode::Dir(sub) => {
                    let added = self.apply_dir(ctx, batch, sub, &path)?;
                    sub.walk_delta.add(added, 1);
                }
                MNode::Keep(e) | MNode::Ready(e) => {
                    if let EntryKind::Dir { tree, subdirs } = e.kind {
                        let tree = self.rebuild(ctx, batch, &tree, &path)?;
                        let mut e = e.clone();
                        e.kind = EntryKind::Dir { tree, subdirs };
                        *node = MNode::Ready(e);
                    }
                }
                MNode::File(_) => {}
            }
        }
        Ok(ctx.delta.since(before))
    }

    /// A stored tree with its patched names; returns the new tree's id.
    fn rebuild(
        &self,
        ctx: &mut Ctx<'_>,
        batch: &ObjectBatch<'_>,
        id: &crate::id::ObjectId,
        rel: &[u8],
    ) -> Result<crate::id::ObjectId> {
        check_rel_depth(rel)?;
        let mut tree: Tree = ctx.store.read_tree(id)?;
        for e in &mut tree.entries {
            let path = join(rel, &e.name);
            if let Some(want) = self.patches.get(&path) {
                ctx.delta.bytes += want.size as i64 - e.size as i64;
                *e = want.clone();
            } else if self.dirs.contains(&path) {
                if let EntryKind::Dir { tree, subdirs } = e.kind {
                    let t = self.rebuild(ctx, batch, &tree, &path)?;
                    e.kind = EntryKind::Dir { tree: t, subdirs };
                }
            }
        }
        batch.ensure_tree(&tree)
    }
}
