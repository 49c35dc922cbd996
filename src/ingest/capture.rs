//! Capture: directory trees -> objects + trees -> one checkpoint over every root.
//!
//! 1. Walk each root (sorted, `lstat`, never following symlinks). Sockets, fifos and devices
//!    fail the capture with their path unless excluded.
//! 2. The files found go to the reading engine (`reader`): a file whose (size, mtime, ctime,
//!    inode) equal the parent checkpoint's stat cache reuses its chunk list; every other file
//!    is read and chunked (FastCDC) and hashed on all cores. A file that changes while it is
//!    read is retried, then named in the error.
//! 3. Trees are encoded bottom-up (unchanged directories hash to their old ids), objects are
//!    committed (see `store::object`), the record is written, then the branch moves by CAS.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::reader::{read_files, split_cached, FileData, FileJob, OnChange, Progress};
use crate::error::{Error, Result};
use crate::fs::safe::{Dir, Kind, Stat};
use crate::id::ObjectId;
use crate::meta::{dir_entry, mtime_ns, special_file_error, symlink_entry};
use crate::store::checkpoint::{Checkpoint, RootRecord, Stats};
use crate::store::exclude::Excluder;
use crate::store::object::ObjectBatch;
use crate::store::statcache::{Cached, StatCache, RACY_WINDOW_NS};
use crate::store::tree::{check_depth, Entry, Tree};
use crate::store::{ChunkerConfig, Store};

/// What to capture.
#[derive(Clone, Debug, Default)]
pub struct CaptureOptions {
    pub branch: String,
    pub label: Option<String>,
    pub message: String,
    /// Capture these roots from another directory instead of their recorded path.
    pub from: BTreeMap<String, PathBuf>,
    /// Extra exclude globs for every root (added to STORE.json's per-root rules).
    pub exclude: Vec<String>,
    /// Show a progress line on stderr (only when it is a terminal).
    pub progress: bool,
    /// `--meta`: recorded with the checkpoint.
    pub annotations: crate::store::checkpoint::Annotations,
}

/// The result of a capture.
#[derive(Clone, Debug)]
pub struct CaptureReport {
    pub id: ObjectId,
    pub checkpoint: Checkpoint,
}

/// A walked entry: a file is its index in the job list (read later), a symlink is complete.
enum Node {
    File(usize),
    Dir(Box<DirNode>),
    Symlink(Entry),
}

struct DirNode {
    meta: Stat,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    children: Vec<(Vec<u8>, Node)>,
}

/// Captures every root of the store as one checkpoint on `opts.branch`.
///
/// # Errors
/// `Invalid` for special files and files that kept changing, `NotFound` for a missing root,
/// `Conflict` for an existing label or a branch moved concurrently; I/O errors with their path.
pub fn capture(store: &Store, opts: &CaptureOptions) -> Result<CaptureReport> {
    crate::store::refs::check_name("branch", &opts.branch)?;
    if let Some(l) = &opts.label {
        crate::store::refs::check_name("label", l)?;
    }
    for name in opts.from.keys() {
        if !store.config().roots.contains_key(name) {
            let known: Vec<&str> = store.config().roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "--from {name}=...: no root {name:?} (store roots: {})",
                known.join(", ")
            )));
        }
    }
    let args = serde_json::json!({"branch": opts.branch, "label": opts.label,
        "from": opts.from.iter().map(|(k, v)| (k.clone(), v.display().to_string())).collect::<BTreeMap<_,_>>()});
    store.mutate("capture", args, |_m| {
        let report = capture_locked(store, opts)?;
        let s = &report.checkpoint.stats;
        let summary = serde_json::json!({"checkpoint": report.id, "files": s.files,
            "bytes": s.bytes, "new_objects": s.new_objects, "new_bytes": s.new_bytes});
        Ok((report, summary))
    })
}

fn capture_locked(store: &Store, opts: &CaptureOptions) -> Result<CaptureReport> {
    if let Some(l) = &opts.label {
        if store.read_label(l)?.is_some() {
            return Err(Error::Conflict(format!(
                "label {l} already exists; labels are immutable"
            )));
        }
    }
    let parent_branch = store.read_branch(&opts.branch)?;
    let parent = parent_branch.as_ref().and_then(|b| b.head);
    let start_ns = crate::text::time::now_ns();
    let batch = ObjectBatch::new(store);
    let progress = if opts.progress {
        Progress::shown("capture")
    } else {
        Progress::new()
    };
    let mut roots = BTreeMap::new();
    let mut stats = Stats::default();
    let mut caches: Vec<(String, StatCache)> = Vec::new();
    for (name, rc) in &store.config().roots {
        let src = opts
            .from
            .get(name)
            .cloned()
            .unwrap_or_else(|| rc.path.clone());
        let mut patterns = rc.exclude.clone();
        patterns.extend(opts.exclude.iter().cloned());
        let excl = Excluder::compile(name, &patterns)?;
        let t = Instant::now();
        let old = parent
            .map(|p| store.load_statcache(&p, name))
            .unwrap_or_default();
        log::debug!(
            "root {name}: stat cache of {} files loaded in {:?}",
            old.len(),
            t.elapsed()
        );
        let (rec, cache) = capture_root(
            store,
            &batch,
            &store.config().chunker,
            &src,
            &excl,
            old,
            start_ns,
            &mut stats,
            &progress,
        )
        .map_err(|e| match e {
            Error::NotFound(m) => Error::NotFound(format!("root {name}: {m}")),
            other => other,
        })?;
        roots.insert(name.clone(), rec);
        caches.push((name.clone(), cache));
    }
    progress.finish();
    let t = Instant::now();
    batch.commit()?;
    log::debug!(
        "{} new objects committed in {:?}",
        batch.new_objects(),
        t.elapsed()
    );
    stats.new_objects = batch.new_objects();
    stats.new_bytes = batch.new_bytes();
    let checkpoint = Checkpoint {
        version: 1,
        roots,
        parents: parent.into_iter().collect(),
        branch: opts.branch.clone(),
        label: opts.label.clone(),
        message: opts.message.clone(),
        time_ns: crate::text::time::now_ns(),
        stats,
        annotations: Box::new(opts.annotations.clone()),
    };
    let id = store.publish_checkpoint(&checkpoint, parent)?;
    if let Some(l) = &opts.label {
        store.create_label(l, &id)?;
    }
    let t = Instant::now();
    for (name, cache) in &caches {
        store.save_statcache(&id, name, cache);
    }
    log::debug!(
        "checkpoint {} recorded; stat caches saved in {:?}",
        id.short(),
        t.elapsed()
    );
    Ok(CaptureReport { id, checkpoint })
}

/// What is in `dir` now, as root `root` would be captured from it (its exclude rules), in a
/// dry run: every file is read and hashed, nothing is written to the store. For `diff --dir`.
///
/// # Errors
/// As `capture`: special files, files that kept changing, I/O errors with their path.
pub fn capture_dry_run(
    store: &Store,
    root: &str,
    dir: &Path,
) -> Result<(RootRecord, std::collections::HashMap<ObjectId, Tree>)> {
    let rc = store.root_config(root)?;
    let excl = Excluder::compile(root, &rc.exclude)?;
    let batch = ObjectBatch::dry_run(store);
    let mut stats = Stats::default();
    let (rec, _cache) = capture_root(
        store,
        &batch,
        &store.config().chunker,
        dir,
        &excl,
        StatCache::new(),
        crate::text::time::now_ns(),
        &mut stats,
        &Progress::new(),
    )?;
    Ok((rec, batch.take_dry_trees()))
}

/// Removes the record of a checkpoint whose branch could not move to it (best effort: a record
/// that stays is harmless garbage, logged).
#[allow(clippy::too_many_arguments)]
fn capture_root(
    store: &Store,
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    src: &Path,
    excl: &Excluder,
    old: StatCache,
    start_ns: i64,
    stats: &mut Stats,
    progress: &Progress,
) -> Result<(RootRecord, StatCache)> {
    // The root is entered once, by the path the store names; everything below it is reached
    // through held directory fds (see `safe`).
    let top = Arc::new(Dir::open(src)?);
    let meta = top.stat_self()?;
    let mut jobs = Vec::new();
    let t = Instant::now();
    let mut old = old;
    let xattrs = top.xattrs_self()?;
    let root = walk_dir(
        &Walk { top: &top, excl },
        &top,
        Path::new(""),
        meta,
        xattrs,
        &mut old,
        &mut jobs,
        stats,
    )?;
    log::debug!(
        "{}: walked {} files in {:?}",
        src.display(),
        jobs.len(),
        t.elapsed()
    );
    let t = Instant::now();
    let results = read_files(batch, chunker, &jobs, progress, None)?;
    log::debug!(
        "{}: files read and hashed in {:?}",
        src.display(),
        t.elapsed()
    );
    let mut cache = StatCache::new();
    for (job, data) in jobs.iter().zip(&results) {
        stats.files += 1;
        stats.bytes += data.key.size;
        if data.read {
            stats.files_read += 1;
        }
        if data.key.mtime_ns < start_ns - RACY_WINDOW_NS
            && data.key.ctime_ns < start_ns - RACY_WINDOW_NS
        {
            cache.insert(
                job.rel.clone(),
                Cached {
                    key: data.key.clone(),
                    chunks: data.chunks.clone(),
                    xattrs: data.xattrs.clone(),
                    ino: data.ino,
                    ctime_ns: data.ctime_ns,
                    snapshot: None,
                },
            );
        }
    }
    let t = Instant::now();
    let links = link_groups(&jobs);
    let (tree, subdirs, files, bytes) = build_tree(batch, &root, &results, &links)?;
    log::debug!("{}: trees built in {:?}", src.display(), t.elapsed());
    let _ = store;
    Ok((
        RootRecord {
            tree,
            mode: root.meta.mode() & 0o7777,
            uid: root.meta.uid(),
            gid: root.meta.gid(),
            mtime_ns: mtime_ns(&root.meta),
            subdirs,
            files,
            bytes,
            xattrs: root.xattrs.clone(),
        },
        cache,
    ))
}

/// What every level of a walk shares: the root's fd (the reading engine opens files beneath
/// it) and the exclude rules.
struct Walk<'a> {
    top: &'a Arc<Dir>,
    excl: &'a Excluder,
}

/// Walks the held directory `dir` (`rel` below the root). Every entry is `lstat`ed in `dir`,
/// every subdirectory opened from `dir` and checked to be the one `lstat` saw, so a path
/// component swapped for a symlink meanwhile is refused, never followed.
#[allow(clippy::too_many_arguments)]
fn walk_dir(
    w: &Walk<'_>,
    dir: &Dir,
    rel: &Path,
    meta: Stat,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    old: &mut StatCache,
    jobs: &mut Vec<FileJob>,
    stats: &mut Stats,
) -> Result<DirNode> {
    stats.dirs += 1;
    let names = dir.entries()?;
    let mut children = Vec::with_capacity(names.len());
    for name in names {
        let child_rel = rel.join(&name);
        if w.excl.excluded(&child_rel, &name) {
            continue;
        }
        let child_abs = dir.display_path(&name);
        let Some(m) = dir.stat(&name)? else {
            // Deleted between readdir and lstat: it is simply not part of this capture.
            continue;
        };
        let node = match m.kind() {
            Kind::Dir => {
                check_depth(child_rel.components().count(), || {
                    child_abs.display().to_string()
                })?;
                let sub = dir
                    .open_dir(&name)
                    .map_err(|e| crate::fs::safe::swapped_error(&child_abs, e))?;
                if !sub.stat_self()?.same_object(&m) {
                    return Err(Error::Invalid(format!(
                        "{} was replaced while being captured; retry",
                        child_abs.display()
                    )));
                }
                let x = sub.xattrs_self()?;
                Node::Dir(Box::new(walk_dir(
                    w, &sub, &child_rel, m, x, old, jobs, stats,
                )?))
            }
            Kind::File => {
                let rel_bytes = child_rel.as_os_str().as_bytes().to_vec();
                let (cached, previous, _) = split_cached(old.remove(&rel_bytes), &m);
                jobs.push(FileJob {
                    top: Arc::clone(w.top),
                    walked: m,
                    abs: child_abs,
                    rel: rel_bytes,
                    cached,
                    previous,
                    previous_snapshot: None,
                    on_change: OnChange::Retry,
                    owner: (m.mode() & 0o7777, m.uid(), m.gid()),
                    size: m.len(),
                });
                Node::File(jobs.len() - 1)
            }
            Kind::Symlink => {
                stats.symlinks += 1;
                let xattrs = dir.xattrs_of(&name)?;
                let target = dir.read_link(&name)?;
                Node::Symlink(symlink_entry(name.as_bytes(), target, &m, xattrs))
            }
            _ => return Err(special_file_error(&child_abs, &m)),
        };
        children.push((name.as_bytes().to_vec(), node));
    }
    Ok(DirNode {
        meta,
        xattrs,
        children,
    })
}

/// Per file job: the job whose data stands for its inode (itself unless it is a later name of
/// a file met before), and the number of the inode's names in this root when more than one
/// (else 0). Every name of a linked file then records one content, one set of metadata and
/// one inode number (`tree`: link groups), even if the file changed between two reads.
fn link_groups(jobs: &[FileJob]) -> Vec<(usize, u32)> {
    let mut first: std::collections::HashMap<(u64, u64), usize> = Default::default();
    let mut out: Vec<(usize, u32)> = (0..jobs.len()).map(|i| (i, 0)).collect();
    let mut count: Vec<u32> = vec![0; jobs.len()];
    for (i, j) in jobs.iter().enumerate() {
        if j.walked.nlink > 1 {
            let f = *first.entry((j.walked.dev, j.walked.ino)).or_insert(i);
            out[i].0 = f;
            count[f] += 1;
        }
    }
    for o in &mut out {
        let n = count[o.0];
        o.1 = if n > 1 { n } else { 0 };
    }
    out
}

/// Encodes a directory bottom-up; returns (tree id, subdirs, files, bytes).
fn build_tree(
    batch: &ObjectBatch<'_>,
    dir: &DirNode,
    results: &[FileData],
    links: &[(usize, u32)],
) -> Result<(ObjectId, u32, u64, u64)> {
    let mut entries = Vec::with_capacity(dir.children.len());
    let mut subdirs = 0u32;
    let mut files = 0u64;
    let mut bytes = 0u64;
    for (name, node) in &dir.children {
        match node {
            Node::File(i) => {
                let (first, nlink) = links[*i];
                let d = &results[first];
                files += 1;
                bytes += d.key.size;
                let mut e = d.entry(name);
                e.nlink = nlink;
                entries.push(e);
            }
            Node::Dir(sub) => {
                let (tree, sd, f, b) = build_tree(batch, sub, results, links)?;
                subdirs += 1;
                files += f;
                bytes += b;
                entries.push(dir_entry(
                    name,
                    tree,
                    sd,
                    sub.children.len() as u64,
                    &sub.meta,
                    sub.xattrs.clone(),
                ));
            }
            Node::Symlink(e) => entries.push(e.clone()),
        }
    }
    let tree = Tree { entries };
    let id = batch.ensure_tree(&tree)?;
    Ok((id, subdirs, files, bytes))
}
