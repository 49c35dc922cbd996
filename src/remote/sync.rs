//! push, fetch, pull and clone: moving history between a store and a remote.
//!
//! - **push** (under the remote lock): what the remote lacks — objects (skipping every
//!   subtree whose tree the remote index already has), packed; then the index naming the
//!   packs; then checkpoint records; then refs. A remote branch is moved only if its head is
//!   the one last fetched or an ancestor of the new head (else refused like git's
//!   non-fast-forward, unless `force`); a label already there is never moved.
//! - **fetch**: index files, refs and the records they reach (objects stay remote: they are
//!   fetched lazily, see `cache`); local branches and labels the store lacks are created.
//! - **pull**: fetch, then fast-forward each local branch to its remote head.
//! - **clone**: a new store shaped like the remote's (roots, chunker), then fetch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::remote::pack::{self, Index, Kind, PackWriter};
use crate::remote::{
    crypto, forgotten, lock, read_refs, write_config, write_refs, RefValue, Remote, RemoteConfig,
    RemoteRefs,
};
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::EntryKind;
use crate::store::{InitOptions, Store};

/// Packs a push keeps in flight to the server at once.
const PACKS_IN_FLIGHT: usize = 4;
/// Test knob: milliseconds to wait before each upload of packs (so a test can kill a server
/// or start a second push while one is in flight). Unset in normal use.
pub(crate) const PACE_ENV: &str = "CKPTFS_REMOTE_PACE_MS";

/// What `push` did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PushReport {
    pub remote: String,
    pub objects: u64,
    /// Bytes uploaded in packs (sealed, compressed).
    pub bytes: u64,
    pub packs: u64,
    pub records: u64,
    /// Branches moved: name -> (old remote head, new).
    pub branches: BTreeMap<String, RefMove>,
    /// Labels created on the remote.
    pub labels: Vec<String>,
    /// Objects recovered from packs an interrupted push left without an index.
    pub recovered: u64,
    /// Checkpoints forgotten in this store whose tombstones went to the remote.
    pub forgotten: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RefMove {
    pub old: Option<ObjectId>,
    pub new: ObjectId,
}

/// What to push.
#[derive(Clone, Default)]
pub struct PushOptions {
    /// Branch names, label names or checkpoint specs; empty: every branch and label.
    pub what: Vec<String>,
    pub force: bool,
}

/// Local checkpoints reachable from `heads` through parents (those recorded here).
fn history(store: &Store, heads: &[ObjectId]) -> Result<Vec<(ObjectId, Checkpoint)>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut stack: Vec<ObjectId> = heads.to_vec();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        let c = match store.read_checkpoint(&id) {
            Ok(c) => c,
            // A parent `forget` took out: the history goes on without it.
            Err(Error::NotFound(_)) if !heads.contains(&id) => continue,
            Err(e) => return Err(e),
        };
        stack.extend(c.parents.iter().copied());
        out.push((id, c));
    }
    Ok(out)
}

fn is_ancestor(store: &Store, anc: &ObjectId, of: &ObjectId) -> Result<bool> {
    Ok(history(store, &[*of])?.iter().any(|(i, _)| i == anc))
}

/// Packs of the remote that no index names: their data blobs (from their trailers) become
/// a new index, so a push that died after uploading them is not repeated. Trees are left
/// out: an index entry for a tree promises its subtree, which a dead push may not have
/// finished.
fn recover_orphans(remote: &Remote, store: &Store, idx: &mut Index) -> Result<u64> {
    let known: HashSet<String> = (0..idx.packs.len() as u32)
        .map(|n| idx.pack_key(n))
        .collect();
    let mut entries = Vec::new();
    for (key, size) in remote.backend.list("packs/")? {
        if known.contains(&key) || size < 4 {
            continue;
        }
        let Some(name) = key.strip_prefix("packs/") else {
            continue;
        };
        let Ok(hash) = ObjectId::parse(name) else {
            continue;
        };
        let tail_len = size.min(1 << 20);
        let mut got = remote
            .backend
            .get_ranges(&[(key.clone(), size - tail_len..size)]);
        let tail = got
            .pop()
            .unwrap_or_else(|| Err(Error::Invalid("no reply".into())))?;
        match pack::parse_trailer(&remote.keys, &tail, name) {
            Ok(list) => {
                for (id, kind, off, len, raw) in list {
                    if kind == Kind::Data && !idx.contains(&id) {
                        entries.push((id, hash.0, kind, off, len, raw));
                    }
                }
            }
            Err(e) => log::warn!("remote {}: skipping pack {key}: {e}", remote.name),
        }
    }
    if entries.is_empty() {
        return Ok(0);
    }
    let n = entries.len() as u64;
    upload_index(remote, store, &entries)?;
    for (id, h, kind, off, len, raw) in entries {
        let p = idx.pack_number(h);
        idx.objects.insert(
            id,
            pack::Loc {
                pack: p,
                kind,
                offset: off,
                len,
                raw_len: raw,
            },
        );
    }
    Ok(n)
}

fn upload_index(remote: &Remote, store: &Store, entries: &[pack::IndexEntry]) -> Result<()> {
    let sealed = pack::seal_index(&remote.keys, &pack::encode_index(entries))?;
    let name = crypto::hex(&ObjectId::of(&sealed).0);
    remote
        .backend
        .put(&format!("index/{name}"), sealed.clone())?;
    let dir = crate::remote::index_cache_dir(store, &remote.name);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    atomic::write_atomic_replace_volatile(&dir.join(&name), &sealed, 0o600)
}

/// The objects of `checkpoints` the remote lacks, data first then trees (children before
/// parents), skipping subtrees whose tree the index has.
fn missing_objects(
    store: &Store,
    idx: &Index,
    checkpoints: &[&Checkpoint],
) -> Result<Vec<(ObjectId, Kind, u32)>> {
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut data = Vec::new();
    let mut trees = Vec::new();
    let mut stack: Vec<ObjectId> = Vec::new();
    for c in checkpoints {
        for r in c.roots.values() {
            stack.push(r.tree);
        }
    }
    while let Some(t) = stack.pop() {
        if idx.contains(&t) || !seen.insert(t) {
            continue;
        }
        let tree = store.read_tree(&t)?;
        trees.push((t, Kind::Tree, 0));
        for e in &tree.entries {
            match &e.kind {
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::File { chunks } => {
                    for c in chunks {
                        if !idx.contains(&c.id) && seen.insert(c.id) {
                            data.push((c.id, Kind::Data, c.len));
                        }
                    }
                }
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    trees.reverse();
    data.extend(trees);
    Ok(data)
}

/// Which refs a push moves: (branches name -> head, labels name -> id, extra checkpoints).
type Targets = (
    BTreeMap<String, ObjectId>,
    BTreeMap<String, ObjectId>,
    Vec<ObjectId>,
);

fn targets(store: &Store, what: &[String]) -> Result<Targets> {
    let mut branches = BTreeMap::new();
    let mut labels = BTreeMap::new();
    let mut extra = Vec::new();
    if what.is_empty() {
        for (n, b) in store.list_branches()? {
            if let Some(h) = b.head {
                branches.insert(n, h);
            }
        }
        for (n, id) in store.list_labels()? {
            labels.insert(n, id);
        }
        return Ok((branches, labels, extra));
    }
    for w in what {
        if crate::store::refs::check_name("branch", w).is_ok() {
            if let Some(b) = store.read_branch(w)? {
                let h = b.head.ok_or_else(|| {
                    Error::Invalid(format!("branch {w} has no checkpoint to push"))
                })?;
                branches.insert(w.clone(), h);
                continue;
            }
            if let Some(id) = store.read_label(w)? {
                labels.insert(w.clone(), id);
                continue;
            }
        }
        let id = store.resolve(w)?;
        extra.push(id);
        for (n, l) in store.list_labels()? {
            if l == id {
                labels.insert(n, l);
            }
        }
    }
    Ok((branches, labels, extra))
}

/// Pushes to `remote` (see the module doc).
///
/// # Errors
/// `Conflict` for a non-fast-forward branch or a label that differs on the remote (nothing is
/// uploaded then), or the remote locked by another push or gc; server errors (the push
/// stops; what it uploaded is garbage or recovered by the next push).
pub fn push(store: &Store, remote: &Remote, opts: &PushOptions) -> Result<PushReport> {
    let (branches, labels, extra) = targets(store, &opts.what)?;
    let lock = lock::acquire(remote, "push")?;
    let mut idx = remote.sync_index(store)?;
    let mut report = PushReport {
        remote: remote.name.clone(),
        ..Default::default()
    };
    report.recovered = recover_orphans(remote, store, &mut idx)?;

    // Refs first, before anything is uploaded: a refused push uploads nothing.
    let tracking = read_refs(store, &remote.name)?;
    let remote_branches = remote.list_refs("branches")?;
    let remote_labels = remote.list_refs("labels")?;
    let (moves, new_labels) = plan_refs(
        store,
        remote,
        opts.force,
        (&branches, &labels),
        (&remote_branches, &remote_labels),
        &tracking,
    )?;

    // Records the remote lacks, with every ancestor.
    let mut heads: Vec<ObjectId> = moves.values().map(|m| m.new).collect();
    heads.extend(new_labels.iter().map(|l| l.1));
    heads.extend(extra.iter().copied());
    let on_remote: HashSet<String> = remote
        .backend
        .list("records/")?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    // This store's forgets go to the remote; checkpoints forgotten there (by any machine) are
    // not brought back, unless a ref of this push names one.
    let remote_forgotten = forgotten::list(remote)?;
    let mut ref_heads: HashSet<ObjectId> = remote_branches
        .values()
        .chain(remote_labels.values())
        .copied()
        .collect();
    ref_heads.extend(heads.iter().copied());
    let tombs = forgotten::pending(store, remote, &remote_forgotten, &on_remote, &ref_heads)?;
    let mut new_records = Vec::new();
    for (id, c) in history(store, &heads)? {
        let forgotten_there =
            remote_forgotten.get(remote, &id).is_some() && !ref_heads.contains(&id);
        if !on_remote.contains(&remote.record_key(&id)) && !forgotten_there {
            new_records.push((id, c));
        }
    }
    let cps: Vec<&Checkpoint> = new_records.iter().map(|(_, c)| c).collect();
    let objects = missing_objects(store, &idx, &cps)?;

    let entries = upload_packs(store, remote, &objects, &mut report)?;
    if !entries.is_empty() {
        upload_index(remote, store, &entries)?;
    }

    // Tombstones, records, then refs.
    forgotten::publish(remote, &tombs)?;
    report.forgotten = tombs.len() as u64;
    let mut recs = Vec::new();
    for (id, c) in &new_records {
        recs.push((remote.record_key(id), remote.seal_record(id, &c.encode())?));
    }
    report.records = recs.len() as u64;
    remote.backend.put_many(recs)?;
    let now = crate::text::time::now_ns();
    let mut tracked = RemoteRefs {
        branches: remote_branches,
        labels: remote_labels,
        updated_ns: now,
    };
    for (name, id) in &new_labels {
        remote.write_ref(
            &format!("labels/{name}"),
            &RefValue {
                head: *id,
                time_ns: now,
            },
        )?;
        tracked.labels.insert(name.clone(), *id);
        report.labels.push(name.clone());
    }
    for (name, m) in &moves {
        remote.write_ref(
            &format!("branches/{name}"),
            &RefValue {
                head: m.new,
                time_ns: now,
            },
        )?;
        tracked.branches.insert(name.clone(), m.new);
    }
    report.branches = moves;
    write_refs(store, &remote.name, &tracked)?;
    lock.release()?;
    Ok(report)
}

/// Ref names and the checkpoints they name.
type Refs = BTreeMap<String, ObjectId>;
/// The branches a push moves, and the labels it adds.
type RefPlan = (BTreeMap<String, RefMove>, Vec<(String, ObjectId)>);

/// The refs a push moves, checked before anything is uploaded (a refused push uploads
/// nothing): a branch only forward (its remote head an ancestor of ours) unless `force`, a
/// label never (one the remote names differently refuses the push).
fn plan_refs(
    store: &Store,
    remote: &Remote,
    force: bool,
    (branches, labels): (&Refs, &Refs),
    (remote_branches, remote_labels): (&Refs, &Refs),
    tracking: &RemoteRefs,
) -> Result<RefPlan> {
    let mut moves = BTreeMap::new();
    for (name, head) in branches {
        let old = remote_branches.get(name).copied();
        match old {
            Some(r) if r == *head => continue,
            Some(r) if !force => {
                let seen = tracking.branches.get(name) == Some(&r);
                if !is_ancestor(store, &r, head)? {
                    return Err(Error::Conflict(format!(
                        "remote {} branch {name} is at {}, which is not an ancestor of {} \
                         ({}); there is no merge yet: push this work as another branch \
                         (`ckptfs fork STORE {name} NEW`, then push), or replace the remote's \
                         head with push --force",
                        remote.name,
                        r.short(),
                        head.short(),
                        if seen {
                            "it diverged"
                        } else {
                            "it moved since the last fetch"
                        }
                    )));
                }
            }
            _ => {}
        }
        moves.insert(name.clone(), RefMove { old, new: *head });
    }
    let mut new_labels = Vec::new();
    for (name, id) in labels {
        match remote_labels.get(name) {
            Some(r) if r == id => {}
            Some(r) => {
                return Err(Error::Conflict(format!(
                    "remote {} label {name} names {}, not {} (labels never move)",
                    remote.name,
                    r.short(),
                    id.short()
                )))
            }
            None => new_labels.push((name.clone(), *id)),
        }
    }
    Ok((moves, new_labels))
}

/// Packs `objects` (trees and data in separate packs, as restic: a lazy walk then fetches a
/// pack's trees in one ranged GET, see `cache`) and uploads them `PACKS_IN_FLIGHT` at a time
/// from a second thread. Returns the index entries of what went up.
fn upload_packs(
    store: &Store,
    remote: &Remote,
    objects: &[(ObjectId, Kind, u32)],
    report: &mut PushReport,
) -> Result<Vec<pack::IndexEntry>> {
    let mut entries: Vec<pack::IndexEntry> = Vec::new();
    let (tx, rx) = std::sync::mpsc::sync_channel::<(String, Vec<u8>)>(PACKS_IN_FLIGHT);
    let built: Result<()> = std::thread::scope(|s| {
        let pace = std::env::var(PACE_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(std::time::Duration::from_millis);
        let uploader = s.spawn(move || -> Result<()> {
            let mut batch = Vec::new();
            for item in rx.iter() {
                batch.push(item);
                if let Some(p) = pace {
                    std::thread::sleep(p);
                }
                while batch.len() < PACKS_IN_FLIGHT && pace.is_none() {
                    match rx.try_recv() {
                        Ok(i) => batch.push(i),
                        Err(_) => break,
                    }
                }
                remote.backend.put_many(std::mem::take(&mut batch))?;
            }
            Ok(())
        });
        let mut fill = || -> Result<()> {
            // Trees and data in separate packs (as restic): a lazy walk then fetches a
            // pack's trees in one ranged GET (see `cache`).
            let mut w = PackWriter::default();
            let mut wt = PackWriter::default();
            let mut send = |w: PackWriter, report: &mut PushReport| -> Result<()> {
                let (bytes, hash, list) = w.finish(&remote.keys)?;
                report.packs += 1;
                report.bytes += bytes.len() as u64;
                for (id, kind, off, len, raw) in list {
                    entries.push((id, hash, kind, off, len, raw));
                }
                tx.send((format!("packs/{}", crypto::hex(&hash)), bytes))
                    .map_err(|_| Error::Invalid("the upload stopped".into()))
            };
            // On a terminal, the shared bar (`crate::progress`: off with --quiet and --json).
            let progress = Progress::items("push", "objects", Some(objects.len() as u64));
            for (id, kind, len) in objects {
                let data = match kind {
                    Kind::Tree => {
                        store.read_object_bounded(id, crate::store::tree::MAX_TREE_BYTES)?
                    }
                    Kind::Data => {
                        store.read_chunk(&crate::store::tree::Chunk { id: *id, len: *len })?
                    }
                };
                let into = if *kind == Kind::Tree { &mut wt } else { &mut w };
                into.add(&remote.keys, *id, *kind, &data)?;
                report.objects += 1;
                progress.add_items(1);
                progress.add_bytes(data.len() as u64);
                if into.is_full() {
                    send(std::mem::take(into), report)?;
                }
            }
            for last in [w, wt] {
                if !last.is_empty() {
                    send(last, report)?;
                }
            }
            Ok(())
        };
        let filled = fill();
        drop(tx);
        let uploaded = uploader
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("the upload thread panicked".into())));
        // The server's error names the cause; a reader's names the object.
        uploaded.and(filled)
    });
    built?;
    Ok(entries)
}

/// What `fetch` brought.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FetchReport {
    pub remote: String,
    pub records: u64,
    pub branches: BTreeMap<String, ObjectId>,
    pub labels: BTreeMap<String, ObjectId>,
    /// Local branches created for remote branches the store did not have.
    pub created_branches: Vec<String>,
    pub created_labels: Vec<String>,
    /// Objects the remote holds (in its index).
    pub remote_objects: u64,
    /// Checkpoints forgotten on the remote, stepped over (a tombstone written here for each
    /// the store had no record and no tombstone of).
    pub forgotten: u64,
}

/// Brings the remote's index, refs and records (see the module doc).
///
/// # Errors
/// Server errors; a record or ref that fails authentication or its hash.
pub fn fetch(store: &Store, remote: &Remote) -> Result<FetchReport> {
    let idx = remote.sync_index_shown(store, "fetch index")?;
    let branches = remote.list_refs("branches")?;
    let labels = remote.list_refs("labels")?;
    let gone = forgotten::list(remote)?;
    let mut report = FetchReport {
        remote: remote.name.clone(),
        remote_objects: idx.objects.len() as u64,
        ..Default::default()
    };
    let heads: HashSet<ObjectId> = branches.values().chain(labels.values()).copied().collect();
    let mut stack: Vec<ObjectId> = heads.iter().copied().collect();
    stack.sort();
    // Records: at most as many as the remote lists (counted only when a bar is drawn).
    let progress = Progress::items("fetch records", "records", None);
    if progress.is_shown() {
        progress.set_total(remote.backend.list("records/")?.len() as u64);
    }
    let mut seen = HashSet::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(t) = gone.get(remote, &id).filter(|_| !heads.contains(&id)) {
            stack.extend(t.parents.iter().copied());
            report.forgotten += 1;
            if !store.checkpoint_path(&id).exists() && store.read_tombstone(&id)?.is_none() {
                store.write_tombstone(t)?;
            }
            continue;
        }
        progress.add_items(1);
        let c = match store.read_checkpoint(&id) {
            Ok(c) => c,
            Err(Error::NotFound(_)) => {
                let Some(data) = remote.get_record(&id)? else {
                    // Not on the remote either (a parent forgotten where it was pushed from).
                    continue;
                };
                let c = Checkpoint::decode(&id, &data)?;
                atomic::write_atomic_new(&store.checkpoint_path(&id), &data, 0o444)?;
                report.records += 1;
                progress.add_bytes(data.len() as u64);
                c
            }
            Err(e) => return Err(e),
        };
        stack.extend(c.parents.iter().copied());
    }
    progress.set_total(seen.len() as u64 - report.forgotten);
    progress.finish();
    for (name, id) in &labels {
        match store.read_label(name)? {
            None => {
                store.create_label(name, id)?;
                report.created_labels.push(name.clone());
            }
            Some(l) if l != *id => log::warn!(
                "label {name} is {} here and {} on remote {}; kept this store's",
                l.short(),
                id.short(),
                remote.name
            ),
            Some(_) => {}
        }
    }
    for (name, id) in &branches {
        if store.read_branch(name)?.is_none() {
            store.advance_branch(name, None, *id)?;
            report.created_branches.push(name.clone());
        }
    }
    write_refs(
        store,
        &remote.name,
        &RemoteRefs {
            branches: branches.clone(),
            labels: labels.clone(),
            updated_ns: crate::text::time::now_ns(),
        },
    )?;
    report.branches = branches;
    report.labels = labels;
    Ok(report)
}

/// What `pull` did besides fetching.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PullReport {
    pub fetch: FetchReport,
    /// Branches fast-forwarded: name -> (old, new).
    pub forwarded: BTreeMap<String, RefMove>,
    /// Branches left alone, with why.
    pub skipped: BTreeMap<String, String>,
}

/// Fetches, then fast-forwards every local branch whose remote head descends from it.
/// A branch mounted as a workspace is left alone (unmount it first).
///
/// # Errors
/// As [`fetch`].
pub fn pull(store: &Store, remote: &Remote) -> Result<PullReport> {
    let fetched = fetch(store, remote)?;
    let mut report = PullReport::default();
    for (name, rhead) in &fetched.branches {
        let Some(b) = store.read_branch(name)? else {
            continue;
        };
        let Some(local) = b.head else { continue };
        if local == *rhead {
            continue;
        }
        if store.workspace_state_path(name).exists() {
            report.skipped.insert(
                name.clone(),
                "mounted as a workspace: umount it first".into(),
            );
            continue;
        }
        if !is_ancestor(store, &local, rhead)? {
            report.skipped.insert(
                name.clone(),
                format!(
                    "{} here is not an ancestor of the remote's {} (diverged)",
                    local.short(),
                    rhead.short()
                ),
            );
            continue;
        }
        store.advance_branch(name, Some(local), *rhead)?;
        report.forwarded.insert(
            name.clone(),
            RefMove {
                old: Some(local),
                new: *rhead,
            },
        );
    }
    report.fetch = fetched;
    Ok(report)
}

/// Options of `clone`.
#[derive(Clone, Debug)]
pub struct CloneOptions {
    pub config: RemoteConfig,
    /// Root paths to record instead of the remote's (NAME -> /PATH).
    pub roots: BTreeMap<String, std::path::PathBuf>,
    pub name: String,
}

/// Makes a new store at `path` from a remote: same roots (unless overridden), chunker and
/// compression; refs and records fetched, objects left on the remote.
///
/// # Errors
/// The remote not opening (wrong key, unreachable) before anything is created; `Usage` for
/// an override naming a root the remote does not have; those of [`Store::init`] and
/// [`fetch`].
pub fn clone(path: &Path, opts: &CloneOptions) -> Result<(Store, FetchReport)> {
    let remote = Remote::open(&opts.name, opts.config.clone(), None)?;
    let mut cfg = remote.store_config()?;
    for (name, p) in &opts.roots {
        let known = cfg.roots.keys().cloned().collect::<Vec<_>>().join(", ");
        let r = cfg.roots.get_mut(name).ok_or_else(|| {
            Error::Usage(format!(
                "--root {name}: the remote's store has no root {name} (it has {known})"
            ))
        })?;
        crate::store::check_root_path(name, p)?;
        r.path = p.clone();
    }
    let store = Store::init(
        path,
        &InitOptions {
            roots: cfg.roots.clone(),
            zstd: cfg.compression == "zstd",
            no_default_excludes: true,
        },
    )?;
    let mut mine = store.config().clone();
    mine.chunker = cfg.chunker.clone();
    mine.version = cfg.version.min(mine.version);
    mine.retention = cfg.retention.clone();
    store.write_config_file(&mine)?;
    let store = super::open_store(path)?;
    write_config(&store, &opts.name, &opts.config)?;
    let report = fetch(&store, &remote)?;
    Ok((store, report))
}

/// The remote's objects a store reaches through the paths that use them.
pub type Users = HashMap<ObjectId, Vec<String>>;
