//! Capturing a live workspace: the base checkpoint's tree merged with the overlay upper layer.
//!
//! Only the upper layer is walked, so the cost is proportional to what the workspace changed,
//! not to the size of the tree: a lower entry the upper does not mention is kept as it is
//! (a directory keeps its tree id without being read). Overlayfs's on-disk format is read as
//! the kernel writes it: a whiteout is a character device 0/0; a directory with
//! `trusted.overlay.opaque=y` hides the lower directory; `trusted.overlay.redirect` names the
//! lower directory a renamed directory (or the lower file a renamed metadata-only copy) came
//! from; a file with `trusted.overlay.metacopy` holds new metadata only, its bytes are the
//! lower file's (content ids reused, nothing read). `trusted.overlay.*` xattrs are never
//! captured. Files the upper holds are read (or reused from the stat cache) with
//! `OnChange::AcceptPrefix`: a file an agent keeps appending to is captured as a prefix (or
//! `Provisional` in the first pass of a checkpoint that freezes the writers). The root's
//! exclude rules from STORE.json apply as in `capture`.
//!
//! An upper directory whose whole subtree keeps the stat keys the last checkpoint cached (the
//! `UpperCache` beside its stat cache) is not merged again: its tree id and totals are reused
//! (`is_clean`), at the cost of one `lstat` per entry under it.
//!
//! The upper layer is the agent's: through the overlay it can create symlinks and FIFOs and
//! rename directories at any instant. So it is walked only through held directory fds (see
//! `safe`): each entry `lstat`ed in its directory, each subdirectory opened from its parent and
//! checked to be the one the `lstat` saw (an entry replaced meanwhile is looked at again), its
//! xattrs and symlink targets read through the held fd, never by a path; the prefetched stats
//! come from the parent directories opened beneath the upper root. A special file (FIFO,
//! socket, device; not a whiteout) fails a checkpoint, naming it, unless excluded; a dry run
//! (`dirty`) lists it instead (`Merged::special`).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::safe::{is_swapped, Dir, Kind, Stat};
use crate::id::ObjectId;
use crate::ingest::reader::{read_files, split_cached, FileData, FileJob, OnChange, Progress};
use crate::ingest::snapshot::Snapshots;
use crate::meta::{dir_entry, entry_of, mtime_ns, special_file_error, stat_key, symlink_entry};
use crate::store::checkpoint::RootRecord;
use crate::store::exclude::Excluder;
use crate::store::object::ObjectBatch;
use crate::store::statcache::{Cached, CachedDir, StatCache, StatKey, UpperCache};
use crate::store::tree::{check_depth, Entry, EntryKind, Tree};
use crate::store::Store;

mod dirs;
use dirs::*;

mod files;
use files::*;

/// Recursive counts, used to keep a root's totals exact without walking unchanged subtrees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub files: i64,
    pub bytes: i64,
    pub dirs: i64,
    pub symlinks: i64,
}

impl Totals {
    /// Adds `o` times `sign` (1 or -1).
    pub fn add(&mut self, o: Totals, sign: i64) {
        self.files += sign * o.files;
        self.bytes += sign * o.bytes;
        self.dirs += sign * o.dirs;
        self.symlinks += sign * o.symlinks;
    }
    /// What was added since `before`.
    pub fn since(self, before: Totals) -> Totals {
        let mut d = self;
        d.add(before, -1);
        d
    }
    fn to_array(self) -> [i64; 4] {
        [self.files, self.bytes, self.dirs, self.symlinks]
    }
    fn from_array(a: [i64; 4]) -> Totals {
        Totals {
            files: a[0],
            bytes: a[1],
            dirs: a[2],
            symlinks: a[3],
        }
    }
}

/// The result of merging one root.
pub struct Merged {
    pub record: RootRecord,
    pub cache: StatCache,
    pub upper_cache: UpperCache,
    /// Change of the root's totals relative to the base.
    pub delta: Totals,
    /// Upper files that had to be read (their stat differed from the last checkpoint's).
    pub files_read: u64,
    pub bytes_read: u64,
    /// Bytes of those files that reflink snapshots showed unchanged, so were not read.
    pub bytes_unread: u64,
    /// Upper directories merged again (listed, their lower tree read): the root and every
    /// directory something changed under since the last checkpoint.
    pub dirs_merged: u64,
    /// Special files found (paths from the root), when the pass reports them rather than
    /// failing (`Pass::report_special`); they are left out of the merged tree.
    pub special: Vec<(PathBuf, Kind)>,
}

enum MNode {
    /// A lower entry the upper does not touch.
    Keep(Entry),
    File(usize),
    /// An entry complete without reading anything (symlinks, metadata-only copies).
    Ready(Entry),
    Dir(Box<MDir>),
}

struct MDir {
    meta: Stat,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    children: Vec<(Vec<u8>, MNode)>,
    rel: Vec<u8>,
    /// The names the upper directory holds (excluded ones and whiteouts too).
    names: Vec<Vec<u8>>,
    /// What handling this directory added to the totals during the walk (its entry in the
    /// parent included); files read later add theirs in `build`.
    walk_delta: Totals,
    /// The recorded inode number of the lower directory this one continues (0: none).
    /// Overlayfs (`xino=on`) shows a merged or renamed directory with its lower one's number,
    /// and the checkpoint records what the workspace shows (docs/inodes.md).
    lower_ino: u64,
}

mod links;

struct Ctx<'a> {
    /// What the walk noted about hardlinks (see `links`).
    links: links::Links,
    store: &'a Store,
    /// The upper root, held (see `safe`): the reading engine opens files beneath it.
    top: Arc<Dir>,
    /// The root's exclude rules (names anywhere, paths from the root), as in `capture`.
    exclude: Excluder,
    base_tree: ObjectId,
    /// The first component of an absolute redirect (`trusted.overlay.redirect`, a path from
    /// the overlay's root): the root's name in a nested upper (`upper/B/.top-ROOT/ROOT`, see
    /// `overlay::mount_overlay`), none in one made before 2026-12 (the overlay's root is the
    /// workspace root).
    redirect_top: Option<Vec<u8>>,
    old: StatCache,
    jobs: Vec<FileJob>,
    /// Per job: the lower file it was copied up from, and whether overlayfs shows the copy
    /// with that file's inode number (`trusted.overlay.origin`).
    sources: Vec<Option<(Entry, bool)>>,
    /// Stat cache entries for files that are not read jobs (metadata-only copies).
    cached_ready: Vec<(Vec<u8>, Cached)>,
    delta: Totals,
    /// The last checkpoint's upper directories, symlinks and whiteouts.
    old_upper: UpperCache,
    /// This merge's, for the next one.
    new_upper: UpperCache,
    /// Upper directories whose whole subtree still has the stat keys `old_upper` recorded.
    clean: HashMap<Vec<u8>, bool>,
    /// Directories taken whole from `old_upper`.
    reused: HashSet<Vec<u8>>,
    on_change: OnChange,
    /// Stat keys whose mtime and ctime are both earlier than this can be cached: the coarse
    /// clock when the merge started (see `merge_root`).
    settled_before: i64,
    /// `lstat` of the paths the last checkpoint cached, taken from all cores before the walk
    /// (see `prefetch_stats`); each is used once, then the walk stats afresh.
    prefetched: HashMap<Vec<u8>, Stat>,
    /// Directories `merge_dir` merged.
    dirs_merged: u64,
    /// List special files in `special` instead of failing (a dry run).
    report_special: bool,
    special: Vec<(PathBuf, Kind)>,
}

impl Ctx<'_> {
    fn settled(&self, k: &StatKey) -> bool {
        k.mtime_ns < self.settled_before && k.ctime_ns < self.settled_before
    }

    /// `lstat` of the entry `name` of the held upper directory `dir` (`rel` from the root):
    /// prefetched, else now; `None` when nothing is there.
    fn lstat_in(&mut self, dir: &Dir, name: &OsStr, rel: &[u8]) -> Result<Option<Stat>> {
        match self.prefetched.remove(rel) {
            Some(m) => Ok(Some(m)),
            None => dir.stat(name),
        }
    }

    /// `lstat` of `rel` below the upper root, for a directory the walk does not hold:
    /// prefetched, else through its parent opened beneath the root. `None` when nothing is
    /// there or a component on the way is no longer a directory (a symlink, say).
    fn lstat_rel(&mut self, rel: &[u8]) -> Result<Option<Stat>> {
        if let Some(m) = self.prefetched.remove(rel) {
            return Ok(Some(m));
        }
        match self.top.stat(Path::new(OsStr::from_bytes(rel))) {
            Err(e) if is_swapped(&e) || is_gone(&e) => Ok(None),
            other => other,
        }
    }
}

/// Whether an error says the entry is no longer there.
fn is_gone(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOENT))
}

/// A directory (its path from the root) and paths of entries in it.
type Siblings<'a> = (&'a [u8], Vec<&'a [u8]>);

/// `lstat` of every path under the upper root `top` that the last checkpoint cached, from
/// every core. The walk then checks a subtree nothing touched (most of an upper layer that
/// grew over many turns) without a system call per entry in turn: one `lstat` costs 3-4 us on
/// a 2-core VM, and a long-mounted workspace's upper layer holds thousands of entries. The
/// paths are grouped by parent: each parent is opened once beneath the root (no symlink on
/// the way, see `safe`), and its entries are `lstat`ed in it by name. A path that cannot be
/// stat'ed is left out: the walk stats it itself and reports what it finds.
fn prefetch_stats(top: &Dir, rels: Vec<&[u8]>) -> HashMap<Vec<u8>, Stat> {
    let total = rels.len();
    let mut by_parent: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
    for rel in rels {
        let parent = rel
            .iter()
            .rposition(|&b| b == b'/')
            .map_or(&rel[..0], |i| &rel[..i]);
        by_parent.entry(parent).or_default().push(rel);
    }
    let groups: Vec<Siblings<'_>> = by_parent.into_iter().collect();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    if total < 256 || threads == 1 {
        return stat_groups(top, &groups);
    }
    // About as many paths per thread, whole directories each.
    let per = total.div_ceil(threads);
    let mut parts: Vec<&[Siblings<'_>]> = Vec::new();
    let (mut start, mut n) = (0, 0);
    for (i, g) in groups.iter().enumerate() {
        n += g.1.len();
        if n >= per {
            parts.push(&groups[start..=i]);
            (start, n) = (i + 1, 0);
        }
    }
    parts.push(&groups[start..]);
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| s.spawn(move || stat_groups(top, part)))
            .collect();
        let mut all = HashMap::with_capacity(total);
        for h in handles {
            // A panicking thread only loses its prefetch; the walk stats those paths itself.
            if let Ok(m) = h.join() {
                all.extend(m);
            }
        }
        all
    })
}

/// `lstat`s each group's paths in their parent directory (`""`: the root), opened once.
fn stat_groups(top: &Dir, groups: &[Siblings<'_>]) -> HashMap<Vec<u8>, Stat> {
    let mut out = HashMap::new();
    for (parent, rels) in groups {
        let held;
        let dir = if parent.is_empty() {
            top
        } else {
            match top.open_dir(Path::new(OsStr::from_bytes(parent))) {
                Ok(d) => {
                    held = d;
                    &held
                }
                Err(_) => continue,
            }
        };
        let skip = if parent.is_empty() {
            0
        } else {
            parent.len() + 1
        };
        for rel in rels {
            if let Ok(Some(m)) = dir.stat(OsStr::from_bytes(&rel[skip..])) {
                out.insert(rel.to_vec(), m);
            }
        }
    }
    out
}

/// What the last checkpoint taken from this upper layer cached (empty after a fresh mount).
#[derive(Default)]
pub struct Previous {
    pub files: StatCache,
    pub upper: UpperCache,
}

/// How a merge reads: when it started, what a file changing while read does, what it skips.
#[derive(Clone, Copy)]
pub(crate) struct Pass<'a> {
    pub(crate) start_ns: i64,
    pub(crate) on_change: OnChange,
    /// Whether big changed files may be read through reflink snapshots (see `snapshot`):
    /// not while the upper's filesystem is frozen, where a clone would wait for the thaw.
    pub(crate) snapshots: bool,
    /// Exclude globs added to the root's rules for this merge (`checkpoint --exclude`).
    pub(crate) exclude: &'a [String],
    /// List special files in `Merged::special` (a dry run) instead of failing on the first.
    pub(crate) report_special: bool,
}

/// Merges `base` (the lower root) with the upper layer of `root` in `branch`'s workspace.
///
/// `pass.start_ns` is `meta::coarse_now_ns()` read before the walk. A stat key whose mtime and
/// ctime are both earlier is cached: the upper layer is on a local filesystem, which stamps
/// every later change of the file (or directory) at or after `start_ns`, so a later change
/// always changes the key. A key stamped in the clock tick the merge started in is not cached,
/// since a change in that same tick could leave it equal, and the changed file would then
/// look unchanged to the next checkpoint.
pub(crate) fn merge_root(
    store: &Store,
    batch: &ObjectBatch<'_>,
    branch: &str,
    root: &str,
    base: &RootRecord,
    previous: Previous,
    pass: Pass<'_>,
) -> Result<Merged> {
    let upper = &store.upper_dir(branch, root);
    let snapshot_dir = store.snapshot_dir(branch, root);
    let Pass {
        start_ns,
        on_change,
        snapshots,
        exclude,
        report_special,
    } = pass;
    let Previous {
        files: old,
        upper: old_upper,
    } = previous;
    // The upper root is the store's (`upper/B/ROOT`); everything below it is the agent's,
    // reached only through this fd.
    let top = Arc::new(Dir::open(upper)?);
    let meta = top.stat_self()?;
    let mut rules = store
        .config()
        .roots
        .get(root)
        .map(|rc| rc.exclude.clone())
        .unwrap_or_default();
    rules.extend(exclude.iter().cloned());
    // Directories cached under other rules may hold entries these exclude, or lack some.
    let fingerprint = rules.join("\n").into_bytes();
    let old_upper = if old_upper.rules == fingerprint {
        old_upper
    } else {
        UpperCache::default()
    };
    let mut ctx = Ctx {
        links: links::Links::default(),
        store,
        top: Arc::clone(&top),
        exclude: Excluder::compile(root, &rules)?,
        base_tree: base.tree,
        redirect_top: Store::upper_is_nested(upper, root).then(|| root.as_bytes().to_vec()),
        old,
        jobs: Vec::new(),
        sources: Vec::new(),
        cached_ready: Vec::new(),
        delta: Totals::default(),
        old_upper,
        new_upper: UpperCache {
            rules: fingerprint,
            ..UpperCache::default()
        },
        clean: HashMap::new(),
        reused: HashSet::new(),
        settled_before: start_ns,
        on_change,
        prefetched: HashMap::new(),
        dirs_merged: 0,
        report_special,
        special: Vec::new(),
    };
    let cached_paths = ctx
        .old
        .keys()
        .chain(ctx.old_upper.dirs.keys())
        .chain(ctx.old_upper.others.keys())
        .map(Vec::as_slice)
        .collect();
    ctx.prefetched = prefetch_stats(&top, cached_paths);
    let lower = Some(load_tree(store, &base.tree)?);
    let xattrs = split_xattrs(|want| top.xattrs_self_where(want))?.user;
    let t0 = std::time::Instant::now();
    let mut root = merge_dir(&mut ctx, lower.as_ref(), &top, Path::new(""), meta, xattrs)?;
    let walked = t0.elapsed();
    let progress = if batch.is_dry_run() {
        Progress::new()
    } else {
        Progress::shown("checkpoint")
    };
    // Reflink snapshots of big changed files where the upper's filesystem shares blocks;
    // kept for the next checkpoint, except in a dry run (`status`).
    let snapshots = snapshots
        .then(|| Snapshots::for_upper(&top, snapshot_dir, !batch.is_dry_run()))
        .flatten();
    let mut results = read_files(
        batch,
        &store.config().chunker,
        &ctx.jobs,
        &progress,
        snapshots.as_ref(),
    )?;
    progress.finish();
    for ((d, source), job) in results.iter_mut().zip(&ctx.sources).zip(&ctx.jobs) {
        // Overlayfs's own (trusted.overlay.origin on copied-up files; user.overlay.* in a
        // user namespace) are never captured.
        let overlay_prefix = crate::fs::userns::overlay_xattr_prefix();
        d.xattrs.retain(|(k, _)| !k.starts_with(overlay_prefix));
        if let (true, Some((from, origin))) = (d.read, source) {
            let name = job.abs.file_name().map_or(&job.rel[..], |n| n.as_bytes());
            (d.ino, d.ctime_ns) = shown_stat(&d.entry(name), from, *origin);
        }
    }
    log::debug!(
        "{}: upper walked in {walked:?} ({} unchanged directories reused), {} files read in {:?}{}",
        upper.display(),
        ctx.reused.len(),
        ctx.jobs.len(),
        t0.elapsed() - walked,
        snapshots.as_ref().map_or(String::new(), |s| format!(
            "; {:.1} MiB of them known unchanged from snapshots, not read",
            s.skipped() as f64 / 1048576.0
        ))
    );
    let (mut cache, files_read, bytes_read) = new_stat_cache(&mut ctx, &results);
    links::relink(&mut ctx, batch, &mut root, &results)?;
    let (tree, subdirs, files) = build(&mut ctx, batch, &root, &results)?;
    let mut delta = ctx.delta;
    delta.add(files, 1);
    carry_reused(&mut ctx, &mut cache);
    let record = RootRecord {
        tree,
        mode: root.meta.mode() & 0o7777,
        uid: root.meta.uid(),
        gid: root.meta.gid(),
        mtime_ns: mtime_ns(&root.meta),
        subdirs,
        files: (base.files as i64 + delta.files).max(0) as u64,
        bytes: (base.bytes as i64 + delta.bytes).max(0) as u64,
        xattrs: root.xattrs.clone(),
    };
    Ok(Merged {
        record,
        cache,
        upper_cache: ctx.new_upper,
        delta,
        files_read,
        bytes_read,
        bytes_unread: snapshots.as_ref().map_or(0, Snapshots::skipped),
        dirs_merged: ctx.dirs_merged,
        special: ctx.special,
    })
}

/// The stat cache the next checkpoint starts from: every file read or reused now, and the
/// cached entries still good. Returns it with the count and bytes of the files read.
fn new_stat_cache(ctx: &mut Ctx<'_>, results: &[FileData]) -> (StatCache, u64, u64) {
    let mut cache = StatCache::new();
    let (mut files_read, mut bytes_read) = (0, 0);
    for (job, d) in ctx.jobs.iter().zip(results) {
        if d.read {
            files_read += 1;
            bytes_read += d.key.size;
        }
        // A file changed too recently to trust its stat key is cached with a key that
        // matches nothing: read again next time, with these chunks (and snapshot) as the
        // previous version to reuse.
        let key = if ctx.settled(&d.key) {
            d.key.clone()
        } else {
            StatKey {
                ctime_ns: i64::MAX,
                ..d.key.clone()
            }
        };
        let c = Cached {
            key,
            chunks: d.chunks.clone(),
            xattrs: d.xattrs.clone(),
            ino: d.ino,
            ctime_ns: d.ctime_ns,
            snapshot: d.snapshot.clone(),
        };
        cache.insert(job.rel.clone(), c);
    }
    for (rel, c) in std::mem::take(&mut ctx.cached_ready) {
        if ctx.settled(&c.key) {
            cache.insert(rel, c);
        }
    }
    (cache, files_read, bytes_read)
}

fn load_tree(store: &Store, id: &ObjectId) -> Result<Tree> {
    Tree::decode(&store.read_object(id)?)
}

/// A path's xattrs, split: overlayfs's markers that the merge reads, and the user's own.
struct Xattrs {
    opaque: bool,
    redirect: Option<Vec<u8>>,
    metacopy: bool,
    /// Copied up from a lower file (overlayfs then shows that file's inode number).
    origin: bool,
    /// Everything but `trusted.overlay.*`, sorted: what a checkpoint records.
    user: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The inode number and ctime to record for `copy`, an upper file copied up from `from`:
/// overlayfs shows it with `from`'s inode number when it recorded the origin; and a copy
/// that changed nothing (a read-write open of the same path) records `from`'s ctime too, so
/// it stays the same entry and the workspace stays clean.
fn shown_stat(copy: &Entry, from: &Entry, origin: bool) -> (u64, i64) {
    if !origin {
        return (copy.ino, copy.ctime_ns);
    }
    // Same name too: a renamed file is a change whatever its ctime.
    let unchanged = Entry {
        ctime_ns: copy.ctime_ns,
        ino: copy.ino,
        ..from.clone()
    } == *copy;
    match (unchanged, from.ino) {
        (true, _) => (from.ino, from.ctime_ns),
        // Not recorded (a tree from before CKT2): the copy's own is as good as any.
        (false, 0) => (copy.ino, copy.ctime_ns),
        (false, ino) => (ino, copy.ctime_ns),
    }
}

/// The lower entry an upper file was copied up from: the one its redirect names (a renamed
/// file), else the one of the same name.
fn copy_source(
    ctx: &Ctx<'_>,
    lower: Option<&Tree>,
    lower_same: Option<&Entry>,
    x: &Xattrs,
) -> Result<Option<Entry>> {
    Ok(match &x.redirect {
        Some(r) if r.starts_with(b"/") => {
            let i = r.iter().rposition(|&c| c == b'/').unwrap_or(0);
            lower_at(ctx, &r[..i])?.and_then(|t| t.get(&r[i + 1..]).cloned())
        }
        Some(r) => lower.and_then(|t| t.get(r).cloned()),
        None => lower_same.cloned(),
    })
}

/// Splits the xattrs `read` returns (given which names to read the values of): overlayfs's
/// markers that the merge needs, the user's own; overlayfs's `origin`, `impure` and the like
/// are listed but not read.
fn split_xattrs(
    read: impl FnOnce(&mut dyn FnMut(&[u8]) -> bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>>,
) -> Result<Xattrs> {
    let mut origin = false;
    let prefix = crate::fs::userns::overlay_xattr_prefix();
    let all = read(&mut |n: &[u8]| match n.strip_prefix(prefix) {
        Some(b"origin") => {
            origin = true;
            false
        }
        Some(b"opaque" | b"redirect" | b"metacopy") => true,
        Some(_) => false,
        None => true,
    })?;
    let mut x = Xattrs {
        opaque: false,
        redirect: None,
        metacopy: false,
        origin,
        user: Vec::new(),
    };
    // In name order already, so `user` is too.
    for (k, v) in all {
        match k.strip_prefix(prefix) {
            Some(b"opaque") => x.opaque = v == b"y",
            Some(b"redirect") => x.redirect = Some(v),
            Some(_) => x.metacopy = true,
            None => x.user.push((k, v)),
        }
    }
    Ok(x)
}

/// Recursive totals of a lower entry (reads the subtree of a directory). Iterative: a stored
/// tree can be deeper than any stack.
fn totals_of(store: &Store, e: &Entry) -> Result<Totals> {
    let mut t = Totals::default();
    let mut todo: Vec<ObjectId> = Vec::new();
    let count = |t: &mut Totals, e: &Entry, todo: &mut Vec<ObjectId>| match &e.kind {
        EntryKind::File { .. } => {
            t.files += 1;
            t.bytes += e.size as i64;
        }
        EntryKind::Symlink { .. } => t.symlinks += 1,
        EntryKind::Dir { tree, .. } => {
            t.dirs += 1;
            todo.push(*tree);
        }
    };
    count(&mut t, e, &mut todo);
    while let Some(id) = todo.pop() {
        for child in &load_tree(store, &id)?.entries {
            count(&mut t, child, &mut todo);
        }
    }
    Ok(t)
}

/// The lower directory tree at `/a/b` (absolute from the root) or `None`.
fn lower_at(ctx: &Ctx<'_>, path: &[u8]) -> Result<Option<Tree>> {
    let mut comps = path.split(|&c| c == b'/').filter(|c| !c.is_empty());
    if let Some(top) = &ctx.redirect_top {
        // From the overlay's root: only the workspace root is in reach of the agent's renames.
        if comps.next() != Some(top.as_slice()) {
            return Ok(None);
        }
    }
    let mut tree = load_tree(ctx.store, &ctx.base_tree)?;
    for comp in comps {
        let next = match tree.get(comp) {
            Some(Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            }) => *tree,
            _ => return Ok(None),
        };
        tree = load_tree(ctx.store, &next)?;
    }
    Ok(Some(tree))
}

fn is_whiteout(m: &Stat) -> bool {
    m.kind() == Kind::CharDevice && m.rdev == 0
}

/// The key an upper entry that is neither a file nor a directory is cached with: its stat key,
/// except for a whiteout, which says all it has to say by being one. Overlayfs makes every
/// whiteout a hard link of one shared inode, so each new whiteout changes the ctime (and link
/// count) of all the others; with their stat keys, every directory holding a whiteout turned
/// dirty at every checkpoint that followed a deletion or a rename, and was merged again (638
/// of an upper layer's directories after 30 turns of `bench/bench_workspace.sh large`).
fn other_key(m: &Stat) -> StatKey {
    if is_whiteout(m) {
        StatKey {
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 0,
        }
    } else {
        stat_key(m)
    }
}

/// How often an entry replaced between its `lstat` and its open is looked at again before
/// the merge fails, naming it.
const REPLACED_RETRIES: usize = 3;

/// One entry of a held upper directory, as `merge_dir` found it.
struct UpperChild<'d, 't> {
    /// The directory holding it, and its name there: every call on it goes through these.
    dir: &'d Dir,
    os_name: &'d OsStr,
    name: Vec<u8>,
    /// Its full path, for messages only.
    abs: PathBuf,
    /// The path from the root, as a path and as the bytes the caches are keyed by.
    rel: PathBuf,
    rel_bytes: Vec<u8>,
    /// Its `lstat`.
    meta: Stat,
    /// The lower entry of the same name, if any.
    lower: Option<&'t Entry>,
}

/// What looking at one upper entry found.
enum Looked {
    Node(MNode),
    /// A whiteout, which hides the lower entry (or a special file a dry run reports).
    Hidden,
    /// Nothing there any more: the lower entry shows.
    Gone,
    /// Not what its `lstat` saw when opened or read (renamed, replaced, swapped for a
    /// symlink): to be looked at again. Nothing was recorded of it yet.
    Replaced,
}

/// Encodes a merged directory bottom-up; returns (tree id, subdirs, what its files read in
/// this merge add to the totals). Records each subdirectory in the upper cache.
fn build(
    ctx: &mut Ctx<'_>,
    batch: &ObjectBatch<'_>,
    dir: &MDir,
    results: &[FileData],
) -> Result<(ObjectId, u32, Totals)> {
    let mut entries = Vec::with_capacity(dir.children.len());
    let mut subdirs = 0u32;
    let mut files = Totals::default();
    for (name, node) in &dir.children {
        match node {
            MNode::Keep(e) | MNode::Ready(e) => {
                if e.is_dir() {
                    subdirs += 1;
                }
                entries.push(e.clone());
            }
            MNode::File(i) => {
                let d = &results[*i];
                files.files += 1;
                files.bytes += d.key.size as i64;
                entries.push(d.entry(name));
            }
            MNode::Dir(sub) => {
                let (tree, sd, sub_files) = build(ctx, batch, sub, results)?;
                files.add(sub_files, 1);
                subdirs += 1;
                let key = stat_key(&sub.meta);
                if ctx.settled(&key) {
                    let mut total = sub.walk_delta;
                    total.add(sub_files, 1);
                    let cached = CachedDir {
                        key,
                        tree,
                        subdirs: sd,
                        entries: sub.children.len() as u64,
                        delta: total.to_array(),
                        xattrs: sub.xattrs.clone(),
                        names: sub.names.clone(),
                        ino: sub.lower_ino,
                    };
                    ctx.new_upper.dirs.insert(sub.rel.clone(), cached);
                }
                let mut entry = dir_entry(
                    name,
                    tree,
                    sd,
                    sub.children.len() as u64,
                    &sub.meta,
                    sub.xattrs.clone(),
                );
                if sub.lower_ino != 0 {
                    entry.ino = sub.lower_ino;
                }
                entries.push(entry);
            }
        }
    }
    let id = batch.ensure_tree(&Tree { entries })?;
    Ok((id, subdirs, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_never_follows_a_swapped_parent() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), b"secret").unwrap();
        // Enough paths to be stat'ed from several threads.
        let mut rels = Vec::new();
        for d in 0..30 {
            std::fs::create_dir(t.path().join(format!("d{d}"))).unwrap();
            for f in 0..10 {
                std::fs::write(t.path().join(format!("d{d}/f{f}")), b"x").unwrap();
                rels.push(format!("d{d}/f{f}"));
            }
        }
        std::os::unix::fs::symlink(outside.path(), t.path().join("link")).unwrap();
        rels.extend(["link/f", "link", "d0", "gone", "d1/gone/x"].map(String::from));
        let top = Dir::open(t.path()).unwrap();
        let got = prefetch_stats(&top, rels.iter().map(|r| r.as_bytes()).collect());
        assert_eq!(got.len(), 300 + 2, "{:?}", got.keys().collect::<Vec<_>>());
        assert!(got[&b"link"[..]].is_symlink());
        assert!(got[&b"d0"[..]].is_dir());
        assert!(!got.contains_key(&b"link/f"[..]));
        let m = std::fs::symlink_metadata(t.path().join("d29/f9")).unwrap();
        assert!(got[&b"d29/f9"[..]].same_object(&Stat::from(&m)));
    }
}
