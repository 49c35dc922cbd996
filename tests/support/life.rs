//! Where a store keeps its mounts (`/run/ckptfs/<id>/`, outside the store: see
//! docs/workspaces.md), and the processes the workspace lifecycle tests leave inside a tree.

use std::path::{Path, PathBuf};

use sha2::Digest;

/// `/run/ckptfs/<id>/` of the store at `store` (an absolute path, as the store records it).
pub fn store_mounts_dir(store: &Path) -> PathBuf {
    let hex = format!(
        "{:x}",
        sha2::Sha256::digest(store.as_os_str().as_encoded_bytes())
    );
    Path::new("/run/ckptfs").join(&hex[..16])
}

/// The directory the store's workspaces stack on (its lower view).
pub fn lower_view(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("lower")
}

/// The old overlays a switch or a fold set aside.
pub fn detached_dir(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("detached")
}
