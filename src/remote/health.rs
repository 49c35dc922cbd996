//! `verify --remote` and `gc --remote`: what a remote holds, checked and collected.
//!
//! Both start from the remote's own refs (branches and labels) and its records, never from
//! the local store's, and read trees from the remote (a local copy of a tree is used when the
//! store has one: it was checked against the same id). `verify` downloads every object the
//! refs reach and checks it (AEAD tag, length, SHA-256), naming the paths that use a bad
//! one. `gc` (plan, then apply, with repacking) is in [`crate::remote::prune`]; both step
//! over forgotten checkpoints (see [`crate::remote::forgotten`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::remote::forgotten::{self, Forgotten};
use crate::remote::pack::{Index, Kind};
use crate::remote::Remote;
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

/// The remote's history: every checkpoint its refs reach, from its records, stepping over
/// forgotten ones (listed apart, sorted).
pub(crate) struct History {
    pub checkpoints: Vec<(ObjectId, Checkpoint)>,
    pub forgotten: Vec<ObjectId>,
}

/// Every checkpoint the remote's refs reach, from its records; a forgotten checkpoint (a
/// tombstone in `forgotten`, and no ref names it) is stepped over through its parents.
pub(crate) fn remote_history(
    remote: &Remote,
    forgotten: &Forgotten,
    findings: &mut Vec<RemoteFinding>,
) -> Result<History> {
    let ref_heads = forgotten::ref_heads(remote)?;
    let mut heads: Vec<ObjectId> = ref_heads.iter().copied().collect();
    heads.sort();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut gone = Vec::new();
    while let Some(id) = heads.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(t) = forgotten
            .get(remote, &id)
            .filter(|_| !ref_heads.contains(&id))
        {
            heads.extend(t.parents.iter().copied());
            gone.push(id);
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
    gone.sort();
    Ok(History {
        checkpoints: out,
        forgotten: gone,
    })
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

/// Walks every checkpoint's trees: every tree and chunk they reach (once per object), with
/// up to 10 paths that use each in `users` when given (verify names them; gc needs none).
/// Unreadable trees become findings.
pub(crate) fn walk_remote(
    store: &Store,
    remote: &Remote,
    idx: &Index,
    history: &[(ObjectId, Checkpoint)],
    findings: &mut Vec<RemoteFinding>,
    mut users: Option<&mut HashMap<ObjectId, Vec<String>>>,
) -> Result<BTreeMap<ObjectId, (Kind, u32)>> {
    let mut reached: BTreeMap<ObjectId, (Kind, u32)> = BTreeMap::new();
    let progress = Progress::items("remote walk", "trees", None);
    for (cid, c) in history {
        for (root, r) in &c.roots {
            let mut stack = vec![(r.tree, format!("{}:{root}", cid.short()))];
            while let Some((t, path)) = stack.pop() {
                let note =
                    |users: &mut Option<&mut HashMap<ObjectId, Vec<String>>>, id, p: &str| {
                        if let Some(users) = users {
                            let u = users.entry(id).or_default();
                            if u.len() < 10 {
                                u.push(p.to_string());
                            }
                        }
                    };
                note(&mut users, t, &format!("{path}/"));
                if reached.contains_key(&t) {
                    continue;
                }
                reached.insert(t, (Kind::Tree, 0));
                progress.add_items(1);
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
                                note(&mut users, ch.id, &p);
                                reached.entry(ch.id).or_insert((Kind::Data, ch.len));
                            }
                        }
                        EntryKind::Symlink { .. } => {}
                    }
                }
            }
        }
    }
    progress.finish();
    Ok(reached)
}

/// Checks everything the remote's refs reach (see the module doc).
///
/// # Errors
/// Server errors (a finding is not an error).
pub fn verify(store: &Store, remote: &Remote) -> Result<RemoteVerifyReport> {
    let idx = remote.sync_index(store)?;
    let mut findings = Vec::new();
    let forgotten = forgotten::list(remote)?;
    let history = remote_history(remote, &forgotten, &mut findings)?.checkpoints;
    let mut users = HashMap::new();
    let reached = walk_remote(
        store,
        remote,
        &idx,
        &history,
        &mut findings,
        Some(&mut users),
    )?;
    let mut report = RemoteVerifyReport {
        remote: remote.name.clone(),
        checkpoints: history.len() as u64,
        ..Default::default()
    };
    let ids: Vec<ObjectId> = reached.keys().copied().collect();
    let progress = Progress::items("verify --remote", "objects", Some(ids.len() as u64));
    for batch in ids.chunks(64) {
        for (id, r) in batch.iter().zip(remote.fetch_objects(&idx, batch)) {
            report.objects += 1;
            progress.add_items(1);
            match r {
                Ok(d) => {
                    report.bytes += d.len() as u64;
                    progress.add_bytes(d.len() as u64);
                }
                Err(e @ Error::Io { .. }) => return Err(e),
                Err(e) => findings.push(RemoteFinding {
                    object: id.to_hex(),
                    problem: e.to_string(),
                    paths: users.get(id).cloned().unwrap_or_default(),
                }),
            }
        }
    }
    progress.finish();
    report.findings = findings;
    Ok(report)
}
