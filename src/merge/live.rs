//! Merging into a mounted workspace, as `git merge` into a work tree (docs/merge.md, "Into a
//! mounted workspace"):
//!
//! 1. refused while the workspace has un-checkpointed changes, or a merge is in progress;
//! 2. the merge is computed with conflicts *marked* (text left with git's markers, a database
//!    with every row that merged, a file deleted on one side left as the other side has it);
//! 3. the merge is recorded as in progress (`workspace::pending`, `applied: false`), its
//!    changes are written into the workspace through the overlays ([`super::apply`]), the
//!    store's filesystem is synced, and the record says `applied: true`;
//! 4. with no conflict, the CLI's next step is the checkpoint that records it (two
//!    parents); with conflicts, whoever resolves them runs `ckptfs checkpoint` (or
//!    `merge --take ours|theirs [-- PATH...]`, which writes one side and marks the path
//!    resolved; or `merge --abort`, which puts the workspace back as it was).
//!
//! A fast-forward writes theirs' changes into the workspace and then moves the branch.
//! A crash anywhere loses nothing: before the branch moves, the workspace holds the merge as
//! un-checkpointed changes, and a record that never reached `applied` is not recorded as a
//! merge (`--abort` puts the workspace back).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::apply::{apply, apply_paths, check_roots, Applied};
use super::{three_way, MergeOptions, MergeReport, Take};
use crate::error::{Error, Result};
use crate::history::diff::Side;
use crate::id::ObjectId;
use crate::store::object::ObjectBatch;
use crate::store::Store;
use crate::workspace::pending::{self, PendingConflict, PendingMerge};
use crate::workspace::{self, WorkspaceState};

/// What a merge did to a mounted workspace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkspaceMerge {
    /// Root name -> mountpoint.
    pub mountpoints: BTreeMap<String, PathBuf>,
    /// Entries written into and removed from the workspace.
    #[serde(flatten)]
    pub applied: Applied,
    /// A merge is in progress in the workspace: conflicts to resolve, then `ckptfs
    /// checkpoint` records it (`merge --abort` gives up).
    pub in_progress: bool,
}

fn mountpoints(st: &WorkspaceState) -> BTreeMap<String, PathBuf> {
    st.roots
        .iter()
        .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
        .collect()
}

fn side_of(roots: impl IntoIterator<Item = (String, ObjectId)>) -> Side {
    Side {
        roots: roots.into_iter().collect(),
        ..Side::default()
    }
}

/// The mounted workspace of `branch`.
fn mounted(store: &Store, branch: &str) -> Result<WorkspaceState> {
    match workspace::state(store, branch)? {
        Some(st) if workspace::is_live(store, &st)? => Ok(st),
        _ => Err(Error::Conflict(format!(
            "branch {branch} is not mounted: mount its workspace (`ckptfs mount --branch \
             {branch}`) first"
        ))),
    }
}

/// Refuses a merge into `branch`'s workspace while one is in progress or it has
/// un-checkpointed changes.
pub(super) fn check_clean(store: &Store, branch: &str) -> Result<()> {
    if let Some(p) = pending::read(store, branch)? {
        return Err(Error::Conflict(format!(
            "a merge of {} is in progress in the workspace of {branch}: resolve its conflicts \
             and run `ckptfs checkpoint`, or `ckptfs merge --abort`",
            p.source
        )));
    }
    if let Some(path) = workspace::first_change(store, branch)? {
        return Err(Error::Conflict(format!(
            "the workspace of {branch} has un-checkpointed changes ({path}): run `ckptfs \
             checkpoint` first (a merge writes into the workspace)"
        )));
    }
    Ok(())
}

/// Merges into the mounted workspace of `opts.into` (caller holds the lock and checked
/// [`check_clean`]); `report` holds ours, theirs and the base.
pub(super) fn merge_into_workspace(
    store: &Store,
    opts: &MergeOptions,
    report: &mut MergeReport,
    ff: bool,
) -> Result<WorkspaceMerge> {
    let st = mounted(store, &opts.into)?;
    let ours = store.read_checkpoint(&report.ours)?;
    let from = Side::checkpoint(&ours);
    let mut out = WorkspaceMerge {
        mountpoints: mountpoints(&st),
        ..WorkspaceMerge::default()
    };
    if ff {
        let theirs = store.read_checkpoint(&report.theirs)?;
        let to = Side::checkpoint(&theirs);
        check_roots(&from, &to)?;
        out.applied = apply(store, &from, &to, &out.mountpoints)?;
        crate::fs::atomic::sync_filesystem(store.root())?;
        store.advance_branch(&opts.into, Some(report.ours), report.theirs)?;
        report.outcome = "fast-forward".into();
        report.checkpoint = Some(report.theirs);
        return Ok(out);
    }
    let batch = ObjectBatch::new(store);
    let merged = three_way(store, &batch, opts, report, true)?;
    batch.commit()?;
    let to = side_of(merged.roots.iter().map(|(n, r)| (n.clone(), r.tree)));
    check_roots(&from, &to)?;
    let mut p = PendingMerge {
        source: opts.source.clone(),
        theirs: report.theirs,
        ours: report.ours,
        base: report.base,
        message: message(opts),
        applied: false,
        conflicts: open_conflicts(store, &to, report)?,
    };
    pending::write(store, &opts.into, &p)?;
    out.applied = apply(store, &from, &to, &out.mountpoints)?;
    crate::fs::atomic::sync_filesystem(store.root())?;
    p.applied = true;
    pending::write(store, &opts.into, &p)?;
    out.in_progress = true;
    report.outcome = if report.open_conflicts() > 0 {
        "conflicts"
    } else {
        "merged"
    }
    .into();
    Ok(out)
}

/// The message of the merge checkpoint.
pub(super) fn message(opts: &MergeOptions) -> String {
    opts.message
        .clone()
        .unwrap_or_else(|| format!("merge {} into {}", opts.source, opts.into))
}

/// The report's open conflicts, with what the merge leaves at each path.
fn open_conflicts(store: &Store, to: &Side, report: &MergeReport) -> Result<Vec<PendingConflict>> {
    let mut out = Vec::new();
    for c in report.conflicts.iter().filter(|c| c.resolved.is_none()) {
        out.push(PendingConflict {
            path: c.path.clone(),
            kind: c.kind.clone(),
            markers: c.markers,
            left: pending::entry_key(to.entry_at(store, &c.path)?.as_ref()),
            taken: None,
        });
    }
    Ok(out)
}

/// `merge --take ours|theirs [-- PATH...]` while a merge is in progress in the workspace:
/// the merge is computed again with `--take` (the same three checkpoints), and each
/// conflict in progress at or under the paths gets the version that gives (for text, that
/// side of each conflicting hunk and both sides' clean changes), written into the workspace
/// and marked resolved. Caller holds the lock.
pub(super) fn take_in_workspace(
    store: &Store,
    opts: &MergeOptions,
    p: &mut PendingMerge,
    report: &mut MergeReport,
) -> Result<WorkspaceMerge> {
    let st = mounted(store, &opts.into)?;
    let take = opts
        .take
        .ok_or_else(|| Error::Usage("--take ours|theirs".into()))?;
    let batch = ObjectBatch::new(store);
    let merged = three_way(store, &batch, opts, report, true)?;
    batch.commit()?;
    let to = side_of(merged.roots.iter().map(|(n, r)| (n.clone(), r.tree)));
    let mut paths = Vec::new();
    for c in &mut p.conflicts {
        let wanted = opts.take_paths.is_empty()
            || opts
                .take_paths
                .iter()
                .any(|t| super::tree::under(&c.path, t));
        if wanted && c.taken.is_none() {
            paths.push(c.path.clone());
            c.taken = Some(
                match take {
                    Take::Ours => "ours",
                    Take::Theirs => "theirs",
                }
                .into(),
            );
        }
    }
    if paths.is_empty() {
        return Err(Error::NotFound(format!(
            "no conflict of the merge in progress is at or under {}",
            opts.take_paths.join(", ")
        )));
    }
    let mountpoints = mountpoints(&st);
    let applied = apply_paths(store, &to, &paths, &mountpoints)?;
    crate::fs::atomic::sync_filesystem(store.root())?;
    pending::write(store, &opts.into, p)?;
    // The report tells the merge in progress: what an earlier --take wrote is resolved too.
    for c in &mut report.conflicts {
        let taken = p
            .conflicts
            .iter()
            .find(|pc| pc.path == c.path)
            .and_then(|pc| pc.taken.as_deref());
        c.resolved = match taken {
            Some("ours") => Some(Take::Ours),
            Some("theirs") => Some(Take::Theirs),
            _ => c.resolved,
        };
    }
    report.outcome = "conflicts".into();
    Ok(WorkspaceMerge {
        mountpoints,
        applied,
        in_progress: true,
    })
}

/// What `merge --abort` did.
#[derive(Clone, Debug, Serialize)]
pub struct AbortReport {
    pub into: String,
    pub source: String,
    pub theirs: ObjectId,
    /// The checkpoint the workspace holds again (the branch head when the merge started).
    pub restored: ObjectId,
    #[serde(flatten)]
    pub applied: Applied,
}

/// `ckptfs merge --abort`: puts `branch`'s workspace back as it was before the merge in
/// progress (every change since, the merge's and any other, undone) and ends the merge.
/// Checkpoints recorded meanwhile stay in the branch's history.
///
/// # Errors
/// `NotFound` when no merge is in progress; `Conflict` when the workspace is not mounted.
pub fn abort(store: &Store, branch: &str) -> Result<AbortReport> {
    let args = serde_json::json!({ "branch": branch });
    store.mutate("merge-abort", args, |_| {
        let p = pending::read(store, branch)?.ok_or_else(|| {
            Error::NotFound(format!(
                "no merge is in progress in the workspace of {branch}"
            ))
        })?;
        let st = mounted(store, branch)?;
        let live = workspace::live_tree(store, branch)?;
        let to = Side::checkpoint(&store.read_checkpoint(&p.ours)?);
        check_roots(&live.side, &to)?;
        let applied = apply(store, &live.side, &to, &mountpoints(&st))?;
        crate::fs::atomic::sync_filesystem(store.root())?;
        pending::remove(store, branch)?;
        let r = AbortReport {
            into: branch.to_string(),
            source: p.source,
            theirs: p.theirs,
            restored: p.ours,
            applied,
        };
        let summary = serde_json::json!({"restored": p.ours});
        Ok((r, summary))
    })
}
