//! `restore --to DIR`: a copy restore for when FUSE is not wanted.
//!
//! DIR's parent may be writable by an agent, who can rename or replace any entry in it at any
//! moment. So DIR is resolved once: its parent is canonicalized, opened as a [`safe::Dir`], and
//! every check (not inside a root, not overlapping the store) is made on the real path of the
//! directory held; everything after that goes through held fds, never a path.
//!
//! 1. Check: every tree and chunk the root needs is read and hashed before DIR is touched.
//! 2. Stage: a fresh `.ckptfs-restore-<pid>-<8 hex>` directory beside DIR (0700, ours, checked
//!    to be the one created), and in it the tree, `tree/`, materialized through held directory
//!    fds: each entry created exclusively (`O_CREAT|O_EXCL`, `mkdirat`, `symlinkat`) in the
//!    directory this restore created, from names that tree decoding validated, its metadata
//!    given to its fd (or, for a symlink, to its name in the held directory, not followed).
//!    Nobody else can enter the staging directory, so renaming it away or replacing its name
//!    with a symlink changes nothing that is written. Holes (all-zero 4 KiB blocks) stay holes.
//! 3. Swap: an existing non-empty DIR is renamed aside to `DIR.ckptfs-aside-<time>-<pid>`
//!    (never deleted; a symlink is moved, not followed), then `tree/` is renamed from the held
//!    staging directory to DIR (`RENAME_NOREPLACE`) and the empty staging directory removed.
//!    Each phase is recorded in the RUNNING marker, with the device and inode of the staging
//!    and aside directories, so `recover` rolls an interrupted restore back touching only
//!    what this restore made or moved.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::meta::{apply_meta_at, apply_meta_fd, Meta};
use crate::ops::walk::Located;
use crate::safe::{Dir, Stat};
use crate::store::fsio;
use crate::store::tree::{Chunk, Entry, EntryKind};
use crate::store::Store;

/// Hole granularity for sparse restore.
const HOLE_BLOCK: usize = 4096;

/// The staging directory's name prefix (`recover`, `doctor` and the tests know it).
pub const STAGING_PREFIX: &str = ".ckptfs-restore-";

/// The name of the tree inside the staging directory: what becomes DIR.
const STAGED_TREE: &str = "tree";

/// The longest file name (`NAME_MAX`): an aside name keeps to it whatever DIR's length.
const NAME_MAX: usize = 255;

/// What a restore did.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub checkpoint: ObjectId,
    pub root: String,
    pub dir: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// Where the previous non-empty DIR was moved.
    pub moved_aside: Option<PathBuf>,
}

/// A directory entry's identity (device, inode): what `recover` checks before it removes or
/// moves back anything, so that a name an agent swapped meanwhile is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryId {
    pub dev: u64,
    pub ino: u64,
}

impl EntryId {
    pub fn of(st: &Stat) -> EntryId {
        EntryId {
            dev: st.dev,
            ino: st.ino,
        }
    }

    pub fn matches(&self, st: &Stat) -> bool {
        self.dev == st.dev && self.ino == st.ino
    }
}

/// Restore progress kept in the RUNNING marker (for `recover`). Paths are real paths (DIR's
/// parent canonicalized); the staging and aside directories are in DIR's parent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestorePhase {
    pub dir: PathBuf,
    pub staging: PathBuf,
    /// The staging directory, once created (`None`: not yet, so it can only be empty).
    #[serde(default)]
    pub staging_id: Option<EntryId>,
    pub aside: Option<PathBuf>,
    /// What was at DIR when it was moved aside.
    #[serde(default)]
    pub aside_id: Option<EntryId>,
}

/// DIR, resolved once: its parent held, and DIR's real path, on which the checks are made.
struct Target {
    parent: Dir,
    name: OsString,
    /// The real path of the parent held (for the marker and messages).
    parent_real: PathBuf,
}

impl Target {
    fn resolve(dir: &Path) -> Result<Target> {
        let dir = crate::store::absolute(dir)?;
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return Err(Error::Usage(format!(
                "--to {}: not a usable directory",
                dir.display()
            )));
        };
        // The parent's path is the operator's; canonicalizing it means the checks below are
        // on real paths, and opening the result refuses a symlink swapped in since.
        let canon = std::fs::canonicalize(parent).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound(format!("directory {}", parent.display())),
            _ => Error::io(parent, e),
        })?;
        let parent = Dir::open(&canon)?;
        let parent_real = parent.real_path()?;
        Ok(Target {
            parent,
            name: name.to_os_string(),
            parent_real,
        })
    }

    fn real(&self) -> PathBuf {
        self.parent_real.join(&self.name)
    }

    fn in_parent(&self, name: &OsStr) -> PathBuf {
        self.parent_real.join(name)
    }
}

/// Refuses a DIR inside a root (other than the root itself), or overlapping the store. Made
/// on the path as given (so a target below a missing directory gets the usage error) and
/// again on DIR's real path once its parent is held; each root and the store are compared
/// by the path configured and by their real path.
fn check_overlap(store: &Store, dir: &Path) -> Result<()> {
    let both = |p: &Path| {
        let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        [p.to_path_buf(), real]
    };
    for (name, rc) in &store.config().roots {
        for root in both(&rc.path) {
            if dir.starts_with(&root) && dir != root {
                return Err(Error::Usage(format!(
                    "--to {} is inside root {name} ({}); restore to the root path itself or outside it",
                    dir.display(),
                    rc.path.display()
                )));
            }
        }
    }
    for store_root in both(store.root()) {
        if dir.starts_with(&store_root) || store_root.starts_with(dir) {
            return Err(Error::Usage(format!(
                "--to {} overlaps the store {}",
                dir.display(),
                store.root().display()
            )));
        }
    }
    Ok(())
}

/// Restores the root at `loc` (the root itself or a directory in it) to `dir`.
///
/// # Errors
/// `Usage` when DIR is inside a root or overlaps the store (by real paths); `Corrupt`/
/// `NotFound` for a bad object (before anything at DIR changes); `Invalid` when a directory
/// this restore created was replaced under it.
pub fn restore(store: &Store, loc: &Located, dir: &Path) -> Result<RestoreReport> {
    check_overlap(store, &crate::store::absolute(dir)?)?;
    let target = Target::resolve(dir)?;
    let real = target.real();
    check_overlap(store, &real)?;
    let tree_id = loc
        .dir_tree()
        .ok_or_else(|| Error::Usage(format!("{}: restore needs a directory", loc.root)))?;
    // 1. Check every needed object first.
    check_objects(store, &tree_id)?;
    let args = serde_json::json!({"checkpoint": loc.checkpoint, "root": loc.root, "to": real});
    store.mutate("restore", args, |m| {
        let root_meta = match &loc.entry {
            None => {
                let r = &loc.record.roots[&loc.root];
                Meta {
                    mode: r.mode,
                    uid: r.uid,
                    gid: r.gid,
                    mtime_ns: r.mtime_ns,
                    xattrs: &r.xattrs,
                }
            }
            Some(e) => Meta::of_entry(e),
        };
        let mut phase = RestorePhase {
            dir: real.clone(),
            staging: PathBuf::new(),
            staging_id: None,
            aside: None,
            aside_id: None,
        };
        // 2. Stage.
        let (staging_name, staging) = create_staging(&target, &mut phase, |p| {
            m.set_phase(serde_json::to_value(p).unwrap_or_default())
        })?;
        let mut counts = (0u64, 0u64);
        let staged = (|| {
            let tree = staging.create_private_dir(OsStr::new(STAGED_TREE))?;
            materialize_dir(store, &tree_id, &tree, &mut counts)?;
            apply_meta_fd(&tree, tree.path(), &root_meta)?;
            fsio::fault_point("syncfs").map_err(|e| Error::io(tree.path(), e))?;
            tree.sync_filesystem()
        })();
        if let Err(e) = staged {
            discard_staging(&target, &staging_name, &staging);
            return Err(e);
        }
        // 3. Swap. If it fails, put the original DIR back and drop the staging directory.
        let mut removed_empty = false;
        let swapped = (|| -> Result<()> {
            if let Some(st) = target.parent.stat(&target.name)? {
                if st.is_dir() && is_empty_dir(&target.parent, &target.name, &st)? {
                    target.parent.remove_dir(&target.name)?;
                    removed_empty = true;
                } else {
                    let aside = aside_name(&target.name);
                    phase.aside = Some(target.in_parent(&aside));
                    phase.aside_id = Some(EntryId::of(&st));
                    m.set_phase(serde_json::to_value(&phase).unwrap_or_default())?;
                    fsio::fault_point("rename").map_err(|e| Error::io(&real, e))?;
                    target
                        .parent
                        .rename(&target.name, &target.parent, &aside, false)?;
                }
            }
            fsio::fault_point("rename").map_err(|e| Error::io(&real, e))?;
            staging.rename(OsStr::new(STAGED_TREE), &target.parent, &target.name, false)
        })();
        if let Err(e) = swapped {
            discard_staging(&target, &staging_name, &staging);
            put_back(&target, &phase, removed_empty);
            return Err(e);
        }
        remove_staging(&target, &staging_name, &staging);
        fsio::fault_point("fsync").map_err(|e| Error::io(&target.parent_real, e))?;
        target.parent.sync()?;
        let report = RestoreReport {
            checkpoint: loc.checkpoint,
            root: loc.root.clone(),
            dir: real.clone(),
            files: counts.0,
            bytes: counts.1,
            moved_aside: phase.aside.clone(),
        };
        let summary =
            serde_json::json!({"files": counts.0, "bytes": counts.1, "moved_aside": phase.aside});
        Ok((report, summary))
    })
}

/// Creates the staging directory beside DIR under a fresh fixed-length name, recording it
/// in the marker (through `record`) before it exists and again, with its identity, once
/// it does. Returns its name and the held directory.
fn create_staging(
    target: &Target,
    phase: &mut RestorePhase,
    mut record: impl FnMut(&RestorePhase) -> Result<()>,
) -> Result<(OsString, Dir)> {
    let mut attempt = 0u32;
    loop {
        let name = OsString::from(staging_name(attempt));
        phase.staging = target.in_parent(&name);
        phase.staging_id = None;
        record(phase)?;
        match target.parent.create_private_dir(&name) {
            Ok(dir) => {
                phase.staging_id = Some(EntryId::of(&dir.stat_self()?));
                if let Err(e) = record(phase) {
                    discard_staging(target, &name, &dir);
                    return Err(e);
                }
                return Ok((name, dir));
            }
            // Taken (by a leftover, or by someone guessing): another name.
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(libc::EEXIST) && attempt < 8 =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `.ckptfs-restore-<pid>-<8 hex>`: fixed length, whatever DIR's name.
fn staging_name(attempt: u32) -> String {
    let seed = format!("{}-{}-{attempt}", std::process::id(), crate::util::now_ns());
    let hex = ObjectId::of(seed.as_bytes()).to_hex();
    format!("{STAGING_PREFIX}{}-{}", std::process::id(), &hex[..8])
}

/// `DIR.ckptfs-aside-<time>-<pid>`, DIR's name cut so that the whole fits in `NAME_MAX`.
fn aside_name(base: &OsStr) -> OsString {
    let suffix = format!(
        ".ckptfs-aside-{}-{}",
        crate::util::format_utc(crate::util::now_ns()).replace(':', ""),
        std::process::id()
    );
    let keep = NAME_MAX.saturating_sub(suffix.len());
    let mut name = base.as_bytes()[..base.len().min(keep)].to_vec();
    name.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(name)
}

/// Whether `name` (stat `st`) in `dir` is an empty directory, looked at through its fd.
fn is_empty_dir(dir: &Dir, name: &OsStr, st: &Stat) -> Result<bool> {
    let d = dir.open_dir(name)?;
    Ok(d.stat_self()?.same_object(st) && d.entries()?.is_empty())
}

/// Removes the staged tree (through the held staging directory), then the staging directory.
fn discard_staging(target: &Target, name: &OsStr, staging: &Dir) {
    if let Err(e) = staging.remove_all(OsStr::new(STAGED_TREE)) {
        log::warn!(
            "could not remove the staged tree in {}: {e}",
            staging.path().display()
        );
    }
    remove_staging(target, name, staging);
}

/// Removes the (empty) staging directory, if its name still holds it: one renamed away or
/// replaced by someone else is left alone (it is empty, and nobody else can write in it).
fn remove_staging(target: &Target, name: &OsStr, staging: &Dir) {
    let ours = match (target.parent.stat(name), staging.stat_self()) {
        (Ok(Some(entry)), Ok(held)) => entry.same_object(&held),
        _ => false,
    };
    let removed = if ours {
        target.parent.remove_dir(name)
    } else {
        Err(Error::Invalid(format!(
            "{} is no longer the staging directory (moved by someone else)",
            target.in_parent(name).display()
        )))
    };
    if let Err(e) = removed {
        log::warn!("left the empty staging directory of this restore: {e}");
    }
}

/// After a failed swap: the original DIR back in place, when nothing is there now.
fn put_back(target: &Target, phase: &RestorePhase, removed_empty: bool) {
    if !matches!(target.parent.stat(&target.name), Ok(None)) {
        return;
    }
    let back = match &phase.aside {
        Some(aside) => match aside.file_name() {
            Some(a) => target.parent.rename(a, &target.parent, &target.name, false),
            None => Ok(()),
        },
        None if removed_empty => target.parent.create_dir(&target.name, 0o777),
        None => Ok(()),
    };
    if let Err(e) = back {
        log::warn!(
            "could not put the original {} back: {e}; `ckptfs recover` retries",
            target.real().display()
        );
    }
}

/// Reads and hashes every tree and chunk below `tree` (chunks on all cores).
pub fn check_objects(store: &Store, tree: &ObjectId) -> Result<()> {
    let mut chunks = HashSet::new();
    let mut stack = vec![*tree];
    let mut seen = HashSet::new();
    while let Some(t) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        let tree = store.read_tree(&t)?;
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks: c } => chunks.extend(c.iter().copied()),
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    let list: Vec<Chunk> = chunks.into_iter().collect();
    let next = AtomicUsize::new(0);
    let err: Mutex<Option<Error>> = Mutex::new(None);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(chunk) = list.get(i) else { return };
                if let Err(e) = store.read_chunk(chunk) {
                    err.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    return;
                }
            });
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Materializes `tree` into the held directory `at`, which this restore created: each entry
/// created exclusively in it, its metadata given through its fd (a symlink: by its name in
/// `at`, not followed). Counts (files, bytes) into `counts`.
///
/// # Errors
/// A bad object, or I/O creating or writing an entry.
pub fn materialize_dir(
    store: &Store,
    tree: &ObjectId,
    at: &Dir,
    counts: &mut (u64, u64),
) -> Result<()> {
    let tree = store.read_tree(tree)?;
    for e in &tree.entries {
        let name = OsStr::from_bytes(&e.name);
        match &e.kind {
            EntryKind::Dir { tree, .. } => {
                let sub = at.create_private_dir(name)?;
                materialize_dir(store, tree, &sub, counts)?;
                apply_meta_fd(&sub, sub.path(), &Meta::of_entry(e))?;
            }
            EntryKind::File { .. } => {
                write_file(store, e, at, name)?;
                counts.0 += 1;
                counts.1 += e.size;
            }
            EntryKind::Symlink { target } => {
                at.create_symlink(target, name)?;
                apply_meta_at(at, name, true, &Meta::of_entry(e))?;
            }
        }
    }
    Ok(())
}

fn write_file(store: &Store, e: &Entry, at: &Dir, name: &OsStr) -> Result<()> {
    let EntryKind::File { chunks } = &e.kind else {
        return Ok(());
    };
    let p = at.display_path(name);
    let mut f: File = at.create_file(name, 0o600)?;
    let mut hole = false;
    for c in chunks {
        let data = store.read_chunk(c)?;
        for block in data.chunks(HOLE_BLOCK) {
            if block.len() == HOLE_BLOCK && block.iter().all(|&b| b == 0) {
                f.seek(SeekFrom::Current(HOLE_BLOCK as i64))
                    .map_err(|err| Error::io(&p, err))?;
                hole = true;
            } else {
                f.write_all(block).map_err(|err| Error::io(&p, err))?;
                hole = false;
            }
        }
    }
    if hole {
        f.set_len(e.size).map_err(|err| Error::io(&p, err))?;
    }
    // After the data: a write would clear the setuid bits and capabilities set here.
    apply_meta_fd(&f, &p, &Meta::of_entry(e))
}
