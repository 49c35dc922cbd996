//! `gc`: retention classes, retention policy, and mark-and-sweep — planned by [`plan_gc`],
//! carried out by [`apply_gc`]. Both return the same [`GcReport`], so `gc --dry-run` prints
//! exactly what `gc` would then do.
//!
//! Every path in the store belongs to one retention class:
//!
//! | class | paths | gc |
//! |---|---|---|
//! | durable | `STORE.json`, `refs/`, `audit.jsonl`, `lock`, labelled checkpoints, branch heads, what they reach | never deleted |
//! | reviewable | unlabelled, non-head checkpoint records (`checkpoints/`) | pruned by the policy |
//! | ephemeral | `tmp/` and `.tmp-*` files of dead processes, dead pins, sockets and pid files in `run/`, `upper/B/` of deleted branches, reflink snapshots in `upper/B/.snapshots-ROOT/` that B's next checkpoint will not use, `displaced/` | pruned when nothing uses it (`displaced/` only with `--prune-displaced`) |
//! | cache-only | `cache/` | stat caches and materialized lower layers of pruned checkpoints; all of it with `--clear-cache`, except what a mount or a workspace uses |
//!
//! Objects (`objects/`) are swept when no kept checkpoint reaches them.
//!
//! **Policy** (`--keep-last`, `--keep-within`, `--keep-daily`, `--keep-weekly`, or the
//! `retention` field of STORE.json when no flag is given) applies to each branch separately: the
//! checkpoints recorded on branch B (their `branch` field) are ranked newest first and a
//! checkpoint is kept when any rule keeps it. With no policy at all, every checkpoint is kept
//! and gc only sweeps unreachable objects and ephemeral files.
//!
//! **Live workspaces**: the base checkpoint of every workspace (`upper/B/base.json`,
//! `run/mounts/B.json`) is kept like a pinned one, and nothing a mount uses is deleted.
//!
//! **Pins** (`run/pins/`, registered by mounts and views under the exclusive lock) are read
//! under the same exclusive lock that gc holds from plan to apply: pinned checkpoints and the
//! heads of pinned branches are kept; a pin with `all: true` keeps every checkpoint (objects no
//! checkpoint reaches are still swept). The workspaces' lower view pins only the checkpoints
//! whose directory the kernel holds (see `View::keep_pin_to_held`), so gc prunes while
//! workspaces are mounted and still keeps the base of a detached overlay that is in use.
//!
//! **Pruned parents**: checkpoint records are immutable, so a kept checkpoint may name a pruned
//! parent. `log --branch` stops there and says the older history was pruned.
//!
//! **Crash safety**: apply deletes checkpoint records first and syncs their directory, and only
//! then deletes objects that no kept checkpoint reaches. A gc killed at any point leaves every
//! remaining record complete (verify is clean); a rerun finishes the job.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::lock::pid_alive;
use crate::store::tree::{EntryKind, Tree};
use crate::store::{fsio, RetentionPolicy, Store};

const NS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// What gc should do beyond the policy.
#[derive(Clone, Debug, Default)]
pub struct GcOptions {
    /// Policy from the command line; `None` uses STORE.json's `retention` (or keeps all).
    pub policy: Option<RetentionPolicy>,
    /// Also delete `displaced/` entries (set aside by restore/switch; otherwise only listed).
    pub prune_displaced: bool,
    /// Delete everything in `cache/`, not only caches of pruned checkpoints.
    pub clear_cache: bool,
}

/// One pruned checkpoint.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PrunedCheckpoint {
    pub id: ObjectId,
    pub branch: String,
    pub time: String,
}

/// One ephemeral or cache path that goes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PrunedPath {
    /// Path relative to the store root.
    pub path: String,
    /// Why it is garbage.
    pub what: String,
    pub bytes: u64,
}

/// What gc does (plan) or did (apply): the same value for both.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GcReport {
    pub policy: RetentionPolicy,
    /// "command line", "STORE.json" or "none (every checkpoint is kept)".
    pub policy_source: String,
    pub checkpoints: usize,
    /// Kept checkpoints by their first reason: "branch head", "label", "pinned", "policy",
    /// "no policy", "pin keeps all".
    pub kept: BTreeMap<String, usize>,
    pub pruned: Vec<PrunedCheckpoint>,
    pub objects: u64,
    pub objects_removed: u64,
    pub object_bytes_freed: u64,
    /// Ephemeral and cache paths removed.
    pub paths_removed: Vec<PrunedPath>,
    /// Paths left for a human to review (`displaced/` without `--prune-displaced`).
    pub kept_for_review: Vec<String>,
    /// Live pins honoured, as `OWNER-PID`.
    pub pins: Vec<String>,
    pub bytes_freed: u64,
}

/// The plan: the report plus the exact paths to delete, in apply order.
#[derive(Clone, Debug)]
pub struct GcPlan {
    pub report: GcReport,
    records: Vec<PathBuf>,
    objects: Vec<PathBuf>,
    /// (path, is a directory).
    paths: Vec<(PathBuf, bool)>,
}

/// Checkpoints to keep out of one branch's `(id, time_ns)` list under `policy` at `now_ns`.
///
/// # Errors
/// `Usage` for a bad `keep_within` duration.
pub fn select_by_policy(
    items: &[(ObjectId, i64)],
    policy: &RetentionPolicy,
    now_ns: i64,
) -> Result<BTreeSet<ObjectId>> {
    let mut sorted = items.to_vec();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let mut keep = BTreeSet::new();
    if let Some(n) = policy.keep_last {
        keep.extend(sorted.iter().take(n as usize).map(|(id, _)| *id));
    }
    if let Some(d) = &policy.keep_within {
        let cutoff = now_ns.saturating_sub(crate::util::parse_duration(d)?);
        keep.extend(
            sorted
                .iter()
                .filter(|(_, t)| *t >= cutoff)
                .map(|(id, _)| *id),
        );
    }
    let mut per_bucket = |n: Option<u32>, bucket: &dyn Fn(i64) -> i64| {
        let Some(n) = n else { return };
        let mut seen = BTreeSet::new();
        for (id, t) in &sorted {
            if seen.len() >= n as usize {
                break;
            }
            if seen.insert(bucket(*t)) {
                keep.insert(*id);
            }
        }
    };
    per_bucket(policy.keep_daily, &|t| t.div_euclid(NS_PER_DAY));
    // 1970-01-01 was a Thursday: +3 days makes weeks start on Monday (ISO).
    per_bucket(policy.keep_weekly, &|t| {
        (t.div_euclid(NS_PER_DAY) + 3).div_euclid(7)
    });
    Ok(keep)
}

/// Computes what gc would delete. The caller holds the exclusive store lock (pins are read
/// here and must not change before [`apply_gc`]).
///
/// # Errors
/// `Corrupt` when a checkpoint record or a tree a kept checkpoint needs cannot be read: gc
/// refuses to sweep what it cannot see (run `ckptfs verify` / `doctor`).
pub fn plan_gc(store: &Store, opts: &GcOptions) -> Result<GcPlan> {
    let (policy, source) = match (&opts.policy, &store.config().retention) {
        (Some(p), _) if !p.is_empty() => (p.clone(), "command line"),
        (_, Some(p)) if !p.is_empty() => (p.clone(), "STORE.json"),
        _ => (
            RetentionPolicy::default(),
            "none (every checkpoint is kept)",
        ),
    };
    let now = crate::util::now_ns();
    let mut report = GcReport {
        policy: policy.clone(),
        policy_source: source.into(),
        ..Default::default()
    };
    let mut records: BTreeMap<ObjectId, Checkpoint> = BTreeMap::new();
    for id in store.list_checkpoints()? {
        let c = store.read_checkpoint(&id).map_err(|e| {
            Error::Corrupt(format!(
                "gc cannot read checkpoint {id} ({e}); run `ckptfs doctor` and `ckptfs verify` first"
            ))
        })?;
        records.insert(id, c);
    }
    report.checkpoints = records.len();

    // Reasons to keep, in priority order.
    let mut reason: BTreeMap<ObjectId, &'static str> = BTreeMap::new();
    let mut live_branches: BTreeSet<String> = BTreeSet::new();
    for (name, b) in store.list_branches()? {
        if let Some(h) = b.head {
            reason.entry(h).or_insert("branch head");
        }
        live_branches.insert(name);
    }
    for (_, id) in store.list_labels()? {
        reason.entry(id).or_insert("label");
    }
    for (id, c) in &records {
        if c.label.is_some() {
            reason.entry(*id).or_insert("label");
        }
    }
    let pins = store.live_pins()?;
    let mut pin_all = false;
    let mut pinned_branches: BTreeSet<String> = BTreeSet::new();
    for p in &pins {
        report.pins.push(format!("{}-{}", p.owner, p.pid));
        pin_all |= p.all;
        for id in &p.checkpoints {
            reason.entry(*id).or_insert("pinned");
        }
        for b in &p.branches {
            pinned_branches.insert(b.clone());
            if let Ok(Some(br)) = store.read_branch(b) {
                if let Some(h) = br.head {
                    reason.entry(h).or_insert("pinned");
                }
            }
        }
    }
    report.pins.sort();
    let bases = workspace_bases(store);
    for (_, id) in &bases {
        reason.entry(*id).or_insert("workspace base");
    }
    if pin_all || policy.is_empty() {
        let why = if pin_all {
            "pin keeps all"
        } else {
            "no policy"
        };
        for id in records.keys() {
            reason.entry(*id).or_insert(why);
        }
    } else {
        let mut by_branch: BTreeMap<&str, Vec<(ObjectId, i64)>> = BTreeMap::new();
        // Durable checkpoints take part in the ranking: `--keep-last 3` keeps the head and
        // the two before it, not three more.
        for (id, c) in &records {
            by_branch
                .entry(c.branch.as_str())
                .or_default()
                .push((*id, c.time_ns));
        }
        for items in by_branch.values() {
            for id in select_by_policy(items, &policy, now)? {
                reason.entry(id).or_insert("policy");
            }
        }
    }
    let kept: BTreeSet<ObjectId> = records
        .keys()
        .filter(|id| reason.contains_key(id))
        .copied()
        .collect();
    for id in &kept {
        *report.kept.entry(reason[id].to_string()).or_default() += 1;
    }
    let mut plan_records = Vec::new();
    for (id, c) in &records {
        if !kept.contains(id) {
            report.pruned.push(PrunedCheckpoint {
                id: *id,
                branch: c.branch.clone(),
                time: crate::util::format_utc(c.time_ns),
            });
            plan_records.push(store.checkpoint_path(id));
        }
    }
    report.pruned.sort_by(|a, b| {
        a.branch
            .cmp(&b.branch)
            .then(a.time.cmp(&b.time))
            .then(a.id.cmp(&b.id))
    });

    // Mark.
    let mut reachable: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<ObjectId> = kept
        .iter()
        .flat_map(|id| records[id].roots.values().map(|r| r.tree))
        .collect();
    while let Some(t) = stack.pop() {
        if !reachable.insert(t) {
            continue;
        }
        let tree = store
            .read_object(&t)
            .and_then(|d| Tree::decode(&d))
            .map_err(|e| {
                Error::Corrupt(format!(
                    "gc cannot read tree {t} of a kept checkpoint ({e}); nothing was deleted; \
                     run `ckptfs verify` and restore the object from an archive"
                ))
            })?;
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks } => reachable.extend(chunks.iter().map(|c| c.id)),
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }

    // Sweep.
    let mut plan_objects = Vec::new();
    for (path, id) in object_files(store)? {
        report.objects += 1;
        if !reachable.contains(&id) {
            let len = fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
            report.objects_removed += 1;
            report.object_bytes_freed += len;
            plan_objects.push(path);
        }
    }
    plan_objects.sort();

    // Cache and ephemeral paths. Nothing a mount uses (a mount point below it, or named in its
    // options, e.g. an overlay lowerdir) goes.
    let mounted = crate::ops::doctor::mount_table().unwrap_or_default();
    let in_use = |p: &Path| {
        let ps = p.to_string_lossy();
        mounted
            .iter()
            .any(|m| m.mount_point.starts_with(p) || m.super_options.contains(ps.as_ref()))
    };
    let mut paths: Vec<(PathBuf, bool, String)> = Vec::new();
    if opts.clear_cache {
        for p in list_dir(&store.cache_dir())? {
            if in_use(&p) {
                continue;
            }
            let is_dir = p.is_dir();
            paths.push((p, is_dir, "cache (--clear-cache)".into()));
        }
    } else {
        for p in list_dir(&store.statcache_dir())? {
            let name = file_name(&p);
            let owner = name
                .split_once('-')
                .and_then(|(hex, _)| ObjectId::parse(hex).ok());
            if owner.map_or(true, |id| !kept.contains(&id)) {
                paths.push((
                    p,
                    false,
                    "stat cache of a pruned or missing checkpoint".into(),
                ));
            }
        }
    }
    for dir in [
        store.tmp_dir(),
        store.root().to_path_buf(),
        store.checkpoints_dir(),
        store.branches_dir(),
        store.labels_dir(),
        store.run_dir(),
        store.pins_dir(),
    ] {
        let in_tmp = dir == store.tmp_dir();
        for p in list_dir(&dir)? {
            let name = file_name(&p);
            if !(in_tmp || name.starts_with(".tmp-")) || p.is_dir() {
                continue;
            }
            if fsio::temp_owner_pid(&name).map_or(true, |pid| !pid_alive(pid)) {
                paths.push((p, false, "temp file of a finished process".into()));
            }
        }
    }
    for p in list_dir(&store.pins_dir())? {
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let dead = fs::read(&p)
            .ok()
            .and_then(|d| serde_json::from_slice::<crate::store::pin::Pin>(&d).ok())
            .is_some_and(|pin| !pid_alive(pin.pid));
        if dead {
            paths.push((p, false, "pin of a process that exited".into()));
        }
    }
    for p in crate::ops::doctor::dead_sockets(store) {
        paths.push((p, false, "control socket of a daemon that is gone".into()));
    }
    for p in crate::ops::doctor::dead_pid_files(store) {
        paths.push((p, false, "pid file of a process that exited".into()));
    }
    for p in list_dir(&store.upper_base_dir())? {
        let name = file_name(&p);
        if !p.is_dir() || live_branches.contains(&name) || pinned_branches.contains(&name) {
            continue;
        }
        let p_str = p.to_string_lossy().to_string();
        if mounted
            .iter()
            .any(|m| m.mount_point.starts_with(&p) || m.super_options.contains(&p_str))
        {
            continue;
        }
        paths.push((p, true, "upper layer of a deleted branch".into()));
    }
    for b in &live_branches {
        for p in crate::workspace::unused_snapshots(store, b)? {
            paths.push((p, false, "reflink snapshot no checkpoint uses".into()));
        }
    }
    for p in list_dir(&store.displaced_dir())? {
        if opts.prune_displaced {
            let is_dir = p.is_dir();
            paths.push((p, is_dir, "displaced (--prune-displaced)".into()));
        } else {
            report.kept_for_review.push(rel(store, &p));
        }
    }
    report.kept_for_review.sort();
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    paths.dedup_by(|a, b| a.0 == b.0);
    let mut plan_paths = Vec::new();
    for (p, is_dir, what) in paths {
        let bytes = tree_bytes(&p);
        report.paths_removed.push(PrunedPath {
            path: rel(store, &p),
            what,
            bytes,
        });
        plan_paths.push((p, is_dir));
    }
    report.bytes_freed = report.object_bytes_freed
        + report.paths_removed.iter().map(|p| p.bytes).sum::<u64>()
        + plan_records
            .iter()
            .map(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum::<u64>();
    Ok(GcPlan {
        report,
        records: plan_records,
        objects: plan_objects,
        paths: plan_paths,
    })
}

/// Carries out a plan made under the same lock; returns its report. Order: checkpoint records
/// (then a sync of their directory), objects, ephemeral and cache paths, a final sync.
///
/// # Errors
/// The first failing deletion; what was deleted before it stays deleted (a rerun finishes).
pub fn apply_gc(store: &Store, plan: GcPlan) -> Result<GcReport> {
    for p in &plan.records {
        fsio::remove_file(p)?;
    }
    if !plan.records.is_empty() {
        fsio::sync_path(&store.checkpoints_dir())?;
    }
    for p in &plan.objects {
        fsio::remove_file(p)?;
    }
    for (p, is_dir) in &plan.paths {
        if *is_dir {
            fsio::remove_dir_all(p)?;
        } else {
            fsio::remove_file(p)?;
        }
    }
    if !plan.objects.is_empty() || !plan.paths.is_empty() {
        fsio::sync_filesystem(store.root())?;
    }
    Ok(plan.report)
}

/// Plans under the exclusive lock and prints nothing: the dry run.
pub fn gc_dry_run(store: &Store, opts: &GcOptions) -> Result<GcReport> {
    let _lock = store.lock_exclusive()?;
    Ok(plan_gc(store, opts)?.report)
}

/// Plans and applies under one exclusive lock, with a RUNNING marker and an audit line.
pub fn gc(store: &Store, opts: &GcOptions) -> Result<GcReport> {
    let args = serde_json::json!({"policy": opts.policy, "prune_displaced": opts.prune_displaced,
        "clear_cache": opts.clear_cache});
    store.mutate("gc", args, |_| {
        let plan = plan_gc(store, opts)?;
        let report = apply_gc(store, plan)?;
        let summary = serde_json::json!({"pruned_checkpoints": report.pruned.len(),
            "objects_removed": report.objects_removed, "paths_removed": report.paths_removed.len(),
            "bytes_freed": report.bytes_freed});
        Ok((report, summary))
    })
}

/// Checkpoints that live workspaces stand on: the `base` of `upper/B/base.json` and of
/// `run/mounts/B.json`, as (branch, checkpoint).
pub fn workspace_bases(store: &Store) -> Vec<(String, ObjectId)> {
    let read_base = |p: &Path| -> Option<ObjectId> {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(p).ok()?).ok()?;
        ObjectId::parse(v.get("base")?.as_str()?).ok()
    };
    let mut out = Vec::new();
    for d in list_dir(&store.upper_base_dir()).unwrap_or_default() {
        let b = file_name(&d);
        if let Some(id) = read_base(&store.upper_base_path(&b)) {
            out.push((b, id));
        }
    }
    let mounts_dir = store.workspace_state_path("x");
    if let Some(dir) = mounts_dir.parent() {
        for p in list_dir(dir).unwrap_or_default() {
            let name = file_name(&p);
            if let (Some(b), Some(id)) = (name.strip_suffix(".json"), read_base(&p)) {
                out.push((b.to_string(), id));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every object file with its id (names that are not object ids are skipped).
pub fn object_files(store: &Store) -> Result<Vec<(PathBuf, ObjectId)>> {
    let mut out = Vec::new();
    for fan in list_dir(&store.objects_dir())? {
        let prefix = file_name(&fan);
        if prefix.len() != 2 || !fan.is_dir() {
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

/// Entries of `dir` (empty when it does not exist), sorted.
pub fn list_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        out.push(ent.map_err(|e| Error::io(dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn rel(store: &Store, p: &Path) -> String {
    p.strip_prefix(store.root())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// Bytes in files under `p` (not following symlinks).
pub fn tree_bytes(p: &Path) -> u64 {
    let Ok(md) = fs::symlink_metadata(p) else {
        return 0;
    };
    if !md.is_dir() {
        return md.len();
    }
    let Ok(rd) = fs::read_dir(p) else { return 0 };
    rd.filter_map(|e| e.ok())
        .map(|e| tree_bytes(&e.path()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId([n; 32])
    }

    const H: i64 = 3600 * 1_000_000_000;

    #[test]
    fn policies_table() {
        // Checkpoints every 6 hours over 4 weeks, newest = id 111.
        let now = 1_795_946_400_000_000_000; // 2026-11-29T10:00:00 (a Sunday)
        let items: Vec<(ObjectId, i64)> = (0u8..112)
            .map(|i| (id(i), now - (111 - i64::from(i)) * 6 * H))
            .collect();
        let p = |last, within: Option<&str>, daily, weekly| RetentionPolicy {
            keep_last: last,
            keep_within: within.map(str::to_string),
            keep_daily: daily,
            keep_weekly: weekly,
        };
        let cases: Vec<(RetentionPolicy, usize)> = vec![
            (p(Some(3), None, None, None), 3),
            (p(Some(0), None, None, None), 0),
            (p(Some(500), None, None, None), 112),
            (p(None, Some("1d"), None, None), 5),
            (p(None, None, Some(7), None), 7),
            (p(None, None, None, Some(2)), 2),
            (p(Some(4), None, Some(2), None), 4),
            (p(Some(1), None, Some(3), None), 3),
            (p(None, None, None, Some(10)), 5),
        ];
        for (pol, want) in cases {
            let kept = select_by_policy(&items, &pol, now).unwrap();
            assert_eq!(kept.len(), want, "{pol:?}");
            if want > 0 {
                assert!(kept.contains(&id(111)), "newest kept by {pol:?}");
            }
        }
        // keep-daily keeps the newest of each day.
        let kept = select_by_policy(&items, &p(None, None, Some(2), None), now).unwrap();
        let days: BTreeSet<i64> = items
            .iter()
            .filter(|(i, _)| kept.contains(i))
            .map(|(_, t)| t.div_euclid(NS_PER_DAY))
            .collect();
        assert_eq!(days.len(), 2);
    }
}
