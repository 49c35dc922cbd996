//! `verify`: re-hash every object reachable from the chosen checkpoints and collect every
//! finding (missing or corrupt object, a chunk whose length is not its tree's, unreadable tree
//! or record) with the checkpoint paths that use it; and scan the store's `objects/`,
//! `checkpoints/` and `refs/` for what does not belong there (symlinks, directories where
//! files belong, FIFOs, devices, sockets, foreign names: [`scan_layout`], which doctor runs
//! too). A store may come from elsewhere, so nothing found there is trusted or followed.
//! Nothing stops at the first finding.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::checkpoint::Checkpoint;
use crate::store::tree::{Chunk, EntryKind};
use crate::store::Store;

/// How many using paths a finding lists at most (the count is always complete).
const MAX_PATHS: usize = 20;

/// One problem found by verify.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The object (or checkpoint record) at fault.
    pub object: String,
    /// "missing", "corrupt", "unreadable", or "unexpected" (a layout finding: `object` is then
    /// a path relative to the store).
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

fn bad_of(e: Error) -> Bad {
    match e {
        Error::NotFound(_) => Bad::Missing,
        e => Bad::Corrupt(e.to_string()),
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
    let mut chunks: HashSet<Chunk> = HashSet::new();
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
    let tree_progress = Progress::items("verify trees", "trees", None);
    while let Some(t) = stack.pop() {
        if trees_ok.contains(&t) || bad.contains_key(&t) {
            continue;
        }
        tree_progress.add_items(1);
        let tree = match store.read_tree(&t) {
            Ok(tree) => tree,
            Err(e) => {
                bad.insert(t, bad_of(e));
                continue;
            }
        };
        trees_ok.insert(t);
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks: cs } => chunks.extend(cs.iter().copied()),
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    report.trees = trees_ok.len();
    tree_progress.finish();
    // Pass 2: re-hash every chunk on all cores, each held to its tree's length (a chunk id
    // used with two lengths is read for both: one of them is wrong).
    let list: Vec<Chunk> = chunks.into_iter().collect();
    let distinct: HashSet<ObjectId> = list.iter().map(|c| c.id).collect();
    report.objects = distinct.len() + trees_ok.len();
    let chunk_progress = Progress::bytes(
        "verify chunks",
        "chunks",
        Some(list.iter().map(|c| u64::from(c.len)).sum()),
    );
    let found: Mutex<Vec<(ObjectId, Bad)>> = Mutex::new(Vec::new());
    let bytes = std::sync::atomic::AtomicU64::new(0);
    store.read_chunks_parallel(&list, |chunk, read| {
        match read {
            Ok(d) => {
                bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
                chunk_progress.add_bytes(d.len() as u64);
                chunk_progress.add_items(1);
            }
            Err(e) => found
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((chunk.id, bad_of(e))),
        }
        true
    });
    report.bytes = bytes.into_inner();
    chunk_progress.finish();
    for (id, b) in found.into_inner().unwrap_or_else(|p| p.into_inner()) {
        bad.entry(id).or_insert(b);
    }
    report.findings.extend(scan_layout(store)?);
    if bad.is_empty() {
        return Ok(report);
    }
    // Pass 3: name the paths that use each bad object.
    report.findings.extend(named_findings(store, &records, bad));
    Ok(report)
}

/// The findings for the `bad` objects, each with (up to [`MAX_PATHS`] of) the paths of
/// `records` that use it, sorted by object id.
fn named_findings(
    store: &Store,
    records: &[(ObjectId, Checkpoint)],
    bad: HashMap<ObjectId, Bad>,
) -> Vec<Finding> {
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
    for (cid, c) in records {
        for (root, rec) in &c.roots {
            let base = format!("{}:{root}", cid.short());
            note(&rec.tree, format!("{base}/"));
            let mut stack = vec![(rec.tree, String::new())];
            while let Some((t, prefix)) = stack.pop() {
                let Ok(tree) = store.read_tree(&t) else {
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
    findings
}

/// Where in the store a directory is, for [`scan_layout`]: what its entries must be.
#[derive(Clone, Copy)]
enum Expected {
    /// `objects/`: fan-out directories `00`..`ff`.
    FanOuts,
    /// `objects/XX/`: object files `<62 hex>` or `<62 hex>.zst`.
    Objects,
    /// `checkpoints/`: records `<64 hex>`.
    Records,
    /// `refs/`: the directories `branches`, `labels` and `forgotten`.
    Refs,
    /// `refs/branches/`: `NAME.json`.
    Branches,
    /// `refs/labels/`: `NAME`.
    Labels,
    /// `refs/forgotten/`: tombstones `<64 hex>.json` (see `upkeep::forget`).
    Tombstones,
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// What a file type is, for a finding.
fn kind_of(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "a symlink"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        "of unknown type"
    }
}

/// Scans `objects/`, `checkpoints/` and `refs/` (see the layout in `store`) for entries that
/// do not belong there: a symlink anywhere (an object directory that is one would send reads
/// elsewhere; reads refuse it, see `Store::open_object_checked`), a directory where a file
/// belongs or a file where a directory belongs, a FIFO, device or socket, or a name that is not
/// one the store writes. Temp files of atomic writes (`.tmp-*`, regular files, left by a crash)
/// are left to `recover` and doctor. Reads directory entries only; follows nothing; returns
/// every finding, as `unexpected` with the path relative to the store.
///
/// # Errors
/// I/O errors listing a directory (a missing `checkpoints/` or `refs/` is a finding).
pub fn scan_layout(store: &Store) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    let top = [
        ("objects", Expected::FanOuts),
        ("checkpoints", Expected::Records),
        ("refs", Expected::Refs),
    ];
    for (name, expected) in top {
        scan_dir(store.root(), Path::new(name), expected, &mut out)?;
    }
    out.sort_by(|a, b| a.object.cmp(&b.object));
    Ok(out)
}

fn unexpected(rel: &Path, detail: String) -> Finding {
    Finding {
        object: rel.display().to_string(),
        problem: "unexpected".into(),
        detail,
        used_by: vec![],
        used_by_count: 0,
    }
}

/// Checks that `root/rel` is a real directory and that its entries are what `expected` says.
fn scan_dir(root: &Path, rel: &Path, expected: Expected, out: &mut Vec<Finding>) -> Result<()> {
    let dir = root.join(rel);
    match fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            out.push(unexpected(
                rel,
                format!(
                    "{} where a directory belongs (never followed)",
                    kind_of(m.file_type())
                ),
            ));
            return Ok(());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.push(unexpected(rel, "directory is missing".into()));
            return Ok(());
        }
        Err(e) => return Err(Error::io(&dir, e)),
    }
    let rd = fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
    let mut names = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(&dir, e))?;
        // The entry's own type (d_type, else lstat): never its target's.
        let ft = ent.file_type().map_err(|e| Error::io(ent.path(), e))?;
        names.push((ent.file_name(), ft));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, ft) in names {
        let child = rel.join(&name);
        let Some(n) = name.to_str() else {
            out.push(unexpected(
                &child,
                "name is not UTF-8: not one the store writes".into(),
            ));
            continue;
        };
        let temp = n.starts_with(".tmp-")
            && matches!(
                expected,
                Expected::Records | Expected::Branches | Expected::Labels | Expected::Tombstones
            );
        let (name_ok, want_dir, sub) = match expected {
            Expected::FanOuts => (is_lower_hex(n, 2), true, Some(Expected::Objects)),
            Expected::Objects => {
                let hex = n.strip_suffix(".zst").unwrap_or(n);
                (is_lower_hex(hex, 62), false, None)
            }
            Expected::Records => (is_lower_hex(n, 64) || temp, false, None),
            Expected::Refs => match n {
                "branches" => (true, true, Some(Expected::Branches)),
                "labels" => (true, true, Some(Expected::Labels)),
                "forgotten" => (true, true, Some(Expected::Tombstones)),
                _ => (false, true, None),
            },
            Expected::Branches => {
                let valid = n
                    .strip_suffix(".json")
                    .is_some_and(|b| crate::store::refs::check_name("branch", b).is_ok());
                (valid || temp, false, None)
            }
            Expected::Labels => (
                crate::store::refs::check_name("label", n).is_ok() || temp,
                false,
                None,
            ),
            Expected::Tombstones => {
                let valid = n.strip_suffix(".json").is_some_and(|h| is_lower_hex(h, 64));
                (valid || temp, false, None)
            }
        };
        let kind = kind_of(ft);
        if ft.is_symlink() {
            out.push(unexpected(
                &child,
                format!(
                    "a symlink where {} belongs (never followed)",
                    if want_dir { "a directory" } else { "a file" }
                ),
            ));
        } else if !name_ok {
            out.push(unexpected(
                &child,
                format!("{kind} with a name the store does not write (foreign)"),
            ));
        } else if want_dir && !ft.is_dir() {
            out.push(unexpected(
                &child,
                format!("{kind} where a directory belongs"),
            ));
        } else if !want_dir && !ft.is_file() {
            out.push(unexpected(
                &child,
                format!("{kind} where a regular file belongs"),
            ));
        } else if let Some(sub) = sub {
            scan_dir(root, &child, sub, out)?;
        }
    }
    Ok(())
}
