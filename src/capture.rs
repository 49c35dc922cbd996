//! Capture: directory trees -> objects + trees -> one checkpoint over every root.
//!
//! 1. Walk each root (sorted, `lstat`, never following symlinks). Sockets, fifos and devices
//!    fail the capture with their path unless excluded.
//! 2. A file whose (size, mtime, ctime, inode) equal the parent checkpoint's stat cache reuses
//!    its chunk list; every other file is read and chunked (FastCDC) and hashed on all cores.
//!    A file that changes while it is read is retried, then named in the error.
//! 3. Trees are encoded bottom-up (unchanged directories hash to their old ids), objects are
//!    committed (see `store::object`), the record is written, then the branch moves by CAS.

use std::collections::BTreeMap;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::snapshot::{self, Snapshots, SNAPSHOT_MIN};
use crate::store::checkpoint::{Checkpoint, RootRecord, Stats};
use crate::store::object::ObjectBatch;
use crate::store::statcache::{Cached, StatCache, StatKey, RACY_WINDOW_NS};
use crate::store::tree::{Chunk, Entry, EntryKind, Tree};
use crate::store::{ChunkerConfig, Store};

/// How often a file that keeps changing is re-read before the capture fails.
const CHANGE_RETRIES: usize = 3;

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
}

/// The result of a capture.
#[derive(Clone, Debug)]
pub struct CaptureReport {
    pub id: ObjectId,
    pub checkpoint: Checkpoint,
}

/// Compiles exclude globs. A pattern without `/` matches a name at any depth (`*.pem`,
/// `node_modules`); a pattern with `/` matches the path from the root (`cache/tmp/**`).
pub fn compile_exclude(root: &str, patterns: &[String]) -> Result<(GlobSet, GlobSet)> {
    let mut names = GlobSetBuilder::new();
    let mut paths = GlobSetBuilder::new();
    for p in patterns {
        let anchored = p.contains('/');
        let pat = p.trim_start_matches('/');
        let glob = GlobBuilder::new(pat)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::Usage(format!("root {root}: bad exclude pattern {p:?}: {e}")))?;
        if anchored {
            paths.add(glob);
        } else {
            names.add(glob);
        }
    }
    let build = |b: GlobSetBuilder| {
        b.build()
            .map_err(|e| Error::Usage(format!("root {root}: bad exclude patterns: {e}")))
    };
    Ok((build(names)?, build(paths)?))
}

struct Excluder {
    names: GlobSet,
    paths: GlobSet,
}

impl Excluder {
    fn excluded(&self, rel: &Path, name: &std::ffi::OsStr) -> bool {
        self.names.is_match(name) || self.paths.is_match(rel)
    }
}

/// A file found by the walk, to be read (or reused from the stat cache).
pub(crate) struct FileJob {
    pub(crate) abs: PathBuf,
    pub(crate) rel: Vec<u8>,
    /// The stat cache entry, present only when the walk's `lstat` matched its key.
    pub(crate) cached: Option<Cached>,
    /// (mode, uid, gid) from the walk's `lstat`, used for cached files.
    pub(crate) owner: (u32, u32, u32),
    /// The size the walk's `lstat` saw (biggest files are read first).
    pub(crate) size: u64,
    /// What to do when the file changes while it is read.
    pub(crate) on_change: OnChange,
    /// The chunks this path had in the previous checkpoint when it changed since: those whose
    /// bytes still match are reused without chunking (see `chunker`).
    pub(crate) previous: Vec<Chunk>,
    /// The reflink snapshot that holds `previous`'s bytes, if one was kept (see `snapshot`).
    pub(crate) previous_snapshot: Option<String>,
}

/// How reading a file treats a change made meanwhile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnChange {
    /// Read it again, up to `CHANGE_RETRIES` times, then fail naming it (plain captures).
    Retry,
    /// Live workspaces: read it again; at the last attempt a file that only grew is captured
    /// as the prefix that existed when reading started (an appending writer never yields
    /// torn bytes).
    AcceptPrefix,
    /// The first pass of a checkpoint that then freezes the writers: no retry; the file comes
    /// back with a stat key that matches nothing, so the frozen pass reads it again.
    Provisional,
}

/// The result of reading one file.
pub(crate) struct FileData {
    pub(crate) key: StatKey,
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) read: bool,
    /// The inode number and ctime the tree entry records: the file's own, except for a
    /// file a workspace copied up (see `workspace::merge`).
    pub(crate) ino: u64,
    pub(crate) ctime_ns: i64,
    /// The reflink snapshot kept of these bytes (see `snapshot`).
    pub(crate) snapshot: Option<String>,
}

impl FileData {
    /// A file just read: owner and mode from `m` (its stat when opened), content `chunks`,
    /// stat key `key`, and the ctime its tree entry shows.
    fn read(
        m: &Metadata,
        key: StatKey,
        ctime_ns: i64,
        chunks: Vec<Chunk>,
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        snapshot: Option<String>,
    ) -> FileData {
        FileData {
            ino: key.ino,
            ctime_ns,
            key,
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            chunks,
            xattrs,
            read: true,
            snapshot,
        }
    }

    /// The tree entry of this file under `name`.
    pub(crate) fn entry(&self, name: &[u8]) -> Entry {
        Entry {
            name: name.to_vec(),
            kind: EntryKind::File {
                chunks: self.chunks.clone(),
            },
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            mtime_ns: self.key.mtime_ns,
            size: self.key.size,
            xattrs: self.xattrs.clone(),
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }
}

enum Node {
    File(usize),
    Dir(Box<DirNode>),
    Symlink(Entry),
}

struct DirNode {
    meta: Metadata,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    children: Vec<(Vec<u8>, Node)>,
}

pub(crate) struct Progress {
    pub(crate) files: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) done: AtomicBool,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            done: AtomicBool::new(false),
        }
    }
}

/// Captures every root of the store as one checkpoint on `opts.branch`.
///
/// # Errors
/// `Invalid` for special files and files that kept changing, `NotFound` for a missing root,
/// `Conflict` for an existing label or a branch moved concurrently; I/O errors with their path.
pub fn capture(store: &Store, opts: &CaptureOptions) -> Result<CaptureReport> {
    crate::util::check_name("branch", &opts.branch)?;
    if let Some(l) = &opts.label {
        crate::util::check_name("label", l)?;
    }
    for name in opts.from.keys() {
        store.root_config(name)?;
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
    let start_ns = crate::util::now_ns();
    let batch = ObjectBatch::new(store);
    let progress = Progress {
        files: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        done: AtomicBool::new(false),
    };
    let show = opts.progress && io::stderr().is_terminal();
    let mut roots = BTreeMap::new();
    let mut stats = Stats::default();
    let mut caches: Vec<(String, StatCache)> = Vec::new();
    std::thread::scope(|s| -> Result<()> {
        if show {
            s.spawn(|| show_progress(&progress));
        }
        let result = (|| {
            for (name, rc) in &store.config().roots {
                let src = opts
                    .from
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| rc.path.clone());
                let mut patterns = rc.exclude.clone();
                patterns.extend(opts.exclude.iter().cloned());
                let (names, paths) = compile_exclude(name, &patterns)?;
                let excl = Excluder { names, paths };
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
            Ok(())
        })();
        progress.done.store(true, Ordering::Relaxed);
        result
    })?;
    if show {
        eprint!("\r\x1b[K");
    }
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
        time_ns: crate::util::now_ns(),
        stats,
    };
    let id = store.write_checkpoint(&checkpoint)?;
    store.advance_branch(&opts.branch, parent, id)?;
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

fn show_progress(p: &Progress) {
    let mut err = io::stderr();
    while !p.done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let _ignored = write!(
            err,
            "\r\x1b[Kcapturing: {} files, {} read",
            p.files.load(Ordering::Relaxed),
            crate::util::human_bytes(p.bytes.load(Ordering::Relaxed))
        );
    }
}

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
    let meta = fs::symlink_metadata(src).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::NotFound(format!("directory {}", src.display())),
        _ => Error::io(src, e),
    })?;
    if !meta.is_dir() {
        return Err(Error::Invalid(format!(
            "{} is not a directory",
            src.display()
        )));
    }
    let mut jobs = Vec::new();
    let t = Instant::now();
    let mut old = old;
    let xattrs = read_xattrs_path(src)?;
    let root = walk_dir(
        src,
        Path::new(""),
        meta,
        xattrs,
        excl,
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
    let (tree, subdirs, files, bytes) = build_tree(batch, &root, &results)?;
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

pub(crate) fn mtime_ns(m: &Metadata) -> i64 {
    m.mtime() * 1_000_000_000 + m.mtime_nsec()
}

pub(crate) fn ctime_ns(m: &Metadata) -> i64 {
    m.ctime() * 1_000_000_000 + m.ctime_nsec()
}

pub(crate) fn stat_key(m: &Metadata) -> StatKey {
    StatKey {
        size: m.len(),
        mtime_ns: mtime_ns(m),
        ctime_ns: ctime_ns(m),
        ino: m.ino(),
    }
}

#[allow(clippy::too_many_arguments)]
fn walk_dir(
    abs: &Path,
    rel: &Path,
    meta: Metadata,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    excl: &Excluder,
    old: &mut StatCache,
    jobs: &mut Vec<FileJob>,
    stats: &mut Stats,
) -> Result<DirNode> {
    stats.dirs += 1;
    let mut names: Vec<std::ffi::OsString> = Vec::new();
    for ent in fs::read_dir(abs).map_err(|e| Error::io(abs, e))? {
        let ent = ent.map_err(|e| Error::io(abs, e))?;
        names.push(ent.file_name());
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut children = Vec::with_capacity(names.len());
    for name in names {
        let child_abs = abs.join(&name);
        let child_rel = rel.join(&name);
        if excl.excluded(&child_rel, &name) {
            continue;
        }
        let m = match fs::symlink_metadata(&child_abs) {
            Ok(m) => m,
            // Deleted between readdir and lstat: it is simply not part of this capture.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&child_abs, e)),
        };
        let ft = m.file_type();
        let node = if ft.is_dir() {
            let x = read_xattrs_path(&child_abs)?;
            Node::Dir(Box::new(walk_dir(
                &child_abs, &child_rel, m, x, excl, old, jobs, stats,
            )?))
        } else if ft.is_file() {
            let rel_bytes = child_rel.as_os_str().as_bytes().to_vec();
            let (cached, previous, _) = split_cached(old.remove(&rel_bytes), &m);
            jobs.push(FileJob {
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
        } else if ft.is_symlink() {
            stats.symlinks += 1;
            let xattrs = read_xattrs_path(&child_abs)?;
            Node::Symlink(symlink_entry(name.as_bytes(), &child_abs, &m, xattrs)?)
        } else {
            return Err(special_file_error(&child_abs, &m));
        };
        children.push((name.as_bytes().to_vec(), node));
    }
    Ok(DirNode {
        meta,
        xattrs,
        children,
    })
}

/// The stat cache entry of a file: reused whole when its stat key still matches, else its
/// chunks (and the snapshot holding their bytes) are the previous version to try first.
pub(crate) fn split_cached(
    entry: Option<Cached>,
    m: &Metadata,
) -> (Option<Cached>, Vec<Chunk>, Option<String>) {
    match entry {
        Some(c) if c.key == stat_key(m) => (Some(c), Vec::new(), None),
        Some(c) => (None, c.chunks, c.snapshot),
        None => (None, Vec::new(), None),
    }
}

fn ft_is(m: &Metadata, t: u32) -> bool {
    m.mode() & libc::S_IFMT == t
}

/// The error for a socket, fifo or device found at `path`: captures fail closed on them.
pub(crate) fn special_file_error(path: &Path, m: &Metadata) -> Error {
    let what = if ft_is(m, libc::S_IFSOCK) {
        "a socket"
    } else if ft_is(m, libc::S_IFIFO) {
        "a fifo"
    } else {
        "a device node"
    };
    Error::Invalid(format!(
        "{} is {what}: only files, directories and symlinks can be captured (exclude it with --exclude)",
        path.display()
    ))
}

/// The tree entry of the symlink at `path` (its target is stored, never followed).
pub(crate) fn symlink_entry(
    name: &[u8],
    path: &Path,
    m: &Metadata,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Entry> {
    let target = fs::read_link(path).map_err(|e| Error::io(path, e))?;
    let target = target.as_os_str().as_bytes().to_vec();
    Ok(Entry {
        name: name.to_vec(),
        size: target.len() as u64,
        kind: EntryKind::Symlink { target },
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: mtime_ns(m),
        xattrs,
        ctime_ns: ctime_ns(m),
        ino: m.ino(),
    })
}

/// Reads the xattrs of a path without following a final symlink. Unsupported = none.
pub(crate) fn read_xattrs_path(path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let names = match xattr::list(path) {
        Ok(n) => n,
        Err(e) if is_unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut out = Vec::new();
    for n in names {
        match xattr::get(path, &n) {
            Ok(Some(v)) => out.push((n.as_bytes().to_vec(), v)),
            Ok(None) => {}
            Err(e) if is_unsupported(&e) => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    out.sort();
    Ok(out)
}

fn read_xattrs_file(f: &File, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use xattr::FileExt;
    let names = match f.list_xattr() {
        Ok(n) => n,
        Err(e) if is_unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut out = Vec::new();
    for n in names {
        match f.get_xattr(&n) {
            Ok(Some(v)) => out.push((n.as_bytes().to_vec(), v)),
            Ok(None) => {}
            Err(e) if is_unsupported(&e) => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::ENODATA))
}

/// Reads all jobs on every core; results are in job order.
pub(crate) fn read_files(
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    jobs: &[FileJob],
    progress: &Progress,
    snapshots: Option<&Snapshots>,
) -> Result<Vec<FileData>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    // Files to read, biggest first, so the last ones to finish are small and every core
    // stays busy to the end (a few big logs and databases dominate a checkpoint).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| {
        let j = &jobs[i];
        std::cmp::Reverse(if j.cached.is_some() { 0 } else { j.size })
    });
    let next = AtomicUsize::new(0);
    // Files being read right now.
    let reading = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Mutex<Option<FileData>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    // Nothing left to start: while the others finish, make the objects
                    // written so far durable (the commit then syncs only the rest).
                    if reading.load(Ordering::Relaxed) == 0 {
                        return;
                    }
                    if let Err(e) = batch.sync_ahead() {
                        failed.store(true, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                    return;
                };
                let job = &jobs[i];
                reading.fetch_add(1, Ordering::Relaxed);
                let read = match snapshots {
                    Some(snaps) if job.cached.is_none() && job.size >= SNAPSHOT_MIN => {
                        read_snapshot(batch, chunker, job, progress, snaps)
                    }
                    _ => read_file(batch, chunker, job, progress),
                };
                reading.fetch_sub(1, Ordering::Relaxed);
                match read {
                    Ok(d) => {
                        progress.files.fetch_add(1, Ordering::Relaxed);
                        *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(d);
                    }
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .ok_or_else(|| Error::Invalid("internal: a file was not read".into()))
        })
        .collect()
}

fn read_file(
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    job: &FileJob,
    progress: &Progress,
) -> Result<FileData> {
    // Unchanged since the parent checkpoint (the walk's lstat matched the stat cache): reuse
    // its content without even opening it, so an unchanged tree costs one lstat per file.
    if let Some(c) = &job.cached {
        let (mode, uid, gid) = job.owner;
        return Ok(FileData {
            key: c.key.clone(),
            mode,
            uid,
            gid,
            chunks: c.chunks.clone(),
            xattrs: c.xattrs.clone(),
            read: false,
            ino: c.ino,
            ctime_ns: c.ctime_ns,
            snapshot: c.snapshot.clone(),
        });
    }
    for attempt in 0..CHANGE_RETRIES {
        let (f, before) = open_regular(job)?;
        let key = stat_key(&before);
        let xattrs = read_xattrs_file(&f, &job.abs)?;
        let (chunks, total) = crate::chunker::chunk_file(
            batch,
            chunker,
            &f,
            key.size,
            &job.abs,
            &job.previous,
            &[],
            &progress.bytes,
        )?;
        let after = f.metadata().map_err(|e| Error::io(&job.abs, e))?;
        let stable = stat_key(&after) == key;
        // Left for the frozen pass: a key that matches nothing makes it read the file again.
        let provisional = !stable && job.on_change == OnChange::Provisional;
        let grew = job.on_change == OnChange::AcceptPrefix
            && attempt + 1 == CHANGE_RETRIES
            && after.len() >= key.size
            && after.ino() == key.ino;
        if provisional || ((stable || grew) && total == key.size) {
            let key = if provisional {
                StatKey {
                    ctime_ns: i64::MAX,
                    ..key
                }
            } else {
                key
            };
            let ctime_ns = key.ctime_ns;
            return Ok(FileData::read(&before, key, ctime_ns, chunks, xattrs, None));
        }
        log::debug!("{} changed while being read; retrying", job.abs.display());
    }
    Err(Error::Invalid(format!(
        "{} kept changing while being captured ({CHANGE_RETRIES} attempts); quiesce the writer and retry",
        job.abs.display()
    )))
}

/// Reads a changed file through a reflink snapshot of it (see `snapshot`): the snapshot is
/// one instant of the file, and where the previous version's snapshot maps the same blocks,
/// its chunks are reused unread. Falls back to [`read_file`] where the filesystem cannot clone.
fn read_snapshot(
    batch: &ObjectBatch<'_>,
    chunker: &ChunkerConfig,
    job: &FileJob,
    progress: &Progress,
    snaps: &Snapshots,
) -> Result<FileData> {
    if job.previous_snapshot.as_deref() == Some(snapshot::DECLINED) {
        let mut d = read_file(batch, chunker, job, progress)?;
        d.snapshot = job.previous_snapshot.clone();
        return Ok(d);
    }
    let (live, before) = open_regular(job)?;
    // Nothing to compare with and nothing to keep (`status`): a clone would be wasted.
    let old = job.previous_snapshot.as_deref().and_then(|n| snaps.open(n));
    if old.is_none() && !snaps.keeps() {
        return read_file(batch, chunker, job, progress);
    }
    // With no writer, and none let in until the read is done, the live file holds the clone's
    // bytes: read it, from the page cache (the clone's pages are not cached).
    let lease = snapshot::Lease::take(&live);
    let Some(snap) = snaps.take(&live) else {
        return read_file(batch, chunker, job, progress);
    };
    let after = live.metadata().map_err(|e| Error::io(&job.abs, e))?;
    let xattrs = read_xattrs_file(&live, &job.abs)?;
    let size = snap
        .file
        .metadata()
        .map_err(|e| Error::io(&job.abs, e))?
        .len();
    let cmp = snapshot::compare(old.as_ref(), &snap.file);
    let chunk = |f: &File| {
        crate::chunker::chunk_file(
            batch,
            chunker,
            f,
            size,
            &job.abs,
            &job.previous,
            &cmp.same,
            &progress.bytes,
        )
    };
    let (mut chunks, mut total) = chunk(if lease.is_some() { &live } else { &snap.file })?;
    if lease.is_some_and(|l| !l.held_throughout()) {
        // A writer may have been let in meanwhile: read the clone after all.
        (chunks, total) = chunk(&snap.file)?;
    }
    if total != size {
        return Err(Error::Invalid(format!(
            "{}: its snapshot changed while being read",
            job.abs.display()
        )));
    }
    snaps.add_skipped(cmp.same.iter().map(|(s, e)| e - s).sum());
    // The stat the snapshot goes with: the file's, unless it changed around the clone (the
    // snapshot is then an instant between the two): recorded with a ctime that matches
    // nothing, so the next checkpoint (or the frozen pass) reads the file again, through
    // this snapshot.
    let key = stat_key(&before);
    let stable = stat_key(&after) == key && key.size == size;
    let (key, ctime_ns) = if stable {
        (key.clone(), key.ctime_ns)
    } else {
        let unmatched = StatKey {
            size,
            ctime_ns: i64::MAX,
            ..key
        };
        let shown = if job.on_change == OnChange::Provisional {
            i64::MAX
        } else {
            ctime_ns(&after)
        };
        (unmatched, shown)
    };
    let snapshot = if snapshot::decline(&cmp, size) {
        log::debug!(
            "{}: read whole from now on ({} unchanged ranges, {:?} extents)",
            job.abs.display(),
            cmp.same.len(),
            cmp.extents
        );
        Some(snapshot::DECLINED.to_string())
    } else {
        snaps.keeps().then(|| snap.keep())
    };
    Ok(FileData::read(
        &before, key, ctime_ns, chunks, xattrs, snapshot,
    ))
}

/// Opens a job's file and stats it: an error names it when it is no longer a regular file.
fn open_regular(job: &FileJob) -> Result<(File, Metadata)> {
    let f = open_nofollow(&job.abs).map_err(|e| Error::io(&job.abs, e))?;
    let m = f.metadata().map_err(|e| Error::io(&job.abs, e))?;
    if !m.is_file() {
        return Err(Error::Invalid(format!(
            "{} changed type while being captured",
            job.abs.display()
        )));
    }
    Ok((f, m))
}

fn open_nofollow(path: &Path) -> io::Result<File> {
    let open = |flags| OpenOptions::new().read(true).custom_flags(flags).open(path);
    match open(libc::O_NOFOLLOW | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(libc::O_NOFOLLOW),
        other => other,
    }
}

/// Encodes a directory bottom-up; returns (tree id, subdirs, files, bytes).
fn build_tree(
    batch: &ObjectBatch<'_>,
    dir: &DirNode,
    results: &[FileData],
) -> Result<(ObjectId, u32, u64, u64)> {
    let mut entries = Vec::with_capacity(dir.children.len());
    let mut subdirs = 0u32;
    let mut files = 0u64;
    let mut bytes = 0u64;
    for (name, node) in &dir.children {
        match node {
            Node::File(i) => {
                let d = &results[*i];
                files += 1;
                bytes += d.key.size;
                entries.push(d.entry(name));
            }
            Node::Dir(sub) => {
                let (tree, sd, f, b) = build_tree(batch, sub, results)?;
                subdirs += 1;
                files += f;
                bytes += b;
                entries.push(Entry {
                    name: name.clone(),
                    kind: EntryKind::Dir { tree, subdirs: sd },
                    mode: sub.meta.mode() & 0o7777,
                    uid: sub.meta.uid(),
                    gid: sub.meta.gid(),
                    mtime_ns: mtime_ns(&sub.meta),
                    size: sub.children.len() as u64,
                    xattrs: sub.xattrs.clone(),
                    ctime_ns: ctime_ns(&sub.meta),
                    ino: sub.meta.ino(),
                });
            }
            Node::Symlink(e) => entries.push(e.clone()),
        }
    }
    let tree = Tree { entries };
    let id = batch.ensure_tree(&tree)?;
    Ok((id, subdirs, files, bytes))
}
