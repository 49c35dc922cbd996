//! Warming the workspaces' lower view: when the kernel first looks up a checkpoint root
//! (`checkpoints/<id>/<root>`, what an overlay is about to stack on), or gets its entry from
//! a listing of `checkpoints/<id>`, two threads of the view daemon list every directory
//! below it through the mount, in the background.
//!
//! Why: a workspace's first `git status` after a mount, a fold or a switch to another
//! checkpoint `lstat`s every tracked file before it lists any directory, and on a fresh lower
//! view each of those costs one FUSE LOOKUP round trip (100k of them in a 100k-file
//! repository: seconds on two cores). A listing is answered with READDIRPLUS (names and
//! attributes, long TTLs), from which the kernel makes the dentries and inodes of every entry
//! at once: one round trip per directory instead of one per file. The lookups overlayfs then
//! does in the lower layer are served from the kernel's caches, as on a local filesystem.
//!
//! What it costs: the daemon's CPU for one READDIRPLUS per directory (about a second for
//! 8k directories and 100k files on the 2-core bench machine, while the workspace is already
//! usable), and the kernel's memory for the entries' dentries and inodes, which a full walk
//! (`git status`, `find -ls`) would make anyway and which the kernel reclaims under memory
//! pressure like any other cache. Bounded: a walk stops after [`MAX_ENTRIES`] entries,
//! [`MAX_DEPTH`] levels or [`MAX_DURATION`], and each root is warmed once per daemon. A walk
//! holds directories of its own mount open, so while it runs the kernel keeps the mount
//! alive even once detached: the daemon sets the stop flag as soon as its mount leaves the
//! mount table (unmounted or detached) or it gets SIGTERM (`daemon::serve`), the walk ends at
//! its next directory, and the daemon exits. Only the
//! workspaces' lower view warms (a `browse` or `mount` view is walked by whoever reads it).
//!
//! Names looked up where they are absent: a `git status` reads `.gitignore` in every
//! directory holding a subdirectory (it checks each directory it meets against the ignore
//! rules of the directories above it; 2,284 of the 8,321 in the 100k-file benchmark
//! repository, which has no `.gitignore` at all), and a listing gives the kernel no negative
//! entries: each was a LOOKUP round trip, answered "absent" (cached from then on). So after
//! listing a directory with subdirectories the walk also looks up each name of [`PROBED`]
//! in it: the kernel then holds a negative entry where the name is absent, and a `git
//! status` right after the warm-up sends the daemon no LOOKUP at all (`tests/view_warm.rs`).
//! One more round trip per such directory, in the background (a probe in every directory
//! would be 3.6 times as many here, for the rarer `.gitignore` lookups git makes in a leaf
//! directory holding an untracked file).
//!
//! Whoever waits for a warm-up (`mount --branch`, `workspace::lower::wait_warm`) reads the
//! daemon's record of them ([`Warmer::recording`]): a line when a walk starts, written before
//! the lookup that started it is answered, and one when it ends (complete or not).
//!
//! The walk opens nothing but directories of this daemon's own read-only mount, through
//! [`crate::fs::safe::Dir`] (no symlink followed, non-blocking opens), so no agent can steer it.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::fs::safe::Dir;
use crate::view::lock;

/// Entries one warm-up lists at most (its directories' entries counted): about 1 KiB of
/// kernel memory each.
pub const MAX_ENTRIES: usize = 1_000_000;

/// Directory levels below a root one warm-up lists at most: deeper directories are left to
/// be looked up when used. The walk is iterative (a queue), so depth costs no stack, but the
/// kernel's work per open grows with it and nothing real nests this deep; an agent's chain
/// of 100,000 directories is cut here.
pub const MAX_DEPTH: usize = 256;

/// How long one warm-up runs at most: about a second per 100k entries on the 2-core bench
/// machine, so only a tree far bigger than [`MAX_ENTRIES`] worth of real work, or a daemon
/// starved of CPU, meets it. A warm-up is an optimisation; the daemon must never be busy
/// with one for minutes.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(60);

/// Threads listing directories for one warm-up: the daemon's two cores' worth; its worker
/// threads answer them.
const THREADS: usize = 2;

/// Names tools look up in every directory whether it has one or not (see the module doc): a
/// warm-up looks each up after listing a directory, so the kernel keeps a negative entry.
pub const PROBED: &[&str] = &[".gitignore"];

/// The warm-ups one daemon started, the flag that stops them (shared with the daemon, which
/// sets it when its mount is unmounted or detached, or on SIGTERM: [`Warmer::stop_flag`]),
/// and the file that records the finished ones.
#[derive(Debug, Default)]
pub struct Warmer {
    started: Mutex<HashSet<u64>>,
    stop: Arc<AtomicBool>,
    record: Option<Arc<Record>>,
}

/// The record of warm-ups: an append-only file, a line `started <root>` when a walk starts
/// (written before the kernel gets the root's entry) and `done <root>` when it ends, the
/// root's path below the mount; read by [`state`].
#[derive(Debug)]
struct Record {
    path: PathBuf,
    lock: Mutex<()>,
}

impl Record {
    fn append(&self, what: &str, rel: &Path) {
        let mut line = format!("{what} ").into_bytes();
        line.extend_from_slice(rel.as_os_str().as_bytes());
        line.push(b'\n');
        let _one = lock(&self.lock);
        let done = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(&line));
        if let Err(e) = done {
            log::warn!("recording a warm-up in {}: {e}", self.path.display());
        }
    }
}

/// Where a warm-up of one root stands, by a daemon's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarmState {
    /// None started (the root was never looked up nor listed in this daemon, or its
    /// warm-up could not start): there is nothing to wait for.
    NotStarted,
    Running,
    Done,
}

/// The state of the warm-up of `rel` (a checkpoint root's path below the daemon's mount) in
/// the record at `record` (a daemon's, see [`Warmer::recording`]). `None` when there is no
/// record: a daemon that keeps none (an older build), or gone.
pub fn state(record: &Path, rel: &Path) -> Option<WarmState> {
    let text = std::fs::read(record).ok()?;
    let want = rel.as_os_str().as_bytes();
    let mut st = WarmState::NotStarted;
    for l in text.split(|&b| b == b'\n') {
        if l.strip_prefix(b"done ") == Some(want) {
            return Some(WarmState::Done);
        }
        if l.strip_prefix(b"started ") == Some(want) {
            st = WarmState::Running;
        }
    }
    Some(st)
}

impl Warmer {
    /// A warmer that records each finished warm-up in the file `path`, which it creates
    /// (empty) now: its presence tells a reader that this daemon keeps the record.
    ///
    /// # Errors
    /// Creating the file.
    pub fn recording(path: PathBuf) -> std::io::Result<Warmer> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        Ok(Warmer {
            record: Some(Arc::new(Record {
                path,
                lock: Mutex::new(()),
            })),
            ..Warmer::default()
        })
    }

    /// Starts warming the checkpoint root with node id `ino`, at `rel` below this daemon's
    /// mount `mountpoint`, unless it was warmed already. Call before replying to the lookup:
    /// the record says `started` before the looker-up has its answer.
    pub fn root_looked_up(&self, ino: u64, mountpoint: &Path, rel: PathBuf) {
        if !lock(&self.started).insert(ino) {
            return;
        }
        if let Some(rec) = &self.record {
            rec.append("started", &rel);
        }
        let stop = Arc::clone(&self.stop);
        let record = self.record.clone();
        let path = mountpoint.join(&rel);
        let shown = path.display().to_string();
        let rel_kept = rel.clone();
        let spawned = std::thread::Builder::new()
            .name("warm".into())
            .spawn(move || {
                let t0 = Instant::now();
                let r = walk(&path, &stop, &Limits::default());
                if let Some(rec) = &record {
                    rec.append("done", &rel);
                }
                match r {
                    Ok(w) => log::info!(
                        "warmed {}: {} directories, {} entries listed in {} ms{}",
                        path.display(),
                        w.dirs,
                        w.entries,
                        t0.elapsed().as_millis(),
                        if w.complete { "" } else { " (stopped early)" }
                    ),
                    Err(e) => log::warn!("warming {}: {e}", path.display()),
                }
            });
        if let Err(e) = spawned {
            log::warn!("warming {shown}: {e}");
            // Nothing to wait for.
            if let Some(rec) = &self.record {
                rec.append("done", &rel_kept);
            }
        }
    }

    /// Stops the warm-ups under way (the daemon is unmounting).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Makes `flag` this warmer's stop flag: setting it stops every warm-up, under way or to
    /// come (the daemon's signal and mount-watch threads hold it).
    pub fn set_stop_flag(&mut self, flag: Arc<AtomicBool>) {
        self.stop = flag;
    }
}

/// What a walk listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    pub dirs: usize,
    pub entries: usize,
    /// Entries looked up one by one (with [`Limits::stat_entries`]; 0 otherwise).
    pub looked_up: usize,
    /// False when it stopped before the end (the limit, the stop flag, or errors).
    pub complete: bool,
}

/// Bounds of one walk: entries listed, directory levels below the top, and time; and
/// whether each entry is looked up too (`lstat`), not only listed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub entries: usize,
    pub depth: usize,
    pub duration: std::time::Duration,
    /// Look every entry up after listing its directory: what makes an overlayfs build its
    /// dentries and inodes (its listings make none; `workspace::warm`). A FUSE view makes
    /// them from READDIRPLUS, so its warm-up only lists.
    pub stat_entries: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: MAX_ENTRIES,
            depth: MAX_DEPTH,
            duration: MAX_DURATION,
            stat_entries: false,
        }
    }
}

/// The directories waiting to be listed (each with its depth below the top), and how many
/// threads are listing one.
struct Queue {
    pending: Vec<(Arc<Dir>, OsString, usize)>,
    busy: usize,
}

/// Lists every directory below `top` (and `top`) with [`THREADS`] threads, within `limits`
/// (entries, depth, time), until `stop` is set. A directory that fails to open or list is
/// logged and skipped.
///
/// # Errors
/// Opening `top`.
pub fn walk(top: &Path, stop: &AtomicBool, limits: &Limits) -> crate::error::Result<Walked> {
    Ok(walk_dir(Dir::open(top)?, stop, limits))
}

/// [`walk`] below the held directory `root`.
pub fn walk_dir(root: Dir, stop: &AtomicBool, limits: &Limits) -> Walked {
    let deadline = Instant::now() + limits.duration;
    let limit = limits.entries;
    let tally = Tally {
        entries: AtomicUsize::new(0),
        looked_up: AtomicUsize::new(0),
        incomplete: AtomicBool::new(false),
        stop,
    };
    let dirs = AtomicUsize::new(1);
    let queue = Mutex::new(Queue {
        pending: Vec::new(),
        busy: 0,
    });
    let ready = Condvar::new();
    list(Arc::new(root), 0, limits, &queue, &tally);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| loop {
                let next = {
                    let mut q = lock(&queue);
                    loop {
                        if stop.load(Ordering::Relaxed)
                            || tally.entries.load(Ordering::Relaxed) >= limit
                            || Instant::now() >= deadline
                        {
                            if !q.pending.is_empty() {
                                tally.incomplete.store(true, Ordering::Relaxed);
                            }
                            q.pending.clear();
                        }
                        if let Some(item) = q.pending.pop() {
                            q.busy += 1;
                            break Some(item);
                        }
                        if q.busy == 0 {
                            break None;
                        }
                        q = ready
                            .wait(q)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                };
                let Some((parent, name, depth)) = next else {
                    ready.notify_all();
                    return;
                };
                match parent.open_dir(&name) {
                    Ok(d) => {
                        drop(parent);
                        dirs.fetch_add(1, Ordering::Relaxed);
                        list(Arc::new(d), depth, limits, &queue, &tally);
                    }
                    Err(e) => {
                        log::debug!("warming: {e}");
                        tally.incomplete.store(true, Ordering::Relaxed);
                    }
                }
                lock(&queue).busy -= 1;
                ready.notify_all();
            });
        }
    });
    let entries = tally.entries.into_inner();
    let complete =
        !tally.incomplete.into_inner() && !stop.load(Ordering::Relaxed) && entries < limit;
    Walked {
        dirs: dirs.into_inner(),
        entries,
        looked_up: tally.looked_up.into_inner(),
        complete,
    }
}

/// What the threads of one walk count together, and the flag that stops it.
struct Tally<'a> {
    entries: AtomicUsize,
    looked_up: AtomicUsize,
    incomplete: AtomicBool,
    stop: &'a AtomicBool,
}

/// A directory's subdirectories, its entries, and how many of them were looked up.
type Listed = (Vec<OsString>, usize, usize);

/// The subdirectories of `dir` and how many entries it has: by the listing's types, or with
/// `stat_entries` by looking each entry up (never followed).
fn subdirs(dir: &Dir, stat_entries: bool, stop: &AtomicBool) -> crate::error::Result<Listed> {
    if !stat_entries {
        let (subdirs, all) = dir.subdirs()?;
        return Ok((subdirs, all, 0));
    }
    let names = dir.entries()?;
    let all = names.len();
    let mut subdirs = Vec::new();
    let mut looked_up = 0;
    for (i, name) in names.into_iter().enumerate() {
        // A directory of 200k entries takes seconds to look up: a stop does not wait for it.
        if i % 256 == 255 && stop.load(Ordering::Relaxed) {
            return Err(crate::error::Error::Invalid(format!(
                "{}: stopped",
                dir.path().display()
            )));
        }
        match dir.stat(&name) {
            Ok(Some(st)) => {
                looked_up += 1;
                if st.is_dir() {
                    subdirs.push(name);
                }
            }
            Ok(None) => {}
            Err(e) => log::debug!("warming: {e}"),
        }
    }
    Ok((subdirs, all, looked_up))
}

/// Lists `dir` (the READDIRPLUS that makes its entries' dentries; with
/// `limits.stat_entries` each entry looked up too), looks up the names of [`PROBED`] in it
/// (a negative entry where absent), and queues its subdirectories, unless `dir` is
/// `limits.depth` levels below the top already.
fn list(dir: Arc<Dir>, depth: usize, limits: &Limits, queue: &Mutex<Queue>, tally: &Tally<'_>) {
    let max_depth = limits.depth;
    let incomplete = &tally.incomplete;
    match subdirs(&dir, limits.stat_entries, tally.stop) {
        Ok((subdirs, all, looked_up)) => {
            tally.entries.fetch_add(all, Ordering::Relaxed);
            tally.looked_up.fetch_add(looked_up, Ordering::Relaxed);
            // Where git looks (see PROBED): not in a directory without subdirectories.
            if !subdirs.is_empty() {
                for name in PROBED {
                    if let Err(e) = dir.stat(name) {
                        log::debug!("warming: {e}");
                    }
                }
            }
            if depth >= max_depth && !subdirs.is_empty() {
                log::debug!(
                    "warming: not below {} ({depth} levels)",
                    dir.path().display()
                );
                incomplete.store(true, Ordering::Relaxed);
                return;
            }
            let mut q = lock(queue);
            q.pending.extend(
                subdirs
                    .into_iter()
                    .map(|n| (Arc::clone(&dir), n, depth + 1)),
            );
        }
        Err(e) => {
            log::debug!("warming: {e}");
            incomplete.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_stops_at_its_depth_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let mut p = tmp.path().to_path_buf();
        for _ in 0..50 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let stop = AtomicBool::new(false);
        let limits = Limits {
            depth: 10,
            ..Limits::default()
        };
        let w = walk(tmp.path(), &stop, &limits).unwrap();
        assert_eq!(w.dirs, 11, "{w:?}");
        assert!(!w.complete);
        let w = walk(tmp.path(), &stop, &Limits::default()).unwrap();
        assert_eq!(w.dirs, 51, "{w:?}");
        assert!(w.complete);
        stop.store(true, Ordering::Relaxed);
        let w = walk(tmp.path(), &stop, &Limits::default()).unwrap();
        assert!(!w.complete, "{w:?}");
    }

    #[test]
    fn a_walk_that_looks_entries_up_follows_no_symlink_and_stops_inside_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        let top = tmp.path().join("top");
        std::fs::create_dir_all(top.join("a")).unwrap();
        for i in 0..1000 {
            std::fs::write(top.join(format!("a/f{i}")), b"").unwrap();
        }
        std::os::unix::fs::symlink(&outside, top.join("link")).unwrap();
        let looking = Limits {
            stat_entries: true,
            ..Limits::default()
        };
        let stop = AtomicBool::new(false);
        let w = walk(&top, &stop, &looking).unwrap();
        // top: a, link; a: 1000 files. The link is looked up, never entered.
        assert_eq!((w.dirs, w.entries, w.looked_up), (2, 1002, 1002), "{w:?}");
        assert!(w.complete);
        let w = walk(&top, &stop, &Limits::default()).unwrap();
        assert_eq!((w.dirs, w.entries, w.looked_up), (2, 1002, 0), "{w:?}");
        // A stop is seen within a directory's lookups, not only between directories.
        let stop = AtomicBool::new(true);
        let w = walk_dir(Dir::open(&top.join("a")).unwrap(), &stop, &looking);
        assert!(w.looked_up < 1000 && !w.complete, "{w:?}");
    }
}
