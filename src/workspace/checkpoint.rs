//! Checkpointing a workspace: every root's base tree merged with its upper layer (see
//! [`merge`](super::merge)), in one pass with the writers running, or in two when the
//! checkpoint holds them still (see [`freeze`](super::freeze)): a first pass while they run,
//! which reads the bulk of what changed, then a frozen pass that reads only what changed after
//! the first one saw it. `dirty` is the same merge as a dry run.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::safe::Kind;
use crate::id::ObjectId;
use crate::ingest::OnChange;
use crate::store::checkpoint::{Annotations, Checkpoint, RootRecord, Stats};
use crate::store::object::ObjectBatch;
use crate::store::refs::check_name;
use crate::store::Store;
use crate::text::time::now_ns;

use super::freeze;
use super::state::{require_branch, state, upper_base, WorkspaceState};
use crate::ingest::upper;

/// What a checkpoint holds still for its second pass (see `freeze`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hold {
    /// Cgroups to freeze (`--freeze-cgroup`, and those recorded with the mount).
    pub cgroups: Vec<PathBuf>,
    /// Freeze the store's filesystem, holding every writer (`--freeze-fs`).
    pub filesystem: bool,
}

impl Hold {
    /// Nothing to hold: the checkpoint is one pass with the writers running.
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && !self.filesystem
    }

    /// The checks `checkpoint` makes before any work, so bad input costs nothing.
    pub(super) fn check(&self, store: &Store) -> Result<()> {
        freeze::check(&self.cgroups)?;
        if self.filesystem {
            freeze::check_fs(store.root())?;
        }
        Ok(())
    }

    /// What a mounted workspace records (`mount --freeze-cgroup`, `--freeze-fs`, `exec`).
    pub(super) fn recorded(st: WorkspaceState) -> Hold {
        Hold {
            filesystem: st.freeze_fs,
            cgroups: recorded_cgroups(st),
        }
    }

    /// Adds what is frozen to the RUNNING marker's `args`, for `recover` to thaw what a
    /// crash left frozen.
    pub(super) fn mark(&self, store: &Store, mut args: serde_json::Value) -> serde_json::Value {
        args["freeze_cgroups"] = serde_json::json!(self.cgroups);
        args["freeze_fs"] = serde_json::json!(self.filesystem.then(|| store.root()));
        args
    }
}

/// The cgroups recorded with a workspace that still exist. One that is gone holds no process,
/// so there is nothing to freeze in it (and refusing would block every checkpoint).
fn recorded_cgroups(st: WorkspaceState) -> Vec<PathBuf> {
    st.freeze_cgroups
        .into_iter()
        .filter(|c| {
            let there = c.is_dir();
            if !there {
                log::warn!("cgroup {} recorded with the workspace is gone", c.display());
            }
            there
        })
        .collect()
}

/// A workspace's un-checkpointed changes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DirtyReport {
    pub dirty: bool,
    /// Upper files whose stat changed since the last checkpoint (read to compare).
    pub files_changed: u64,
    pub bytes_changed: u64,
    /// Roots whose merged tree differs from the branch head.
    pub roots_changed: Vec<String>,
    /// FIFOs, sockets and devices in the workspace that no exclude rule skips: a checkpoint
    /// fails on them, so the workspace is not clean while they are there.
    pub special_files: Vec<SpecialFile>,
    /// What changed since the branch head, path by path (a renamed file or directory is one
    /// change), from the same dry-run merge.
    pub changes: Vec<crate::history::diff::Change>,
}

/// A file a checkpoint cannot record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpecialFile {
    /// Where the workspace shows it (under the mountpoint, or the root's path when the
    /// workspace is not mounted).
    pub path: PathBuf,
    /// `fifo`, `socket`, `char device` or `block device`.
    pub kind: &'static str,
}

impl SpecialFile {
    /// "PATH is a fifo": for messages.
    pub fn describe(&self) -> String {
        format!("{} is a {}", self.path.display(), self.kind)
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Fifo => "fifo",
        Kind::Socket => "socket",
        Kind::CharDevice => "char device",
        Kind::BlockDevice => "block device",
        Kind::File => "file",
        Kind::Dir => "directory",
        Kind::Symlink => "symlink",
    }
}

/// What a checkpoint did.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointReport {
    /// The new checkpoint; when nothing was recorded, the branch head, which already records
    /// the workspace.
    pub id: ObjectId,
    pub checkpoint: Checkpoint,
    /// False when the workspace held nothing new (see [`dirty`]) and no empty checkpoint was
    /// asked for: nothing was recorded and the branch did not move.
    pub recorded: bool,
    pub files_read: u64,
    pub bytes_read: u64,
    /// Bytes of the files read that reflink snapshots showed unchanged since the last
    /// checkpoint, so were not read (a store on XFS or btrfs; see `snapshot`).
    pub bytes_unread: u64,
    /// Upper directories merged again, all passes: the root and every directory something
    /// changed under since the last checkpoint (the others keep their tree ids unread).
    pub dirs_merged: u64,
    pub elapsed_ms: u64,
    /// With `--freeze-cgroup` or `--freeze-fs`: how long the writers were held, and what was
    /// read meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<Held>,
    /// A merge in progress in the workspace (`ckptfs merge` into it): whether this
    /// checkpoint recorded it, or what is left to resolve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<super::pending::MergeProgress>,
}

/// The frozen part of a checkpoint with `--freeze-cgroup` or `--freeze-fs`.
#[derive(Clone, Debug, Serialize)]
pub struct Held {
    /// From the freeze request to the thaw, in microseconds.
    pub micros: u64,
    /// Files read while frozen (changed after the first pass read them, or in the clock tick
    /// it started in) and their bytes.
    pub files_read: u64,
    pub bytes_read: u64,
    /// Upper directories merged while frozen.
    pub dirs_merged: u64,
}

/// What `merge_all` produces.
struct MergedAll {
    roots: BTreeMap<String, RootRecord>,
    caches: Vec<(
        String,
        crate::store::statcache::StatCache,
        crate::store::statcache::UpperCache,
    )>,
    stats: Stats,
    files_read: u64,
    bytes_read: u64,
    bytes_unread: u64,
    dirs_merged: u64,
    /// (root, path from the root, kind) of the special files a dry run found.
    special: Vec<(String, PathBuf, Kind)>,
}

/// How a merge pass starting now reads (see `upper::Pass`): the clock is read here, so call
/// it right before the merge.
fn pass_now(
    on_change: OnChange,
    snapshots: bool,
    exclude: &[String],
    report_special: bool,
) -> upper::Pass<'_> {
    upper::Pass {
        start_ns: crate::meta::coarse_now_ns(),
        on_change,
        snapshots,
        exclude,
        report_special,
    }
}

/// Merges base + upper for every root of the store; roots without an upper keep the base.
fn merge_all(
    store: &Store,
    batch: &ObjectBatch<'_>,
    branch: &str,
    base: &Checkpoint,
    mut previous: impl FnMut(&str) -> upper::Previous,
    pass: upper::Pass<'_>,
) -> Result<MergedAll> {
    let mut special = Vec::new();
    let mut roots = BTreeMap::new();
    let mut caches = Vec::new();
    let mut stats = Stats {
        dirs: base.stats.dirs,
        symlinks: base.stats.symlinks,
        ..Stats::default()
    };
    let (mut files_read, mut bytes_read, mut bytes_unread, mut dirs_merged) = (0, 0, 0, 0);
    for (name, rec) in &base.roots {
        let upper = store.upper_dir(branch, name);
        if !upper.is_dir() {
            roots.insert(name.clone(), rec.clone());
            continue;
        }
        let m = upper::merge_root(store, batch, branch, name, rec, previous(name), pass)?;
        special.extend(m.special.into_iter().map(|(p, k)| (name.clone(), p, k)));
        stats.dirs = (stats.dirs as i64 + m.delta.dirs).max(0) as u64;
        stats.symlinks = (stats.symlinks as i64 + m.delta.symlinks).max(0) as u64;
        files_read += m.files_read;
        bytes_read += m.bytes_read;
        bytes_unread += m.bytes_unread;
        dirs_merged += m.dirs_merged;
        roots.insert(name.clone(), m.record);
        caches.push((name.clone(), m.cache, m.upper_cache));
    }
    stats.files = roots.values().map(|r| r.files).sum();
    stats.bytes = roots.values().map(|r| r.bytes).sum();
    stats.files_read = files_read;
    Ok(MergedAll {
        roots,
        caches,
        stats,
        files_read,
        bytes_read,
        bytes_unread,
        dirs_merged,
        special,
    })
}

/// The caches of the checkpoint that can describe the upper layer's files: the head's, when it
/// was taken from this upper (head != base). A head that is the base itself was captured from
/// other files (another upper, or a plain capture with a cache of every file in the tree,
/// whose loading alone costs 0.1 s on a 100k-file room), so its cache cannot match: only the
/// cache of the files a fold kept over it does (`workspace::hot`).
fn saved_caches(
    store: &Store,
    head: ObjectId,
    base: ObjectId,
) -> impl FnMut(&str) -> upper::Previous + '_ {
    move |root| {
        if head == base {
            return upper::Previous {
                files: store.load_kept_statcache(&head, root),
                ..upper::Previous::default()
            };
        }
        upper::Previous {
            files: store.load_statcache(&head, root),
            upper: store.load_upper_cache(&head, root),
        }
    }
}

/// The reflink snapshots in `branch`'s upper layers that its next checkpoint will not use
/// (see `snapshot`): those a failed checkpoint kept, or a stat cache gone since. For `gc`,
/// under the store lock, so no checkpoint is adding any.
///
/// # Errors
/// Reading the branch or its upper base record.
pub(crate) fn unused_snapshots(store: &Store, branch: &str) -> Result<Vec<PathBuf>> {
    let Some(head) = store.read_branch(branch)?.and_then(|b| b.head) else {
        return Ok(Vec::new());
    };
    let base = upper_base(store, branch, head)?;
    let dir = store.upper_branch_dir(branch);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut unused = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(root) = name.to_str().and_then(Store::snapshot_dir_root) else {
            continue;
        };
        let files = saved_caches(store, head, base)(root).files;
        let keep = crate::ingest::snapshots_named_by(&files);
        unused.extend(crate::ingest::unnamed_snapshots(
            &store.snapshot_dir(branch, root),
            &keep,
        ));
    }
    Ok(unused)
}

/// A workspace as it is now: every root's base merged with its upper layer in a dry run.
pub struct LiveTree {
    /// The branch head the workspace's changes are counted from.
    pub head: ObjectId,
    /// The merged tree, as a diff side: the trees the dry run built, and the upper layers
    /// where the files it hashed without storing are.
    pub side: crate::history::diff::Side,
    /// The merged roots.
    pub roots: BTreeMap<String, RootRecord>,
    merged: MergedAll,
}

/// Merges `branch`'s workspace in a dry run (reads only files whose stat changed), writing
/// nothing to the store.
///
/// # Errors
/// The branch has no checkpoint; an upper layer that does not read.
pub fn live_tree(store: &Store, branch: &str) -> Result<LiveTree> {
    let (_, head) = require_branch(store, branch)?;
    let base_id = upper_base(store, branch, head)?;
    let base = store.read_checkpoint(&base_id)?;
    let batch = ObjectBatch::dry_run(store);
    let previous = saved_caches(store, head, base_id);
    let pass = pass_now(OnChange::AcceptPrefix, true, &[], true);
    let m = merge_all(store, &batch, branch, &base, previous, pass)?;
    let side = crate::history::diff::Side {
        roots: m.roots.iter().map(|(n, r)| (n.clone(), r.tree)).collect(),
        trees: batch.take_dry_trees(),
        live: m
            .caches
            .iter()
            .map(|(n, _, _)| (n.clone(), store.upper_dir(branch, n)))
            .collect(),
    };
    Ok(LiveTree {
        head,
        side,
        roots: m.roots.clone(),
        merged: m,
    })
}

/// The merge in progress in `branch`'s workspace, if any, its conflicts judged on the
/// workspace as it is now (see `pending`).
///
/// # Errors
/// An unreadable record; as [`live_tree`].
pub fn merge_status(store: &Store, branch: &str) -> Result<Option<super::pending::MergeStatus>> {
    let Some(p) = super::pending::read(store, branch)? else {
        return Ok(None);
    };
    let live = live_tree(store, branch)?;
    super::pending::status(store, &live.side, &p).map(Some)
}

/// [`dirty`] and [`merge_status`] from one dry-run merge of the workspace (what `status`
/// shows); the merge status's own error apart, so that it does not hide the changes.
///
/// # Errors
/// As [`dirty`].
pub fn dirty_and_merge(
    store: &Store,
    branch: &str,
) -> Result<(DirtyReport, Result<Option<super::pending::MergeStatus>>)> {
    let live = live_tree(store, branch)?;
    let merge = super::pending::read(store, branch).and_then(|p| match p {
        Some(p) => super::pending::status(store, &live.side, &p).map(Some),
        None => Ok(None),
    });
    Ok((dirty_of(store, branch, live)?, merge))
}

/// Un-checkpointed changes of `branch`'s workspace (reads only files whose stat changed): the
/// dry-run merge of [`live_tree`], compared with the branch head.
pub fn dirty(store: &Store, branch: &str) -> Result<DirtyReport> {
    dirty_of(store, branch, live_tree(store, branch)?)
}

fn dirty_of(store: &Store, branch: &str, live: LiveTree) -> Result<DirtyReport> {
    let head_c = store.read_checkpoint(&live.head)?;
    let mounted = state(store, branch)?;
    let mut special_files = Vec::new();
    for (root, rel, kind) in &live.merged.special {
        let at = match mounted.as_ref().and_then(|st| st.roots.get(root)) {
            Some(r) => r.mountpoint.clone(),
            None => store.root_config(root)?.path.clone(),
        };
        special_files.push(SpecialFile {
            path: at.join(rel),
            kind: kind_name(*kind),
        });
    }
    let opts = crate::history::diff::DiffOptions {
        renames: true,
        ..Default::default()
    };
    let head_side = crate::history::diff::Side::checkpoint(&head_c);
    let changes = crate::history::diff::diff_sides(store, &head_side, &live.side, &opts)?;
    let mut report = DirtyReport {
        files_changed: live.merged.files_read,
        bytes_changed: live.merged.bytes_read,
        special_files,
        changes,
        ..DirtyReport::default()
    };
    for (name, r) in &live.roots {
        let prefix = format!("{name}/");
        let changed = !same_root_meta(head_c.roots.get(name), r)
            || report
                .changes
                .iter()
                .any(|c| c.path == *name || c.path.starts_with(&prefix));
        if changed {
            report.roots_changed.push(name.clone());
        }
    }
    report.dirty = !report.roots_changed.is_empty() || !report.special_files.is_empty();
    Ok(report)
}

/// Whether a root's own record (what its directory is, not its entries) is the same, but for
/// its mtime, which creating and removing an entry (`git status`'s `index.lock`) changes.
fn same_root_meta(head: Option<&RootRecord>, now: &RootRecord) -> bool {
    head.is_some_and(|h| {
        (h.mode, h.uid, h.gid, &h.xattrs) == (now.mode, now.uid, now.gid, &now.xattrs)
    })
}

/// Whether `branch`'s workspace is dirty, as [`dirty`] says, answered cheaply when it is:
/// [`first_change`] looks for a change in the metadata of the upper layers alone (no file
/// read); only when it finds none does the dry-run merge of [`dirty`] decide.
///
/// # Errors
/// As [`dirty`].
pub fn is_dirty(store: &Store, branch: &str) -> Result<bool> {
    if first_change(store, branch)?.is_some() {
        return Ok(true);
    }
    Ok(dirty(store, branch)?.dirty)
}

/// A change a checkpoint now would surely record (`ROOT/PATH`), told from the stat of the
/// upper layers' entries against the branch head's trees, without reading a file: an entry
/// the head lacks or holds as another type, a file whose size, mtime, mode or owner differ,
/// a directory whose mode or owner differ, a symlink with another target, a whiteout of an
/// entry the head has, a special file. Directory mtimes are not compared (see [`dirty`]).
/// `None` proves nothing: a file rewritten to the same size and mtime, an xattr, or a
/// removal of what only the upper held are left to [`dirty`]'s merge. Excluded paths are
/// skipped as checkpoints skip them. The upper layers are the agent's: walked through held
/// directory fds, symlinks never followed (see `safe`).
///
/// # Errors
/// The branch has no checkpoint; an upper layer or a head tree that does not read.
pub fn first_change(store: &Store, branch: &str) -> Result<Option<String>> {
    let (_, head) = require_branch(store, branch)?;
    let head_c = store.read_checkpoint(&head)?;
    for (name, rec) in &head_c.roots {
        let upper = store.upper_dir(branch, name);
        if !upper.is_dir() {
            continue;
        }
        let rules = store
            .config()
            .roots
            .get(name)
            .map(|rc| rc.exclude.clone())
            .unwrap_or_default();
        let walk = ChangeWalk {
            store,
            exclude: crate::store::exclude::Excluder::compile(name, &rules)?,
        };
        let top = crate::fs::safe::Dir::open(&upper)?;
        let top_meta = top.stat_self()?;
        if (top_meta.mode & 0o7777, top_meta.uid, top_meta.gid) != (rec.mode, rec.uid, rec.gid) {
            return Ok(Some(name.clone()));
        }
        let tree = store.read_tree(&rec.tree)?;
        if let Some(p) = walk.first_in(&top, Path::new(""), &tree)? {
            return Ok(Some(format!("{name}/{}", p.display())));
        }
    }
    Ok(None)
}

/// The first entry (`ROOT/PATH`) in `branch`'s upper layers that the roots' exclude rules
/// match (a whiteout aside): what no checkpoint records, so what only the upper holds. A
/// fold, or a mount's rebase, keeps an upper that holds one. The walk is the agent's tree:
/// through held directory fds, symlinks never followed (see `safe`).
///
/// # Errors
/// An upper layer that does not read.
pub(super) fn first_excluded(store: &Store, branch: &str) -> Result<Option<String>> {
    fn walk(
        ex: &crate::store::exclude::Excluder,
        dir: &crate::fs::safe::Dir,
        rel: &Path,
    ) -> Result<Option<PathBuf>> {
        for name in dir.entries()? {
            let path = rel.join(&name);
            let Some(m) = dir.stat(&name)? else { continue };
            if m.kind() == Kind::CharDevice && m.rdev == 0 {
                continue;
            }
            if ex.excluded(&path, &name) {
                return Ok(Some(path));
            }
            if m.is_dir() {
                crate::store::tree::check_depth(path.components().count(), || {
                    path.display().to_string()
                })?;
                let Ok(sub) = dir.open_dir(&name) else {
                    continue;
                };
                if let Some(p) = walk(ex, &sub, &path)? {
                    return Ok(Some(p));
                }
            }
        }
        Ok(None)
    }
    for (name, rc) in &store.config().roots {
        let upper = store.upper_dir(branch, name);
        if rc.exclude.is_empty() || !upper.is_dir() {
            continue;
        }
        let ex = crate::store::exclude::Excluder::compile(name, &rc.exclude)?;
        if let Some(p) = walk(&ex, &crate::fs::safe::Dir::open(&upper)?, Path::new(""))? {
            return Ok(Some(format!("{name}/{}", p.display())));
        }
    }
    Ok(None)
}

struct ChangeWalk<'a> {
    store: &'a Store,
    exclude: crate::store::exclude::Excluder,
}

impl ChangeWalk<'_> {
    /// The first entry under the upper directory `dir` (at `rel`) that surely differs from
    /// `head`, the head's tree of the same directory.
    fn first_in(
        &self,
        dir: &crate::fs::safe::Dir,
        rel: &Path,
        head: &crate::store::tree::Tree,
    ) -> Result<Option<PathBuf>> {
        use crate::store::tree::EntryKind;
        for name in dir.entries()? {
            let path = rel.join(&name);
            if self.exclude.excluded(&path, &name) {
                continue;
            }
            // Gone since listed: whatever replaced it is the merge's to judge.
            let Some(m) = dir.stat(&name)? else { continue };
            let h = head.get(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()));
            let owner = |e: &crate::store::tree::Entry| {
                (m.mode & 0o7777, m.uid, m.gid) != (e.mode, e.uid, e.gid)
            };
            let differs = match (m.kind(), h) {
                // A whiteout: a change only where the head has the entry.
                (Kind::CharDevice, _) if m.rdev == 0 => h.is_some(),
                (Kind::Dir, Some(e)) => match &e.kind {
                    EntryKind::Dir { tree, .. } => {
                        if owner(e) {
                            true
                        } else {
                            crate::store::tree::check_depth(path.components().count(), || {
                                path.display().to_string()
                            })?;
                            // Replaced since the stat: the merge's to judge.
                            let Ok(sub) = dir.open_dir(&name) else {
                                continue;
                            };
                            let t = self.store.read_tree(tree)?;
                            if let Some(p) = self.first_in(&sub, &path, &t)? {
                                return Ok(Some(p));
                            }
                            false
                        }
                    }
                    _ => true,
                },
                (Kind::File, Some(e)) => match &e.kind {
                    EntryKind::File { .. } => {
                        owner(e) || m.size != e.size || crate::meta::mtime_ns(&m) != e.mtime_ns
                    }
                    _ => true,
                },
                (Kind::Symlink, Some(e)) => match &e.kind {
                    EntryKind::Symlink { target } => dir.read_link(&name)? != *target,
                    _ => true,
                },
                // New, or a special file (which no checkpoint records).
                _ => true,
            };
            if differs {
                return Ok(Some(path));
            }
        }
        Ok(None)
    }
}

/// What a checkpoint of a workspace records besides the workspace itself, and how.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointOptions<'a> {
    /// A label for it (immutable; asks for a checkpoint even when nothing is new).
    pub label: Option<&'a str>,
    pub message: &'a str,
    /// What is frozen while the upper layers are read (see `freeze`).
    pub hold: &'a Hold,
    /// Globs left out besides the roots' own rules (as in STORE.json, see `store::exclude`).
    pub exclude: &'a [String],
    /// Record one even when the workspace holds nothing new (see [`dirty`]).
    pub allow_empty: bool,
    /// Meta, runtime and turn for the record.
    pub annotations: &'a Annotations,
}

/// Records a checkpoint of `branch`'s workspace (mounted or not) as `o` says. Caller holds
/// the lock.
pub(super) fn checkpoint_locked(
    store: &Store,
    branch: &str,
    o: &CheckpointOptions,
) -> Result<CheckpointReport> {
    let CheckpointOptions {
        label,
        message,
        hold,
        exclude,
        allow_empty,
        annotations: ann,
    } = *o;
    let t0 = std::time::Instant::now();
    if let Some(l) = label {
        check_name("label", l)?;
        if store.read_label(l)?.is_some() {
            return Err(Error::Conflict(format!(
                "label {l} already exists; labels are immutable"
            )));
        }
    }
    let (_, head) = require_branch(store, branch)?;
    let base_id = upper_base(store, branch, head)?;
    let base = store.read_checkpoint(&base_id)?;
    hold.check(store)?;
    let batch = ObjectBatch::new(store);
    // With writers to hold, this is a first pass while they run, which reads what changed (the
    // bulk of the work); the pass while they are frozen then reads only what changed after
    // the first one saw it (its caches make every other file and directory cost one lstat).
    let on_change = if hold.is_empty() {
        OnChange::AcceptPrefix
    } else {
        OnChange::Provisional
    };
    let previous = saved_caches(store, head, base_id);
    let pass = pass_now(on_change, true, exclude, false);
    let first = merge_all(store, &batch, branch, &base, previous, pass)?;
    let (all, held) = if hold.is_empty() {
        (first, None)
    } else {
        let (m, h) = second_pass(store, &batch, branch, &base, hold, exclude, first)?;
        (m, Some(h))
    };
    let MergedAll {
        roots,
        caches,
        mut stats,
        files_read,
        bytes_read,
        bytes_unread,
        dirs_merged,
        special: _,
    } = all;
    let merged = t0.elapsed();
    let head_c = store.read_checkpoint(&head)?;
    let merging = merging(store, branch, &head, &batch, &roots)?;
    let merge_parent = merging
        .as_ref()
        .filter(|(_, m)| m.recorded)
        .map(|(p, _)| p.clone());
    let same_trees = roots.len() == head_c.roots.len()
        && roots.iter().all(|(n, r)| {
            head_c
                .roots
                .get(n)
                .is_some_and(|h| h.tree == r.tree && same_root_meta(Some(h), r))
        });
    let progress = merging.map(|(_, m)| m);
    // A label names a new checkpoint: asked for, it is recorded as `allow_empty` is; so is
    // a merge whose conflicts are all resolved.
    let forced = allow_empty || label.is_some() || merge_parent.is_some();
    // The head stands for the workspace: nothing is recorded.
    let nothing_new = |head_c: Checkpoint, held: Option<Held>, progress| CheckpointReport {
        merge: progress,
        ..unrecorded(
            head,
            head_c,
            (files_read, bytes_read, bytes_unread, dirs_merged),
            held,
            t0,
        )
    };
    if same_trees && !forced {
        return Ok(nothing_new(head_c, held, progress));
    }
    batch.commit()?;
    log::debug!(
        "checkpoint of {branch}: merged in {merged:?}, objects durable in {:?}",
        t0.elapsed() - merged
    );
    // Trees that differ from the head's only in directory mtimes hold nothing new (a few
    // tree objects stay unreferenced, for gc).
    if !forced && !same_trees {
        let metas_same = roots
            .iter()
            .all(|(n, r)| same_root_meta(head_c.roots.get(n), r));
        let new_side = crate::history::diff::Side {
            roots: roots.iter().map(|(n, r)| (n.clone(), r.tree)).collect(),
            ..Default::default()
        };
        let head_side = crate::history::diff::Side::checkpoint(&head_c);
        let opts = crate::history::diff::DiffOptions::default();
        if metas_same
            && roots.len() == head_c.roots.len()
            && crate::history::diff::diff_sides(store, &head_side, &new_side, &opts)?.is_empty()
        {
            return Ok(nothing_new(head_c, held, progress));
        }
    }
    stats.new_objects = batch.new_objects();
    stats.new_bytes = batch.new_bytes();
    let mut parents = vec![head];
    let mut message = message.to_string();
    if let Some(p) = &merge_parent {
        parents.push(p.theirs);
        if message.is_empty() {
            message.clone_from(&p.message);
        }
    }
    let c = Checkpoint {
        version: 1,
        roots,
        parents,
        branch: branch.to_string(),
        label: label.map(str::to_string),
        message,
        time_ns: now_ns(),
        stats,
        annotations: Box::new(ann.clone()),
    };
    let id = store.publish_checkpoint(&c, Some(head))?;
    if let Some(l) = label {
        store.create_label(l, &id)?;
    }
    if merge_parent.is_some() {
        // A crash before this leaves a record the head already records: dropped then.
        super::pending::remove(store, branch)?;
    }
    for (name, cache, upper) in &caches {
        store.save_statcache(&id, name, cache);
        store.save_upper_cache(&id, name, upper);
        // The snapshots this cache names stay for the next checkpoint; older ones go.
        crate::ingest::sweep_snapshots(
            &store.snapshot_dir(branch, name),
            &crate::ingest::snapshots_named_by(cache),
        );
    }
    Ok(CheckpointReport {
        id,
        checkpoint: c,
        recorded: true,
        files_read,
        bytes_read,
        bytes_unread,
        dirs_merged,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        held,
        merge: progress,
    })
}

/// The merge in progress in `branch`'s workspace (see `pending`), judged on the tree this
/// checkpoint records (`roots`, whose objects are committed for it): whether it records the
/// merge. A record the head already records (a crash after the merge checkpoint) is removed.
fn merging(
    store: &Store,
    branch: &str,
    head: &ObjectId,
    batch: &ObjectBatch<'_>,
    roots: &BTreeMap<String, RootRecord>,
) -> Result<Option<(super::pending::PendingMerge, super::pending::MergeProgress)>> {
    use super::pending;
    let Some(p) = pending::read(store, branch)? else {
        return Ok(None);
    };
    if pending::recorded_by(store, head, &p)? {
        pending::remove(store, branch)?;
        return Ok(None);
    }
    batch.commit()?;
    let side = crate::history::diff::Side {
        roots: roots.iter().map(|(n, r)| (n.clone(), r.tree)).collect(),
        ..Default::default()
    };
    let unresolved = pending::unresolved(store, &side, &p)?;
    let m = pending::MergeProgress {
        source: p.source.clone(),
        theirs: p.theirs,
        recorded: p.applied && unresolved.is_empty(),
        unresolved,
        interrupted: !p.applied,
    };
    Ok(Some((p, m)))
}

/// The report of a checkpoint that found nothing new: the head stands for the workspace.
/// `counts`: files and bytes read, bytes known unchanged, directories merged.
fn unrecorded(
    head: ObjectId,
    head_c: Checkpoint,
    counts: (u64, u64, u64, u64),
    held: Option<Held>,
    t0: std::time::Instant,
) -> CheckpointReport {
    let (files_read, bytes_read, bytes_unread, dirs_merged) = counts;
    CheckpointReport {
        id: head,
        checkpoint: head_c,
        recorded: false,
        files_read,
        bytes_read,
        bytes_unread,
        dirs_merged,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        held,
        merge: None,
    }
}

/// The frozen pass of a checkpoint that holds the writers (`hold`), starting from the caches
/// of the `first` pass; returns the merge and how long the writers were held.
fn second_pass(
    store: &Store,
    batch: &ObjectBatch<'_>,
    branch: &str,
    base: &Checkpoint,
    hold: &Hold,
    exclude: &[String],
    first: MergedAll,
) -> Result<(MergedAll, Held)> {
    let mut pre: BTreeMap<String, upper::Previous> = first
        .caches
        .into_iter()
        .map(|(name, files, upper)| (name, upper::Previous { files, upper }))
        .collect();
    // The first pass's objects are synced after the thaw, not while the writers wait.
    batch.hold_back();
    let mut frozen_fs = if hold.filesystem {
        // The watchdog starts first, then the filesystem is synced while the writers run
        // (freezing syncs it with them already held). While it is frozen, new objects wait
        // in memory (a write there would wait for the thaw, that is for this very pass).
        let f = freeze::FrozenFs::prepare(store.root())?;
        atomic::sync_filesystem(store.root())?;
        batch.defer_writes();
        Some(f)
    } else {
        None
    };
    let t_hold = std::time::Instant::now();
    // The writers stand still from here until every changed file is read.
    let frozen = freeze::Frozen::freeze(&hold.cgroups)?;
    if let Some(f) = &mut frozen_fs {
        f.freeze()?;
        // Lets crash tests stop or die here, with the filesystem frozen.
        atomic::fault_point("frozen").map_err(|e| Error::io(store.root(), e))?;
    }
    let previous = |name: &str| pre.remove(name).unwrap_or_default();
    let pass = pass_now(OnChange::AcceptPrefix, !hold.filesystem, exclude, false);
    let m = merge_all(store, batch, branch, base, previous, pass)?;
    if let Some(f) = &mut frozen_fs {
        f.thaw()?;
    }
    frozen.thaw()?;
    let held_micros = t_hold.elapsed().as_micros() as u64;
    drop(frozen_fs);
    let held = Held {
        micros: held_micros,
        files_read: m.files_read,
        bytes_read: m.bytes_read,
        dirs_merged: m.dirs_merged,
    };
    batch.write_deferred()?;
    let mut stats = m.stats;
    stats.files_read += first.files_read;
    let m = MergedAll {
        stats,
        files_read: first.files_read + m.files_read,
        bytes_read: first.bytes_read + m.bytes_read,
        bytes_unread: first.bytes_unread + m.bytes_unread,
        dirs_merged: first.dirs_merged + m.dirs_merged,
        ..m
    };
    Ok((m, held))
}

/// `ckptfs checkpoint`: a checkpoint of the workspace of `branch`, as `o` says. What the
/// workspace's mount holds (`mount --freeze-cgroup`, `--freeze-fs`) is held too. A workspace
/// that holds nothing new (see [`dirty`]) records nothing (`recorded: false`) unless
/// `allow_empty` or a label asks for a checkpoint anyway. With `claim`, it runs as a step of
/// the long operation that claimed the store (`ckptfs turn`, see `Store::claim`) instead of a
/// mutation of its own.
///
/// # Errors
/// `Invalid` naming a special file (FIFO, socket, device) that no rule excludes, or a file
/// that kept changing; `Usage` for a bad exclude glob or bad meta; `Conflict` for an existing
/// label, or when `claim` no longer holds the store.
pub fn checkpoint(
    store: &Store,
    branch: &str,
    o: &CheckpointOptions,
    claim: Option<&mut crate::store::lock::RunningMarker>,
) -> Result<CheckpointReport> {
    let (label, exclude, ann) = (o.label, o.exclude, o.annotations);
    crate::store::checkpoint::check_meta(&ann.meta)?;
    // What the workspace's mount records (`mount --freeze-cgroup`, `--freeze-fs`) is held too.
    let mut hold = o.hold.clone();
    if let Some(st) = state(store, branch)? {
        let recorded = Hold::recorded(st);
        hold.filesystem |= recorded.filesystem;
        for c in recorded.cgroups {
            if !hold.cgroups.contains(&c) {
                hold.cgroups.push(c);
            }
        }
    }
    let hold = &hold;
    let args = hold.mark(
        store,
        serde_json::json!({"branch": branch, "label": label, "exclude": exclude}),
    );
    let o = CheckpointOptions { hold, ..*o };
    let run = || {
        let r = checkpoint_locked(store, branch, &o)?;
        let summary = serde_json::json!({"checkpoint": r.id, "recorded": r.recorded, "files_read": r.files_read,
            "new_objects": r.checkpoint.stats.new_objects, "new_bytes": r.checkpoint.stats.new_bytes});
        Ok((r, summary))
    };
    match claim {
        Some(c) => store.run_claimed(c, "checkpoint", args, run),
        None => store.mutate("checkpoint", args, |_| run()),
    }
}
