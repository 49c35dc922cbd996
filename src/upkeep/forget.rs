//! `forget`: take checkpoints out of history so that something they captured (a secret) can
//! be purged — planned by [`plan_forget`], carried out by [`apply_forget`]. Both return the
//! same [`ForgetReport`], so `forget --dry-run` prints exactly what `forget` then does.
//!
//! **Refused** (nothing changes, one line says why and what to do first): a checkpoint that is
//! a branch head, that a label names, that a workspace stands on (`upper/B/base.json`,
//! `run/mounts/B.json`), or that a live pin holds (a mount or a view; a browse view pins every
//! checkpoint). Refs are durable: forget never moves a branch or deletes a label itself.
//!
//! **Apply**, under the exclusive store lock with a RUNNING marker and an audit line:
//! 1. a tombstone per checkpoint (`refs/forgotten/<id>.json`: id, parents, branch, time —
//!    none of its content), durable before the record goes, so `log --branch` can always step
//!    over the gap to the older history;
//! 2. the records are unlinked and `checkpoints/` synced;
//! 3. the stat caches of the forgotten checkpoints (`cache/stat/<id>-*`: paths and chunk ids)
//!    are removed;
//! 4. with `--prune`, gc's own plan, made with these checkpoints counted as gone and every
//!    other checkpoint kept whatever the retention policy: the objects only they reached are
//!    swept (plus what gc always collects). Without it the next `ckptfs gc` sweeps them.
//!
//! A crash anywhere leaves tombstones whose records may still exist (a record wins over its
//! tombstone), or records gone whose objects are garbage; rerunning `forget` finishes (a
//! checkpoint already forgotten is reported, not an error).
//!
//! **What can still hold the forgotten bytes** after `forget --prune`: another checkpoint with
//! the same content (counted in [`ForgetReport::objects_shared`]: forget the checkpoints that
//! still have the file too), the live files and upper layers of a workspace, `displaced/`
//! (kept for review: `gc --prune-displaced`), archives exported earlier, and blocks the
//! filesystem has not overwritten (unlink does not shred). Reflink snapshots in
//! `upper/B/.snapshots-ROOT/` only hold files as the branch head recorded them, and a head is
//! never forgotten.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::{file_name, list_dir};
use crate::id::{is_hex_prefix, ObjectId};
use crate::store::checkpoint::Checkpoint;
use crate::store::refs::Tombstone;
use crate::store::Store;
use crate::upkeep::gc::{self, GcOptions, GcPlan, GcReport};
use crate::upkeep::inventory;

/// What to forget.
#[derive(Clone, Debug, Default)]
pub struct ForgetOptions {
    /// Checkpoint ids or unique prefixes (labels and branch names resolve too, and are then
    /// refused: they name durable checkpoints).
    pub specs: Vec<String>,
    /// Also sweep, at once, the objects only these checkpoints reach (gc's plan).
    pub prune: bool,
}

/// One checkpoint that goes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ForgottenCheckpoint {
    pub id: ObjectId,
    pub branch: String,
    pub time: String,
    pub parents: Vec<ObjectId>,
    pub message: String,
    /// The label its record carries from `capture --label`, when that label no longer
    /// exists (records are immutable; an existing label refuses the forget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_label: Option<String>,
}

/// What forget does (plan) or did (apply): the same value for both.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ForgetReport {
    pub checkpoints: Vec<ForgottenCheckpoint>,
    /// Named but already forgotten (a tombstone and no record): nothing to do for them.
    pub already_forgotten: Vec<ObjectId>,
    /// Objects (trees and chunks) only the forgotten checkpoints reach: swept by `--prune`,
    /// or by the next `ckptfs gc`.
    pub objects_only_theirs: u64,
    /// Objects they share with checkpoints that stay (identical content elsewhere): kept.
    pub objects_shared: u64,
    /// Stat caches removed (store-relative paths).
    pub stat_caches: Vec<String>,
    /// With `--prune`: the gc that follows (the forgotten records are among its `pruned`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gc: Option<GcReport>,
}

/// The plan: the report plus the exact writes and deletions, in apply order.
#[derive(Debug)]
pub struct ForgetPlan {
    pub report: ForgetReport,
    tombstones: Vec<Tombstone>,
    records: Vec<PathBuf>,
    stat_caches: Vec<PathBuf>,
    gc: Option<GcPlan>,
}

/// Why a checkpoint cannot be forgotten, with what to do first.
fn refusals(store: &Store, ids: &BTreeSet<ObjectId>) -> Result<Vec<String>> {
    let root = store.root().display().to_string();
    let mut out = Vec::new();
    for (name, b) in store.list_branches()? {
        if let Some(h) = b.head.filter(|h| ids.contains(h)) {
            out.push(format!(
                "{} is the head of branch {name}: move the branch to another checkpoint \
                 (capture or checkpoint anew) or delete it (`ckptfs branch delete {root} {name}`) first",
                h.short()
            ));
        }
    }
    for (name, id) in store.list_labels()? {
        if ids.contains(&id) {
            out.push(format!(
                "{} has label {name}: delete the label first (`ckptfs label delete {root} {name}`)",
                id.short()
            ));
        }
    }
    for (branch, id) in inventory::workspace_bases(store) {
        if ids.contains(&id) {
            out.push(format!(
                "{} is the base of branch {branch}'s workspace (its upper layer applies to it): \
                 checkpoint the workspace first (its changes then apply to the new head)",
                id.short()
            ));
        }
    }
    for p in store.live_pins()? {
        if p.all {
            out.push(format!(
                "a live {} (pid {}) pins every checkpoint: unmount it first",
                p.owner, p.pid
            ));
            continue;
        }
        for id in p.checkpoints.iter().filter(|id| ids.contains(id)) {
            out.push(format!(
                "{} is pinned by a live {} (pid {}): unmount it first",
                id.short(),
                p.owner,
                p.pid
            ));
        }
    }
    out.dedup();
    Ok(out)
}

/// A spec that names a checkpoint already forgotten: a full id or a unique prefix of a
/// tombstone whose record is gone.
fn forgotten_match(store: &Store, spec: &str) -> Result<Option<ObjectId>> {
    if !is_hex_prefix(spec) || spec.len() < 4 {
        return Ok(None);
    }
    let lower = spec.to_ascii_lowercase();
    let matches: Vec<ObjectId> = store
        .list_tombstones()?
        .into_iter()
        .filter(|id| id.to_hex().starts_with(&lower))
        .collect();
    match matches.as_slice() {
        [one] => Ok(Some(*one)),
        _ => Ok(None),
    }
}

/// Computes what forget would do. The caller holds the exclusive store lock.
///
/// # Errors
/// `NotFound` for a spec that names nothing; `Conflict` (every reason in one line) for a
/// checkpoint that must not be forgotten; `Corrupt` when a record or tree cannot be read
/// (as gc: it refuses to sweep what it cannot see).
pub fn plan_forget(store: &Store, opts: &ForgetOptions) -> Result<ForgetPlan> {
    if opts.specs.is_empty() {
        return Err(Error::Usage("forget needs at least one CHECKPOINT".into()));
    }
    let mut ids = BTreeSet::new();
    let mut already = BTreeSet::new();
    for spec in &opts.specs {
        match store.resolve(spec) {
            Ok(id) => {
                ids.insert(id);
            }
            Err(Error::NotFound(m)) => match forgotten_match(store, spec)? {
                Some(id) => {
                    already.insert(id);
                }
                None => return Err(Error::NotFound(m)),
            },
            Err(e) => return Err(e),
        }
    }
    let refused = refusals(store, &ids)?;
    if !refused.is_empty() {
        return Err(Error::Conflict(format!(
            "nothing was forgotten: {}",
            refused.join("; ")
        )));
    }
    let records = gc::read_records(store)?;
    let labels: BTreeSet<String> = store.list_labels()?.into_iter().map(|(n, _)| n).collect();
    let now = crate::text::time::now_ns();
    let mut report = ForgetReport {
        already_forgotten: already.into_iter().collect(),
        ..Default::default()
    };
    let mut tombstones = Vec::new();
    let mut record_paths = Vec::new();
    for id in &ids {
        let c: &Checkpoint = records
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("checkpoint {id}")))?;
        report.checkpoints.push(ForgottenCheckpoint {
            id: *id,
            branch: c.branch.clone(),
            time: crate::text::time::format_rfc3339(c.time_ns),
            parents: c.parents.clone(),
            message: c.message.clone(),
            recorded_label: c.label.clone().filter(|l| !labels.contains(l)),
        });
        tombstones.push(Tombstone {
            id: *id,
            parents: c.parents.clone(),
            branch: c.branch.clone(),
            time_ns: c.time_ns,
            forgotten_ns: now,
        });
        record_paths.push(store.checkpoint_path(id));
    }
    report
        .checkpoints
        .sort_by(|a, b| a.branch.cmp(&b.branch).then(a.time.cmp(&b.time)));

    let others: BTreeSet<ObjectId> = records
        .keys()
        .filter(|id| !ids.contains(id))
        .copied()
        .collect();
    let theirs = gc::mark_reachable(store, &records, &ids)?;
    let kept = gc::mark_reachable(store, &records, &others)?;
    report.objects_shared = theirs.iter().filter(|o| kept.contains(o)).count() as u64;
    report.objects_only_theirs = theirs.len() as u64 - report.objects_shared;

    let mut stat_caches = Vec::new();
    for p in list_dir(&store.statcache_dir())? {
        let name = file_name(&p);
        let owner = name
            .split_once('-')
            .and_then(|(hex, _)| ObjectId::parse(hex).ok());
        if owner.is_some_and(|o| ids.contains(&o)) {
            report.stat_caches.push(
                p.strip_prefix(store.root())
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .into_owned(),
            );
            stat_caches.push(p);
        }
    }

    let gc_plan = if opts.prune && !ids.is_empty() {
        let plan = gc::plan_gc(
            store,
            &GcOptions {
                forget: ids.clone(),
                ..GcOptions::default()
            },
        )?;
        report.gc = Some(plan.report.clone());
        Some(plan)
    } else {
        None
    };
    Ok(ForgetPlan {
        report,
        tombstones,
        records: record_paths,
        stat_caches,
        gc: gc_plan,
    })
}

/// Carries out a plan made under the same lock; returns its report. Order: tombstones, records
/// (then a sync of `checkpoints/`), stat caches, then gc's plan when pruning.
///
/// # Errors
/// The first failing write or deletion; what was done before it stays done (a rerun finishes).
pub fn apply_forget(store: &Store, plan: ForgetPlan) -> Result<ForgetReport> {
    for t in &plan.tombstones {
        store.write_tombstone(t)?;
    }
    for p in &plan.records {
        atomic::remove_file(p)?;
    }
    if !plan.records.is_empty() {
        atomic::sync_path(&store.checkpoints_dir())?;
    }
    for p in &plan.stat_caches {
        atomic::remove_file(p)?;
    }
    if let Some(g) = plan.gc {
        gc::apply_gc(store, g)?;
    }
    Ok(plan.report)
}

/// Plans under the exclusive lock and changes nothing: the dry run.
///
/// # Errors
/// As [`plan_forget`]; `Conflict` while an earlier operation's RUNNING marker is present.
pub fn forget_dry_run(store: &Store, opts: &ForgetOptions) -> Result<ForgetReport> {
    let _lock = store.lock_exclusive()?;
    refuse_after_crash(store)?;
    Ok(plan_forget(store, opts)?.report)
}

/// Plans and applies under one exclusive lock. A refused or impossible plan changes nothing
/// (not even the audit log); an applied one runs with a RUNNING marker and an audit line
/// naming every checkpoint forgotten.
///
/// # Errors
/// As [`plan_forget`] and [`apply_forget`], and taking the lock.
pub fn forget(store: &Store, opts: &ForgetOptions) -> Result<ForgetReport> {
    let _lock = store.lock_exclusive()?;
    refuse_after_crash(store)?;
    let plan = plan_forget(store, opts)?;
    if plan.tombstones.is_empty() {
        return Ok(plan.report); // every one was forgotten before: nothing to do, nothing to audit
    }
    let ids: Vec<ObjectId> = plan.report.checkpoints.iter().map(|c| c.id).collect();
    let args = serde_json::json!({"checkpoints": ids, "specs": opts.specs, "prune": opts.prune});
    store.run_locked("forget", args, |_| {
        let report = apply_forget(store, plan)?;
        let mut summary: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
        summary.insert("forgotten", serde_json::json!(report.checkpoints.len()));
        summary.insert(
            "already_forgotten",
            serde_json::json!(report.already_forgotten.len()),
        );
        if let Some(g) = &report.gc {
            summary.insert("objects_removed", serde_json::json!(g.objects_removed));
            summary.insert("bytes_freed", serde_json::json!(g.bytes_freed));
        }
        Ok((report, serde_json::json!(summary)))
    })
}

/// The check `Store::mutate` makes, for callers that take the lock themselves.
fn refuse_after_crash(store: &Store) -> Result<()> {
    match store.read_marker()? {
        Some(m) => Err(Error::Conflict(format!(
            "store {} has an unfinished {} (pid {}); run `ckptfs recover {}` first",
            store.root().display(),
            m.op,
            m.pid,
            store.root().display()
        ))),
        None => Ok(()),
    }
}
