//! Inventory of a store's state on disk: which object files exist, which workspaces stand on
//! which checkpoint, which mounts name the store, and which artifacts are stale (left by
//! processes that are gone). `gc` deletes stale artifacts, `doctor` reports them and `recover`
//! repairs them; all three ask here, so they agree on what "stale" means.
//!
//! Nothing here deletes or changes anything.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fs::atomic;
use crate::fs::mountinfo::{self, MountEntry};
use crate::fs::{file_name, list_dir};
use crate::id::ObjectId;
use crate::store::lock::pid_alive;
use crate::store::object::object_files;
use crate::store::pin::Pin;
use crate::store::Store;

/// A socket younger than this may belong to a daemon between bind(2) and listen(2).
const SOCKET_GRACE_SECS: u64 = 30;

/// Object files that are writable by anyone (objects are 0444). Only regular files: a symlink
/// where an object should be is never a way to chmod what it points to (doctor reports it).
///
/// # Errors
/// I/O listing `objects/`.
pub fn writable_objects(store: &Store) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (p, _) in object_files(store)? {
        if let Ok(md) = fs::symlink_metadata(&p) {
            if md.is_file() && md.mode() & 0o222 != 0 {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Checkpoints that live workspaces stand on: the `base` of `upper/B/base.json` and of
/// `run/mounts/B.json`, as (branch, checkpoint). Unreadable state files are skipped (a
/// workspace being set up or torn down).
pub fn workspace_bases(store: &Store) -> Vec<(String, ObjectId)> {
    let read_base = |p: &Path| -> Option<ObjectId> {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(p).ok()?).ok()?;
        ObjectId::parse(v.get("base")?.as_str()?).ok()
    };
    let mut out = Vec::new();
    for d in list_dir(&store.upper_base_dir()).unwrap_or_default() {
        let b = file_name(&d);
        // A merge in progress (`workspace::pending`) stands on the merge's two sides.
        if let Ok(Some(p)) = crate::workspace::pending::read(store, &b) {
            out.push((b.clone(), p.ours));
            out.push((b.clone(), p.theirs));
        }
        if let Some(id) = read_base(&store.upper_base_path(&b)) {
            out.push((b, id));
        }
    }
    let mounts_dir = store.workspace_state_path("x");
    if let Some(dir) = mounts_dir.parent() {
        for p in list_dir(dir).unwrap_or_default() {
            let name = file_name(&p);
            if let (Some(b), Some(id)) = (name.strip_suffix(".json"), read_base(&p)) {
                out.push((b.to_string(), id));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The directories where temp files of the store's atomic writes live: `tmp/` (everything in
/// it is a temp file) and the ones where `.tmp-*` files are renamed into place.
pub fn temp_dirs(store: &Store) -> [PathBuf; 8] {
    [
        store.tmp_dir(),
        store.root().to_path_buf(),
        store.checkpoints_dir(),
        store.branches_dir(),
        store.labels_dir(),
        store.run_dir(),
        store.pins_dir(),
        store.park_records_dir(),
    ]
}

/// Temp files left by processes that are gone (see [`temp_dirs`]); a temp name without an
/// owner pid counts as gone.
///
/// # Errors
/// I/O listing one of the directories.
pub fn leftover_temps(store: &Store) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for dir in temp_dirs(store) {
        let in_tmp = dir == store.tmp_dir();
        for p in list_dir(&dir)? {
            let name = file_name(&p);
            if p.is_dir() || !(in_tmp || name.starts_with(".tmp-")) {
                continue;
            }
            if atomic::temp_owner_pid(&name).is_none_or(|pid| !pid_alive(pid)) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Pins (`run/pins/*.json`) whose process is gone. An unreadable pin is not called dead.
///
/// # Errors
/// I/O listing `run/pins/`.
pub fn dead_pins(store: &Store) -> Result<Vec<PathBuf>> {
    Ok(list_dir(&store.pins_dir())?
        .into_iter()
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("json"))
        .filter(|p| match fs::read(p) {
            // A pin is replaced atomically and never synced (it describes a live process):
            // one that does not parse was cut by a power loss, and its process is gone.
            Ok(d) => serde_json::from_slice::<Pin>(&d).map_or(true, |pin| !pid_alive(pin.pid)),
            Err(_) => false,
        })
        .collect())
}

/// Workspace mount records (`run/mounts/B.json`) that do not parse: written atomically and
/// never synced (they describe live mounts), so only a power loss leaves one empty or cut,
/// and the mounts it described went with it.
pub fn unreadable_mount_records(store: &Store) -> Vec<PathBuf> {
    list_dir(&store.workspace_states_dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("json"))
        .filter(|p| {
            // The same parse `workspace::state` makes (it takes these as not mounted).
            fs::read(p).is_ok_and(|d| {
                serde_json::from_slice::<crate::workspace::WorkspaceState>(&d).is_err()
            })
        })
        .collect()
}

/// Files under `run/`, recursively, with their metadata, without entering a mount: the
/// workspaces' lower view (`run/lower`) is the whole history through FUSE, and walking it
/// would read every checkpoint's tree (and hand the kernel, and so the view's pin, every
/// checkpoint). Entries that vanish while listed are skipped.
fn run_files(store: &Store) -> Vec<(PathBuf, fs::Metadata)> {
    let Ok(top) = fs::symlink_metadata(store.run_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut stack = vec![store.run_dir()];
    while let Some(d) = stack.pop() {
        for p in list_dir(&d).unwrap_or_default() {
            let Ok(md) = fs::symlink_metadata(&p) else {
                continue;
            };
            if md.is_dir() {
                if md.dev() == top.dev() {
                    stack.push(p);
                }
            } else {
                out.push((p, md));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Socket files under `run/` (recursively) that nobody listens on, and older than a grace
/// period, so a daemon that is just starting is not mistaken for a dead one.
pub fn dead_sockets(store: &Store) -> Vec<PathBuf> {
    run_files(store)
        .into_iter()
        .filter(|(p, md)| {
            md.file_type().is_socket()
                && md
                    .modified()
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age.as_secs() >= SOCKET_GRACE_SECS)
                && std::os::unix::net::UnixStream::connect(p).is_err()
        })
        .map(|(p, _)| p)
        .collect()
}

/// `*.pid` files under `run/` (recursively) whose process is gone.
pub fn dead_pid_files(store: &Store) -> Vec<PathBuf> {
    run_files(store)
        .into_iter()
        .filter(|(p, _)| {
            p.extension().and_then(|x| x.to_str()) == Some("pid")
                && fs::read_to_string(p)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .is_some_and(|pid| !pid_alive(pid))
        })
        .map(|(p, _)| p)
        .collect()
}

/// Mounts whose source names this store (`ckptfs:<store>`, `ckptfs:<store>:...`, or
/// fstab's `<store>#...`: [`crate::daemon::source_names_store`]). An unreadable mount table
/// gives none.
pub fn store_mounts(store: &Store) -> Vec<MountEntry> {
    mountinfo::mounts()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| crate::daemon::source_names_store(&m.source, store))
        .collect()
}

/// True when the mount point answers "Transport endpoint is not connected" (daemon gone).
pub fn mount_is_dead(m: &MountEntry) -> bool {
    matches!(fs::metadata(&m.mountpoint), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// Whether a mount uses `p`: a mount point at or below it, or `p` named in its options (an
/// overlay's lowerdir or upperdir).
pub fn in_use_by_mount(mounts: &[MountEntry], p: &Path) -> bool {
    let ps = p.to_string_lossy();
    mounts
        .iter()
        .any(|m| m.mountpoint.starts_with(p) || m.options.contains(ps.as_ref()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::store::{InitOptions, RootConfig, TOP_LEVEL};

    #[test]
    fn init_makes_exactly_the_top_level_entries_the_paths_name() {
        let t = tempfile::tempdir().unwrap();
        let roots = [(
            "workspace".to_string(),
            RootConfig {
                path: t.path().join("room"),
                exclude: Vec::new(),
            },
        )];
        let opts = InitOptions {
            roots: roots.into_iter().collect(),
            ..Default::default()
        };
        let s = Store::init(&t.path().join("store"), &opts).unwrap();
        let made: BTreeSet<String> = list_dir(s.root())
            .unwrap()
            .iter()
            .map(|p| file_name(p))
            .collect();
        let listed: BTreeSet<String> = TOP_LEVEL.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(made, listed);
        for p in [
            s.config_path(),
            s.objects_dir(),
            s.checkpoints_dir(),
            s.branches_dir(),
            s.tmp_dir(),
            s.run_dir(),
            s.upper_base_dir(),
            s.displaced_dir(),
            s.cache_dir(),
            s.audit_path(),
            s.lock_path(),
        ] {
            let top = p
                .strip_prefix(s.root())
                .unwrap()
                .components()
                .next()
                .unwrap();
            let top = top.as_os_str().to_string_lossy().into_owned();
            assert!(listed.contains(&top), "{} is not in TOP_LEVEL", p.display());
        }
        assert!(leftover_temps(&s).unwrap().is_empty());
        assert!(dead_pins(&s).unwrap().is_empty());
        assert!(writable_objects(&s).unwrap().is_empty());
    }
}
