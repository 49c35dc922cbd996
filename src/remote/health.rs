//! `verify --remote` and `gc --remote`: what a remote holds, checked and collected.
//!
//! Both start from the remote's own refs (branches and labels) and its records, never from
//! the local store's, and read trees from the remote (a local copy of a tree is used when the
//! store has one: it was checked against the same id). `verify` downloads every object the
//! refs reach and checks it (AEAD tag, length, SHA-256), naming the paths that use a bad
//! one. `gc` (under the remote lock) plans, then applies: records no ref reaches, packs none
//! of whose objects is reached, packs no index names; and one new index replaces the old
//! ones. A pack that holds any reached object is kept whole.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::remote::pack::{self, Index, Kind};
use crate::remote::{crypto, lock, Remote};
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::{EntryKind, Tree};
use crate::store::Store;

/// One problem `verify --remote` found.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteFinding {
    /// The object, record or ref at fault.
    pub object: String,
    pub problem: String,
    /// `CHECKPOINT:ROOT/PATH` of the entries that use it (up to 10).
    pub paths: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RemoteVerifyReport {
    pub remote: String,
    pub checkpoints: u64,
    pub objects: u64,
    pub bytes: u64,
    pub findings: Vec<RemoteFinding>,
}

/// Every checkpoint the remote's refs reach, from its records.
fn remote_history(
    remote: &Remote,
    findings: &mut Vec<RemoteFinding>,
) -> Result<Vec<(ObjectId, Checkpoint)>> {
    let mut heads: Vec<ObjectId> = remote.list_refs("branches")?.into_values().collect();
    heads.extend(remote.list_refs("labels")?.into_values());
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while let Some(id) = heads.pop() {
        if !seen.insert(id) {
            continue;
        }
        match remote.get_record(&id) {
            Ok(Some(d)) => {
                let c = Checkpoint::decode(&id, &d)?;
                heads.extend(c.parents.iter().copied());
                out.push((id, c));
            }
            Ok(None) => findings.push(RemoteFinding {
                object: format!("record {id}"),
                problem: "missing on the remote".into(),
                paths: Vec::new(),
            }),
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => findings.push(RemoteFinding {
                object: format!("record {id}"),
                problem: e.to_string(),
                paths: Vec::new(),
            }),
        }
    }
    Ok(out)
}

fn read_tree_any(store: &Store, remote: &Remote, idx: &Index, id: &ObjectId) -> Result<Tree> {
    if store.has_object(id) {
        if let Ok(t) = store.read_tree(id) {
            return Ok(t);
        }
    }
    let mut got = remote.fetch_objects(idx, &[*id]);
    let data = got
        .pop()
        .unwrap_or_else(|| Err(Error::Invalid("no reply".into())))?;
    Tree::decode_object(id, &data)
}

/// Walks every checkpoint's trees; `f(object, kind, len, path)` for every tree and chunk
/// (once per object; `path` is the first that uses it). Unreadable trees become findings.
fn walk_remote(
    store: &Store,
    remote: &Remote,
    idx: &Index,
    history: &[(ObjectId, Checkpoint)],
    findings: &mut Vec<RemoteFinding>,
    users: &mut HashMap<ObjectId, Vec<String>>,
) -> Result<BTreeMap<ObjectId, (Kind, u32)>> {
    let mut reached: BTreeMap<ObjectId, (Kind, u32)> = BTreeMap::new();
    for (cid, c) in history {
        for (root, r) in &c.roots {
            let mut stack = vec![(r.tree, format!("{}:{root}", cid.short()))];
            while let Some((t, path)) = stack.pop() {
                let note = |users: &mut HashMap<ObjectId, Vec<String>>, id: ObjectId, p: &str| {
                    let u = users.entry(id).or_default();
                    if u.len() < 10 {
                        u.push(p.to_string());
                    }
                };
                note(users, t, &format!("{path}/"));
                if reached.contains_key(&t) {
                    continue;
                }
                reached.insert(t, (Kind::Tree, 0));
                let tree = match read_tree_any(store, remote, idx, &t) {
                    Ok(tree) => tree,
                    Err(e @ Error::Io { .. }) => return Err(e),
                    Err(e) => {
                        findings.push(RemoteFinding {
                            object: format!("tree {t}"),
                            problem: e.to_string(),
                            paths: vec![format!("{path}/")],
                        });
                        continue;
                    }
                };
                for e in &tree.entries {
                    let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                    match &e.kind {
                        EntryKind::Dir { tree, .. } => stack.push((*tree, p)),
                        EntryKind::File { chunks } => {
                            for ch in chunks {
                                note(users, ch.id, &p);
                                reached.entry(ch.id).or_insert((Kind::Data, ch.len));
                            }
                        }
                        EntryKind::Symlink { .. } => {}
                    }
                }
            }
        }
    }
    Ok(reached)
}

/// Checks everything the remote's refs reach (see the module doc).
///
/// # Errors
/// Server errors (a finding is not an error).
pub fn verify(store: &Store, remote: &Remote) -> Result<RemoteVerifyReport> {
    let idx = remote.sync_index(store)?;
    let mut findings = Vec::new();
    let history = remote_history(remote, &mut findings)?;
    let mut users = HashMap::new();
    let reached = walk_remote(store, remote, &idx, &history, &mut findings, &mut users)?;
    let mut report = RemoteVerifyReport {
        remote: remote.name.clone(),
        checkpoints: history.len() as u64,
        ..Default::default()
    };
    let ids: Vec<ObjectId> = reached.keys().copied().collect();
    for batch in ids.chunks(64) {
        for (id, r) in batch.iter().zip(remote.fetch_objects(&idx, batch)) {
            report.objects += 1;
            match r {
                Ok(d) => report.bytes += d.len() as u64,
                Err(e @ Error::Io { .. }) => return Err(e),
                Err(e) => findings.push(RemoteFinding {
                    object: id.to_hex(),
                    problem: e.to_string(),
                    paths: users.get(id).cloned().unwrap_or_default(),
                }),
            }
        }
    }
    report.findings = findings;
    Ok(report)
}

/// What `gc --remote` removes (or, with --dry-run, would).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RemoteGcPlan {
    pub remote: String,
    pub records: Vec<String>,
    pub packs: Vec<String>,
    pub pack_bytes: u64,
    /// Unreached objects kept because their pack holds reached ones too.
    pub kept_unreached: u64,
    pub index_files_replaced: u64,
    pub reached_objects: u64,
    pub applied: bool,
}

/// Plans (and unless `dry_run` applies) a remote gc, under the remote lock.
///
/// # Errors
/// The remote locked by a push or another gc (naming its holder); server errors; a
/// finding in the reached history (gc refuses to collect a remote that is missing objects).
pub fn gc(store: &Store, remote: &Remote, dry_run: bool) -> Result<RemoteGcPlan> {
    let lock = lock::acquire(remote, "gc")?;
    let idx = remote.sync_index(store)?;
    let mut findings = Vec::new();
    let history = remote_history(remote, &mut findings)?;
    let mut users = HashMap::new();
    let reached = walk_remote(store, remote, &idx, &history, &mut findings, &mut users)?;
    if let Some(f) = findings.first() {
        return Err(Error::Corrupt(format!(
            "remote {}: {} {} (run verify --remote); nothing collected",
            remote.name, f.object, f.problem
        )));
    }
    let mut plan = RemoteGcPlan {
        remote: remote.name.clone(),
        reached_objects: reached.len() as u64,
        ..Default::default()
    };
    let keep_records: HashSet<String> = history.iter().map(|(i, _)| remote.record_key(i)).collect();
    for (k, _) in remote.backend.list("records/")? {
        if !keep_records.contains(&k) {
            plan.records.push(k);
        }
    }
    let mut used: HashSet<u32> = HashSet::new();
    for (id, loc) in &idx.objects {
        if reached.contains_key(id) {
            used.insert(loc.pack);
        }
    }
    for (id, loc) in &idx.objects {
        if !reached.contains_key(id) && used.contains(&loc.pack) {
            plan.kept_unreached += 1;
        }
    }
    let kept_keys: HashSet<String> = used.iter().map(|p| idx.pack_key(*p)).collect();
    for (k, size) in remote.backend.list("packs/")? {
        if !kept_keys.contains(&k) {
            plan.packs.push(k);
            plan.pack_bytes += size;
        }
    }
    let old_indexes: Vec<String> = remote
        .backend
        .list("index/")?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    plan.index_files_replaced = old_indexes.len() as u64;
    if dry_run {
        lock.release()?;
        return Ok(plan);
    }
    // One index of the kept packs first; then the old ones go; then packs and records.
    let mut entries = Vec::new();
    for (id, loc) in &idx.objects {
        if used.contains(&loc.pack) {
            entries.push((
                *id,
                idx.packs[loc.pack as usize],
                loc.kind,
                loc.offset,
                loc.len,
                loc.raw_len,
            ));
        }
    }
    entries.sort_by_key(|e| e.0 .0);
    let sealed = pack::seal_index(&remote.keys, &pack::encode_index(&entries))?;
    let new_key = format!("index/{}", crypto::hex(&ObjectId::of(&sealed).0));
    if !entries.is_empty() {
        remote.backend.put(&new_key, sealed)?;
    }
    for k in &old_indexes {
        if *k != new_key {
            remote.backend.delete(k)?;
        }
    }
    for k in plan.packs.iter().chain(plan.records.iter()) {
        remote.backend.delete(k)?;
    }
    remote.sync_index(store)?;
    plan.applied = true;
    lock.release()?;
    Ok(plan)
}
