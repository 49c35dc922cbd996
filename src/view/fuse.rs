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
use crate::view::warm::Warmer;
use crate::view::{Attr, Content, Kind, Namespace, Node, View};

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
    /// ([`crate::view::warm::Warmer::recording`]), which `mount --branch` waits on.
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
    /// The lower view's warm-ups of checkpoint roots ([`crate::view::warm`]).
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
    /// root (what an overlay stacks on) starts its warm-up ([`crate::view::warm`]).
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
            if let Err(u) = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH) {
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
fn fusermount_bin() -> PathBuf {
    crate::fs::programs::system_program("fusermount3")
}

/// Mounts with fusermount3's protocol (libfuse's): it opens /dev/fuse, mounts it with
/// `options` and sends the device back over the socket named by `_FUSE_COMMFD`. With
/// `auto_unmount` it stays, and once our end of that socket closes (this process ended,
/// however) it unmounts the mount if it is dead. Returns the device and, with
/// `auto_unmount`, our end of the socket, to keep open while serving.
fn fusermount(
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
fn receive_fd(socket: &UnixStream) -> io::Result<Option<OwnedFd>> {
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
        let listing = match self.dir_listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(fail("readdir", ino.0, &e)),
        };
        let mut index = offset;
        loop {
            match self.view.entry_of_listing(&listing, index) {
                Ok(Some((name, node))) => {
                    if reply.add(
                        INodeNo(node.attr.st_ino),
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
        let listing = match self.dir_listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(fail("readdirplus", ino.0, &e)),
        };
        let mut index = offset;
        loop {
            match self.view.entry_of_listing(&listing, index) {
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
                        // A listing of `checkpoints/<id>` hands the kernel its roots' entries
                        // without a lookup: their warm-ups start here then.
                        self.warm_if_root(ino.0, &node);
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
