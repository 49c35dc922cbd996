//! Mounting a view: a FUSE mount made through fusermount3, whose device fd comes back over a
//! socket; fuser then serves it (why not through fuser: see [`mount`]).

use super::*;

/// Mounts `view` at `mountpoint` (read-only) and returns it, not serving yet.
///
/// The mount goes through fusermount3 here rather than through fuser, because fuser 0.18
/// runs fusermount3's `auto_unmount` only with `allow_other` (its `SessionACL::RootAndOwner`
/// is `allow_other` for the kernel plus a uid filter in fuser that cached dentries, cached
/// attributes and the page cache never reach). fusermount3 itself, run by root, accepts
/// `auto_unmount` without `allow_other`; fuser then serves the device it hands back.
///
/// # Errors
/// The mount failure (mountpoint missing, FUSE unavailable, fusermount3 missing...).
pub fn mount(view: Arc<View>, mountpoint: &Path, cfg: &MountConfig) -> io::Result<MountedView> {
    let mut options = vec![
        format!("fsname={}", cfg.fsname),
        "subtype=ckptfs".into(),
        "ro".into(),
        "nodev".into(),
        "nosuid".into(),
        "noatime".into(),
        "default_permissions".into(),
    ];
    if cfg.allow_other {
        options.push("allow_other".into());
    }
    if cfg.auto_unmount {
        options.push("auto_unmount".into());
    }
    let (device, socket) = fusermount(mountpoint, &options.join(","), cfg.auto_unmount)?;
    let mut config = Config::default();
    // No uid filter in fuser: on a private mount the kernel itself refuses other users at every
    // path walk, getattr and access (`fuse_allow_current_process`). What still reaches us with
    // another uid are requests the kernel makes on an overlay's behalf while an agent works in
    // a workspace (a dentry revalidated, a file handle decoded during a rename over a lower
    // file); fuser's `Owner` filter answered those EACCES, which overlayfs turned into ESTALE
    // for the agent (`mv new old` failed, and with it every editor's and git's lock-rename).
    config.acl = SessionACL::All;
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    let mut fs = ViewFs::new(view);
    fs.mountpoint = Some(mountpoint.to_path_buf());
    if let Some(p) = &cfg.warm_record {
        match Warmer::recording(p.clone()) {
            Ok(w) => fs.warmer = w,
            Err(e) => log::warn!("{}: {e}; warm-ups go unrecorded", p.display()),
        }
    }
    fs.warmer.set_stop_flag(Arc::clone(&cfg.stop));
    let session = match Session::from_fd(fs, device, config.acl, config) {
        Ok(s) => s,
        Err(e) => {
            if let Err(u) = crate::fs::programs::unmount_fuse(mountpoint, true) {
                log::warn!(
                    "detaching {} after a failed start: {u}",
                    mountpoint.display()
                );
            }
            return Err(e);
        }
    };
    Ok(MountedView {
        session,
        _auto_unmount: socket,
    })
}

/// fusermount3 from PATH, else where distributions put it.
/// fusermount3 from the system directories, never the caller's PATH (see
/// `util::system_program`).
pub(super) fn fusermount_bin() -> PathBuf {
    crate::fs::programs::system_program("fusermount3")
}

/// Mounts with fusermount3's protocol (libfuse's): it opens /dev/fuse, mounts it with
/// `options` and sends the device back over the socket named by `_FUSE_COMMFD`. With
/// `auto_unmount` it stays, and once our end of that socket closes (this process ended,
/// however) it unmounts the mount if it is dead. Returns the device and, with
/// `auto_unmount`, our end of the socket, to keep open while serving.
pub(super) fn fusermount(
    mountpoint: &Path,
    options: &str,
    auto_unmount: bool,
) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    use rustix::io::{fcntl_setfd, FdFlags};
    let (ours, theirs) = UnixStream::pair()?;
    // Only fusermount3 may inherit its end (our threads spawn nothing meanwhile).
    fcntl_setfd(&theirs, FdFlags::empty())?;
    let mut child = Command::new(fusermount_bin())
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("running fusermount3: {e}")))?;
    drop(theirs);
    let device = receive_fd(&ours);
    let mut stderr = child.stderr.take();
    let device = match device {
        Ok(Some(d)) => d,
        failed => {
            drop(ours);
            let mut msg = String::new();
            if let Some(s) = &mut stderr {
                if let Err(e) = s.read_to_string(&mut msg) {
                    log::warn!("reading fusermount3's error: {e}");
                }
            }
            let status = child.wait()?;
            let msg = msg.trim();
            return Err(match failed {
                Err(e) => io::Error::new(e.kind(), format!("fusermount3: {e}; {msg}")),
                _ if msg.is_empty() => io::Error::other(format!("fusermount3 failed ({status})")),
                _ => io::Error::other(msg.to_string()),
            });
        }
    };
    if !auto_unmount {
        drop(ours);
        child.wait()?;
        return Ok((device, None));
    }
    // fusermount3 lives as long as the mount; reap it when it ends. While this process lives
    // it can only say that a mount we unmounted ourselves is gone ("not mounted"): debug.
    std::thread::Builder::new()
        .name("fusermount3".into())
        .spawn(move || {
            if let Some(s) = stderr {
                for line in io::BufReader::new(s).lines().map_while(Result::ok) {
                    log::debug!("fusermount3: {line}");
                }
            }
            if let Err(e) = child.wait() {
                log::warn!("waiting for fusermount3: {e}");
            }
        })?;
    Ok((device, Some(ours.into())))
}

/// Receives the one fd fusermount3 sends; `None` when it closed the socket without one.
pub(super) fn receive_fd(socket: &UnixStream) -> io::Result<Option<OwnedFd>> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    loop {
        match recvmsg(
            socket,
            &mut [io::IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let fd = control.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    Ok(fd)
}
