//! Store statistics (`ckptfs stats`): logical and stored bytes, deduplication, and the bytes
//! each checkpoint and branch holds alone, like `restic stats` and `zfs list -o
//! used,refer,written`.
//!
//! Figures (all exact, none sampled):
//! - **logical bytes**: the sum of file sizes over the checkpoints counted, each file as often
//!   as it occurs (what restoring them all would write; restic's `restore-size`).
//! - **content bytes**: the uncompressed bytes of the distinct chunks they reach (restic's
//!   `raw-data` before compression). `dedup ratio` = logical / content.
//! - **stored bytes**: the bytes of object files on disk (compressed when the store is), of
//!   every object under `objects/` for the store, of the objects reached for a selection.
//! - **unique bytes** of a checkpoint (or branch): the content bytes of chunks that no other
//!   checkpoint (no checkpoint of another branch) reaches: what forgetting it and running gc
//!   would free, uncompressed; `unique stored bytes` is the same on disk, trees included
//!   (ZFS's `used` of a snapshot).
//!
//! A checkpoint's branch is the one its record names (the branch it was taken on): the
//! per-branch rows group by it. `--branch B` selects B's history as `log --branch B` lists
//! it (from its head along first parents, so a fork includes what it was forked from).
//!
//! Cost: each distinct tree is decoded once, and at most once more when a second checkpoint
//! (or branch) is found to reach it: ownership only moves from "one" to "shared", and a shared
//! subtree's whole content is already shared, so it is not walked again.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::EntryKind;
use crate::store::Store;

/// Which checkpoints the figures are about (unique bytes are always against the whole store).
#[derive(Clone, Debug, Default)]
pub enum StatsScope {
    /// Every checkpoint.
    #[default]
    All,
    /// One checkpoint.
    Checkpoint(ObjectId),
    /// One branch's history: its head along first parents, as `log --branch` lists it.
    Branch(String),
}

/// `ckptfs stats` (see the module doc for what each figure means).
#[derive(Clone, Debug, Serialize)]
pub struct StatsReport {
    /// The whole store's object files.
    pub store: StoreFigures,
    /// The checkpoints of the scope, together.
    pub selected: SelectionFigures,
    /// One row per branch with checkpoints in the scope, by name.
    pub branches: Vec<BranchFigures>,
    /// One row per checkpoint in the scope, oldest first.
    pub checkpoints: Vec<CheckpointFigures>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreFigures {
    /// Object files under objects/ (reachable or not).
    pub objects: u64,
    /// Their bytes on disk.
    pub stored_bytes: u64,
    /// Checkpoint records.
    pub checkpoints: u64,
    /// Branches (any state).
    pub branches: u64,
    /// Whether objects are zstd-compressed on disk.
    pub compressed: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SelectionFigures {
    pub checkpoints: u64,
    /// Files, each as often as it occurs.
    pub files: u64,
    pub logical_bytes: u64,
    /// Distinct trees and chunks reached.
    pub trees: u64,
    pub chunks: u64,
    /// Uncompressed bytes of the distinct chunks reached.
    pub content_bytes: u64,
    /// On-disk bytes of the distinct objects (trees and chunks) reached.
    pub stored_bytes: u64,
    /// logical_bytes / content_bytes (1 when there is no content).
    pub dedup_ratio: f64,
    /// Content bytes no checkpoint outside the selection reaches.
    pub unique_bytes: u64,
    /// On-disk bytes of objects no checkpoint outside the selection reaches.
    pub unique_stored_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BranchFigures {
    pub name: String,
    pub checkpoints: u64,
    pub logical_bytes: u64,
    /// Content bytes of chunks no checkpoint of another branch reaches.
    pub unique_bytes: u64,
    pub unique_stored_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckpointFigures {
    pub id: ObjectId,
    pub branch: String,
    pub time_ns: i64,
    /// `time_ns` in RFC 3339, UTC.
    pub time_rfc3339: String,
    /// Every label naming it now.
    pub labels: Vec<String>,
    pub files: u64,
    pub logical_bytes: u64,
    /// Content bytes of chunks no other checkpoint reaches.
    pub unique_bytes: u64,
    pub unique_stored_bytes: u64,
}

/// Who reaches an object: one owner (a checkpoint's or branch's index), or more than one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    One(usize),
    Shared,
}

/// What a tree holds, decoded once: its subtrees and its chunks (id, length).
struct TreeKids {
    trees: Vec<ObjectId>,
    chunks: Vec<(ObjectId, u32)>,
}

/// Ownership of every object reached, for one way of grouping checkpoints.
struct Owners {
    of: HashMap<ObjectId, Owner>,
}

impl Owners {
    fn new() -> Owners {
        Owners { of: HashMap::new() }
    }

    /// Marks what `tree` reaches as reached by `who`.
    fn visit(
        &mut self,
        kids: &mut KidsCache<'_>,
        tree: ObjectId,
        who: usize,
        progress: &Progress,
    ) -> Result<()> {
        // (tree, shared): below a tree found shared, everything is shared.
        let mut stack = vec![(tree, false)];
        while let Some((t, shared)) = stack.pop() {
            let now = self.of.get(&t).copied();
            let below_shared = match (now, shared) {
                // Everything below a shared tree is shared already.
                (Some(Owner::Shared), _) => continue,
                (Some(Owner::One(w)), false) if w == who => continue,
                (Some(Owner::One(_)), _) | (None, true) => {
                    self.of.insert(t, Owner::Shared);
                    true
                }
                (None, false) => {
                    self.of.insert(t, Owner::One(who));
                    false
                }
            };
            let k = kids.get(t, progress)?;
            for (c, _) in &k.chunks {
                let o = match self.of.get(c) {
                    _ if below_shared => Owner::Shared,
                    None => Owner::One(who),
                    Some(Owner::One(w)) if *w == who => Owner::One(who),
                    Some(_) => Owner::Shared,
                };
                self.of.insert(*c, o);
            }
            stack.extend(k.trees.iter().map(|&sub| (sub, below_shared)));
        }
        Ok(())
    }
}

/// Decoded trees, each read once.
struct KidsCache<'a> {
    store: &'a Store,
    trees: HashMap<ObjectId, std::rc::Rc<TreeKids>>,
    /// Chunk lengths as trees record them.
    chunk_len: HashMap<ObjectId, u32>,
}

impl KidsCache<'_> {
    fn get(&mut self, t: ObjectId, progress: &Progress) -> Result<std::rc::Rc<TreeKids>> {
        if let Some(k) = self.trees.get(&t) {
            return Ok(std::rc::Rc::clone(k));
        }
        let tree = self.store.read_tree(&t)?;
        progress.add_items(1);
        let mut k = TreeKids {
            trees: Vec::new(),
            chunks: Vec::new(),
        };
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks } => {
                    for c in chunks {
                        k.chunks.push((c.id, c.len));
                        self.chunk_len.insert(c.id, c.len);
                    }
                }
                EntryKind::Dir { tree, .. } => k.trees.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
        let k = std::rc::Rc::new(k);
        self.trees.insert(t, std::rc::Rc::clone(&k));
        Ok(k)
    }
}

/// Computes the figures of `scope`.
///
/// # Errors
/// `NotFound` for a checkpoint or branch the scope names that has no checkpoints; a tree that
/// does not read (run `verify`); I/O listing the store.
pub fn stats(store: &Store, scope: &StatsScope) -> Result<StatsReport> {
    let records = load_records(store)?;
    let branch_names: Vec<String> = {
        let mut v: Vec<String> = records.iter().map(|(_, c)| c.branch.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let branch_index: HashMap<&str, usize> = branch_names
        .iter()
        .enumerate()
        .map(|(i, b)| (b.as_str(), i))
        .collect();
    let selected = select(store, scope, &records)?;
    let progress = Progress::items("stats", "trees", None);
    let mut kids = KidsCache {
        store,
        trees: HashMap::new(),
        chunk_len: HashMap::new(),
    };
    // Three groupings: by checkpoint, by branch, and selected (0) against the rest (1).
    let mut by_checkpoint = Owners::new();
    let mut by_branch = Owners::new();
    let mut by_selection = Owners::new();
    let is_selected: Vec<bool> = {
        let mut v = vec![false; records.len()];
        for &i in &selected {
            v[i] = true;
        }
        v
    };
    for (i, (_, c)) in records.iter().enumerate() {
        for r in c.roots.values() {
            by_checkpoint.visit(&mut kids, r.tree, i, &progress)?;
            by_branch.visit(
                &mut kids,
                r.tree,
                branch_index[c.branch.as_str()],
                &progress,
            )?;
            by_selection.visit(&mut kids, r.tree, usize::from(!is_selected[i]), &progress)?;
        }
    }
    progress.finish();
    let mut disk: HashMap<ObjectId, u64> = HashMap::new();
    let mut on_disk = |id: &ObjectId| -> u64 {
        *disk
            .entry(*id)
            .or_insert_with(|| store.object_file_size(id).unwrap_or(0))
    };
    // Unique figures per owner index.
    let tally = |owners: &Owners, on_disk: &mut dyn FnMut(&ObjectId) -> u64| {
        let mut content: HashMap<usize, u64> = HashMap::new();
        let mut stored: HashMap<usize, u64> = HashMap::new();
        for (id, o) in &owners.of {
            if let Owner::One(w) = o {
                if let Some(len) = kids.chunk_len.get(id) {
                    *content.entry(*w).or_default() += u64::from(*len);
                }
                *stored.entry(*w).or_default() += on_disk(id);
            }
        }
        (content, stored)
    };
    let (ck_content, ck_stored) = tally(&by_checkpoint, &mut on_disk);
    let (br_content, br_stored) = tally(&by_branch, &mut on_disk);
    let (sel_content, sel_stored) = tally(&by_selection, &mut on_disk);

    let labels = store.list_labels()?;
    let logical = |c: &Checkpoint| c.roots.values().map(|r| r.bytes).sum::<u64>();
    let files = |c: &Checkpoint| c.roots.values().map(|r| r.files).sum::<u64>();
    let checkpoints: Vec<CheckpointFigures> = selected
        .iter()
        .map(|&i| {
            let (id, c) = &records[i];
            CheckpointFigures {
                id: *id,
                branch: c.branch.clone(),
                time_ns: c.time_ns,
                time_rfc3339: crate::text::time::format_rfc3339(c.time_ns),
                labels: crate::history::timeline::labels_of(&labels, id),
                files: files(c),
                logical_bytes: logical(c),
                unique_bytes: ck_content.get(&i).copied().unwrap_or(0),
                unique_stored_bytes: ck_stored.get(&i).copied().unwrap_or(0),
            }
        })
        .collect();
    let mut branches: BTreeMap<&str, BranchFigures> = BTreeMap::new();
    for &i in &selected {
        let c = &records[i].1;
        let b = branch_index[c.branch.as_str()];
        let row = branches
            .entry(c.branch.as_str())
            .or_insert_with(|| BranchFigures {
                name: c.branch.clone(),
                checkpoints: 0,
                logical_bytes: 0,
                unique_bytes: br_content.get(&b).copied().unwrap_or(0),
                unique_stored_bytes: br_stored.get(&b).copied().unwrap_or(0),
            });
        row.checkpoints += 1;
        row.logical_bytes += logical(c);
    }
    // The selection's distinct objects: those owned by 0 alone or shared with the rest.
    let mut sel = SelectionFigures {
        checkpoints: selected.len() as u64,
        unique_bytes: sel_content.get(&0).copied().unwrap_or(0),
        unique_stored_bytes: sel_stored.get(&0).copied().unwrap_or(0),
        ..Default::default()
    };
    for &i in &selected {
        sel.files += files(&records[i].1);
        sel.logical_bytes += logical(&records[i].1);
    }
    let mut reached_by_selection: HashMap<ObjectId, bool> = HashMap::new();
    for &i in &selected {
        for r in records[i].1.roots.values() {
            mark_reached(&mut kids, r.tree, &mut reached_by_selection)?;
        }
    }
    for (id, is_tree) in &reached_by_selection {
        if *is_tree {
            sel.trees += 1;
        } else {
            sel.chunks += 1;
            sel.content_bytes += kids.chunk_len.get(id).map_or(0, |l| u64::from(*l));
        }
        sel.stored_bytes += on_disk(id);
    }
    sel.dedup_ratio = if sel.content_bytes == 0 {
        1.0
    } else {
        sel.logical_bytes as f64 / sel.content_bytes as f64
    };
    let figures = store_figures(store, records.len())?;
    Ok(StatsReport {
        store: figures,
        selected: sel,
        branches: branches.into_values().collect(),
        checkpoints,
    })
}

/// Every checkpoint record that reads (one that does not is left out, with a warning),
/// oldest first.
fn load_records(store: &Store) -> Result<Vec<(ObjectId, Checkpoint)>> {
    let mut records: Vec<(ObjectId, Checkpoint)> = Vec::new();
    for id in store.list_checkpoints()? {
        match store.read_checkpoint(&id) {
            Ok(c) => records.push((id, c)),
            Err(e) => log::warn!("stats: checkpoint {id} left out: {e}"),
        }
    }
    records.sort_by(|a, b| a.1.time_ns.cmp(&b.1.time_ns).then(a.0.cmp(&b.0)));
    Ok(records)
}

/// The indexes in `records` of the checkpoints `scope` selects.
///
/// # Errors
/// `NotFound` for a checkpoint or branch the scope names that has no checkpoints.
fn select(
    store: &Store,
    scope: &StatsScope,
    records: &[(ObjectId, Checkpoint)],
) -> Result<Vec<usize>> {
    let line: std::collections::HashSet<ObjectId> = match scope {
        StatsScope::Branch(b) => crate::history::timeline::history(store, Some(b))?
            .items
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
        _ => Default::default(),
    };
    let selected: Vec<usize> = (0..records.len())
        .filter(|&i| match scope {
            StatsScope::All => true,
            StatsScope::Checkpoint(id) => records[i].0 == *id,
            StatsScope::Branch(_) => line.contains(&records[i].0),
        })
        .collect();
    match scope {
        StatsScope::Checkpoint(id) if selected.is_empty() => {
            return Err(Error::NotFound(format!("checkpoint {id}")));
        }
        StatsScope::Branch(b) if selected.is_empty() => {
            return Err(Error::NotFound(format!("branch {b} has no checkpoints")));
        }
        _ => {}
    }
    Ok(selected)
}

/// The figures of the whole store: checkpoints, branches, object files and their bytes.
fn store_figures(store: &Store, checkpoints: usize) -> Result<StoreFigures> {
    let mut figures = StoreFigures {
        checkpoints: checkpoints as u64,
        branches: store.list_branches()?.len() as u64,
        compressed: store.compressed(),
        ..Default::default()
    };
    for (path, _) in crate::store::object::object_files(store)? {
        figures.objects += 1;
        figures.stored_bytes += std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
    }
    Ok(figures)
}

/// Every object below `tree` into `seen` (true for trees), each tree walked once.
fn mark_reached(
    kids: &mut KidsCache<'_>,
    tree: ObjectId,
    seen: &mut HashMap<ObjectId, bool>,
) -> Result<()> {
    let mut stack = vec![tree];
    let hidden = Progress::hidden();
    while let Some(t) = stack.pop() {
        if seen.insert(t, true).is_some() {
            continue;
        }
        let k = kids.get(t, &hidden)?;
        for (c, _) in &k.chunks {
            seen.insert(*c, false);
        }
        stack.extend(k.trees.iter().copied());
    }
    Ok(())
}
