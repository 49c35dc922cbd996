//! The mount plan of a branch, shared by `mount`, `switch` and the fold: which roots, at
//! which mountpoints, over which lower view, with which upper and work directories
//! ([`plan_roots`]); and mounting those overlays, also over an upper layer that a process
//! still holds through another overlay ([`mount_roots`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::Store;

use super::checkpoint::Hold;
use super::state::{source_name, state, MountedRoot};
use super::{holders, lower, overlay};

/// What to mount.
#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    pub branch: String,
    /// Only these roots (default: all).
    pub roots: Vec<String>,
    /// Relocated mountpoints (explicitly asked for): root -> directory.
    pub relocate: BTreeMap<String, PathBuf>,
    /// What every checkpoint of the workspace holds still (see `freeze`).
    pub hold: Hold,
    /// Memory of the store's lower view for trees and chunks (`--cache-size`), when it
    /// starts; `None`: the default (see `lower::ensure_view_sized`).
    pub lower_cache_bytes: Option<u64>,
    /// `--kill`: end the processes that still use the branch's upper layer through another
    /// overlay (see [`mount_roots`]) instead of refusing.
    pub kill: bool,
    /// `--fold-budget`: the upper layer is folded only once it holds more than this many
    /// bytes (see `fold`); `None`: at every checkpoint with nobody inside.
    pub fold_budget: Option<u64>,
}

/// Creates the upper directories of `branch` for `root`: the overlay's upper directory
/// (`upper/B/.top-ROOT/`; overlayfs makes `ROOT/` in it at the first change, with the lower
/// root's metadata) and the work dir. Returns the root's upper layer and the work dir.
fn prepare_upper(store: &Store, branch: &str, root: &str) -> Result<(PathBuf, PathBuf)> {
    let upper = store.upper_dir(branch, root);
    let work = store.overlay_work_dir(branch, root);
    let top = upper.parent().unwrap_or(&upper);
    for d in [top, &work] {
        atomic::create_private_dir_all(d)?;
    }
    Ok((upper, work))
}

/// Mounts the overlay of one prepared root (`source` names the branch in mountinfo).
pub(super) fn mount_root(store: &Store, source: &str, r: &MountedRoot) -> Result<()> {
    mount_root_indexed(store, source, r, true)
}

fn mount_root_indexed(store: &Store, source: &str, r: &MountedRoot, index: bool) -> Result<()> {
    // A warm-up's copy of an overlay would keep its upper layer in use (`warm`).
    super::warm::stop(store);
    overlay::mount_overlay_indexed(
        source,
        &r.mountpoint,
        &r.lower,
        &r.upper,
        &r.work,
        &store.overlay_stage_dir(),
        index,
    )
}

/// Mounts the overlays of `st` (already prepared); unmounts the ones done on failure.
///
/// An upper layer another overlay still uses is never mounted again (overlayfs refuses it
/// with `index=on`): the overlay a process holds after a `switch` or `umount` (a copy in
/// another mount namespace, a tree left behind). Refused naming those processes, or with
/// `kill` they are ended and the mount tried again.
///
/// # Errors
/// `Conflict` naming who holds the upper layer; a mount that fails otherwise.
pub(super) fn mount_roots(
    store: &Store,
    branch: &str,
    roots: &BTreeMap<String, MountedRoot>,
    kill: bool,
) -> Result<()> {
    let src = source_name(store, branch);
    let mut done: Vec<&Path> = Vec::new();
    for r in roots.values() {
        let mut mounted = mount_root(store, &src, r);
        if mounted.as_ref().is_err_and(holders::is_busy) {
            mounted = mount_over_held(store, branch, r, kill);
        }
        if let Err(e) = mounted {
            for m in done {
                let _ignored = overlay::detach(m);
            }
            return Err(e);
        }
        done.push(&r.mountpoint);
    }
    Ok(())
}

/// [`mount_root`] of `r` once overlayfs refused it (EBUSY: another overlay uses its upper
/// layer). A tree of the branch set aside here that nobody uses any more (its background
/// detach not done yet) is detached now and the mount tried again; one a process holds
/// (a copy in another mount namespace, a tree left behind) refuses naming the processes,
/// or with `kill` they are ended, the trees set aside detached, and the mount tried again.
///
/// Two exceptions keep a shell left inside a tree where it is (what `switch` and `umount`
/// have always allowed): when every other overlay of the branch is a tree set aside here,
/// read-only at its superblock (sealed by the switch that set it aside: no mount of it
/// anywhere can write), and no other mount namespace holds one; or when nothing shows any
/// (a tree `umount` detached while a shell was inside, sealed first; an ordinary user cannot
/// detach a mount). The branch is then mounted without `index=on`, which overlayfs allows.
/// Nothing but this mount writes the upper layer.
fn mount_over_held(store: &Store, branch: &str, r: &MountedRoot, kill: bool) -> Result<()> {
    let src = source_name(store, branch);
    let other_namespaces =
        || holders::in_other_namespaces(|m| m.fstype == "overlay" && m.source == src);
    // Trees set aside that nobody uses: detached now (their background detach may lag).
    let (_, asides) = upper_holders(store, branch);
    let unused: Vec<&PathBuf> = asides
        .iter()
        .filter(|a| !holders::set_aside_in_use(a))
        .collect();
    if !unused.is_empty() {
        for a in unused {
            if let Err(e) = overlay::detach_if_mounted(a) {
                log::warn!("{e}");
            }
        }
        match retry_mount(store, &src, r) {
            Err(e) if holders::is_busy(&e) => {}
            other => return other,
        }
    }
    let (mut held, mut asides) = upper_holders(store, branch);
    if held.is_empty() && asides.is_empty() {
        // Nothing shows an overlay of the branch: one being torn down (a background detach),
        // or one detached while a process was inside (`umount` of a busy tree), which only
        // that process's references keep.
        match retry_mount(store, &src, r) {
            Err(e) if holders::is_busy(&e) => {}
            other => return other,
        }
        (held, asides) = upper_holders(store, branch);
        if held.is_empty() && asides.is_empty() {
            // Every overlay this build detaches or sets aside is sealed read-only first
            // (`holders::seal`), and an ordinary user cannot detach a mount: nothing but
            // this mount writes the upper layer.
            log::warn!(
                "{}: its upper layer is still used by a read-only overlay detached while a \
                 process was inside (`umount` of a busy tree); mounting without index=on",
                r.mountpoint.display()
            );
            return mount_root_indexed(store, &src, r, false);
        }
    }
    let sealed = |mp: &PathBuf| {
        crate::fs::mountinfo::mount_at(mp)
            .is_ok_and(|m| m.is_some_and(|m| m.options == "ro" || m.options.starts_with("ro,")))
    };
    if !kill && !asides.is_empty() && asides.iter().all(sealed) && other_namespaces().is_empty() {
        log::info!(
            "{}: its upper layer is still used by a read-only tree left behind with a process \
             inside; mounting without index=on",
            r.mountpoint.display()
        );
        return mount_root_indexed(store, &src, r, false);
    }
    let held = if kill && !held.is_empty() {
        holders::kill(&held)?;
        for a in &asides {
            if let Err(e) = overlay::detach_if_mounted(a) {
                log::warn!("{e}");
            }
        }
        match retry_mount(store, &src, r) {
            Err(e) if holders::is_busy(&e) => upper_holders(store, branch).0,
            other => return other,
        }
    } else {
        held
    };
    Err(Error::Conflict(format!(
        "branch {branch}: its upper layer {} is still used by another overlay, which a process \
         holds after a switch or umount; one upper layer is never mounted twice. {}",
        r.upper.display(),
        if held.is_empty() {
            "No process found (one still inside a tree set aside here or held from another \
             namespace, gone meanwhile?): mount again"
                .to_string()
        } else {
            format!(
                "Held by {}: end {}, or use --kill",
                holders::describe(&held),
                if held.len() == 1 { "it" } else { "them" }
            )
        }
    )))
}

/// [`mount_root`], asked again for a bounded while as long as overlayfs answers EBUSY: an
/// overlay just detached (here, or by the background reaping) may still be ending.
fn retry_mount(store: &Store, src: &str, r: &MountedRoot) -> Result<()> {
    let deadline = Instant::now() + HELD_WAIT;
    loop {
        match mount_root(store, src, r) {
            Err(e) if holders::is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// The processes that keep an overlay of `branch` alive other than its workspace (those
/// inside a tree of it set aside here: left behind by a switch; those of another mount
/// namespace with a mount of it), and the trees of it set aside here.
fn upper_holders(store: &Store, branch: &str) -> (Vec<holders::Holder>, Vec<PathBuf>) {
    let src = source_name(store, branch);
    let mounted_here: Vec<PathBuf> = state(store, branch)
        .ok()
        .flatten()
        .map(|st| st.roots.values().map(|r| r.mountpoint.clone()).collect())
        .unwrap_or_default();
    let aside: Vec<PathBuf> = crate::fs::mountinfo::mounts()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fstype == "overlay" && m.source == src && !mounted_here.contains(&m.mountpoint)
        })
        .map(|m| m.mountpoint)
        .collect();
    let mut out = holders::holders(&aside);
    out.extend(holders::in_other_namespaces(|m| {
        m.fstype == "overlay" && m.source == src
    }));
    (out, aside)
}

/// Plans the mounted roots of `branch` based on checkpoint `base`.
pub(super) fn plan_roots(
    store: &Store,
    branch: &str,
    base: &ObjectId,
    opts: &MountOptions,
) -> Result<BTreeMap<String, MountedRoot>> {
    let c = store.read_checkpoint(base)?;
    let names: Vec<String> = if opts.roots.is_empty() {
        c.roots.keys().cloned().collect()
    } else {
        opts.roots.clone()
    };
    let mut out = BTreeMap::new();
    for name in names {
        let rc = store.root_config(&name)?;
        if !c.roots.contains_key(&name) {
            return Err(Error::NotFound(format!(
                "root {name} in checkpoint {}",
                base.short()
            )));
        }
        let mountpoint = opts
            .relocate
            .get(&name)
            .cloned()
            .unwrap_or_else(|| rc.path.clone());
        let mountpoint = crate::store::absolute(&mountpoint)?;
        if mountpoint.starts_with(store.root()) {
            return Err(Error::Usage(format!(
                "mountpoint {} is inside the store",
                mountpoint.display()
            )));
        }
        let lower = lower::lower_root(store, base, &name)?;
        let (upper, work) = prepare_upper(store, branch, &name)?;
        out.insert(
            name,
            MountedRoot {
                mountpoint,
                lower,
                upper,
                work,
            },
        );
    }
    Ok(out)
}

/// How long [`mount_over_held`] asks again while an overlay nobody uses is going.
const HELD_WAIT: Duration = Duration::from_secs(5);
