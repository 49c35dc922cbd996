//! A merge in progress in a mounted workspace (`ckptfs merge` into a branch that is mounted,
//! see `crate::merge`): what is being merged, and the conflicts it left in the workspace for
//! the operator or the agent to resolve. The next checkpoint with every conflict resolved
//! records the merge (two parents); `merge --abort` puts the workspace back.
//!
//! Recorded in `upper/B/merge.json`, beside the upper layers it describes, so whatever sets
//! those aside (`switch --discard`, a deleted branch) takes it along, and nothing drops the
//! layers while it is there (the fold, a mount's rebase and a switch keep them: see
//! [`is_pending`]).
//!
//! A conflict is resolved when what a checkpoint would record at its path is no longer what
//! the merge left there: a text file left with conflict markers once no marker line is left
//! (or it is gone); anything else once its content, type, mode, owner or xattrs changed (or
//! it is gone), or `merge --take` wrote one side there. Judged on the recorded tree (or, for
//! `status`, the workspace's dry-run tree), never on inode numbers or times.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::fs::atomic;
use crate::history::diff::Side;
use crate::id::ObjectId;
use crate::store::tree::{Entry, EntryKind};
use crate::store::Store;

use super::state::{read_json, write_json};

/// `upper/B/merge.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingMerge {
    /// What is merged in, as named on the command line.
    pub source: String,
    pub theirs: ObjectId,
    /// The branch head when the merge started (the workspace held exactly it).
    pub ours: ObjectId,
    pub base: Option<ObjectId>,
    /// The merge checkpoint's message.
    pub message: String,
    /// False until every change is written into the workspace and synced: a merge cut short
    /// while writing is never recorded as a merge (`merge --abort` puts the workspace back).
    pub applied: bool,
    pub conflicts: Vec<PendingConflict>,
}

/// Where a checkpoint left the merge in progress in its workspace.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MergeProgress {
    pub source: String,
    pub theirs: ObjectId,
    /// This checkpoint records the merge: its second parent is `theirs`, and the merge is
    /// over.
    pub recorded: bool,
    /// Conflicts still open (their `ROOT/PATH`s): the merge stays in progress, and this
    /// checkpoint (if one was recorded) has one parent.
    pub unresolved: Vec<String>,
    /// The merge was cut short while being written into the workspace: it is never recorded
    /// as a merge; `ckptfs merge --abort` puts the workspace back.
    pub interrupted: bool,
}

/// A merge in progress as `status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct MergeStatus {
    pub source: String,
    pub theirs: ObjectId,
    /// The branch head when the merge started (what `merge --abort` puts back).
    pub ours: ObjectId,
    /// Cut short while being written into the workspace (see [`MergeProgress`]).
    pub interrupted: bool,
    pub conflicts: Vec<ConflictStatus>,
}

/// One conflict of a merge in progress, judged on the workspace as it is now.
#[derive(Clone, Debug, Serialize)]
pub struct ConflictStatus {
    pub path: String,
    pub kind: String,
    pub resolved: bool,
    /// The side `merge --take` wrote there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken: Option<String>,
}

/// The status of `p` in `side` (the workspace's dry-run tree).
///
/// # Errors
/// As [`unresolved`].
pub fn status(store: &Store, side: &Side, p: &PendingMerge) -> Result<MergeStatus> {
    let open = unresolved(store, side, p)?;
    Ok(MergeStatus {
        source: p.source.clone(),
        theirs: p.theirs,
        ours: p.ours,
        interrupted: !p.applied,
        conflicts: p
            .conflicts
            .iter()
            .map(|c| ConflictStatus {
                path: c.path.clone(),
                kind: c.kind.clone(),
                resolved: !open.contains(&c.path),
                taken: c.taken.clone(),
            })
            .collect(),
    })
}

/// A conflict left in the workspace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingConflict {
    /// `ROOT/PATH`.
    pub path: String,
    /// As in the merge report ("content", "modify-delete", ...).
    pub kind: String,
    /// A text file left with git's conflict markers.
    pub markers: bool,
    /// What the merge left at the path ([`entry_key`]).
    pub left: String,
    /// The side `merge --take` wrote there ("ours" or "theirs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken: Option<String>,
}

fn path(store: &Store, branch: &str) -> std::path::PathBuf {
    store.upper_branch_dir(branch).join("merge.json")
}

/// The merge in progress in `branch`'s workspace, if any.
///
/// # Errors
/// A record that does not parse (`Corrupt`, naming it).
pub fn read(store: &Store, branch: &str) -> Result<Option<PendingMerge>> {
    read_json(&path(store, branch))
}

/// Whether a merge is in progress in `branch`'s workspace (its upper layers must stay).
pub fn is_pending(store: &Store, branch: &str) -> bool {
    path(store, branch).exists()
}

/// Records (or updates) the merge in progress: durably, replacing the old record whole.
///
/// # Errors
/// I/O writing it.
pub fn write(store: &Store, branch: &str, p: &PendingMerge) -> Result<()> {
    write_json(&path(store, branch), p)
}

/// Ends the merge in progress (recorded or aborted): the record is removed, durably.
///
/// # Errors
/// I/O removing it or syncing its directory.
pub fn remove(store: &Store, branch: &str) -> Result<()> {
    let p = path(store, branch);
    atomic::remove_file(&p)?;
    atomic::sync_path(&store.upper_branch_dir(branch))
}

/// Whether `head` already records the merge (a crash came between publishing the merge
/// checkpoint and removing the record).
///
/// # Errors
/// `head`'s record does not read.
pub fn recorded_by(store: &Store, head: &ObjectId, p: &PendingMerge) -> Result<bool> {
    Ok(*head != p.ours && store.read_checkpoint(head)?.parents.contains(&p.theirs))
}

/// What a conflict's resolution is judged against: the entry's type and content, mode,
/// owner and xattrs (not its times or inode number), hashed; "none" for no entry.
pub fn entry_key(e: Option<&Entry>) -> String {
    let Some(e) = e else {
        return "none".into();
    };
    // Lengths before variable parts: no two different entries give the same bytes.
    let mut all = Vec::new();
    let mut put = |b: &[u8]| {
        all.extend_from_slice(&(b.len() as u64).to_le_bytes());
        all.extend_from_slice(b);
    };
    match &e.kind {
        EntryKind::File { chunks } => {
            put(b"file");
            for c in chunks {
                put(&c.id.0);
                put(&c.len.to_le_bytes());
            }
        }
        EntryKind::Dir { tree, .. } => {
            put(b"dir");
            put(&tree.0);
        }
        EntryKind::Symlink { target } => {
            put(b"symlink");
            put(target);
        }
    }
    put(&[e.mode, e.uid, e.gid].map(u32::to_le_bytes).concat());
    for (k, v) in &e.xattrs {
        put(k);
        put(v);
    }
    ObjectId::of(&all).to_hex()
}

/// Whether text holds a conflict marker line as git writes them (`<<<<<<< `, `=======`,
/// `>>>>>>> `, seven characters at the start of a line).
pub fn has_markers(data: &[u8]) -> bool {
    data.split(|b| *b == b'\n').any(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        l == b"=======" || l.starts_with(b"<<<<<<< ") || l.starts_with(b">>>>>>> ")
    })
}

/// The conflicts of `p` still open in `side` (the tree a checkpoint records, or the
/// workspace's dry-run tree): their paths.
///
/// # Errors
/// A tree or chunk of `side` that does not read.
pub fn unresolved(store: &Store, side: &Side, p: &PendingMerge) -> Result<Vec<String>> {
    let mut open = Vec::new();
    for c in &p.conflicts {
        if c.taken.is_some() {
            continue;
        }
        let e = side.entry_at(store, &c.path)?;
        let still = match (&e, c.markers) {
            (None, _) => false,
            (Some(e), true) if matches!(e.kind, EntryKind::File { .. }) => side
                .content(store, &c.path, e)?
                .is_some_and(|d| has_markers(&d)),
            (Some(e), _) => entry_key(Some(e)) == c.left,
        };
        if still {
            open.push(c.path.clone());
        }
    }
    Ok(open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_git_s_seven_character_lines() {
        assert!(has_markers(
            b"a\n<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n"
        ));
        assert!(has_markers(b"=======\r\n"));
        assert!(!has_markers(b"a\n<<<<<<<<\n========\n"));
        assert!(!has_markers(b"a << b\n"));
    }

    #[test]
    fn the_key_ignores_times_and_inode_numbers_but_not_mode() {
        let e = Entry {
            name: b"f".to_vec(),
            kind: EntryKind::Symlink {
                target: b"t".to_vec(),
            },
            mode: 0o777,
            uid: 1,
            gid: 1,
            mtime_ns: 5,
            size: 1,
            xattrs: Vec::new(),
            ctime_ns: 6,
            ino: 7,
            nlink: 0,
        };
        let mut touched = e.clone();
        (touched.mtime_ns, touched.ctime_ns, touched.ino) = (50, 60, 70);
        assert_eq!(entry_key(Some(&e)), entry_key(Some(&touched)));
        let mut chmod = e.clone();
        chmod.mode = 0o700;
        assert_ne!(entry_key(Some(&e)), entry_key(Some(&chmod)));
        assert_ne!(entry_key(Some(&e)), entry_key(None));
    }
}
