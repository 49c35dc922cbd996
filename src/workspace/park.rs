//! Parking: the overlays of a branch that `switch` takes away stay mounted, read-only, at
//! `/run/ckptfs/<id>/parked/B/ROOT` (see `Store::parked_dir`), so that a switch back moves
//! them back (`MS_MOVE`) with every inode and dentry the kernel built for them. Overlayfs
//! builds a new inode for every entry it meets in each new mount: without parking the first
//! `git status` after switching away and back walks a cold overlay (docs/inodes.md).
//!
//! - `switch` parks the tree it leaves when it is a real switch to another branch (not
//!   `--discard`), nobody is left inside and every overlay was made read-only. The upper
//!   layer stays (the parked overlay uses it): its bytes wait there, where a switch without
//!   parking would have dropped them when the head records them all (`status` and `branch
//!   list` report them).
//! - The park record `run/parked/B.json` (branch, base, each root's [`MountedRoot`] as it was
//!   mounted) is written durably before the first move and removed only once the mounts are
//!   gone or moved back, so no crash leaves a mount under `parked/` that no record names (a
//!   record whose mounts are gone is harmless: it is dropped silently, as after a reboot).
//! - A switch or `mount --branch` to a parked B resumes the park when a fresh mount would
//!   build the very same roots (same base; same mountpoint, lower, upper and work per root)
//!   and each parked mount is still there, with B's source, answering: moved back, made
//!   writable, then the record goes. Otherwise the park is evicted and B mounted as before.
//! - Eviction detaches the parked overlays and, with nobody inside and no other mount of
//!   them, drops the upper when the head records all of it (the fold a switch does without
//!   parking). At most [`MAX_PARKED`] branches are parked per store, each holding the kernel's
//!   inodes of its whole tree: a new park evicts the oldest. `umount` of the workspace (of
//!   the store's last one: every park, so the lower view can go), a mount of B anywhere else,
//!   `branch delete` and `branch archive` of B, `gc` and `recover` evict too.
//!
//! Every function here runs under the store lock (the caller's mutation).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::mountinfo::MountEntry;
use crate::id::ObjectId;
use crate::store::Store;
use crate::text::time::now_ns;

use super::holders::{self, mounted_elsewhere, set_aside_in_use, set_mount_readonly};
use super::overlay;
use super::state::{answers, read_json, source_name, state, write_json, MountedRoot};
use super::upper::{detach_and_remove, drop_recorded_upper, upper_usage};

/// The most branches parked at once per store; a new park evicts the oldest beyond it.
pub const MAX_PARKED: usize = 2;

/// `run/parked/B.json`: branch B's overlays are parked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ParkRecord {
    pub branch: String,
    /// The checkpoint its overlays stack on (its upper's base).
    pub base: ObjectId,
    /// Each root as it was mounted (`mountpoint` is where the workspace showed it).
    pub roots: BTreeMap<String, MountedRoot>,
    pub parked_ns: i64,
}

/// A parked branch, as `status` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct Parked {
    pub branch: String,
    pub base: ObjectId,
    /// Each root's mountpoint in the workspace it left (where a switch back shows it).
    pub mountpoints: BTreeMap<String, PathBuf>,
    /// Where each root's overlay is parked.
    pub at: BTreeMap<String, PathBuf>,
    /// When it was parked (RFC 3339, UTC).
    pub parked: String,
    /// What its upper layer holds, waiting while it is parked (a switch without parking
    /// would have dropped it when the head records it all).
    pub upper_files: u64,
    pub upper_bytes: u64,
}

/// What [`resume`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resume {
    /// Nothing of the branch was parked (or only a record whose mounts are gone).
    Absent,
    /// The parked overlays are at the mountpoints, writable: write the mount state, then
    /// [`forget`].
    Resumed,
    /// The park did not match: it was evicted (the upper may have been folded, so plan again).
    Evicted,
}

fn read(store: &Store, branch: &str) -> Result<Option<ParkRecord>> {
    read_json(&store.park_record_path(branch))
}

/// Every park record, oldest first. An unreadable one is skipped with a warning.
pub fn records(store: &Store) -> Result<Vec<ParkRecord>> {
    let mut out = Vec::new();
    for (p, _) in crate::fs::json_records(&store.park_records_dir())? {
        match read_json::<ParkRecord>(&p) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {}
            Err(e) => log::warn!("{e}"),
        }
    }
    out.sort_by_key(|r| (r.parked_ns, r.branch.clone()));
    Ok(out)
}

/// Removes `branch`'s park record (durably: the directory is synced).
pub(super) fn forget(store: &Store, branch: &str) -> Result<()> {
    let p = store.park_record_path(branch);
    if !p.exists() {
        return Ok(());
    }
    atomic::remove_file(&p)?;
    atomic::sync_path(&store.park_records_dir())
}

/// The parked mounts of `rec` still there: an overlay at the parked path with the branch's
/// source, by root.
fn present(store: &Store, rec: &ParkRecord, mounts: &[MountEntry]) -> BTreeMap<String, PathBuf> {
    let src = source_name(store, &rec.branch);
    rec.roots
        .keys()
        .map(|n| (n.clone(), store.parked_overlay_path(&rec.branch, n)))
        .filter(|(_, p)| {
            mounts
                .iter()
                .rev()
                .find(|m| m.mountpoint == *p)
                .is_some_and(|m| m.fstype == "overlay" && m.source == src)
        })
        .collect()
}

/// Removes the (empty) directories of `branch`'s park; best effort.
fn remove_dirs(store: &Store, branch: &str, roots: impl Iterator<Item = String>) {
    for n in roots {
        let _ignored = fs::remove_dir(store.parked_overlay_path(branch, &n));
    }
    let _ignored = fs::remove_dir(store.parked_dir().join(branch));
}

/// Parks the overlays of the workspace `st` left, which a switch moved to `asides` (root,
/// where) and made read-only: evicts the oldest parks beyond [`MAX_PARKED`], writes the
/// record, then moves each overlay to its parked path.
///
/// # Errors
/// Writing the record or a move; what was parked is then evicted again (detached in the
/// background), and the caller detaches the rest of `asides` as it would without parking.
pub(super) fn park(
    store: &Store,
    st: &super::WorkspaceState,
    asides: &[(String, PathBuf)],
) -> Result<()> {
    let others: Vec<ParkRecord> = records(store)?
        .into_iter()
        .filter(|r| r.branch != st.branch)
        .collect();
    let over = (others.len() + 1).saturating_sub(MAX_PARKED);
    for r in others.iter().take(over) {
        evict_record(store, r, false)?;
    }
    let rec = ParkRecord {
        branch: st.branch.clone(),
        base: st.base,
        roots: st.roots.clone(),
        parked_ns: now_ns(),
    };
    // The record first (synced): no crash leaves a mount under `parked/` no record names.
    if !store.park_records_dir().exists() {
        atomic::create_private_dir_all(&store.park_records_dir())?;
        atomic::sync_path(&store.run_dir())?;
    }
    write_json(&store.park_record_path(&st.branch), &rec)?;
    let moved = (|| -> Result<()> {
        for (name, aside) in asides {
            let to = store.parked_overlay_path(&st.branch, name);
            atomic::create_private_dir_all(&to)?;
            overlay::move_mount(aside, &to)?;
            let _ignored = fs::remove_dir(aside);
        }
        Ok(())
    })();
    if let Err(e) = moved {
        if let Err(e) = evict_record(store, &rec, false) {
            log::warn!("{e}");
        }
        return Err(e);
    }
    Ok(())
}

/// Resumes `branch`'s park when it matches what a fresh mount would build (`base`, `roots`),
/// else evicts it; see the module doc.
///
/// # Errors
/// Reading the mount table or the record; a move or remount (the caller's rollback then
/// detaches what was moved to the mountpoints: the upper is untouched).
pub(super) fn resume(
    store: &Store,
    branch: &str,
    base: &ObjectId,
    roots: &BTreeMap<String, MountedRoot>,
    kill: bool,
) -> Result<Resume> {
    let rec = match read(store, branch) {
        Ok(Some(rec)) => rec,
        Ok(None) => return Ok(Resume::Absent),
        Err(_) => {
            // A record this build cannot read (another build's, or damaged): see `evict`.
            evict(store, branch)?;
            return Ok(Resume::Evicted);
        }
    };
    let mounts = crate::fs::mountinfo::mounts()?;
    let there = present(store, &rec, &mounts);
    if there.is_empty() {
        // Its mounts are gone (a reboot, or detached by hand): nothing to evict.
        forget(store, branch)?;
        remove_dirs(store, branch, rec.roots.keys().cloned());
        return Ok(Resume::Absent);
    }
    let whole = there.len() == rec.roots.len()
        && there.iter().all(|(n, p)| {
            rec.roots.get(n).is_some_and(|r| {
                answers(&MountedRoot {
                    mountpoint: p.clone(),
                    ..r.clone()
                })
            })
        });
    if !whole || rec.base != *base || rec.roots != *roots {
        log::info!(
            "branch {branch}: its parked overlays do not match the mount asked for; evicting them"
        );
        evict_record(store, &rec, true)?;
        return Ok(Resume::Evicted);
    }
    // A copy of a parked overlay in another mount namespace (made while the branch was
    // mounted) is read-only only while the tree is: made writable again, it would be a
    // writable view of the branch for a process the workspace does not show.
    let parked_at: Vec<PathBuf> = there.values().cloned().collect();
    let outside = holders::foreign(&parked_at, &[]);
    if !outside.is_empty() {
        if !kill {
            return Err(Error::Conflict(format!(
                "branch {branch}: its parked tree is mounted in another mount namespace too, where it would become writable with the workspace: {}; end {}, or use --kill",
                holders::describe(&outside),
                if outside.len() == 1 { "it" } else { "them" }
            )));
        }
        holders::kill(&outside)?;
    }
    for (name, r) in roots {
        if let Some(m) = crate::fs::mountinfo::mount_at(&r.mountpoint)? {
            return Err(Error::Conflict(format!(
                "{} already has a {} mount ({}); unmount it first",
                r.mountpoint.display(),
                m.fstype,
                m.source
            )));
        }
        overlay::move_mount(&there[name], &r.mountpoint)?;
        // Sealed by the switch away (older builds: this mount only).
        holders::set_superblock_readonly(&r.mountpoint, false)?;
        set_mount_readonly(&r.mountpoint, false)?;
    }
    remove_dirs(store, branch, roots.keys().cloned());
    log::info!("branch {branch}: its parked overlays are back");
    Ok(Resume::Resumed)
}

/// Evicts `rec`: with nobody inside and no other mount of them, drops the upper its head
/// records all of (unless the branch is mounted); detaches the parked overlays, at once
/// (`now`: a mount of the branch or the lower view's release follows) or in the background
/// (moved under `detached/` first, where the reaping finds them); then removes the record.
/// Returns whether any of its mounts was still there.
fn evict_record(store: &Store, rec: &ParkRecord, now: bool) -> Result<bool> {
    let there = present(store, rec, &crate::fs::mountinfo::mounts()?);
    let mps: Vec<PathBuf> = there.values().cloned().collect();
    let idle = !mps.iter().any(|m| set_aside_in_use(m)) && mounted_elsewhere(&mps).is_none();
    let trash = if idle && state(store, &rec.branch)?.is_none() {
        drop_recorded_upper(store, &rec.branch).unwrap_or_else(|e| {
            log::warn!("keeping the upper of {}: {e}", rec.branch);
            None
        })
    } else {
        None
    };
    let mut asides = Vec::new();
    for (name, p) in &there {
        if now {
            overlay::detach_if_mounted(p)?;
        } else {
            let aside = store.detached_overlay_path(&rec.branch, name, now_ns());
            atomic::create_private_dir_all(&aside)?;
            overlay::move_mount(p, &aside)?;
            asides.push(aside);
        }
    }
    remove_dirs(store, &rec.branch, rec.roots.keys().cloned());
    forget(store, &rec.branch)?;
    if !asides.is_empty() || trash.is_some() {
        detach_and_remove(&asides, trash.as_deref());
    }
    log::info!("branch {}: its parked overlays were evicted", rec.branch);
    Ok(!there.is_empty())
}

/// Evicts `branch`'s park, if any, detaching it at once. Returns whether a mount of it was
/// there.
///
/// # Errors
/// Reading the mount table; detaching.
pub(super) fn evict(store: &Store, branch: &str) -> Result<bool> {
    match read(store, branch) {
        Ok(Some(rec)) => evict_record(store, &rec, true),
        Ok(None) => Ok(false),
        Err(e) => {
            // Unreadable: what is mounted at the branch's parking place goes, unfolded, and
            // so does the record.
            log::warn!("evicting the park of {branch}: {e}");
            let n = overlay::detach_all_under(&store.parked_dir().join(branch))?;
            atomic::remove_file(&store.park_record_path(branch))?;
            Ok(n > 0)
        }
    }
}

/// Evicts the parks whose workspace had a root at one of `mountpoints` (its `umount`).
pub(super) fn evict_at(store: &Store, mountpoints: &[PathBuf]) -> Result<usize> {
    let mut n = 0;
    for rec in records(store)? {
        if rec
            .roots
            .values()
            .any(|r| mountpoints.contains(&r.mountpoint))
            && evict_record(store, &rec, true)?
        {
            n += 1;
        }
    }
    Ok(n)
}

/// Evicts every park of the store, and detaches any mount under `parked/` that no record
/// names (none should be). Returns how many parks and mounts went. For `gc`, `recover` and
/// the store's last `umount`; under the store lock.
///
/// # Errors
/// Reading the records or the mount table; detaching.
pub fn evict_all(store: &Store) -> Result<usize> {
    let mut n = 0;
    for rec in records(store)? {
        if evict_record(store, &rec, true)? {
            n += 1;
        }
    }
    let dir = store.parked_dir();
    n += overlay::detach_all_under(&dir)?;
    // What is left there is records this build cannot read (their mounts went above).
    if let Ok(rd) = fs::read_dir(store.park_records_dir()) {
        for e in rd.flatten() {
            if e.path().extension().and_then(|x| x.to_str()) == Some("json") {
                atomic::remove_file(&e.path())?;
            }
        }
    }
    if let Ok(rd) = fs::read_dir(&dir) {
        for b in rd.flatten() {
            if let Ok(roots) = fs::read_dir(b.path()) {
                for r in roots.flatten() {
                    let _ignored = fs::remove_dir(r.path());
                }
            }
            let _ignored = fs::remove_dir(b.path());
        }
    }
    let _ignored = fs::remove_dir(&dir);
    Ok(n)
}

/// The branches parked now (a record with its mounts there), oldest first: for `status`.
///
/// # Errors
/// Reading the records or the mount table.
pub fn parked(store: &Store) -> Result<Vec<Parked>> {
    let mounts = crate::fs::mountinfo::mounts()?;
    let mut out = Vec::new();
    for rec in records(store)? {
        let at = present(store, &rec, &mounts);
        if at.is_empty() {
            continue;
        }
        let (upper_files, upper_bytes) = upper_usage(store, &rec.branch);
        out.push(Parked {
            mountpoints: rec
                .roots
                .iter()
                .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
                .collect(),
            at,
            parked: crate::text::time::format_rfc3339(rec.parked_ns),
            upper_files,
            upper_bytes,
            branch: rec.branch,
            base: rec.base,
        });
    }
    Ok(out)
}

/// Whether `branch` is parked now (its record, and a mount of it there).
///
/// # Errors
/// Reading the record or the mount table.
pub fn is_parked(store: &Store, branch: &str) -> Result<bool> {
    // An unreadable record is no park (the next switch or mount of the branch evicts it).
    let Ok(Some(rec)) = read(store, branch) else {
        return Ok(false);
    };
    Ok(!present(store, &rec, &crate::fs::mountinfo::mounts()?).is_empty())
}

/// Where `branch`'s root with mountpoint `mountpoint` is parked, if its record names one:
/// for the rollback of a switch that crashed while parking it.
pub(super) fn parked_path_of(store: &Store, branch: &str, mountpoint: &Path) -> Option<PathBuf> {
    let rec = read(store, branch).ok()??;
    rec.roots
        .iter()
        .find(|(_, r)| r.mountpoint == mountpoint)
        .map(|(n, _)| store.parked_overlay_path(branch, n))
}
