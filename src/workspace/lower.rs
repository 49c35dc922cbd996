//! The lower layers of workspaces: the store's read-only browse view, mounted once per store
//! at `STORE/run/lower` by its own daemon; a checkpoint root is then the directory
//! `run/lower/checkpoints/<id>/<root>`, read lazily from the store, which overlayfs stacks on.
//!
//! The view outlives the workspaces that use it only as long as the kernel needs it: when the
//! last workspace is unmounted the view is detached lazily, so an overlay that a busy shell
//! still holds (detached by `switch`/`umount`) keeps reading until it is released, and then
//! the view daemon exits by itself. Its pin lists only the checkpoints whose directory the
//! kernel holds (the bases of live overlays, attached or detached), so gc can prune the rest
//! while workspaces are mounted.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// Makes sure the lower view is mounted (starts its daemon if needed). Call without holding
/// the store lock: the daemon takes it to register its pin.
pub fn ensure_view(store: &Store) -> Result<()> {
    let mp = store.lower_view_dir();
    // A view whose daemon died answers ENOTCONN until fusermount3's auto-unmount catches up:
    // detach it now so a fresh daemon can take its place.
    // (statfs always reaches the daemon: the view answers OPENDIR with ENOSYS, so the kernel
    // lists directories from its cache, even for a dead daemon.)
    if crate::mountinfo::mount_at(&mp)?.is_some() && nix::sys::statfs::statfs(&mp).is_err() {
        log::warn!(
            "the store's lower view at {} is dead; restarting it",
            mp.display()
        );
        if let Err(e) = crate::workspace::overlay::detach(&mp) {
            log::debug!("detaching the dead view: {e} (already unmounted?)");
        }
    }
    crate::daemon::ensure_browse(store, &mp)
}

/// Detaches the lower view (when no workspace of the store is mounted any more).
pub fn release_view(store: &Store) -> Result<()> {
    let mp = store.lower_view_dir();
    if crate::mountinfo::mount_at(&mp)?.is_some() {
        crate::workspace::overlay::detach(&mp)?;
    }
    Ok(())
}

/// The directory overlayfs uses as the lower layer for `root` of `checkpoint`.
pub fn lower_root(store: &Store, checkpoint: &ObjectId, root: &str) -> Result<PathBuf> {
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
