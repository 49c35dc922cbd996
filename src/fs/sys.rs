//! The few libc calls that have no safe wrapper. Every unsafe block in the crate lives here.
#![allow(unsafe_code)]

/// Restores the default action of SIGPIPE (Rust ignores it), so `ckptfs log | head` ends
/// quietly when the reader goes away, as other command-line tools do, instead of failing a
/// write to stdout with a panic.
pub fn default_sigpipe() {
    // SAFETY: installs the default disposition, no handler code runs; called once at start,
    // before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `FIFREEZE`: `_IOWR('X', 119, int)`, as in linux/fs.h.
const FIFREEZE: libc::c_ulong =
    nix::request_code_readwrite!(b'X', 119, std::mem::size_of::<libc::c_int>()) as libc::c_ulong;
/// `FITHAW`: `_IOWR('X', 120, int)`.
const FITHAW: libc::c_ulong =
    nix::request_code_readwrite!(b'X', 120, std::mem::size_of::<libc::c_int>()) as libc::c_ulong;

fn fs_ioctl(f: &std::fs::File, request: libc::c_ulong) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: FIFREEZE and FITHAW take no argument (the kernel ignores it); the descriptor is
    // open for the whole call, and no memory is shared with the kernel.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), request as _, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Freezes the filesystem that holds the open file or directory `f`, as `fsfreeze -f` does:
/// writes to it block until [`thaw_filesystem`]. EBUSY when it is already frozen,
/// EOPNOTSUPP when the filesystem cannot be frozen.
pub fn freeze_filesystem(f: &std::fs::File) -> std::io::Result<()> {
    fs_ioctl(f, FIFREEZE)
}

/// Thaws a filesystem [`freeze_filesystem`] froze; EINVAL when it is not frozen.
pub fn thaw_filesystem(f: &std::fs::File) -> std::io::Result<()> {
    fs_ioctl(f, FITHAW)
}

/// One extent of a file, as `FS_IOC_FIEMAP` reports it (`struct fiemap_extent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
    pub flags: u32,
}

/// `FIEMAP_EXTENT_LAST`: the file's last extent.
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// `FIEMAP_EXTENT_SHARED`: the extent's blocks are shared with another file (reflink).
pub const FIEMAP_EXTENT_SHARED: u32 = 0x2000;

/// `FS_IOC_FIEMAP`: `_IOWR('f', 11, struct fiemap)` (the 32-byte header), as in linux/fs.h.
const FS_IOC_FIEMAP: libc::c_ulong =
    nix::request_code_readwrite!(b'f', 11, FIEMAP_HEADER) as libc::c_ulong;
const FIEMAP_HEADER: usize = 32;
const FIEMAP_EXTENT: usize = 56;
/// Extents asked for per call.
const FIEMAP_BATCH: usize = 256;

/// Every extent of the open file `f` (`FS_IOC_FIEMAP`, no flags: the mapping as it stands,
/// without syncing first), in logical order.
pub fn fiemap(f: &std::fs::File) -> std::io::Result<Vec<Extent>> {
    use std::os::fd::AsRawFd;
    let u64_at = |b: &[u64], byte: usize| b[byte / 8];
    let u32_at = |b: &[u64], byte: usize| {
        let w = b[byte / 8].to_ne_bytes();
        let o = byte % 8;
        u32::from_ne_bytes([w[o], w[o + 1], w[o + 2], w[o + 3]])
    };
    let words = (FIEMAP_HEADER + FIEMAP_EXTENT * FIEMAP_BATCH) / 8;
    let mut buf = vec![0u64; words];
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        buf.fill(0);
        // struct fiemap: fm_start, fm_length, fm_flags (0), fm_mapped_extents (out),
        // fm_extent_count, fm_reserved.
        buf[0] = start;
        buf[1] = u64::MAX - start;
        let count = (FIEMAP_BATCH as u32).to_ne_bytes();
        buf[3] = u64::from_ne_bytes([count[0], count[1], count[2], count[3], 0, 0, 0, 0]);
        // SAFETY: `buf` is a `struct fiemap` header followed by room for FIEMAP_BATCH extents,
        // as fm_extent_count says, 8-byte aligned; the kernel writes only within it, and the
        // descriptor is open for the whole call.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP as _, buf.as_mut_ptr()) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mapped = u32_at(&buf, 20) as usize;
        if mapped == 0 {
            return Ok(out);
        }
        let mut last = false;
        for i in 0..mapped.min(FIEMAP_BATCH) {
            let at = FIEMAP_HEADER + i * FIEMAP_EXTENT;
            let e = Extent {
                logical: u64_at(&buf, at),
                physical: u64_at(&buf, at + 8),
                length: u64_at(&buf, at + 16),
                flags: u32_at(&buf, at + 40),
            };
            last |= e.flags & FIEMAP_EXTENT_LAST != 0;
            start = e.logical.saturating_add(e.length);
            out.push(e);
        }
        if last || start == u64::MAX {
            return Ok(out);
        }
    }
}

/// The first offset at or after `pos` (below `size`) where `f` holds data (`SEEK_DATA`):
/// `size` when only a hole follows, `pos` when `pos` is in data or the filesystem cannot say.
/// Moves the file's offset (callers read with `pread`).
pub fn next_data(f: &std::fs::File, pos: u64, size: u64) -> u64 {
    match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(pos)) {
        Ok(d) => d.clamp(pos, size),
        Err(rustix::io::Errno::NXIO) => size,
        Err(_) => pos,
    }
}

/// Takes a read lease on `f` (open read-only): refused (EAGAIN) while any process has the
/// file open for writing or mapped writable; while it stands, an open for writing or a
/// truncation waits until [`release_lease`] (or `/proc/sys/fs/lease-break-time`). The
/// process ignores SIGIO from then on: the kernel signals a lease holder when an opener
/// starts waiting, and the holder here releases soon anyway.
pub fn read_lease(f: &std::fs::File) -> std::io::Result<()> {
    static IGNORE_SIGIO: std::sync::Once = std::sync::Once::new();
    IGNORE_SIGIO.call_once(|| {
        // SAFETY: installs the ignore disposition, no handler code runs; SIGIO is used for
        // nothing else in this process.
        unsafe {
            libc::signal(libc::SIGIO, libc::SIG_IGN);
        }
    });
    set_lease(f, libc::F_RDLCK)
}

/// Releases a lease [`read_lease`] took.
pub fn release_lease(f: &std::fs::File) -> std::io::Result<()> {
    set_lease(f, libc::F_UNLCK)
}

fn set_lease(f: &std::fs::File, kind: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_SETLEASE takes an int argument; the descriptor is open for the whole call.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, kind) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The C library this process runs on: `glibc X.Y` (from `gnu_get_libc_version`), or the
/// build's C library name elsewhere (`musl`: it has no version call).
pub fn libc_version() -> String {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: gnu_get_libc_version takes no argument and returns a pointer to a static,
        // NUL-terminated string that lives as long as the process; it is only read here.
        let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        format!("glibc {}", v.to_string_lossy())
    }
    #[cfg(target_env = "musl")]
    {
        "musl".to_string()
    }
    #[cfg(not(any(target_env = "gnu", target_env = "musl")))]
    {
        "unknown".to_string()
    }
}

/// A user to become before exec: uid, primary gid and supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Starts `cmd` in the cgroup whose `cgroup.procs` is open as `procs`: the child writes `0`
/// (itself) there before it executes, so the command and all it starts are born in the
/// cgroup while this process stays out of it (a held checkpoint then freezes the cgroup
/// without freezing itself). SIGINT and SIGQUIT get their default action back in the child
/// (see [`IgnoreInterrupts`]). With `user`, the child then sets its supplementary groups,
/// gid and uid to those (in that order, after joining: moving into the cgroup needs root),
/// before it executes. `cwd` is entered last, as that user: a path in a tree the agent writes
/// is then followed with the agent's own rights, never root's (a directory swapped for a
/// symlink cannot lead the agent where only root can go). Set no `current_dir` on `cmd`:
/// the standard library enters it before the user is switched.
///
/// # Errors
/// Spawning fails (not found, not executable), the child cannot join the cgroup, cannot
/// become `user`, or cannot enter `cwd`.
pub fn spawn_in_cgroup(
    cmd: &mut std::process::Command,
    procs: std::fs::File,
    user: Option<&Credentials>,
    cwd: Option<&std::path::Path>,
) -> std::io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let fd = procs.as_raw_fd();
    let user = user.cloned();
    let cwd = cwd
        .map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()))
        .transpose()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (signal, write, setgroups, setgid, setuid, chdir) on memory
    // and a descriptor it owns (the groups vector and the cwd string were allocated before
    // the fork and are only read);
    // `procs` stays open in the parent until spawn returns, so the descriptor is valid in the
    // child.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            let r = libc::write(fd, b"0".as_ptr().cast(), 1);
            if r != 1 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(c) = &user {
                if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0
                    || libc::setgid(c.gid) != 0
                    || libc::setuid(c.uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(d) = &cwd {
                if libc::chdir(d.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(procs);
    child
}

/// While alive, this process ignores SIGINT and SIGQUIT, as a shell running a foreground
/// command does: a Ctrl-C at the terminal reaches the command (same process group), which
/// decides, and the runner lives to record the outcome. Dropping it restores what was there.
pub struct IgnoreInterrupts {
    old: [libc::sighandler_t; 2],
}

impl IgnoreInterrupts {
    pub fn new() -> IgnoreInterrupts {
        // SAFETY: installs SIG_IGN (no handler code runs) and keeps the previous dispositions
        // to put back; no memory is shared.
        let old = unsafe {
            [
                libc::signal(libc::SIGINT, libc::SIG_IGN),
                libc::signal(libc::SIGQUIT, libc::SIG_IGN),
            ]
        };
        IgnoreInterrupts { old }
    }
}

impl Default for IgnoreInterrupts {
    fn default() -> Self {
        IgnoreInterrupts::new()
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        // SAFETY: puts back the dispositions `new` replaced.
        unsafe {
            libc::signal(libc::SIGINT, self.old[0]);
            libc::signal(libc::SIGQUIT, self.old[1]);
        }
    }
}

/// `name_to_handle_at(dir, name, 0)`: the handle type and bytes the filesystem encodes for
/// the entry, not followed (the call follows a symlink only with `AT_SYMLINK_FOLLOW`, and
/// refuses `AT_SYMLINK_NOFOLLOW`); `name` must be a single component.
pub fn name_to_handle(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
) -> std::io::Result<(i32, Vec<u8>)> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    const MAX: usize = 128; // MAX_HANDLE_SZ
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        data: [u8; MAX],
    }
    let mut h = Handle {
        bytes: MAX as u32,
        kind: 0,
        data: [0; MAX],
    };
    let mut mount_id: libc::c_int = 0;
    let c = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `h` has the layout of `struct file_handle` with room for MAX_HANDLE_SZ bytes,
    // as `handle_bytes` says; `c` is NUL-terminated; both outlive the call.
    let r = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            c.as_ptr(),
            std::ptr::addr_of_mut!(h).cast::<libc::file_handle>(),
            &mut mount_id,
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = (h.bytes as usize).min(MAX);
    Ok((h.kind, h.data[..n].to_vec()))
}

/// Spawns `cmd` with `fd` as its descriptor number `as_fd` (not close-on-exec there); this
/// process's `fd` keeps its close-on-exec flag, so no other child inherits it.
///
/// # Errors
/// Spawning fails, or the child cannot place the descriptor.
pub fn spawn_with_fd(
    cmd: &mut std::process::Command,
    fd: std::os::fd::BorrowedFd<'_>,
    as_fd: i32,
) -> std::io::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (dup2, fcntl) on a descriptor the parent keeps open until
    // spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if raw == as_fd {
                if libc::fcntl(as_fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, as_fd) != as_fd {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The descriptor `n` this process was started with (see [`spawn_with_fd`]), made
/// close-on-exec; `None` when it is not open.
pub fn inherited_fd(n: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only reads the flags of descriptor `n`, which may not be open.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: `n` is open (checked above) and nothing else in this process owns it: it is
    // called once, at the start of the command the parent passed it to.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(n) };
    // SAFETY: sets the close-on-exec flag of the descriptor just taken.
    unsafe { libc::fcntl(n, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(fd)
}
