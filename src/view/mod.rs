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
//! - **Stable inodes**: an inode number is a hash of (parent inode, name), so it is the same
//!   across walks and remounts, never derived from content (identical files stay distinct);
//!   its low 32 bits are the captured inode number when the tree recorded one ([`entry_ino`]).
//!   The table only holds inodes the kernel references (lookup counts, dropped on forget), so
//!   memory does not grow with what has been walked.
//! - **Bounded memory**: decoded trees and verified chunks sit in byte-budgeted LRU caches.
//! - **Never wrong bytes**: every object is hash-checked when loaded; a corrupt or missing
//!   object gives [`Error::Corrupt`] (EIO) for the entry that needs it, with a log line naming
//!   the path and the object, and the rest of the tree keeps working.

pub mod fuse;
pub mod materialize;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::{Checkpoint, RootRecord};
use crate::store::pin::{Pin, PinGuard};
use crate::store::tree::{Chunk, Entry, EntryKind, Tree};
use crate::store::Store;
use crate::util::{check_name, format_utc};

/// Inode number.
pub type Ino = u64;
/// The root directory of every view.
pub const ROOT_INO: Ino = 1;
/// Inode numbers below this are reserved; hashed numbers are moved above it.
const FIRST_HASHED_INO: Ino = 1 << 10;
/// Default total cache budget (trees + chunks) of a view. File data is cached by the kernel
/// (`KEEP_CACHE`), so the chunk cache only has to absorb requests that split a chunk.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;
/// Chunks of an open file whose objects are prefetched (`POSIX_FADV_WILLNEED`) ahead of the
/// one being read: at 256 KiB average, 4 MiB of kernel readahead into the store's files.
const CHUNKS_AHEAD: usize = 16;
/// Files after the one being opened, in the same directory, whose first object is prefetched:
/// `grep -r`, `tar` and `cp -r` open a directory's files in listing order.
const SIBLINGS_AHEAD: u32 = 16;
/// Subdirectory trees prefetched when a directory is opened: walkers (`find`, `ls -R`,
/// `du`) open them next, and one disk read per directory in sequence is what makes a cold
/// walk slow.
const SUBDIRS_AHEAD: usize = 256;
/// Chunk maps of files kept for reads without open handles.
const FILE_MAPS: usize = 4096;
/// Threads decoding subdirectory trees ahead of a walk. They mostly wait for the disk, so
/// more than the cores: cold `find` of the large room took 2.55-3.02 s with 2, 2.14-2.55 s
/// with 8.
const TREE_PREFETCH_THREADS: usize = 8;
/// Directories whose sibling-prefetch position is remembered.
const PREFETCH_DIRS: usize = 1024;
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
    pub ino: Ino,
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

/// The synthetic directories of the browse namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrowseDir {
    Checkpoints,
    Labels,
    Branches,
    ByTime,
}

impl BrowseDir {
    const ALL: [(&'static [u8], BrowseDir); 4] = [
        (b"branches", BrowseDir::Branches),
        (b"by-time", BrowseDir::ByTime),
        (b"checkpoints", BrowseDir::Checkpoints),
        (b"labels", BrowseDir::Labels),
    ];
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

/// An open file: its chunk list and where each chunk starts.
#[derive(Debug)]
pub struct OpenFile {
    pub ino: Ino,
    chunks: Vec<Chunk>,
    starts: Vec<u64>,
    size: u64,
    /// Chunks below this index have been prefetched.
    advised: AtomicUsize,
}

/// An open directory: a snapshot of its listing, so offsets stay valid while it changes.
#[derive(Debug)]
enum Listing {
    Tree { dir: Node, tree: Arc<Tree> },
    Synthetic { dir: Node, children: Vec<Node> },
}

/// Cached values with their charged size, and the total charged.
type Charged<V> = (LruCache<ObjectId, (V, usize)>, usize);

/// A byte-budgeted LRU of immutable values keyed by object id.
struct ByteLru<V: Clone> {
    inner: Mutex<Charged<V>>,
    budget: usize,
}

impl<V: Clone> ByteLru<V> {
    fn new(budget: usize) -> Self {
        ByteLru {
            inner: Mutex::new((LruCache::unbounded(), 0)),
            budget,
        }
    }

    fn get(&self, id: &ObjectId) -> Option<V> {
        lock(&self.inner).0.get(id).map(|(v, _)| v.clone())
    }

    fn insert(&self, id: ObjectId, v: V, bytes: usize) {
        if bytes > self.budget {
            return;
        }
        let mut g = lock(&self.inner);
        let (cache, total) = &mut *g;
        if let Some((_, old)) = cache.put(id, (v, bytes)) {
            *total -= old;
        }
        *total += bytes;
        while *total > self.budget {
            match cache.pop_lru() {
                Some((_, (_, b))) => *total -= b,
                None => break,
            }
        }
    }

    fn bytes(&self) -> usize {
        lock(&self.inner).1
    }
}

struct Slot {
    node: Node,
    lookups: u64,
}

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
    /// Background tree loads in flight (bounded by [`TREE_PREFETCH_THREADS`]).
    tree_prefetches: Arc<AtomicUsize>,
    chunks: ByteLru<Arc<Vec<u8>>>,
    /// Per directory tree: entries below this index have had their first object prefetched.
    sibling_prefetch: Mutex<LruCache<ObjectId, u32>>,
    checkpoints: Mutex<HashMap<ObjectId, Arc<Checkpoint>>>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Chunk maps of recently read files, by inode (reads without open handles).
    files: Mutex<LruCache<Ino, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    /// Time the view was created: mtime of the browse namespace's synthetic directories.
    created_ns: i64,
    /// Materialized copies of big files (passthrough backing files).
    copies: materialize::FileCache,
    /// The workspaces' lower view only: its pin, kept to the checkpoints whose directory the
    /// kernel holds (see [`View::keep_pin_to_held`]).
    held_pin: Option<HeldPin>,
}

/// A pin that lists the checkpoints the kernel holds a `checkpoints/<id>` directory of.
struct HeldPin {
    guard: PinGuard,
    pin: Mutex<Pin>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The inode number of stored entry `e` whose [`child_ino`] is `hashed`: its low 32 bits
/// replaced by the inode number the entry had when captured, if recorded. Tools that cache
/// stat data compare those bits (git's index keeps `st_ino` as 32 bits), so a restored tree
/// looks unchanged to them; the high bits, from the path, keep numbers distinct across the
/// checkpoints of one view.
pub fn entry_ino(hashed: Ino, e: &Entry) -> Ino {
    if e.ino == 0 {
        return hashed;
    }
    let high = hashed & 0x7fff_ffff_0000_0000;
    // Never in the reserved range, even with all-zero high bits (2^-31 odds).
    let high = if high == 0 { 1 << 32 } else { high };
    high | (e.ino & 0xffff_ffff)
}

/// The inode number of `name` in directory `parent`: stable across walks and remounts.
pub fn child_ino(parent: Ino, name: &[u8]) -> Ino {
    let mut h = Sha256::new();
    h.update(parent.to_le_bytes());
    h.update(name);
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    let ino = u64::from_le_bytes(b) & (u64::MAX >> 1);
    if ino < FIRST_HASHED_INO {
        ino + FIRST_HASHED_INO
    } else {
        ino
    }
}

fn dir_attr(ino: Ino, perm: u32, uid: u32, gid: u32, mtime_ns: i64, subdirs: u64) -> Attr {
    Attr {
        ino,
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

fn hex_name(name: &[u8]) -> Option<ObjectId> {
    let s = std::str::from_utf8(name).ok()?;
    if s.len() != 64 || s.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    ObjectId::parse(s).ok()
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
        let created_ns = crate::util::now_ns();
        let mut checkpoints = HashMap::new();
        let root = match &namespace {
            Namespace::Checkpoint { id, root } => {
                let c = store.read_checkpoint(id)?;
                let rec = c.roots.get(root).ok_or_else(|| {
                    Error::NotFound(format!("root {root:?} in checkpoint {}", id.short()))
                })?;
                let node = root_dir_node(ROOT_INO, 0, Arc::from(&b""[..]), rec);
                checkpoints.insert(*id, Arc::new(c));
                node
            }
            Namespace::Browse => {
                let (uid, gid) = store_owner(&store);
                Node {
                    parent: ROOT_INO,
                    name: Arc::from(&b""[..]),
                    attr: dir_attr(ROOT_INO, 0o555, uid, gid, created_ns, 4),
                    content: Content::BrowseRoot,
                    entry: None,
                    volatile: true,
                }
            }
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
            files: Mutex::new(LruCache::new(
                std::num::NonZeroUsize::new(FILE_MAPS).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            next_fh: AtomicU64::new(1),
            created_ns,
            copies: materialize::FileCache::new(copies_dir, opts.file_cache_bytes),
            held_pin: None,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Bytes currently held by the tree and chunk caches.
    pub fn cache_usage(&self) -> (usize, usize) {
        (self.trees.bytes(), self.chunks.bytes())
    }

    /// Number of inodes the kernel currently references (plus the root).
    pub fn inode_count(&self) -> usize {
        lock(&self.inodes).len()
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

    /// The path of an inode below the mount, for log lines.
    pub fn path_of(&self, ino: Ino) -> String {
        let inodes = lock(&self.inodes);
        let mut parts: Vec<String> = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO && parts.len() < 4096 {
            match inodes.get(&cur) {
                Some(s) => {
                    parts.push(String::from_utf8_lossy(&s.node.name).into_owned());
                    cur = s.node.parent;
                }
                None => {
                    parts.push(format!("<inode {cur}>"));
                    break;
                }
            }
        }
        parts.reverse();
        let rel = parts.join("/");
        match &self.namespace {
            Namespace::Checkpoint { id, root } => format!("{}:{root}/{rel}", id.short()),
            Namespace::Browse => format!("/{rel}"),
        }
    }

    fn path_with(&self, parent: Ino, name: &[u8]) -> String {
        let p = self.path_of(parent);
        let sep = if p.ends_with('/') { "" } else { "/" };
        format!("{p}{sep}{}", String::from_utf8_lossy(name))
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

    fn checkpoint(&self, id: &ObjectId) -> Result<Arc<Checkpoint>> {
        if let Some(c) = lock(&self.checkpoints).get(id) {
            return Ok(c.clone());
        }
        let c = Arc::new(self.store.read_checkpoint(id)?);
        lock(&self.checkpoints).insert(*id, c.clone());
        Ok(c)
    }

    /// Registers a node the kernel now references (one lookup count).
    ///
    /// # Errors
    /// `Corrupt` (EIO) on an inode-number collision between two different names (2^-63 odds
    /// per pair); logged.
    pub fn remember(&self, node: &Node) -> Result<()> {
        if node.attr.ino == ROOT_INO {
            return Ok(());
        }
        let mut inodes = lock(&self.inodes);
        if let Content::Checkpoint(id) = &node.content {
            if !inodes.contains_key(&node.attr.ino) {
                // Pinned before the kernel hears of it, so gc never finds it reachable and
                // unpinned; a pin that cannot be written fails the lookup.
                self.hold_in_pin(id, true)?;
            }
        }
        match inodes.get_mut(&node.attr.ino) {
            Some(slot) => {
                if slot.node.parent != node.parent || slot.node.name != node.name {
                    drop(inodes);
                    let msg = format!(
                        "inode number collision between {} and {}",
                        self.path_of(node.attr.ino),
                        self.path_with(node.parent, &node.name)
                    );
                    log::error!("{msg}");
                    return Err(Error::Corrupt(msg));
                }
                // Browse entries can change (a branch moved): keep the newest.
                slot.node = node.clone();
                slot.lookups += 1;
            }
            None => {
                inodes.insert(
                    node.attr.ino,
                    Slot {
                        node: node.clone(),
                        lookups: 1,
                    },
                );
            }
        }
        Ok(())
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut inodes = lock(&self.inodes);
        if let Some(slot) = inodes.get_mut(&ino) {
            slot.lookups = slot.lookups.saturating_sub(n);
            if slot.lookups == 0 {
                if let Content::Checkpoint(id) = &slot.node.content {
                    // Nothing the kernel holds can reach it through this view any more.
                    if let Err(e) = self.hold_in_pin(id, false) {
                        log::warn!("unpinning checkpoint {}: {e}", id.short());
                    }
                }
                inodes.remove(&ino);
            }
        }
    }

    /// Makes this view's pin follow the kernel: a checkpoint is pinned from its first lookup
    /// until the kernel forgets its directory. For the workspaces' lower view, so gc can
    /// prune the checkpoints no overlay uses while workspaces are mounted, yet keeps the base
    /// of an overlay that `switch` or `umount` detached while a process still works in it:
    /// that overlay holds the lower root `checkpoints/<id>/<root>`, so the kernel holds its
    /// parent, and forgets it only once the overlay is gone and the entry evicted.
    pub fn keep_pin_to_held(&mut self, guard: PinGuard, pin: Pin) {
        self.held_pin = Some(HeldPin {
            guard,
            pin: Mutex::new(pin),
        });
    }

    fn hold_in_pin(&self, id: &ObjectId, held: bool) -> Result<()> {
        let Some(h) = &self.held_pin else {
            return Ok(());
        };
        let mut pin = lock(&h.pin);
        let at = pin.checkpoints.binary_search(id);
        match (at, held) {
            (Err(i), true) => pin.checkpoints.insert(i, *id),
            (Ok(i), false) => {
                pin.checkpoints.remove(i);
            }
            _ => return Ok(()),
        }
        h.guard.replace_unlocked(&pin)
    }

    /// Looks `name` up in directory `parent` and registers the result (one lookup count).
    ///
    /// # Errors
    /// `NotFound` (ENOENT) for a missing name, `Invalid`-mapped ENOTDIR for a non-directory
    /// parent, `Corrupt` (EIO) when a needed object is bad.
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Node> {
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
                Ok(entry_node(
                    parent,
                    name_arc,
                    entry_ino(ino, entry),
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
            Content::Checkpoint(id) => {
                let c = self.checkpoint(id)?;
                let root = std::str::from_utf8(name).map_err(|_| not_found(name))?;
                let rec = c.roots.get(root).ok_or_else(|| not_found(name))?;
                Ok(root_dir_node(ino, parent, name_arc, rec))
            }
        }
    }

    fn symlink_node(&self, parent: Ino, name: Arc<[u8]>, ino: Ino, target: String) -> Node {
        let (uid, gid) = store_owner(&self.store);
        let target: Arc<[u8]> = Arc::from(target.into_bytes().into_boxed_slice());
        Node {
            parent,
            name,
            attr: Attr {
                ino,
                kind: Kind::Symlink,
                perm: 0o777,
                uid,
                gid,
                mtime_ns: self.created_ns,
                ctime_ns: self.created_ns,
                size: target.len() as u64,
                nlink: 1,
            },
            content: Content::Symlink(target),
            entry: None,
            volatile: true,
        }
    }

    fn latest(&self) -> Result<Option<ObjectId>> {
        let mut best: Option<(i64, ObjectId)> = None;
        for id in self.store.list_checkpoints()? {
            let c = self.checkpoint(&id)?;
            if best.map_or(true, |(t, bid)| (c.time_ns, id) > (t, bid)) {
                best = Some((c.time_ns, id));
            }
        }
        Ok(best.map(|(_, id)| id))
    }

    fn browse_root_child(&self, parent: Ino, name: Arc<[u8]>, ino: Ino) -> Result<Node> {
        if &*name == b"latest" {
            let id = self.latest()?.ok_or_else(|| not_found(&name))?;
            return Ok(self.symlink_node(parent, name, ino, format!("checkpoints/{id}")));
        }
        let which = BrowseDir::ALL
            .iter()
            .find(|(n, _)| *n == &*name)
            .map(|(_, w)| *w)
            .ok_or_else(|| not_found(&name))?;
        let subdirs = match which {
            BrowseDir::Checkpoints => self.store.list_checkpoints()?.len() as u64,
            _ => 0,
        };
        let (uid, gid) = store_owner(&self.store);
        Ok(Node {
            parent,
            name,
            attr: dir_attr(ino, 0o555, uid, gid, self.created_ns, subdirs),
            content: Content::BrowseDir(which),
            entry: None,
            volatile: true,
        })
    }

    /// `by-time` names: `YYYY-MM-DDTHH:MM:SS`, with `~2`, `~3`... for later checkpoints in
    /// the same second.
    pub fn by_time_names(&self) -> Result<BTreeMap<String, ObjectId>> {
        let mut all = Vec::new();
        for id in self.store.list_checkpoints()? {
            all.push((self.checkpoint(&id)?.time_ns, id));
        }
        all.sort();
        let mut out = BTreeMap::new();
        let mut prev = String::new();
        let mut n = 1;
        for (t, id) in all {
            let base = format_utc(t);
            if base == prev {
                n += 1;
                out.insert(format!("{base}~{n}"), id);
            } else {
                n = 1;
                out.insert(base.clone(), id);
                prev = base;
            }
        }
        Ok(out)
    }

    fn browse_child(
        &self,
        which: BrowseDir,
        dir: &Node,
        name: Arc<[u8]>,
        ino: Ino,
    ) -> Result<Node> {
        let parent = dir.attr.ino;
        let as_str = std::str::from_utf8(&name).ok();
        match which {
            BrowseDir::Checkpoints => {
                let id = hex_name(&name).ok_or_else(|| not_found(&name))?;
                let c = match self.checkpoint(&id) {
                    Ok(c) => c,
                    Err(Error::NotFound(_)) => return Err(not_found(&name)),
                    Err(e) => return Err(e),
                };
                let (uid, gid) = store_owner(&self.store);
                Ok(Node {
                    parent,
                    name,
                    attr: dir_attr(ino, 0o555, uid, gid, c.time_ns, c.roots.len() as u64),
                    content: Content::Checkpoint(id),
                    entry: None,
                    volatile: false,
                })
            }
            BrowseDir::Labels => {
                let n = as_str
                    .filter(|n| check_name("label", n).is_ok())
                    .ok_or_else(|| not_found(&name))?;
                let id = self.store.read_label(n)?.ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
            BrowseDir::Branches => {
                let n = as_str
                    .filter(|n| check_name("branch", n).is_ok())
                    .ok_or_else(|| not_found(&name))?;
                let b = self.store.read_branch(n)?.ok_or_else(|| not_found(&name))?;
                let id = b.head.ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
            BrowseDir::ByTime => {
                let n = as_str.ok_or_else(|| not_found(&name))?;
                let names = self.by_time_names()?;
                let id = names.get(n).ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
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

    /// Opens a file for reading; returns a handle for [`View::read`].
    ///
    /// # Errors
    /// EISDIR for a directory, EINVAL-mapped for other non-files.
    pub fn open(&self, ino: Ino) -> Result<u64> {
        let f = self.load_file(ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Handle::File(f));
        Ok(fh)
    }

    /// The chunk map of a file, from the per-inode cache (for reads without an open handle:
    /// the adapter lets the kernel skip OPEN and RELEASE).
    fn file_by_ino(&self, ino: Ino) -> Result<Arc<OpenFile>> {
        if let Some(f) = lock(&self.files).get(&ino) {
            return Ok(f.clone());
        }
        let f = self.load_file(ino)?;
        lock(&self.files).put(ino, f.clone());
        Ok(f)
    }

    fn load_file(&self, ino: Ino) -> Result<Arc<OpenFile>> {
        let node = self.node(ino)?;
        if node.attr.kind == Kind::Dir {
            return Err(Error::io_op(
                self.path_of(ino),
                std::io::Error::from_raw_os_error(libc::EISDIR),
            ));
        }
        let chunks = match self.stored_entry(&node)? {
            Some(Entry {
                kind: EntryKind::File { chunks },
                ..
            }) => {
                if let Some(r) = node.entry {
                    self.prefetch_siblings(&r);
                }
                chunks
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "{} is not a regular file",
                    self.path_of(ino)
                )))
            }
        };
        let mut starts = Vec::with_capacity(chunks.len());
        let mut pos = 0u64;
        for c in &chunks {
            starts.push(pos);
            pos += u64::from(c.len);
        }
        Ok(Arc::new(OpenFile {
            ino,
            chunks,
            starts,
            size: pos,
            advised: AtomicUsize::new(0),
        }))
    }

    fn open_file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        match lock(&self.handles).get(&fh) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Error::io_op(
                format!("file handle {fh}"),
                std::io::Error::from_raw_os_error(libc::EBADF),
            )),
        }
    }

    /// Asks the kernel to start reading an object's file (readahead across chunk files,
    /// which are separate files the kernel cannot know belong together).
    fn advise(&self, id: &ObjectId) {
        match self.store.open_object(id) {
            Ok(Some((f, path, _))) => {
                use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
                if let Err(e) = posix_fadvise(&f, 0, 0, PosixFadviseAdvice::POSIX_FADV_WILLNEED) {
                    log::debug!("fadvise {}: {e}", path.display());
                }
            }
            Ok(None) => log::debug!("prefetch: object {id} missing"),
            Err(e) => log::debug!("prefetch: {e}"),
        }
    }

    /// Loads the subdirectory trees of `tree` (and theirs) into the tree cache in the
    /// background, so a walker finds them decoded; falls back to kernel readahead when the
    /// prefetch threads are busy. Failures are left for the real access to report.
    fn prefetch_subtrees(&self, tree: &Tree) {
        let subdirs: Vec<ObjectId> = tree
            .entries
            .iter()
            .filter_map(|e| match &e.kind {
                EntryKind::Dir { tree: sub, .. } => Some(*sub),
                _ => None,
            })
            .filter(|id| self.trees.get(id).is_none())
            .take(SUBDIRS_AHEAD)
            .collect();
        if subdirs.is_empty() {
            return;
        }
        let busy = self.tree_prefetches.fetch_add(1, Ordering::AcqRel);
        if busy >= TREE_PREFETCH_THREADS {
            self.tree_prefetches.fetch_sub(1, Ordering::AcqRel);
            for id in &subdirs {
                self.advise(id);
            }
            return;
        }
        let (store, trees, count) = (
            self.store.clone(),
            self.trees.clone(),
            self.tree_prefetches.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("tree-prefetch".into())
            .spawn(move || {
                // Two levels, breadth first: the children, then the grandchildren.
                let load = |id: &ObjectId| -> Option<Arc<Tree>> {
                    if let Some(t) = trees.get(id) {
                        return Some(t);
                    }
                    let data = store.read_object(id).ok()?;
                    let t = Arc::new(Tree::decode(&data).ok()?);
                    trees.insert(*id, t.clone(), data.len() * 2 + 64);
                    Some(t)
                };
                let mut grandchildren = Vec::new();
                for id in &subdirs {
                    if let Some(t) = load(id) {
                        grandchildren.extend(t.entries.iter().filter_map(|e| match &e.kind {
                            EntryKind::Dir { tree: sub, .. } => Some(*sub),
                            _ => None,
                        }));
                    }
                }
                for id in grandchildren.iter().take(SUBDIRS_AHEAD) {
                    load(id);
                }
                count.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.tree_prefetches.fetch_sub(1, Ordering::AcqRel);
            log::debug!("tree prefetch thread: {e}");
        }
    }

    /// Prefetches the chunks after chunk `i` of an open file, once each.
    fn prefetch_chunks(&self, f: &OpenFile, i: usize) {
        let want = (i + 1 + CHUNKS_AHEAD).min(f.chunks.len());
        let done = f.advised.fetch_max(want, Ordering::Relaxed);
        for c in &f.chunks[done.max(i + 1).min(want)..want] {
            self.advise(&c.id);
        }
    }

    /// Prefetches the first object of the files that follow entry `r` in its directory.
    fn prefetch_siblings(&self, r: &EntryRef) {
        let start = r.index + 1;
        let end = start + SIBLINGS_AHEAD;
        {
            let mut map = lock(&self.sibling_prefetch);
            let done = map.get(&r.tree).copied().unwrap_or(0);
            // Only once the reader has consumed half of what was prefetched.
            if done > start + SIBLINGS_AHEAD / 2 {
                return;
            }
            map.put(r.tree, end);
        }
        let Some(tree) = self.trees.get(&r.tree) else {
            return;
        };
        for e in tree
            .entries
            .iter()
            .skip(start as usize)
            .take(SIBLINGS_AHEAD as usize)
        {
            if let EntryKind::File { chunks } = &e.kind {
                if let Some(c) = chunks.first() {
                    self.advise(&c.id);
                }
            }
        }
    }

    /// Loads a verified chunk (cached).
    fn chunk(&self, f: &OpenFile, c: &Chunk) -> Result<Arc<Vec<u8>>> {
        if let Some(d) = self.chunks.get(&c.id) {
            return Ok(d);
        }
        let data = Arc::new(self.load_chunk(f, c)?);
        self.chunks.insert(c.id, data.clone(), data.len() + 64);
        Ok(data)
    }

    /// Size of a regular file, from its chunk map.
    ///
    /// # Errors
    /// As for reading: not a file, a missing or corrupt tree.
    pub fn file_size(&self, ino: Ino) -> Result<u64> {
        self.file_by_ino(ino).map(|f| f.size)
    }

    /// Whether a file of this size is worth a materialized copy (big enough, fits the budget).
    pub fn wants_copy(&self, size: u64) -> bool {
        size >= materialize::PASSTHROUGH_MIN_BYTES && self.copies.accepts(size)
    }

    /// A read-only, complete copy of a file in `STORE/cache/materialized/` (unnamed), built
    /// from its hash-checked chunks on first use and kept in a disk-budgeted LRU.
    ///
    /// # Errors
    /// A missing or corrupt chunk (logged with path and object, as for reads); ENOSPC.
    pub fn materialized(&self, ino: Ino) -> Result<Arc<std::fs::File>> {
        let file = self.file_by_ino(ino)?;
        let what = self.path_of(ino);
        let io_err = |e| Error::io_op(format!("{what}: materializing into cache/"), e);
        self.copies.get_or_build(ino, file.size, io_err, |out| {
            for (i, c) in file.chunks.iter().enumerate() {
                if file.chunks.len() > 1 {
                    self.prefetch_chunks(&file, i);
                }
                let data = match self.chunks.get(&c.id) {
                    Some(d) => d,
                    None => Arc::new(self.load_chunk(&file, c)?),
                };
                std::os::unix::fs::FileExt::write_all_at(out, &data, file.starts[i])
                    .map_err(io_err)?;
            }
            Ok::<(), Error>(())
        })
    }

    /// Whether big files should be materialized for passthrough at all (a non-zero budget).
    pub fn passthrough_wanted(&self) -> bool {
        self.copies.accepts(materialize::PASSTHROUGH_MIN_BYTES)
    }

    /// Bytes held by materialized copies.
    pub fn copies_bytes(&self) -> u64 {
        self.copies.bytes()
    }

    /// Reads and checks one chunk (not cached).
    fn load_chunk(&self, f: &OpenFile, c: &Chunk) -> Result<Vec<u8>> {
        match self.store.read_object(&c.id) {
            Ok(data) if data.len() == c.len as usize => Ok(data),
            Ok(data) => {
                let path = self.path_of(f.ino);
                let msg = format!(
                    "{path}: object {} has {} bytes, the tree says {}",
                    c.id,
                    data.len(),
                    c.len
                );
                log::error!("{msg}");
                Err(Error::Corrupt(msg))
            }
            Err(e) => {
                let path = self.path_of(f.ino);
                log::error!("{path}: object {}: {e}", c.id);
                Err(Error::Corrupt(format!("{path}: object {}: {e}", c.id)))
            }
        }
    }

    /// Reads up to `size` bytes at `offset` and passes them to `f` (a slice of the cached
    /// chunk when the range lies in one chunk, so the common case copies once).
    pub fn read_with<R>(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let file = self.open_file(fh)?;
        self.read_file_with(&file, offset, size, f)
    }

    /// As [`View::read_with`], for a file read without an open handle.
    pub fn read_ino_with<R>(
        &self,
        ino: Ino,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let file = self.file_by_ino(ino)?;
        self.read_file_with(&file, offset, size, f)
    }

    fn read_file_with<R>(
        &self,
        file: &Arc<OpenFile>,
        offset: u64,
        size: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        if offset >= file.size || size == 0 {
            return Ok(f(&[]));
        }
        let end = file.size.min(offset + u64::from(size));
        let mut i = file.starts.partition_point(|s| *s <= offset) - 1;
        if file.chunks.len() > 1 {
            self.prefetch_chunks(file, i);
        }
        let first_end = file.starts[i] + u64::from(file.chunks[i].len);
        if end <= first_end {
            let data = self.chunk(file, &file.chunks[i])?;
            let a = (offset - file.starts[i]) as usize;
            let b = (end - file.starts[i]) as usize;
            return Ok(f(&data[a..b]));
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let data = self.chunk(file, &file.chunks[i])?;
            let a = (pos - file.starts[i]) as usize;
            let b = ((end - file.starts[i]) as usize).min(data.len());
            out.extend_from_slice(&data[a..b]);
            pos = file.starts[i] + b as u64;
            i += 1;
        }
        Ok(f(&out))
    }

    /// Reads up to `size` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.read_with(fh, offset, size, <[u8]>::to_vec)
    }

    /// Closes a file or directory handle.
    pub fn release(&self, fh: u64) {
        lock(&self.handles).remove(&fh);
    }

    /// Opens a directory: snapshots its listing for [`View::dir_entry`].
    pub fn opendir(&self, ino: Ino) -> Result<u64> {
        let dir = self.node(ino)?;
        let listing = match &dir.content {
            Content::Dir(id) => {
                let tree = self.tree(id, &|| self.path_of(ino))?;
                self.prefetch_subtrees(&tree);
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
                        Err(e) => return Err(e),
                    }
                }
                Listing::Synthetic { dir, children }
            }
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(fh, Handle::Dir(Arc::new(listing)));
        Ok(fh)
    }

    fn synthetic_names(&self, dir: &Node) -> Result<Vec<Vec<u8>>> {
        Ok(match &dir.content {
            Content::BrowseRoot => {
                let mut v: Vec<Vec<u8>> = BrowseDir::ALL.iter().map(|(n, _)| n.to_vec()).collect();
                v.push(b"latest".to_vec());
                v
            }
            Content::BrowseDir(BrowseDir::Checkpoints) => self
                .store
                .list_checkpoints()?
                .iter()
                .map(|id| id.to_hex().into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::Labels) => self
                .store
                .list_labels()?
                .into_iter()
                .map(|(n, _)| n.into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::Branches) => self
                .store
                .list_branches()?
                .into_iter()
                .filter(|(_, b)| b.head.is_some())
                .map(|(n, _)| n.into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::ByTime) => self
                .by_time_names()?
                .into_keys()
                .map(String::into_bytes)
                .collect(),
            Content::Checkpoint(id) => self
                .checkpoint(id)?
                .roots
                .keys()
                .map(|k| k.clone().into_bytes())
                .collect(),
            Content::Dir(_) | Content::File | Content::Symlink(_) => Vec::new(),
        })
    }

    /// Entry `index` of an open directory: 0 is `.`, 1 is `..`, then the children in name
    /// order; `None` past the end. The offset of the next entry is `index + 1`.
    pub fn dir_entry(&self, fh: u64, index: u64) -> Result<Option<(Vec<u8>, Node)>> {
        let listing = match lock(&self.handles).get(&fh) {
            Some(Handle::Dir(l)) => l.clone(),
            _ => {
                return Err(Error::io_op(
                    format!("directory handle {fh}"),
                    std::io::Error::from_raw_os_error(libc::EBADF),
                ))
            }
        };
        let dir = match &*listing {
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
        match &*listing {
            Listing::Tree { dir, tree } => {
                let Content::Dir(tree_id) = dir.content else {
                    return Ok(None);
                };
                Ok(tree.entries.get(i).map(|e| {
                    let name: Arc<[u8]> = Arc::from(e.name.as_slice());
                    let ino = entry_ino(child_ino(dir.attr.ino, &e.name), e);
                    let node = entry_node(
                        dir.attr.ino,
                        name,
                        ino,
                        e,
                        EntryRef {
                            tree: tree_id,
                            index: i as u32,
                        },
                    );
                    (e.name.clone(), node)
                }))
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
        Ok(self.stored_entry(&node)?.and_then(|e| {
            e.xattrs
                .into_iter()
                .find(|(k, _)| k.as_slice() == name)
                .map(|(_, v)| v)
        }))
    }

    /// Attribute names, each followed by a NUL (the `listxattr` wire format).
    pub fn listxattr(&self, ino: Ino) -> Result<Vec<u8>> {
        let node = self.node(ino)?;
        let mut out = Vec::new();
        if let Some(e) = self.stored_entry(&node)? {
            for (k, _) in &e.xattrs {
                out.extend_from_slice(k);
                out.push(0);
            }
        }
        Ok(out)
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

fn store_owner(store: &Store) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(store.root())
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
}

fn root_dir_node(ino: Ino, parent: Ino, name: Arc<[u8]>, rec: &RootRecord) -> Node {
    Node {
        parent,
        name,
        attr: dir_attr(
            ino,
            rec.mode & 0o7777,
            rec.uid,
            rec.gid,
            rec.mtime_ns,
            u64::from(rec.subdirs),
        ),
        content: Content::Dir(rec.tree),
        entry: None,
        volatile: false,
    }
}

fn entry_node(parent: Ino, name: Arc<[u8]>, ino: Ino, e: &Entry, r: EntryRef) -> Node {
    let (kind, content, nlink, size) = match &e.kind {
        EntryKind::File { .. } => (Kind::File, Content::File, 1, e.size),
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
        attr: Attr {
            ino,
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
