//! View daemons: the process that serves one read-only FUSE mount (a checkpoint root or the
//! browse namespace), and the calls that start, find and stop them.
//!
//! Lifecycle of a daemon ([`serve`]):
//! 1. block SIGTERM/SIGINT/SIGHUP (a dedicated thread waits for them);
//! 2. register a pin (`run/pins/`) so gc never removes what the mount can reach;
//! 3. mount with `auto_unmount` (fusermount3 stays behind and unmounts even after SIGKILL),
//!    `fsname=ckptfs:<store>:<what>` so `status`, `umount` and mount(8) can find it, private
//!    to root unless `allow_other` (who can see what: [`crate::view::fuse`]);
//! 4. raise the mount's readahead, write `run/views/<pid>.json`, report "ready";
//! 5. serve until unmounted (by a signal, `ckptfs umount`, or umount(8)); remove the state file.
//!
//! Lifetime: a daemon ends when its mount goes. A mount-watch thread sets the view's stop
//! flag as soon as the mount leaves the mount table (unmounted, or detached lazily while
//! still held), which ends the lower view's warm-ups (`view::lower::warm`), the one thing of its own
//! that could keep a detached mount alive. SIGTERM (SIGINT, SIGHUP) stops them too and
//! unmounts the daemon's own mount (never another mounted at the same place since); should
//! the session still run [`EXIT_WAIT`] later, the daemon aborts its own FUSE connection
//! ([`abort_connection`]) and exits. [`stop`] (`ckptfs umount` of a view) and the
//! workspaces' `umount` wait for the daemon to exit, and after [`EXIT_WAIT`] report it by pid
//! and abort its connection ([`wait_exit`]).
//!
//! [`start`] runs the `ckptfs` binary as such a daemon in the background and returns only once
//! the mount is ready (or with the daemon's error). [`start_browse`] and [`stop`] are the
//! library API used by live workspaces, whose overlay lower layer is
//! `<browse mount>/checkpoints/<id>/<root>`.
//!
//! Here: what a mount is called and the checks before one; `serve` (the daemon), `start`
//! (starting and stopping daemons) and `records` (the state files of running daemons).

use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::lock::pid_alive;
use crate::store::pin::Pin;
use crate::store::{absolute, Store};
use crate::text::time::now_ns;
use crate::view::fuse::MountConfig;
use crate::view::{Namespace, View, ViewOptions};

/// Filesystem type of our mounts in /proc/self/mountinfo.
pub const FSTYPE: &str = crate::store::trust::FUSE_TYPE;
/// Readahead given to each mount (KiB): with the FUSE default of 128 KiB, cold reads of large
/// files run at about a third of the speed they reach with 1 MiB.
const READ_AHEAD_KB: u32 = 1024;
/// FUSE worker threads of a daemon.
const THREADS: usize = 4;
/// How long a daemon may take to exit once its mount is gone or it got SIGTERM, before its
/// FUSE connection is aborted (a warm-up notices the stop flag within one directory).
pub const EXIT_WAIT: Duration = Duration::from_secs(10);
/// Where the kernel's fusectl filesystem lists FUSE connections, by device minor.
const FUSECTL: &str = "/sys/fs/fuse/connections";
/// How often a daemon looks whether its mount is still in the mount table.
const MOUNT_WATCH: Duration = Duration::from_millis(250);

/// `run/views/<pid>.json`: what a live daemon serves.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountState {
    pub pid: u32,
    pub mountpoint: PathBuf,
    pub fsname: String,
    /// "checkpoint" or "browse".
    pub kind: String,
    pub checkpoint: Option<ObjectId>,
    pub root: Option<String>,
    pub started: String,
}

/// One live mount of a store, as `status` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountStatus {
    pub mountpoint: PathBuf,
    pub source: String,
    /// The daemon's state file; `None` for a mount without one (e.g. served in-process).
    pub state: Option<MountState>,
}

pub use crate::fs::mountinfo::{mount_at, mounts, parse_mountinfo, MountEntry};

mod serve;
pub use serve::*;

mod start;
pub use start::*;

mod records;
pub use records::*;

/// `fsname` of a view: `ckptfs:<store>:<checkpoint id>:<root>` or `ckptfs:<store>:browse`.
pub fn fsname(store: &Store, ns: &Namespace) -> String {
    let what = match ns {
        Namespace::Checkpoint { id, root } => format!("{id}:{root}"),
        Namespace::Browse => "browse".into(),
    };
    format!("ckptfs:{}:{what}", store.root().display())
}

/// Checks a source given by mount(8) (`mount.ckptfs`): `STORE#WHAT` naming this store, and
/// nothing a mount option list cannot carry. Mounts made by ckptfs itself are named by
/// [`fsname`]; one made from an fstab line keeps that line's source, which is how mount(8)
/// (`mount -a`, findmnt, umount SOURCE) recognises it, and [`source_names_store`] and
/// [`store_of_source`] read both forms.
///
/// # Errors
/// `Usage` naming the problem.
pub fn check_mount_source(store: &Store, source: &str) -> Result<()> {
    if source.contains(',') || source.chars().any(char::is_control) {
        return Err(Error::Usage(format!(
            "mount source {source:?} contains a ',' or a control character, which mount options cannot carry"
        )));
    }
    match store_of_source(source) {
        Some(p) if !source.starts_with("ckptfs:") && absolute(&p)? == store.root() => Ok(()),
        _ => Err(Error::Usage(format!(
            "mount source {source:?} must be {}#CHECKPOINT[:ROOT] or {}#browse",
            store.root().display(),
            store.root().display()
        ))),
    }
}

/// Whether a mount's source names `store`: `ckptfs:<store>[:...]` ([`fsname`], and
/// workspaces' overlays), or `<store>#<what>` as fstab gives it ([`check_mount_source`]).
pub fn source_names_store(source: &str, store: &Store) -> bool {
    let named = format!("ckptfs:{}", store.root().display());
    if source == named || source.starts_with(&format!("{named}:")) {
        return true;
    }
    !source.starts_with("ckptfs:")
        && store_of_source(source)
            .and_then(|p| absolute(&p).ok())
            .is_some_and(|p| p == store.root())
}

/// Checks that FUSE can be used here: /dev/fuse and fusermount3 (for auto-unmount).
///
/// # Errors
/// `Invalid` with a one-line fix.
pub fn check_fuse() -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        return Err(Error::Invalid(
            "FUSE is not available: /dev/fuse is missing (load the fuse module, or run the container with --device /dev/fuse)".into(),
        ));
    }
    // Debian's fuse3 udev rule makes it 0666; a container or a bare system may leave it 0600.
    if nix::unistd::access(
        "/dev/fuse",
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .is_err()
    {
        return Err(Error::Invalid(
            "FUSE is not open to this user: /dev/fuse is not readable and writable (as root: \
             `chmod 0666 /dev/fuse`, which Debian's fuse3 udev rule does at boot)"
                .into(),
        ));
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false)
        || ["/usr/bin/fusermount3", "/bin/fusermount3"]
            .iter()
            .any(|p| Path::new(p).is_file());
    if !found {
        return Err(Error::Invalid(
            "fusermount3 not found: install fuse3 (apt-get install fuse3)".into(),
        ));
    }
    Ok(())
}

/// Checks a mountpoint and returns its absolute path: an existing directory, not already a
/// mount point, and not inside the store unless under `STORE/run/` (where workspaces mount
/// their lower layer).
///
/// # Errors
/// `Usage`/`Conflict`/`NotFound` with one line naming the problem.
pub fn check_mountpoint(store: &Store, mountpoint: &Path) -> Result<PathBuf> {
    let mp = absolute(mountpoint)?;
    let s = mp.to_string_lossy();
    if s.contains(',') {
        return Err(Error::Usage(format!(
            "mountpoint {s} contains ',' which mount options cannot carry"
        )));
    }
    if mp.starts_with(store.root()) && !mp.starts_with(store.run_dir()) {
        return Err(Error::Usage(format!(
            "mountpoint {} is inside the store {}; mount somewhere else",
            mp.display(),
            store.root().display()
        )));
    }
    match fs::metadata(&mp) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::Usage(format!(
                "mountpoint {} is not a directory",
                mp.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NotFound(format!("mountpoint {}", mp.display())))
        }
        Err(e) => return Err(Error::io(&mp, e)),
    }
    if let Some(m) = mount_at(&mp)? {
        return Err(Error::Conflict(format!(
            "mountpoint {} is busy: {} ({}) is already mounted there",
            mp.display(),
            m.source,
            m.fstype
        )));
    }
    Ok(mp)
}

/// Options of [`serve`].
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    pub view: ViewOptions,
    /// Open the mount to every local user (`--allow-other`); by default only root gets in.
    pub allow_other: bool,
    /// Report "ready"/"error ..." on stdout for a parent waiting in [`start`], then detach
    /// stdout, and send stderr (the log) to `run/views/<pid>.log`.
    pub notify_stdout: bool,
    /// The mount's source as mount(8) was given it (`STORE#WHAT`, from fstab or `mount -t
    /// fuse.ckptfs`), recorded instead of [`fsname`] so that `mount -a` sees the fstab line
    /// as mounted. See [`check_mount_source`].
    pub source: Option<String>,
}

/// Options of [`start`].
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// The `ckptfs` binary to run; default: this executable (`CKPTFS_EXE` overrides).
    pub exe: Option<PathBuf>,
    pub cache_bytes: Option<u64>,
    /// Disk budget of materialized files (`--file-cache-size`); None = the default.
    pub file_cache_bytes: Option<u64>,
    /// Open the mount to every local user (`--allow-other`).
    pub allow_other: bool,
    /// How long to wait for the mount to be ready.
    pub timeout: Duration,
    /// The source mount(8) was given (see [`ServeOptions::source`]).
    pub source: Option<String>,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            exe: None,
            cache_bytes: None,
            file_cache_bytes: None,
            allow_other: false,
            timeout: Duration::from_secs(30),
            source: None,
        }
    }
}

/// The store path named by a mount source: `ckptfs:<store>:<what>` ([`fsname`]) or
/// `<store>#<what>` (fstab's, see [`check_mount_source`]; the store ends at the first `#`, as
/// `mount.ckptfs` splits it).
pub fn store_of_source(source: &str) -> Option<PathBuf> {
    let Some(rest) = source.strip_prefix("ckptfs:") else {
        let (store, what) = source.split_once('#')?;
        return (store.starts_with('/') && !what.is_empty()).then(|| PathBuf::from(store));
    };
    let (store, _) = rest.rsplit_once(':').map(|(a, b)| {
        // `<id>:<root>` has two colons after the store; `browse` has one.
        if b.is_empty() {
            (a, b)
        } else {
            match a.rsplit_once(':') {
                Some((s, id)) if id.len() == 64 => (s, b),
                _ => (a, b),
            }
        }
    })?;
    Some(PathBuf::from(store))
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo() {
        let text =
            "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse.ckptfs ckptfs:/s:browse ro\n\
                    37 35 0:5 / /proc rw - proc proc rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, FSTYPE);
        assert_eq!(m[0].source, "ckptfs:/s:browse");
        assert_eq!(m[0].dev, "98:0");
    }

    #[test]
    fn store_from_source() {
        let id = "a".repeat(64);
        assert_eq!(
            store_of_source(&format!("ckptfs:/x/store:{id}:work")),
            Some(PathBuf::from("/x/store"))
        );
        assert_eq!(
            store_of_source("ckptfs:/x/store:browse"),
            Some(PathBuf::from("/x/store"))
        );
        assert_eq!(store_of_source("other"), None);
        // fstab's form, as mount.ckptfs passes it on.
        assert_eq!(
            store_of_source("/x/store#before:work"),
            Some(PathBuf::from("/x/store"))
        );
        assert_eq!(
            store_of_source("/x/store#browse"),
            Some(PathBuf::from("/x/store"))
        );
        assert_eq!(store_of_source("/x/store#"), None);
        assert_eq!(store_of_source("relative#browse"), None);
    }
}
