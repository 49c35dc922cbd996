//! Warming a workspace's overlay after a fold, in the background.
//!
//! Why: a fold mounts a new overlay over the new head, and overlayfs builds a dentry and an
//! inode for each entry the first time it is looked up in a new mount, whatever the layers
//! below have cached. The agent's first `git status` after a checkpoint that folded
//! `lstat`s every tracked file and paid for all of them: 2.5x native on a 20k-file
//! repository where the second status, on the same mount, is 1.3x (docs/benchmarks.md). So
//! once a fold has mounted the new overlays, a child process (`ckptfs internal-warm`, at the
//! lowest CPU priority) walks them, looking every entry up, with the lower view's walker
//! (`view::lower::warm`, same bounds: entries, depth, time), and the agent's next turn finds
//! the overlay's caches built.
//!
//! It never holds the workspace itself. It walks a detached copy of each overlay's mount
//! (`open_tree(OPEN_TREE_CLONE)`, [`Dir::clone_mount`]): the same superblock and caches, but
//! the mount at the workspace's path gains no user, so the next fold's check that nobody is
//! inside (`umount2(MNT_EXPIRE)`) and the scans for holders do not see it. What the copy does
//! keep alive is the overlay's superblock, and with it its upper layer: overlayfs refuses to
//! mount an upper layer another overlay still uses. So whatever mounts or unmounts an overlay
//! of this store first stops every warm-up ([`stop`]): a warm-up holds `run/warm.lock`
//! shared from before it is spawned (the fold takes it and the child inherits it) until it
//! has closed its copy; [`stop`] creates `run/warm.stop`, which each warm-up checks every few
//! milliseconds, and takes the lock exclusively, which it gets once they are all gone.
//!
//! The walk opens nothing but directories, through [`Dir`] (no symlink followed, non-blocking
//! opens), and looks entries up without following them: a FIFO, a symlink to a root-only
//! file or a chain of 100,000 directories in the agent's tree cannot steer it, block it or
//! keep it running past its bounds. `run/warm.json` records what the last warm-up walked.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::FlockOperation;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::store::Store;
use crate::view::lower::warm::{walk_dir, Limits};

/// `statfs`'s `f_type` of overlayfs: what a warm-up walks, nothing else.
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;

/// The descriptor number a warm-up gets the held lock as.
const LOCK_FD: i32 = 3;

/// How long [`stop`] waits for the warm-ups to end: each sees the stop file within
/// [`STOP_POLL`] and its walk stops within 256 lookups, so only a lookup stuck in the layers
/// below could take longer.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// How often a warm-up looks for the stop file.
const STOP_POLL: Duration = Duration::from_millis(5);

/// What one warm-up walked, per overlay (`run/warm.json`).
#[derive(Debug, Clone, Serialize)]
pub struct WarmRecord {
    /// When it ended (ns since the epoch).
    pub finished_ns: i64,
    pub overlays: Vec<WarmedOverlay>,
}

/// One overlay of a [`WarmRecord`].
#[derive(Debug, Clone, Serialize)]
pub struct WarmedOverlay {
    pub mountpoint: PathBuf,
    pub dirs: usize,
    /// Entries listed.
    pub entries: usize,
    /// Entries looked up (what builds the overlay's inodes).
    pub looked_up: usize,
    /// False when it stopped early (asked to, or a bound), or could not start (`error`).
    pub complete: bool,
    pub millis: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn open_lock(store: &Store) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(store.warm_lock_path())
}

/// Starts warming the overlays at `mountpoints` (just mounted by a fold) in the background.
/// Not started while a [`stop`] is under way; a failure is logged, never returned: the
/// warm-up only saves the agent time.
pub(super) fn spawn(store: &Store, mountpoints: &[PathBuf]) {
    if let Err(e) = try_spawn(store, mountpoints) {
        log::info!("not warming the new overlays: {e}");
    }
}

fn try_spawn(store: &Store, mountpoints: &[PathBuf]) -> std::io::Result<()> {
    let lock = open_lock(store)?;
    rustix::fs::flock(&lock, FlockOperation::NonBlockingLockShared)?;
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let mut cmd = std::process::Command::new(exe);
    cmd.current_dir("/")
        .arg("internal-warm")
        .arg(store.root())
        .args(mountpoints)
        // The crash tests' faults are the fold's steps, not its warm-up's.
        .env_remove("CKPTFS_FAULT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    crate::fs::sys::spawn_with_fd(&mut cmd, lock.as_fd(), LOCK_FD)?;
    // Closing this descriptor keeps the lock: the child's shares its open file.
    Ok(())
}

/// Stops every warm-up of `store` under way and waits until they have let their overlays go
/// (at most [`STOP_WAIT`], then goes on with a warning). Call before mounting an overlay or
/// unmounting one. Costs one `open` and one `flock` when none runs.
pub(super) fn stop(store: &Store) {
    let Ok(lock) = File::open(store.warm_lock_path()) else {
        return; // none was ever started
    };
    if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_ok() {
        return;
    }
    let stop_path = store.warm_stop_path();
    if let Err(e) = File::create(&stop_path) {
        log::warn!(
            "asking the overlay warm-ups to stop: {}: {e}",
            stop_path.display()
        );
    }
    let deadline = Instant::now() + STOP_WAIT;
    loop {
        if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_ok() {
            break;
        }
        if Instant::now() >= deadline {
            log::warn!(
                "an overlay warm-up did not stop within {} s; going on",
                STOP_WAIT.as_secs()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ignored = std::fs::remove_file(&stop_path);
}

/// `ckptfs internal-warm STORE MOUNTPOINT...`: the warm-up itself, in the child [`spawn`]
/// started, holding the lock it was given as descriptor [`LOCK_FD`].
///
/// # Errors
/// Not started by a fold (no lock descriptor, or not the store's lock file).
pub fn run(store: &Path, mountpoints: &[PathBuf]) -> Result<i32> {
    let store = Store::open(store)?;
    let lock_path = store.warm_lock_path();
    let lock = crate::fs::sys::inherited_fd(LOCK_FD)
        .map(File::from)
        .ok_or_else(|| Error::Usage("internal-warm is started by a fold only".into()))?;
    let (held, named) = (
        lock.metadata().map_err(|e| Error::io(&lock_path, e))?,
        std::fs::metadata(&lock_path).map_err(|e| Error::io(&lock_path, e))?,
    );
    if (held.dev(), held.ino()) != (named.dev(), named.ino()) {
        return Err(Error::Usage(
            "internal-warm is started by a fold only (descriptor 3 is not the store's warm lock)"
                .into(),
        ));
    }
    if let Err(e) = rustix::process::setpriority_process(None, 19) {
        log::debug!("lowering the warm-up's priority: {e}");
    }
    let stop_path = store.warm_stop_path();
    let stop = AtomicBool::new(stop_path.exists());
    let done = AtomicBool::new(false);
    let overlays = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                if stop_path.exists() {
                    stop.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(STOP_POLL);
            }
        });
        let out = mountpoints
            .iter()
            .map(|mp| warm_one(mp, &stop))
            .collect::<Vec<_>>();
        done.store(true, Ordering::Relaxed);
        out
    });
    let record = WarmRecord {
        finished_ns: crate::text::time::now_ns(),
        overlays,
    };
    match serde_json::to_vec_pretty(&record) {
        Ok(data) => {
            if let Err(e) = crate::fs::atomic::write_atomic_replace_volatile(
                &store.warm_record_path(),
                &data,
                0o600,
            ) {
                log::warn!("{e}");
            }
        }
        Err(e) => log::warn!("recording the warm-up: {e}"),
    }
    drop(lock);
    Ok(0)
}

/// Walks the overlay mounted at `mp` through a detached copy of its mount (dropped, and the
/// copy with it, before this returns).
fn warm_one(mp: &Path, stop: &AtomicBool) -> WarmedOverlay {
    let t0 = Instant::now();
    let limits = Limits {
        stat_entries: true,
        ..Limits::default()
    };
    let (walked, error) = match Dir::clone_mount(mp, OVERLAYFS_MAGIC) {
        Ok(top) => {
            hold_for_tests(stop);
            (Some(walk_dir(top, stop, &limits)), None)
        }
        Err(e) => (None, Some(e.to_string())),
    };
    WarmedOverlay {
        mountpoint: mp.to_path_buf(),
        dirs: walked.map_or(0, |w| w.dirs),
        entries: walked.map_or(0, |w| w.entries),
        looked_up: walked.map_or(0, |w| w.looked_up),
        complete: walked.is_some_and(|w| w.complete),
        millis: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
        error,
    }
}

/// With `CKPTFS_TEST_WARM_HOLD_MS=N` in the environment, a warm-up holds its copy of the
/// overlay up to N ms before it walks, or until asked to stop: the tests' way of having one
/// under way while they mount, fold and unmount (a real one lasts a fraction of a second).
fn hold_for_tests(stop: &AtomicBool) {
    let Some(ms) = std::env::var("CKPTFS_TEST_WARM_HOLD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(STOP_POLL);
    }
}
