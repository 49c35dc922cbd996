//! `diff` and `status`: what changed between two trees, root by root. Subtrees with equal ids
//! are skipped without being read, so the cost is the size of the change, not of the trees.
//!
//! A side is a [`Side`]: a stored checkpoint's roots, or a live tree (a workspace's merge, a
//! plain directory's capture) built by a dry run, whose new trees are held in memory beside
//! the store's. Contents for `--patch` come from the store, or, for files a dry run hashed but
//! did not store, from the live directory, read through [`safe::Dir`](crate::fs::safe::Dir).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::{Chunk, Entry, EntryKind, Tree};
use crate::store::tree_cache::TreeCache;
use crate::store::Store;

/// One difference.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Change {
    /// "added", "removed", "modified", "renamed", "type", "mode" (mode/owner), "mtime",
    /// "xattr", "links" (a file joined, left or changed its hardlink group: see `nlink`).
    pub change: String,
    /// `ROOT/PATH` (for a rename, the new path).
    pub path: String,
    /// For "renamed": the old `ROOT/PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Size now (before, for "removed"): bytes of a file or of a symlink's target, entries of
    /// a directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Size before, when there was an entry before (same units as `size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_before: Option<u64>,
    /// For "links": the file's names in its root now and before (1: not linked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nlink: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nlink_before: Option<u32>,
    /// The entries on each side, for `--stat` and `--patch`.
    #[serde(skip)]
    pub before: Option<Entry>,
    #[serde(skip)]
    pub after: Option<Entry>,
}

impl Change {
    fn new(change: &str, path: String, before: Option<&Entry>, after: Option<&Entry>) -> Change {
        Change {
            change: change.into(),
            path,
            from: None,
            size: after.or(before).map(|e| e.size),
            size_before: before.map(|e| e.size),
            nlink: (change == "links").then(|| after.map_or(1, |e| e.nlink.max(1))),
            nlink_before: (change == "links").then(|| before.map_or(1, |e| e.nlink.max(1))),
            before: before.cloned(),
            after: after.cloned(),
        }
    }

    /// The letter `git status --short` and `git diff --name-status` use.
    pub fn letter(&self) -> char {
        match self.change.as_str() {
            "added" => 'A',
            "removed" => 'D',
            "renamed" => 'R',
            "type" => 'T',
            _ => 'M',
        }
    }

    /// Whether the entry (on either side) is a directory.
    pub fn is_dir(&self) -> bool {
        self.after
            .as_ref()
            .or(self.before.as_ref())
            .is_some_and(Entry::is_dir)
    }
}

/// One side of a diff.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// Root name -> tree id.
    pub roots: BTreeMap<String, ObjectId>,
    /// Trees a dry run built that the store does not hold.
    pub trees: HashMap<ObjectId, Tree>,
    /// Root name -> the live directory whose files a dry run hashed without storing (a
    /// workspace's upper layer, a plain directory): where `--patch` reads them.
    pub live: BTreeMap<String, PathBuf>,
}

impl Side {
    /// A stored checkpoint.
    pub fn checkpoint(c: &Checkpoint) -> Side {
        Side {
            roots: c.roots.iter().map(|(n, r)| (n.clone(), r.tree)).collect(),
            ..Side::default()
        }
    }

    /// Only root `name` of this side.
    pub fn only_root(mut self, name: &str) -> Side {
        self.roots.retain(|n, _| n == name);
        self.live.retain(|n, _| n == name);
        self
    }

    /// A tree of this side: one a dry run built, else the store's.
    ///
    /// # Errors
    /// A tree the store does not hold or that does not decode.
    pub fn tree(&self, store: &Store, id: &ObjectId) -> Result<Tree> {
        match self.trees.get(id) {
            Some(t) => Ok(t.clone()),
            None => store.read_tree(id),
        }
    }

    /// [`Side::tree`] through a cache of decoded trees (the diff's walk).
    fn cached_tree(&self, trees: &TreeCache<'_>, id: &ObjectId) -> Result<Arc<Tree>> {
        match self.trees.get(id) {
            Some(t) => Ok(Arc::new(t.clone())),
            None => trees.read(id),
        }
    }

    /// The entry at `ROOT/PATH` of this side, if there is one (nothing on the way is a
    /// symlink: trees are walked by name).
    ///
    /// # Errors
    /// A tree on the way that does not read.
    pub fn entry_at(&self, store: &Store, path: &str) -> Result<Option<Entry>> {
        let mut parts = path.split('/');
        let Some(mut tree) = parts.next().and_then(|r| self.roots.get(r).copied()) else {
            return Ok(None);
        };
        let mut names: Vec<&str> = parts.collect();
        let Some(last) = names.pop() else {
            return Ok(None);
        };
        for n in names {
            match self.tree(store, &tree)?.get(n.as_bytes()).map(|e| &e.kind) {
                Some(EntryKind::Dir { tree: id, .. }) => tree = *id,
                _ => return Ok(None),
            }
        }
        Ok(self.tree(store, &tree)?.get(last.as_bytes()).cloned())
    }

    /// The bytes of a file entry (or a symlink's target) at `path` (`ROOT/PATH`): from the
    /// store when it holds every chunk, else from the live directory.
    ///
    /// # Errors
    /// A chunk the store lacks on a stored side (`Corrupt`); a live file that is gone or
    /// changed size since the dry run (`Conflict`: run the diff again).
    pub fn content(&self, store: &Store, path: &str, e: &Entry) -> Result<Option<Vec<u8>>> {
        let chunks: &[Chunk] = match &e.kind {
            EntryKind::File { chunks } => chunks,
            EntryKind::Symlink { target } => return Ok(Some(target.clone())),
            EntryKind::Dir { .. } => return Ok(None),
        };
        if chunks.iter().all(|c| store.has_object(&c.id)) {
            let mut out = Vec::with_capacity(e.size as usize);
            for c in chunks {
                out.extend_from_slice(&store.read_chunk(c)?);
            }
            return Ok(Some(out));
        }
        let (root, rel) = path.split_once('/').unwrap_or((path, ""));
        let Some(dir) = self.live.get(root) else {
            return Err(Error::Corrupt(format!(
                "{path}: a chunk of this file is missing from the store (run `ckptfs verify`)"
            )));
        };
        let top = crate::fs::safe::Dir::open(dir)?;
        let (mut f, st) = top.open_file(rel)?;
        let mut out = Vec::new();
        (&mut f)
            .take(e.size + 1)
            .read_to_end(&mut out)
            .map_err(|err| Error::io(top.display_path(rel), err))?;
        if st.len() != e.size || out.len() as u64 != e.size {
            return Err(Error::Conflict(format!(
                "{} changed while being compared; run the diff again",
                top.display_path(rel).display()
            )));
        }
        Ok(Some(out))
    }
}

/// What to compare.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    /// Only these `ROOT/PATH`s and what is below them (all when empty).
    pub paths: Vec<String>,
    /// Report a removed and an added entry with the same content (same tree id, same chunk
    /// list) as one rename.
    pub renames: bool,
}

/// Differences from checkpoint `a` to `b`, every path, no rename detection: what `diff`
/// printed before its options.
pub fn diff(store: &Store, a: &Checkpoint, b: &Checkpoint) -> Result<Vec<Change>> {
    diff_sides(
        store,
        &Side::checkpoint(a),
        &Side::checkpoint(b),
        &DiffOptions::default(),
    )
}

/// Differences from side `a` to side `b`.
///
/// # Errors
/// A tree that does not read.
pub fn diff_sides(store: &Store, a: &Side, b: &Side, opts: &DiffOptions) -> Result<Vec<Change>> {
    diff_sides_cached(&TreeCache::with_budget(store, 0), a, b, opts)
}

/// [`diff_sides`], reading the stored trees through `trees`: a caller that diffs the same
/// trees again (a merge: base->ours, base->theirs, then its walk) decodes each once.
///
/// # Errors
/// A tree that does not read.
pub fn diff_sides_cached(
    trees: &TreeCache<'_>,
    a: &Side,
    b: &Side,
    opts: &DiffOptions,
) -> Result<Vec<Change>> {
    let filter: Vec<String> = opts
        .paths
        .iter()
        .map(|p| p.trim_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let w = Walker {
        trees,
        a,
        b,
        filter: &filter,
    };
    let mut out = Vec::new();
    let mut names: Vec<&String> = a.roots.keys().chain(b.roots.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        if !w.wanted(name) {
            continue;
        }
        w.trees(
            a.roots.get(name).copied(),
            b.roots.get(name).copied(),
            name,
            &mut out,
        )?;
    }
    if opts.renames {
        out = detect_renames(out);
    }
    Ok(out)
}

struct Walker<'a> {
    trees: &'a TreeCache<'a>,
    a: &'a Side,
    b: &'a Side,
    filter: &'a [String],
}

/// Whether `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl Walker<'_> {
    /// Whether the walk must look at `path`: it is under a filter, or above one.
    fn wanted(&self, path: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| under(path, f) || under(f, path))
    }

    /// Whether a change at `path` is reported.
    fn reported(&self, path: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| under(path, f))
    }

    fn push(&self, out: &mut Vec<Change>, c: Change) {
        if self.reported(&c.path) {
            out.push(c);
        }
    }

    fn trees(
        &self,
        a: Option<ObjectId>,
        b: Option<ObjectId>,
        prefix: &str,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        crate::store::tree::check_depth(prefix.split('/').count(), || prefix.to_string())?;
        let load = |side: &Side, id: Option<ObjectId>| match id {
            Some(id) => side.cached_tree(self.trees, &id),
            None => Ok(Arc::new(Tree::default())),
        };
        let (ta, tb) = (load(self.a, a)?, load(self.b, b)?);
        let (mut i, mut j) = (0, 0);
        while i < ta.entries.len() || j < tb.entries.len() {
            let (ea, eb) = (ta.entries.get(i), tb.entries.get(j));
            let ord = match (ea, eb) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match (ord, ea, eb) {
                (std::cmp::Ordering::Less, Some(x), _) => {
                    self.one_side(x, prefix, true, out)?;
                    i += 1;
                }
                (std::cmp::Ordering::Greater, _, Some(y)) => {
                    self.one_side(y, prefix, false, out)?;
                    j += 1;
                }
                (_, Some(x), Some(y)) => {
                    self.both(x, y, prefix, out)?;
                    i += 1;
                    j += 1;
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn one_side(
        &self,
        e: &Entry,
        prefix: &str,
        removed: bool,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let p = path_of(prefix, e);
        if !self.wanted(&p) {
            return Ok(());
        }
        let c = if removed {
            Change::new("removed", p.clone(), Some(e), None)
        } else {
            Change::new("added", p.clone(), None, Some(e))
        };
        self.push(out, c);
        if let EntryKind::Dir { tree, .. } = &e.kind {
            let (a, b) = if removed {
                (Some(*tree), None)
            } else {
                (None, Some(*tree))
            };
            self.trees(a, b, &p, out)?;
        }
        Ok(())
    }

    fn both(&self, x: &Entry, y: &Entry, prefix: &str, out: &mut Vec<Change>) -> Result<()> {
        let p = path_of(prefix, x);
        if !self.wanted(&p) {
            return Ok(());
        }
        let push = |out: &mut Vec<Change>, c: &str| {
            self.push(out, Change::new(c, p.clone(), Some(x), Some(y)));
        };
        match (&x.kind, &y.kind) {
            (EntryKind::Dir { tree: a, .. }, EntryKind::Dir { tree: b, .. }) => {
                if (x.mode, x.uid, x.gid) != (y.mode, y.uid, y.gid) {
                    push(out, "mode");
                }
                if x.xattrs != y.xattrs {
                    push(out, "xattr");
                }
                return self.trees(Some(*a), Some(*b), &p, out);
            }
            (EntryKind::File { chunks: a }, EntryKind::File { chunks: b }) => {
                if a != b {
                    push(out, "modified");
                } else if x.mtime_ns != y.mtime_ns {
                    push(out, "mtime");
                }
                // Linked on one side only, or to another group (named by its inode number).
                let group = |e: &Entry| (e.nlink > 1).then_some((e.ino, e.nlink));
                if group(x) != group(y) {
                    push(out, "links");
                }
            }
            (EntryKind::Symlink { target: a }, EntryKind::Symlink { target: b }) => {
                if a != b {
                    push(out, "modified");
                }
            }
            _ => {
                push(out, "type");
                return Ok(());
            }
        }
        if (x.mode, x.uid, x.gid) != (y.mode, y.uid, y.gid) {
            push(out, "mode");
        }
        if x.xattrs != y.xattrs {
            push(out, "xattr");
        }
        Ok(())
    }
}

fn path_of(prefix: &str, e: &Entry) -> String {
    format!("{prefix}/{}", String::from_utf8_lossy(&e.name))
}

/// Whether it is a directory, and its tree id or chunk list.
type ContentKey = (bool, Vec<(ObjectId, u32)>);

/// What makes two entries "the same content" for rename detection: a directory's tree id, a
/// file's chunk list. Empty files and empty directories are alike without being renames of
/// each other, so they have none; symlinks neither (their target is the content, and a short
/// target is common).
fn content_key(e: &Entry) -> Option<ContentKey> {
    match &e.kind {
        EntryKind::Dir { tree, .. } if e.size > 0 => Some((true, vec![(*tree, 0)])),
        EntryKind::File { chunks } if e.size > 0 => {
            Some((false, chunks.iter().map(|c| (c.id, c.len)).collect()))
        }
        _ => None,
    }
}

/// Pairs each removed entry with an added one of the same content (the first, in path order),
/// and reports them as one rename at the new path. A renamed directory's children, listed as
/// removed and added below it, go with it.
fn detect_renames(changes: Vec<Change>) -> Vec<Change> {
    let mut added: HashMap<ContentKey, Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.change == "added" {
            if let Some(k) = c.after.as_ref().and_then(content_key) {
                added.entry(k).or_default().push(i);
            }
        }
    }
    if added.is_empty() {
        return changes;
    }
    // Index of a removed entry -> index of the added entry it became.
    let mut renamed_to: BTreeMap<usize, usize> = BTreeMap::new();
    let mut gone_dirs: Vec<String> = Vec::new();
    let mut new_dirs: Vec<String> = Vec::new();
    let mut taken: HashSet<usize> = HashSet::new();
    for (i, c) in changes.iter().enumerate() {
        if c.change != "removed" || gone_dirs.iter().any(|d| under(&c.path, d)) {
            continue;
        }
        let Some(k) = c.before.as_ref().and_then(content_key) else {
            continue;
        };
        let Some(cands) = added.get(&k) else {
            continue;
        };
        let pick = cands
            .iter()
            .copied()
            .find(|j| !taken.contains(j) && !new_dirs.iter().any(|d| under(&changes[*j].path, d)));
        if let Some(j) = pick {
            taken.insert(j);
            renamed_to.insert(i, j);
            if k.0 {
                gone_dirs.push(c.path.clone());
                new_dirs.push(changes[j].path.clone());
            }
        }
    }
    let from: HashMap<usize, usize> = renamed_to.iter().map(|(i, j)| (*j, *i)).collect();
    let mut out = Vec::with_capacity(changes.len());
    for (i, c) in changes.iter().enumerate() {
        if renamed_to.contains_key(&i) {
            continue;
        }
        if let Some(old) = from.get(&i) {
            let o = &changes[*old];
            out.push(Change {
                change: "renamed".into(),
                from: Some(o.path.clone()),
                size_before: o.size_before,
                before: o.before.clone(),
                ..c.clone()
            });
            continue;
        }
        let inside = |dirs: &[String]| dirs.iter().any(|d| c.path != *d && under(&c.path, d));
        match c.change.as_str() {
            "removed" if inside(&gone_dirs) => continue,
            "added" if inside(&new_dirs) => continue,
            _ => out.push(c.clone()),
        }
    }
    out
}

/// Whether bytes are shown as text: no NUL in the first 8 KiB (git's test) and valid UTF-8.
pub fn is_text(data: &[u8]) -> bool {
    const SNIFF_BYTES: usize = 8 << 10;
    !data[..data.len().min(SNIFF_BYTES)].contains(&0) && std::str::from_utf8(data).is_ok()
}

/// A unified diff (3 lines of context) of `a` to `b` at `path` (`ROOT/PATH`), `None` for a
/// side that has no content; a binary side gives git's one line instead. Empty when equal.
pub fn patch(path: &str, a: Option<&[u8]>, b: Option<&[u8]>) -> String {
    let name_a = if a.is_some() {
        format!("a/{path}")
    } else {
        "/dev/null".into()
    };
    let name_b = if b.is_some() {
        format!("b/{path}")
    } else {
        "/dev/null".into()
    };
    if a == b {
        return String::new();
    }
    let (ta, tb) = (a.unwrap_or_default(), b.unwrap_or_default());
    if !is_text(ta) || !is_text(tb) {
        return format!("Binary files {name_a} and {name_b} differ\n");
    }
    let (ta, tb) = (
        std::str::from_utf8(ta).unwrap_or_default(),
        std::str::from_utf8(tb).unwrap_or_default(),
    );
    let d = similar::TextDiff::from_lines(ta, tb);
    d.unified_diff()
        .context_radius(3)
        .header(&name_a, &name_b)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, id: u8, size: u64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind: EntryKind::File {
                chunks: vec![Chunk {
                    id: ObjectId::of(&[id]),
                    len: size as u32,
                }],
            },
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            size,
            xattrs: Vec::new(),
            ctime_ns: 0,
            ino: 0,
            nlink: 0,
        }
    }

    #[test]
    fn a_removed_and_added_file_of_the_same_chunks_is_one_rename() {
        let a = file("old", 1, 5);
        let b = file("new", 1, 5);
        let other = file("other", 2, 5);
        let changes = vec![
            Change::new("added", "ws/new".into(), None, Some(&b)),
            Change::new("removed", "ws/old".into(), Some(&a), None),
            Change::new("added", "ws/other".into(), None, Some(&other)),
        ];
        let out = detect_renames(changes);
        let lines: Vec<_> = out
            .iter()
            .map(|c| (c.change.as_str(), c.path.as_str(), c.from.as_deref()))
            .collect();
        assert_eq!(
            lines,
            vec![
                ("renamed", "ws/new", Some("ws/old")),
                ("added", "ws/other", None)
            ]
        );
    }

    #[test]
    fn empty_files_are_not_renames() {
        let a = file("old", 1, 0);
        let b = file("new", 1, 0);
        let changes = vec![
            Change::new("added", "ws/new".into(), None, Some(&b)),
            Change::new("removed", "ws/old".into(), Some(&a), None),
        ];
        assert_eq!(detect_renames(changes.clone()), changes);
    }

    #[test]
    fn text_is_nul_free_utf8() {
        assert!(is_text(b"hello\n"));
        assert!(!is_text(b"a\0b"));
        assert!(!is_text(&[0xff, 0xfe]));
        assert_eq!(
            patch("ws/x", Some(b"a\0"), None),
            "Binary files a/ws/x and /dev/null differ\n"
        );
    }

    #[test]
    fn filters_take_a_path_and_what_is_below_it() {
        assert!(under("ws/a/b", "ws/a"));
        assert!(under("ws/a", "ws/a"));
        assert!(!under("ws/ab", "ws/a"));
    }
}
