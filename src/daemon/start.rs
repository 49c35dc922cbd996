//! Starting daemons in the background ([`start`], [`start_browse`], [`ensure_browse`]) and
//! stopping them ([`stop`]), waiting for their ready or error line.

use super::*;

pub(super) fn daemon_exe(opts: &StartOptions) -> Result<PathBuf> {
    if let Some(e) = &opts.exe {
        return Ok(e.clone());
    }
    if let Some(e) = std::env::var_os("CKPTFS_EXE") {
        return Ok(PathBuf::from(e));
    }
    std::env::current_exe().map_err(|e| Error::io_op("finding the ckptfs executable", e))
}

pub(super) fn log_tail(path: &Path) -> String {
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
    match crate::fs::programs::unmount_fuse(&mp, false) {
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
