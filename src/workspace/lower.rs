//! The lower layers of workspaces: the store's read-only browse view, mounted once per store
//! at `/run/ckptfs/<id>/lower` (outside the store, see `Store::mounts_dir`) by its own daemon;
//! a checkpoint root is then the directory `lower/checkpoints/<id>/<root>`, read lazily from
//! the store, which overlayfs stacks on. Stores mounted by builds before that keep their view
//! at `STORE/run/lower` until their last workspace is unmounted (`release_view` detaches
//! either).
//!
//! The view outlives the workspaces that use it only as long as the kernel needs it: when the
//! last workspace is unmounted the view is detached lazily, so an overlay that a busy shell
//! still holds (detached by `switch`/`umount`) keeps reading until it is released, and then
//! the view daemon exits by itself. Its pin lists only the checkpoints whose directory the
//! kernel holds (the bases of live overlays, attached or detached), so gc can prune the rest
//! while workspaces are mounted.
//!
//! Two such views run per store, from the same daemon code: the full one at `lower`, and
//! the bare one at `lower-bare` (`Store::lower_bare_view_dir`), which serves only checkpoint
//! roots holding no xattr anywhere and answers GETXATTR/LISTXATTR with ENOSYS, so the kernel
//! stops sending overlayfs's per-file xattr queries (`view::lower::bare`; docs/inodes.md). Every
//! overlay stacks on the bare view's root when it serves it, else on the full view's
//! ([`lower_root`]). Both start together ([`ensure_view`]), hold their own pin of the bases
//! the kernel holds in them (gc reads every live pin), and go together ([`release_view`]).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// Makes sure the lower views are mounted (starts their daemons if needed). Call without
/// holding the store lock: the daemons take it to register their pins.
pub fn ensure_view(store: &Store) -> Result<()> {
    ensure_view_sized(store, None)
}

/// The store's two lower views: the full one, and the bare one (served only for checkpoint
/// roots without xattrs; see the module doc).
fn view_dirs(store: &Store) -> [PathBuf; 2] {
    [store.lower_view_dir(), store.lower_bare_view_dir()]
}

/// As [`ensure_view`], with the views' memory for trees and chunks (`mount --branch
/// --cache-size`, each view; `None`: the default). The views are shared by every workspace of
/// the store, so the size applies when they start; asking another size of a running view is
/// refused.
///
/// # Errors
/// `Conflict` when a view already runs with another cache size; starting them.
pub fn ensure_view_sized(store: &Store, cache_bytes: Option<u64>) -> Result<()> {
    ensure_mounts_dir(store)?;
    for mp in view_dirs(store) {
        ensure_one_view(store, &mp, cache_bytes)?;
    }
    Ok(())
}

fn ensure_one_view(store: &Store, mp: &Path, cache_bytes: Option<u64>) -> Result<()> {
    // A view whose daemon died answers ENOTCONN until fusermount3's auto-unmount catches up:
    // detach it now so a fresh daemon can take its place.
    // (statfs always reaches the daemon: the view answers OPENDIR with ENOSYS, so the kernel
    // lists directories from its cache, even for a dead daemon.)
    if crate::fs::mountinfo::mount_at(mp)?.is_some() && nix::sys::statfs::statfs(mp).is_err() {
        log::warn!(
            "the store's lower view at {} is dead; restarting it",
            mp.display()
        );
        if let Err(e) = crate::workspace::overlay::detach(mp) {
            log::debug!("detaching the dead view: {e} (already unmounted?)");
        }
    }
    let Some(want) = cache_bytes else {
        return crate::daemon::ensure_browse(store, mp);
    };
    let browse = crate::daemon::fsname(store, &crate::view::Namespace::Browse);
    if crate::fs::mountinfo::mount_at(mp)?.is_some_and(|m| m.source == browse) {
        let running = running_cache_bytes(store, mp);
        if running != Some(want) {
            return Err(Error::Conflict(format!(
                "the lower view of {} (shared by every workspace of the store) already runs \
                 with --cache-size {}; a size applies when the first workspace is mounted",
                store.root().display(),
                running.map_or("unknown".to_string(), crate::units::human_bytes)
            )));
        }
        return Ok(());
    }
    fs::create_dir_all(mp).map_err(|e| Error::io(mp, e))?;
    // As `daemon::ensure_browse`: private, and no materialized copies under an overlay.
    let opts = crate::daemon::StartOptions {
        cache_bytes: Some(want),
        file_cache_bytes: Some(0),
        ..crate::daemon::StartOptions::default()
    };
    crate::daemon::start(store, &crate::view::Namespace::Browse, mp, &opts).map(|_| ())
}

/// The cache size the view daemon serving `mp` was started with (its `--cache-size`, else
/// the default), from its command line; `None` when it cannot be told.
pub fn running_cache_bytes(store: &Store, mp: &Path) -> Option<u64> {
    let views = crate::daemon::list(store).ok()?;
    let pid = views
        .iter()
        .find(|v| v.mountpoint == mp)?
        .state
        .as_ref()?
        .pid;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    match args.iter().position(|a| *a == b"--cache-size") {
        Some(i) => std::str::from_utf8(args.get(i + 1)?).ok()?.parse().ok(),
        None => Some(crate::view::DEFAULT_CACHE_BYTES),
    }
}

/// Makes `/run/ckptfs/<id>/` (see `Store::mounts_dir`): root's, 0700 all the way, so no
/// other user reaches the lower view or the overlays set aside by path. A directory there
/// that is not root's is refused (root alone can write `/run`, so it is not ours to trust).
pub fn ensure_mounts_dir(store: &Store) -> Result<PathBuf> {
    let dir = store.mounts_dir();
    let base = crate::fs::userns::mounts_base();
    for d in [base.as_path(), dir.as_path()] {
        match fs::DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(d, e)),
        }
        let m = fs::symlink_metadata(d).map_err(|e| Error::io(d, e))?;
        if !m.is_dir() || m.uid() != 0 {
            return Err(Error::Conflict(format!(
                "{} is not a directory of root's; remove it (ckptfs keeps its mounts there)",
                d.display()
            )));
        }
        if m.mode() & 0o077 != 0 {
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io(d, e))?;
        }
    }
    Ok(dir)
}

/// Detaches both lower views (when no workspace of the store is mounted any more), and the one
/// a previous build mounted inside the store (`STORE/run/lower`), if any; removes the then
/// empty mount directories. Unless `held` (an overlay on them was detached while still in use,
/// and keeps its view alive until released), then waits for their daemons to exit, and
/// aborts the FUSE connection of one still running after `daemon::EXIT_WAIT`, with a warning
/// naming it (`daemon::wait_exit`).
pub fn release_view(store: &Store, held: bool) -> Result<()> {
    let [legacy, _] = store.legacy_mount_dirs();
    let [full, bare] = view_dirs(store);
    let daemons = crate::daemon::list(store).unwrap_or_default();
    let mut detached = Vec::new();
    for mp in [&full, &bare, &legacy] {
        if let Some(m) = crate::fs::mountinfo::mount_at(mp)? {
            crate::workspace::overlay::detach(mp)?;
            let pid = daemons
                .iter()
                .filter(|d| d.mountpoint == *mp && d.source == m.source)
                .find_map(|d| d.state.as_ref().map(|s| s.pid));
            detached.extend(pid.map(|pid| (pid, m.dev, mp.clone())));
        }
    }
    if held {
        for (pid, _, mp) in &detached {
            log::info!(
                "view daemon {pid} of {} serves a detached overlay still in use; it exits once that is released",
                mp.display()
            );
        }
    } else {
        for (pid, dev, mp) in &detached {
            crate::daemon::wait_exit(*pid, Some(dev), mp);
        }
    }
    let dir = store.mounts_dir();
    for d in [
        full,
        bare,
        store.detached_dir(),
        store.overlay_stage_dir(),
        dir,
    ] {
        // Best effort: one still in use (or holding an overlay set aside) stays.
        let _ignored = fs::remove_dir(d);
    }
    Ok(())
}

/// The directory overlayfs uses as the lower layer for `root` of `checkpoint`: the bare
/// view's when it serves that root (no xattrs anywhere in it), else the full view's. The
/// bare view's answer depends only on the root's trees, so every overlay of one checkpoint
/// root makes the same choice (a root whose trees it could not read, refused as well, is
/// always served right by the full view).
///
/// # Errors
/// Either view's failure to show the root (other than the bare view's refusal).
pub fn lower_root(store: &Store, checkpoint: &ObjectId, root: &str) -> Result<PathBuf> {
    let bare = store.lower_bare_view_root(checkpoint, root);
    match std::fs::symlink_metadata(&bare) {
        Ok(m) if m.is_dir() => return Ok(bare),
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "{} is not a directory",
                bare.display()
            )))
        }
        Err(e) if e.raw_os_error() == Some(crate::view::lower::bare::REFUSED) => {
            log::debug!(
                "{}:{root} has xattrs: stacking on the full lower view",
                checkpoint.short()
            );
        }
        Err(e) => return Err(Error::io(&bare, e)),
    }
    let dir = store.lower_view_root(checkpoint, root);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(Error::Invalid(format!(
            "{} is not a directory",
            dir.display()
        ))),
        Err(e) => Err(Error::io(&dir, e)),
    }
}

/// How long `mount --branch` waits at most, by default, for the lower view's warm-up of the
/// roots it mounted ([`wait_warm`]): about a second per 100k entries on the 2-core bench
/// machine; a bigger tree goes on warming in the background.
pub const WARM_WAIT: Duration = Duration::from_secs(5);

/// Waits until `deadline` for the lower view serving `lower` (a directory [`lower_root`]
/// returned) to finish its warm-up of it (`view::lower::warm`: every directory listed, so the
/// kernel holds the dentry of every entry before a `git status` looks them up one by one).
/// Returns whether it finished; `false` at once when no warm-up of it started in the daemon
/// mounted now, the view keeps no record of its warm-ups (a daemon of an older build) or
/// `lower` is not in a lower view. Polls the
/// daemon's record (`run/views/<pid>.warmed`) every 10 ms.
///
/// # Errors
/// Listing the store's view daemons.
pub fn wait_warm(store: &Store, lower: &Path, deadline: Instant) -> Result<bool> {
    let Some((view, rel)) = view_dirs(store)
        .into_iter()
        .find_map(|v| Some((v.clone(), lower.strip_prefix(&v).ok()?.to_path_buf())))
    else {
        return Ok(false);
    };
    // The daemon mounted there now: the one started last. A daemon whose view was detached
    // (the last workspace went while a walk was under way, or a busy shell still holds an
    // overlay on it) lives on with a state file naming the same mountpoint, and its record
    // may list this very root, warmed in its own mount.
    let pid = crate::daemon::list(store)?
        .into_iter()
        .filter(|m| m.mountpoint == view)
        .filter_map(|m| m.state)
        .max_by_key(|s| {
            fs::metadata(store.view_state_path(s.pid))
                .and_then(|m| m.modified())
                .ok()
        })
        .map(|s| s.pid);
    let Some(pid) = pid else {
        return Ok(false);
    };
    log::debug!(
        "waiting for the warm-up of {} by the lower view daemon {pid}",
        rel.display()
    );
    let record = store.view_warm_path(pid);
    use crate::view::lower::warm::{state, WarmState};
    loop {
        match state(&record, &rel) {
            None => return Ok(false),
            Some(WarmState::NotStarted) => {
                log::debug!("no warm-up of {} started in daemon {pid}", rel.display());
                return Ok(false);
            }
            Some(WarmState::Done) => return Ok(true),
            Some(WarmState::Running) if Instant::now() >= deadline => return Ok(false),
            Some(WarmState::Running) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
