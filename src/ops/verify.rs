//! `verify`: re-hash every object reachable from the chosen checkpoints and collect every
//! finding (missing or corrupt object, unreadable tree or record) with the checkpoint paths
//! that use it. Nothing stops at the first finding.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::tree::{EntryKind, Tree};
use crate::store::Store;

/// How many using paths a finding lists at most (the count is always complete).
const MAX_PATHS: usize = 20;

/// One problem found by verify.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The object (or checkpoint record) at fault.
    pub object: String,
    /// "missing", "corrupt", or "unreadable".
    pub problem: String,
    pub detail: String,
    /// `CHECKPOINT:ROOT/PATH` of entries that use it (at most 20).
    pub used_by: Vec<String>,
    pub used_by_count: usize,
}

/// The result of a verify run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    pub checkpoints: usize,
    pub trees: usize,
    pub objects: usize,
    pub bytes: u64,
    pub findings: Vec<Finding>,
}

#[derive(Clone)]
enum Bad {
    Missing,
    Corrupt(String),
}

fn check(store: &Store, id: &ObjectId) -> std::result::Result<Vec<u8>, Bad> {
    match store.read_object(id) {
        Ok(d) => Ok(d),
        Err(Error::NotFound(_)) => Err(Bad::Missing),
        Err(e) => Err(Bad::Corrupt(e.to_string())),
    }
}

/// Verifies `checkpoints` (all of them when empty).
pub fn verify(store: &Store, checkpoints: &[ObjectId]) -> Result<VerifyReport> {
    let ids = if checkpoints.is_empty() {
        store.list_checkpoints()?
    } else {
        checkpoints.to_vec()
    };
    let mut report = VerifyReport {
        checkpoints: ids.len(),
        ..Default::default()
    };
    // Pass 1: every tree (decoded) and the set of chunk ids.
    let mut bad: HashMap<ObjectId, Bad> = HashMap::new();
    let mut trees_ok: HashSet<ObjectId> = HashSet::new();
    let mut chunks: HashSet<ObjectId> = HashSet::new();
    let mut records = Vec::new();
    for id in &ids {
        match store.read_checkpoint(id) {
            Ok(c) => records.push((*id, c)),
            Err(e) => report.findings.push(Finding {
                object: id.to_hex(),
                problem: if matches!(e, Error::NotFound(_)) {
                    "missing"
                } else {
                    "corrupt"
                }
                .into(),
                detail: format!("checkpoint record: {e}"),
                used_by: vec![],
                used_by_count: 0,
            }),
        }
    }
    let mut stack: Vec<ObjectId> = records
        .iter()
        .flat_map(|(_, c)| c.roots.values().map(|r| r.tree))
        .collect();
    while let Some(t) = stack.pop() {
        if trees_ok.contains(&t) || bad.contains_key(&t) {
            continue;
        }
        let tree = match check(store, &t) {
            Ok(data) => match Tree::decode(&data) {
                Ok(tree) => tree,
                Err(e) => {
                    bad.insert(t, Bad::Corrupt(e.to_string()));
                    continue;
                }
            },
            Err(b) => {
                bad.insert(t, b);
                continue;
            }
        };
        trees_ok.insert(t);
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks: cs } => chunks.extend(cs.iter().map(|c| c.id)),
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    report.trees = trees_ok.len();
    // Pass 2: re-hash every chunk on all cores.
    let list: Vec<ObjectId> = chunks.into_iter().collect();
    report.objects = list.len() + trees_ok.len();
    let next = AtomicUsize::new(0);
    let found: Mutex<Vec<(ObjectId, Bad)>> = Mutex::new(Vec::new());
    let bytes = std::sync::atomic::AtomicU64::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = list.get(i) else { return };
                match check(store, id) {
                    Ok(d) => {
                        bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                    }
                    Err(b) => found
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((*id, b)),
                }
            });
        }
    });
    report.bytes = bytes.into_inner();
    bad.extend(found.into_inner().unwrap_or_else(|p| p.into_inner()));
    if bad.is_empty() {
        return Ok(report);
    }
    // Pass 3: name the paths that use each bad object.
    let mut users: HashMap<ObjectId, (Vec<String>, usize)> = HashMap::new();
    let mut note = |id: &ObjectId, path: String| {
        if bad.contains_key(id) {
            let u = users.entry(*id).or_default();
            u.1 += 1;
            if u.0.len() < MAX_PATHS {
                u.0.push(path);
            }
        }
    };
    for (cid, c) in &records {
        for (root, rec) in &c.roots {
            let base = format!("{}:{root}", cid.short());
            note(&rec.tree, format!("{base}/"));
            let mut stack = vec![(rec.tree, String::new())];
            while let Some((t, prefix)) = stack.pop() {
                let Ok(data) = store.read_object(&t) else {
                    continue;
                };
                let Ok(tree) = Tree::decode(&data) else {
                    continue;
                };
                for e in &tree.entries {
                    let p = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
                    match &e.kind {
                        EntryKind::File { chunks } => {
                            for ch in chunks {
                                note(&ch.id, format!("{base}{p}"));
                            }
                        }
                        EntryKind::Dir { tree, .. } => {
                            note(tree, format!("{base}{p}/"));
                            stack.push((*tree, p));
                        }
                        EntryKind::Symlink { .. } => {}
                    }
                }
            }
        }
    }
    let mut findings: Vec<Finding> = bad
        .into_iter()
        .map(|(id, b)| {
            let (used_by, used_by_count) = users.remove(&id).unwrap_or_default();
            let (problem, detail) = match b {
                Bad::Missing => ("missing", "object file is absent".to_string()),
                Bad::Corrupt(d) => ("corrupt", d),
            };
            Finding {
                object: id.to_hex(),
                problem: problem.into(),
                detail,
                used_by,
                used_by_count,
            }
        })
        .collect();
    findings.sort_by(|a, b| a.object.cmp(&b.object));
    report.findings.extend(findings);
    Ok(report)
}
