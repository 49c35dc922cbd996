//! The daemon itself ([`serve`]): mount, serve until the mount goes or a signal comes, and
//! end; with the calls that wait for a daemon to exit and abort a connection that does not.

use super::*;

pub(super) fn write_bdi_readahead(dev: &str) {
    let p = PathBuf::from(format!("/sys/class/bdi/{dev}/read_ahead_kb"));
    if let Err(e) = fs::write(&p, format!("{READ_AHEAD_KB}\n")) {
        log::warn!("could not raise readahead ({}): {e}", p.display());
    }
}

pub(super) fn notify(opts: &ServeOptions, line: &str) {
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

pub(super) fn serve_inner(
    store: Store,
    ns: Namespace,
    mountpoint: &Path,
    opts: &ServeOptions,
) -> Result<()> {
    let pid = std::process::id();
    if opts.notify_stdout {
        log_to_file(&store, pid)?;
    }
    let signals = block_signals()?;
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
    let dev = mounted_dev(&mp, &name);
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

    spawn_signal_thread(signals, mp.clone(), dev.clone(), Arc::clone(&stop))?;
    if let Some(dev) = dev.clone() {
        let watch_stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("mount-watch".into())
            .spawn(move || watch_mount(&dev, &watch_stop))
            .map_err(|e| Error::io_op("starting the mount-watch thread", e))?;
    }

    notify(opts, &format!("ready {pid}"));
    if opts.notify_stdout {
        detach_stdout();
    }
    let run = session.run();
    stop.store(true, Ordering::Relaxed);
    log::info!("unmounted {}", mp.display());
    remove_records(
        &state_path,
        lower.then_some(store_warm_path.as_path()),
        &log_path,
    );
    run.map_err(|e| Error::io_op(format!("serving {}", mp.display()), e))
}

/// Sets `stop` once no mount of device `dev` (`major:minor`, ours) is left in the mount
/// table: unmounted, or detached lazily while something still holds it. Looks every
/// [`MOUNT_WATCH`] (reading the mount table costs some microseconds).
pub(super) fn watch_mount(dev: &str, stop: &AtomicBool) {
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
/// `ours` is where that mount was: a device number the mount table shows elsewhere has been
/// reused by another mount since, and is left alone.
///
/// # Errors
/// `Invalid` for a malformed `dev`; mounting fusectl; writing `abort`.
pub fn abort_connection(dev: &str, ours: &Path) -> Result<()> {
    // A connection's device number is reused once it is gone: when the mount table shows
    // `dev` mounted somewhere else than `ours`, it is another view's now, never aborted.
    if let Some(m) = mounts()?.iter().find(|m| m.dev == dev) {
        if m.mountpoint != ours {
            log::warn!(
                "not aborting FUSE connection {dev}: it now serves {}, not {}",
                m.mountpoint.display(),
                ours.display()
            );
            return Ok(());
        }
    }
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
        if let Err(e) = abort_connection(dev, mountpoint) {
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
pub(super) fn unmount_self(mp: &Path, dev: Option<&str>) {
    use crate::fs::programs::unmount_fuse;
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
    match unmount_fuse(mp, false) {
        Ok(()) => {}
        Err(nix::errno::Errno::EBUSY) => {
            log::warn!("{} is busy: detaching it lazily", mp.display());
            if let Err(e) = unmount_fuse(mp, true) {
                log::error!("detaching {}: {e}", mp.display());
            }
        }
        Err(e) => log::error!("unmounting {}: {e}", mp.display()),
    }
}

/// Sends the daemon's log (stderr) to `run/views/<pid>.log`.
fn log_to_file(store: &Store, pid: u32) -> Result<()> {
    fs::create_dir_all(store.views_dir()).map_err(|e| Error::io(store.views_dir(), e))?;
    let logp = store.view_log_path(pid);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&logp)
        .map_err(|e| Error::io(&logp, e))?;
    nix::unistd::dup2_stderr(&log).map_err(|e| Error::io(&logp, e.into()))?;
    Ok(())
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and those it starts: the signal thread
/// waits for them.
fn block_signals() -> Result<SigSet> {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(s);
    }
    signals
        .thread_block()
        .map_err(|e| Error::io_op("blocking signals", e.into()))?;
    Ok(signals)
}

/// The device (`major:minor`) of the mount just made at `mp` as `name`, its readahead raised.
fn mounted_dev(mp: &Path, name: &str) -> Option<String> {
    match mount_at(mp) {
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
    }
}

/// The thread that waits for SIGTERM (SIGINT, SIGHUP): sets `stop`, unmounts the daemon's own
/// mount, and if the session has not ended [`EXIT_WAIT`] later, aborts its FUSE connection
/// and exits.
fn spawn_signal_thread(
    signals: SigSet,
    signal_mp: PathBuf,
    signal_dev: Option<String>,
    signal_stop: Arc<AtomicBool>,
) -> Result<()> {
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
                    if let Err(e) = abort_connection(dev, &signal_mp) {
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
    Ok(())
}

/// The parent stops reading after "ready": stdout goes to /dev/null, never to that pipe again.
fn detach_stdout() {
    match fs::OpenOptions::new().write(true).open("/dev/null") {
        Ok(null) => {
            if let Err(e) = nix::unistd::dup2_stdout(&null) {
                log::warn!("detaching stdout: {e}");
            }
        }
        Err(e) => log::warn!("opening /dev/null: {e}"),
    }
}

/// Removes the daemon's records once its mount is gone: its state, its warm-up record (a
/// lower view's), and its log when empty.
fn remove_records(state_path: &Path, warm_path: Option<&Path>, log_path: &Path) {
    if let Err(e) = fs::remove_file(state_path) {
        log::warn!("removing {}: {e}", state_path.display());
    }
    if let Some(w) = warm_path {
        if let Err(e) = fs::remove_file(w) {
            log::warn!("removing {}: {e}", w.display());
        }
    }
    if fs::metadata(log_path)
        .map(|m| m.len() == 0)
        .unwrap_or(false)
    {
        if let Err(e) = fs::remove_file(log_path) {
            log::warn!("removing {}: {e}", log_path.display());
        }
    }
}
