//! The thin fuser 0.18 adapter over [`View`]: translate each kernel request, delegate, reply
//! with the precise errno. No logic lives here beyond choosing TTLs and open flags; which big
//! files pass through is decided by `backing.rs` (`Opens`), which this asks and obeys.
//!
//! Choices, each made to save kernel round trips, daemon work or disk reads:
//! - immutable entries get long entry/attr TTLs and negative entries; browse entries that can
//!   change (`labels/`, `branches/`, `latest`...) get one second;
//! - files under 1 MiB open with `KEEP_CACHE` and handle 0 (the page cache serves them again
//!   without a READ); immutable directories get `CACHE_DIR`; `DO_READDIRPLUS` without
//!   `READDIRPLUS_AUTO`, so `ls -l` costs no lookups;
//! - files of 1 MiB or more are copied once, from their verified chunks, into an unnamed file
//!   in `STORE/cache/` ([`crate::view::materialize`]) and opened with FUSE passthrough to it:
//!   the kernel reads (and maps) the copy directly, no READ reaches the daemon. All opens of
//!   one inode share one backing id; a file already open in page-cache mode stays so until
//!   closed (mixing modes on one inode is ETXTBSY): the rules are in `backing.rs`. The
//!   stack depth is 1, so a kernel overlayfs can still use the mount as its lower layer. A
//!   copy that cannot be made (no space) leaves that file in the page cache. Without
//!   passthrough (`--file-cache-size 0`, the overlay lower view of workspaces, or a kernel
//!   that refuses it: not root, store on a stacked filesystem) OPEN is answered ENOSYS once
//!   checked: the kernel then opens every file itself with `KEEP_CACHE`, with no OPEN or
//!   RELEASE round trip at all;
//! - several worker threads (`n_threads`, `clone_fd`), since handlers block on disk reads;
//! - every write-side request answers EROFS (the mount is also `ro`); a missing xattr is
//!   ENODATA, never ENOSYS (which would disable xattrs for the whole mount).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, Config, CopyFileRangeFlags, Errno, FileAttr, FileHandle,
    FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    MountOption, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, Session, SessionACL, TimeOrNow, WriteFlags,
};

use crate::error::Error;
use crate::view::backing::{self, OpenMode, OpenPlan, Opens};
use crate::view::{Attr, Kind, Namespace, Node, View};

/// TTL of immutable entries and attributes.
const LONG_TTL: Duration = Duration::from_secs(24 * 3600);
/// TTL of browse entries that can change.
const SHORT_TTL: Duration = Duration::from_secs(1);

/// How to mount a view.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Source shown in /proc/self/mountinfo: `ckptfs:<store>:<what>`.
    pub fsname: String,
    /// Let fusermount3 unmount when the process dies, even by SIGKILL.
    pub auto_unmount: bool,
    /// Worker threads.
    pub threads: usize,
}

/// The fuser filesystem: a [`View`] and the passthrough bookkeeping.
pub struct ViewFs {
    view: Arc<View>,
    opens: Opens<BackingId>,
}

/// Replies a tracked page-cache open of a big file.
fn reply_cached(fh: u64, reply: ReplyOpen) {
    reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
}

impl ViewFs {
    pub fn new(view: Arc<View>) -> ViewFs {
        ViewFs {
            view,
            opens: Opens::new(),
        }
    }

    /// Opens a big file: passthrough to its materialized copy when possible, else a tracked
    /// page-cache open.
    fn open_big(&self, ino: u64, reply: ReplyOpen) {
        let fh = match self.opens.plan(ino) {
            OpenPlan::Shared { fh, backing } => {
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &backing);
                return;
            }
            OpenPlan::Cached { fh } => return reply_cached(fh, reply),
            OpenPlan::Materialize { fh } => fh,
        };
        let copy = match self.view.materialized(ino) {
            Ok(c) => c,
            Err(e) if backing::fails_open(&e) => {
                reply.error(fail("open", ino, &e));
                return;
            }
            Err(e) => {
                log::warn!(
                    "{}: {e}; reading it without passthrough",
                    self.view.path_of(ino)
                );
                self.opens.open_cached(ino, fh);
                return reply_cached(fh, reply);
            }
        };
        match reply.open_backing(&*copy) {
            Ok(id) => {
                let id = self.opens.attach(ino, fh, id);
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id);
            }
            Err(e) => {
                log::warn!("passthrough unavailable ({e}); reading files through the daemon");
                self.opens.refused(ino, fh);
                reply_cached(fh, reply);
            }
        }
    }
}

/// Mounts `view` at `mountpoint` (read-only) and returns the session, not yet running.
///
/// # Errors
/// The mount failure (mountpoint missing, FUSE unavailable, fusermount3 missing...).
pub fn mount(view: Arc<View>, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Session<ViewFs>> {
    let mut options = vec![
        MountOption::FSName(cfg.fsname.clone()),
        MountOption::Subtype("ckptfs".into()),
        MountOption::RO,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
        MountOption::DefaultPermissions,
    ];
    if cfg.auto_unmount {
        options.push(MountOption::AutoUnmount);
    }
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = SessionACL::All;
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    Session::new(ViewFs::new(view), mountpoint, &config)
}

fn time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    let t = time(a.mtime_ns);
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks(),
        atime: t,
        mtime: t,
        ctime: time(a.ctime_ns),
        crtime: t,
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn ttl(n: &Node) -> Duration {
    if n.volatile {
        SHORT_TTL
    } else {
        LONG_TTL
    }
}

fn errno(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

/// Logs a failed request (I/O and corruption are already logged where they happen).
fn fail(op: &str, ino: u64, e: &Error) -> Errno {
    match e {
        Error::NotFound(_) => log::trace!("{op} {ino}: {e}"),
        _ => log::debug!("{op} {ino}: {e}"),
    }
    errno(e)
}

impl Filesystem for ViewFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let mut want = InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_PARALLEL_DIROPS;
        if matches!(self.view.namespace(), Namespace::Checkpoint { .. }) {
            // Symlink targets never change in a checkpoint view.
            want |= InitFlags::FUSE_CACHE_SYMLINKS;
        }
        let want = want & config.capabilities();
        if let Err(unsupported) = config.add_capabilities(want) {
            log::warn!("kernel refused FUSE capabilities {unsupported:?}");
        }
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            if let Err(e) = config.set_max_readahead(max) {
                log::warn!("could not set max_readahead {max}: nearest {e}");
            }
        }
        if let Err(e) = config.set_max_background(64) {
            log::warn!("could not set max_background 64: nearest {e}");
        }
        // Passthrough for big files: stack depth 1 (backing files on a plain filesystem) keeps
        // this mount usable as a kernel overlayfs lower layer (overlay adds one, the limit is 2).
        if self.view.passthrough_wanted()
            && config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH)
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok()
        {
            self.opens.enable();
        }
        log::info!("view ready: {:?}", self.view.namespace());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        log::trace!("lookup {parent} {name:?}");
        match self.view.lookup(parent.0, name.as_bytes()) {
            Ok(node) => reply.entry(&ttl(&node), &file_attr(&node.attr), Generation(0)),
            Err(Error::NotFound(_)) => {
                // A negative entry for immutable directories: misses are cached too.
                match self.view.node(parent.0) {
                    Ok(dir) if !dir.volatile => {
                        let mut a = file_attr(&dir.attr);
                        a.ino = INodeNo(0);
                        reply.entry(&LONG_TTL, &a, Generation(0));
                    }
                    _ => reply.error(Errno::ENOENT),
                }
            }
            Err(e) => reply.error(fail("lookup", parent.0, &e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        log::trace!("getattr {ino}");
        match self.view.node(ino.0) {
            Ok(n) => reply.attr(&ttl(&n), &file_attr(&n.attr)),
            Err(e) => reply.error(fail("getattr", ino.0, &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.view.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(fail("readlink", ino.0, &e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        log::trace!("open {ino}");
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            reply.error(Errno::EROFS);
            return;
        }
        let size = match self.view.file_size(ino.0) {
            Ok(size) => size,
            Err(e) => return reply.error(fail("open", ino.0, &e)),
        };
        match self.opens.mode(&self.view, size) {
            // No passthrough (--file-cache-size 0, overlay lower layers, a kernel that refused
            // it): answer ENOSYS once the file is checked. The kernel counts that as success,
            // stops sending OPEN and RELEASE for the rest of the mount (one round trip each
            // per file, which dominate `grep -r` and an overlay's first reads), and opens with
            // KEEP_CACHE; reads arrive with handle 0.
            OpenMode::NoOpen => reply.error(Errno::ENOSYS),
            OpenMode::Big => self.open_big(ino.0, reply),
            // Small files: the page cache, kept across opens; reads arrive with handle 0.
            OpenMode::Small => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        log::trace!("read {ino} {offset}+{size}");
        let mut reply = Some(reply);
        let send = |data: &[u8]| {
            if let Some(r) = reply.take() {
                r.data(data);
            }
        };
        // Reads are by inode: handles only track passthrough and page-cache opens.
        if let Err(e) = self.view.read_ino_with(ino.0, offset, size, send) {
            if let Some(r) = reply.take() {
                r.error(fail("read", ino.0, &e));
            }
        }
    }

    /// Nothing to flush on a read-only view. ENOSYS makes the kernel stop sending FLUSH for
    /// the rest of the mount, saving one round trip per close(2) (`grep -r` closes every file).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.opens.release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        log::trace!("opendir {ino}");
        let volatile = match self.view.node(ino.0) {
            Ok(n) => n.volatile,
            Err(e) => {
                reply.error(fail("opendir", ino.0, &e));
                return;
            }
        };
        match self.view.opendir(ino.0) {
            Ok(fh) => {
                let flags = if volatile {
                    FopenFlags::empty()
                } else {
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                };
                reply.opened(FileHandle(fh), flags)
            }
            Err(e) => reply.error(fail("opendir", ino.0, &e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        log::trace!("readdir {ino} @{offset}");
        let mut index = offset;
        loop {
            match self.view.dir_entry(fh.0, index) {
                Ok(Some((name, node))) => {
                    if reply.add(
                        INodeNo(node.attr.ino),
                        index + 1,
                        file_type(node.attr.kind),
                        OsStr::from_bytes(&name),
                    ) {
                        break;
                    }
                    index += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    if index == offset {
                        reply.error(fail("readdir", ino.0, &e));
                        return;
                    }
                    break;
                }
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        log::trace!("readdirplus {ino} @{offset}");
        let mut index = offset;
        loop {
            match self.view.dir_entry(fh.0, index) {
                Ok(Some((name, node))) => {
                    let dots = index < 2;
                    // Every entry but . and .. adds a lookup count in the kernel.
                    if !dots {
                        if let Err(e) = self.view.remember(&node) {
                            if index == offset {
                                reply.error(fail("readdirplus", ino.0, &e));
                                return;
                            }
                            break;
                        }
                    }
                    let full = reply.add(
                        INodeNo(node.attr.ino),
                        index + 1,
                        OsStr::from_bytes(&name),
                        &ttl(&node),
                        &file_attr(&node.attr),
                        Generation(0),
                    );
                    if full {
                        if !dots {
                            self.view.forget(node.attr.ino, 1);
                        }
                        break;
                    }
                    index += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    if index == offset {
                        reply.error(fail("readdirplus", ino.0, &e));
                        return;
                    }
                    break;
                }
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.view.release(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.view.statfs();
        reply.statfs(s.blocks, 0, 0, s.files, 0, s.bsize, s.namelen, s.bsize);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.view.getxattr(ino.0, name.as_bytes()) {
            Ok(Some(v)) => {
                if size == 0 {
                    reply.size(v.len() as u32);
                } else if v.len() > size as usize {
                    reply.error(Errno::ERANGE);
                } else {
                    reply.data(&v);
                }
            }
            Ok(None) => reply.error(Errno::NO_XATTR),
            Err(e) => reply.error(fail("getxattr", ino.0, &e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.view.listxattr(ino.0) {
            Ok(v) => {
                if size == 0 {
                    reply.size(v.len() as u32);
                } else if v.len() > size as usize {
                    reply.error(Errno::ERANGE);
                } else {
                    reply.data(&v);
                }
            }
            Err(e) => reply.error(fail("listxattr", ino.0, &e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            reply.error(Errno::EROFS);
            return;
        }
        match self.view.node(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(fail("access", ino.0, &e)),
        }
    }

    // Every write-side operation: EROFS.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }
}
