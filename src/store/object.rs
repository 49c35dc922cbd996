//! Objects: immutable bytes addressed by the SHA-256 of their uncompressed content.
//!
//! Writers use an [`ObjectBatch`]: new objects go to `tmp/` unsynced; `commit` makes them
//! durable (fsync of each from several threads for a small batch, one `syncfs` for a big one),
//! renames them to their final names without replacing any (an existing object is success:
//! dedup), and syncs the directories. So an object never appears under its final name before
//! its bytes are durable, and a capture of many files costs two syncs instead of one per
//! object. `sync_ahead` fsyncs the objects written so far early, from a thread that has run
//! out of files to read while others still hash; they keep their temp names until `commit`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::safe::Dir;
use crate::fs::{file_name, list_dir};
use crate::id::ObjectId;
use crate::store::tree::{Chunk, Tree, MAX_TREE_BYTES};
use crate::store::Store;

/// zstd level for compressed stores: fast, still ~3x on text.
const ZSTD_LEVEL: i32 = 3;
/// Up to this many new objects are fsynced individually (from several threads, so the
/// filesystem merges them into few journal commits); more share one syncfs. syncfs also
/// waits for every other writer's dirty data, which on a busy machine costs seconds, and
/// right after an agent's turn that includes the turn's own writes: a workspace checkpoint of
/// the large bench room makes about 410 new objects, which stay under this limit.
const FSYNC_EACH_LIMIT: usize = 2048;
/// Threads issuing those fsyncs.
const FSYNC_THREADS: usize = 16;
/// Objects this large start their writeback as soon as they are written (see
/// `atomic::write_new_early`): a checkpoint's new chunks reach the disk while hashing goes on.
/// 4 KiB takes in the 16 KiB blocks of SQLite databases: on the large bench room their 400
/// fsyncs went from 50 ms to 40 ms.
const EARLY_WRITEBACK_BYTES: usize = 4 << 10;

/// What a caller expects of an object's (uncompressed) length: checked against the file's
/// size before anything is allocated, and against the decompressed output.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// A chunk: exactly the length its tree gives.
    Exactly(u64),
    /// A tree or an object of unknown use: at most this many bytes; names what it is for.
    AtMost(u64, &'static str),
}

impl Expect {
    fn max(self) -> u64 {
        match self {
            Expect::Exactly(n) | Expect::AtMost(n, _) => n,
        }
    }

    /// The error for an object of `len` bytes that this does not accept (`what`: "is" for the
    /// file, "holds" for the decompressed bytes).
    fn refuse(self, id: &ObjectId, what: &str, len: u64) -> Error {
        match self {
            Expect::Exactly(n) => {
                Error::Corrupt(format!("object {id} {what} {len} bytes, the tree says {n}"))
            }
            Expect::AtMost(n, kind) => Error::Corrupt(format!(
                "object {id} {what} {len} bytes, more than any {kind} ({n})"
            )),
        }
    }
}

/// Largest object `read_object` accepts without a caller-given length: a tree (the largest
/// kind; chunks are at most [`crate::store::tree::MAX_CHUNK_LEN`]).
pub const MAX_OBJECT_BYTES: u64 = MAX_TREE_BYTES;

/// Largest file zstd makes of `len` bytes (`ZSTD_compressBound`, one frame): a compressed
/// object's file may not exceed it.
fn zstd_bound(len: u64) -> u64 {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    zstd::zstd_safe::compress_bound(len) as u64
}

/// What [`Store::find_object`] found: the object's file, or the checked bytes a remote
/// source just fetched.
enum Found {
    File(OpenedObject),
    Fetched(Vec<u8>),
}

impl Store {
    /// True when the object is present (raw or compressed). Links are not followed: a
    /// symlink in an object's place is "present" (so it is never written over) and fails to
    /// read.
    pub fn has_object(&self, id: &ObjectId) -> bool {
        self.locate_object(id).is_some()
    }

    /// The on-disk file of an object and whether it is compressed, if present (not following
    /// a symlink in its place).
    pub fn locate_object(&self, id: &ObjectId) -> Option<(PathBuf, bool)> {
        for compressed in [self.compressed(), !self.compressed()] {
            let p = self.object_path(id, compressed);
            if fs::symlink_metadata(&p).is_ok() {
                return Some((p, compressed));
            }
        }
        None
    }

    /// `objects/`, held once per `Store` (not following a symlink): the directory every
    /// object open resolves beneath, through the safe module (a store made elsewhere is
    /// untrusted input: its fan-out directories may be symlinks, its objects FIFOs).
    fn objects_dir_fd(&self) -> Result<&Dir> {
        if let Some(d) = self.objects_fd.get() {
            return Ok(d);
        }
        let path = self.objects_dir();
        let dir = Dir::open(&path).map_err(|e| match e {
            Error::Invalid(_) => Error::Corrupt(format!(
                "{} is not a directory (a symlink?); objects are read only from the \
                 store's own objects/ directory",
                path.display()
            )),
            e => e,
        })?;
        let _already_set_by_another_thread = self.objects_fd.set(dir);
        self.objects_fd.get().ok_or_else(|| {
            Error::io_op(
                path.display().to_string(),
                std::io::Error::from_raw_os_error(libc::EBADF),
            )
        })
    }

    /// Opens an object's file (raw or `.zst`, the store's usual form first), through
    /// `safe::Dir` beneath `objects/`: its `lstat` must say regular file before it is opened
    /// (opening a device node can have effects), no symlink is followed on the way, the open
    /// does not block, and its `fstat` must show that same file. Returns its size too.
    ///
    /// # Errors
    /// `Corrupt` naming the object when its file is a symlink, FIFO, directory, device or
    /// socket, or is reached through a symlinked directory; I/O errors other than a missing
    /// file.
    pub fn open_object_checked(&self, id: &ObjectId) -> Result<Option<OpenedObject>> {
        Ok(match self.find_object(id, false)? {
            Some(Found::File(f)) => Some(f),
            _ => None,
        })
    }

    /// The file of `id` here; missing here, a clone fetches it from its remote (checked
    /// against `id`), once, and with `take_fetched` the source hands over the checked bytes
    /// instead of the file it wrote from them being read back.
    fn find_object(&self, id: &ObjectId, take_fetched: bool) -> Result<Option<Found>> {
        if let Some(found) = self.open_local_object(id)? {
            return Ok(Some(Found::File(found)));
        }
        match self.object_source() {
            Some(src) if src.fetch(self, id)? => {
                if let Some(data) = take_fetched.then(|| src.take_fetched(id)).flatten() {
                    return Ok(Some(Found::Fetched(data)));
                }
                Ok(self.open_local_object(id)?.map(Found::File))
            }
            _ => Ok(None),
        }
    }

    fn open_local_object(&self, id: &ObjectId) -> Result<Option<OpenedObject>> {
        let hex = id.to_hex();
        let dir = self.objects_dir_fd()?;
        for compressed in [self.compressed(), !self.compressed()] {
            let rel = if compressed {
                format!("{}/{}.zst", &hex[..2], &hex[2..])
            } else {
                format!("{}/{}", &hex[..2], &hex[2..])
            };
            let path = self.objects_dir().join(&rel);
            let odd = |what: String| {
                Error::Corrupt(format!("object {id} is not a regular file ({what})"))
            };
            // A symlink or a file as a directory on the way, as the safe module reports it.
            let refused = |e: Error| {
                if crate::fs::safe::is_swapped(&e) {
                    odd(format!(
                        "objects/{rel} is a symlink or is reached through one"
                    ))
                } else {
                    e
                }
            };
            // Its type first, without opening it.
            let Some(before) = dir.stat(&rel).map_err(refused)? else {
                continue;
            };
            if !before.is_file() {
                return Err(odd(format!(
                    "objects/{rel} is {}",
                    before.kind().describe()
                )));
            }
            let opened = match dir.open_walked(&rel, &before) {
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    continue
                }
                other => other.map_err(refused)?,
            };
            let Some((file, st)) = opened else {
                return Err(Error::Corrupt(format!(
                    "object {id} was replaced while it was opened (objects/{rel})"
                )));
            };
            return Ok(Some(OpenedObject {
                file,
                path,
                compressed,
                len: st.size,
            }));
        }
        Ok(None)
    }

    /// As [`Store::open_object`], without waiting for a remote: an object missing here is
    /// queued for the store's source to fetch in the background, and `None` is returned.
    /// For readahead hints, which must not block a reader on the network.
    ///
    /// # Errors
    /// As [`Store::open_object_checked`].
    pub fn open_object_nowait(&self, id: &ObjectId) -> Result<Option<(fs::File, PathBuf, bool)>> {
        let found = self.open_local_object(id)?;
        if found.is_none() {
            if let Some(src) = self.object_source() {
                src.prefetch(self, std::slice::from_ref(id));
            }
        }
        Ok(found.map(|o| (o.file, o.path, o.compressed)))
    }

    /// Whether an object missing here is on the store's remote (a clone's objects are, until
    /// first read), by the remote's index.
    pub fn remote_holds(&self, id: &ObjectId) -> bool {
        self.object_source().is_some_and(|s| s.holds(self, id))
    }

    /// As [`Store::open_object_checked`], as `(file, path, compressed)`.
    ///
    /// # Errors
    /// As [`Store::open_object_checked`].
    pub fn open_object(&self, id: &ObjectId) -> Result<Option<(fs::File, PathBuf, bool)>> {
        Ok(self
            .open_object_checked(id)?
            .map(|o| (o.file, o.path, o.compressed)))
    }

    /// Reads a chunk of a file and checks its hash: the object must hold exactly `chunk.len`
    /// bytes. Its file's size is checked before anything is read (raw: equal to the length;
    /// compressed: at most zstd's bound for it) and the decompressed output is capped at the
    /// length, so a hostile store cannot make this allocate more than the tree says.
    ///
    /// # Errors
    /// `NotFound` if missing; `Corrupt` naming the object for a file that is not a regular
    /// file, a size or length other than the tree's, bad zstd data or a hash mismatch.
    pub fn read_chunk(&self, chunk: &Chunk) -> Result<Vec<u8>> {
        self.read_expected(&chunk.id, Expect::Exactly(u64::from(chunk.len)))
    }

    /// Reads an object of at most `max` (uncompressed) bytes and checks its hash; see
    /// [`Store::read_chunk`] for what is checked before reading.
    ///
    /// # Errors
    /// As [`Store::read_chunk`], with "more than `max`" instead of "not the tree's length".
    pub fn read_object_bounded(&self, id: &ObjectId, max: u64) -> Result<Vec<u8>> {
        self.read_expected(id, Expect::AtMost(max, "object allowed here"))
    }

    /// Reads and decodes a tree object (at most [`MAX_TREE_BYTES`]).
    ///
    /// # Errors
    /// As [`Store::read_chunk`]; `Corrupt` naming the tree when it does not decode.
    pub fn read_tree(&self, id: &ObjectId) -> Result<Tree> {
        let data = self.read_expected(id, Expect::AtMost(MAX_TREE_BYTES, "tree"))?;
        Tree::decode_object(id, &data)
    }

    /// Reads an object (at most [`MAX_OBJECT_BYTES`]) and checks its hash. Chunks of files
    /// are better read with [`Store::read_chunk`], which holds them to their tree's length.
    ///
    /// # Errors
    /// `NotFound` if missing, `Corrupt` if its bytes do not hash to `id` (or it is not a
    /// regular file, or too large).
    pub fn read_object(&self, id: &ObjectId) -> Result<Vec<u8>> {
        self.read_expected(id, Expect::AtMost(MAX_OBJECT_BYTES, "object"))
    }

    fn read_expected(&self, id: &ObjectId, expect: Expect) -> Result<Vec<u8>> {
        match self.read_expected_once(id, expect) {
            // A bad local copy of an object a remote holds: replaced by the remote's, once.
            Err(Error::Corrupt(m)) => match self.object_source() {
                Some(src) if src.repair(self, id)? => {
                    log::warn!("{m}: replaced by the remote's copy");
                    self.read_expected_once(id, expect)
                }
                _ => Err(Error::Corrupt(m)),
            },
            other => other,
        }
    }

    fn read_expected_once(&self, id: &ObjectId, expect: Expect) -> Result<Vec<u8>> {
        // A clone's object its remote source has just fetched and checked: those bytes, not a
        // read back of the copy written from them (the lazy sequential read's hot path).
        // Only a source already in use can hold any (a store without remotes never looks).
        let source = self.lazy.get().and_then(Option::as_ref);
        let checked = |data: Vec<u8>| match expect {
            Expect::Exactly(n) if data.len() as u64 != n => {
                Err(expect.refuse(id, "holds", data.len() as u64))
            }
            Expect::AtMost(n, _) if data.len() as u64 > n => {
                Err(expect.refuse(id, "holds", data.len() as u64))
            }
            _ => Ok(data),
        };
        if let Some(data) = source.as_ref().and_then(|s| s.take_fetched(id)) {
            return checked(data);
        }
        let opened = match self.find_object(id, true)? {
            Some(Found::File(o)) => o,
            Some(Found::Fetched(data)) => return checked(data),
            None => return Err(Error::NotFound(format!("object {id}"))),
        };
        let OpenedObject {
            file,
            path,
            compressed,
            len,
        } = opened;
        // Sizes first: nothing is allocated for a file larger than what it may hold.
        if compressed {
            let bound = zstd_bound(expect.max());
            if len > bound {
                return Err(Error::Corrupt(format!(
                    "object {id} is {len} bytes compressed, more than zstd makes of {} bytes \
                     ({bound})",
                    expect.max()
                )));
            }
        } else {
            match expect {
                Expect::Exactly(n) if len != n => return Err(expect.refuse(id, "is", len)),
                Expect::AtMost(n, _) if len > n => return Err(expect.refuse(id, "is", len)),
                _ => {}
            }
        }
        // `len` fits the bound checked above, itself a chunk or tree size.
        let mut raw = Vec::with_capacity(len as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, len + 1), &mut raw)
            .map_err(|e| Error::io(&path, e))?;
        if raw.len() as u64 != len {
            return Err(Error::Corrupt(format!(
                "object {id} changed size while it was read ({})",
                path.display()
            )));
        }
        let data = if compressed {
            decompress_capped(id, &raw, expect)?
        } else {
            raw
        };
        if let Expect::Exactly(n) = expect {
            if data.len() as u64 != n {
                return Err(expect.refuse(id, "holds", data.len() as u64));
            }
        }
        if ObjectId::of(&data) != *id {
            return Err(Error::Corrupt(format!(
                "object {id} does not match its hash ({})",
                path.display()
            )));
        }
        Ok(data)
    }

    /// Whether the stored object `id` holds exactly `data`, when the page cache can tell:
    /// `None` when the store compresses objects, the object is not stored, or any of its
    /// bytes would have to come from the disk (`preadv2` with `RWF_NOWAIT`). A copy and a
    /// `memcmp` cost several times less than SHA-256 (1.45 GB/s per core here) and, this way,
    /// never wait for the disk. `scratch` must be longer than `data` (to see a longer object).
    /// Equal bytes prove `data` hashes to `id` as far as the store's objects are intact,
    /// which dedup trusts in the same way.
    pub fn cached_object_equals(
        &self,
        id: &ObjectId,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Option<bool> {
        if self.compressed() || scratch.len() <= data.len() {
            return None;
        }
        let file = match self.open_object_checked(id) {
            Ok(Some(o)) if !o.compressed => o.file,
            _ => return None,
        };
        let mut got = 0usize;
        while got < scratch.len() {
            let mut bufs = [std::io::IoSliceMut::new(&mut scratch[got..])];
            let flags = rustix::io::ReadWriteFlags::NOWAIT;
            match rustix::io::preadv2(&file, &mut bufs, got as u64, flags) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                // EAGAIN: some of it is not in the page cache; anything else: let the hash
                // decide.
                Err(_) => return None,
            }
        }
        Some(got == data.len() && scratch[..got] == *data)
    }

    /// Size in bytes of an object's file, if present (a symlink's own size, never its
    /// target's).
    pub fn object_file_size(&self, id: &ObjectId) -> Option<u64> {
        let (p, _) = self.locate_object(id)?;
        fs::symlink_metadata(p).ok().map(|m| m.len())
    }
}

/// Reads a file that may be hostile (a record of a store made elsewhere, an archive's
/// sidecar): opened non-blocking (a FIFO does not hang the open), not following a symlink
/// unless `follow`, `fstat` must say regular file, and its size must be at most `max` before
/// anything is allocated. `what` names the file in errors. `Ok(None)` when it does not exist.
///
/// # Errors
/// `Corrupt` naming `what` for a file that is not regular or is over `max`; I/O errors.
pub(crate) fn read_regular_file(
    path: &std::path::Path,
    max: u64,
    follow: bool,
    what: &str,
) -> Result<Option<Vec<u8>>> {
    let (file, st) = match crate::fs::safe::open_regular_path(path, follow) {
        Ok(Some(x)) => x,
        Ok(None) => return Ok(None),
        Err(Error::Invalid(m)) => return Err(Error::Corrupt(format!("{what}: {m}"))),
        Err(e) if crate::fs::safe::is_swapped(&e) => {
            return Err(Error::Corrupt(format!(
                "{what} is not a regular file (a symlink: {})",
                path.display()
            )))
        }
        Err(e) => return Err(e),
    };
    let len = st.size;
    if len > max {
        return Err(Error::Corrupt(format!(
            "{what} is {len} bytes, more than {max} ({})",
            path.display()
        )));
    }
    // len <= max, a small bound chosen by the caller.
    let mut data = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut std::io::Read::take(&file, max + 1), &mut data)
        .map_err(|e| Error::io(path, e))?;
    if data.len() as u64 > max {
        return Err(Error::Corrupt(format!(
            "{what} grew past {max} bytes while it was read ({})",
            path.display()
        )));
    }
    Ok(Some(data))
}

/// An object's file, opened by [`Store::open_object_checked`]: a regular file.
#[derive(Debug)]
pub struct OpenedObject {
    pub file: fs::File,
    pub path: PathBuf,
    pub compressed: bool,
    /// Its size on disk (compressed when `compressed`), from `fstat` of the opened file.
    pub len: u64,
}

/// Decompresses a zstd object into at most `expect.max()` bytes: into a buffer of the frame's
/// declared content size when it has one (no larger than the bound), else through a stream
/// cut one byte past the bound. Either way no more than the bound is ever allocated.
fn decompress_capped(id: &ObjectId, raw: &[u8], expect: Expect) -> Result<Vec<u8>> {
    let max = expect.max();
    let bad =
        |e: &dyn std::fmt::Display| Error::Corrupt(format!("object {id}: bad zstd data ({e})"));
    let declared =
        zstd::zstd_safe::get_frame_content_size(raw).map_err(|e| bad(&format!("{e:?}")))?;
    match declared {
        Some(n) if n > max => Err(expect.refuse(id, "holds", n)),
        Some(n) => {
            // Fits: n <= max, a chunk or tree size.
            let mut out = Vec::with_capacity(n as usize);
            zstd::bulk::Decompressor::new()
                .and_then(|mut d| d.decompress_to_buffer(raw, &mut out))
                .map_err(|e| bad(&e))?;
            Ok(out)
        }
        None => {
            let dec = zstd::stream::read::Decoder::new(raw).map_err(|e| bad(&e))?;
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(dec, max + 1), &mut out)
                .map_err(|e| bad(&e))?;
            if out.len() as u64 > max {
                return Err(Error::Corrupt(match expect {
                    Expect::Exactly(n) => {
                        format!("object {id} decompresses to more than the {n} bytes the tree says")
                    }
                    Expect::AtMost(n, kind) => {
                        format!("object {id} decompresses to more than any {kind} ({n} bytes)")
                    }
                }));
            }
            Ok(out)
        }
    }
}

/// An object `defer_writes` keeps in memory: its id and bytes.
type Deferred = (ObjectId, Vec<u8>);

/// A set of objects being written by one operation; see the module doc.
pub struct ObjectBatch<'a> {
    store: &'a Store,
    /// Dry run: compute ids, write nothing (used to tell whether a workspace is dirty).
    dry: bool,
    pending: Mutex<HashMap<ObjectId, PathBuf>>,
    /// Objects `sync_ahead` made durable, still under their temp names.
    synced: Mutex<Vec<(ObjectId, PathBuf)>>,
    /// Whether `sync_ahead` does anything (see `hold_back`).
    ahead_allowed: AtomicBool,
    seen: Mutex<HashSet<ObjectId>>,
    new_objects: AtomicU64,
    new_bytes: AtomicU64,
    /// Bytes `holds` compared with stored objects instead of hashing them.
    compared_bytes: AtomicU64,
    /// New objects kept in memory instead of written (see `defer_writes`).
    deferred: Mutex<Option<Vec<Deferred>>>,
    /// In a dry run, the trees it built, so a diff can read a tree the store does not hold
    /// (see [`ObjectBatch::take_dry_trees`]). Only re-encoded directories land here.
    dry_trees: Mutex<HashMap<ObjectId, Tree>>,
}

impl<'a> ObjectBatch<'a> {
    pub fn new(store: &'a Store) -> ObjectBatch<'a> {
        ObjectBatch {
            store,
            dry: false,
            pending: Mutex::new(HashMap::new()),
            synced: Mutex::new(Vec::new()),
            ahead_allowed: AtomicBool::new(true),
            seen: Mutex::new(HashSet::new()),
            new_objects: AtomicU64::new(0),
            new_bytes: AtomicU64::new(0),
            compared_bytes: AtomicU64::new(0),
            deferred: Mutex::new(None),
            dry_trees: Mutex::new(HashMap::new()),
        }
    }

    /// A batch that only computes ids and writes nothing.
    pub fn dry_run(store: &'a Store) -> ObjectBatch<'a> {
        let mut b = ObjectBatch::new(store);
        b.dry = true;
        b
    }

    /// Whether this batch writes nothing (see [`ObjectBatch::dry_run`]).
    pub fn is_dry_run(&self) -> bool {
        self.dry
    }

    /// Makes sure the object with these bytes will exist after `commit`; returns its id.
    pub fn ensure(&self, data: &[u8]) -> Result<ObjectId> {
        let id = ObjectId::of(data);
        self.ensure_with_id(id, data)?;
        Ok(id)
    }

    /// As `ensure`, with the id already computed by the caller.
    pub fn ensure_with_id(&self, id: ObjectId, data: &[u8]) -> Result<()> {
        {
            let mut seen = lock(&self.seen);
            if !seen.insert(id) {
                return Ok(());
            }
        }
        if self.dry || self.store.has_object(&id) {
            return Ok(());
        }
        if let Some(deferred) = lock(&self.deferred).as_mut() {
            deferred.push((id, data.to_vec()));
            return Ok(());
        }
        self.write_object(id, data)
    }

    /// Writes a new object to its temp file, pending until `commit`.
    fn write_object(&self, id: ObjectId, data: &[u8]) -> Result<()> {
        let stored = self.store.encode_object(&id, data)?;
        let tmp = atomic::temp_path(&self.store.tmp_dir(), "obj");
        if stored.len() >= EARLY_WRITEBACK_BYTES {
            atomic::write_new_early(&tmp, &stored, 0o444)?;
        } else {
            atomic::write_new(&tmp, &stored, 0o444)?;
        }
        lock(&self.pending).insert(id, tmp);
        self.new_objects.fetch_add(1, Ordering::Relaxed);
        self.new_bytes
            .fetch_add(stored.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure the encoding of `tree` will exist after `commit`; returns its id. In a
    /// version-1 store, entries are stored without ctimes and inode numbers (`CKT1`), in a
    /// version-2 store without link counts (`CKT2`), which the builds that made them read.
    pub fn ensure_tree(&self, tree: &Tree) -> Result<ObjectId> {
        let linked = tree.entries.iter().any(|e| e.nlink != 0);
        let (id, stored) = if self.store.records_links() || (!linked && self.store.records_stat()) {
            (self.ensure(&tree.encode())?, None)
        } else {
            let mut plain = tree.clone();
            let stat = self.store.records_stat();
            for e in &mut plain.entries {
                e.nlink = 0;
                if !stat {
                    (e.ctime_ns, e.ino) = (0, 0);
                }
            }
            (self.ensure(&plain.encode())?, Some(plain))
        };
        if self.dry {
            // What the store would read back: the encoded form (without stat fields in v1).
            let t = stored.unwrap_or_else(|| tree.clone());
            lock(&self.dry_trees).entry(id).or_insert(t);
        }
        Ok(id)
    }

    /// The trees a dry run built (empty for a batch that writes): with the store's, every tree
    /// of what the dry run merged or captured.
    pub fn take_dry_trees(&self) -> HashMap<ObjectId, Tree> {
        std::mem::take(&mut *lock(&self.dry_trees))
    }

    /// Whether `data` is the content of object `id`: compared with the stored object when
    /// the page cache holds it (see [`Store::cached_object_equals`]), else hashed.
    pub fn holds(&self, id: &ObjectId, data: &[u8], scratch: &mut [u8]) -> bool {
        match self.store.cached_object_equals(id, data, scratch) {
            Some(same) => {
                self.compared_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                same
            }
            None => ObjectId::of(data) == *id,
        }
    }

    /// Bytes `holds` compared with stored objects instead of hashing them.
    pub fn compared_bytes(&self) -> u64 {
        self.compared_bytes.load(Ordering::Relaxed)
    }

    /// Number of objects this batch added to the store.
    pub fn new_objects(&self) -> u64 {
        self.new_objects.load(Ordering::Relaxed)
    }

    /// Bytes (as stored) this batch added.
    pub fn new_bytes(&self) -> u64 {
        self.new_bytes.load(Ordering::Relaxed)
    }

    /// Fsyncs the objects written so far, ahead of `commit`, which then only has the rest to
    /// sync before it renames them all to their names. For a thread with nothing else to do
    /// while others still hash: the disk works meanwhile. The objects stay in `tmp/` until
    /// `commit`, so a failed operation still leaves the store as it was. A batch too big to
    /// fsync object by object is left to `commit`'s syncfs.
    ///
    /// # Errors
    /// I/O errors of the fsyncs (the objects stay pending, for `commit` or `abandon`).
    pub fn sync_ahead(&self) -> Result<()> {
        loop {
            if !self.ahead_allowed.load(Ordering::Relaxed)
                || self.new_objects() as usize > FSYNC_EACH_LIMIT
            {
                return Ok(());
            }
            let taken: Vec<(ObjectId, PathBuf)> = lock(&self.pending).drain().collect();
            if taken.is_empty() {
                return Ok(());
            }
            let tmps: Vec<PathBuf> = taken.iter().map(|(_, t)| t.clone()).collect();
            match sync_parallel(&tmps) {
                Ok(()) => lock(&self.synced).extend(taken),
                Err(e) => {
                    lock(&self.pending).extend(taken);
                    return Err(e);
                }
            }
        }
    }

    /// From now on `sync_ahead` does nothing and everything waits for `commit`: for a pass
    /// that runs while writers are held, which must not wait for the disk.
    pub fn hold_back(&self) {
        self.ahead_allowed.store(false, Ordering::Relaxed);
    }

    /// From now on new objects stay in memory until `write_deferred`: for a pass while the
    /// store's own filesystem is frozen (`checkpoint --freeze-fs`), where a write would wait
    /// for the thaw, that is for itself. Implies `hold_back`.
    pub fn defer_writes(&self) {
        self.hold_back();
        lock(&self.deferred).get_or_insert_with(Vec::new);
    }

    /// Writes the objects `defer_writes` kept in memory (pending until `commit`, as any other)
    /// and ends deferring.
    ///
    /// # Errors
    /// I/O errors writing a temp file.
    pub fn write_deferred(&self) -> Result<()> {
        let deferred = lock(&self.deferred).take().unwrap_or_default();
        for (id, data) in deferred {
            self.write_object(id, &data)?;
        }
        Ok(())
    }

    /// Makes every pending object durable under its final name. On failure the temp files
    /// not yet published are removed (objects already published stay: garbage for gc).
    pub fn commit(&self) -> Result<()> {
        self.write_deferred()?;
        let pending: Vec<(ObjectId, PathBuf)> = lock(&self.pending).drain().collect();
        let ahead: Vec<(ObjectId, PathBuf)> = std::mem::take(&mut *lock(&self.synced));
        if pending.is_empty() && ahead.is_empty() {
            return Ok(());
        }
        let tmps: Vec<PathBuf> = pending
            .iter()
            .chain(&ahead)
            .map(|(_, t)| t.clone())
            .collect();
        let result = self.publish(pending, ahead);
        if result.is_err() {
            for tmp in &tmps {
                let _ignored_cleanup = fs::remove_file(tmp);
            }
        }
        result
    }

    /// The syncs and renames of [`ObjectBatch::commit`].
    fn publish(
        &self,
        pending: Vec<(ObjectId, PathBuf)>,
        ahead: Vec<(ObjectId, PathBuf)>,
    ) -> Result<()> {
        // A few objects (a workspace checkpoint after one turn): fsync each, cheaper than
        // syncfs on a busy filesystem. Many (a first capture): one syncfs for all.
        let few = pending.len() + ahead.len() <= FSYNC_EACH_LIMIT;
        let t0 = std::time::Instant::now();
        if few {
            let tmps: Vec<PathBuf> = pending.iter().map(|(_, t)| t.clone()).collect();
            sync_parallel(&tmps)?;
        } else {
            atomic::sync_filesystem(self.store.root())?;
        }
        let synced = t0.elapsed();
        let n_ahead = ahead.len();
        let compressed = self.store.compressed();
        let mut dirs = BTreeSet::new();
        let n_objects = ahead.len() + pending.len();
        for (id, tmp) in ahead.into_iter().chain(pending) {
            let dest = self.store.object_path(&id, compressed);
            atomic::fault_point("rename").map_err(|e| Error::io(&dest, e))?;
            // Never replaces an existing object; an existing one is success (dedup).
            atomic::publish_new(&tmp, &dest)?;
            if let Some(d) = dest.parent() {
                dirs.insert(d.to_path_buf());
            }
        }
        let renamed = t0.elapsed();
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        if few {
            // One fault step per object for its directory's sync, though objects that share
            // a fan-out directory sync it once (each object has one, so `dirs` is not empty
            // when some share): the steps of a commit then depend on how many objects it
            // writes, not on their ids (which hold mtimes and inode numbers), so the crash
            // tests that count steps see the same count every run.
            for _ in dirs.len()..n_objects {
                atomic::fault_point("fsync").map_err(|e| Error::io(&dirs[0], e))?;
            }
            sync_parallel(&dirs)?;
        } else {
            atomic::sync_filesystem(self.store.root())?;
        }
        log::debug!(
            "{} objects ({n_ahead} synced ahead) synced in {synced:?}, renamed by {renamed:?}, \
             {} directories synced by {:?}; {} MiB of unchanged chunks compared with stored \
             objects instead of hashed",
            self.new_objects(),
            dirs.len(),
            t0.elapsed(),
            self.compared_bytes() >> 20
        );
        Ok(())
    }

    /// Removes the temp files of objects not yet committed (after a failure).
    pub fn abandon(&self) {
        let synced = std::mem::take(&mut *lock(&self.synced));
        for (_, tmp) in lock(&self.pending).drain().chain(synced) {
            let _ignored_cleanup = fs::remove_file(tmp);
        }
    }
}

impl Drop for ObjectBatch<'_> {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// fsync of every path, from several threads; the first error wins.
fn sync_parallel(paths: &[PathBuf]) -> Result<()> {
    let next = AtomicU64::new(0);
    let err: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..FSYNC_THREADS.min(paths.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(p) = paths.get(i) else { return };
                if let Err(e) = atomic::sync_path(p) {
                    lock(&err).get_or_insert(e);
                    return;
                }
            });
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every object file with its id (names that are not object ids are skipped).
///
/// # Errors
/// I/O listing `objects/` or one of its fan-out directories.
pub fn object_files(store: &Store) -> Result<Vec<(PathBuf, ObjectId)>> {
    let mut out = Vec::new();
    for fan in list_dir(&store.objects_dir())? {
        let prefix = file_name(&fan);
        // A symlinked fan-out directory is not followed (doctor reports it).
        let is_dir = std::fs::symlink_metadata(&fan).is_ok_and(|m| m.is_dir());
        if prefix.len() != 2 || !is_dir {
            continue;
        }
        for p in list_dir(&fan)? {
            let name = file_name(&p);
            let hex = name.strip_suffix(".zst").unwrap_or(&name);
            if let Ok(id) = ObjectId::parse(&format!("{prefix}{hex}")) {
                out.push((p, id));
            }
        }
    }
    Ok(out)
}

/// Reading many chunks at once: the one worker pool `verify` and `restore` share.
impl Store {
    /// Reads (so checks: hash and length) every chunk of `list` on up to 8 threads, handing
    /// each result to `each`, in no fixed order; `each` returning `false` stops every thread
    /// (the chunks not yet started are not read). Plain scoped threads over a shared index:
    /// the work is one blocking read per item, with nothing to balance or join beyond that.
    pub fn read_chunks_parallel(
        &self,
        list: &[Chunk],
        each: impl Fn(&Chunk, Result<Vec<u8>>) -> bool + Sync,
    ) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let threads = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 8);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(chunk) = list.get(i) else { return };
                        if !each(chunk, self.read_chunk(chunk)) {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
    }
}

/// The object file format, in one place: what a batch commits and what a copy from elsewhere
/// (a remote's fetch or repair) writes.
impl Store {
    /// The bytes the file of object `id` holds for its content `data`: one zstd frame in a
    /// compressed store, else `data` itself.
    ///
    /// # Errors
    /// Compression failing.
    pub fn encode_object<'d>(
        &self,
        id: &ObjectId,
        data: &'d [u8],
    ) -> Result<std::borrow::Cow<'d, [u8]>> {
        if !self.compressed() {
            return Ok(data.into());
        }
        zstd::bulk::compress(data, ZSTD_LEVEL)
            .map(Into::into)
            .map_err(|e| Error::io_op(format!("compressing object {id}"), e))
    }

    /// Writes object `id`, whose content `data` the caller has checked, as one file in the
    /// store's form: a temp file (synced when `sync`; a cache entry another copy can replace
    /// need not be), published only where no copy exists (never overwritten). `what` names
    /// the temp file's purpose. Returns the bytes written when published, `None` when a copy
    /// was there already.
    ///
    /// # Errors
    /// Compressing, writing or publishing the file.
    pub fn put_object_file(
        &self,
        id: &ObjectId,
        data: &[u8],
        what: &str,
        sync: bool,
    ) -> Result<Option<u64>> {
        let stored = self.encode_object(id, data)?;
        let tmp = atomic::temp_path(&self.tmp_dir(), what);
        atomic::write_new(&tmp, &stored, 0o444)?;
        let synced = if sync {
            atomic::sync_path(&tmp)
        } else {
            Ok(())
        };
        let published = synced
            .and_then(|()| atomic::publish_new(&tmp, &self.object_path(id, self.compressed())));
        let _ignored_cleanup = std::fs::remove_file(&tmp);
        Ok(published?.then_some(stored.len() as u64))
    }
}

#[cfg(test)]
mod tests;
