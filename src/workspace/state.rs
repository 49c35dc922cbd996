//! What is recorded about workspaces: the mount state files (`run/mounts/B.json`), the
//! checkpoint each branch's upper layers apply to (`upper/B/base.json`), and whether a recorded
//! workspace is really mounted.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::refs::Branch;
use crate::store::Store;

/// `upper/<branch>/base.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpperBase {
    pub base: ObjectId,
}

/// One mounted root. Compared whole (a parked overlay is resumed only when a fresh mount
/// would build the very same roots, see `park`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountedRoot {
    pub mountpoint: PathBuf,
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// `run/mounts/<branch>.json`: a mounted workspace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkspaceState {
    pub branch: String,
    pub base: ObjectId,
    pub roots: BTreeMap<String, MountedRoot>,
    pub mounted_ns: i64,
    /// Cgroups every checkpoint of this workspace freezes (`mount --freeze-cgroup`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freeze_cgroups: Vec<PathBuf>,
    /// Every checkpoint of this workspace freezes the store's filesystem (`mount --freeze-fs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freeze_fs: bool,
    /// The upper layer is folded only once it holds more than this many bytes (`mount
    /// --fold-budget`): until then the files the agent writes stay in it, with no copy-up
    /// after a checkpoint, and are stored twice meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fold_budget: Option<u64>,
}

pub(super) fn source_name(store: &Store, branch: &str) -> String {
    format!("ckptfs:{}:{branch}", store.root().display())
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<Option<T>> {
    match fs::read(p) {
        Ok(d) => serde_json::from_slice(&d)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(p, e)),
    }
}

/// Encodes `v` for `p`, creating `p`'s directory (0700) if needed.
fn json_for(p: &Path, v: &impl Serialize) -> Result<Vec<u8>> {
    if let Some(d) = p.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(d)
            .map_err(|e| Error::io(d, e))?;
    }
    serde_json::to_vec_pretty(v).map_err(|e| Error::Invalid(format!("encoding JSON: {e}")))
}

pub(super) fn write_json(p: &Path, v: &impl Serialize) -> Result<()> {
    atomic::write_atomic_replace(p, &json_for(p, v)?, 0o600)
}

/// Writes the state of a mounted workspace (`run/mounts/B.json`): atomically, not synced,
/// since it describes mounts that a reboot removes (see `atomic::write_atomic_replace_volatile`).
pub(super) fn write_mount_state(store: &Store, st: &WorkspaceState) -> Result<()> {
    let p = store.workspace_state_path(&st.branch);
    atomic::write_atomic_replace_volatile(&p, &json_for(&p, st)?, 0o600)
}

/// The mounted workspace of `branch`, if its state file exists.
pub fn state(store: &Store, branch: &str) -> Result<Option<WorkspaceState>> {
    read_mount_record(&store.workspace_state_path(branch))
}

/// A mount record, `None` also when it does not parse: it is never synced, so a power loss
/// can leave it empty, and the mounts it described are gone with the reboot. A warning says
/// so at each read; `recover` removes it (`upkeep::inventory::unreadable_mount_records`).
fn read_mount_record(p: &Path) -> Result<Option<WorkspaceState>> {
    match read_json(p) {
        Err(Error::Corrupt(m)) => {
            log::warn!("{m}: unreadable workspace record, taken as not mounted (a power loss cuts these; `ckptfs recover` removes it)");
            Ok(None)
        }
        other => other,
    }
}

/// Every mounted workspace (by state file).
pub fn states(store: &Store) -> Result<Vec<WorkspaceState>> {
    let mut out = Vec::new();
    for (p, _) in crate::fs::json_records(&store.workspace_states_dir())? {
        if let Some(s) = read_mount_record(&p)? {
            out.push(s);
        }
    }
    out.sort_by(|a, b| a.branch.cmp(&b.branch));
    Ok(out)
}

/// True when the state's overlays are really mounted (its first root is, with our source).
pub fn is_live(store: &Store, st: &WorkspaceState) -> Result<bool> {
    let src = source_name(store, &st.branch);
    let mounts = crate::fs::mountinfo::mounts()?;
    Ok(st.roots.values().any(|r| {
        mounts
            .iter()
            .any(|m| m.mountpoint == r.mountpoint && m.fstype == "overlay" && m.source == src)
    }))
}

/// Is `branch` mounted right now?
pub fn is_mounted(store: &Store, branch: &str) -> Result<bool> {
    match state(store, branch)? {
        Some(st) => is_live(store, &st),
        None => Ok(false),
    }
}

/// True when a mounted root answers: its mountpoint can be listed, and a lookup of a name
/// no one uses reaches its lower layer and comes back (a dead lower view answers ENOTCONN;
/// a listing alone may come from overlayfs's cache of a merged directory).
/// The workspace is the agent's: read through a held fd of the mountpoint, nothing followed.
pub(super) fn answers(r: &MountedRoot) -> bool {
    let Ok(dir) = crate::fs::safe::Dir::open(&r.mountpoint) else {
        return false;
    };
    let probe = format!(
        ".ckptfs-probe-{}-{}",
        std::process::id(),
        crate::text::time::now_ns()
    );
    dir.entries().is_ok() && dir.stat(probe).is_ok()
}

/// Finds the mounted workspace that `path` (a mountpoint, or a path inside one) belongs to.
pub fn find_by_path(store: &Store, path: &Path) -> Result<Option<WorkspaceState>> {
    let abs = crate::store::absolute(path)?;
    for st in states(store)? {
        if st.roots.values().any(|r| abs.starts_with(&r.mountpoint)) {
            return Ok(Some(st));
        }
    }
    Ok(None)
}

pub(super) fn require_branch(store: &Store, name: &str) -> Result<(Branch, ObjectId)> {
    let b = store
        .read_branch(name)?
        .ok_or_else(|| Error::NotFound(format!("branch {name}")))?;
    let head = b.head.ok_or_else(|| {
        Error::NotFound(format!(
            "branch {name} has no checkpoint yet (run `ckptfs capture` first)"
        ))
    })?;
    Ok((b, head))
}

/// The base checkpoint of a branch's upper layers (its head when it has none).
pub(super) fn upper_base(store: &Store, branch: &str, head: ObjectId) -> Result<ObjectId> {
    Ok(read_json::<UpperBase>(&store.upper_base_path(branch))?.map_or(head, |b| b.base))
}
