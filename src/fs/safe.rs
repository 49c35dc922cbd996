//! The one safe way to touch a tree an agent can write.
//!
//! ckptfs runs as root over directories that an untrusted, unprivileged agent writes at the
//! same moment: the roots a capture walks, the upper layers of workspaces, a restore target,
//! and stores or archives received from elsewhere. Between any two of our system calls the
//! agent can swap a path component for a symlink, a FIFO or another directory. Every walk,
//! open, create, rename, chmod/chown/utimes and xattr call on such a tree goes through this
//! module, and these are its rules (a reviewer checks them here, and nowhere else):
//!
//! 1. **A tree is entered once**, at its top, which the operator named: [`Dir::open`] (the last
//!    component is not followed; its ancestors are the operator's). Everything below is reached
//!    from a held directory fd: a single name with an `*at` call, or a relative path with
//!    `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`. No component is
//!    ever a followed symlink, and nothing resolves outside the tree. A name is one component:
//!    never empty, `.`, `..`, or containing `/` or NUL ([`check_name`]).
//! 2. **Nothing blocks**: every open carries `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`,
//!    and special files (FIFOs, sockets, devices) are never opened for I/O: an open of one
//!    fails with [`Error::Invalid`] naming it ([`special_kind`]), after an open that cannot
//!    block.
//! 3. **What was opened is what was walked**: [`Dir::open_file`] `fstat`s the new fd and refuses
//!    anything but a regular file; [`Dir::open_walked`] also refuses a different device or
//!    inode than the walk's [`Stat`], so a swap between the walk and the read is detected and
//!    looked at again, never read blindly. [`Dir::open_dir`] of a walked directory is checked
//!    the same way by the walks ([`Stat::same_object`]).
//! 4. **Metadata goes to an fd or to a name in a held directory** with `AT_SYMLINK_NOFOLLOW`
//!    (`fchownat`, `utimensat`, xattrs through `/proc/self/fd/N/NAME` with the `l*` calls, whose
//!    directory part is the held fd itself, never a path lookup), or to the fd of what was
//!    just created ([`set_owner_fd`], [`set_mode_fd`], [`set_xattr_fd`], [`set_times_fd`]);
//!    never to a path.
//! 5. **Creations are exclusive** (`O_CREAT | O_EXCL`, `mkdirat`, `symlinkat`, `linkat`) and
//!    renames stay between held directory fds (`renameat2`, `RENAME_NOREPLACE` unless asked).
//!    A directory made in a tree others can write is opened and checked to be the one made
//!    ([`Dir::create_private_dir`]) before anything is put in it.
//! 6. **Checks on real paths are made on what is held**: [`Dir::real_path`] names the
//!    directory an fd holds, so a check (is it inside the store?) and the use agree.
//!
//! Paths carried by [`Dir`] are for messages only; no call here resolves them again.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags, Timespec, Timestamps};

use crate::error::{Error, Result};

/// Flags of every open here: never follow the last component, never block on a FIFO or a
/// device, never become a controlling terminal, never leak into a child process.
const BASE: OFlags = OFlags::NOFOLLOW
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Resolution of every relative path here: no symlink in any component (magic links
/// included), and nothing outside the directory it starts from.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// The largest xattr value read (the kernel's own limit, `XATTR_SIZE_MAX`).
const XATTR_MAX: usize = 64 << 10;

/// What a directory entry is, from its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    /// The kind a `st_mode` says.
    pub fn of_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDevice,
            _ => Kind::BlockDevice,
        }
    }

    /// "a fifo", "a socket"...: for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            Kind::Fifo => "a fifo",
            Kind::Socket => "a socket",
            Kind::CharDevice | Kind::BlockDevice => "a device node",
        }
    }
}

/// The `lstat` of an entry, as the walk saw it. Implements [`std::os::unix::fs::MetadataExt`],
/// so code written for `std::fs::Metadata` (`mode()`, `ino()`, `mtime_nsec()`...) reads it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime: (i64, i64),
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Stat {
    // The field types differ between architectures; the casts only widen them.
    #[allow(clippy::unnecessary_cast)]
    fn from_raw(s: &rustix::fs::Stat) -> Stat {
        Stat {
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            mode: s.st_mode as u32,
            nlink: s.st_nlink as u64,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            rdev: s.st_rdev as u64,
            size: s.st_size.max(0) as u64,
            blksize: s.st_blksize.max(0) as u64,
            blocks: s.st_blocks.max(0) as u64,
            atime: (s.st_atime as i64, s.st_atime_nsec as i64),
            mtime: (s.st_mtime as i64, s.st_mtime_nsec as i64),
            ctime: (s.st_ctime as i64, s.st_ctime_nsec as i64),
        }
    }

    /// The stat of an open file (`fstat`).
    pub fn of_fd(fd: impl AsFd) -> io::Result<Stat> {
        Ok(Stat::from_raw(&rustix::fs::fstat(fd)?))
    }

    pub fn kind(&self) -> Kind {
        Kind::of_mode(self.mode)
    }
    pub fn is_dir(&self) -> bool {
        self.kind() == Kind::Dir
    }
    pub fn is_file(&self) -> bool {
        self.kind() == Kind::File
    }
    pub fn is_symlink(&self) -> bool {
        self.kind() == Kind::Symlink
    }
    /// The size in bytes (as `Metadata::len`).
    pub fn len(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    /// The same object as `other`: type, device and inode agree.
    pub fn same_object(&self, other: &Stat) -> bool {
        self.kind() == other.kind() && self.dev == other.dev && self.ino == other.ino
    }
}

impl From<&std::fs::Metadata> for Stat {
    fn from(m: &std::fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        Stat {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            nlink: m.nlink(),
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev(),
            size: m.size(),
            blksize: m.blksize(),
            blocks: m.blocks(),
            atime: (m.atime(), m.atime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

impl std::os::unix::fs::MetadataExt for Stat {
    fn dev(&self) -> u64 {
        self.dev
    }
    fn ino(&self) -> u64 {
        self.ino
    }
    fn mode(&self) -> u32 {
        self.mode
    }
    fn nlink(&self) -> u64 {
        self.nlink
    }
    fn uid(&self) -> u32 {
        self.uid
    }
    fn gid(&self) -> u32 {
        self.gid
    }
    fn rdev(&self) -> u64 {
        self.rdev
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn atime(&self) -> i64 {
        self.atime.0
    }
    fn atime_nsec(&self) -> i64 {
        self.atime.1
    }
    fn mtime(&self) -> i64 {
        self.mtime.0
    }
    fn mtime_nsec(&self) -> i64 {
        self.mtime.1
    }
    fn ctime(&self) -> i64 {
        self.ctime.0
    }
    fn ctime_nsec(&self) -> i64 {
        self.ctime.1
    }
    fn blksize(&self) -> u64 {
        self.blksize
    }
    fn blocks(&self) -> u64 {
        self.blocks
    }
}

/// Checks that `name` is one path component: not empty, `.` or `..`, no `/`, no NUL.
pub fn check_name(name: &OsStr) -> Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Error::Invalid(format!(
            "{:?} is not a single file name",
            name.to_string_lossy()
        )));
    }
    Ok(())
}

/// Checks that `rel` is a relative path of plain names (no `..`, no leading `/`).
fn check_rel(rel: &Path) -> Result<()> {
    let b = rel.as_os_str().as_bytes();
    if b.is_empty() || b.first() == Some(&b'/') || b.contains(&0) {
        return Err(Error::Invalid(format!(
            "{:?} is not a relative path",
            rel.display().to_string()
        )));
    }
    for part in b.split(|&c| c == b'/').filter(|p| !p.is_empty()) {
        check_name(OsStr::from_bytes(part))?;
    }
    Ok(())
}

/// The error of an open that met a special file: named, and never blocking.
pub fn special_kind(path: &Path, kind: Kind) -> Error {
    Error::Invalid(format!(
        "{} is {}, not a regular file",
        path.display(),
        kind.describe()
    ))
}

fn io_err(path: &Path, e: rustix::io::Errno) -> Error {
    Error::io(path, io::Error::from(e))
}

/// Whether an error says a path component was a symlink, or escaped the tree (ELOOP, EXDEV
/// from `RESOLVE_BENEATH`, ENOTDIR from a swapped directory).
pub fn is_swapped(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV) | Some(libc::ENOTDIR)))
}

/// The error to report for `path` when `e` says a component of it was swapped meanwhile: one
/// line saying so (what was found is never followed), instead of the raw ELOOP or EXDEV.
pub fn swapped_error(path: &Path, e: Error) -> Error {
    if is_swapped(&e) {
        Error::Invalid(format!(
            "{} was replaced while being read (a directory on its path became a symlink or \
             another file; nothing there was followed); retry",
            path.display()
        ))
    } else {
        e
    }
}

/// A held directory of a tree. Everything below it is reached through its fd.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// Opens the top of a tree, a path the operator named. Its last component must be a
    /// directory itself (a symlink there is refused); its ancestors are trusted.
    pub fn open(path: &Path) -> Result<Dir> {
        let fd = rustix::fs::open(
            path,
            BASE | OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::NOENT => Error::NotFound(format!("directory {}", path.display())),
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                Error::Invalid(format!("{} is not a directory", path.display()))
            }
            e => io_err(path, e),
        })?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The root of a detached copy of the mount at `path` (`open_tree(OPEN_TREE_CLONE)`,
    /// not followed if `path` is a symlink), refused unless it is a filesystem of type
    /// `fs_magic` (`statfs`'s `f_type`). A walk below it reaches the same filesystem and
    /// fills the same kernel caches as one through `path`, but the mount at `path` gains no
    /// user: `umount2(MNT_EXPIRE)` and a scan of `/proc` for paths under `path` see nothing
    /// of it. The copy goes when the last descriptor below it is closed.
    pub fn clone_mount(path: &Path, fs_magic: i64) -> Result<Dir> {
        use rustix::mount::OpenTreeFlags;
        let fd = rustix::mount::open_tree(
            rustix::fs::CWD,
            path,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err(path, e))?;
        // open_tree gives an `O_PATH` descriptor: a directory one is opened through it (the
        // copy, detached, lives on while a descriptor below it is open).
        let fd = rustix::fs::openat(
            &fd,
            ".",
            BASE | OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| io_err(path, e))?;
        let fs = rustix::fs::fstatfs(&fd).map_err(|e| io_err(path, e))?;
        #[allow(clippy::unnecessary_cast)] // f_type is i64 or u32 by target
        if fs.f_type as i64 != fs_magic {
            return Err(Error::Invalid(format!(
                "{} is not the mount expected there (filesystem type {:#x})",
                path.display(),
                fs.f_type
            )));
        }
        if !Stat::of_fd(&fd).map_err(|e| Error::io(path, e))?.is_dir() {
            return Err(Error::Invalid(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path this directory was reached by (for messages only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path()/rel`, for messages only.
    pub fn display_path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// A second handle on the same directory.
    pub fn try_clone(&self) -> Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone().map_err(|e| Error::io(&self.path, e))?,
            path: self.path.clone(),
        })
    }

    /// `openat2` of `rel` beneath this directory, no symlink in any component.
    fn open_rel(&self, rel: &Path, flags: OFlags, mode: u32) -> Result<OwnedFd> {
        check_rel(rel)?;
        let path = self.display_path(rel);
        rustix::fs::openat2(
            &self.fd,
            rel,
            BASE | flags,
            Mode::from_raw_mode(mode),
            BENEATH,
        )
        .map_err(|e| io_err(&path, e))
    }

    /// Opens the directory `rel` (a name, or a relative path of names) beneath this one.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> Result<Dir> {
        let rel = rel.as_ref();
        let fd = self.open_rel(rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        Ok(Dir {
            fd,
            path: self.display_path(rel),
        })
    }

    /// As [`Dir::open_dir`], `None` when there is nothing at `rel`.
    pub fn try_open_dir(&self, rel: impl AsRef<Path>) -> Result<Option<Dir>> {
        match self.open_dir(rel) {
            Ok(d) => Ok(Some(d)),
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the regular file `rel` for reading (`O_NOATIME` where allowed); anything else
    /// there (a FIFO, a device, a directory) is refused, naming it, without blocking.
    /// Returns the file and its `fstat`.
    pub fn open_file(&self, rel: impl AsRef<Path>) -> Result<(File, Stat)> {
        let rel = rel.as_ref();
        let fd = match self.open_rel(rel, OFlags::RDONLY | OFlags::NOATIME, 0) {
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => {
                self.open_rel(rel, OFlags::RDONLY, 0)?
            }
            other => other?,
        };
        let path = self.display_path(rel);
        let st = Stat::of_fd(&fd).map_err(|e| Error::io(&path, e))?;
        if st.kind() != Kind::File {
            return Err(special_kind(&path, st.kind()));
        }
        // O_NONBLOCK kept the open from blocking; reads of a regular file should block as
        // usual (a filesystem may honour the flag for them).
        rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| io_err(&path, e))?;
        Ok((File::from(fd), st))
    }

    /// As [`Dir::open_file`], for the file a walk found with stat `walked`: `None` when the
    /// name now holds another file (a different device or inode: it was replaced meanwhile),
    /// so the caller looks again instead of reading something it did not walk.
    pub fn open_walked(
        &self,
        rel: impl AsRef<Path>,
        walked: &Stat,
    ) -> Result<Option<(File, Stat)>> {
        let (f, st) = self.open_file(rel)?;
        Ok(st.same_object(walked).then_some((f, st)))
    }

    /// The `lstat` of `rel` (never followed); `None` when nothing is there.
    pub fn stat(&self, rel: impl AsRef<Path>) -> Result<Option<Stat>> {
        let rel = rel.as_ref();
        let (parent, name) = self.parent_of(rel)?;
        let dir = parent.as_ref().unwrap_or(self);
        match rustix::fs::statat(&dir.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => Ok(Some(Stat::from_raw(&s))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_err(&self.display_path(rel), e)),
        }
    }

    /// The `fstat` of this directory.
    pub fn stat_self(&self) -> Result<Stat> {
        Stat::of_fd(&self.fd).map_err(|e| Error::io(&self.path, e))
    }

    /// Splits `rel` into the held directory of its parent (`None`: this one) and its name.
    fn parent_of<'a>(&self, rel: &'a Path) -> Result<(Option<Dir>, &'a OsStr)> {
        check_rel(rel)?;
        let name = rel.file_name().ok_or_else(|| {
            Error::Invalid(format!("{:?} has no file name", rel.display().to_string()))
        })?;
        match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => Ok((Some(self.open_dir(p)?), name)),
            None => Ok((None, name)),
        }
    }

    /// The names in this directory (without `.` and `..`), sorted bytewise.
    pub fn entries(&self) -> Result<Vec<OsString>> {
        let mut out = Vec::new();
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(|e| io_err(&self.path, e))?;
        for ent in dir {
            let ent = ent.map_err(|e| io_err(&self.path, e))?;
            let name = ent.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(OsString::from_vec(name.to_vec()));
            }
        }
        out.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(out)
    }

    /// The names of the subdirectories in this directory, by the type its listing gives
    /// (`d_type`; an entry of unknown type is left out), in listing order, and how many
    /// entries it has in all (without `.` and `..`). One pass of `getdents`, no `stat`.
    pub fn subdirs(&self) -> Result<(Vec<OsString>, usize)> {
        let mut out = Vec::new();
        let mut all = 0;
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(|e| io_err(&self.path, e))?;
        for ent in dir {
            let ent = ent.map_err(|e| io_err(&self.path, e))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            all += 1;
            if ent.file_type() == rustix::fs::FileType::Directory {
                out.push(OsString::from_vec(name.to_vec()));
            }
        }
        Ok((out, all))
    }

    /// The target of the symlink `name` in this directory.
    pub fn read_link(&self, name: &OsStr) -> Result<Vec<u8>> {
        check_name(name)?;
        rustix::fs::readlinkat(&self.fd, name, Vec::new())
            .map(|c| c.into_bytes())
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// `/proc/self/fd/N/NAME`: the entry `name` of this held directory for the `l*` xattr
    /// calls. The `/proc/self/fd/N` part is the fd itself (a jump, not a path lookup), and
    /// `NAME`, the last component, is not followed by them.
    fn proc_path(&self, name: &OsStr) -> Result<CString> {
        check_name(name)?;
        let mut p = format!("/proc/self/fd/{}/", self.fd.as_raw_fd()).into_bytes();
        p.extend_from_slice(name.as_bytes());
        CString::new(p).map_err(|_| Error::Invalid("a name holds a NUL byte".into()))
    }

    /// The xattrs of the entry `name` (not followed), sorted; none where unsupported.
    pub fn xattrs_of(&self, name: &OsStr) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.xattrs_of_where(name, &mut |_| true)
    }

    /// As [`Dir::xattrs_of`], reading only the values of the names `want` accepts (it sees
    /// every name listed).
    pub fn xattrs_of_where(
        &self,
        name: &OsStr,
        want: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let p = self.proc_path(name)?;
        let path = self.display_path(name);
        read_xattrs(
            &path,
            |buf| rustix::fs::llistxattr(p.as_c_str(), buf),
            |n, buf| rustix::fs::lgetxattr(p.as_c_str(), n, buf),
            want,
        )
    }

    /// The xattrs of this directory itself, sorted; none where unsupported.
    pub fn xattrs_self(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.xattrs_self_where(&mut |_| true)
    }

    /// As [`Dir::xattrs_self`], reading only the values of the names `want` accepts.
    pub fn xattrs_self_where(
        &self,
        want: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        read_xattrs(
            &self.path,
            |buf| rustix::fs::flistxattr(&self.fd, buf),
            |n, buf| rustix::fs::fgetxattr(&self.fd, n, buf),
            want,
        )
    }

    /// Sets an xattr on the entry `name` (not followed).
    pub fn set_xattr(&self, name: &OsStr, key: &[u8], value: &[u8]) -> Result<()> {
        let p = self.proc_path(name)?;
        rustix::fs::lsetxattr(
            p.as_c_str(),
            OsStr::from_bytes(key),
            value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// The birth time of the entry `name` (not followed), where its filesystem records one
    /// (`statx` with `STATX_BTIME`: ext4, XFS, btrfs, tmpfs).
    pub fn birth_time(&self, name: &OsStr) -> Result<Option<(i64, i64)>> {
        check_name(name)?;
        let flags = rustix::fs::StatxFlags::BTIME;
        let x = rustix::fs::statx(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW, flags)
            .map_err(|e| io_err(&self.display_path(name), e))?;
        Ok((x.stx_mask & flags.bits() != 0)
            .then(|| (x.stx_btime.tv_sec, i64::from(x.stx_btime.tv_nsec))))
    }

    /// Removes the xattr `key` of the entry `name` (not followed); absent is not an error.
    pub fn remove_xattr(&self, name: &OsStr, key: &[u8]) -> Result<()> {
        let p = self.proc_path(name)?;
        match rustix::fs::lremovexattr(p.as_c_str(), OsStr::from_bytes(key)) {
            Ok(()) | Err(rustix::io::Errno::NODATA) => Ok(()),
            Err(e) => Err(io_err(&self.display_path(name), e)),
        }
    }

    /// The file handle of the entry `name` (not followed), as `name_to_handle_at(2)` encodes
    /// it for its filesystem: the handle type and its bytes (what overlayfs records as a
    /// copy's origin, see `workspace::hot`).
    pub fn file_handle(&self, name: &OsStr) -> Result<(i32, Vec<u8>)> {
        check_name(name)?;
        crate::fs::sys::name_to_handle(self.fd.as_fd(), name)
            .map_err(|e| Error::io(self.display_path(name), e))
    }

    /// Creates the directory `name` (it must not exist).
    pub fn create_dir(&self, name: &OsStr, mode: u32) -> Result<()> {
        check_name(name)?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode))
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Creates the regular file `name` for writing (it must not exist).
    pub fn create_file(&self, name: &OsStr, mode: u32) -> Result<File> {
        check_name(name)?;
        rustix::fs::openat(
            &self.fd,
            name,
            BASE | OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
        .map(File::from)
        .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Creates the symlink `name` pointing at `target` (stored as given, never followed).
    pub fn create_symlink(&self, target: &[u8], name: &OsStr) -> Result<()> {
        check_name(name)?;
        rustix::fs::symlinkat(OsStr::from_bytes(target), &self.fd, name)
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Makes `name` here a hard link of `existing` in `from` (neither followed).
    pub fn hard_link(&self, from: &Dir, existing: &OsStr, name: &OsStr) -> Result<()> {
        check_name(existing)?;
        check_name(name)?;
        rustix::fs::linkat(&from.fd, existing, &self.fd, name, AtFlags::empty())
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Renames `name` here to `to_name` in `to` (never replacing unless `replace`).
    pub fn rename(&self, name: &OsStr, to: &Dir, to_name: &OsStr, replace: bool) -> Result<()> {
        check_name(name)?;
        check_name(to_name)?;
        let flags = if replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        rustix::fs::renameat_with(&self.fd, name, &to.fd, to_name, flags)
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Exchanges `name` here and `other_name` in `other` atomically (`RENAME_EXCHANGE`).
    pub fn exchange(&self, name: &OsStr, other: &Dir, other_name: &OsStr) -> Result<()> {
        check_name(name)?;
        check_name(other_name)?;
        rustix::fs::renameat_with(&self.fd, name, &other.fd, other_name, RenameFlags::EXCHANGE)
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Removes the non-directory `name` (a symlink itself, never its target).
    pub fn remove_file(&self, name: &OsStr) -> Result<()> {
        check_name(name)?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Removes the empty directory `name`.
    pub fn remove_dir(&self, name: &OsStr) -> Result<()> {
        check_name(name)?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Removes `name` and, for a directory, everything below it, through held fds: a symlink
    /// is removed, never followed; an entry swapped meanwhile fails the removal, naming it.
    pub fn remove_all(&self, name: &OsStr) -> Result<()> {
        let Some(st) = self.stat(name)? else {
            return Ok(());
        };
        if st.is_dir() {
            let sub = self.open_dir(name)?;
            if !sub.stat_self()?.same_object(&st) {
                return Err(Error::Invalid(format!(
                    "{} changed while being removed",
                    sub.path().display()
                )));
            }
            for child in sub.entries()? {
                sub.remove_all(&child)?;
            }
            self.remove_dir(name)
        } else {
            self.remove_file(name)
        }
    }

    /// Sets the owner of the entry `name` (not followed).
    pub fn set_owner(&self, name: &OsStr, uid: u32, gid: u32) -> Result<()> {
        check_name(name)?;
        rustix::fs::chownat(
            &self.fd,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// Sets the permission bits of the entry `name`, which must not be a symlink (Linux has
    /// no mode on symlinks; one is left as it is): through an `O_PATH` fd of it.
    pub fn set_mode(&self, name: &OsStr, mode: u32) -> Result<()> {
        check_name(name)?;
        let path = self.display_path(name);
        let fd = rustix::fs::openat(&self.fd, name, BASE | OFlags::PATH, Mode::empty())
            .map_err(|e| io_err(&path, e))?;
        let st = Stat::of_fd(&fd).map_err(|e| Error::io(&path, e))?;
        if st.is_symlink() {
            return Ok(());
        }
        // fchmod does not take O_PATH fds; the magic link of one names exactly that inode.
        let p = format!("/proc/self/fd/{}", fd.as_raw_fd());
        rustix::fs::chmod(p.as_str(), Mode::from_raw_mode(mode)).map_err(|e| io_err(&path, e))
    }

    /// Sets the access and modification times of the entry `name` (not followed), in ns.
    pub fn set_times(&self, name: &OsStr, atime_ns: i64, mtime_ns: i64) -> Result<()> {
        check_name(name)?;
        let times = timestamps(atime_ns, mtime_ns);
        rustix::fs::utimensat(&self.fd, name, &times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err(&self.display_path(name), e))
    }

    /// `fsync` of this directory: makes its entries (creations, renames) durable.
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(|e| io_err(&self.path, e))
    }

    /// `syncfs` of the filesystem holding this directory: every earlier write there durable.
    pub fn sync_filesystem(&self) -> Result<()> {
        rustix::fs::syncfs(&self.fd).map_err(|e| io_err(&self.path, e))
    }

    /// Where this directory is now, as the kernel names the held fd (`/proc/self/fd/N`): a
    /// check on real paths (is it inside the store?) is then about the directory held, not
    /// about a path that could resolve elsewhere by the time it is used.
    pub fn real_path(&self) -> Result<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Creates the directory `name` (0700; it must not exist) and opens it, checking that what
    /// was opened is what was created: the entry's own `lstat`, owned by us and writable by
    /// nobody else. In a directory others can write, `name` can be swapped between the
    /// `mkdirat` and the open; a swapped-in symlink is refused by the open, a directory of
    /// someone else's by the owner check. Nobody else can write in the directory returned.
    pub fn create_private_dir(&self, name: &OsStr) -> Result<Dir> {
        self.create_dir(name, 0o700)?;
        let path = self.display_path(name);
        let entry = self.stat(name)?;
        let dir = self.open_dir(name)?;
        let held = dir.stat_self()?;
        if !private_and_ours(entry.as_ref(), &held, nix::unistd::geteuid().as_raw()) {
            return Err(Error::Invalid(format!(
                "{} was replaced while being created (is its parent writable by others?)",
                path.display()
            )));
        }
        Ok(dir)
    }
}

/// The check of [`Dir::create_private_dir`]: the directory held is the entry created (by
/// `lstat` of the name), owned by `euid`, and writable by nobody else.
fn private_and_ours(entry: Option<&Stat>, held: &Stat, euid: u32) -> bool {
    entry.is_some_and(|e| e.same_object(held)) && held.uid == euid && held.mode & 0o022 == 0
}

// Metadata of an open file or directory (rule 4): the fd is what was created or checked.

/// `fchown` of an open file or directory.
pub fn set_owner_fd(fd: impl AsFd, path: &Path, uid: u32, gid: u32) -> Result<()> {
    rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )
    .map_err(|e| io_err(path, e))
}

/// `fchmod` of an open file or directory.
pub fn set_mode_fd(fd: impl AsFd, path: &Path, mode: u32) -> Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| io_err(path, e))
}

/// `fsetxattr` on an open file or directory.
pub fn set_xattr_fd(fd: impl AsFd, path: &Path, key: &[u8], value: &[u8]) -> Result<()> {
    rustix::fs::fsetxattr(
        fd,
        OsStr::from_bytes(key),
        value,
        rustix::fs::XattrFlags::empty(),
    )
    .map_err(|e| io_err(path, e))
}

/// `futimens` of an open file or directory: access and modification times, in ns.
pub fn set_times_fd(fd: impl AsFd, path: &Path, atime_ns: i64, mtime_ns: i64) -> Result<()> {
    rustix::fs::futimens(fd, &timestamps(atime_ns, mtime_ns)).map_err(|e| io_err(path, e))
}

fn timestamps(atime_ns: i64, mtime_ns: i64) -> Timestamps {
    let ts = |ns: i64| Timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as _,
    };
    Timestamps {
        last_access: ts(atime_ns),
        last_modification: ts(mtime_ns),
    }
}

/// Opens the regular file at `path`, a path the operator or the store names (its ancestors are
/// trusted), without blocking: the last component is not followed unless `follow`, and
/// anything but a regular file is refused, naming it. `None` when nothing is there.
pub fn open_regular_path(path: &Path, follow: bool) -> Result<Option<(File, Stat)>> {
    let mut flags = BASE | OFlags::RDONLY;
    if follow {
        flags.remove(OFlags::NOFOLLOW);
    }
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    let st = Stat::of_fd(&fd).map_err(|e| Error::io(path, e))?;
    if st.kind() != Kind::File {
        return Err(special_kind(path, st.kind()));
    }
    rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| io_err(path, e))?;
    Ok(Some((File::from(fd), st)))
}

/// The xattrs of an open file, sorted; none where unsupported.
pub fn file_xattrs(f: &File, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    read_xattrs(
        path,
        |buf| rustix::fs::flistxattr(f, buf),
        |n, buf| rustix::fs::fgetxattr(f, n, buf),
        &mut |_| true,
    )
}

/// Whether an xattr call failed because the filesystem or the name does not support it.
pub fn is_unsupported_errno(e: rustix::io::Errno) -> bool {
    matches!(e, rustix::io::Errno::NOTSUP | rustix::io::Errno::NODATA)
}

/// Lists, then reads, every xattr that `want` accepts with the two calls given; bounded by
/// the kernel's limits.
fn read_xattrs(
    path: &Path,
    list: impl Fn(&mut [u8]) -> rustix::io::Result<usize>,
    get: impl Fn(&OsStr, &mut [u8]) -> rustix::io::Result<usize>,
    want: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    // Most lists and values are short: a small buffer first (a walk reads the xattrs of
    // every changed entry), the kernel's limits (XATTR_LIST_MAX, XATTR_SIZE_MAX) on ERANGE.
    let mut small = [0u8; 4096];
    let big;
    let names: &[u8] = match list(&mut small) {
        Ok(n) => &small[..n],
        Err(rustix::io::Errno::RANGE) => {
            let mut b = vec![0u8; 64 << 10];
            match list(&mut b) {
                Ok(n) => b.truncate(n),
                Err(e) if is_unsupported_errno(e) => return Ok(Vec::new()),
                Err(e) => return Err(io_err(path, e)),
            }
            big = b;
            &big
        }
        Err(e) if is_unsupported_errno(e) => return Ok(Vec::new()),
        Err(e) => return Err(io_err(path, e)),
    };
    let mut out = Vec::new();
    let mut value = [0u8; 4096];
    let mut big_value = Vec::new();
    for name in names.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        if !want(name) {
            continue;
        }
        let n = OsStr::from_bytes(name);
        let got = match get(n, &mut value) {
            Ok(len) => Ok(value[..len].to_vec()),
            Err(rustix::io::Errno::RANGE) => {
                big_value.resize(XATTR_MAX, 0);
                get(n, &mut big_value).map(|len| big_value[..len].to_vec())
            }
            Err(e) => Err(e),
        };
        match got {
            Ok(v) => out.push((name.to_vec(), v)),
            // Removed between the list and the read, or not readable here: not part of it.
            Err(e) if is_unsupported_errno(e) => {}
            Err(e) => return Err(io_err(path, e)),
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests;
