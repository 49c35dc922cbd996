//! Folding a workspace's upper layer into its base while it stays mounted, so the bytes a
//! checkpoint recorded are not kept twice (in the upper layer and in the store) for the rest
//! of a session (see docs/workspaces.md).
//!
//! After a checkpoint the upper layer holds only what the new head records. When no process
//! is inside the workspace (no cwd, root, open file or mapping under a mountpoint: see
//! [`holders`](super::holders)), the fold remounts each root with the head as the lower
//! layer and a fresh upper, at the cost of a switch:
//!
//! 1. every overlay is made read-only in place (a process that got in since the scan and
//!    opened a file for writing makes this fail: the fold waits), and the scan is repeated;
//! 2. the upper layers are checked to hold nothing but what the head records (the dry-run
//!    merge of `dirty`, cheap right after a checkpoint: its stat caches are fresh);
//! 3. one rename takes `upper/B` (every root's upper, and `base.json`) to
//!    `upper/.folded/B-<ns>`: the commit point. Before it the workspace is as it was; after
//!    it, with no `upper/B`, the branch's base is its head, so a crash leaves a workspace
//!    that `umount` and `mount --branch B` resume with nothing lost;
//! 4. fresh uppers are made over the head, empty but for the files a fold past its budget
//!    keeps (the hot set, moved over from the taken upper: see [`hot`]); each old overlay is
//!    moved aside (under `Store::detached_dir`) and the new one mounted at the mountpoint;
//! 5. a background process detaches the old overlays and removes `upper/.folded/B-<ns>`
//!    (gc removes one a crash left, as an upper of no branch).
//!
//! While someone is inside, nothing is folded and `status` reports the upper layer's bytes
//! waiting, and who holds them; the fold happens at the next checkpoint with nobody inside,
//! or when the workspace switches away from the branch (the upper of the branch left behind
//! is then dropped if its head records all of it, see `switch`).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::Store;
use crate::text::time::now_ns;

use super::checkpoint::{first_excluded, is_dirty, Hold};
use super::holders::{
    holders, is_busy, mount_in_use, mounted_elsewhere, set_mount_readonly, Holder,
};
use super::hot;
use super::overlay;
use super::plan::{mount_root, plan_roots, MountOptions};
use super::state::{
    is_live, require_branch, source_name, state, write_json, write_mount_state, UpperBase,
    WorkspaceState,
};
use super::upper::{detach_and_remove, drop_head_caches, folded_dir, reap_folded, upper_usage};
use super::warm;

/// What a fold did, or why it waits.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FoldReport {
    /// The upper layer was folded into the base: the base is the head, and the upper holds
    /// only the kept files.
    pub folded: bool,
    /// Files and bytes of the upper layer folded (`folded`, kept ones included) or waiting
    /// to be.
    pub upper_files: u64,
    pub upper_bytes: u64,
    /// Files and bytes a fold past its budget kept in the fresh upper (see `hot`).
    pub kept_files: u64,
    pub kept_bytes: u64,
    /// Who is inside, when the fold waits for them.
    pub holders: Vec<Holder>,
    /// Why nothing was folded, when it was not for `holders`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Folds `branch`'s mounted workspace (see the module doc); a workspace whose base is its
/// head has nothing to fold.
///
/// A failure before the commit point leaves the workspace as it was and is reported as the
/// `reason` nothing was folded.
///
/// # Errors
/// Reading the workspace's state; a failure after the commit point (the workspace is then
/// read-only, nothing is lost, and the error says how to resume it).
pub fn fold(store: &Store, branch: &str) -> Result<FoldReport> {
    store.mutate_live("fold", serde_json::json!({ "branch": branch }), |_| {
        let r = fold_locked(store, branch)?;
        let summary = serde_json::json!({"folded": r.folded, "upper_bytes": r.upper_bytes});
        Ok((r, summary))
    })
}

/// The bytes of `branch`'s upper layer a fold would drop, and who holds them: what `status`
/// reports for a workspace whose base is not its head.
pub fn waiting(store: &Store, st: &WorkspaceState) -> Result<FoldReport> {
    waiting_because(store, st, None)
}

/// What a checkpoint asked not to fold (`--no-fold`) leaves waiting in `branch`'s upper
/// layer, with `why` as the reason.
///
/// # Errors
/// Reading the workspace's state or the branch.
pub fn not_folded(store: &Store, branch: &str, why: &str) -> Result<FoldReport> {
    match state(store, branch)? {
        Some(st) => waiting_because(store, &st, Some(why)),
        None => Ok(FoldReport {
            reason: Some(why.to_string()),
            ..FoldReport::default()
        }),
    }
}

fn waiting_because(store: &Store, st: &WorkspaceState, why: Option<&str>) -> Result<FoldReport> {
    let (_, head) = require_branch(store, &st.branch)?;
    let reason = why.map(str::to_string);
    if st.base == head {
        // What a fold past its budget kept (`hot`): recorded, so in the store too.
        let (upper_files, upper_bytes) = match st.fold_budget {
            Some(_) => upper_usage(store, &st.branch),
            None => (0, 0),
        };
        return Ok(FoldReport {
            reason: reason.or_else(|| {
                (upper_files > 0).then(|| {
                    "the files written last, which the last fold kept (within half the fold \
                     budget) so they need no copy-up, and what changed since"
                        .to_string()
                })
            }),
            upper_files,
            upper_bytes,
            ..FoldReport::default()
        });
    }
    let (upper_files, upper_bytes) = upper_usage(store, &st.branch);
    // Kept by the fold budget: recorded, so these bytes are in the store too.
    let reason = reason.or_else(|| within_budget(st, upper_bytes));
    Ok(FoldReport {
        upper_files,
        upper_bytes,
        // Who is inside matters only to a fold that waits for them.
        holders: if why.is_some() {
            Vec::new()
        } else {
            holders(&mountpoints(st))
        },
        reason,
        ..FoldReport::default()
    })
}

/// Why a fold keeps an upper layer of `upper_bytes` (recorded bytes, kept twice) under the
/// workspace's fold budget; `None` without a budget or above it.
fn within_budget(st: &WorkspaceState, upper_bytes: u64) -> Option<String> {
    let budget = st.fold_budget.filter(|b| upper_bytes <= *b)?;
    Some(format!(
        "the upper layer ({}) is within the fold budget ({}): kept, so the files written \
         lately need no copy-up",
        crate::units::human_bytes(upper_bytes),
        crate::units::human_bytes(budget)
    ))
}

/// As [`waiting`], without the scan of who is inside (the fold does its own).
fn waiting_bytes(store: &Store, st: &WorkspaceState) -> Result<FoldReport> {
    let (_, head) = require_branch(store, &st.branch)?;
    if st.base == head {
        return Ok(FoldReport::default());
    }
    let (upper_files, upper_bytes) = upper_usage(store, &st.branch);
    Ok(FoldReport {
        upper_files,
        upper_bytes,
        ..FoldReport::default()
    })
}

fn mountpoints(st: &WorkspaceState) -> Vec<PathBuf> {
    st.roots.values().map(|r| r.mountpoint.clone()).collect()
}

/// [`fold`], with the store lock held.
pub(super) fn fold_locked(store: &Store, branch: &str) -> Result<FoldReport> {
    let not = |reason: &str, r: FoldReport| FoldReport {
        reason: Some(reason.to_string()),
        ..r
    };
    let Some(st) = state(store, branch)? else {
        return Ok(not("not mounted", FoldReport::default()));
    };
    let mut report = waiting_bytes(store, &st)?;
    let (_, head) = require_branch(store, branch)?;
    if st.base == head {
        return Ok(report);
    }
    if !is_live(store, &st)? {
        // The next mount drops an upper its head records (see `mount`).
        return Ok(not("not mounted", FoldReport::default()));
    }
    if let Some(why) = within_budget(&st, report.upper_bytes) {
        return Ok(not(&why, report));
    }
    if super::pending::is_pending(store, branch) {
        return Ok(not(
            "a merge is in progress in the workspace (see `ckptfs status`)",
            report,
        ));
    }
    let mps = mountpoints(&st);
    // The kernel tells at once whether anyone uses the overlays; /proc is scanned only then
    // (to name them, and since this process's own cwd counts for the kernel, not for us).
    let anyone = |mps: &[PathBuf]| -> Result<Vec<Holder>> {
        for mp in mps {
            if mount_in_use(mp)? {
                return Ok(holders(mps));
            }
        }
        Ok(Vec::new())
    };
    report.holders = anyone(&mps)?;
    if !report.holders.is_empty() {
        return Ok(report);
    }
    if let Some((pid, at)) = mounted_elsewhere(&mps) {
        return Ok(not(
            &format!(
                "the workspace is also mounted at {} (as pid {pid} sees it)",
                at.display()
            ),
            report,
        ));
    }
    let writable_again = |done: &[&PathBuf]| {
        for mp in done {
            if let Err(e) = set_mount_readonly(mp, false) {
                log::warn!("{e}");
            }
        }
    };
    let mut done: Vec<&PathBuf> = Vec::new();
    for mp in &mps {
        match set_mount_readonly(mp, true) {
            Ok(()) => done.push(mp),
            Err(e) => {
                writable_again(&done);
                if is_busy(&e) {
                    report.holders = holders(&mps);
                    return Ok(not("a file is open for writing", report));
                }
                return Ok(not(&e.to_string(), report));
            }
        }
    }
    // Who got in between the scan and the remount can no longer write, but waits for no one.
    report.holders = match anyone(&mps) {
        Ok(h) => h,
        Err(e) => {
            writable_again(&done);
            return Err(e);
        }
    };
    if !report.holders.is_empty() {
        writable_again(&done);
        return Ok(report);
    }
    match first_excluded(store, branch) {
        Ok(None) => {}
        Ok(Some(p)) => {
            writable_again(&done);
            return Ok(not(
                &format!("{p} is excluded from checkpoints, so only the upper layer holds it"),
                report,
            ));
        }
        Err(e) => {
            writable_again(&done);
            return Ok(not(&e.to_string(), report));
        }
    }
    match is_dirty(store, branch) {
        Ok(false) => {}
        Ok(true) => {
            writable_again(&done);
            return Ok(not("changed since the checkpoint", report));
        }
        Err(e) => {
            writable_again(&done);
            return Ok(not(&e.to_string(), report));
        }
    }
    // Past the budget, the files written last (up to half of it) stay in the upper layer;
    // without one nothing is kept, and nothing is read to choose.
    let budget = st.fold_budget.map_or(0, |b| b / 2);
    let hot = if budget == 0 {
        Vec::new()
    } else {
        let roots: Vec<String> = st.roots.keys().cloned().collect();
        // When the last turn started: the checkpoint before the head (0 when unreadable).
        let turn_start = store
            .read_checkpoint(&head)
            .ok()
            .and_then(|c| c.parents.first().copied())
            .and_then(|p| store.read_checkpoint(&p).ok())
            .map_or(0, |c| c.time_ns);
        hot::pick(store, branch, &roots, budget, turn_start)
    };
    reap_folded(store);
    let now = now_ns();
    let trash = folded_dir(store).join(format!("{branch}-{now}"));
    let taken = (|| {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(folded_dir(store))
            .map_err(|e| Error::io(folded_dir(store), e))?;
        atomic::rename(&store.upper_branch_dir(branch), &trash)
    })();
    if let Err(e) = taken {
        writable_again(&done);
        return Ok(not(&e.to_string(), report));
    }
    let kept = remount_over_head(store, &st, head, now, &trash, &hot)?;
    report.folded = true;
    report.kept_files = kept.files;
    report.kept_bytes = kept.bytes;
    Ok(report)
}

/// The fold past its commit point (the upper taken out of the branch): the base becomes the
/// head, and the overlays are mounted again over it with a fresh upper holding only the
/// `hot` files carried over from the old one, the old overlays set aside and detached in the
/// background. A failure here says how to resume (see the module doc).
fn remount_over_head(
    store: &Store,
    st: &WorkspaceState,
    head: ObjectId,
    now: i64,
    trash: &Path,
    hot: &[hot::Hot],
) -> Result<hot::Kept> {
    let branch = st.branch.as_str();
    // From here the base is the head (see the module doc): failures say how to resume.
    let resume = |e: Error| {
        Error::Invalid(format!(
            "folding the workspace of branch {branch} failed half-way ({e}); it is read-only \
             and nothing is lost: run `ckptfs umount` and `ckptfs mount --branch {branch}`"
        ))
    };
    atomic::sync_path(&store.upper_base_dir()).map_err(resume)?;
    write_json(&store.upper_base_path(branch), &UpperBase { base: head }).map_err(resume)?;
    let opts = MountOptions {
        branch: branch.to_string(),
        roots: st.roots.keys().cloned().collect(),
        relocate: st
            .roots
            .iter()
            .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
            .collect(),
        hold: Hold {
            cgroups: st.freeze_cgroups.clone(),
            filesystem: st.freeze_fs,
        },
        lower_cache_bytes: None,
        kill: false,
        fold_budget: st.fold_budget,
    };
    let roots = plan_roots(store, branch, &head, &opts).map_err(resume)?;
    // Before the new overlays exist: an upper layer changes only while nothing mounts it.
    let kept = hot::carry(store, trash, &roots, &head, hot);
    let src = source_name(store, branch);
    let mut asides = Vec::new();
    for (name, r) in &roots {
        let aside = store.detached_overlay_path(branch, name, now);
        fs::create_dir_all(&aside).map_err(|e| resume(Error::io(&aside, e)))?;
        overlay::move_mount(&r.mountpoint, &aside).map_err(resume)?;
        if let Err(e) = mount_root(store, &src, r) {
            // Put the old (read-only) tree back rather than leave the path empty.
            if let Err(m) = overlay::move_mount(&aside, &r.mountpoint) {
                log::warn!("{m}");
            }
            return Err(resume(e));
        }
        asides.push(aside);
    }
    write_mount_state(
        store,
        &WorkspaceState {
            base: head,
            roots,
            ..st.clone()
        },
    )
    .map_err(resume)?;
    let mountpoints: Vec<PathBuf> = st.roots.values().map(|r| r.mountpoint.clone()).collect();
    warm::spawn(store, &mountpoints);
    // They described the upper that went (`carry` saved the kept files' entries apart).
    drop_head_caches(store, &head, &opts.roots);
    for root in &opts.roots {
        // What the last fold kept stood on the old base, which nothing mounts any more.
        store.drop_kept_statcache(&st.base, root);
    }
    detach_and_remove(&asides, Some(trash));
    Ok(kept)
}

/// What `recover` does after a fold was interrupted (its RUNNING marker's `args`): before the
/// commit point (the branch still has its upper), the overlays made read-only are made
/// writable again; after it, a read-only overlay stands on an upper the fold took, so it
/// stays read-only and the action says how to resume (nothing is lost either way).
///
/// # Errors
/// Reading the workspace's state; remounting.
pub fn roll_back_fold(store: &Store, args: &serde_json::Value) -> Result<Vec<String>> {
    let Some(branch) = args.get("branch").and_then(|b| b.as_str()) else {
        return Ok(Vec::new());
    };
    let Some(st) = state(store, branch)? else {
        return Ok(Vec::new());
    };
    let recorded = super::state::read_json::<UpperBase>(&store.upper_base_path(branch))?;
    let before_commit = recorded.is_some_and(|b| b.base == st.base);
    let src = source_name(store, branch);
    let mut actions = Vec::new();
    for r in st.roots.values() {
        let ours = crate::fs::mountinfo::mount_at(&r.mountpoint)?.is_some_and(|m| m.source == src);
        let readonly = nix::sys::statvfs::statvfs(&r.mountpoint)
            .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
        if !ours || !readonly {
            continue;
        }
        if before_commit {
            set_mount_readonly(&r.mountpoint, false)?;
            actions.push(format!(
                "made the workspace at {} writable again (its fold was interrupted)",
                r.mountpoint.display()
            ));
        } else {
            actions.push(format!(
                "the workspace at {} stays read-only (its fold was interrupted after taking \
                 the upper layer, which its checkpoint records): run `ckptfs umount {}` and \
                 `ckptfs mount {} --branch {branch}`",
                r.mountpoint.display(),
                r.mountpoint.display(),
                store.root().display()
            ));
        }
    }
    Ok(actions)
}
