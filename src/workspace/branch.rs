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

/// Most branches one `fork --count` makes: enough for best-of-N, few enough that a slip
/// (`--count 1000`) does not bury `branch list`.
pub const MAX_FORK_COUNT: u32 = 64;

/// `ckptfs fork`: a new branch whose head is `checkpoint` (O(1); nothing is copied).
///
/// # Errors
/// `Usage` for a bad name; `NotFound` for an unknown checkpoint; `Conflict` when `name` is
/// already a branch or a label.
pub fn fork(store: &Store, checkpoint: &str, name: &str) -> Result<ObjectId> {
    check_name("branch", name)?;
    let id = store.resolve(checkpoint)?;
    store.mutate(
        "fork",
        serde_json::json!({"checkpoint": id, "name": name}),
        |_| {
            make_forks(store, id, &[name.to_string()])?;
            Ok((id, serde_json::Value::Null))
        },
    )
}

/// `ckptfs fork --count N`: branches `NAME-1` .. `NAME-N` whose heads are `checkpoint`, in
/// one store mutation (each O(1)): all of them or none. Returns the checkpoint and the names.
/// A crash halfway leaves the marker naming them, and `recover` removes those made
/// ([`roll_back_fork`]).
///
/// # Errors
/// `Usage` for a count outside 1..=[`MAX_FORK_COUNT`] or a bad name; `NotFound` for an
/// unknown checkpoint; `Conflict` naming the first `NAME-i` that is already a branch or a
/// label (nothing is made).
pub fn fork_numbered(
    store: &Store,
    checkpoint: &str,
    name: &str,
    count: u32,
) -> Result<(ObjectId, Vec<String>)> {
    if !(1..=MAX_FORK_COUNT).contains(&count) {
        return Err(Error::Usage(format!(
            "--count {count}: give 1 to {MAX_FORK_COUNT} branches"
        )));
    }
    let names: Vec<String> = (1..=count).map(|i| format!("{name}-{i}")).collect();
    for n in &names {
        check_name("branch", n)?;
    }
    let id = store.resolve(checkpoint)?;
    store.mutate(
        "fork",
        serde_json::json!({"checkpoint": id, "names": names}),
        |_| {
            make_forks(store, id, &names)?;
            Ok(((id, names.clone()), serde_json::Value::Null))
        },
    )
}

/// Writes a branch at `id` for each of `names`, after checking that none is taken (a
/// branch or a label). Callers hold the store lock.
fn make_forks(store: &Store, id: ObjectId, names: &[String]) -> Result<()> {
    for name in names {
        if store.read_branch(name)?.is_some() {
            return Err(Error::Conflict(format!("branch {name} already exists")));
        }
        if store.read_label(name)?.is_some() {
            return Err(Error::Conflict(format!(
                "{name} is already a label; pick another name"
            )));
        }
    }
    let now = now_ns();
    for name in names {
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
    }
    Ok(())
}

/// `recover` after a `fork --count` that did not finish (`args`: its marker's): removes the
/// branches it made, so none of them is left. The fork checked that none of its names was
/// taken before writing any, and nothing else ran since (the marker stops every mutation),
/// so a branch of those names still at the fork point is one it made. Returns what it did.
///
/// # Errors
/// I/O removing a branch file.
pub fn roll_back_fork(store: &Store, args: &serde_json::Value) -> Result<Vec<String>> {
    let (Some(names), Some(at)) = (
        args.get("names").and_then(|n| n.as_array()),
        args.get("checkpoint")
            .and_then(|c| c.as_str())
            .and_then(|c| ObjectId::parse(c).ok()),
    ) else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for name in names.iter().filter_map(|n| n.as_str()) {
        if check_name("branch", name).is_err() {
            continue;
        }
        let Ok(Some(b)) = store.read_branch(name) else {
            continue;
        };
        if b.head == Some(at) && b.forked_from == Some(at) {
            let p = store.branch_path(name);
            fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            removed.push(name.to_string());
        }
    }
    if removed.is_empty() {
        return Ok(Vec::new());
    }
    atomic::sync_path(&store.branches_dir())?;
    Ok(vec![format!(
        "removed the branches an interrupted fork --count made ({}): run it again",
        removed.join(", ")
    )])
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
