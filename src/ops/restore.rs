//! `restore --to DIR`: a copy restore for when FUSE is not wanted.
//!
//! 1. Check: every tree and chunk the root needs is read and hashed before DIR is touched.
//! 2. Stage: materialize into a fresh `.ckptfs-restore-*` directory beside DIR. Entries are
//!    created with `O_CREAT|O_EXCL|O_NOFOLLOW` / `mkdir` / `symlink` inside directories this
//!    restore created, from names that tree decoding validated, so nothing is written through a
//!    symlink or outside the staging directory. Holes (all-zero 4 KiB blocks) stay holes.
//! 3. Swap: an existing non-empty DIR is renamed aside to `DIR.ckptfs-aside-<time>` (never
//!    deleted), then the staging directory is renamed to DIR. Each phase is recorded in the
//!    RUNNING marker so `recover` can roll an interrupted restore back.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::meta::apply_meta;
use crate::ops::walk::Located;
use crate::store::fsio;
use crate::store::tree::{Chunk, Entry, EntryKind};
use crate::store::Store;

/// Hole granularity for sparse restore.
const HOLE_BLOCK: usize = 4096;

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

/// Restore progress kept in the RUNNING marker (for `recover`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RestorePhase {
    pub dir: PathBuf,
    pub staging: PathBuf,
    pub aside: Option<PathBuf>,
}

/// Restores the root at `loc` (the root itself or a directory in it) to `dir`.
///
/// # Errors
/// `Usage` when DIR is inside a root or the store; `Corrupt`/`NotFound` for a bad object
/// (before anything at DIR changes).
pub fn restore(store: &Store, loc: &Located, dir: &Path) -> Result<RestoreReport> {
    let dir = crate::store::absolute(dir)?;
    for (name, rc) in &store.config().roots {
        if dir.starts_with(&rc.path) && dir != rc.path {
            return Err(Error::Usage(format!(
                "--to {} is inside root {name} ({}); restore to the root path itself or outside it",
                dir.display(),
                rc.path.display()
            )));
        }
    }
    if dir.starts_with(store.root()) || store.root().starts_with(&dir) {
        return Err(Error::Usage(format!(
            "--to {} overlaps the store {}",
            dir.display(),
            store.root().display()
        )));
    }
    let tree_id = loc
        .dir_tree()
        .ok_or_else(|| Error::Usage(format!("{}: restore needs a directory", loc.root)))?;
    let (parent, base) = match (dir.parent(), dir.file_name()) {
        (Some(p), Some(b)) => (p.to_path_buf(), b.to_os_string()),
        _ => {
            return Err(Error::Usage(format!(
                "--to {}: not a usable directory",
                dir.display()
            )))
        }
    };
    if !parent.is_dir() {
        return Err(Error::NotFound(format!("directory {}", parent.display())));
    }
    // 1. Check every needed object first.
    check_objects(store, &tree_id)?;
    let args = serde_json::json!({"checkpoint": loc.checkpoint, "root": loc.root, "to": dir});
    store.mutate("restore", args, |m| {
        let staging = parent.join(format!(
            ".ckptfs-restore-{}-{}",
            base.to_string_lossy(),
            std::process::id()
        ));
        let mut phase = RestorePhase {
            dir: dir.clone(),
            staging: staging.clone(),
            aside: None,
        };
        m.set_phase(serde_json::to_value(&phase).unwrap_or_default())?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&staging)
            .map_err(|e| Error::io(&staging, e))?;
        let mut counts = (0u64, 0u64);
        let staged = (|| {
            let root_meta = match &loc.entry {
                None => {
                    let r = &loc.record.roots[&loc.root];
                    (r.mode, r.uid, r.gid, r.mtime_ns, r.xattrs.clone())
                }
                Some(e) => (e.mode, e.uid, e.gid, e.mtime_ns, e.xattrs.clone()),
            };
            materialize_dir(store, &tree_id, &staging, &mut counts)?;
            apply_meta(
                &staging,
                false,
                root_meta.0,
                root_meta.1,
                root_meta.2,
                root_meta.3,
                &root_meta.4,
            )?;
            fsio::sync_filesystem(&staging)
        })();
        if let Err(e) = staged {
            let _ignored_cleanup = fs::remove_dir_all(&staging);
            return Err(e);
        }
        // 3. Swap. If it fails, put the original DIR back and drop the staging directory.
        let mut removed_empty = false;
        let swapped = (|| -> Result<()> {
            match fs::symlink_metadata(&dir) {
                Ok(md) => {
                    let empty_dir = md.is_dir()
                        && fs::read_dir(&dir)
                            .map_err(|e| Error::io(&dir, e))?
                            .next()
                            .is_none();
                    if empty_dir {
                        fs::remove_dir(&dir).map_err(|e| Error::io(&dir, e))?;
                        removed_empty = true;
                    } else {
                        let aside = parent.join(format!(
                            "{}.ckptfs-aside-{}",
                            base.to_string_lossy(),
                            crate::util::format_utc(crate::util::now_ns()).replace(':', "")
                        ));
                        phase.aside = Some(aside.clone());
                        m.set_phase(serde_json::to_value(&phase).unwrap_or_default())?;
                        fsio::rename(&dir, &aside)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&dir, e)),
            }
            fsio::rename(&staging, &dir)
        })();
        if let Err(e) = swapped {
            let _ignored_cleanup = fs::remove_dir_all(&staging);
            if fs::symlink_metadata(&dir).is_err() {
                match &phase.aside {
                    Some(aside) if aside.exists() => {
                        if let Err(re) = fs::rename(aside, &dir) {
                            log::warn!(
                                "could not move {} back to {}: {re}; `ckptfs recover` retries",
                                aside.display(),
                                dir.display()
                            );
                        }
                    }
                    _ if removed_empty => {
                        if let Err(re) = fs::create_dir(&dir) {
                            log::warn!("could not recreate {}: {re}", dir.display());
                        }
                    }
                    _ => {}
                }
            }
            return Err(e);
        }
        fsio::sync_path(&parent)?;
        let report = RestoreReport {
            checkpoint: loc.checkpoint,
            root: loc.root.clone(),
            dir: dir.clone(),
            files: counts.0,
            bytes: counts.1,
            moved_aside: phase.aside.clone(),
        };
        let summary =
            serde_json::json!({"files": counts.0, "bytes": counts.1, "moved_aside": phase.aside});
        Ok((report, summary))
    })
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

pub fn materialize_dir(
    store: &Store,
    tree: &ObjectId,
    at: &Path,
    counts: &mut (u64, u64),
) -> Result<()> {
    let tree = store.read_tree(tree)?;
    for e in &tree.entries {
        let p = at.join(std::ffi::OsStr::from_bytes(&e.name));
        match &e.kind {
            EntryKind::Dir { tree, .. } => {
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&p)
                    .map_err(|err| Error::io(&p, err))?;
                materialize_dir(store, tree, &p, counts)?;
                apply_meta(&p, false, e.mode, e.uid, e.gid, e.mtime_ns, &e.xattrs)?;
            }
            EntryKind::File { .. } => {
                write_file(store, e, &p)?;
                counts.0 += 1;
                counts.1 += e.size;
            }
            EntryKind::Symlink { target } => {
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), &p)
                    .map_err(|err| Error::io(&p, err))?;
                apply_meta(&p, true, e.mode, e.uid, e.gid, e.mtime_ns, &e.xattrs)?;
            }
        }
    }
    Ok(())
}

fn write_file(store: &Store, e: &Entry, p: &Path) -> Result<()> {
    let EntryKind::File { chunks } = &e.kind else {
        return Ok(());
    };
    let mut f: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
        .map_err(|err| Error::io(p, err))?;
    let mut hole = false;
    for c in chunks {
        let data = store.read_chunk(c)?;
        for block in data.chunks(HOLE_BLOCK) {
            if block.len() == HOLE_BLOCK && block.iter().all(|&b| b == 0) {
                f.seek(SeekFrom::Current(HOLE_BLOCK as i64))
                    .map_err(|err| Error::io(p, err))?;
                hole = true;
            } else {
                f.write_all(block).map_err(|err| Error::io(p, err))?;
                hole = false;
            }
        }
    }
    if hole {
        f.set_len(e.size).map_err(|err| Error::io(p, err))?;
    }
    drop(f);
    apply_meta(p, false, e.mode, e.uid, e.gid, e.mtime_ns, &e.xattrs)
}
