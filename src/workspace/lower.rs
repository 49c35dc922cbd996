//! The lower layers of workspaces: a checkpoint root as a directory overlayfs can stack on.
//!
//! STAND-IN until the read-only FUSE view lands: a checkpoint root is materialized once into
//! `cache/lowercopy/<id>/<root>` (rebuildable cache). Replaced by the lazily-read browse view
//! mounted at `run/lower`.

use std::fs;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// Makes sure the lower view is available.
pub fn ensure_view(_store: &Store) -> Result<()> {
    Ok(())
}

/// Stops the lower view when no workspace uses it.
pub fn release_view(_store: &Store) -> Result<()> {
    Ok(())
}

/// The directory overlayfs uses as the lower layer for `root` of `checkpoint`.
pub fn lower_root(store: &Store, checkpoint: &ObjectId, root: &str) -> Result<PathBuf> {
    let dir = store.lower_copy_dir().join(checkpoint.to_hex()).join(root);
    if dir.exists() {
        return Ok(dir);
    }
    let c = store.read_checkpoint(checkpoint)?;
    let rec = c.roots.get(root).ok_or_else(|| {
        Error::NotFound(format!("root {root} in checkpoint {}", checkpoint.short()))
    })?;
    let tmp = dir.with_extension("tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let mut counts = (0, 0);
    crate::ops::restore::materialize_dir(store, &rec.tree, &tmp, &mut counts)?;
    crate::ops::restore::apply_meta(&tmp, false, rec.mode, rec.uid, rec.gid, rec.mtime_ns, &[])?;
    fs::rename(&tmp, &dir).map_err(|e| Error::io(&dir, e))?;
    Ok(dir)
}
