//! The thin fuser 0.18 adapter over [`View`]: translate each kernel request, delegate, reply
//! with the precise errno. No logic lives here beyond choosing TTLs and open flags; which big
//! files pass through is decided by `backing.rs` (`Opens`), which this asks and obeys.
//!
//! Who can see what:
//! - a view (`mount`, `browse`) is private by default: mounted without `allow_other`, so the
//!   kernel refuses every process whose uids and gids are not the mounter's (root's) before
//!   any request, cached entry or cached page is reached;
//! - `--allow-other` opens it to every local user, and `default_permissions` has the kernel
//!   check the captured owners and modes; only those then protect it, not the directories
//!   that held the original tree;
//! - a workspace is a kernel overlayfs: the kernel checks each agent against the captured,
//!   then edited, owners and modes of the overlay's files, and reads the lower layer with the
//!   credentials of whoever mounted the overlay (root), so the store's lower view under
//!   `STORE/run/lower` stays private and serves agents only through their workspace.
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
//! - a node id apart from the `st_ino` shown (patched fuser, `vendor/fuser/PATCHED.md`): node
//!   ids name one checkpoint's version of an entry, `st_ino` the file (docs/inodes.md);
//! - `FUSE_EXPORT_SUPPORT`: lookups of `.` and `..` in a node id answer for nodes the kernel
//!   holds or recently forgot, so overlayfs can decode the file handles it stores at copy-up;
//! - the workspaces' lower view answers OPENDIR with ENOSYS: the kernel opens directories
//!   itself (KEEP_CACHE, CACHE_DIR) with no OPENDIR/RELEASEDIR round trips, and reads them
//!   by inode;
//! - several worker threads (`n_threads`, `clone_fd`), since handlers block on disk reads;
//! - the workspaces' lower view lists every directory of a checkpoint root in the background
//!   when the kernel first looks the root up, so the kernel holds every entry's dentry before
//!   a `git status` asks for them one LOOKUP at a time (`warm.rs`);
//! - every write-side request answers EROFS (the mount is also `ro`); a missing xattr is
//!   ENODATA, never ENOSYS (which disables xattrs for the whole mount), except in the bare
//!   lower view, which serves only checkpoint roots without xattrs and answers GETXATTR and
//!   LISTXATTR with ENOSYS for exactly that reason (`bare.rs`).

use std::ffi::OsStr;
use std::io::{self, BufRead, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, BsdFileFlags, Config, CopyFileRangeFlags, Errno, FileAttr, FileHandle,
    FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, Session, SessionACL, TimeOrNow, WriteFlags,
};

use crate::error::Error;
use crate::view::backing::{self, OpenMode, OpenPlan, Opens};
use crate::view::lower::warm::Warmer;
use crate::view::{Attr, Content, Kind, Namespace, Node, View};

mod mount;
pub use mount::*;

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
    /// Open the mount to every local user (`allow_other`), the kernel checking the captured
    /// modes; without it only the mounting uid and gid (root) get in.
    pub allow_other: bool,
    /// Worker threads.
    pub threads: usize,
    /// The workspaces' lower view: the file recording its finished warm-ups
    /// ([`crate::view::lower::warm::Warmer::recording`]), which `mount --branch` waits on.
    pub warm_record: Option<PathBuf>,
    /// Set by the daemon when its mount goes or it is told to stop: ends the warm-ups.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

/// A mounted view, not serving yet: [`MountedView::run`] serves it until it is unmounted.
pub struct MountedView {
    session: Session<ViewFs>,
    /// Our end of fusermount3's socket (auto-unmount): it closes when this process dies, and
    /// fusermount3 then unmounts the dead mount.
    _auto_unmount: Option<OwnedFd>,
}

impl MountedView {
    /// Serves requests until the mount goes away.
    ///
    /// # Errors
    /// The session's final error.
    pub fn run(self) -> io::Result<()> {
        let MountedView {
            session,
            _auto_unmount: socket,
        } = self;
        let r = session.run();
        drop(socket);
        r
    }
}

/// The fuser filesystem: a [`View`] and the passthrough bookkeeping.
pub struct ViewFs {
    view: Arc<View>,
    opens: Opens<BackingId>,
    /// Where it is mounted (for [`ViewFs::connect`] and the warm-ups).
    mountpoint: Option<PathBuf>,
    /// The lower view's warm-ups of checkpoint roots ([`crate::view::lower::warm`]).
    warmer: Warmer,
}

/// How long a file-handle lookup waits for [`ViewFs::connect`].
const CONNECT_WAIT: Duration = Duration::from_millis(300);

/// Replies a tracked page-cache open of a big file.
fn reply_cached(fh: u64, reply: ReplyOpen) {
    reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
}

impl ViewFs {
    /// The listing a READDIR(PLUS) from `offset` reads, by the directory's handle, or by its
    /// inode when the kernel opened it itself (handle 0: OPENDIR answered ENOSYS); entries
    /// are then taken from it with `View::entry_of_listing`.
    fn dir_listing(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<crate::view::Listing>, Error> {
        if fh.0 == 0 {
            self.view.unopened_listing(ino.0, offset)
        } else {
            self.view.open_listing(fh.0)
        }
    }

    /// The loop `readdir` and `readdirplus` share: entries of directory `ino` from `offset`
    /// handed to `add`, which says whether the reply took the entry (`Ok(false)`: the reply is
    /// full). A failure at the first entry is the reply's error; a later one ends the reply
    /// early (the kernel asks again from there).
    fn fill_listing(
        &self,
        op: &str,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut add: impl FnMut(u64, &[u8], &Node) -> Result<bool, Error>,
    ) -> Result<(), Errno> {
        let listing = self
            .dir_listing(ino, fh, offset)
            .map_err(|e| fail(op, ino.0, &e))?;
        let mut index = offset;
        loop {
            let step = self
                .view
                .entry_of_listing(&listing, index)
                .and_then(|entry| match entry {
                    Some((name, node)) => add(index, &name, &node),
                    None => Ok(false),
                });
            match step {
                Ok(true) => index += 1,
                Ok(false) => return Ok(()),
                Err(e) if index == offset => return Err(fail(op, ino.0, &e)),
                Err(_) => return Ok(()),
            }
        }
    }

    pub fn new(view: Arc<View>) -> ViewFs {
        ViewFs {
            view,
            opens: Opens::new(),
            mountpoint: None,
            warmer: Warmer::default(),
        }
    }

    /// Before answering the kernel's `LOOKUP(node id, ".")` (it decodes a file handle of an
    /// inode it evicted): looks the node up by its path through the mount, from another
    /// thread, so the kernel makes the inode with a connected dentry. The handle's dentry is
    /// then that one; otherwise it is an anonymous alias, which this kernel's FUSE fails to
    /// revalidate, and overlayfs answers ESTALE for the copy whose origin it is (seen after a
    /// cache drop, at the second lookup of a copied-up file). Bounded by [`CONNECT_WAIT`]:
    /// the lookups it causes need free worker threads.
    fn connect(&self, ino: u64) {
        let (Some(mp), Some(rel)) = (&self.mountpoint, self.view.path_below(ino)) else {
            return;
        };
        let path = mp.join(rel);
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("connect".into())
            .spawn(move || {
                let r = std::fs::symlink_metadata(&path);
                let _ignored = tx.send(r.map(|_| ()));
            });
        if spawned.is_ok() {
            match rx.recv_timeout(CONNECT_WAIT) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::debug!("connecting node {ino}: {e}"),
                Err(_) => log::debug!("connecting node {ino}: no answer in {CONNECT_WAIT:?}"),
            }
        }
    }

    /// After the lookup of `node` in `parent`: in the workspaces' lower view, a checkpoint
    /// root (what an overlay stacks on) starts its warm-up ([`crate::view::lower::warm`]).
    fn warm_if_root(&self, parent: u64, node: &Node) {
        // Cheap tests first (this runs after every lookup): a root is its own `root`.
        if !self.view.is_lower() || node.attr.kind != Kind::Dir || node.root != node.attr.ino {
            return;
        }
        if !matches!(self.view.node(parent), Ok(p) if matches!(p.content, Content::Checkpoint(_))) {
            return;
        }
        if let (Some(mp), Some(rel)) = (&self.mountpoint, self.view.path_below(node.attr.ino)) {
            self.warmer.root_looked_up(node.attr.ino, mp, rel);
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
        ino: INodeNo(a.st_ino),
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
    fn destroy(&mut self) {
        self.warmer.stop();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // EXPORT_SUPPORT: the kernel may look up "." (and "..") in a node id to decode a file
        // handle, so overlayfs can follow `trusted.overlay.origin` from a copied-up file to
        // the lower file it came from after a cache drop, and show that file's inode number.
        let mut want = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_EXPORT_SUPPORT;
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
        if name.as_bytes() == b"." {
            self.connect(parent.0);
        }
        match self.view.lookup(parent.0, name.as_bytes()) {
            Ok(node) => {
                let t = ttl(&node);
                let attr = file_attr(&node.attr);
                // Before the reply: whoever looked the root up finds the warm-up started.
                self.warm_if_root(parent.0, &node);
                reply.entry_with_nodeid(INodeNo(node.attr.ino), &t, &t, &attr, Generation(0));
            }
            Err(Error::NotFound(_)) if name.as_bytes() == b"." || name.as_bytes() == b".." => {
                // A file handle of a node this daemon no longer knows: stale.
                reply.error(Errno::ESTALE)
            }
            Err(Error::NotFound(_)) => {
                // A negative entry for immutable directories: misses are cached too.
                match self.view.node(parent.0) {
                    Ok(dir) if !dir.volatile => {
                        let a = file_attr(&dir.attr);
                        reply.entry_with_nodeid(
                            INodeNo(0),
                            &LONG_TTL,
                            &LONG_TTL,
                            &a,
                            Generation(0),
                        );
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
        let mode = match self.opens.mode(&self.view, size) {
            // A clone's big file whose chunks are still on the remote: FUSE reads, fetched
            // chunk by chunk (a whole copy would make the first byte wait for all of them).
            OpenMode::Big if !self.view.chunks_local(ino.0) => OpenMode::Small,
            m => m,
        };
        match mode {
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
        if self.view.is_lower() {
            // The workspaces' lower view: overlayfs opens a lower directory for every
            // directory a process opens in a workspace (27k per `git status` of a 100k-file
            // repository). ENOSYS makes the kernel stop sending OPENDIR and RELEASEDIR for
            // the rest of the mount and open directories itself with KEEP_CACHE and
            // CACHE_DIR: listings are read once, then served from its cache.
            return match self.view.node(ino.0) {
                Ok(_) => reply.error(Errno::ENOSYS),
                Err(e) => reply.error(fail("opendir", ino.0, &e)),
            };
        }
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
        let filled = self.fill_listing("readdir", ino, fh, offset, |index, name, node| {
            let full = reply.add(
                INodeNo(node.attr.st_ino),
                index + 1,
                file_type(node.attr.kind),
                OsStr::from_bytes(name),
            );
            Ok(!full)
        });
        match filled {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let filled = self.fill_listing("readdirplus", ino, fh, offset, |index, name, node| {
            let dots = index < 2;
            // Every entry but . and .. adds a lookup count in the kernel.
            if !dots {
                self.view.remember(node)?;
                // A listing of `checkpoints/<id>` hands the kernel its roots' entries
                // without a lookup: their warm-ups start here then.
                self.warm_if_root(ino.0, node);
            }
            let full = reply.add(
                INodeNo(node.attr.ino),
                index + 1,
                OsStr::from_bytes(name),
                &ttl(node),
                &file_attr(&node.attr),
                Generation(0),
            );
            if full && !dots {
                self.view.forget(node.attr.ino, 1);
            }
            Ok(!full)
        });
        match filled {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        if self.view.is_bare() {
            // Nothing it serves has an xattr: the kernel stops asking, for the whole mount.
            return reply.error(Errno::ENOSYS);
        }
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
        if self.view.is_bare() {
            return reply.error(Errno::ENOSYS);
        }
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
