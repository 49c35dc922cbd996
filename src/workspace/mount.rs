//! Mounting and unmounting a workspace: one overlayfs per root, with the lower view's
//! directory of the base checkpoint as the lower layer and `upper/B/.top-ROOT` as the upper
//! (its `ROOT` subdirectory mounted at the mountpoint: see `overlay::mount_overlay`).
//! `switch` mounts through `plan_roots` and `mount_roots` too; the last `umount` reaps
//! the old overlays a failed switch left under `/run/ckptfs/<id>/detached/` (`reap_detached`).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::id::ObjectId;
use crate::store::refs::check_name;
use crate::store::Store;
use crate::text::time::now_ns;

use super::checkpoint::{first_excluded, is_dirty};
use super::park::{self, Resume};
use super::plan::{mount_roots, plan_roots, MountOptions};
use super::state::{
    answers, is_live, require_branch, source_name, state, states, upper_base, write_json,
    write_mount_state, MountedRoot, UpperBase, WorkspaceState,
};
use super::upper::reap_unused_detached;
use super::{freeze, holders, lower, overlay};

/// Drops `branch`'s upper when everything in it is already in the head: the head becomes the
/// new base. Returns the base to mount.
fn rebase_if_clean(store: &Store, branch: &str, head: ObjectId) -> Result<ObjectId> {
    let base = upper_base(store, branch, head)?;
    if base == head {
        return Ok(head);
    }
    // Excluded files are in no checkpoint: an upper holding one is kept; so is one a merge
    // in progress is written into (see `pending`).
    if super::pending::is_pending(store, branch)
        || first_excluded(store, branch)?.is_some()
        || is_dirty(store, branch)?
    {
        return Ok(base);
    }
    // The agent's trees: removed through held fds, never following what it linked in (a
    // detached overlay a busy shell still holds may write them even now).
    let upper = store.upper_branch_dir(branch);
    let (Some(parent), Some(name)) = (upper.parent(), upper.file_name()) else {
        return Err(Error::Invalid(format!("{}: no parent", upper.display())));
    };
    Dir::open(parent)?.remove_all(name)?;
    Ok(head)
}

/// Detaches whatever of ours is stale at `mountpoint` (a dead mount from a crash).
fn clear_stale(store: &Store, mountpoint: &Path) -> Result<()> {
    if let Some(m) = crate::fs::mountinfo::mount_at(mountpoint)? {
        let ours = m
            .source
            .starts_with(&format!("ckptfs:{}:", store.root().display()));
        if !ours {
            return Err(Error::Conflict(format!(
                "{} already has a {} mount ({}); unmount it first",
                mountpoint.display(),
                m.fstype,
                m.source
            )));
        }
        log::warn!("detaching a stale mount at {}", mountpoint.display());
        overlay::detach(mountpoint)?;
    }
    Ok(())
}

/// `ckptfs mount STORE --branch B`: mounts the branch's roots writable.
pub fn mount(store: &Store, opts: &MountOptions) -> Result<WorkspaceState> {
    overlay::require_mount_rights(store, "mount --branch")?;
    check_name("branch", &opts.branch)?;
    // Absolute, so a checkpoint run from anywhere finds them.
    let mut freeze_cgroups = Vec::new();
    for (dir, _) in freeze::check(&opts.hold.cgroups)? {
        freeze_cgroups.push(fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?);
    }
    if opts.hold.filesystem {
        freeze::check_fs(store.root())?;
    }
    // Names the user typed are checked before anything starts (a view started for a root
    // that is not there stayed behind).
    for name in opts.roots.iter().chain(opts.relocate.keys()) {
        if !store.config().roots.contains_key(name) {
            let known: Vec<&str> = store.config().roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "--root {name}: no such root (store roots: {})",
                known.join(", ")
            )));
        }
    }
    let args =
        serde_json::json!({"branch": opts.branch, "roots": opts.roots, "relocate": opts.relocate});
    // The lower view is its own daemon, which takes the store lock to pin: start it first.
    lower::ensure_view_sized(store, opts.lower_cache_bytes)?;
    store.mutate("mount", args, |_| {
        let (b, head) = require_branch(store, &opts.branch)?;
        if b.state == "archived" {
            return Err(Error::Conflict(format!(
                "branch {} is archived; `ckptfs branch unarchive` it first",
                opts.branch
            )));
        }
        if let Some(st) = state(store, &opts.branch)? {
            // Mounted and answering: refuse. Mounted over a dead lower view (its daemon was
            // killed): fall through; the stale overlays are detached below and remounted.
            if is_live(store, &st)? && st.roots.values().all(answers) {
                let at: Vec<String> = st.roots.values().map(|r| r.mountpoint.display().to_string()).collect();
                return Err(Error::Conflict(format!(
                    "branch {} is already mounted at {}",
                    opts.branch,
                    at.join(", ")
                )));
            }
            fs::remove_file(store.workspace_state_path(&opts.branch))
                .map_err(|e| Error::io(store.workspace_state_path(&opts.branch), e))?;
        }
        for other in states(store)? {
            if is_live(store, &other)? {
                for r in other.roots.values() {
                    let clash = opts.roots.is_empty() || opts.roots.iter().any(|n| other.roots.contains_key(n));
                    if clash && opts.relocate.is_empty() {
                        return Err(Error::Conflict(format!(
                            "{} is already a mounted workspace of branch {}; use `ckptfs switch` to change branches",
                            r.mountpoint.display(),
                            other.branch
                        )));
                    }
                }
            }
        }
        // Parked by a switch: moved back when it is what this mount would build over the
        // upper's base (no rebase then: the parked overlay uses that upper); else evicted
        // before the upper is touched.
        let resumed = resume_parked(store, opts, head)?;
        let resumed_now = resumed.is_some();
        let (base, roots) = match resumed {
            Some(v) => v,
            None => {
                let base = rebase_if_clean(store, &opts.branch, head)?;
                let roots = plan_roots(store, &opts.branch, &base, opts)?;
                write_json(&store.upper_base_path(&opts.branch), &UpperBase { base })?;
                for r in roots.values() {
                    fs::create_dir_all(&r.mountpoint).map_err(|e| Error::io(&r.mountpoint, e))?;
                    clear_stale(store, &r.mountpoint)?;
                }
                mount_roots(store, &opts.branch, &roots, opts.kill)?;
                (base, roots)
            }
        };
        let st = WorkspaceState {
            branch: opts.branch.clone(),
            base,
            roots,
            mounted_ns: now_ns(),
            freeze_cgroups: freeze_cgroups.clone(),
            freeze_fs: opts.hold.filesystem,
            fold_budget: opts.fold_budget,
        };
        write_mount_state(store, &st)?;
        if resumed_now {
            park::forget(store, &opts.branch)?;
        }
        let summary = serde_json::json!({"base": base, "resumed": resumed_now});
        Ok((st, summary))
    })
}

/// The base and roots of `opts.branch`'s parked overlays once moved back to their
/// mountpoints, when they are what a mount over the upper's base would build; `None` (the
/// park evicted, if there was one) otherwise.
fn resume_parked(
    store: &Store,
    opts: &MountOptions,
    head: ObjectId,
) -> Result<Option<(ObjectId, BTreeMap<String, MountedRoot>)>> {
    if !store.park_record_path(&opts.branch).exists() {
        return Ok(None);
    }
    let base = upper_base(store, &opts.branch, head)?;
    let roots = plan_roots(store, &opts.branch, &base, opts)?;
    for r in roots.values() {
        fs::create_dir_all(&r.mountpoint).map_err(|e| Error::io(&r.mountpoint, e))?;
        clear_stale(store, &r.mountpoint)?;
    }
    Ok(
        (park::resume(store, &opts.branch, &base, &roots, opts.kill)? == Resume::Resumed)
            .then_some((base, roots)),
    )
}

/// Waits, up to `wait` in all, for the lower view's warm-up of every root of `st` (`mount
/// --branch` calls it once [`mount`] returned): a `git status` right after the mount then
/// finds every lower entry in the kernel's caches (docs/benchmarks.md, "git at 100k files").
/// Outside the store lock (the warm-up needs none); the workspace is mounted and usable
/// meanwhile, so a failure to wait is only logged.
pub fn wait_warm(store: &Store, st: &WorkspaceState, wait: Duration) {
    if wait.is_zero() {
        return;
    }
    let t0 = Instant::now();
    let deadline = t0 + wait;
    for (name, r) in &st.roots {
        match lower::wait_warm(store, &r.lower, deadline) {
            Ok(true) => log::debug!("{name}: lower view warm after {:?}", t0.elapsed()),
            Ok(false) => log::debug!("{name}: not waiting longer for the lower view's warm-up"),
            Err(e) => log::warn!("{name}: waiting for the lower view's warm-up: {e}"),
        }
    }
}

/// `ckptfs umount` of a workspace: unmounts every root (lazily when busy), and evicts the
/// branches parked from it (all of the store's when it was the last workspace). Refuses
/// while a process would keep a writable view of the branch (see [`umount_killing`]).
pub fn umount(store: &Store, branch: &str) -> Result<Vec<(PathBuf, overlay::Unmounted)>> {
    umount_killing(store, branch, false)
}

/// [`umount`]: first every root is made read-only in every mount namespace, so a process
/// left inside a tree detached while busy, or holding a copy of it in another mount
/// namespace, cannot write the branch's upper layer any more (`holders::seal`). A file open
/// for writing, or such a copy, refuses the umount naming the processes; with `kill`
/// (`umount --kill`) they are ended instead.
pub fn umount_killing(
    store: &Store,
    branch: &str,
    kill: bool,
) -> Result<Vec<(PathBuf, overlay::Unmounted)>> {
    let out = store.mutate("umount", serde_json::json!({"branch": branch}), |_| {
        // A warm-up's copy of the overlay would keep it, and its upper layer, alive (`warm`).
        super::warm::stop(store);
        let st = state(store, branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {branch}")))?;
        let src = source_name(store, branch);
        let ours: Vec<PathBuf> = st
            .roots
            .values()
            .map(|r| r.mountpoint.clone())
            .filter(|mp| {
                crate::fs::mountinfo::mount_at(mp).is_ok_and(|m| m.is_some_and(|m| m.source == src))
            })
            .collect();
        holders::seal(&ours, &st.freeze_cgroups, kill, "umount")?;
        let mut out = Vec::new();
        for r in st.roots.values() {
            match crate::fs::mountinfo::mount_at(&r.mountpoint)? {
                Some(m) if m.source == src => {
                    out.push((r.mountpoint.clone(), overlay::unmount(&r.mountpoint)?))
                }
                _ => {}
            }
        }
        fs::remove_file(store.workspace_state_path(branch))
            .map_err(|e| Error::io(store.workspace_state_path(branch), e))?;
        let mps: Vec<PathBuf> = st.roots.values().map(|r| r.mountpoint.clone()).collect();
        park::evict_at(store, &mps)?;
        if states(store)?.is_empty() {
            // Nothing of ours may stay mounted: the lower view goes next.
            park::evict_all(store)?;
        }
        for c in &st.freeze_cgroups {
            freeze::remove_if_own_and_empty(c);
        }
        let summary = serde_json::json!({"unmounted": out.len()});
        Ok((out, summary))
    })?;
    if states(store)?.is_empty() {
        reap_detached(store)?;
        let held = out
            .iter()
            .any(|(_, u)| matches!(u, overlay::Unmounted::Detached));
        lower::release_view(store, held)?;
        // An ordinary account's namespace ends with its last workspace (see `fs::userns`).
        if crate::fs::userns::in_child_userns() {
            crate::fs::userns::stop_holder(&store.namespace_record_path());
        }
    } else {
        reap_unused_detached(store)?;
    }
    Ok(out)
}

/// Detaches every old overlay left under `detached/` (see `Store::detached_dir`, and the
/// store's own `run/detached/` of older builds) (by a switch that failed after it had
/// mounted the new overlays) and removes the empty directories. Returns how many.
pub fn reap_detached(store: &Store) -> Result<usize> {
    let [_, legacy] = store.legacy_mount_dirs();
    let mut n = 0;
    for dir in [store.detached_dir(), legacy, store.overlay_stage_dir()] {
        n += overlay::detach_all_under(&dir)?;
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                let _ignored = fs::remove_dir(e.path());
            }
        }
    }
    Ok(n)
}

/// The cgroup `ckptfs exec` runs commands in for `branch`'s mounted workspace: made on first
/// use and recorded with the mount (as `mount --freeze-cgroup` records one), so every
/// checkpoint of the workspace freezes it.
pub fn agent_cgroup(store: &Store, branch: &str) -> Result<PathBuf> {
    store.mutate("exec", serde_json::json!({"branch": branch}), |_| {
        let mut st = state(store, branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {branch}")))?;
        let tag = ObjectId::of(store.root().as_os_str().as_bytes()).short();
        let dir = freeze::make_cgroup(&format!("{branch}-{tag}"))?;
        if !st.freeze_cgroups.contains(&dir) {
            st.freeze_cgroups.push(dir.clone());
            write_mount_state(store, &st)?;
        }
        let summary = serde_json::json!({ "cgroup": dir });
        Ok((dir, summary))
    })
}

/// Mounts `branch` with the default options when it is not mounted (and waits, bounded, for
/// its lower view's warm-up, as `mount --branch` does: the agent's first walk then finds the
/// base's entries cached). Returns whether it was mounted already.
///
/// # Errors
/// Reading the workspace state; what [`mount`] refuses.
pub fn ensure_mounted(store: &Store, branch: &str) -> Result<bool> {
    let live = match super::state(store, branch)? {
        Some(st) => super::is_live(store, &st)?,
        None => false,
    };
    if !live {
        let st = mount(
            store,
            &MountOptions {
                branch: branch.to_string(),
                ..MountOptions::default()
            },
        )?;
        wait_warm(store, &st, super::lower::WARM_WAIT);
    }
    Ok(live)
}
