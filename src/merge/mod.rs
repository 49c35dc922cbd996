//! Three-way merge of branches (`ckptfs merge`): the base is the nearest common ancestor in
//! the checkpoint graph; trees are merged path by path, skipping subtrees whose ids agree, and
//! content changed on both sides goes to a driver chosen by what it is (text, append-only,
//! SQLite), or is a named conflict. See docs/merge.md.
//!
//! - [`base`]: the merge base.
//! - `tree`: the walk over the three trees; `content`: the drivers' dispatch and the stored
//!   result; `text`, [`sqlite`], `wal`: the drivers.
//!
//! A merge is one store mutation: the merged trees and files are written as objects, then one
//! checkpoint with two parents (ours first) is published on the target branch, which moves
//! from ours to it (compare-and-swap). Nothing is recorded while a conflict is open; a crash
//! leaves the old head (objects no record names are gc's).

mod apply;
pub mod base;
mod content;
mod live;
pub mod sqlite;
mod text;
mod tree;
mod wal;

use std::collections::BTreeMap;

use serde::Serialize;

pub use apply::Applied;
pub use content::Driver;
use content::{ContentMerger, DriverRules, Scratch};
pub use live::{abort, AbortReport, WorkspaceMerge};
pub use sqlite::RowConflict;
use tree::TreeMerge;

use crate::error::{Error, Result};
use crate::history::diff::Side;
use crate::id::ObjectId;
use crate::store::checkpoint::{Annotations, Checkpoint, RootRecord, Stats};
use crate::store::object::ObjectBatch;
use crate::store::tree::{Entry, EntryKind};
use crate::store::Store;
use crate::text::time::now_ns;

/// Which side `--take` keeps where both changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Take {
    Ours,
    Theirs,
}

/// When a fast-forward is allowed (`git merge --ff`, `--no-ff`, `--ff-only`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FastForward {
    #[default]
    Allow,
    Never,
    Only,
}

/// What `ckptfs merge` does.
#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// The branch merged into ("ours").
    pub into: String,
    /// What is merged in ("theirs"): a branch, a label or a checkpoint id.
    pub source: String,
    pub dry_run: bool,
    pub take: Option<Take>,
    /// `ROOT/PATH`s `--take` applies to (all conflicts when empty).
    pub take_paths: Vec<String>,
    pub message: Option<String>,
    pub fast_forward: FastForward,
}

/// A path the merge changes in ours.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Step {
    /// `ROOT/PATH`.
    pub path: String,
    /// "added", "removed", "modified", "renamed" (theirs' change taken), "merged" (both
    /// sides' changes combined by `driver`).
    pub how: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// For "renamed": the old `ROOT/PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// A path both sides changed in ways that do not combine.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Conflict {
    pub path: String,
    /// "content", "add-add", "modify-delete", "type", "symlink", "rename", "mode", "owner",
    /// "xattr", "root".
    pub kind: String,
    pub detail: String,
    /// SQLite rows (table and primary key) in conflict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<RowConflict>,
    /// The side `--take` kept, when it resolved this conflict.
    pub resolved: Option<Take>,
    /// Merged into a workspace, the file was left there with git's conflict markers.
    #[serde(skip)]
    pub markers: bool,
}

/// What a merge did or would do.
#[derive(Clone, Debug, Serialize)]
pub struct MergeReport {
    pub into: String,
    pub source: String,
    pub ours: ObjectId,
    pub theirs: ObjectId,
    pub base: Option<ObjectId>,
    /// Other candidate bases (criss-cross histories); the newest was used.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_bases: Vec<ObjectId>,
    /// "up-to-date", "fast-forward", "merged", "conflicts".
    pub outcome: String,
    pub dry_run: bool,
    /// The checkpoint recorded (the merge, or theirs for a fast-forward); none in a dry run
    /// or with conflicts.
    pub checkpoint: Option<ObjectId>,
    pub steps: Vec<Step>,
    pub conflicts: Vec<Conflict>,
    /// Merged into a mounted workspace: what was written there (see [`live`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceMerge>,
}

impl MergeReport {
    /// Conflicts `--take` did not resolve.
    pub fn open_conflicts(&self) -> usize {
        self.conflicts
            .iter()
            .filter(|c| c.resolved.is_none())
            .count()
    }
}

/// `ckptfs merge`: merges `source` into branch `into`.
///
/// # Errors
/// `NotFound` for an unknown branch or source; `Conflict` when the branch is mounted, has
/// un-checkpointed changes, or moved meanwhile; `Usage` for `--ff-only` when a fast-forward
/// is not possible; a tree or chunk that does not read.
pub fn merge(store: &Store, opts: &MergeOptions) -> Result<MergeReport> {
    let branch = store
        .read_branch(&opts.into)?
        .ok_or_else(|| Error::NotFound(format!("branch {}", opts.into)))?;
    let ours = branch
        .head
        .ok_or_else(|| Error::NotFound(format!("branch {} has no checkpoint yet", opts.into)))?;
    let theirs = store.resolve(&opts.source)?;
    if let Some(p) = crate::workspace::pending::read(store, &opts.into)? {
        if opts.take.is_some() && !opts.dry_run && p.theirs == theirs {
            return take_pending(store, opts, p);
        }
        live::check_clean(store, &opts.into)?;
    }
    let found = base::merge_base(store, ours, theirs)?;
    let mut report = MergeReport {
        into: opts.into.clone(),
        source: opts.source.clone(),
        ours,
        theirs,
        base: found.id,
        other_bases: found.others,
        outcome: String::new(),
        dry_run: opts.dry_run,
        checkpoint: None,
        steps: Vec::new(),
        conflicts: Vec::new(),
        workspace: None,
    };
    if found.id == Some(theirs) {
        report.outcome = "up-to-date".into();
        return Ok(report);
    }
    let ff = found.id == Some(ours) && opts.fast_forward != FastForward::Never;
    if opts.fast_forward == FastForward::Only && !ff {
        return Err(Error::Usage(format!(
            "{} cannot be fast-forwarded to {} (--ff-only): they diverged",
            opts.into, opts.source
        )));
    }
    if opts.dry_run {
        return plan_only(store, opts, report, ff);
    }
    if crate::workspace::is_mounted(store, &opts.into)? {
        return merge_mounted(store, opts, report, ff);
    }
    let args = serde_json::json!({"into": opts.into, "source": opts.source, "theirs": theirs});
    store.mutate("merge", args, |_| {
        crate::workspace::release_head(store, &opts.into)?;
        if ff {
            store.advance_branch(&opts.into, Some(ours), theirs)?;
            report.outcome = "fast-forward".into();
            report.checkpoint = Some(theirs);
            report.steps = fast_forward_steps(store, ours, theirs)?;
            let summary = serde_json::json!({"fast_forward": theirs});
            return Ok((report, summary));
        }
        let batch = ObjectBatch::new(store);
        let merged = three_way(store, &batch, opts, &mut report, false)?;
        if report.open_conflicts() > 0 {
            batch.abandon();
            report.outcome = "conflicts".into();
            return Ok((report, serde_json::json!({"conflicts": true})));
        }
        batch.commit()?;
        let id = publish(store, opts, &report, merged)?;
        report.outcome = "merged".into();
        report.checkpoint = Some(id);
        Ok((report, serde_json::json!({"checkpoint": id})))
    })
}

/// A merge into a mounted workspace (see [`live`]): written into it; recorded at once by a
/// checkpoint when nothing conflicts, else left in progress.
fn merge_mounted(
    store: &Store,
    opts: &MergeOptions,
    mut report: MergeReport,
    ff: bool,
) -> Result<MergeReport> {
    let args = serde_json::json!({"into": opts.into, "source": opts.source,
        "theirs": report.theirs, "workspace": true});
    let mut r = store.mutate("merge", args, |_| {
        live::check_clean(store, &opts.into)?;
        if ff {
            report.steps = fast_forward_steps(store, report.ours, report.theirs)?;
        }
        let w = live::merge_into_workspace(store, opts, &mut report, ff)?;
        report.workspace = Some(w);
        let summary = serde_json::json!({"outcome": report.outcome});
        Ok((report, summary))
    })?;
    if r.outcome == "merged" {
        let o = crate::workspace::CheckpointOptions {
            label: None,
            message: "",
            hold: &crate::workspace::Hold::default(),
            exclude: &[],
            allow_empty: false,
            annotations: &Annotations::default(),
        };
        let c = crate::workspace::checkpoint(store, &opts.into, &o, None)?;
        r.checkpoint = Some(c.id);
        if let Some(w) = &mut r.workspace {
            w.in_progress = crate::workspace::pending::is_pending(store, &opts.into);
        }
    }
    if r.checkpoint.is_some() {
        // As after `ckptfs checkpoint`: the recorded bytes leave the upper layer if nobody
        // is inside (docs/workspaces.md).
        crate::workspace::fold(store, &opts.into)?;
    }
    Ok(r)
}

/// `merge --take` while a merge is in progress in the workspace (see
/// [`live::take_in_workspace`]).
fn take_pending(
    store: &Store,
    opts: &MergeOptions,
    mut p: crate::workspace::pending::PendingMerge,
) -> Result<MergeReport> {
    let mut report = MergeReport {
        into: opts.into.clone(),
        source: opts.source.clone(),
        ours: p.ours,
        theirs: p.theirs,
        base: p.base,
        other_bases: Vec::new(),
        outcome: String::new(),
        dry_run: false,
        checkpoint: None,
        steps: Vec::new(),
        conflicts: Vec::new(),
        workspace: None,
    };
    let args = serde_json::json!({"into": opts.into, "source": opts.source, "take": opts.take});
    store.mutate("merge", args, |_| {
        let w = live::take_in_workspace(store, opts, &mut p, &mut report)?;
        report.workspace = Some(w);
        Ok((report, serde_json::json!({"take": true})))
    })
}

/// A dry run: the same walk with a batch that writes nothing.
fn plan_only(
    store: &Store,
    opts: &MergeOptions,
    mut report: MergeReport,
    ff: bool,
) -> Result<MergeReport> {
    if ff {
        report.outcome = "fast-forward".into();
        report.steps = fast_forward_steps(store, report.ours, report.theirs)?;
        return Ok(report);
    }
    let batch = ObjectBatch::dry_run(store);
    three_way(store, &batch, opts, &mut report, false)?;
    report.outcome = if report.open_conflicts() > 0 {
        "conflicts"
    } else {
        "merged"
    }
    .into();
    Ok(report)
}

/// What a fast-forward changes: the diff from ours to theirs.
fn fast_forward_steps(store: &Store, ours: ObjectId, theirs: ObjectId) -> Result<Vec<Step>> {
    let (a, b) = (
        store.read_checkpoint(&ours)?,
        store.read_checkpoint(&theirs)?,
    );
    let opts = crate::history::diff::DiffOptions {
        paths: Vec::new(),
        renames: true,
    };
    let changes = crate::history::diff::diff_sides(
        store,
        &Side::checkpoint(&a),
        &Side::checkpoint(&b),
        &opts,
    )?;
    Ok(changes
        .into_iter()
        .filter(|c| {
            matches!(
                c.change.as_str(),
                "added" | "removed" | "renamed" | "modified"
            )
        })
        .map(|c| Step {
            path: c.path,
            how: c.change,
            driver: None,
            from: c.from,
        })
        .collect())
}

/// The merged roots and totals.
struct Merged {
    roots: BTreeMap<String, RootRecord>,
    stats: Stats,
}

fn root_entry(name: &str, r: &RootRecord) -> Entry {
    Entry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::Dir {
            tree: r.tree,
            subdirs: r.subdirs,
        },
        mode: r.mode,
        uid: r.uid,
        gid: r.gid,
        mtime_ns: r.mtime_ns,
        size: 0,
        xattrs: r.xattrs.clone(),
        ctime_ns: 0,
        ino: 0,
        nlink: 0,
    }
}

/// The walk over every root of the three checkpoints.
fn three_way(
    store: &Store,
    batch: &ObjectBatch<'_>,
    opts: &MergeOptions,
    report: &mut MergeReport,
    marked: bool,
) -> Result<Merged> {
    let ours = store.read_checkpoint(&report.ours)?;
    let theirs = store.read_checkpoint(&report.theirs)?;
    let base = match report.base {
        Some(id) => Some(store.read_checkpoint(&id)?),
        None => None,
    };
    let content = ContentMerger {
        store,
        batch,
        rules: DriverRules::new(&store.config().merge_drivers)?,
        scratch: Scratch::new(store),
        sqlite_limits: sqlite::Limits::default(),
    };
    let mut walk = TreeMerge::new(store, batch, content, opts.take, opts.take_paths.clone());
    walk.marked = marked;
    let sides = [base.as_ref(), Some(&ours), Some(&theirs)]
        .map(|c| c.map_or_else(Side::default, Side::checkpoint));
    let started = std::time::Instant::now();
    walk.follow_renames(&sides[0], &sides[1], &sides[2])?;
    log::debug!("merge: renames found in {:?}", started.elapsed());
    let mut names: Vec<&String> = ours.roots.keys().chain(theirs.roots.keys()).collect();
    names.sort();
    names.dedup();
    let mut roots = BTreeMap::new();
    for name in names {
        fn rec<'c>(c: Option<&'c Checkpoint>, name: &str) -> Option<&'c RootRecord> {
            c.and_then(|c| c.roots.get(name))
        }
        let rec = |c| rec(c, name);
        let [b, o, t] = [rec(base.as_ref()), rec(Some(&ours)), rec(Some(&theirs))]
            .map(|r| r.map(|r| root_entry(name, r)));
        let before = walk.delta;
        let Some(e) = walk.entry(name, b.as_ref(), o.as_ref(), t.as_ref())? else {
            continue;
        };
        let d = walk.delta.since(before);
        // A root ours lacks starts from theirs' record and totals.
        let from = match (rec(Some(&ours)), rec(Some(&theirs))) {
            (Some(o), _) => Some((o, d)),
            (None, Some(t)) => Some((t, tree::Totals::default())),
            (None, None) => None,
        };
        if let (Some((from, d)), EntryKind::Dir { tree, subdirs }) = (from, &e.kind) {
            roots.insert(name.clone(), root_record(&e, *tree, *subdirs, from, d));
        } else {
            walk.conflicts.push(Conflict {
                path: name.clone(),
                kind: "root".into(),
                detail: "a root is not a directory".into(),
                rows: Vec::new(),
                resolved: None,
                markers: false,
            });
        }
    }
    let (hits, misses) = walk.trees.counts();
    log::debug!(
        "merge: walked in {:?}; {misses} trees read, {hits} reads answered by the cache",
        started.elapsed()
    );
    report.steps = walk.take_steps();
    report.conflicts = std::mem::take(&mut walk.conflicts);
    let d = walk.delta;
    let mut stats = ours.stats.clone();
    stats.dirs = (stats.dirs as i64 + d.dirs).max(0) as u64;
    stats.symlinks = (stats.symlinks as i64 + d.symlinks).max(0) as u64;
    stats.files = roots.values().map(|r| r.files).sum();
    stats.bytes = roots.values().map(|r| r.bytes).sum();
    stats.new_objects = batch.new_objects();
    stats.new_bytes = batch.new_bytes();
    stats.files_read = 0;
    Ok(Merged { roots, stats })
}

/// A merged root's record: its totals are ours' plus what the merge changed under it.
fn root_record(
    e: &Entry,
    tree: ObjectId,
    subdirs: u32,
    from: &RootRecord,
    d: tree::Totals,
) -> RootRecord {
    RootRecord {
        tree,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        mtime_ns: e.mtime_ns,
        subdirs,
        files: (from.files as i64 + d.files).max(0) as u64,
        bytes: (from.bytes as i64 + d.bytes).max(0) as u64,
        xattrs: e.xattrs.clone(),
    }
}

fn publish(
    store: &Store,
    opts: &MergeOptions,
    report: &MergeReport,
    m: Merged,
) -> Result<ObjectId> {
    let message = live::message(opts);
    let c = Checkpoint {
        version: 1,
        roots: m.roots,
        parents: vec![report.ours, report.theirs],
        branch: opts.into.clone(),
        label: None,
        message,
        time_ns: now_ns(),
        stats: m.stats,
        annotations: Box::<Annotations>::default(),
    };
    store.publish_checkpoint(&c, Some(report.ours))
}
