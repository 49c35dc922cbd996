//! Live workspaces: a branch's roots mounted writable at their recorded absolute paths.
//!
//! Each root is a kernel overlayfs mount: lower = the branch's base checkpoint, read lazily
//! from the store's read-only view; upper = `STORE/upper/<branch>/<root>` (a plain directory,
//! so writes run at native speed and survive any ckptfs process dying). `upper/<branch>/
//! base.json` names the checkpoint the upper applies to.
//!
//! - `checkpoint` merges the base tree with the upper layer (see [`merge`]): cost proportional
//!   to what the upper holds; unchanged files are not re-read (stat cache); untouched lower
//!   subtrees keep their ids. The overlay stays mounted: open files, cwds and mmaps stay valid.
//! - `switch` detaches the overlay (lazily: a shell with its cwd inside does not make it fail)
//!   and mounts the target branch's overlay at the same path; no file is copied. A workspace
//!   with un-checkpointed changes is refused unless `--checkpoint-first` or `--discard` (which
//!   moves the upper aside to `displaced/`, never deleting it).
//! - On `mount` (not on `switch`, which must stay fast), an upper whose contents are all in
//!   the branch head is dropped and the head becomes the new base, so uppers do not grow
//!   forever.

pub mod freeze;
pub mod lower;
pub mod merge;
pub mod overlay;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::ingest::reader::OnChange;
use crate::store::checkpoint::{Checkpoint, RootRecord, Stats};
use crate::store::fsio;
use crate::store::object::ObjectBatch;
use crate::store::refs::Branch;
use crate::store::Store;
use crate::util::{check_name, now_ns};

/// `upper/<branch>/base.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpperBase {
    pub base: ObjectId,
}

/// One mounted root.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
}

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
    fn check(&self, store: &Store) -> Result<()> {
        freeze::check(&self.cgroups)?;
        if self.filesystem {
            freeze::check_fs(store.root())?;
        }
        Ok(())
    }

    /// What a mounted workspace records (`mount --freeze-cgroup`, `--freeze-fs`, `exec`).
    fn recorded(st: WorkspaceState) -> Hold {
        Hold {
            filesystem: st.freeze_fs,
            cgroups: recorded_cgroups(st),
        }
    }

    /// Adds what is frozen to the RUNNING marker's `args`, for `recover` to thaw what a
    /// crash left frozen.
    fn mark(&self, store: &Store, mut args: serde_json::Value) -> serde_json::Value {
        args["freeze_cgroups"] = serde_json::json!(self.cgroups);
        args["freeze_fs"] = serde_json::json!(self.filesystem.then(|| store.root()));
        args
    }
}

/// What to mount.
#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    pub branch: String,
    /// Only these roots (default: all).
    pub roots: Vec<String>,
    /// Relocated mountpoints (explicitly asked for): root -> directory.
    pub relocate: BTreeMap<String, PathBuf>,
    /// What every checkpoint of the workspace holds still (see `freeze`).
    pub hold: Hold,
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
}

/// What a checkpoint did.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointReport {
    pub id: ObjectId,
    pub checkpoint: Checkpoint,
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

/// How `switch` treats un-checkpointed changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirtyPolicy {
    Refuse,
    CheckpointFirst,
    Discard,
}

/// What a switch did.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchReport {
    pub from_branch: String,
    pub to_branch: String,
    pub checkpoint: ObjectId,
    pub created_branch: bool,
    pub checkpointed: Option<ObjectId>,
    pub displaced: Option<PathBuf>,
    pub elapsed_ms: u64,
}

fn source_name(store: &Store, branch: &str) -> String {
    format!("ckptfs:{}:{branch}", store.root().display())
}

fn read_json<T: for<'de> Deserialize<'de>>(p: &Path) -> Result<Option<T>> {
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

fn write_json(p: &Path, v: &impl Serialize) -> Result<()> {
    fsio::write_atomic_replace(p, &json_for(p, v)?, 0o600)
}

/// Writes the state of a mounted workspace (`run/mounts/B.json`): atomically, not synced,
/// since it describes mounts that a reboot removes (see `fsio::write_atomic_replace_volatile`).
fn write_mount_state(store: &Store, st: &WorkspaceState) -> Result<()> {
    let p = store.workspace_state_path(&st.branch);
    fsio::write_atomic_replace_volatile(&p, &json_for(&p, st)?, 0o600)
}

/// The mounted workspace of `branch`, if its state file exists.
pub fn state(store: &Store, branch: &str) -> Result<Option<WorkspaceState>> {
    read_json(&store.workspace_state_path(branch))
}

/// Every mounted workspace (by state file).
pub fn states(store: &Store) -> Result<Vec<WorkspaceState>> {
    let dir = store.workspace_states_dir();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let p = ent.map_err(|e| Error::io(&dir, e))?.path();
        if p.extension().and_then(|x| x.to_str()) == Some("json") {
            if let Some(s) = read_json::<WorkspaceState>(&p)? {
                out.push(s);
            }
        }
    }
    out.sort_by(|a, b| a.branch.cmp(&b.branch));
    Ok(out)
}

/// True when the state's overlays are really mounted (its first root is, with our source).
pub fn is_live(store: &Store, st: &WorkspaceState) -> Result<bool> {
    let src = source_name(store, &st.branch);
    let mounts = crate::mountinfo::mounts()?;
    Ok(st.roots.values().any(|r| {
        mounts
            .iter()
            .any(|m| m.mountpoint == r.mountpoint && m.fstype == "overlay" && m.source == src)
    }))
}

/// True when a workspace mountpoint can be listed (a dead lower view makes it fail).
fn answers(mountpoint: &Path) -> bool {
    fs::read_dir(mountpoint).is_ok_and(|rd| rd.into_iter().all(|e| e.is_ok()))
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

fn require_branch(store: &Store, name: &str) -> Result<(Branch, ObjectId)> {
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
fn upper_base(store: &Store, branch: &str, head: ObjectId) -> Result<ObjectId> {
    Ok(read_json::<UpperBase>(&store.upper_base_path(branch))?.map_or(head, |b| b.base))
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
}

/// Merges base + upper for every root of the store; roots without an upper keep the base.
fn merge_all(
    store: &Store,
    batch: &ObjectBatch<'_>,
    branch: &str,
    base: &Checkpoint,
    mut previous: impl FnMut(&str) -> merge::Previous,
    on_change: OnChange,
    snapshots: bool,
) -> Result<MergedAll> {
    let pass = merge::Pass {
        start_ns: crate::meta::coarse_now_ns(),
        on_change,
        snapshots,
    };
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
        let m = merge::merge_root(store, batch, branch, name, rec, previous(name), pass)?;
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
    })
}

/// The caches of the checkpoint that can describe the upper layer's files: the head's, when it
/// was taken from this upper (head != base). A head that is the base itself was captured from
/// other files (another upper, or a plain capture with a cache of every file in the tree,
/// whose loading alone costs 0.1 s on a 100k-file room), so its cache cannot match.
fn saved_caches(
    store: &Store,
    head: ObjectId,
    base: ObjectId,
) -> impl FnMut(&str) -> merge::Previous + '_ {
    move |root| {
        if head == base {
            return merge::Previous::default();
        }
        merge::Previous {
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
        let keep = crate::ingest::snapshot::named_by(&files);
        unused.extend(crate::ingest::snapshot::unnamed(
            &store.snapshot_dir(branch, root),
            &keep,
        ));
    }
    Ok(unused)
}

/// Un-checkpointed changes of `branch`'s workspace (reads only files whose stat changed).
pub fn dirty(store: &Store, branch: &str) -> Result<DirtyReport> {
    let (_, head) = require_branch(store, branch)?;
    let base_id = upper_base(store, branch, head)?;
    let base = store.read_checkpoint(&base_id)?;
    let head_c = store.read_checkpoint(&head)?;
    let batch = ObjectBatch::dry_run(store);
    let previous = saved_caches(store, head, base_id);
    let m = merge_all(
        store,
        &batch,
        branch,
        &base,
        previous,
        OnChange::AcceptPrefix,
        true,
    )?;
    let roots = m.roots;
    let mut report = DirtyReport {
        files_changed: m.files_read,
        bytes_changed: m.bytes_read,
        ..DirtyReport::default()
    };
    for (name, r) in &roots {
        let same = head_c
            .roots
            .get(name)
            .is_some_and(|h| h.tree == r.tree && (h.mode, h.uid, h.gid) == (r.mode, r.uid, r.gid));
        if !same {
            report.roots_changed.push(name.clone());
        }
    }
    report.dirty = !report.roots_changed.is_empty();
    Ok(report)
}

/// Records a checkpoint of `branch`'s workspace (mounted or not). Caller holds the lock.
fn checkpoint_locked(
    store: &Store,
    branch: &str,
    label: Option<&str>,
    message: &str,
    hold: &Hold,
) -> Result<CheckpointReport> {
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
    let first = merge_all(store, &batch, branch, &base, previous, on_change, true)?;
    let (all, held) = if hold.is_empty() {
        (first, None)
    } else {
        let (m, h) = second_pass(store, &batch, branch, &base, hold, first)?;
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
    } = all;
    let merged = t0.elapsed();
    batch.commit()?;
    log::debug!(
        "checkpoint of {branch}: merged in {merged:?}, objects durable in {:?}",
        t0.elapsed() - merged
    );
    stats.new_objects = batch.new_objects();
    stats.new_bytes = batch.new_bytes();
    let c = Checkpoint {
        version: 1,
        roots,
        parents: vec![head],
        branch: branch.to_string(),
        label: label.map(str::to_string),
        message: message.to_string(),
        time_ns: now_ns(),
        stats,
    };
    let id = store.write_checkpoint(&c)?;
    store.advance_branch(branch, Some(head), id)?;
    if let Some(l) = label {
        store.create_label(l, &id)?;
    }
    for (name, cache, upper) in &caches {
        store.save_statcache(&id, name, cache);
        store.save_upper_cache(&id, name, upper);
        // The snapshots this cache names stay for the next checkpoint; older ones go.
        crate::ingest::snapshot::sweep(
            &store.snapshot_dir(branch, name),
            &crate::ingest::snapshot::named_by(cache),
        );
    }
    Ok(CheckpointReport {
        id,
        checkpoint: c,
        files_read,
        bytes_read,
        bytes_unread,
        dirs_merged,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        held,
    })
}

/// The frozen pass of a checkpoint that holds the writers (`hold`), starting from the caches
/// of the `first` pass; returns the merge and how long the writers were held.
fn second_pass(
    store: &Store,
    batch: &ObjectBatch<'_>,
    branch: &str,
    base: &Checkpoint,
    hold: &Hold,
    first: MergedAll,
) -> Result<(MergedAll, Held)> {
    let mut pre: BTreeMap<String, merge::Previous> = first
        .caches
        .into_iter()
        .map(|(name, files, upper)| (name, merge::Previous { files, upper }))
        .collect();
    // The first pass's objects are synced after the thaw, not while the writers wait.
    batch.hold_back();
    let mut frozen_fs = if hold.filesystem {
        // The watchdog starts first, then the filesystem is synced while the writers run
        // (freezing syncs it with them already held). While it is frozen, new objects wait
        // in memory (a write there would wait for the thaw, that is for this very pass).
        let f = freeze::FrozenFs::prepare(store.root())?;
        fsio::sync_filesystem(store.root())?;
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
        fsio::fault_point("frozen").map_err(|e| Error::io(store.root(), e))?;
    }
    let previous = |name: &str| pre.remove(name).unwrap_or_default();
    let m = merge_all(
        store,
        batch,
        branch,
        base,
        previous,
        OnChange::AcceptPrefix,
        !hold.filesystem,
    )?;
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

/// `ckptfs checkpoint`: a checkpoint of the workspace of `branch`. What `hold` names is
/// frozen while the upper layers are read (see `freeze`).
pub fn checkpoint(
    store: &Store,
    branch: &str,
    label: Option<&str>,
    message: &str,
    hold: &Hold,
) -> Result<CheckpointReport> {
    // What the workspace's mount records (`mount --freeze-cgroup`, `--freeze-fs`) is held too.
    let mut hold = hold.clone();
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
    let args = hold.mark(store, serde_json::json!({"branch": branch, "label": label}));
    store.mutate("checkpoint", args, |_| {
        let r = checkpoint_locked(store, branch, label, message, hold)?;
        let summary = serde_json::json!({"checkpoint": r.id, "files_read": r.files_read,
            "new_objects": r.checkpoint.stats.new_objects, "new_bytes": r.checkpoint.stats.new_bytes});
        Ok((r, summary))
    })
}

/// Creates the upper directories of `branch` for `root` (the root dir takes the lower root's
/// metadata so the mount shows it unchanged).
fn prepare_upper(
    store: &Store,
    branch: &str,
    root: &str,
    rec: &RootRecord,
) -> Result<(PathBuf, PathBuf)> {
    let upper = store.upper_dir(branch, root);
    let work = store.overlay_work_dir(branch, root);
    if !upper.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&upper)
            .map_err(|e| Error::io(&upper, e))?;
        crate::meta::apply_meta(
            &upper,
            false,
            rec.mode,
            rec.uid,
            rec.gid,
            rec.mtime_ns,
            &rec.xattrs,
        )?;
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&work)
        .map_err(|e| Error::io(&work, e))?;
    Ok((upper, work))
}

/// Drops `branch`'s upper when everything in it is already in the head: the head becomes the
/// new base. Returns the base to mount.
fn rebase_if_clean(store: &Store, branch: &str, head: ObjectId) -> Result<ObjectId> {
    let base = upper_base(store, branch, head)?;
    if base == head {
        return Ok(head);
    }
    if dirty(store, branch)?.dirty {
        return Ok(base);
    }
    let upper = store.upper_branch_dir(branch);
    fs::remove_dir_all(&upper).map_err(|e| Error::io(&upper, e))?;
    Ok(head)
}

/// Mounts the overlays of `st` (already prepared); unmounts the ones done on failure.
fn mount_roots(store: &Store, branch: &str, roots: &BTreeMap<String, MountedRoot>) -> Result<()> {
    let src = source_name(store, branch);
    let mut done: Vec<&Path> = Vec::new();
    for r in roots.values() {
        if let Err(e) = overlay::mount_overlay(&src, &r.mountpoint, &r.lower, &r.upper, &r.work) {
            for m in done {
                let _ignored = overlay::detach(m);
            }
            return Err(e);
        }
        done.push(&r.mountpoint);
    }
    Ok(())
}

/// Detaches whatever of ours is stale at `mountpoint` (a dead mount from a crash).
fn clear_stale(store: &Store, mountpoint: &Path) -> Result<()> {
    if let Some(m) = crate::mountinfo::mount_at(mountpoint)? {
        let ours = m
            .source
            .starts_with(&format!("ckptfs:{}:", store.root().display()));
        if !ours {
            return Err(Error::Conflict(format!(
                "{} already has a {} mount ({}); unmount it first",
                mountpoint.display(),
                m.fstype,
                m.source
            )));
        }
        log::warn!("detaching a stale mount at {}", mountpoint.display());
        overlay::detach(mountpoint)?;
    }
    Ok(())
}

/// Plans the mounted roots of `branch` based on checkpoint `base`.
fn plan_roots(
    store: &Store,
    branch: &str,
    base: &ObjectId,
    opts: &MountOptions,
) -> Result<BTreeMap<String, MountedRoot>> {
    let c = store.read_checkpoint(base)?;
    let names: Vec<String> = if opts.roots.is_empty() {
        c.roots.keys().cloned().collect()
    } else {
        opts.roots.clone()
    };
    let mut out = BTreeMap::new();
    for name in names {
        let rc = store.root_config(&name)?;
        let rec = c.roots.get(&name).ok_or_else(|| {
            Error::NotFound(format!("root {name} in checkpoint {}", base.short()))
        })?;
        let mountpoint = opts
            .relocate
            .get(&name)
            .cloned()
            .unwrap_or_else(|| rc.path.clone());
        let mountpoint = crate::store::absolute(&mountpoint)?;
        if mountpoint.starts_with(store.root()) {
            return Err(Error::Usage(format!(
                "mountpoint {} is inside the store",
                mountpoint.display()
            )));
        }
        let lower = lower::lower_root(store, base, &name)?;
        let (upper, work) = prepare_upper(store, branch, &name, rec)?;
        out.insert(
            name,
            MountedRoot {
                mountpoint,
                lower,
                upper,
                work,
            },
        );
    }
    Ok(out)
}

/// `ckptfs mount STORE --branch B`: mounts the branch's roots writable.
pub fn mount(store: &Store, opts: &MountOptions) -> Result<WorkspaceState> {
    check_name("branch", &opts.branch)?;
    // Absolute, so a checkpoint run from anywhere finds them.
    let mut freeze_cgroups = Vec::new();
    for (dir, _) in freeze::check(&opts.hold.cgroups)? {
        freeze_cgroups.push(fs::canonicalize(&dir).map_err(|e| Error::io(&dir, e))?);
    }
    if opts.hold.filesystem {
        freeze::check_fs(store.root())?;
    }
    let args =
        serde_json::json!({"branch": opts.branch, "roots": opts.roots, "relocate": opts.relocate});
    // The lower view is its own daemon, which takes the store lock to pin: start it first.
    lower::ensure_view(store)?;
    store.mutate("mount", args, |_| {
        let (b, head) = require_branch(store, &opts.branch)?;
        if b.state == "archived" {
            return Err(Error::Conflict(format!(
                "branch {} is archived; `ckptfs branch unarchive` it first",
                opts.branch
            )));
        }
        if let Some(st) = state(store, &opts.branch)? {
            // Mounted and answering: refuse. Mounted over a dead lower view (its daemon was
            // killed): fall through; the stale overlays are detached below and remounted.
            if is_live(store, &st)? && st.roots.values().all(|r| answers(&r.mountpoint)) {
                let at: Vec<String> = st.roots.values().map(|r| r.mountpoint.display().to_string()).collect();
                return Err(Error::Conflict(format!(
                    "branch {} is already mounted at {}",
                    opts.branch,
                    at.join(", ")
                )));
            }
            fs::remove_file(store.workspace_state_path(&opts.branch))
                .map_err(|e| Error::io(store.workspace_state_path(&opts.branch), e))?;
        }
        for other in states(store)? {
            if is_live(store, &other)? {
                for r in other.roots.values() {
                    let clash = opts.roots.is_empty() || opts.roots.iter().any(|n| other.roots.contains_key(n));
                    if clash && opts.relocate.is_empty() {
                        return Err(Error::Conflict(format!(
                            "{} is already a mounted workspace of branch {}; use `ckptfs switch` to change branches",
                            r.mountpoint.display(),
                            other.branch
                        )));
                    }
                }
            }
        }
        let base = rebase_if_clean(store, &opts.branch, head)?;
        let roots = plan_roots(store, &opts.branch, &base, opts)?;
        write_json(&store.upper_base_path(&opts.branch), &UpperBase { base })?;
        for r in roots.values() {
            fs::create_dir_all(&r.mountpoint).map_err(|e| Error::io(&r.mountpoint, e))?;
            clear_stale(store, &r.mountpoint)?;
        }
        mount_roots(store, &opts.branch, &roots)?;
        let st = WorkspaceState {
            branch: opts.branch.clone(),
            base,
            roots,
            mounted_ns: now_ns(),
            freeze_cgroups: freeze_cgroups.clone(),
            freeze_fs: opts.hold.filesystem,
        };
        write_mount_state(store, &st)?;
        let summary = serde_json::json!({"base": base});
        Ok((st, summary))
    })
}

/// `ckptfs umount` of a workspace: unmounts every root (lazily when busy).
pub fn umount(store: &Store, branch: &str) -> Result<Vec<(PathBuf, overlay::Unmounted)>> {
    let out = store.mutate("umount", serde_json::json!({"branch": branch}), |_| {
        let st = state(store, branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {branch}")))?;
        let src = source_name(store, branch);
        let mut out = Vec::new();
        for r in st.roots.values() {
            match crate::mountinfo::mount_at(&r.mountpoint)? {
                Some(m) if m.source == src => {
                    out.push((r.mountpoint.clone(), overlay::unmount(&r.mountpoint)?))
                }
                _ => {}
            }
        }
        fs::remove_file(store.workspace_state_path(branch))
            .map_err(|e| Error::io(store.workspace_state_path(branch), e))?;
        for c in &st.freeze_cgroups {
            freeze::remove_if_own_and_empty(c);
        }
        let summary = serde_json::json!({"unmounted": out.len()});
        Ok((out, summary))
    })?;
    if states(store)?.is_empty() {
        reap_detached(store)?;
        lower::release_view(store)?;
    }
    Ok(out)
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

/// The cgroup `ckptfs exec` runs commands in for `branch`'s mounted workspace: made on first
/// use and recorded with the mount (as `mount --freeze-cgroup` records one), so every
/// checkpoint of the workspace freezes it.
pub fn agent_cgroup(store: &Store, branch: &str) -> Result<PathBuf> {
    store.mutate("exec", serde_json::json!({"branch": branch}), |_| {
        let mut st = state(store, branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {branch}")))?;
        let tag = ObjectId::of(store.root().as_os_str().as_bytes()).short();
        let dir = freeze::make_cgroup(&format!("{branch}-{tag}"))?;
        if !st.freeze_cgroups.contains(&dir) {
            st.freeze_cgroups.push(dir.clone());
            write_mount_state(store, &st)?;
        }
        let summary = serde_json::json!({ "cgroup": dir });
        Ok((dir, summary))
    })
}

/// Moves `branch`'s upper layers to `displaced/` (never deleted silently).
fn displace_upper(store: &Store, branch: &str) -> Result<Option<PathBuf>> {
    let upper = store.upper_branch_dir(branch);
    if !upper.exists() {
        return Ok(None);
    }
    let dest = store.displaced_upper_path(branch, now_ns());
    fs::create_dir_all(store.displaced_dir()).map_err(|e| Error::io(store.displaced_dir(), e))?;
    fsio::rename(&upper, &dest)?;
    Ok(Some(dest))
}

/// Progress of a switch, kept in the RUNNING marker for `recover`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SwitchPhase {
    /// The workspace as it was before the switch.
    pub from: WorkspaceState,
    pub to_branch: String,
    /// (mountpoint, where its old overlay was moved).
    pub moved: Vec<(PathBuf, PathBuf)>,
}

/// Rolls an interrupted switch back: whatever the switch mounted at the mountpoints is
/// detached, the old overlays are moved back, and the old workspace state is restored. Nothing
/// in the upper layers is touched. Returns what it did.
pub fn roll_back_switch(store: &Store, p: &SwitchPhase) -> Result<Vec<String>> {
    let mut actions = Vec::new();
    let new_src = source_name(store, &p.to_branch);
    for (mountpoint, aside) in &p.moved {
        if crate::mountinfo::mount_at(mountpoint)?.is_some_and(|m| m.source == new_src) {
            overlay::detach(mountpoint)?;
            actions.push(format!(
                "detached the half-switched mount at {}",
                mountpoint.display()
            ));
        }
        if crate::mountinfo::mount_at(aside)?.is_some() {
            overlay::move_mount(aside, mountpoint)?;
            actions.push(format!(
                "moved the {} workspace back to {}",
                p.from.branch,
                mountpoint.display()
            ));
        }
        let _ignored = fs::remove_dir(aside);
    }
    let _ignored = fs::remove_file(store.workspace_state_path(&p.to_branch));
    write_mount_state(store, &p.from)?;
    actions.push(format!("workspace is on branch {} again", p.from.branch));
    Ok(actions)
}

/// Detaches every old overlay left under `run/detached/` (by a switch that failed after it had
/// mounted the new overlays) and removes the empty directories. Returns how many.
pub fn reap_detached(store: &Store) -> Result<usize> {
    let dir = store.detached_dir();
    let mut n = 0;
    for m in crate::mountinfo::mounts()? {
        if m.mountpoint.starts_with(&dir) && m.mountpoint != dir {
            overlay::detach(&m.mountpoint)?;
            n += 1;
        }
    }
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            let _ignored = fs::remove_dir(e.path());
        }
    }
    Ok(n)
}

/// Resolves a switch target: an existing branch, or a checkpoint (which gets a new branch
/// unless it is the head of exactly one branch).
fn resolve_target(store: &Store, target: &str, new_name: Option<&str>) -> Result<(String, bool)> {
    if check_name("branch", target).is_ok()
        && store.read_branch(target)?.is_some()
        && new_name.is_none()
    {
        return Ok((target.to_string(), false));
    }
    let id = store.resolve(target)?;
    if new_name.is_none() {
        let heads: Vec<String> = store
            .list_branches()?
            .into_iter()
            .filter(|(_, b)| b.head == Some(id))
            .map(|(n, _)| n)
            .collect();
        if heads.len() == 1 {
            return Ok((heads[0].clone(), false));
        }
    }
    let name = new_name.map_or_else(|| format!("from-{}", id.short()), str::to_string);
    check_name("branch", &name)?;
    if store.read_branch(&name)?.is_some() {
        return Err(Error::Conflict(format!(
            "branch {name} already exists; pick another --name"
        )));
    }
    let now = now_ns();
    store.write_branch(
        &name,
        &Branch {
            head: Some(id),
            forked_from: Some(id),
            state: "active".into(),
            created_ns: now,
            updated_ns: now,
        },
    )?;
    Ok((name, true))
}

/// `ckptfs switch`: shows `target` at the same paths, without copying files.
pub fn switch(
    store: &Store,
    from_branch: &str,
    target: &str,
    policy: DirtyPolicy,
    new_name: Option<&str>,
) -> Result<SwitchReport> {
    let t0 = std::time::Instant::now();
    // The marker names what a checkpoint first would freeze, for `recover`.
    let hold = state(store, from_branch)?
        .map(Hold::recorded)
        .unwrap_or_default();
    let args = hold.mark(
        store,
        serde_json::json!({"from": from_branch, "to": target, "name": new_name}),
    );
    lower::ensure_view(store)?;
    let (report, moved) = store.mutate_live("switch", args, |m| {
        let st = state(store, from_branch)?
            .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {from_branch}")))?;
        let mut checkpointed = None;
        let mut displaced = None;
        let d = dirty(store, from_branch)?;
        if d.dirty {
            match policy {
                DirtyPolicy::Refuse => {
                    return Err(Error::Conflict(format!(
                        "workspace of branch {from_branch} has un-checkpointed changes ({} files changed in {}); use --checkpoint-first or --discard",
                        d.files_changed,
                        d.roots_changed.join(", ")
                    )))
                }
                DirtyPolicy::CheckpointFirst => {
                    // The cgroups the marker names, so `recover` thaws what this froze.
                    let c = checkpoint_locked(store, from_branch, None, "before switch", &hold)?;
                    checkpointed = Some(c.id);
                }
                DirtyPolicy::Discard => {}
            }
        }
        let (to_branch, created) = resolve_target(store, target, new_name)?;
        if to_branch == from_branch && policy != DirtyPolicy::Discard {
            return Err(Error::Usage(format!("the workspace is already on branch {to_branch}")));
        }
        let (_, head) = require_branch(store, &to_branch)?;
        // Move the old overlays out of the way (instant, even with a busy cwd inside); they are
        // detached in the background once the new ones are mounted, because tearing an
        // overlay down syncs its upper filesystem, which can take long on a busy disk.
        // Each move is recorded first, so `recover` can roll an interrupted switch back.
        let mut phase = SwitchPhase {
            from: st.clone(),
            to_branch: to_branch.clone(),
            moved: Vec::new(),
        };
        let mut moved = Vec::new();
        let switched = (|| -> Result<Option<PathBuf>> {
                for (name, r) in &st.roots {
                if crate::mountinfo::mount_at(&r.mountpoint)?
                    .is_some_and(|m| m.source == source_name(store, from_branch))
                {
                    let aside = store.detached_overlay_path(from_branch, name, now_ns());
                    fs::create_dir_all(&aside).map_err(|e| Error::io(&aside, e))?;
                    phase.moved.push((r.mountpoint.clone(), aside.clone()));
                    m.set_phase(serde_json::to_value(&phase).unwrap_or_default())?;
                    overlay::move_mount(&r.mountpoint, &aside)?;
                    moved.push(aside);
                }
            }
            fs::remove_file(store.workspace_state_path(from_branch))
                .map_err(|e| Error::io(store.workspace_state_path(from_branch), e))?;
            if policy == DirtyPolicy::Discard && d.dirty {
                displaced = displace_upper(store, from_branch)?;
            }
            // No rebase here (it deletes the upper, O(upper)): mount rebases; switch stays O(1).
            let base = upper_base(store, &to_branch, head)?;
            let relocate: BTreeMap<String, PathBuf> = st
                .roots
                .iter()
                .map(|(n, r)| (n.clone(), r.mountpoint.clone()))
                .collect();
            let opts = MountOptions {
                branch: to_branch.clone(),
                roots: st.roots.keys().cloned().collect(),
                relocate,
                hold: Hold {
                    cgroups: st.freeze_cgroups.clone(),
                    filesystem: st.freeze_fs,
                },
            };
            let roots = plan_roots(store, &to_branch, &base, &opts)?;
            // Durable, but only when new: switching back to a branch finds it already there
            // (each sync can take a second while the disk writes back).
            let recorded = read_json::<UpperBase>(&store.upper_base_path(&to_branch))?;
            if recorded.map_or(true, |b| b.base != base) {
                write_json(&store.upper_base_path(&to_branch), &UpperBase { base })?;
            }
            mount_roots(store, &to_branch, &roots)?;
            let new_state = WorkspaceState {
                branch: to_branch.clone(),
                base,
                roots,
                mounted_ns: now_ns(),
                freeze_cgroups: st.freeze_cgroups.clone(),
                freeze_fs: st.freeze_fs,
            };
            write_mount_state(store, &new_state)?;
            Ok(displaced.take())
        })();
        let displaced = match switched {
            Ok(v) => v,
            Err(e) => {
                // Failed half-way (not crashed): put the old workspace back before reporting.
                if let Err(r) = roll_back_switch(store, &phase) {
                    log::warn!("rolling back the switch failed too: {r}");
                }
                return Err(e);
            }
        };
        let report = SwitchReport {
            from_branch: from_branch.to_string(),
            to_branch,
            checkpoint: head,
            created_branch: created,
            checkpointed,
            displaced,
            elapsed_ms: t0.elapsed().as_millis() as u64,
        };
        let summary = serde_json::to_value(&report).unwrap_or_default();
        Ok(((report, moved), summary))
    })?;
    // Only once the switch is recorded as done: `recover` may still need the old overlays.
    for aside in &moved {
        overlay::detach_in_background(aside);
    }
    Ok(report)
}

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

/// Is `branch` mounted right now?
pub fn is_mounted(store: &Store, branch: &str) -> Result<bool> {
    match state(store, branch)? {
        Some(st) => is_live(store, &st),
        None => Ok(false),
    }
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
        if store.upper_branch_dir(branch).exists() && !force && dirty(store, branch)?.dirty {
            return Err(Error::Conflict(format!(
                "branch {branch} has un-checkpointed changes in its workspace; checkpoint them or use --force"
            )));
        }
        let displaced = displace_upper(store, branch)?;
        let p = store.branch_path(branch);
        fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
        fsio::sync_path(&store.branches_dir())?;
        let _ignored = fs::remove_file(store.workspace_state_path(branch));
        Ok((displaced.clone(), serde_json::json!({"displaced": displaced})))
    })
}

/// Bytes and files held by a branch's upper layers (cheap: a walk of the upper only).
pub fn upper_usage(store: &Store, branch: &str) -> (u64, u64) {
    fn walk(p: &Path, acc: &mut (u64, u64)) {
        let Ok(rd) = fs::read_dir(p) else { return };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                walk(&e.path(), acc);
            } else if m.is_file() {
                acc.0 += 1;
                acc.1 += m.size();
            }
        }
    }
    let mut acc = (0, 0);
    let dir = store.upper_branch_dir(branch);
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if e.path().is_dir() {
                walk(&e.path(), &mut acc);
            }
        }
    }
    acc
}
