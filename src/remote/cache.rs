//! Lazy fetching: the [`ObjectSource`] a store with remotes gets, which brings a missing
//! object from the remote on first need, checks it against its id (AEAD tag, length,
//! SHA-256), and keeps it in `objects/` like any other object.
//!
//! Prefetch: a fetched tree queues its subdirectories' trees, and a fetched chunk queues the
//! next chunks of its file (known from the trees fetched so far), for a small pool of
//! threads that fetch them in batches (a batch's blobs that lie side by side in a pack are one
//! ranged GET); a walk or a sequential read then finds them local. A reader whose object is
//! being fetched waits for that fetch rather than downloading it again, and takes the checked
//! bytes from memory ([`ObjectSource::take_fetched`]) instead of reading back and hashing again
//! the copy just written.
//!
//! The cache bound: every lazily fetched object is appended to `cache/remote-fetched`
//! (`<hex> <bytes>` lines). When what that list holds passes the remote's `cache_bytes`,
//! the oldest fetched objects are removed until it is under 90% of it (first fetched, first
//! evicted). Only objects listed there are ever evicted: they came from the remote and can
//! come again; objects this store made itself are never touched. A view that has an
//! evicted object open keeps reading it; the next open fetches it again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::remote::pack::{Index, Kind};
use crate::remote::{list_configs, Remote};
use crate::store::tree::{EntryKind, Tree};
use crate::store::{ObjectSource, Store};

/// Objects a chunk fetch queues ahead of a sequential read.
const READ_AHEAD_CHUNKS: usize = 8;
/// Chunks after a demanded one fetched in the same request (adjacent in their pack: one
/// ranged GET of about 1 MiB).
const DEMAND_CHUNKS_AHEAD: usize = 3;
/// Threads fetching queued objects. Each does one batch at a time: its ranged GETs, then
/// opening and checking the blobs, then writing them; four keep GETs in flight while others
/// decrypt and write.
const PREFETCH_THREADS: usize = 4;
/// Queued objects one prefetch thread takes at once: a sequential reader's next chunks, which
/// lie side by side in their pack, are then one ranged GET of about 4 MiB.
const PREFETCH_BATCH: usize = 16;
/// Bytes of just fetched (checked) objects kept in memory for their reader
/// ([`ObjectSource::take_fetched`]), oldest dropped first: the window of a sequential
/// reader's prefetch, so its chunks are not read back from `objects/` and hashed again.
const HANDOFF_BYTES: usize = 64 << 20;
/// How long a reader waits for another thread's fetch of its object before it asks again
/// (each fetch ends, with the object or an error, well within the backend's timeouts).
const INFLIGHT_WAIT: Duration = Duration::from_secs(1);
/// The index is re-read from the remote for an object it lacks at most this often.
const INDEX_REFRESH: Duration = Duration::from_secs(5);

/// Name of the eviction list in `cache/`.
pub const FETCHED_LIST: &str = "remote-fetched";

struct Opened {
    remote: Remote,
    index: std::sync::RwLock<Arc<Index>>,
    refreshed: Mutex<Instant>,
}

impl Opened {
    fn index(&self) -> Arc<Index> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-reads the remote's index, unless it was read less than [`INDEX_REFRESH`] ago.
    fn refresh_index(&self, store: &Store) -> Result<()> {
        let mut r = lock(&self.refreshed);
        if r.elapsed() >= INDEX_REFRESH {
            *r = Instant::now();
            let fresh = self.remote.sync_index(store)?;
            *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        }
        Ok(())
    }
}

/// A ranged GET of a pack the remote no longer has: a `gc --remote` elsewhere repacked what
/// the index this process read names.
fn pack_gone(r: &Result<Vec<u8>>) -> bool {
    matches!(r, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound)
}

/// The lazy source of one store: its remotes, opened on first need.
pub struct RemoteSource {
    store_root: std::path::PathBuf,
    names: Vec<String>,
    cache_bytes: u64,
    opened: Mutex<Option<Arc<Opened>>>,
    /// Chunk -> the chunks after it in its file.
    next_chunks: Mutex<HashMap<ObjectId, Vec<ObjectId>>>,
    queue: Arc<(Mutex<VecDeque<ObjectId>>, Condvar)>,
    queued: Mutex<HashSet<ObjectId>>,
    workers_started: std::sync::Once,
    fetched_bytes: Mutex<Option<u64>>,
    /// Objects some thread is fetching now (a reader of one waits for that fetch instead of
    /// downloading it again), and the condition signalled as each one lands or fails.
    inflight: Mutex<HashSet<ObjectId>>,
    landed: Condvar,
    /// Checked bytes of objects just fetched, for their first reader.
    handoff: Mutex<Handoff>,
    me: std::sync::Weak<RemoteSource>,
}

/// Fetched objects kept for their reader, at most [`HANDOFF_BYTES`], oldest dropped first.
#[derive(Default)]
struct Handoff {
    data: HashMap<ObjectId, Vec<u8>>,
    order: VecDeque<ObjectId>,
    bytes: usize,
}

impl Handoff {
    fn put(&mut self, id: ObjectId, data: Vec<u8>) {
        if data.len() > HANDOFF_BYTES / 4 {
            return;
        }
        self.bytes += data.len();
        if let Some(old) = self.data.insert(id, data) {
            self.bytes -= old.len();
        } else {
            self.order.push_back(id);
        }
        while self.bytes > HANDOFF_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(d) = self.data.remove(&old) {
                self.bytes -= d.len();
            }
        }
    }

    fn take(&mut self, id: &ObjectId) -> Option<Vec<u8>> {
        let d = self.data.remove(id)?;
        self.bytes -= d.len();
        // Its place in `order` goes when it comes to the front (a stale id there is skipped).
        if self.order.len() > 4 * self.data.len() + 1024 {
            let data = &self.data;
            self.order.retain(|i| data.contains_key(i));
        }
        Some(d)
    }
}

impl std::fmt::Debug for RemoteSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteSource({:?})", self.names)
    }
}

/// The ids a fetch claimed: those it has not released yet are released when it ends, however
/// it ends (a fetch cut short must not leave readers waiting for it).
struct Claimed<'a> {
    src: &'a RemoteSource,
    ids: &'a [ObjectId],
    released: usize,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if let Some(rest) = self.ids.get(self.released..) {
            if !rest.is_empty() {
                self.src.release(rest);
            }
        }
    }
}

/// The factory [`super::open_store`] gives a store ([`Store::with_object_source`]): a source for a store
/// with at least one remote.
pub fn source_for(store: &Store) -> Option<Arc<dyn ObjectSource>> {
    let configs = match list_configs(store) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => return None,
        Err(e) => {
            log::warn!("reading the store's remotes: {e}");
            return None;
        }
    };
    let cache_bytes = configs
        .iter()
        .map(|(_, c)| c.cache_bytes)
        .min()
        .unwrap_or(0);
    Some(Arc::new_cyclic(|me| RemoteSource {
        store_root: store.root().to_path_buf(),
        names: configs.into_iter().map(|(n, _)| n).collect(),
        cache_bytes,
        opened: Mutex::new(None),
        next_chunks: Mutex::new(HashMap::new()),
        queue: Arc::new((Mutex::new(VecDeque::new()), Condvar::new())),
        queued: Mutex::new(HashSet::new()),
        workers_started: std::sync::Once::new(),
        fetched_bytes: Mutex::new(None),
        inflight: Mutex::new(HashSet::new()),
        landed: Condvar::new(),
        handoff: Mutex::new(Handoff::default()),
        me: me.clone(),
    }))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RemoteSource {
    /// The opened remote holding `id` (opening the remotes on first use, re-reading the
    /// index when it lacks `id` and was read more than [`INDEX_REFRESH`] ago).
    fn remote_for(&self, store: &Store, id: &ObjectId) -> Result<Option<Arc<Opened>>> {
        let shared = {
            let mut g = lock(&self.opened);
            if g.is_none() {
                // The first remote that opens (a clone has one: origin).
                let mut last_err = None;
                for n in &self.names {
                    match Remote::open_named(store, n).and_then(|r| {
                        let index = r.cached_index(store)?;
                        Ok(Opened {
                            remote: r,
                            index: std::sync::RwLock::new(Arc::new(index)),
                            refreshed: Mutex::new(Instant::now() - INDEX_REFRESH),
                        })
                    }) {
                        Ok(o) => {
                            *g = Some(Arc::new(o));
                            break;
                        }
                        Err(e) => last_err = Some(e),
                    }
                }
                if g.is_none() {
                    return Err(
                        last_err.unwrap_or_else(|| Error::NotFound("no remote opens".into()))
                    );
                }
            }
            g.clone()
        };
        let Some(shared) = shared else {
            return Ok(None);
        };
        if !shared.index().contains(id) {
            shared.refresh_index(store)?;
        }
        let has = shared.index().contains(id);
        Ok(has.then_some(shared))
    }

    fn start_workers(&self, store: &Store) {
        self.workers_started.call_once(|| {
            for _ in 0..PREFETCH_THREADS {
                let Some(me) = self.me.upgrade() else { return };
                let root = store.root().to_path_buf();
                let _spawned = std::thread::Builder::new()
                    .name("ckptfs-prefetch".into())
                    .spawn(move || prefetch_worker(root, me));
            }
        });
    }

    fn enqueue(&self, store: &Store, ids: Vec<ObjectId>) {
        let mut fresh = Vec::new();
        {
            let inflight = lock(&self.inflight);
            let mut queued = lock(&self.queued);
            for id in ids {
                if queued.len() > 100_000 {
                    queued.clear();
                }
                if !inflight.contains(&id) && queued.insert(id) && !has_local(store, &id) {
                    fresh.push(id);
                }
            }
        }
        if fresh.is_empty() {
            return;
        }
        self.start_workers(store);
        let (q, cv) = &*self.queue;
        let mut g = lock(q);
        for id in fresh {
            g.push_back(id);
        }
        cv.notify_all();
    }

    /// Fetches `ids` (all on `opened`'s remote) into the store; queues what they lead to.
    /// Only a `demand` fetch (a reader waiting) queues the chunks after it: prefetched chunks
    /// queuing more would cascade to the end of every file touched. A reader's view keeps
    /// the window moving (its readahead hints queue what it lacks).
    fn fetch_batch(
        &self,
        store: &Store,
        opened: &Opened,
        ids: &[ObjectId],
        demand: bool,
    ) -> Vec<Result<()>> {
        let mut claim = Claimed {
            src: self,
            ids,
            released: 0,
        };
        let mut index = opened.index();
        let mut results = opened.remote.fetch_objects(&index, ids);
        // Packs gone since the index was read (a repack by another machine's gc): read the
        // index again and ask once more, so a running mount goes on without a `fetch`.
        if results.iter().any(pack_gone) {
            match opened.refresh_index(store) {
                Ok(()) => {
                    let fresh = opened.index();
                    if !Arc::ptr_eq(&fresh, &index) {
                        log::info!(
                            "remote {}: packs gone, read its index again",
                            opened.remote.name
                        );
                        results = opened.remote.fetch_objects(&fresh, ids);
                        index = fresh;
                    }
                }
                Err(e) => log::warn!("re-reading the index of remote {}: {e}", opened.remote.name),
            }
        }
        let kinds: Vec<Option<Kind>> = ids
            .iter()
            .map(|i| index.objects.get(i).map(|l| l.kind))
            .collect();
        let mut ahead = Vec::new();
        let mut out = Vec::new();
        let mut listed = Vec::new();
        let mut listed_at = Vec::new();
        for ((id, r), kind) in ids.iter().zip(results).zip(kinds) {
            out.push(r.and_then(|data| {
                if kind == Some(Kind::Tree) {
                    if let Ok(t) = Tree::decode_object(id, &data) {
                        ahead.extend(self.learn_tree(&t));
                    }
                }
                if let Some(stored_len) = store.put_object_file(id, &data, "fetched", false)? {
                    listed.push((*id, stored_len));
                    listed_at.push(out.len());
                }
                lock(&self.handoff).put(*id, data);
                Ok(())
            }));
            // One append per batch, unless the batch would pass the cache bound: then the
            // cache is trimmed now, so it never holds more than one object over its bound.
            if self.passes_bound(&listed) {
                self.flush_fetched(store, &mut listed, &mut listed_at, &mut out);
            }
            // Landed (or failed): a reader waiting for it goes on.
            self.release(std::slice::from_ref(id));
            claim.released += 1;
            if demand {
                if let Some(next) = lock(&self.next_chunks).get(id) {
                    ahead.extend(next.iter().copied());
                }
            }
        }
        self.flush_fetched(store, &mut listed, &mut listed_at, &mut out);
        self.enqueue(store, ahead);
        out
    }

    /// Whether the objects `listed` (fetched, not yet accounted) take the cache past its
    /// bound (or the cache's size is not known yet).
    fn passes_bound(&self, listed: &[(ObjectId, u64)]) -> bool {
        let pending: u64 = listed.iter().map(|(_, n)| n).sum();
        lock(&self.fetched_bytes).is_none_or(|t| t + pending > self.cache_bytes)
    }

    /// Accounts the objects `listed` ([`RemoteSource::list_fetched`]) and empties the list;
    /// on failure, the results of those objects (`out` at `listed_at`) say why.
    fn flush_fetched(
        &self,
        store: &Store,
        listed: &mut Vec<(ObjectId, u64)>,
        listed_at: &mut Vec<usize>,
        out: &mut [Result<()>],
    ) {
        if let Err(e) = self.list_fetched(store, listed) {
            let msg = e.to_string();
            for &i in listed_at.iter() {
                out[i] = Err(Error::Invalid(msg.clone()));
            }
        }
        listed.clear();
        listed_at.clear();
    }

    /// Marks the `ids` that are neither in the store nor being fetched as being fetched by
    /// the caller (who must [`RemoteSource::release`] each); returns them.
    fn claim(&self, store: &Store, ids: &[ObjectId]) -> Vec<ObjectId> {
        let missing: Vec<ObjectId> = ids
            .iter()
            .filter(|i| !has_local(store, i))
            .copied()
            .collect();
        let mut inflight = lock(&self.inflight);
        missing
            .into_iter()
            .filter(|i| inflight.insert(*i))
            .collect()
    }

    /// Takes `ids` out of the queued set (they left the queue), so a later need can queue
    /// them again.
    fn unqueue(&self, ids: &[ObjectId]) {
        let mut queued = lock(&self.queued);
        for id in ids {
            queued.remove(id);
        }
    }

    /// Ends the caller's fetch of `ids` (landed or failed) and wakes whoever waits for one.
    fn release(&self, ids: &[ObjectId]) {
        {
            let mut inflight = lock(&self.inflight);
            let mut queued = lock(&self.queued);
            for id in ids {
                inflight.remove(id);
                queued.remove(id);
            }
        }
        self.landed.notify_all();
    }

    /// Waits while another thread fetches `id`; whether it is then here (in the store).
    fn wait_inflight(&self, store: &Store, id: &ObjectId) -> bool {
        let mut inflight = lock(&self.inflight);
        let mut waited = false;
        while inflight.contains(id) {
            waited = true;
            inflight = self
                .landed
                .wait_timeout(inflight, INFLIGHT_WAIT)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(inflight);
        waited && has_local(store, id)
    }

    /// Records a tree's files' chunk sequences; returns its subdirectories' trees.
    fn learn_tree(&self, t: &Tree) -> Vec<ObjectId> {
        let mut subtrees = Vec::new();
        let mut nc = lock(&self.next_chunks);
        if nc.len() > 1_000_000 {
            nc.clear();
        }
        for e in &t.entries {
            match &e.kind {
                EntryKind::Dir { tree, .. } => subtrees.push(*tree),
                EntryKind::File { chunks } if chunks.len() > 1 => {
                    for (i, c) in chunks.iter().enumerate() {
                        let next: Vec<ObjectId> = chunks[i + 1..]
                            .iter()
                            .take(READ_AHEAD_CHUNKS)
                            .map(|c| c.id)
                            .collect();
                        if !next.is_empty() {
                            nc.insert(c.id, next);
                        }
                    }
                }
                _ => {}
            }
        }
        subtrees
    }

    /// Accounts objects just written into the store (not synced: cache entries the remote
    /// can give again) for eviction: one append of their `(id, stored bytes)` lines to the
    /// list, and an eviction when the list passes the cache bound.
    fn list_fetched(&self, store: &Store, listed: &[(ObjectId, u64)]) -> Result<()> {
        if listed.is_empty() {
            return Ok(());
        }
        let list = store.cache_dir().join(FETCHED_LIST);
        let lines: Vec<String> = listed
            .iter()
            .map(|(id, n)| format!("{} {n}", id.to_hex()))
            .collect();
        atomic::append_line_with(&list, &lines.join("\n"), false)?;
        let over = {
            let mut fb = lock(&self.fetched_bytes);
            let total = fb.get_or_insert_with(|| listed_bytes(&list));
            *total += listed.iter().map(|(_, n)| n).sum::<u64>();
            *total > self.cache_bytes
        };
        if over {
            let left = evict(store, self.cache_bytes / 10 * 9)?;
            *lock(&self.fetched_bytes) = Some(left);
        }
        Ok(())
    }
}

/// The trees that lie in `packs` (pack numbers of `index`): a walk needs them all, and
/// they lie side by side in their pack, so one ranged GET brings them.
fn pack_trees<'a>(index: &'a Index, packs: &'a [u32]) -> impl Iterator<Item = ObjectId> + 'a {
    index
        .objects
        .iter()
        .filter(|(_, l)| l.kind == Kind::Tree && packs.contains(&l.pack))
        .map(|(i, _)| *i)
}

fn has_local(store: &Store, id: &ObjectId) -> bool {
    store.has_object(id)
}

fn listed_bytes(list: &std::path::Path) -> u64 {
    std::fs::read_to_string(list)
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()))
                .sum()
        })
        .unwrap_or(0)
}

/// Removes the oldest lazily fetched objects until those listed hold at most `target`
/// bytes; returns what they hold then.
///
/// # Errors
/// I/O on the list.
pub fn evict(store: &Store, target: u64) -> Result<u64> {
    let list = store.cache_dir().join(FETCHED_LIST);
    let _guard = EVICTING.lock();
    let text = match std::fs::read_to_string(&list) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(&list, e)),
    };
    let entries: Vec<(ObjectId, u64)> = text
        .lines()
        .filter_map(|l| {
            let (h, n) = l.split_once(' ')?;
            Some((ObjectId::parse(h).ok()?, n.parse().ok()?))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    let mut keep_from = 0;
    for (i, (id, n)) in entries.iter().enumerate() {
        if total <= target {
            keep_from = i;
            break;
        }
        keep_from = i + 1;
        if let Some((p, _)) = store.locate_object(id) {
            if let Err(e) = std::fs::remove_file(&p) {
                log::warn!("evicting {}: {e}", p.display());
            }
        }
        total -= n;
    }
    let rest: String = entries[keep_from..]
        .iter()
        .map(|(id, n)| format!("{} {n}\n", id.to_hex()))
        .collect();
    atomic::write_atomic_replace_volatile(&list, rest.as_bytes(), 0o600)?;
    log::info!("evicted {keep_from} lazily fetched objects ({total} bytes remain)");
    Ok(total)
}

static EVICTING: Mutex<()> = Mutex::new(());

impl ObjectSource for RemoteSource {
    fn holds(&self, store: &Store, id: &ObjectId) -> bool {
        matches!(self.remote_for(store, id), Ok(Some(_)))
    }

    fn repair(&self, store: &Store, id: &ObjectId) -> Result<bool> {
        let Some(opened) = self.remote_for(store, id)? else {
            return Ok(false);
        };
        let index = opened.index();
        let mut got = opened.remote.fetch_objects(&index, &[*id]);
        let data = got
            .pop()
            .unwrap_or_else(|| Err(Error::Invalid("no reply".into())))?;
        // Whichever form the bad copy had goes; the good one takes the store's form.
        if let Some((p, _)) = store.locate_object(id) {
            atomic::remove_file(&p)?;
        }
        store.put_object_file(id, &data, "repaired", true)?;
        Ok(true)
    }

    fn prefetch(&self, store: &Store, ids: &[ObjectId]) {
        self.enqueue(store, ids.to_vec());
    }

    fn fetch(&self, store: &Store, id: &ObjectId) -> Result<bool> {
        debug_assert_eq!(store.root(), self.store_root);
        let Some(opened) = self.remote_for(store, id)? else {
            return Ok(false);
        };
        let index = opened.index();
        let Some(loc) = index.objects.get(id).copied() else {
            return Ok(false);
        };
        // A prefetch thread (or another reader) fetching it now: its result, not a second
        // download. Should that fetch fail, this reader tries on its own.
        if self.wait_inflight(store, id) {
            return Ok(true);
        }
        // What else one request can bring: every tree of a tree's pack (they sit side by
        // side, and a walk needs them all), or the next chunks of a file. `claim` takes the
        // batch at once: a second walker in the same pack claims none of it and waits.
        let mut batch = vec![*id];
        if loc.kind == Kind::Tree {
            batch.extend(pack_trees(&index, &[loc.pack]).filter(|i| i != id));
        } else if let Some(next) = lock(&self.next_chunks).get(id) {
            batch.extend(next.iter().take(DEMAND_CHUNKS_AHEAD).copied());
        }
        loop {
            let claimed = self.claim(store, &batch);
            if claimed.first() == Some(id) {
                let mut r = self.fetch_batch(store, &opened, &claimed, true);
                r.truncate(1);
                r.pop().unwrap_or(Ok(()))?;
                return Ok(true);
            }
            // Someone else took it between the wait and the claim (or it landed).
            self.release(&claimed);
            if store.has_object(id) || self.wait_inflight(store, id) {
                return Ok(true);
            }
        }
    }

    fn take_fetched(&self, id: &ObjectId) -> Option<Vec<u8>> {
        lock(&self.handoff).take(id)
    }
}

/// Fetches the queued `ids` that nobody else is fetching. A queued tree brings every tree of
/// its pack, as a reader's does (see `RemoteSource::fetch`): the 16 trees of a walk's queue
/// lie anywhere in their pack; fetched as they lie they are 16 GETs, and leave holes in the
/// pack a reader then fetches.
fn prefetch_batch(store: &Store, src: &RemoteSource, opened: &Opened, ids: Vec<ObjectId>) {
    let index = opened.index();
    let mut packs: Vec<u32> = ids
        .iter()
        .filter_map(|i| index.objects.get(i))
        .filter(|l| l.kind == Kind::Tree)
        .map(|l| l.pack)
        .collect();
    packs.sort_unstable();
    packs.dedup();
    let mut want = ids;
    want.extend(pack_trees(&index, &packs));
    // `claim` takes each id once: those of `ids` in `packs` are not fetched twice.
    let claimed = src.claim(store, &want);
    if claimed.is_empty() {
        return;
    }
    for r in src.fetch_batch(store, opened, &claimed, false) {
        if let Err(e) = r {
            log::debug!("prefetch: {e}");
        }
    }
}

/// A prefetch thread: takes up to a batch of queued ids and fetches those still missing.
fn prefetch_worker(root: std::path::PathBuf, src: Arc<RemoteSource>) {
    let store = match Store::open(&root) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("prefetch: {e}");
            return;
        }
    };
    loop {
        let batch: Vec<ObjectId> = {
            let (m, cv) = &*src.queue;
            let mut g = lock(m);
            while g.is_empty() {
                g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            let n = g.len().min(PREFETCH_BATCH);
            g.drain(..n).collect()
        };
        let missing: Vec<ObjectId> = batch
            .iter()
            .filter(|i| !has_local(&store, i))
            .copied()
            .collect();
        if let Some(first) = missing.first() {
            match src.remote_for(&store, first) {
                Ok(Some(opened)) => prefetch_batch(&store, &src, &opened, missing),
                Ok(None) => {}
                Err(e) => log::debug!("prefetch: {e}"),
            }
        }
        // The batch's others (already here, or someone else's) leave the queued set too.
        src.unqueue(&batch);
    }
}
