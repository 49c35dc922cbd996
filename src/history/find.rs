//! Searching history (`ckptfs find`), like `restic find`: which checkpoints hold paths that
//! match a glob, and when one path changed.
//!
//! - **Match**: a pattern without `/` is matched against an entry's name (like `find
//!   -name`); one with `/` against its whole path `ROOT/PATH` (`*` stays within a component,
//!   `**` crosses them). Paths are listed once each, with every checkpoint that holds them.
//! - **History** of `ROOT/PATH`: every checkpoint in which the entry at that path differs from
//!   the same path in its first parent: `added`, `removed`, `type` (file became a directory...),
//!   `modified` (content: chunks, link target, or for a directory anything below it) or
//!   `metadata` (mode, owner, mtime, xattrs). As `git log -- PATH` does, each checkpoint is
//!   compared with its own parent, so branches do not interleave.
//!
//! Speed: trees are content-addressed, so a directory with the same tree id at the same path
//! holds the same matches: matches are memoized by (tree id, path) and an unchanged subtree is
//! read once for all the checkpoints that share it; a history lookup is memoized by (tree id,
//! depth). Cost follows what changed between checkpoints, not their size times their number.

use std::collections::HashMap;
use std::rc::Rc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::{Entry, EntryKind};
use crate::store::Store;

/// Which checkpoints to search.
#[derive(Clone, Debug, Default)]
pub struct FindOptions {
    /// Only this root.
    pub root: Option<String>,
    /// Only this branch's history (its head along first parents, as `log --branch`).
    pub branch: Option<String>,
    /// Only checkpoints taken at or after this time (Unix ns).
    pub since_ns: Option<i64>,
}

/// A checkpoint, as find's reports name it.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointRef {
    pub id: ObjectId,
    pub branch: String,
    pub time_ns: i64,
    /// `time_ns` in RFC 3339, UTC.
    pub time_rfc3339: String,
    /// Every label naming it now.
    pub labels: Vec<String>,
}

/// An entry as find shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EntryInfo {
    /// `file`, `dir` or `symlink`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// File size; a directory's entry count; a symlink's target length.
    pub size: u64,
    /// Permission bits as four octal digits, e.g. "0644".
    pub mode: String,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
}

impl EntryInfo {
    fn of(e: &Entry) -> EntryInfo {
        EntryInfo {
            kind: e.kind_name(),
            size: e.size,
            mode: crate::units::mode_octal(e.mode),
            uid: e.uid,
            gid: e.gid,
            mtime_ns: e.mtime_ns,
        }
    }
}

/// One checkpoint holding a matched path, and the entry there.
#[derive(Clone, Debug, Serialize)]
pub struct FoundIn {
    pub checkpoint: CheckpointRef,
    pub entry: EntryInfo,
}

/// A matched path and the checkpoints holding it, oldest first.
#[derive(Clone, Debug, Serialize)]
pub struct FoundPath {
    /// `ROOT/PATH`.
    pub path: String,
    pub found_in: Vec<FoundIn>,
}

/// What `find PATTERN` found.
#[derive(Clone, Debug, Serialize)]
pub struct FindReport {
    pub patterns: Vec<String>,
    pub checkpoints_searched: u64,
    /// Distinct trees decoded (identical subtrees at the same path are read once).
    pub trees_read: u64,
    /// Matched paths, sorted.
    pub paths: Vec<FoundPath>,
}

/// One change of a path's entry.
#[derive(Clone, Debug, Serialize)]
pub struct PathChange {
    pub checkpoint: CheckpointRef,
    /// The parent it is compared with (none for a first checkpoint).
    pub parent: Option<ObjectId>,
    /// `added`, `removed`, `type`, `modified` or `metadata`.
    pub change: &'static str,
    /// The entry in this checkpoint (none when removed).
    pub entry: Option<EntryInfo>,
}

/// What `find --history PATH` found: the changes, oldest first.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryReport {
    pub path: String,
    pub checkpoints_searched: u64,
    pub changes: Vec<PathChange>,
}

/// The checkpoints to search, oldest first.
fn selected(store: &Store, opts: &FindOptions) -> Result<Vec<(ObjectId, Checkpoint)>> {
    let h = crate::history::timeline::history(store, opts.branch.as_deref())?;
    for p in &h.problems {
        log::warn!("find: {p}");
    }
    let mut items: Vec<(ObjectId, Checkpoint)> = h
        .items
        .into_iter()
        .filter(|(_, c)| opts.since_ns.is_none_or(|t| c.time_ns >= t))
        .collect();
    items.reverse();
    if let Some(r) = &opts.root {
        if !store.config().roots.contains_key(r)
            && !items.iter().any(|(_, c)| c.roots.contains_key(r))
        {
            return Err(Error::NotFound(format!("root {r}")));
        }
    }
    Ok(items)
}

fn reference(id: &ObjectId, c: &Checkpoint, labels: &[(String, ObjectId)]) -> CheckpointRef {
    CheckpointRef {
        id: *id,
        branch: c.branch.clone(),
        time_ns: c.time_ns,
        time_rfc3339: crate::text::time::format_rfc3339(c.time_ns),
        labels: crate::history::timeline::labels_of(labels, id),
    }
}

fn compile(patterns: &[String]) -> Result<(GlobSet, GlobSet)> {
    let mut names = GlobSetBuilder::new();
    let mut paths = GlobSetBuilder::new();
    for p in patterns {
        if p.is_empty() {
            return Err(Error::Usage("find: empty pattern".into()));
        }
        let g = GlobBuilder::new(p.trim_start_matches('/'))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::Usage(format!("find: pattern {p:?}: {e}")))?;
        if p.contains('/') {
            paths.add(g);
        } else {
            names.add(g);
        }
    }
    let build = |b: GlobSetBuilder| {
        b.build()
            .map_err(|e| Error::Usage(format!("find: patterns: {e}")))
    };
    Ok((build(names)?, build(paths)?))
}

/// Matches below one directory: (path, entry).
type Matches = Rc<Vec<(String, EntryInfo)>>;

struct Matcher<'a> {
    store: &'a Store,
    names: GlobSet,
    paths: GlobSet,
    memo: HashMap<(ObjectId, String), Matches>,
    trees_read: u64,
    progress: Progress,
}

impl Matcher<'_> {
    /// The matches in tree `t`, which is at `dir` (`ROOT` or `ROOT/PATH`).
    fn matches_in(&mut self, t: ObjectId, dir: &str) -> Result<Matches> {
        let key = (t, dir.to_string());
        if let Some(m) = self.memo.get(&key) {
            return Ok(Rc::clone(m));
        }
        // A crafted chain of 100k directories: refused at the bound, not walked (the paths,
        // the memo keys and the recursion would all grow with it).
        // `dir` is ROOT/PATH: its depth is the components below the root.
        crate::store::tree::check_depth(dir.split('/').count() - 1, || dir.to_string())?;
        let tree = self.store.read_tree(&t)?;
        self.trees_read += 1;
        self.progress.add_items(1);
        let mut out = Vec::new();
        for e in &tree.entries {
            let name = String::from_utf8_lossy(&e.name);
            let path = format!("{dir}/{name}");
            if self.names.is_match(name.as_ref()) || self.paths.is_match(&path) {
                out.push((path.clone(), EntryInfo::of(e)));
            }
            if let EntryKind::Dir { tree, .. } = &e.kind {
                out.extend(self.matches_in(*tree, &path)?.iter().cloned());
            }
        }
        let m = Rc::new(out);
        self.memo.insert(key, Rc::clone(&m));
        Ok(m)
    }
}

/// Finds the paths matching any of `patterns` in the checkpoints `opts` selects.
///
/// # Errors
/// `Usage` for a bad pattern, `NotFound` for an unknown branch or root, a tree that does not
/// read.
pub fn find(store: &Store, patterns: &[String], opts: &FindOptions) -> Result<FindReport> {
    let (names, paths) = compile(patterns)?;
    let items = selected(store, opts)?;
    let labels = store.list_labels()?;
    let mut m = Matcher {
        store,
        names,
        paths,
        memo: HashMap::new(),
        trees_read: 0,
        progress: Progress::items("find", "trees", None),
    };
    let mut found: HashMap<String, Vec<FoundIn>> = HashMap::new();
    for (id, c) in &items {
        for (root, rec) in &c.roots {
            if opts.root.as_ref().is_some_and(|r| r != root) {
                continue;
            }
            for (path, entry) in m.matches_in(rec.tree, root)?.iter() {
                found.entry(path.clone()).or_default().push(FoundIn {
                    checkpoint: reference(id, c, &labels),
                    entry: entry.clone(),
                });
            }
        }
    }
    m.progress.finish();
    let mut paths: Vec<FoundPath> = found
        .into_iter()
        .map(|(path, found_in)| FoundPath { path, found_in })
        .collect();
    paths.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(FindReport {
        patterns: patterns.to_vec(),
        checkpoints_searched: items.len() as u64,
        trees_read: m.trees_read,
        paths,
    })
}

/// Looks one path up in trees, memoized by (tree id, depth).
struct Lookup<'a> {
    store: &'a Store,
    parts: Vec<Vec<u8>>,
    memo: HashMap<(ObjectId, usize), Option<Entry>>,
}

impl Lookup<'_> {
    /// The entry at `parts[depth..]` below tree `t`.
    fn entry(&mut self, t: ObjectId, depth: usize) -> Result<Option<Entry>> {
        if let Some(e) = self.memo.get(&(t, depth)) {
            return Ok(e.clone());
        }
        let tree = self.store.read_tree(&t)?;
        let found = tree
            .entries
            .into_iter()
            .find(|e| e.name == self.parts[depth]);
        let e = match found {
            Some(e) if depth + 1 == self.parts.len() => Some(e),
            Some(Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            }) => self.entry(tree, depth + 1)?,
            _ => None,
        };
        self.memo.insert((t, depth), e.clone());
        Ok(e)
    }

    /// The entry at the path in checkpoint `c`'s root `root`.
    fn in_checkpoint(&mut self, c: &Checkpoint, root: &str) -> Result<Option<Entry>> {
        match c.roots.get(root) {
            Some(r) => self.entry(r.tree, 0),
            None => Ok(None),
        }
    }
}

/// How `new` differs from `old`, or `None` when it does not.
fn change_of(old: Option<&Entry>, new: Option<&Entry>) -> Option<&'static str> {
    match (old, new) {
        (None, None) => None,
        (None, Some(_)) => Some("added"),
        (Some(_), None) => Some("removed"),
        (Some(o), Some(n)) => {
            if std::mem::discriminant(&o.kind) != std::mem::discriminant(&n.kind) {
                Some("type")
            } else if o.kind != n.kind {
                Some("modified")
            } else if (o.mode, o.uid, o.gid, o.mtime_ns, &o.xattrs)
                != (n.mode, n.uid, n.gid, n.mtime_ns, &n.xattrs)
            {
                Some("metadata")
            } else {
                None
            }
        }
    }
}

/// The checkpoints in which `path` (`ROOT/PATH`) changed against their first parent.
///
/// # Errors
/// `Usage` for a path without a root part, `NotFound` for an unknown branch or root, a tree
/// or parent record that does not read.
pub fn path_history(store: &Store, path: &str, opts: &FindOptions) -> Result<HistoryReport> {
    let clean = path.trim_matches('/');
    let (root, rel) = clean.split_once('/').ok_or_else(|| {
        Error::Usage(format!(
            "find --history {path:?}: give ROOT/PATH (e.g. ws/src/main.rs)"
        ))
    })?;
    let opts = FindOptions {
        root: Some(root.to_string()),
        ..opts.clone()
    };
    let items = selected(store, &opts)?;
    let labels = store.list_labels()?;
    let parts: Vec<Vec<u8>> = rel
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| p.as_bytes().to_vec())
        .collect();
    if parts.is_empty() {
        return Err(Error::Usage(format!(
            "find --history {path:?}: give a path below the root (ROOT/PATH)"
        )));
    }
    let mut look = Lookup {
        store,
        parts,
        memo: HashMap::new(),
    };
    let progress = Progress::items("find", "checkpoints", Some(items.len() as u64));
    let mut changes = Vec::new();
    for (id, c) in &items {
        progress.add_items(1);
        let now = look.in_checkpoint(c, root)?;
        let parent = c.parents.first().copied();
        let before = match parent {
            Some(p) => match store.read_checkpoint(&p) {
                Ok(pc) => look.in_checkpoint(&pc, root)?,
                // A parent gc pruned or forget removed: compared with nothing.
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        if let Some(change) = change_of(before.as_ref(), now.as_ref()) {
            changes.push(PathChange {
                checkpoint: reference(id, c, &labels),
                parent,
                change,
                entry: now.as_ref().map(EntryInfo::of),
            });
        }
    }
    progress.finish();
    Ok(HistoryReport {
        path: format!("{root}/{rel}"),
        checkpoints_searched: items.len() as u64,
        changes,
    })
}
