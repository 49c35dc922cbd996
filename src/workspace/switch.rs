//! `switch`: the workspace's mountpoints show another branch, without copying a file. The
//! old overlays are moved aside (each move recorded first, so `recover` can roll an interrupted
//! switch back) and detached in the background once the new ones are mounted, or parked
//! (`park`: kept mounted read-only, for a switch back to move them back with their inodes).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::refs::check_name;
use crate::store::refs::Branch;
use crate::store::Store;
use crate::text::time::now_ns;

use super::checkpoint::{checkpoint_locked, dirty, first_change, is_dirty, Hold};
use super::holders::{
    check_sealable, holders, mounted_elsewhere, seal, set_aside_in_use, set_mount_readonly,
    set_superblock_readonly, Holder,
};
use super::park::{self, Resume};
use super::plan::{mount_roots, plan_roots, MountOptions};
use super::state::{
    read_json, require_branch, source_name, state, upper_base, write_json, write_mount_state,
    UpperBase, WorkspaceState,
};
use super::upper::{detach_and_remove, displace_upper, drop_recorded_upper, reap_unused_detached};
use super::{lower, overlay};

/// How `switch` treats un-checkpointed changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirtyPolicy {
    Refuse,
    CheckpointFirst,
    Discard,
}

/// What a switch did.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchReport {
    pub from_branch: String,
    pub to_branch: String,
    pub checkpoint: ObjectId,
    pub created_branch: bool,
    pub checkpointed: Option<ObjectId>,
    pub displaced: Option<PathBuf>,
    /// Processes still inside the tree left behind (their cwd, a file open for reading...),
    /// with the path where the workspace showed it. Their writes there fail with EROFS.
    pub left_behind: Vec<Holder>,
    /// Always false: a switch makes the tree it takes away read-only in every mount
    /// namespace, or refuses (a file open for writing, a copy in another namespace). Kept
    /// for readers of the JSON of older builds, where a file open for writing kept it
    /// writable.
    pub left_behind_writable: bool,
    /// The upper layer of the branch left was all in its head, and went (a fold): that
    /// branch's base is now its head.
    pub folded_left: bool,
    /// The tree of the branch left stays mounted read-only, parked, for a switch back to
    /// move it back with every inode the kernel cached; its upper layer waits meanwhile.
    pub parked_left: bool,
    /// The target's parked tree was moved back (nothing was mounted afresh).
    pub resumed: bool,
    pub elapsed_ms: u64,
}

fn to_branch_differs(p: &SwitchPhase) -> bool {
    p.from.branch != p.to_branch
}

/// `h` with its path where the workspace showed it, not where its tree was set aside.
fn shown_at(mut h: Holder, moved: &[(PathBuf, PathBuf)]) -> Holder {
    for (mountpoint, aside) in moved {
        if let Ok(rest) = h.path.strip_prefix(aside) {
            h.path = mountpoint.join(rest);
            break;
        }
    }
    h
}

/// A tree a switch or a fold set aside that is still mounted because someone is inside.
#[derive(Clone, Debug, Serialize)]
pub struct LeftBehind {
    /// The branch whose tree it is.
    pub branch: String,
    /// Where it is mounted now (under `Store::detached_dir`).
    pub at: PathBuf,
    /// Writes into it fail with EROFS (false only for a tree an older build left writable).
    pub readonly: bool,
    pub holders: Vec<Holder>,
}

/// The old overlays of `store` set aside and still mounted, with who is inside each.
pub fn left_behind(store: &Store) -> Result<Vec<LeftBehind>> {
    let prefix = format!("ckptfs:{}:", store.root().display());
    let [_, legacy] = store.legacy_mount_dirs();
    let dirs = [store.detached_dir(), legacy];
    let mut out = Vec::new();
    for m in crate::fs::mountinfo::mounts()? {
        if m.fstype != "overlay" || !dirs.iter().any(|d| m.mountpoint.starts_with(d)) {
            continue;
        }
        let Some(branch) = m.source.strip_prefix(&prefix) else {
            continue;
        };
        let readonly = nix::sys::statvfs::statvfs(&m.mountpoint)
            .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
        out.push(LeftBehind {
            branch: branch.to_string(),
            holders: Vec::new(),
            at: m.mountpoint,
            readonly,
        });
    }
    // One scan of the processes for all of them.
    let all: Vec<PathBuf> = out.iter().map(|l| l.at.clone()).collect();
    for h in holders(&all) {
        if let Some(l) = out.iter_mut().find(|l| h.path.starts_with(&l.at)) {
            l.holders.push(h);
        }
    }
    Ok(out)
}

/// Progress of a switch, kept in the RUNNING marker for `recover`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SwitchPhase {
    /// The workspace as it was before the switch.
    pub from: WorkspaceState,
    pub to_branch: String,
    /// (mountpoint, where its old overlay was moved).
    pub moved: Vec<(PathBuf, PathBuf)>,
}

/// Rolls an interrupted switch back: whatever the switch mounted at the mountpoints is
/// detached, the old overlays are moved back, and the old workspace state is restored. Nothing
/// in the upper layers is touched. Returns what it did.
pub fn roll_back_switch(store: &Store, p: &SwitchPhase) -> Result<Vec<String>> {
    let mut actions = Vec::new();
    let new_src = source_name(store, &p.to_branch);
    for (mountpoint, aside) in &p.moved {
        if crate::fs::mountinfo::mount_at(mountpoint)?.is_some_and(|m| m.source == new_src) {
            overlay::detach(mountpoint)?;
            actions.push(format!(
                "detached the half-switched mount at {}",
                mountpoint.display()
            ));
        }
        // A crash while parking may have moved it on, to where the park record says.
        let from = match crate::fs::mountinfo::mount_at(aside)? {
            Some(_) => Some(aside.clone()),
            None => park::parked_path_of(store, &p.from.branch, mountpoint)
                .filter(|pp| crate::fs::mountinfo::mount_at(pp).is_ok_and(|m| m.is_some())),
        };
        if let Some(from) = from {
            overlay::move_mount(&from, mountpoint)?;
            for r in [
                set_mount_readonly(mountpoint, false),
                set_superblock_readonly(mountpoint, false),
            ] {
                if let Err(e) = r {
                    log::warn!("{e}");
                }
            }
            actions.push(format!(
                "moved the {} workspace back to {}",
                p.from.branch,
                mountpoint.display()
            ));
        }
        let _ignored = fs::remove_dir(aside);
    }
    // Sealed before the first move (a crash may have come before any): writable again.
    let old_src = source_name(store, &p.from.branch);
    for r in p.from.roots.values() {
        if crate::fs::mountinfo::mount_at(&r.mountpoint)?.is_some_and(|m| m.source == old_src) {
            if let Err(e) = set_superblock_readonly(&r.mountpoint, false) {
                log::warn!("{e}");
            }
        }
    }
    park::forget(store, &p.from.branch)?;
    let _ignored = fs::remove_file(store.workspace_state_path(&p.to_branch));
    write_mount_state(store, &p.from)?;
    actions.push(format!("workspace is on branch {} again", p.from.branch));
    Ok(actions)
}

/// Resolves a switch target: an existing branch, or a checkpoint (which gets a new branch
/// unless it is the head of exactly one branch).
/// The existing branch `target` names (a branch, or a checkpoint that exactly one branch has
/// as its head), when no new branch is asked for.
fn existing_target(store: &Store, target: &str, new_name: Option<&str>) -> Result<Option<String>> {
    if new_name.is_some() {
        return Ok(None);
    }
    if check_name("branch", target).is_ok() && store.read_branch(target)?.is_some() {
        return Ok(Some(target.to_string()));
    }
    let id = store.resolve(target)?;
    let heads: Vec<String> = store
        .list_branches()?
        .into_iter()
        .filter(|(_, b)| b.head == Some(id))
        .map(|(n, _)| n)
        .collect();
    Ok((heads.len() == 1).then(|| heads[0].clone()))
}

/// Refuses a switch to `branch` while it is mounted elsewhere (two overlays on one upper
/// layer would corrupt it; git refuses a branch checked out in another worktree the same way).
fn refuse_if_mounted(store: &Store, branch: &str) -> Result<()> {
    let Some(st) = state(store, branch)? else {
        return Ok(());
    };
    if !super::state::is_live(store, &st)? {
        return Ok(());
    }
    let at: Vec<String> = st
        .roots
        .values()
        .map(|r| r.mountpoint.display().to_string())
        .collect();
    Err(Error::Conflict(format!(
        "branch {branch} is already mounted at {}; unmount it there first (`ckptfs umount {}`), \
         or switch to a new branch forked from it (`--name NEW`)",
        at.join(", "),
        at.first().map_or("", String::as_str)
    )))
}

fn resolve_target(store: &Store, target: &str, new_name: Option<&str>) -> Result<(String, bool)> {
    if let Some(b) = existing_target(store, target, new_name)? {
        return Ok((b, false));
    }
    let id = store.resolve(target)?;
    let name = new_name.map_or_else(|| format!("from-{}", id.short()), str::to_string);
    check_name("branch", &name)?;
    if store.read_branch(&name)?.is_some() {
        return Err(Error::Conflict(format!(
            "branch {name} already exists; pick another --name"
        )));
    }
    let now = now_ns();
    store.write_branch(
        &name,
        &Branch {
            head: Some(id),
            forked_from: Some(id),
            state: "active".into(),
            created_ns: now,
            updated_ns: now,
        },
    )?;
    Ok((name, true))
}

/// `ckptfs switch`: shows `target` at the same paths, without copying files. Refuses while
/// a process would keep a writable view of the branch left (see [`switch_killing`]).
pub fn switch(
    store: &Store,
    from_branch: &str,
    target: &str,
    policy: DirtyPolicy,
    new_name: Option<&str>,
) -> Result<SwitchReport> {
    super::overlay::require_mount_rights(store, "switch")?;
    switch_killing(store, from_branch, target, policy, new_name, false)
}

/// [`switch`]; with `kill` (`switch --kill`), the processes that would keep a writable view
/// of the branch left (a file open for writing, a copy of the workspace in another mount
/// namespace: see `holders::seal`), or that still use the target's upper layer, are ended
/// instead of refusing.
pub fn switch_killing(
    store: &Store,
    from_branch: &str,
    target: &str,
    policy: DirtyPolicy,
    new_name: Option<&str>,
    kill: bool,
) -> Result<SwitchReport> {
    let t0 = std::time::Instant::now();
    // The marker names what a checkpoint first would freeze, for `recover`.
    let hold = state(store, from_branch)?
        .map(Hold::recorded)
        .unwrap_or_default();
    let args = hold.mark(
        store,
        serde_json::json!({"from": from_branch, "to": target, "name": new_name}),
    );
    lower::ensure_view(store)?;
    let report = store.mutate_live("switch", args, |m| {
        reap_unused_detached(store)?;
        let st = state(store, from_branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {from_branch}")))?;
        if let Some(b) = existing_target(store, target, new_name)? {
            if b != from_branch {
                refuse_if_mounted(store, &b)?;
            }
        }
        let (checkpointed, discard_upper) =
            settle_changes(store, from_branch, &st, policy, &hold, kill)?;
        let (to_branch, created) = resolve_target(store, target, new_name)?;
        if to_branch == from_branch && policy != DirtyPolicy::Discard {
            return Err(Error::Usage(format!(
                "the workspace is already on branch {to_branch}"
            )));
        }
        let (_, head) = require_branch(store, &to_branch)?;
        // Read-only everywhere before it moves (a write meanwhile gets EROFS, never the
        // branch left), or refused naming who would keep it writable (or, --kill, ended).
        let ours: Vec<PathBuf> = st
            .roots
            .values()
            .map(|r| r.mountpoint.clone())
            .filter(|mp| {
                crate::fs::mountinfo::mount_at(mp)
                    .is_ok_and(|m| m.is_some_and(|m| m.source == source_name(store, from_branch)))
            })
            .collect();
        // Recorded first: `recover` makes the workspace writable again after a crash here.
        let mut phase = SwitchPhase {
            from: st.clone(),
            to_branch: to_branch.clone(),
            moved: Vec::new(),
        };
        m.set_phase(serde_json::to_value(&phase).unwrap_or_default())?;
        seal(&ours, &st.freeze_cgroups, kill, "switch")?;
        // Move the old overlays out of the way (instant, even with a busy cwd inside); they are
        // detached in the background once the new ones are mounted, because tearing an
        // overlay down syncs its upper filesystem, which can take long on a busy disk.
        // Each move is recorded first, so `recover` can roll an interrupted switch back.
        let mut moved = Vec::new();
        let mut moved_roots = Vec::new();
        let switched = (|| -> Result<(Option<PathBuf>, bool)> {
            move_aside(store, &st, &mut phase, m, &mut moved, &mut moved_roots)?;
            fs::remove_file(store.workspace_state_path(from_branch))
                .map_err(|e| Error::io(store.workspace_state_path(from_branch), e))?;
            let displaced = if discard_upper {
                displace_upper(store, from_branch)?
            } else {
                None
            };
            let resumed = mount_target(store, &to_branch, head, &st, kill)?;
            Ok((displaced, resumed))
        })();
        let (displaced, resumed) = match switched {
            Ok(v) => v,
            Err(e) => {
                // Failed half-way (not crashed): put the old workspace back before reporting.
                if let Err(r) = roll_back_switch(store, &phase) {
                    log::warn!("rolling back the switch failed too: {r}");
                }
                for mp in &ours {
                    if let Err(e) = set_superblock_readonly(mp, false) {
                        log::warn!("{e}");
                    }
                }
                return Err(e);
            }
        };
        // The kernel says at once whether anyone is left; only then are they looked for.
        let left_behind = if moved.iter().any(|a| set_aside_in_use(a)) {
            holders(&moved)
        } else {
            Vec::new()
        };
        let (parked, folded) = retire_left(
            store,
            &st,
            &phase,
            &mut moved,
            &moved_roots,
            left_behind.is_empty(),
            discard_upper,
        );
        let report = SwitchReport {
            from_branch: from_branch.to_string(),
            to_branch,
            checkpoint: head,
            created_branch: created,
            checkpointed,
            displaced,
            left_behind: left_behind
                .into_iter()
                .map(|h| shown_at(h, &phase.moved))
                .collect(),
            left_behind_writable: false,
            folded_left: folded.is_some(),
            parked_left: parked,
            resumed,
            elapsed_ms: t0.elapsed().as_millis() as u64,
        };
        let summary = serde_json::to_value(&report).unwrap_or_default();
        Ok(((report, moved, folded), summary))
    })?;
    let (report, moved, folded) = report;
    // Only once the switch is recorded as done: `recover` may still need the old overlays.
    // Trees someone is still in stay mounted (set aside, read-only) until they leave: the
    // next switch, fold or umount detaches them, and `status` names who is inside.
    if report.left_behind.is_empty() {
        detach_and_remove(&moved, folded.as_deref());
    }
    Ok(report)
}

/// What the switch does with the changes the workspace holds (`policy`): refuses naming the
/// first one, checkpoints them first, or sets them aside. Returns the checkpoint recorded
/// first (if any) and whether the upper layer is to be displaced.
fn settle_changes(
    store: &Store,
    from_branch: &str,
    st: &WorkspaceState,
    policy: DirtyPolicy,
    hold: &Hold,
    kill: bool,
) -> Result<(Option<ObjectId>, bool)> {
    // One definition of dirty (see `checkpoint::dirty`): a change that the upper's stat
    // alone shows refuses at once, without reading any file; otherwise the dry-run merge
    // decides. `--checkpoint-first` of a clean workspace records nothing.
    match policy {
        DirtyPolicy::Refuse => {
            let refuse = |what: String| {
                Err(Error::Conflict(format!(
                    "workspace of branch {from_branch} has un-checkpointed changes ({what}); use --checkpoint-first or --discard"
                )))
            };
            if let Some(p) = first_change(store, from_branch)? {
                return refuse(format!("{p} changed"));
            }
            let d = dirty(store, from_branch)?;
            if let Some(f) = d.special_files.first() {
                return Err(Error::Conflict(format!(
                    "workspace of branch {from_branch} holds what no checkpoint can record ({}); remove it, or use --discard",
                    f.describe()
                )));
            }
            if d.dirty {
                let what = d.changes.first().map_or_else(
                    || d.roots_changed.join(", "),
                    |c| format!("{} {}", c.path, c.change),
                );
                return refuse(what);
            }
        }
        DirtyPolicy::CheckpointFirst => {
            // Refused before anything is recorded when the seal below would refuse.
            if !kill {
                let mps: Vec<PathBuf> = st.roots.values().map(|r| r.mountpoint.clone()).collect();
                check_sealable(&mps, &st.freeze_cgroups, "switch")?;
            }
            // The cgroups the marker names, so `recover` thaws what this froze.
            let c = checkpoint_locked(
                store,
                from_branch,
                &super::CheckpointOptions {
                    label: None,
                    message: "before switch",
                    hold,
                    exclude: &[],
                    allow_empty: false,
                    annotations: &Default::default(),
                },
            )?;
            return Ok((c.recorded.then_some(c.id), false));
        }
        DirtyPolicy::Discard => return Ok((None, is_dirty(store, from_branch)?)),
    }
    Ok((None, false))
}

/// Moves the branch's overlays out of the way (instant, even with a busy cwd inside); they
/// are detached in the background once the new ones are mounted, because tearing an overlay
/// down syncs its upper filesystem, which can take long on a busy disk. Each move is recorded
/// first, so `recover` can roll an interrupted switch back.
fn move_aside(
    store: &Store,
    st: &WorkspaceState,
    phase: &mut SwitchPhase,
    m: &mut crate::store::lock::Mutation<'_>,
    moved: &mut Vec<PathBuf>,
    moved_roots: &mut Vec<(String, PathBuf)>,
) -> Result<()> {
    let from_branch = &st.branch;
    for (name, r) in &st.roots {
        if crate::fs::mountinfo::mount_at(&r.mountpoint)?
            .is_some_and(|m| m.source == source_name(store, from_branch))
        {
            let aside = store.detached_overlay_path(from_branch, name, now_ns());
            fs::create_dir_all(&aside).map_err(|e| Error::io(&aside, e))?;
            phase.moved.push((r.mountpoint.clone(), aside.clone()));
            m.set_phase(serde_json::to_value(&*phase).unwrap_or_default())?;
            overlay::move_mount(&r.mountpoint, &aside)?;
            moved_roots.push((name.clone(), aside.clone()));
            moved.push(aside);
        }
    }
    Ok(())
}

/// Mounts `to_branch` at the roots `st` had (its parked overlays moved back when they are what
/// would be mounted) and records it. No rebase here (it deletes the upper, O(upper)): mount
/// rebases; switch stays O(1). Returns whether the parked overlays came back.
fn mount_target(
    store: &Store,
    to_branch: &str,
    head: ObjectId,
    st: &WorkspaceState,
    kill: bool,
) -> Result<bool> {
    let mut resumed = false;
    let base = upper_base(store, to_branch, head)?;
    let relocate: BTreeMap<String, PathBuf> = st
        .roots
        .iter()
        .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
        .collect();
    let opts = MountOptions {
        branch: to_branch.to_string(),
        roots: st.roots.keys().cloned().collect(),
        relocate,
        hold: Hold {
            cgroups: st.freeze_cgroups.clone(),
            filesystem: st.freeze_fs,
        },
        lower_cache_bytes: None,
        kill: false,
        fold_budget: st.fold_budget,
    };
    let mut roots = plan_roots(store, to_branch, &base, &opts)?;
    let mut base = base;
    match park::resume(store, to_branch, &base, &roots, kill)? {
        Resume::Resumed => resumed = true,
        Resume::Absent => {}
        Resume::Evicted => {
            // The eviction may have folded its upper: its base may be its head now.
            base = upper_base(store, to_branch, head)?;
            roots = plan_roots(store, to_branch, &base, &opts)?;
        }
    }
    // Durable, but only when new: switching back to a branch finds it already there
    // (each sync can take a second while the disk writes back).
    let recorded = read_json::<UpperBase>(&store.upper_base_path(to_branch))?;
    if recorded.is_none_or(|b| b.base != base) {
        write_json(&store.upper_base_path(to_branch), &UpperBase { base })?;
    }
    if !resumed {
        mount_roots(store, to_branch, &roots, kill)?;
    }
    let new_state = WorkspaceState {
        branch: to_branch.to_string(),
        base,
        roots,
        mounted_ns: now_ns(),
        freeze_cgroups: st.freeze_cgroups.clone(),
        freeze_fs: st.freeze_fs,
        fold_budget: st.fold_budget,
    };
    write_mount_state(store, &new_state)?;
    if resumed {
        park::forget(store, to_branch)?;
    }
    Ok(resumed)
}

/// What becomes of the tree the switch left, once nobody is left in it (`nobody_left`): parked
/// for a switch back (its upper stays, in use by it), else, when nothing can write the branch
/// any more and its head records all its upper holds, the upper goes (a fold: no bytes kept
/// twice). Returns whether it was parked (then `moved` is emptied: nothing to detach) and
/// where a folded upper went.
fn retire_left(
    store: &Store,
    st: &WorkspaceState,
    phase: &SwitchPhase,
    moved: &mut Vec<PathBuf>,
    moved_roots: &[(String, PathBuf)],
    nobody_left: bool,
    discard_upper: bool,
) -> (bool, Option<PathBuf>) {
    let from_branch = &st.branch;
    // The trees left behind are read-only (sealed above): a process still inside (a
    // shell whose cwd was there) gets EROFS instead of writing into the branch it left.
    // Nobody is left in the tree of the branch left: it is parked for a switch back (its upper stays, in use by it).
    let mut parked = false;
    if nobody_left
        && to_branch_differs(phase)
        && !discard_upper
        && !moved.is_empty()
        && moved.len() == st.roots.len()
    {
        match park::park(store, st, moved_roots) {
            Ok(()) => {
                parked = true;
                moved.clear();
            }
            Err(e) => log::warn!("not parking the tree of {from_branch}: {e}"),
        }
    }
    // Nothing can write the branch left any more: when its head records all its upper
    // holds, the upper goes (a fold: no bytes kept twice) and its base is its head.
    let mut folded = None;
    if !parked
        && nobody_left
        && mounted_elsewhere(moved).is_none()
        && to_branch_differs(phase)
        && !discard_upper
    {
        match drop_recorded_upper(store, from_branch) {
            Ok(t) => folded = t,
            Err(e) => log::warn!("keeping the upper of {from_branch}: {e}"),
        }
    }
    (parked, folded)
}
