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
