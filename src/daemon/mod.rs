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

fn write_bdi_readahead(dev: &str) {
    let p = PathBuf::from(format!("/sys/class/bdi/{dev}/read_ahead_kb"));
    if let Err(e) = fs::write(&p, format!("{READ_AHEAD_KB}\n")) {
        log::warn!("could not raise readahead ({}): {e}", p.display());
    }
}

fn notify(opts: &ServeOptions, line: &str) {
    if opts.notify_stdout {
        let mut out = io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            log::warn!("could not notify the starting process: {e}");
        }
    }
}

/// Runs a view daemon in this process until the mount goes away; see the module doc.
/// Call it from the main thread before other threads exist (it blocks signals).
///
/// # Errors
/// Anything that prevents the mount; reported on stdout too when `notify_stdout`.
pub fn serve(store: Store, ns: Namespace, mountpoint: &Path, opts: &ServeOptions) -> Result<()> {
    let r = serve_inner(store, ns, mountpoint, opts);
    if let Err(e) = &r {
        notify(opts, &format!("error {e}"));
    }
    r
}

fn serve_inner(store: Store, ns: Namespace, mountpoint: &Path, opts: &ServeOptions) -> Result<()> {
    let pid = std::process::id();
    if opts.notify_stdout {
        fs::create_dir_all(store.views_dir()).map_err(|e| Error::io(store.views_dir(), e))?;
        let logp = store.view_log_path(pid);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&logp)
            .map_err(|e| Error::io(&logp, e))?;
        nix::unistd::dup2_stderr(&log).map_err(|e| Error::io(&logp, e.into()))?;
    }
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    signals
        .thread_block()
        .map_err(|e| Error::io_op("blocking signals", e.into()))?;
    check_fuse()?;
    let mp = absolute(mountpoint)?;
    if opts.notify_stdout {
        // A daemon must not keep the caller's working directory (and its filesystem) busy.
        std::env::set_current_dir("/").map_err(|e| Error::io("/", e))?;
    }
    let name = match &opts.source {
        Some(src) => {
            check_mount_source(&store, src)?;
            src.clone()
        }
        None => fsname(&store, &ns),
    };
    let (kind, checkpoint, root) = match &ns {
        Namespace::Checkpoint { id, root } => ("checkpoint", Some(*id), Some(root.clone())),
        Namespace::Browse => ("browse", None, None),
    };
    // The workspaces' lower view pins only the checkpoints the kernel holds (the bases of
    // overlays, attached or detached but still in use); any other browse view, everything.
    // The bare lower view (`View::serve_bare`) is one of them too, told by its mountpoint.
    let bare = checkpoint.is_none() && absolute(&store.lower_bare_view_dir())? == mp;
    let lower = bare || (checkpoint.is_none() && absolute(&store.lower_view_dir())? == mp);
    let pin = Pin {
        all: checkpoint.is_none() && !lower,
        checkpoints: checkpoint.into_iter().collect(),
        ..Pin::default()
    };
    let owner = match (checkpoint, lower, bare) {
        (Some(_), _, _) => "mount",
        (None, true, true) => "lower-bare",
        (None, true, false) => "lower",
        (None, false, _) => "browse",
    };
    let guard = store.pin(owner, pin.clone(), || match checkpoint {
        Some(id) => store.read_checkpoint(&id).map(|_| ()),
        None => Ok(()),
    })?;
    let state_path = store.view_state_path(pid);
    let log_path = store.view_log_path(pid);
    let store_warm_path = store.view_warm_path(pid);
    let mounts_dir = store.views_dir();
    let mut view = View::new(store, ns, &opts.view)?;
    if bare {
        view.serve_bare();
    }
    let _pin = if lower {
        let mut pin = pin;
        (pin.pid, pin.owner) = (pid, owner.to_string());
        view.keep_pin_to_held(guard, pin);
        None
    } else {
        Some(guard)
    };
    let view = Arc::new(view);
    // The lower views record their warm-ups (`view::lower::warm`) for `mount --branch` to wait on.
    if lower {
        fs::create_dir_all(&mounts_dir).map_err(|e| Error::io(&mounts_dir, e))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = MountConfig {
        fsname: name.clone(),
        auto_unmount: true,
        allow_other: opts.allow_other,
        threads: THREADS,
        warm_record: lower.then(|| store_warm_path.clone()),
        stop: Arc::clone(&stop),
    };
    let session = crate::view::fuse::mount(view, &mp, &cfg)
        .map_err(|e| Error::io_op(format!("mounting {} at {}", name, mp.display()), e))?;
    log::info!("mounted {name} at {}", mp.display());
    let dev = match mount_at(&mp) {
        Ok(Some(m)) if m.source == name => {
            write_bdi_readahead(&m.dev);
            Some(m.dev)
        }
        Ok(_) => {
            log::warn!("mount at {} not found in mountinfo", mp.display());
            None
        }
        Err(e) => {
            log::warn!("{e}");
            None
        }
    };
    let state = MountState {
        pid,
        mountpoint: mp.clone(),
        fsname: name,
        kind: kind.into(),
        checkpoint,
        root,
        started: crate::text::time::format_rfc3339(now_ns()),
    };
    fs::create_dir_all(&mounts_dir).map_err(|e| Error::io(&mounts_dir, e))?;
    let json = serde_json::to_vec_pretty(&state)
        .map_err(|e| Error::Invalid(format!("encoding mount state: {e}")))?;
    atomic::write_atomic_replace(&state_path, &json, 0o600)?;

    let (signal_mp, signal_dev, signal_stop) = (mp.clone(), dev.clone(), Arc::clone(&stop));
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || match signals.wait() {
            Ok(sig) => {
                log::info!("{sig}: unmounting {}", signal_mp.display());
                signal_stop.store(true, Ordering::Relaxed);
                unmount_self(&signal_mp, signal_dev.as_deref());
                std::thread::sleep(EXIT_WAIT);
                // Still here: the session did not end (the mount is held, or a request
                // hangs). End it: every request waiting on us fails, and we exit.
                if let Some(dev) = &signal_dev {
                    log::warn!(
                        "{} still served {EXIT_WAIT:?} after {sig}: aborting its FUSE connection",
                        signal_mp.display()
                    );
                    if let Err(e) = abort_connection(dev) {
                        log::error!("{e}");
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
                log::error!("exiting without a clean end of the session");
                std::process::exit(1);
            }
            Err(e) => log::error!("waiting for signals: {e}"),
        })
        .map_err(|e| Error::io_op("starting the signal thread", e))?;
    if let Some(dev) = dev.clone() {
        let watch_stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("mount-watch".into())
            .spawn(move || watch_mount(&dev, &watch_stop))
            .map_err(|e| Error::io_op("starting the mount-watch thread", e))?;
    }

    notify(opts, &format!("ready {pid}"));
    if opts.notify_stdout {
        // The parent stops reading after "ready": never write to that pipe again.
        match fs::OpenOptions::new().write(true).open("/dev/null") {
            Ok(null) => {
                if let Err(e) = nix::unistd::dup2_stdout(&null) {
                    log::warn!("detaching stdout: {e}");
                }
            }
            Err(e) => log::warn!("opening /dev/null: {e}"),
        }
    }
    let run = session.run();
    stop.store(true, Ordering::Relaxed);
    log::info!("unmounted {}", mp.display());
    if let Err(e) = fs::remove_file(&state_path) {
        log::warn!("removing {}: {e}", state_path.display());
    }
    if lower {
        if let Err(e) = fs::remove_file(&store_warm_path) {
            log::warn!("removing {}: {e}", store_warm_path.display());
        }
    }
    if fs::metadata(&log_path)
        .map(|m| m.len() == 0)
        .unwrap_or(false)
    {
        if let Err(e) = fs::remove_file(&log_path) {
            log::warn!("removing {}: {e}", log_path.display());
        }
    }
    run.map_err(|e| Error::io_op(format!("serving {}", mp.display()), e))
}

/// Sets `stop` once no mount of device `dev` (`major:minor`, ours) is left in the mount
/// table: unmounted, or detached lazily while something still holds it. Looks every
/// [`MOUNT_WATCH`] (reading the mount table costs some microseconds).
fn watch_mount(dev: &str, stop: &AtomicBool) {
    loop {
        match mounts() {
            Ok(all) if !all.iter().any(|m| m.dev == dev) => {
                log::info!("the mount of {dev} is gone: stopping its background work");
                stop.store(true, Ordering::Relaxed);
                return;
            }
            Ok(_) => {}
            Err(e) => log::warn!("{e}"),
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(MOUNT_WATCH);
    }
}

/// Aborts the FUSE connection of the mount of device `dev` (`major:minor`, as mountinfo
/// gives it) through fusectl (`/sys/fs/fuse/connections/<minor>/abort`), mounting fusectl
/// there first when it is not: every request waiting on that connection fails with
/// ENOTCONN, and its daemon's session ends. For a daemon that does not exit by itself.
///
/// # Errors
/// `Invalid` for a malformed `dev`; mounting fusectl; writing `abort`.
pub fn abort_connection(dev: &str) -> Result<()> {
    let minor = dev
        .split_once(':')
        .map(|(_, m)| m)
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| Error::Invalid(format!("device {dev:?} is not major:minor")))?;
    let dir = Path::new(FUSECTL);
    let mounted = mounts()?
        .iter()
        .any(|m| m.mountpoint == dir && m.fstype == "fusectl");
    if !mounted {
        nix::mount::mount(
            Some("fusectl"),
            dir,
            Some("fusectl"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| Error::io_op(format!("mounting fusectl at {FUSECTL}"), e.into()))?;
    }
    let abort = dir.join(minor).join("abort");
    match fs::write(&abort, b"1") {
        Ok(()) => Ok(()),
        // The connection ended meanwhile: nothing left to abort.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(&abort, e)),
    }
}

/// Whether process `pid` runs (a zombie does not: whoever reaps it may not be us).
pub fn running(pid: u32) -> bool {
    if !pid_alive(pid) {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which ends with the last ')'.
        Ok(st) => st
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Waits up to [`EXIT_WAIT`] for the daemon `pid` of the mount of device `dev` (gone from
/// `mountpoint`) to exit; if it is still running then, reports it (a warning naming the pid
/// and the mount) and aborts its FUSE connection ([`abort_connection`]), then waits a little
/// more. Returns whether it exited.
pub fn wait_exit(pid: u32, dev: Option<&str>, mountpoint: &Path) -> bool {
    if wait_until(EXIT_WAIT, || !running(pid)) {
        return true;
    }
    let conn = dev.and_then(|d| d.split_once(':')).map_or("?", |(_, m)| m);
    log::warn!(
        "view daemon {pid} of {} did not exit {EXIT_WAIT:?} after its mount went: \
         aborting its FUSE connection {conn}",
        mountpoint.display()
    );
    if let Some(dev) = dev {
        if let Err(e) = abort_connection(dev) {
            log::warn!("{e}");
        }
    }
    let gone = wait_until(Duration::from_secs(5), || !running(pid));
    if !gone {
        log::warn!(
            "view daemon {pid} of {} is still running",
            mountpoint.display()
        );
    }
    gone
}

/// Unmounts our own mount so the session loop ends. fusermount3's auto-unmount only acts
/// once the filesystem is dead (it checks that the mountpoint fails with ENOTCONN), so a
/// clean shutdown must unmount itself; a busy mount is detached lazily. Only while the mount
/// at `mp` is ours (device `dev`): a detached view's daemon must not unmount the view that
/// took its place.
fn unmount_self(mp: &Path, dev: Option<&str>) {
    use nix::mount::{umount2, MntFlags};
    match (mount_at(mp), dev) {
        (Ok(Some(m)), Some(dev)) if m.dev == dev => {}
        (Ok(_), Some(_)) => {
            log::info!(
                "{} is no longer our mount: nothing to unmount",
                mp.display()
            );
            return;
        }
        _ => {}
    }
    match umount2(mp, MntFlags::empty()) {
        Ok(()) => {}
        Err(nix::errno::Errno::EBUSY) => {
            log::warn!("{} is busy: detaching it lazily", mp.display());
            if let Err(e) = umount2(mp, MntFlags::MNT_DETACH) {
                log::error!("detaching {}: {e}", mp.display());
            }
        }
        Err(e) => log::error!("unmounting {}: {e}", mp.display()),
    }
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

fn daemon_exe(opts: &StartOptions) -> Result<PathBuf> {
    if let Some(e) = &opts.exe {
        return Ok(e.clone());
    }
    if let Some(e) = std::env::var_os("CKPTFS_EXE") {
        return Ok(PathBuf::from(e));
    }
    std::env::current_exe().map_err(|e| Error::io_op("finding the ckptfs executable", e))
}

fn log_tail(path: &Path) -> String {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// Starts a view daemon in the background (the `ckptfs` binary, detached into its own
/// process group) and returns once the mount is ready.
///
/// # Errors
/// The daemon's own error line (mountpoint busy, FUSE missing...), or a timeout.
pub fn start(
    store: &Store,
    ns: &Namespace,
    mountpoint: &Path,
    opts: &StartOptions,
) -> Result<MountState> {
    check_fuse()?;
    let mp = check_mountpoint(store, mountpoint)?;
    let exe = daemon_exe(opts)?;
    let mut cmd = Command::new(&exe);
    cmd.current_dir("/");
    match ns {
        Namespace::Checkpoint { id, root } => {
            cmd.arg("mount")
                .arg(store.root())
                .arg(format!("{id}:{root}"))
                .arg("--at")
                .arg(&mp);
        }
        Namespace::Browse => {
            cmd.arg("browse").arg(store.root()).arg(&mp);
        }
    }
    cmd.arg("--foreground").arg("--notify-stdout");
    if let Some(c) = opts.cache_bytes {
        cmd.arg("--cache-size").arg(c.to_string());
    }
    if let Some(c) = opts.file_cache_bytes {
        cmd.arg("--file-cache-size").arg(c.to_string());
    }
    if opts.allow_other {
        cmd.arg("--allow-other");
    }
    if let Some(src) = &opts.source {
        cmd.arg("--mount-source").arg(src);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        let level = log::max_level().to_string().to_lowercase();
        cmd.env(
            "RUST_LOG",
            if level == "off" { "warn".into() } else { level },
        );
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    {
        use std::os::unix::process::CommandExt;
        // Its own process group: a Ctrl-C meant for the starting command does not reach it.
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io_op(format!("starting {}", exe.display()), e))?;
    let pid = child.id();
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Invalid("daemon has no stdout".into()))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let done = line.starts_with("ready") || line.starts_with("error");
            if tx.send(line).is_err() || done {
                break;
            }
        }
    });
    let deadline = Instant::now() + opts.timeout;
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with("ready") => break Ok(()),
            Ok(l) if l.starts_with("error ") => break Err(l["error ".len()..].to_string()),
            Ok(_) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let tail = log_tail(&store.view_log_path(pid));
                break Err(format!(
                    "the mount daemon exited before the mount was ready: {tail}"
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = child.kill() {
                    log::warn!("killing daemon {pid}: {e}");
                }
                break Err(format!(
                    "the mount was not ready after {:?} (daemon log: {})",
                    opts.timeout,
                    store.view_log_path(pid).display()
                ));
            }
        }
    };
    // Reap the daemon whenever it exits, so it never lingers as a zombie of a long-lived caller.
    std::thread::spawn(move || {
        if let Err(e) = child.wait() {
            log::warn!("waiting for daemon {pid}: {e}");
        }
    });
    match outcome {
        Ok(()) => read_state(store, pid)?
            .ok_or_else(|| Error::Invalid(format!("daemon {pid} is ready but wrote no state"))),
        Err(msg) => Err(Error::Invalid(msg)),
    }
}

/// Starts the browse view of `store` at `mountpoint` (may be under `STORE/run/`) and returns
/// once it is ready. Workspaces use `<mountpoint>/checkpoints/<id>/<root>` as overlay lower.
pub fn start_browse(store: &Store, mountpoint: &Path) -> Result<MountState> {
    start(
        store,
        &Namespace::Browse,
        mountpoint,
        &StartOptions::default(),
    )
}

/// Makes sure the browse view of `store` is mounted at `mountpoint`: returns at once when it
/// already is, otherwise starts it (see [`start_browse`]). Idempotent; for workspaces'
/// `run/lower`.
///
/// # Errors
/// `Conflict` when something else is mounted there; [`start`]'s errors.
pub fn ensure_browse(store: &Store, mountpoint: &Path) -> Result<()> {
    let mp = absolute(mountpoint)?;
    if let Some(m) = mount_at(&mp)? {
        if m.source == fsname(store, &Namespace::Browse) {
            return Ok(());
        }
        return Err(Error::Conflict(format!(
            "{} is busy: {} ({}) is mounted there",
            mp.display(),
            m.source,
            m.fstype
        )));
    }
    fs::create_dir_all(&mp).map_err(|e| Error::io(&mp, e))?;
    // Private (no `allow_other`): overlayfs reads its lower layer as the overlay's mounter
    // (root), so agents read these files only through their workspace, never here.
    // No materialized copies under an overlay: the overlay opens lower files on its own, copies
    // them up before any write, and without copies the view answers OPEN with ENOSYS, so a
    // workspace pays no OPEN round trip per file it reads from the lower layer.
    let opts = StartOptions {
        file_cache_bytes: Some(0),
        ..StartOptions::default()
    };
    start(store, &Namespace::Browse, &mp, &opts).map(|_| ())
}

fn read_state(store: &Store, pid: u32) -> Result<Option<MountState>> {
    let p = store.view_state_path(pid);
    match fs::read(&p) {
        Ok(d) => serde_json::from_slice(&d)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&p, e)),
    }
}

fn states(store: &Store) -> Result<Vec<MountState>> {
    let dir = store.views_dir();
    let rd = match fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(&dir, e))?;
        let name = ent.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = read_state(store, pid)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// Live mounts of `store`: daemons with state files whose mount is present, plus any other
/// mount whose source names the store. Removes state files of daemons that are gone.
pub fn list(store: &Store) -> Result<Vec<MountStatus>> {
    let all = mounts()?;
    let mut out = Vec::new();
    for s in states(store)? {
        let mounted = all
            .iter()
            .any(|m| m.mountpoint == s.mountpoint && m.source == s.fsname);
        if mounted && pid_alive(s.pid) {
            out.push(MountStatus {
                mountpoint: s.mountpoint.clone(),
                source: s.fsname.clone(),
                state: Some(s),
            });
        } else if !pid_alive(s.pid) {
            let p = store.view_state_path(s.pid);
            if let Err(e) = fs::remove_file(&p) {
                log::warn!("removing stale {}: {e}", p.display());
            }
        }
    }
    for m in all {
        if m.fstype == FSTYPE
            && source_names_store(&m.source, store)
            && !out.iter().any(|o| o.mountpoint == m.mountpoint)
        {
            out.push(MountStatus {
                mountpoint: m.mountpoint,
                source: m.source,
                state: None,
            });
        }
    }
    out.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    Ok(out)
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

/// Unmounts the ckptfs mount at `mountpoint`: asks its daemon to stop (SIGTERM) and waits
/// until the mount is gone and the daemon has exited; without a known daemon, unmounts
/// directly.
///
/// # Errors
/// `NotFound` when no ckptfs mount is there; `Conflict` when it is busy and cannot go.
pub fn stop(mountpoint: &Path) -> Result<()> {
    let mp = absolute(mountpoint)?;
    let m = mount_at(&mp)?
        .filter(|m| m.fstype == FSTYPE)
        .ok_or_else(|| Error::NotFound(format!("ckptfs mount at {}", mp.display())))?;
    let state = store_of_source(&m.source)
        .and_then(|s| Store::open(&s).ok())
        .and_then(|store| states(&store).ok())
        .and_then(|v| {
            v.into_iter()
                .find(|s| s.mountpoint == mp && s.fsname == m.source && pid_alive(s.pid))
        });
    let gone = |mp: &Path| !matches!(mount_at(mp), Ok(Some(ref e)) if e.source == m.source);
    if let Some(s) = state {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(s.pid).unwrap_or(i32::MAX));
        nix::sys::signal::kill(pid, Signal::SIGTERM)
            .map_err(|e| Error::io_op(format!("signalling daemon {}", s.pid), e.into()))?;
        if wait_until(Duration::from_secs(10), || gone(&mp)) {
            wait_exit(s.pid, Some(&m.dev), &mp);
            return Ok(());
        }
        log::warn!(
            "daemon {} did not unmount {}; unmounting directly",
            s.pid,
            mp.display()
        );
    }
    match nix::mount::umount2(&mp, nix::mount::MntFlags::empty()) {
        Ok(()) => {}
        Err(nix::errno::Errno::EBUSY) => {
            return Err(Error::Conflict(format!(
                "{} is busy (a process has its cwd or a file open there); close it, or `umount -l`",
                mp.display()
            )))
        }
        Err(e) => {
            return Err(Error::io_op(
                format!("unmounting {}", mp.display()),
                e.into(),
            ))
        }
    }
    wait_until(Duration::from_secs(5), || gone(&mp));
    Ok(())
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
