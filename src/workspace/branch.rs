//! The workspace side of a branch's lifecycle: fork, archive, unarchive, delete (refused while
//! mounted or with un-checkpointed changes; a parked branch is evicted first, see `park`) and
//! the space its upper layers take. The refs
//! themselves are read and written by `store::refs`.

use std::fs;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::refs::check_name;
use crate::store::refs::Branch;
use crate::store::Store;
use crate::text::time::now_ns;

use super::checkpoint::is_dirty;
use super::state::is_mounted;
use super::upper::displace_upper;

/// `ckptfs fork`: a new branch whose head is `checkpoint` (O(1); nothing is copied).
pub fn fork(store: &Store, checkpoint: &str, name: &str) -> Result<ObjectId> {
    check_name("branch", name)?;
    let id = store.resolve(checkpoint)?;
    store.mutate(
        "fork",
        serde_json::json!({"checkpoint": id, "name": name}),
        |_| {
            if store.read_branch(name)?.is_some() {
                return Err(Error::Conflict(format!("branch {name} already exists")));
            }
            if store.read_label(name)?.is_some() {
                return Err(Error::Conflict(format!(
                    "{name} is already a label; pick another name"
                )));
            }
            let now = now_ns();
            store.write_branch(
                name,
                &Branch {
                    head: Some(id),
                    forked_from: Some(id),
                    state: "active".into(),
                    created_ns: now,
                    updated_ns: now,
                },
            )?;
            Ok((id, serde_json::Value::Null))
        },
    )
}

/// `branch archive` / `branch unarchive`.
pub fn set_archived(store: &Store, branch: &str, archived: bool) -> Result<()> {
    let op = if archived {
        "branch-archive"
    } else {
        "branch-unarchive"
    };
    store.mutate(op, serde_json::json!({"branch": branch}), |_| {
        let mut b = store
            .read_branch(branch)?
            .ok_or_else(|| Error::NotFound(format!("branch {branch}")))?;
        if archived && is_mounted(store, branch)? {
            return Err(Error::Conflict(format!(
                "branch {branch} is mounted; unmount it first"
            )));
        }
        if archived {
            super::park::evict(store, branch)?;
        }
        b.state = if archived { "archived" } else { "active" }.into();
        b.updated_ns = now_ns();
        store.write_branch(branch, &b)?;
        Ok(((), serde_json::Value::Null))
    })
}

/// `branch delete`: removes the ref (objects go only through gc). Refuses while mounted, and
/// when the workspace has un-checkpointed changes unless `force` (they move to displaced/).
pub fn delete_branch(store: &Store, branch: &str, force: bool) -> Result<Option<PathBuf>> {
    store.mutate("branch-delete", serde_json::json!({"branch": branch, "force": force}), |_| {
        if store.read_branch(branch)?.is_none() {
            return Err(Error::NotFound(format!("branch {branch}")));
        }
        if is_mounted(store, branch)? {
            return Err(Error::Conflict(format!("branch {branch} is mounted; unmount it first")));
        }
        // Parked by a switch: detached first (its upper folded when its head records it).
        super::park::evict(store, branch)?;
        if store.upper_branch_dir(branch).exists() && !force && is_dirty(store, branch)? {
            return Err(Error::Conflict(format!(
                "branch {branch} has un-checkpointed changes in its workspace; checkpoint them or use --force"
            )));
        }
        let displaced = displace_upper(store, branch)?;
        let p = store.branch_path(branch);
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        atomic::sync_path(&store.branches_dir())?;
        let _ignored = fs::remove_file(store.workspace_state_path(branch));
        Ok((displaced.clone(), serde_json::json!({"displaced": displaced})))
    })
}

/// Makes way for a command other than `checkpoint` to move `branch`'s head (`merge`): refuses
/// while the branch is mounted or has un-checkpointed changes (as git refuses a dirty tree),
/// and lets go of what an earlier mount left applying to the old head: an empty upper layer
/// forgets its base; a clean one that still holds copied-up files moves to `displaced/`.
/// Callers hold the store lock.
///
/// # Errors
/// `Conflict` naming the mount or the changes.
pub fn release_head(store: &Store, branch: &str) -> Result<Option<PathBuf>> {
    if is_mounted(store, branch)? {
        let at = super::state::state(store, branch)?
            .and_then(|st| st.roots.values().next().map(|r| r.mountpoint.clone()))
            .map_or(String::new(), |p| format!(" at {}", p.display()));
        return Err(Error::Conflict(format!(
            "branch {branch} is mounted{at}; unmount it (`ckptfs umount`) and merge again \
             (merging into a live workspace is not supported yet)"
        )));
    }
    super::park::evict(store, branch)?;
    if !store.upper_branch_dir(branch).exists() {
        return Ok(None);
    }
    if is_dirty(store, branch)? {
        return Err(Error::Conflict(format!(
            "branch {branch} has un-checkpointed changes in its workspace; mount it and \
             checkpoint them first"
        )));
    }
    let empty = store.config().roots.keys().all(|root| {
        crate::fs::safe::Dir::open(&store.upper_dir(branch, root))
            .and_then(|d| d.entries())
            .map_or(true, |e| e.is_empty())
    });
    if empty {
        let p = store.upper_base_path(branch);
        match fs::remove_file(&p) {
            Ok(()) => atomic::sync_path(&store.upper_branch_dir(branch))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&p, e)),
        }
        return Ok(None);
    }
    displace_upper(store, branch)
}
