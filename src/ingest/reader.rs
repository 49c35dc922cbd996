//! The reading engine: the files a walk found -> chunk objects, on every core.
//!
//! Both walks (a plain [`capture`](super::capture) of a directory, and the merge of a
//! workspace's upper layer in `ingest::upper`) list what they found as [`FileJob`]s and hand
//! them to [`read_files`], which returns one [`FileData`] per job, in job order:
//! - a job whose stat cache entry still matches (`split_cached`) is reused unread;
//! - every other file is opened beneath the walk's directory fd, never through a symlink,
//!   never blocking, and checked to be the file the walk saw (see `safe`); its xattrs read, and its bytes chunked and
//!   stored (see [`chunker`](super::chunker)), the previous version's chunks tried first;
//! - a big changed file in a workspace on XFS or btrfs is read through a reflink snapshot
//!   (see [`snapshot`](super::snapshot)), which tells the unchanged ranges without reading them;
//! - a file that changes while it is read is treated as [`OnChange`] says.
//!
//! Files are read biggest first; when nothing is left to start, idle threads make the objects
//! written so far durable (`ObjectBatch::sync_ahead`).

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

use super::snapshot::{self, Snapshots, SNAPSHOT_MIN};
use crate::error::{Error, Result};
use crate::fs::safe::{Dir, Stat};
use crate::meta::{ctime_ns, read_xattrs_file, special_file_error, stat_key};
use crate::store::object::ObjectBatch;
use crate::store::statcache::{Cached, StatKey};
use crate::store::tree::{Chunk, Entry, EntryKind};
use crate::store::ChunkerConfig;

/// How often a file that keeps changing is re-read before the capture fails.
const CHANGE_RETRIES: usize = 3;

/// A file found by the walk, to be read (or reused from the stat cache).
pub(crate) struct FileJob {
    /// The tree the walk found it in, held as a directory fd: the file is opened beneath it,
    /// never by `abs` (see `safe`).
    pub(crate) top: Arc<Dir>,
    /// Its path below `top`.
    pub(crate) rel: Vec<u8>,
    /// The walk's `lstat` of it: the open must find that same file.
    pub(crate) walked: Stat,
    /// Its full path, for messages only.
    pub(crate) abs: PathBuf,
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
    /// file a workspace copied up (see `ingest::upper`).
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
            nlink: 0,
        }
    }
}

/// Counters of the files read so far (the chunker adds bytes as it goes, and takes them back
/// when a file that changed is read again), mirrored into a terminal bar when there is one.
pub(crate) struct Progress {
    pub(crate) files: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Bytes read against the bytes to read (the files not reused from the stat cache), with
    /// the files done beside them; across every `read_files` call that shares it.
    pub(crate) bar: crate::progress::Progress,
}

impl Progress {
    /// Counters only, nothing drawn.
    pub(crate) fn new() -> Progress {
        Progress::with_bar(crate::progress::Progress::hidden())
    }

    /// Counters shown as `what` on a terminal (see `crate::progress`).
    pub(crate) fn shown(what: &str) -> Progress {
        Progress::with_bar(crate::progress::Progress::bytes(what, "files", None))
    }

    fn with_bar(bar: crate::progress::Progress) -> Progress {
        Progress {
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            bar,
        }
    }

    /// Copies the counters into the bar every 100 ms until `done()`.
    fn mirror(&self, done: impl Fn() -> bool) {
        while !done() {
            self.draw();
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn draw(&self) {
        self.bar.set_done(
            self.files.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        );
    }

    /// Draws the final counts and leaves the bar's last line.
    pub(crate) fn finish(&self) {
        self.draw();
        self.bar.finish();
    }
}

/// The stat cache entry of a file: reused whole when its stat key still matches, else its
/// chunks (and the snapshot holding their bytes) are the previous version to try first.
pub(crate) fn split_cached(
    entry: Option<Cached>,
    m: &impl MetadataExt,
) -> (Option<Cached>, Vec<Chunk>, Option<String>) {
    match entry {
        Some(c) if c.key == stat_key(m) => (Some(c), Vec::new(), None),
        Some(c) => (None, c.chunks, c.snapshot),
        None => (None, Vec::new(), None),
    }
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
    progress.bar.add_total(
        jobs.iter()
            .filter(|j| j.cached.is_none())
            .map(|j| j.size)
            .sum(),
    );
    std::thread::scope(|s| {
        if progress.bar.is_shown() {
            // Until every job was started and none is being read (or one failed).
            s.spawn(|| {
                progress.mirror(|| {
                    failed.load(Ordering::Relaxed)
                        || (next.load(Ordering::Relaxed) >= order.len()
                            && reading.load(Ordering::Relaxed) == 0)
                })
            });
        }
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
        // A write begun before this pass started can still be copying its bytes while they
        // are read, and it ends without changing the stat key (a write sets the times as it
        // starts). In the first pass of a checkpoint that then freezes the writers, a file a
        // process holds open for writing is left to the frozen pass, as one seen changing:
        // no read lease can be taken then (one taken is dropped at once; where leases are
        // not supported, every file counts as held).
        let writing = job.on_change == OnChange::Provisional && snapshot::Lease::take(&f).is_none();
        let key = stat_key(&before);
        let xattrs = read_xattrs_file(&f, &job.abs)?;
        let (chunks, total) = super::chunker::chunk_file(
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
        let provisional = (!stable || writing) && job.on_change == OnChange::Provisional;
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
        super::chunker::chunk_file(
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

/// Opens a job's file beneath its tree and stats it. A file replaced since the walk (another
/// inode at that name) is looked at again, up to `CHANGE_RETRIES` times; anything but a regular
/// file there fails, naming it.
fn open_regular(job: &FileJob) -> Result<(File, Metadata)> {
    let rel = Path::new(OsStr::from_bytes(&job.rel));
    let mut walked = job.walked;
    for _ in 0..CHANGE_RETRIES {
        let opened = job
            .top
            .open_walked(rel, &walked)
            .map_err(|e| crate::fs::safe::swapped_error(&job.abs, e))?;
        if let Some((f, _)) = opened {
            let m = f.metadata().map_err(|e| Error::io(&job.abs, e))?;
            return Ok((f, m));
        }
        log::debug!(
            "{} was replaced since the walk; looking again",
            job.abs.display()
        );
        match job
            .top
            .stat(rel)
            .map_err(|e| crate::fs::safe::swapped_error(&job.abs, e))?
        {
            Some(st) if st.is_file() => walked = st,
            Some(st) => return Err(special_file_error(&job.abs, &st)),
            None => {
                return Err(Error::NotFound(format!(
                    "{} (removed while being captured)",
                    job.abs.display()
                )))
            }
        }
    }
    Err(Error::Invalid(format!(
        "{} kept being replaced while being captured ({CHANGE_RETRIES} attempts); quiesce the writer and retry",
        job.abs.display()
    )))
}
