//! File metadata as checkpoints record it and restores apply it: nanosecond timestamps, the
//! stat key that tells an unchanged file, xattrs, symlink entries, and the special files a
//! capture refuses.
//!
//! Capture, the workspace merge and restore all read (or write) metadata through here, so a
//! file is described the same way whichever path stored it. Depends on the store's types only.

use std::ffi::OsStr;
use std::fs::File;

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::safe::{self, Dir};
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
        Err(_) => crate::text::time::now_ns() - RACY_WINDOW_NS,
    }
}

/// The error for a socket, fifo or device found at `path`: captures fail closed on them.
pub(crate) fn special_file_error(path: &Path, m: &impl MetadataExt) -> Error {
    let what = crate::fs::safe::Kind::of_mode(m.mode()).describe();
    Error::Invalid(format!(
        "{} is {what}: only files, directories and symlinks can be captured (exclude it with --exclude)",
        path.display()
    ))
}

/// The tree entry named `name` of `kind` (`size` bytes, or entries for a directory), with the
/// metadata `m` of what the walk found. Every entry a walk records is made here.
pub(crate) fn entry_of(
    name: &[u8],
    kind: EntryKind,
    size: u64,
    m: &impl MetadataExt,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Entry {
    Entry {
        name: name.to_vec(),
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: mtime_ns(m),
        size,
        xattrs,
        ctime_ns: ctime_ns(m),
        ino: m.ino(),
        nlink: 0,
    }
}

/// The tree entry of a directory whose tree is `tree` (`subdirs` of them directories, `size`
/// entries in all), with the metadata `m` of the directory itself.
pub(crate) fn dir_entry(
    name: &[u8],
    tree: crate::id::ObjectId,
    subdirs: u32,
    size: u64,
    m: &impl MetadataExt,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Entry {
    entry_of(name, EntryKind::Dir { tree, subdirs }, size, m, xattrs)
}

/// The tree entry of a symlink with `target` (stored, never followed).
pub(crate) fn symlink_entry(
    name: &[u8],
    target: Vec<u8>,
    m: &impl MetadataExt,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Entry {
    let size = target.len() as u64;
    entry_of(name, EntryKind::Symlink { target }, size, m, xattrs)
}

/// Reads the xattrs of the open file `f` (`path` names it in errors). Unsupported = none.
pub(crate) fn read_xattrs_file(f: &File, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    crate::fs::safe::file_xattrs(f, path)
}

/// The metadata a restore gives an entry, as the tree recorded it.
#[derive(Clone, Copy, Debug)]
pub struct Meta<'a> {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub xattrs: &'a [(Vec<u8>, Vec<u8>)],
}

impl<'a> Meta<'a> {
    /// The recorded metadata of a tree entry.
    pub fn of_entry(e: &'a Entry) -> Meta<'a> {
        Meta {
            mode: e.mode,
            uid: e.uid,
            gid: e.gid,
            mtime_ns: e.mtime_ns,
            xattrs: &e.xattrs,
        }
    }
}

// The order of every apply below: owner, then mode, then xattrs, then times. A chown clears
// the setuid/setgid bits and the file capabilities (`security.capability`), so both are set
// after it; nothing after the times changes the mtime.

/// Gives the open file or directory `fd` (`path` names it in messages) the recorded
/// metadata: owner (kept as it is when we may not chown, as tar does), mode, xattrs, mtime.
///
/// # Errors
/// I/O on the fd.
pub fn apply_meta_fd(fd: impl AsFd, path: &Path, m: &Meta<'_>) -> Result<()> {
    let fd = fd.as_fd();
    allow_eperm(safe::set_owner_fd(fd, path, m.uid, m.gid))?;
    safe::set_mode_fd(fd, path, m.mode)?;
    for (k, v) in m.xattrs {
        safe::set_xattr_fd(fd, path, k, v).map_err(|e| xattr_context(e, path, k))?;
    }
    safe::set_times_fd(fd, path, m.mtime_ns, m.mtime_ns)
}

/// Gives the entry `name` of the held directory `dir` the recorded metadata, never following
/// it: as [`apply_meta_fd`], without the mode for a symlink (which has none of its own).
///
/// # Errors
/// I/O on the entry.
pub fn apply_meta_at(dir: &Dir, name: &OsStr, is_link: bool, m: &Meta<'_>) -> Result<()> {
    allow_eperm(dir.set_owner(name, m.uid, m.gid))?;
    if !is_link {
        dir.set_mode(name, m.mode)?;
    }
    for (k, v) in m.xattrs {
        dir.set_xattr(name, k, v)
            .map_err(|e| xattr_context(e, &dir.display_path(name), k))?;
    }
    dir.set_times(name, m.mtime_ns, m.mtime_ns)
}

/// As [`apply_meta_at`] for `p`, whose parent is a directory of the store's own (its path is
/// trusted; `p` itself is not followed). Not for a tree an agent can write.
///
/// # Errors
/// I/O opening the parent or on the entry.
pub fn apply_meta(
    p: &Path,
    is_link: bool,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
    xattrs: &[(Vec<u8>, Vec<u8>)],
) -> Result<()> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(Error::Invalid(format!("{} has no parent", p.display())));
    };
    let meta = Meta {
        mode,
        uid,
        gid,
        mtime_ns,
        xattrs,
    };
    apply_meta_at(&Dir::open(parent)?, name, is_link, &meta)
}

/// A chown refused with EPERM (we are not root) keeps our own ownership, as tar does.
fn allow_eperm(r: Result<()>) -> Result<()> {
    match r {
        Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => Ok(()),
        other => other,
    }
}

fn xattr_context(e: Error, path: &Path, key: &[u8]) -> Error {
    match e {
        Error::Io { source, .. } => Error::io_op(
            format!(
                "{}: setting xattr {}",
                path.display(),
                String::from_utf8_lossy(key)
            ),
            source,
        ),
        e => e,
    }
}
