//! File metadata as checkpoints record it and restores apply it: nanosecond timestamps, the
//! stat key that tells an unchanged file, xattrs, symlink entries, and the special files a
//! capture refuses.
//!
//! Capture, the workspace merge and restore all read (or write) metadata through here, so a
//! file is described the same way whichever path stored it. Depends on the store's types only.

use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::stat::{utimensat, UtimensatFlags};
use nix::sys::time::TimeSpec;

use crate::error::{Error, Result};
use crate::store::statcache::{StatKey, RACY_WINDOW_NS};
use crate::store::tree::{Entry, EntryKind};

// These take `std::fs::Metadata` and the walk's `safe::Stat` alike.

pub(crate) fn mtime_ns(m: &impl MetadataExt) -> i64 {
    m.mtime() * 1_000_000_000 + m.mtime_nsec()
}

pub(crate) fn ctime_ns(m: &impl MetadataExt) -> i64 {
    m.ctime() * 1_000_000_000 + m.ctime_nsec()
}

/// The (size, mtime, ctime, inode) a stat cache compares to tell an unchanged file.
pub(crate) fn stat_key(m: &impl MetadataExt) -> StatKey {
    StatKey {
        size: m.size(),
        mtime_ns: mtime_ns(m),
        ctime_ns: ctime_ns(m),
        ino: m.ino(),
    }
}

/// The kernel's coarse wall clock (`CLOCK_REALTIME_COARSE`), in nanoseconds: the clock a local
/// filesystem stamps mtime and ctime from (fine-grained stamps are never earlier), so a file
/// changed after this was read gets timestamps at or after it.
pub(crate) fn coarse_now_ns() -> i64 {
    use nix::time::{clock_gettime, ClockId};
    match clock_gettime(ClockId::CLOCK_REALTIME_COARSE) {
        Ok(t) => t.tv_sec() * 1_000_000_000 + t.tv_nsec(),
        // Not offered (never on Linux): the fine clock less a generous tick.
        Err(_) => crate::util::now_ns() - RACY_WINDOW_NS,
    }
}

/// The error for a socket, fifo or device found at `path`: captures fail closed on them.
pub(crate) fn special_file_error(path: &Path, m: &impl MetadataExt) -> Error {
    let what = crate::safe::Kind::of_mode(m.mode()).describe();
    Error::Invalid(format!(
        "{} is {what}: only files, directories and symlinks can be captured (exclude it with --exclude)",
        path.display()
    ))
}

/// The tree entry of a symlink with `target` (stored, never followed).
pub(crate) fn symlink_entry(
    name: &[u8],
    target: Vec<u8>,
    m: &impl MetadataExt,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Entry {
    Entry {
        name: name.to_vec(),
        size: target.len() as u64,
        kind: EntryKind::Symlink { target },
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: mtime_ns(m),
        xattrs,
        ctime_ns: ctime_ns(m),
        ino: m.ino(),
    }
}

/// Reads the xattrs of the open file `f` (`path` names it in errors). Unsupported = none.
pub(crate) fn read_xattrs_file(f: &File, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    crate::safe::file_xattrs(f, path)
}

/// Gives `p` the recorded metadata: xattrs, owner (kept as is when not root, as tar does),
/// mode (not for a symlink, which has none of its own) and mtime, never following a final
/// symlink.
pub fn apply_meta(
    p: &Path,
    is_link: bool,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
    xattrs: &[(Vec<u8>, Vec<u8>)],
) -> Result<()> {
    for (k, v) in xattrs {
        xattr::set(p, std::ffi::OsStr::from_bytes(k), v).map_err(|err| {
            Error::io_op(
                format!(
                    "{}: setting xattr {}",
                    p.display(),
                    String::from_utf8_lossy(k)
                ),
                err,
            )
        })?;
    }
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Ok(()) => {}
        // Not root: keep our own ownership, as tar does.
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => {}
        Err(err) => return Err(Error::io(p, err)),
    }
    if !is_link {
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
            .map_err(|err| Error::io(p, err))?;
    }
    let ts = TimeSpec::new(
        mtime_ns.div_euclid(1_000_000_000),
        mtime_ns.rem_euclid(1_000_000_000),
    );
    utimensat(
        nix::fcntl::AT_FDCWD,
        p,
        &ts,
        &ts,
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(|err| Error::io(p, io::Error::from(err)))
}
