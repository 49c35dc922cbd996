//! Read-only views of stored history, without FUSE: [`View`] resolves names, stats, lists,
//! reads and answers xattr queries over one checkpoint root or over the whole store (the
//! browse namespace). `fuse.rs` is the thin fuser adapter that translates kernel requests into
//! these calls; everything here is unit-tested without a mount.
//!
//! ```text
//! checkpoint mount:  /  = root ROOT of checkpoint ID, lazily decoded below
//! browse mount:      /checkpoints/<64-hex id>/<root>/...   (immutable)
//!                    /labels/<name>    -> ../checkpoints/<id>
//!                    /branches/<name>  -> ../checkpoints/<id>   (moves with the branch)
//!                    /by-time/<YYYY-MM-DDTHH:MM:SS>[~N] -> ../checkpoints/<id>  (UTC; ~2, ~3...
//!                                      for later checkpoints within the same second)
//!                    /latest           -> checkpoints/<id> (newest by time)
//! ```
//!
//! Invariants:
//! - **Lazy**: creating a view reads one checkpoint record (or nothing, for browse); trees are
//!   decoded on first lookup/readdir, chunks read on first access.
//! - **Stable inodes**: a node id is a hash of (parent node id, name), so it is the same
//!   across walks and remounts and distinct across checkpoints, never derived from content
//!   (identical files stay distinct); the `st_ino` shown is the inode number the tree recorded
//!   ([`shown_ino`]), the same in every checkpoint; the names of a recorded link group share
//!   one node id ([`link_ino`]). See docs/inodes.md. The table only holds inodes the kernel
//!   references (lookup counts, dropped on forget), plus a bounded set of forgotten ones for
//!   file-handle lookups, so memory does not grow with what has been walked.
//! - **Bounded memory**: decoded trees and verified chunks sit in byte-budgeted LRU caches.
//! - **Never wrong bytes**: every object is hash-checked when loaded; a corrupt or missing
//!   object gives [`Error::Corrupt`] (EIO) for the entry that needs it, with a log line naming
//!   the path and the object, and the rest of the tree keeps working.
//!
//! Rooms: this file holds the types, construction, node lookup and directory listing;
//! `inodes.rs` numbers inodes and keeps the table of those the kernel holds; `browse.rs` the
//! browse namespace; `read.rs` chunk maps, reads and the byte-budgeted caches; `prefetch.rs`
//! readahead ahead of readers and walkers; `pin.rs` the lower view's pin; `bare.rs` the bare
//! lower view's xattr check (roots served without xattrs); `materialize.rs`
//! the copies big files pass through to, and `backing.rs` which opens do; `fuse.rs` the
//! adapter.

pub mod fuse;
pub mod materialize;

mod backing;
mod browse;
mod inodes;
pub mod lower;
mod pin;
mod prefetch;
mod read;
use lower::bare;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::{Checkpoint, RootRecord};
use crate::store::tree::{Entry, EntryKind, Tree};
use crate::store::Store;

pub use browse::BrowseDir;
pub use inodes::{child_ino, link_ino, path_key, shown_ino};
pub use read::OpenFile;

use inodes::Slot;
use pin::HeldPin;
use prefetch::PREFETCH_DIRS;
use read::{ByteLru, FILE_MAPS};

/// Inode number.
pub type Ino = u64;
/// The root directory of every view.
pub const ROOT_INO: Ino = 1;
/// Default total cache budget (trees + chunks) of a view. File data is cached by the kernel
/// (`KEEP_CACHE`), so the chunk cache only has to absorb requests that split a chunk.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;
/// `st_size` reported for directories (like a small ext4 directory).
const DIR_SIZE: u64 = 4096;

/// What kind of file a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// The attributes of a node, as reported by `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The node id: the kernel's handle on this one version of this entry in this checkpoint
    /// (requests, `forget` and file handles name it); a hash of (parent node id, name).
    pub ino: Ino,
    /// The `st_ino` shown: the file's identity, the same in every checkpoint
    /// ([`shown_ino`]; docs/inodes.md).
    pub st_ino: Ino,
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    /// The captured ctime, or the mtime when the tree did not record one.
    pub ctime_ns: i64,
    pub size: u64,
    pub nlink: u32,
}

impl Attr {
    /// `st_blocks` (512-byte units), rounded up to 4 KiB blocks as on a typical local disk.
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(4096) * 8
    }
}

/// What a node is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A stored directory: its tree.
    Dir(ObjectId),
    /// A stored file; its chunks are in the tree entry named by [`Node::entry`].
    File,
    Symlink(Arc<[u8]>),
    /// The top of the browse namespace.
    BrowseRoot,
    BrowseDir(BrowseDir),
    /// `checkpoints/<id>`: one directory per root.
    Checkpoint(ObjectId),
}

/// Where a node's tree entry is stored (for chunk lists and xattrs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef {
    pub tree: ObjectId,
    pub index: u32,
}

/// One file, directory or symlink of a view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub parent: Ino,
    pub name: Arc<[u8]>,
    /// Hash of the root's name and the path below it, the same in every checkpoint: the
    /// `st_ino` of entries whose tree recorded none ([`path_key`]).
    pub key: u64,
    /// The node id of the checkpoint root this node is in (itself for a root or a browse
    /// directory): the names of a linked file in one root share one node id ([`link_ino`]).
    pub root: Ino,
    pub attr: Attr,
    pub content: Content,
    pub entry: Option<EntryRef>,
    /// True for browse entries that can change (branches move, new checkpoints appear): the
    /// adapter gives them short TTLs. Everything below `checkpoints/<id>/` is immutable.
    pub volatile: bool,
}

/// Which history a view shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespace {
    /// One root of one checkpoint.
    Checkpoint { id: ObjectId, root: String },
    /// Every checkpoint, label and branch of the store.
    Browse,
}

/// Options for [`View::new`].
#[derive(Clone, Debug)]
pub struct ViewOptions {
    /// Total bytes for decoded trees (a quarter) and verified chunks (the rest).
    pub cache_bytes: u64,
    /// Disk budget of materialized copies of big files (passthrough backing files).
    pub file_cache_bytes: u64,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            cache_bytes: DEFAULT_CACHE_BYTES,
            file_cache_bytes: materialize::DEFAULT_FILE_CACHE_BYTES,
        }
    }
}

/// `statfs` figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub files: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// An open directory: a snapshot of its listing, so offsets stay valid while it changes.
#[derive(Debug)]
enum Listing {
    Tree { dir: Node, tree: Arc<Tree> },
    Synthetic { dir: Node, children: Vec<Node> },
}

/// What an open handle holds: a file's chunk map or a directory's listing.
enum Handle {
    File(Arc<OpenFile>),
    Dir(Arc<Listing>),
}

/// A read-only view; see the module doc. All methods take `&self` and are thread-safe.
pub struct View {
    store: Arc<Store>,
    namespace: Namespace,
    root: Node,
    inodes: Mutex<HashMap<Ino, Slot>>,
    trees: Arc<ByteLru<Arc<Tree>>>,
    /// Background tree loads in flight (bounded by [`prefetch::TREE_PREFETCH_THREADS`]).
    tree_prefetches: Arc<AtomicUsize>,
    chunks: ByteLru<Arc<Vec<u8>>>,
    /// Per directory tree: entries below this index have had their first object prefetched.
    sibling_prefetch: Mutex<LruCache<ObjectId, u32>>,
    checkpoints: Mutex<HashMap<ObjectId, Arc<Checkpoint>>>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Chunk maps of recently read files, by inode (reads without open handles).
    files: Mutex<LruCache<Ino, Arc<OpenFile>>>,
    /// Nodes the kernel forgot, for its file-handle lookups (`inodes::GHOSTS`).
    ghosts: Mutex<LruCache<Ino, Node>>,
    next_fh: AtomicU64,
    /// Time the view was created: mtime of the browse namespace's synthetic directories.
    created_ns: i64,
    /// Materialized copies of big files (passthrough backing files).
    copies: materialize::FileCache,
    /// The workspaces' lower view only: its pin, kept to the checkpoints whose directory the
    /// kernel holds (see [`View::keep_pin_to_held`]).
    held_pin: Option<HeldPin>,
    /// The bare lower view only: which trees are free of xattrs (see `bare.rs`).
    bare: Option<bare::Bare>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn dir_attr(ino: Ino, perm: u32, uid: u32, gid: u32, mtime_ns: i64, subdirs: u64) -> Attr {
    Attr {
        ino,
        st_ino: ino,
        kind: Kind::Dir,
        perm,
        uid,
        gid,
        mtime_ns,
        ctime_ns: mtime_ns,
        size: DIR_SIZE,
        nlink: u32::try_from(2 + subdirs).unwrap_or(u32::MAX),
    }
}

fn not_found(name: &[u8]) -> Error {
    Error::NotFound(String::from_utf8_lossy(name).into_owned())
}

impl View {
    /// Creates a view. A checkpoint view reads its checkpoint record (nothing else); a browse
    /// view reads nothing until the first lookup.
    ///
    /// # Errors
    /// `NotFound` for an unknown checkpoint or root; errors reading the checkpoint record.
    pub fn new(store: Store, namespace: Namespace, opts: &ViewOptions) -> Result<View> {
        let created_ns = crate::text::time::now_ns();
        let mut checkpoints = HashMap::new();
        let root = match &namespace {
            Namespace::Checkpoint { id, root } => {
                let c = store.read_checkpoint(id)?;
                let rec = c.roots.get(root).ok_or_else(|| {
                    Error::NotFound(format!("root {root:?} in checkpoint {}", id.short()))
                })?;
                let mut node = root_dir_node(ROOT_INO, 0, Arc::from(&b""[..]), root, rec);
                node.name = Arc::from(&b""[..]);
                checkpoints.insert(*id, Arc::new(c));
                node
            }
            Namespace::Browse => browse::root_node(&store, created_ns),
        };
        let budget = usize::try_from(opts.cache_bytes).unwrap_or(usize::MAX);
        let copies_dir = store.materialized_dir();
        let mut inodes = HashMap::new();
        inodes.insert(
            ROOT_INO,
            Slot {
                node: root.clone(),
                lookups: 1,
            },
        );
        Ok(View {
            store: Arc::new(store),
            namespace,
            root,
            inodes: Mutex::new(inodes),
            trees: Arc::new(ByteLru::new(budget / 4)),
            tree_prefetches: Arc::new(AtomicUsize::new(0)),
            chunks: ByteLru::new(budget - budget / 4),
            sibling_prefetch: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(PREFETCH_DIRS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            checkpoints: Mutex::new(checkpoints),
            handles: Mutex::new(HashMap::new()),
            ghosts: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(inodes::GHOSTS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            files: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(FILE_MAPS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            next_fh: AtomicU64::new(1),
            created_ns,
            copies: materialize::FileCache::new(copies_dir, opts.file_cache_bytes),
            held_pin: None,
            bare: None,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The node of an inode the kernel holds.
    ///
    /// # Errors
    /// `NotFound` (ENOENT) for an inode that is not (or no longer) known.
    pub fn node(&self, ino: Ino) -> Result<Node> {
        if ino == ROOT_INO {
            return Ok(self.root.clone());
        }
        lock(&self.inodes)
            .get(&ino)
            .map(|s| s.node.clone())
            .ok_or_else(|| Error::NotFound(format!("inode {ino}")))
    }

    /// Loads a decoded tree (cached). A failure is logged naming `what` and the object, and
    /// returned as `Corrupt` (EIO).
    fn tree(&self, id: &ObjectId, what: &dyn Fn() -> String) -> Result<Arc<Tree>> {
        if let Some(t) = self.trees.get(id) {
            return Ok(t);
        }
        let loaded = self
            .store
            .read_object(id)
            .and_then(|data| Tree::decode(&data).map(|t| (t, data.len())));
        match loaded {
            Ok((t, len)) => {
                let t = Arc::new(t);
                self.trees.insert(*id, t.clone(), len * 2 + 64);
                Ok(t)
            }
            Err(e) => {
                let path = what();
                log::error!("{path}: tree object {id}: {e}");
                Err(Error::Corrupt(format!("{path}: tree object {id}: {e}")))
            }
        }
    }

    /// Looks `name` up in directory `parent` and registers the result (one lookup count).
    ///
    /// # Errors
    /// `NotFound` (ENOENT) for a missing name, `Invalid`-mapped ENOTDIR for a non-directory
    /// parent, `Corrupt` (EIO) when a needed object is bad.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Node> {
        // The kernel decodes a file handle of an inode it evicted (overlayfs's origin of a
        // copied-up file, NFS export) by looking up "." in its node id, and finds a
        // directory's parent through "..".
        if name == b"." || name == b".." {
            let node = self.node_or_ghost(parent)?;
            let node = if name == b"." || node.attr.ino == ROOT_INO {
                node
            } else {
                self.node_or_ghost(node.parent)?
            };
            self.remember(&node)?;
            return Ok(node);
        }
        let dir = self.node(parent)?;
        let node = self.child(&dir, name)?;
        self.remember(&node)?;
        Ok(node)
    }

    /// The child `name` of `dir`, without registering it.
    pub fn child(&self, dir: &Node, name: &[u8]) -> Result<Node> {
        let ino = child_ino(dir.attr.ino, name);
        let parent = dir.attr.ino;
        let name_arc: Arc<[u8]> = Arc::from(name);
        match &dir.content {
            Content::Dir(tree_id) => {
                let tree = self.tree(tree_id, &|| self.path_of(parent))?;
                let index = tree
                    .entries
                    .binary_search_by(|e| e.name.as_slice().cmp(name))
                    .map_err(|_| not_found(name))?;
                let entry = &tree.entries[index];
                self.refuse_xattrs(parent, entry)?;
                Ok(entry_node(
                    dir,
                    name_arc,
                    entry,
                    EntryRef {
                        tree: *tree_id,
                        index: index as u32,
                    },
                ))
            }
            Content::File | Content::Symlink(_) => Err(Error::io_op(
                self.path_of(parent),
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            )),
            Content::BrowseRoot => self.browse_root_child(parent, name_arc, ino),
            Content::BrowseDir(which) => self.browse_child(*which, dir, name_arc, ino),
            Content::Checkpoint(id) => self.checkpoint_child(id, parent, name_arc, ino),
        }
    }

    /// Current attributes of an inode.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.node(ino)?.attr)
    }

    /// Target of a symlink.
    ///
    /// # Errors
    /// EINVAL (as `Invalid`) when the inode is not a symlink.
    pub fn readlink(&self, ino: Ino) -> Result<Arc<[u8]>> {
        match self.node(ino)?.content {
            Content::Symlink(t) => Ok(t),
            _ => Err(Error::Invalid(format!(
                "{} is not a symlink",
                self.path_of(ino)
            ))),
        }
    }

    /// The stored tree entry of a node, if it has one.
    fn stored_entry(&self, node: &Node) -> Result<Option<Entry>> {
        match node.entry {
            None => Ok(None),
            Some(r) => {
                let tree = self.tree(&r.tree, &|| self.path_of(node.parent))?;
                Ok(tree.entries.get(r.index as usize).cloned())
            }
        }
    }

    /// Closes a file or directory handle.
    pub fn release(&self, fh: u64) {
        lock(&self.handles).remove(&fh);
    }

    /// Opens a directory: snapshots its listing for [`View::dir_entry`].
    pub fn opendir(&self, ino: Ino) -> Result<u64> {
        let listing = self.listing(ino, true)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Handle::Dir(Arc::new(listing)));
        Ok(fh)
    }

    /// The listing of directory `ino` now; `prefetch` also starts loading its subtrees.
    fn listing(&self, ino: Ino, prefetch: bool) -> Result<Listing> {
        let dir = self.node(ino)?;
        Ok(match &dir.content {
            Content::Dir(id) => {
                let tree = self.tree(id, &|| self.path_of(ino))?;
                if prefetch {
                    self.prefetch_subtrees(&tree);
                }
                Listing::Tree { dir, tree }
            }
            Content::File | Content::Symlink(_) => {
                return Err(Error::io_op(
                    self.path_of(ino),
                    std::io::Error::from_raw_os_error(libc::ENOTDIR),
                ))
            }
            _ => {
                let names = self.synthetic_names(&dir)?;
                let mut children = Vec::with_capacity(names.len());
                for n in names {
                    match self.child(&dir, &n) {
                        Ok(c) => children.push(c),
                        // Gone between listing and lookup (or not yet complete): skip it.
                        Err(Error::NotFound(_)) => {}
                        // A root the bare view does not serve is not listed there.
                        Err(e) if bare::is_refusal(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Listing::Synthetic { dir, children }
            }
        })
    }

    /// Entry `index` of directory `ino` read without an open handle (the adapter answered
    /// OPENDIR with ENOSYS, so the kernel opens directories itself and reads with handle 0):
    /// the listing as it is now. A checkpoint's directories never change, so offsets stay
    /// valid; a browse directory may shift between calls. (The FUSE adapter takes the
    /// listing once per request instead, see `unopened_listing`; this is the tests' way.)
    #[cfg(test)]
    pub fn dir_entry_unopened(&self, ino: Ino, index: u64) -> Result<Option<(Vec<u8>, Node)>> {
        let listing = self.unopened_listing(ino, index)?;
        self.entry_of_listing(&listing, index)
    }

    /// The listing of directory `ino` read without an open handle, from `index` on: taken once
    /// per READDIR(PLUS) request by the FUSE adapter, not once per entry (a warm-up lists
    /// 100k entries, about 25 a request).
    fn unopened_listing(&self, ino: Ino, index: u64) -> Result<Arc<Listing>> {
        Ok(Arc::new(self.listing(ino, index == 0)?))
    }

    /// Entry `index` of an open directory: 0 is `.`, 1 is `..`, then the children in name
    /// order; `None` past the end. The offset of the next entry is `index + 1`. (The tests'
    /// way; the FUSE adapter takes `open_listing` once per request.)
    #[cfg(test)]
    pub fn dir_entry(&self, fh: u64, index: u64) -> Result<Option<(Vec<u8>, Node)>> {
        let listing = self.open_listing(fh)?;
        self.entry_of_listing(&listing, index)
    }

    /// The listing of the open directory `fh`.
    fn open_listing(&self, fh: u64) -> Result<Arc<Listing>> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::Dir(l)) => Ok(l.clone()),
            _ => Err(Error::io_op(
                format!("directory handle {fh}"),
                std::io::Error::from_raw_os_error(libc::EBADF),
            )),
        }
    }

    fn entry_of_listing(
        &self,
        listing: &Arc<Listing>,
        index: u64,
    ) -> Result<Option<(Vec<u8>, Node)>> {
        let dir = match &**listing {
            Listing::Tree { dir, .. } | Listing::Synthetic { dir, .. } => dir,
        };
        match index {
            0 => return Ok(Some((b".".to_vec(), dir.clone()))),
            1 => {
                let parent = if dir.attr.ino == ROOT_INO {
                    dir.clone()
                } else {
                    self.node(dir.parent).unwrap_or_else(|_| dir.clone())
                };
                return Ok(Some((b"..".to_vec(), parent)));
            }
            _ => {}
        }
        let i = (index - 2) as usize;
        match &**listing {
            Listing::Tree { dir, tree } => {
                let Content::Dir(tree_id) = dir.content else {
                    return Ok(None);
                };
                let Some(e) = tree.entries.get(i) else {
                    return Ok(None);
                };
                self.refuse_xattrs(dir.attr.ino, e)?;
                let name: Arc<[u8]> = Arc::from(e.name.as_slice());
                let node = entry_node(
                    dir,
                    name,
                    e,
                    EntryRef {
                        tree: tree_id,
                        index: i as u32,
                    },
                );
                Ok(Some((e.name.clone(), node)))
            }
            Listing::Synthetic { children, .. } => {
                Ok(children.get(i).map(|c| (c.name.to_vec(), c.clone())))
            }
        }
    }

    /// Value of an extended attribute.
    ///
    /// # Errors
    /// `NotFound` when absent: the adapter answers ENODATA (never ENOSYS).
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Option<Vec<u8>>> {
        let node = self.node(ino)?;
        Ok(self
            .xattrs_of(&node)?
            .into_iter()
            .find(|(k, _)| k.as_slice() == name)
            .map(|(_, v)| v))
    }

    /// Attribute names, each followed by a NUL (the `listxattr` wire format).
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let node = self.node(ino)?;
        let mut out = Vec::new();
        for (k, _) in &self.xattrs_of(&node)? {
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(out)
    }

    /// The recorded xattrs of a node: its tree entry's, or for the top directory of a
    /// checkpoint root (which no tree entry describes) its root record's. A workspace's root
    /// is that directory of the lower view (docs/inodes.md, "The workspace root").
    fn xattrs_of(&self, node: &Node) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if let Some(e) = self.stored_entry(node)? {
            return Ok(e.xattrs);
        }
        if node.root != node.attr.ino || !matches!(node.content, Content::Dir(_)) {
            return Ok(Vec::new());
        }
        let (id, root) = match &self.namespace {
            Namespace::Checkpoint { id, root } => (*id, root.clone()),
            Namespace::Browse => {
                let parent = self.node(node.parent)?;
                let id = std::str::from_utf8(&parent.name)
                    .ok()
                    .and_then(|h| ObjectId::parse(h).ok());
                let Some(id) = id else {
                    return Ok(Vec::new());
                };
                (id, String::from_utf8_lossy(&node.name).into_owned())
            }
        };
        Ok(self
            .checkpoint(&id)?
            .roots
            .get(&root)
            .map(|r| r.xattrs.clone())
            .unwrap_or_default())
    }

    /// `statfs` of the view: the checkpoint root's size and file count; for browse, the
    /// store's objects are not counted (that would need a walk), so zeros.
    pub fn statfs(&self) -> StatFs {
        let (bytes, files) = match &self.namespace {
            Namespace::Checkpoint { id, root } => lock(&self.checkpoints)
                .get(id)
                .and_then(|c| c.roots.get(root).map(|r| (r.bytes, r.files)))
                .unwrap_or((0, 0)),
            Namespace::Browse => (0, 0),
        };
        StatFs {
            blocks: bytes.div_ceil(4096),
            files,
            bsize: 4096,
            namelen: 255,
        }
    }
}

/// The top directory of root `root` of a checkpoint; its `st_ino` is its path key's, the same
/// in every checkpoint (a root record keeps no inode number).
fn root_dir_node(ino: Ino, parent: Ino, name: Arc<[u8]>, root: &str, rec: &RootRecord) -> Node {
    let key = inodes::root_key(root);
    let mut attr = dir_attr(
        ino,
        rec.mode & 0o7777,
        rec.uid,
        rec.gid,
        rec.mtime_ns,
        u64::from(rec.subdirs),
    );
    attr.st_ino = shown_ino(0, key);
    Node {
        parent,
        name,
        key,
        root: ino,
        attr,
        content: Content::Dir(rec.tree),
        entry: None,
        volatile: false,
    }
}

/// The node of stored entry `e` named `name` in directory `dir`.
fn entry_node(dir: &Node, name: Arc<[u8]>, e: &Entry, r: EntryRef) -> Node {
    // The names of a linked file are one inode to the kernel (one page cache, one file
    // handle: overlayfs's index keeps them joined across copy-up) and show one link count.
    let linked = e.nlink > 1 && matches!(e.kind, EntryKind::File { .. });
    let ino = if linked {
        inodes::link_ino(dir.root, e.ino)
    } else {
        child_ino(dir.attr.ino, &name)
    };
    let key = path_key(dir.key, &name);
    let parent = dir.attr.ino;
    let (kind, content, nlink, size) = match &e.kind {
        EntryKind::File { .. } => (Kind::File, Content::File, u64::from(e.nlink.max(1)), e.size),
        EntryKind::Dir { tree, subdirs } => (
            Kind::Dir,
            Content::Dir(*tree),
            2 + u64::from(*subdirs),
            DIR_SIZE,
        ),
        EntryKind::Symlink { target } => (
            Kind::Symlink,
            Content::Symlink(Arc::from(target.as_slice())),
            1,
            target.len() as u64,
        ),
    };
    Node {
        parent,
        name,
        key,
        root: dir.root,
        attr: Attr {
            ino,
            st_ino: shown_ino(e.ino, key),
            kind,
            perm: if kind == Kind::Symlink {
                0o777
            } else {
                e.mode & 0o7777
            },
            uid: e.uid,
            gid: e.gid,
            mtime_ns: e.mtime_ns,
            ctime_ns: if e.ctime_ns == 0 {
                e.mtime_ns
            } else {
                e.ctime_ns
            },
            size,
            nlink: u32::try_from(nlink).unwrap_or(u32::MAX),
        },
        content,
        entry: Some(r),
        volatile: false,
    }
}

#[cfg(test)]
mod tests;
