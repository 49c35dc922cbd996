//! Where a path leads: a store directory, a mounted workspace or a read-only view. The one
//! rule the CLI applies to a `STORE` or `MOUNTPOINT|STORE` argument and to discovery from the
//! current directory (docs/cli.md, "Finding the store"): a path at or under a ckptfs mount is
//! never a store, whatever files it holds (they are the agent's); a mount is believed only
//! when its store's own records name it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::store::Store;
use crate::workspace::WorkspaceState;

/// Whether `p` names a store directory: it holds a regular `STORE.json` (not followed) and
/// is not at or under a ckptfs mount (there it is an agent's file, and `p` a workspace).
/// Whether the store is trusted is [`Store::open`]'s to say.
pub fn is_store(p: &Path) -> bool {
    std::fs::symlink_metadata(p.join(crate::store::CONFIG_FILE)).is_ok_and(|m| m.is_file())
        && crate::store::absolute(p)
            .is_ok_and(|a| crate::store::trust::ckptfs_mount_around(&a).is_ok_and(|m| m.is_none()))
}

/// The store of the ckptfs mount `dir` is in: the nearest mount above `dir` whose source names
/// a store (`ckptfs:<store>:...`, or fstab's `<store>#...`), confirmed by the store's own
/// records of that mount (its workspace state, or a view daemon's state file), so a FUSE
/// mount that merely calls itself ckptfs is not believed.
///
/// Returns the store, the mountpoint and whether it is a workspace (else a view).
pub fn discover(dir: &Path) -> Option<(PathBuf, PathBuf, bool)> {
    let mut candidates: Vec<_> = crate::fs::mountinfo::mounts()
        .ok()?
        .into_iter()
        .filter(|m| dir.starts_with(&m.mountpoint))
        .collect();
    // Deepest first; among mounts stacked on one path, the last (visible) one.
    candidates.reverse();
    candidates.sort_by_key(|m| std::cmp::Reverse(m.mountpoint.components().count()));
    for m in candidates {
        let workspace = m.fstype == "overlay";
        if !workspace && m.fstype != crate::daemon::FSTYPE {
            continue;
        }
        let Some(store_path) = crate::daemon::store_of_source(&m.source) else {
            continue;
        };
        let Ok(store) = crate::remote::open_store(&store_path) else {
            continue;
        };
        let recorded = if workspace {
            crate::workspace::find_by_path(&store, &m.mountpoint)
                .ok()
                .flatten()
                .is_some_and(|st| st.roots.values().any(|r| r.mountpoint == m.mountpoint))
        } else {
            crate::daemon::list(&store).ok().is_some_and(|l| {
                l.iter()
                    .any(|v| v.mountpoint == m.mountpoint && v.state.is_some())
            })
        };
        if recorded {
            return Some((store.root().to_path_buf(), m.mountpoint, workspace));
        }
    }
    None
}

/// Finds the workspace a path belongs to, searching the store given or the stores named in
/// mountinfo (`ckptfs:<store>:<branch>` sources).
pub fn find_workspace(path: &Path) -> Result<(Store, WorkspaceState)> {
    let abs = crate::store::absolute(path)?;
    // An ordinary account's workspaces are mounted in its namespaces (see `fs::userns`):
    // found in their holders' mount tables, then entered when the store is opened.
    let mut mounts = crate::fs::userns::holder_mounts();
    mounts.extend(crate::fs::mountinfo::mounts()?);
    for m in mounts.iter().rev() {
        if m.fstype != "overlay" || !abs.starts_with(&m.mountpoint) {
            continue;
        }
        let Some(rest) = m.source.strip_prefix("ckptfs:") else {
            continue;
        };
        let Some((store_path, _branch)) = rest.rsplit_once(':') else {
            continue;
        };
        let s = crate::remote::open_store(Path::new(store_path))?;
        if let Some(st) = crate::workspace::find_by_path(&s, &m.mountpoint)? {
            return Ok((s, st));
        }
    }
    Err(Error::NotFound(format!(
        "{} is not in a mounted ckptfs workspace",
        abs.display()
    )))
}

/// What a `MOUNTPOINT|STORE` argument names.
pub enum Place {
    /// A store directory (trusted: [`Store::open`] checked it).
    Store(Store),
    /// A mounted workspace, found through the kernel's mount table and confirmed by its
    /// store's records.
    Workspace(Store, WorkspaceState),
}

/// Resolves a `MOUNTPOINT|STORE`: a path at or under a ckptfs mount is a workspace, never a
/// store, whatever files it holds (they are the agent's); else a directory holding
/// `STORE.json` is a store (refused unless trusted); else the workspace the path is in.
///
/// # Errors
/// The store's refusal; `NotFound` when the path is in no mounted workspace.
pub fn resolve_place(place: &Path) -> Result<Place> {
    let abs = crate::store::absolute(place)?;
    let mounted = crate::store::trust::ckptfs_mount_around(&abs)?.is_some();
    if !mounted && is_store(&abs) {
        return Ok(Place::Store(crate::remote::open_store(&abs)?));
    }
    let (s, st) = find_workspace(&abs)?;
    Ok(Place::Workspace(s, st))
}

/// Resolves `MOUNTPOINT|STORE [--branch B]` (see [`resolve_place`]) to a store and branch;
/// a branch given with a store need not be mounted.
///
/// # Errors
/// As [`resolve_place`]; `Usage` when a store has no single mounted workspace and no branch
/// is named, or the workspace shows another branch than the one named.
pub fn target(place: &Path, branch: Option<&str>) -> Result<(Store, String)> {
    match resolve_place(place)? {
        Place::Store(s) => {
            if let Some(b) = branch {
                return Ok((s, b.to_string()));
            }
            let live: Vec<String> = crate::workspace::states(&s)?
                .into_iter()
                .map(|st| st.branch)
                .collect();
            match live.as_slice() {
                [one] => {
                    let b = one.clone();
                    Ok((s, b))
                }
                _ => Err(Error::Usage(format!(
                    "{}: name the branch with --branch (mounted: {})",
                    place.display(),
                    if live.is_empty() {
                        "none".into()
                    } else {
                        live.join(", ")
                    }
                ))),
            }
        }
        Place::Workspace(_, st) if branch.is_some_and(|b| b != st.branch) => {
            Err(Error::Usage(format!(
                "{} shows branch {}, not {}",
                place.display(),
                st.branch,
                branch.unwrap_or_default()
            )))
        }
        Place::Workspace(s, st) => Ok((s, st.branch)),
    }
}
