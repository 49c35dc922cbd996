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
//! **Policy** (restic's `forget` rules: `--keep-last`, `--keep-within`, `--keep-hourly`,
//! `--keep-daily`, `--keep-weekly`, `--keep-monthly`, `--keep-yearly`, plus `--keep-branch`; or
//! the `retention` field of STORE.json when no flag is given) applies to each branch
//! separately: the checkpoints recorded on branch B (their `branch` field) are ranked newest
//! first and a checkpoint is kept when any rule keeps it (see [`select_by_policy`]: UTC
//! periods, ISO weeks, `keep_within` relative to B's newest). Every reason that keeps each
//! checkpoint is reported ([`GcReport::decisions`]). With no policy at all, every checkpoint is
//! kept and gc only sweeps unreachable objects and ephemeral files.
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
//! parent. `log --branch` stops there and says the older history was pruned. (A parent taken
//! out by `forget` leaves a tombstone, and `log --branch` steps over it.)
//!
//! **Forgetting** (`GcOptions::forget`, used by `forget --prune`): the named records go like
//! pruned ones and no policy applies; the rest of the plan (mark, sweep, garbage) is the same.
//!
//! **Crash safety**: apply deletes checkpoint records first and syncs their directory, and only
//! then deletes objects that no kept checkpoint reaches. A gc killed at any point leaves every
//! remaining record complete (verify is clean); a rerun finishes the job.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::mountinfo::MountEntry;
use crate::fs::{file_name, list_dir};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::checkpoint::Checkpoint;
use crate::store::object::object_files;
use crate::store::tree::{EntryKind, Tree};
use crate::store::{RetentionPolicy, Store};
use crate::upkeep::inventory;

const NS_PER_HOUR: i64 = 3_600 * 1_000_000_000;
const NS_PER_DAY: i64 = 24 * NS_PER_HOUR;

/// What gc should do beyond the policy.
#[derive(Clone, Debug, Default)]
pub struct GcOptions {
    /// Policy from the command line; `None` uses STORE.json's `retention` (or keeps all).
    pub policy: Option<RetentionPolicy>,
    /// Also delete `displaced/` entries (set aside by restore/switch; otherwise only listed).
    pub prune_displaced: bool,
    /// Delete everything in `cache/`, not only caches of pruned checkpoints.
    pub clear_cache: bool,
    /// Checkpoints being forgotten (`forget --prune`): their records go whatever keeps them,
    /// and no policy applies, so every other checkpoint is kept. The caller has checked,
    /// under the same lock, that none is a branch head, labelled, pinned or a workspace's
    /// base; gc refuses the plan if one is a head, pinned or a base all the same.
    pub forget: BTreeSet<ObjectId>,
}

/// Where the policy gc applies came from.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub enum PolicySource {
    #[serde(rename = "command line")]
    CommandLine,
    #[serde(rename = "STORE.json")]
    StoreConfig,
    /// Neither gave a rule.
    #[default]
    #[serde(rename = "none (every checkpoint is kept)")]
    None,
}

impl PolicySource {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::CommandLine => "command line",
            PolicySource::StoreConfig => "STORE.json",
            PolicySource::None => "none (every checkpoint is kept)",
        }
    }
}

impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Why gc keeps a checkpoint. [`GcReport::decisions`] lists every reason that keeps each
/// checkpoint, in the order of [`plan_gc`]'s steps (refs, pins, workspaces, then the policy's
/// rules in the order of the variants); [`GcReport::kept`] counts each kept checkpoint under
/// its first reason, with every policy rule counted as [`KeepReason::Policy`].
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, Hash)]
pub enum KeepReason {
    #[serde(rename = "branch_head")]
    BranchHead,
    #[serde(rename = "label")]
    Label,
    /// Named by a live pin, or the head of a branch a live pin names.
    #[serde(rename = "pinned")]
    Pinned,
    #[serde(rename = "workspace_base")]
    WorkspaceBase,
    /// A policy rule (the `kept` count's name for the rules below).
    #[serde(rename = "policy")]
    Policy,
    /// `--keep-last`.
    #[serde(rename = "last")]
    Last,
    /// `--keep-within`.
    #[serde(rename = "within")]
    Within,
    #[serde(rename = "hourly")]
    Hourly,
    #[serde(rename = "daily")]
    Daily,
    #[serde(rename = "weekly")]
    Weekly,
    #[serde(rename = "monthly")]
    Monthly,
    #[serde(rename = "yearly")]
    Yearly,
    /// `--keep-branch`.
    #[serde(rename = "branch")]
    Branch,
    #[serde(rename = "no_policy")]
    NoPolicy,
    #[serde(rename = "pin_keeps_all")]
    PinKeepsAll,
}

impl KeepReason {
    pub fn as_str(self) -> &'static str {
        match self {
            KeepReason::BranchHead => "branch head",
            KeepReason::Label => "label",
            KeepReason::Pinned => "pinned",
            KeepReason::WorkspaceBase => "workspace base",
            KeepReason::Policy => "policy",
            KeepReason::Last => "last",
            KeepReason::Within => "within",
            KeepReason::Hourly => "hourly",
            KeepReason::Daily => "daily",
            KeepReason::Weekly => "weekly",
            KeepReason::Monthly => "monthly",
            KeepReason::Yearly => "yearly",
            KeepReason::Branch => "branch",
            KeepReason::NoPolicy => "no policy",
            KeepReason::PinKeepsAll => "pin keeps all",
        }
    }
}

impl KeepReason {
    /// True for the policy's rules.
    pub fn is_rule(self) -> bool {
        matches!(
            self,
            KeepReason::Last
                | KeepReason::Within
                | KeepReason::Hourly
                | KeepReason::Daily
                | KeepReason::Weekly
                | KeepReason::Monthly
                | KeepReason::Yearly
                | KeepReason::Branch
        )
    }

    /// The name `kept` counts it under: a rule counts as [`KeepReason::Policy`].
    fn counted_as(self) -> KeepReason {
        if self.is_rule() {
            KeepReason::Policy
        } else {
            self
        }
    }
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

// Ordered by name, so the `kept` map lists reasons alphabetically in JSON and text, as it did
// when its keys were strings.
impl Ord for KeepReason {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for KeepReason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Why an ephemeral or cache path is garbage.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub enum Garbage {
    #[serde(rename = "cache (--clear-cache)")]
    ClearedCache,
    #[serde(rename = "stat cache of a pruned or missing checkpoint")]
    StaleStatCache,
    #[serde(rename = "temp file of a finished process")]
    LeftoverTemp,
    #[serde(rename = "pin of a process that exited")]
    DeadPin,
    #[serde(rename = "control socket of a daemon that is gone")]
    DeadSocket,
    #[serde(rename = "pid file of a process that exited")]
    DeadPidFile,
    #[serde(rename = "upper layer of a deleted branch")]
    OrphanUpper,
    #[serde(rename = "reflink snapshot no checkpoint uses")]
    UnusedSnapshot,
    #[serde(rename = "displaced (--prune-displaced)")]
    Displaced,
}

impl Garbage {
    pub fn as_str(self) -> &'static str {
        match self {
            Garbage::ClearedCache => "cache (--clear-cache)",
            Garbage::StaleStatCache => "stat cache of a pruned or missing checkpoint",
            Garbage::LeftoverTemp => "temp file of a finished process",
            Garbage::DeadPin => "pin of a process that exited",
            Garbage::DeadSocket => "control socket of a daemon that is gone",
            Garbage::DeadPidFile => "pid file of a process that exited",
            Garbage::OrphanUpper => "upper layer of a deleted branch",
            Garbage::UnusedSnapshot => "reflink snapshot no checkpoint uses",
            Garbage::Displaced => "displaced (--prune-displaced)",
        }
    }
}

impl fmt::Display for Garbage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One pruned checkpoint.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PrunedCheckpoint {
    pub id: ObjectId,
    pub branch: String,
    pub time: String,
}

/// One checkpoint and what gc decides for it: every reason that keeps it, or none (pruned).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CheckpointDecision {
    pub id: ObjectId,
    pub branch: String,
    /// RFC 3339, UTC (`2026-12-01T08:00:00Z`).
    pub time: String,
    /// The label its record was made with (`capture --label`), if any.
    pub label: Option<String>,
    /// Every label naming it now (as `log` and `show` list them).
    pub labels: Vec<String>,
    /// The message's first line.
    pub message: String,
    /// Every reason that keeps it, in [`plan_gc`]'s order; empty when pruned.
    pub kept: Vec<KeepReason>,
    pub pruned: bool,
}

/// One ephemeral or cache path that goes.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PrunedPath {
    /// Path relative to the store root.
    pub path: String,
    /// Why it is garbage.
    pub what: Garbage,
    pub bytes: u64,
}

/// What gc does (plan) or did (apply): the same value for both.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GcReport {
    pub policy: RetentionPolicy,
    pub policy_source: PolicySource,
    pub checkpoints: usize,
    /// Kept checkpoints by their first reason (every policy rule counts as `policy`).
    pub kept: BTreeMap<KeepReason, usize>,
    pub pruned: Vec<PrunedCheckpoint>,
    /// Every checkpoint with every reason that keeps it (or `pruned`), by branch, newest first.
    pub decisions: Vec<CheckpointDecision>,
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

/// The period (hour, day, ISO week, month, year) a Unix time in nanoseconds falls in, as a
/// number that differs between periods.
type PeriodOf = fn(i64) -> i64;

/// The rules of `policy` that keep each checkpoint of one branch's `(id, time_ns)` list, with
/// restic's semantics: checkpoints are taken newest first (ties by id); `keep_last` keeps
/// the first N; `keep_within` those less than the duration older than the newest (not
/// than now, so a branch nobody touched for a year keeps its last weeks); each bucket rule
/// keeps the newest checkpoint of each of the last N periods that have one. Periods are UTC:
/// hours, days, ISO weeks (Monday to Sunday), calendar months and years. Checkpoints no rule
/// keeps are absent. (`keep_branch` is applied by the caller, which knows the branch.)
///
/// # Errors
/// `Usage` for a bad `keep_within` duration.
pub fn select_by_policy(
    items: &[(ObjectId, i64)],
    policy: &RetentionPolicy,
) -> Result<BTreeMap<ObjectId, Vec<KeepReason>>> {
    let mut sorted = items.to_vec();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let mut keep: BTreeMap<ObjectId, Vec<KeepReason>> = BTreeMap::new();
    let mut add = |id: ObjectId, why: KeepReason| {
        let reasons = keep.entry(id).or_default();
        if !reasons.contains(&why) {
            reasons.push(why);
        }
    };
    if let Some(n) = policy.keep_last {
        for (id, _) in sorted.iter().take(n as usize) {
            add(*id, KeepReason::Last);
        }
    }
    if let (Some(d), Some((_, newest))) = (policy.within_ns()?, sorted.first()) {
        let cutoff = newest.saturating_sub(d);
        for (id, _) in sorted.iter().filter(|(_, t)| *t > cutoff) {
            add(*id, KeepReason::Within);
        }
    }
    let buckets: [(Option<u32>, KeepReason, PeriodOf); 5] = [
        (policy.keep_hourly, KeepReason::Hourly, |t| {
            t.div_euclid(NS_PER_HOUR)
        }),
        (policy.keep_daily, KeepReason::Daily, |t| {
            t.div_euclid(NS_PER_DAY)
        }),
        // 1970-01-01 was a Thursday: +3 days makes weeks start on Monday (ISO).
        (policy.keep_weekly, KeepReason::Weekly, |t| {
            (t.div_euclid(NS_PER_DAY) + 3).div_euclid(7)
        }),
        (policy.keep_monthly, KeepReason::Monthly, |t| {
            let (y, m) = crate::text::time::utc_year_month(t);
            y * 12 + i64::from(m)
        }),
        (policy.keep_yearly, KeepReason::Yearly, |t| {
            crate::text::time::utc_year_month(t).0
        }),
    ];
    for (n, why, bucket) in buckets {
        let Some(n) = n else { continue };
        let mut last = None;
        let mut left = n;
        for (id, t) in &sorted {
            if left == 0 {
                break;
            }
            let b = bucket(*t);
            if last != Some(b) {
                last = Some(b);
                left -= 1;
                add(*id, why);
            }
        }
    }
    Ok(keep)
}

/// What the retention steps decided: the first reason to keep each kept checkpoint, and the
/// branches whose workspace layers stay.
#[derive(Default)]
struct Retention {
    /// Every reason to keep each kept checkpoint, first found first.
    reasons: BTreeMap<ObjectId, Vec<KeepReason>>,
    /// Branches that exist.
    live_branches: BTreeSet<String>,
    /// Branches a live pin names (kept even once deleted, while the pin lives).
    pinned_branches: BTreeSet<String>,
    /// A live pin keeps every checkpoint.
    pinned_all: bool,
}

impl Retention {
    fn keep(&mut self, id: ObjectId, why: KeepReason) {
        let reasons = self.reasons.entry(id).or_default();
        if !reasons.contains(&why) {
            reasons.push(why);
        }
    }

    fn first_reason(&self, id: &ObjectId) -> Option<KeepReason> {
        self.reasons.get(id).and_then(|r| r.first().copied())
    }
}

/// Computes what gc would delete. The caller holds the exclusive store lock (pins are read
/// here and must not change before [`apply_gc`]).
///
/// Steps: choose the policy; read every record; keep what refs, pins and workspaces need,
/// then what the policy keeps; mark the objects kept checkpoints reach; sweep the other
/// objects; collect ephemeral and cache garbage.
///
/// # Errors
/// `Corrupt` when a checkpoint record or a tree a kept checkpoint needs cannot be read: gc
/// refuses to sweep what it cannot see (run `ckptfs verify` / `doctor`).
pub fn plan_gc(store: &Store, opts: &GcOptions) -> Result<GcPlan> {
    let (policy, source) = choose_policy(store, opts);
    policy.check().map_err(|e| match (source, e) {
        (PolicySource::StoreConfig, Error::Usage(m)) => Error::Usage(format!(
            "STORE.json retention (keep_within or keep_branch): {m}"
        )),
        (_, e) => e,
    })?;
    let mut report = GcReport {
        policy: policy.clone(),
        policy_source: source,
        ..Default::default()
    };
    let records = read_records(store)?;
    report.checkpoints = records.len();

    let mut retention = Retention::default();
    keep_refs(store, &records, &mut retention)?;
    report.pins = keep_pinned(store, &mut retention)?;
    keep_workspace_bases(store, &mut retention);
    refuse_forgetting_roots(&opts.forget, &retention)?;
    keep_by_policy(&records, &policy, &mut retention)?;
    let kept: BTreeSet<ObjectId> = records
        .keys()
        .filter(|id| retention.reasons.contains_key(id) && !opts.forget.contains(id))
        .copied()
        .collect();
    for id in &kept {
        if let Some(why) = retention.first_reason(id) {
            *report.kept.entry(why.counted_as()).or_default() += 1;
        }
    }
    report.decisions = decide(&records, &kept, &retention, &store.list_labels()?);
    let plan_records = prune_records(store, &records, &kept, &mut report);

    let reachable = mark_reachable(store, &records, &kept)?;
    let plan_objects = sweep_objects(store, &reachable, &mut report)?;

    let paths = collect_garbage(store, opts, &kept, &retention, &mut report)?;
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

/// Defence in depth for `forget --prune`: a checkpoint to forget that a branch head, a live
/// pin or a workspace needs stops the plan (its objects would be swept from under them).
fn refuse_forgetting_roots(forget: &BTreeSet<ObjectId>, retention: &Retention) -> Result<()> {
    for id in forget {
        let root = retention.reasons.get(id).and_then(|r| {
            r.iter()
                .find(|w| {
                    matches!(
                        w,
                        KeepReason::BranchHead | KeepReason::Pinned | KeepReason::WorkspaceBase
                    )
                })
                .copied()
        });
        match root {
            Some(why) => {
                return Err(Error::Conflict(format!(
                    "gc: checkpoint {} cannot be forgotten: it is a {why}",
                    id.short()
                )))
            }
            _ if retention.pinned_all => {
                return Err(Error::Conflict(format!(
                    "gc: checkpoint {} cannot be forgotten: a live pin keeps every checkpoint",
                    id.short()
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The command line's policy, else STORE.json's, else none (keep every checkpoint). While
/// forgetting, none: only the forgotten checkpoints go.
fn choose_policy(store: &Store, opts: &GcOptions) -> (RetentionPolicy, PolicySource) {
    if !opts.forget.is_empty() {
        return (RetentionPolicy::default(), PolicySource::None);
    }
    match (&opts.policy, &store.config().retention) {
        (Some(p), _) if !p.is_empty() => (p.clone(), PolicySource::CommandLine),
        (_, Some(p)) if !p.is_empty() => (p.clone(), PolicySource::StoreConfig),
        _ => (RetentionPolicy::default(), PolicySource::None),
    }
}

/// Every checkpoint record; one that does not read stops gc.
pub(crate) fn read_records(store: &Store) -> Result<BTreeMap<ObjectId, Checkpoint>> {
    let mut records = BTreeMap::new();
    for id in store.list_checkpoints()? {
        let c = store.read_checkpoint(&id).map_err(|e| {
            Error::Corrupt(format!(
                "gc cannot read checkpoint {id} ({e}); run `ckptfs doctor` and `ckptfs verify` first"
            ))
        })?;
        records.insert(id, c);
    }
    Ok(records)
}

/// Durable roots: branch heads, labels (refs and labelled records).
fn keep_refs(
    store: &Store,
    records: &BTreeMap<ObjectId, Checkpoint>,
    retention: &mut Retention,
) -> Result<()> {
    for (name, b) in store.list_branches()? {
        if let Some(h) = b.head {
            retention.keep(h, KeepReason::BranchHead);
        }
        retention.live_branches.insert(name);
    }
    for (_, id) in store.list_labels()? {
        retention.keep(id, KeepReason::Label);
    }
    for (id, c) in records {
        if c.label.is_some() {
            retention.keep(*id, KeepReason::Label);
        }
    }
    Ok(())
}

/// Live pins: their checkpoints and the heads of their branches. Returns the pins honoured,
/// as `OWNER-PID`, sorted. A pin with `all` is noted for [`keep_by_policy`].
fn keep_pinned(store: &Store, retention: &mut Retention) -> Result<Vec<String>> {
    let mut honoured = Vec::new();
    for p in &store.live_pins()? {
        honoured.push(format!("{}-{}", p.owner, p.pid));
        if p.all {
            retention.pinned_all = true;
        }
        for id in &p.checkpoints {
            retention.keep(*id, KeepReason::Pinned);
        }
        for b in &p.branches {
            retention.pinned_branches.insert(b.clone());
            if let Ok(Some(br)) = store.read_branch(b) {
                if let Some(h) = br.head {
                    retention.keep(h, KeepReason::Pinned);
                }
            }
        }
    }
    honoured.sort();
    Ok(honoured)
}

/// The checkpoints live workspaces stand on.
fn keep_workspace_bases(store: &Store, retention: &mut Retention) {
    for (_, id) in inventory::workspace_bases(store) {
        retention.keep(id, KeepReason::WorkspaceBase);
    }
}

/// The policy, per branch; every checkpoint when a pin keeps all or there is no policy.
fn keep_by_policy(
    records: &BTreeMap<ObjectId, Checkpoint>,
    policy: &RetentionPolicy,
    retention: &mut Retention,
) -> Result<()> {
    if retention.pinned_all || policy.is_empty() {
        let why = if retention.pinned_all {
            KeepReason::PinKeepsAll
        } else {
            KeepReason::NoPolicy
        };
        for id in records.keys() {
            retention.keep(*id, why);
        }
        return Ok(());
    }
    let mut by_branch: BTreeMap<&str, Vec<(ObjectId, i64)>> = BTreeMap::new();
    // Durable checkpoints take part in the ranking: `--keep-last 3` keeps the head and the two
    // before it, not three more.
    for (id, c) in records {
        by_branch
            .entry(c.branch.as_str())
            .or_default()
            .push((*id, c.time_ns));
    }
    for (branch, items) in &by_branch {
        for (id, reasons) in select_by_policy(items, policy)? {
            for why in reasons {
                retention.keep(id, why);
            }
        }
        if policy.keep_branch.iter().any(|b| b == branch) {
            for (id, _) in items {
                retention.keep(*id, KeepReason::Branch);
            }
        }
    }
    Ok(())
}

/// Every checkpoint with its reasons, by branch, newest first.
fn decide(
    records: &BTreeMap<ObjectId, Checkpoint>,
    kept: &BTreeSet<ObjectId>,
    retention: &Retention,
    labels: &[(String, ObjectId)],
) -> Vec<CheckpointDecision> {
    let mut out: Vec<(i64, CheckpointDecision)> = records
        .iter()
        .map(|(id, c)| {
            let pruned = !kept.contains(id);
            let reasons = if pruned {
                Vec::new()
            } else {
                retention.reasons.get(id).cloned().unwrap_or_default()
            };
            let d = CheckpointDecision {
                id: *id,
                branch: c.branch.clone(),
                time: crate::text::time::format_rfc3339(c.time_ns),
                label: c.label.clone(),
                labels: crate::history::timeline::labels_of(labels, id),
                message: c.message.lines().next().unwrap_or("").to_string(),
                kept: reasons,
                pruned,
            };
            (c.time_ns, d)
        })
        .collect();
    out.sort_by(|(ta, a), (tb, b)| {
        a.branch
            .cmp(&b.branch)
            .then(tb.cmp(ta))
            .then(b.id.cmp(&a.id))
    });
    out.into_iter().map(|(_, d)| d).collect()
}

/// Records the checkpoints that go in the report; returns their record paths.
fn prune_records(
    store: &Store,
    records: &BTreeMap<ObjectId, Checkpoint>,
    kept: &BTreeSet<ObjectId>,
    report: &mut GcReport,
) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for (id, c) in records {
        if !kept.contains(id) {
            report.pruned.push(PrunedCheckpoint {
                id: *id,
                branch: c.branch.clone(),
                time: crate::text::time::format_rfc3339(c.time_ns),
            });
            paths.push(store.checkpoint_path(id));
        }
    }
    report.pruned.sort_by(|a, b| {
        a.branch
            .cmp(&b.branch)
            .then(a.time.cmp(&b.time))
            .then(a.id.cmp(&b.id))
    });
    paths
}

/// Every object a kept checkpoint reaches (trees and chunks). A tree that does not read stops
/// gc: what it reaches would otherwise be swept.
pub(crate) fn mark_reachable(
    store: &Store,
    records: &BTreeMap<ObjectId, Checkpoint>,
    kept: &BTreeSet<ObjectId>,
) -> Result<HashSet<ObjectId>> {
    let mut reachable: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<ObjectId> = kept
        .iter()
        .flat_map(|id| records[id].roots.values().map(|r| r.tree))
        .collect();
    let progress = Progress::items("gc mark", "trees", None);
    while let Some(t) = stack.pop() {
        if !reachable.insert(t) {
            continue;
        }
        progress.add_items(1);
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
    progress.finish();
    Ok(reachable)
}

/// Object files nothing reaches, sorted; counts them in the report.
fn sweep_objects(
    store: &Store,
    reachable: &HashSet<ObjectId>,
    report: &mut GcReport,
) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let files = object_files(store)?;
    let progress = Progress::items("gc sweep", "objects", Some(files.len() as u64));
    for (path, id) in files {
        progress.add_items(1);
        report.objects += 1;
        if !reachable.contains(&id) {
            let len = fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
            report.objects_removed += 1;
            report.object_bytes_freed += len;
            out.push(path);
        }
    }
    progress.finish();
    out.sort();
    Ok(out)
}

/// Ephemeral and cache paths that go, as (path, is a directory, why), sorted and unique.
/// Nothing a mount uses (a mount point below it, or named in its options, e.g. an overlay
/// lowerdir) goes. `displaced/` entries are listed for review unless `--prune-displaced`.
fn collect_garbage(
    store: &Store,
    opts: &GcOptions,
    kept: &BTreeSet<ObjectId>,
    retention: &Retention,
    report: &mut GcReport,
) -> Result<Vec<(PathBuf, bool, Garbage)>> {
    let mounted: Vec<MountEntry> = crate::fs::mountinfo::mounts().unwrap_or_default();
    let mut paths: Vec<(PathBuf, bool, Garbage)> = Vec::new();
    if opts.clear_cache {
        for p in list_dir(&store.cache_dir())? {
            if inventory::in_use_by_mount(&mounted, &p) {
                continue;
            }
            let is_dir = p.is_dir();
            paths.push((p, is_dir, Garbage::ClearedCache));
        }
    } else {
        for p in list_dir(&store.statcache_dir())? {
            let name = file_name(&p);
            let owner = name
                .split_once('-')
                .and_then(|(hex, _)| ObjectId::parse(hex).ok());
            if owner.is_none_or(|id| !kept.contains(&id)) {
                paths.push((p, false, Garbage::StaleStatCache));
            }
        }
    }
    for p in inventory::leftover_temps(store)? {
        paths.push((p, false, Garbage::LeftoverTemp));
    }
    for p in inventory::dead_pins(store)? {
        paths.push((p, false, Garbage::DeadPin));
    }
    for p in inventory::dead_sockets(store) {
        paths.push((p, false, Garbage::DeadSocket));
    }
    for p in inventory::dead_pid_files(store) {
        paths.push((p, false, Garbage::DeadPidFile));
    }
    for p in list_dir(&store.upper_base_dir())? {
        let name = file_name(&p);
        // `.folded/`: uppers a fold took out of their branch, removed by the fold's own
        // background process (see `workspace::fold`), which would race with gc.
        if !p.is_dir()
            || name == ".folded"
            || retention.live_branches.contains(&name)
            || retention.pinned_branches.contains(&name)
            || inventory::in_use_by_mount(&mounted, &p)
        {
            continue;
        }
        paths.push((p, true, Garbage::OrphanUpper));
    }
    for b in &retention.live_branches {
        for p in crate::workspace::unused_snapshots(store, b)? {
            paths.push((p, false, Garbage::UnusedSnapshot));
        }
    }
    for p in list_dir(&store.displaced_dir())? {
        if opts.prune_displaced {
            let is_dir = p.is_dir();
            paths.push((p, is_dir, Garbage::Displaced));
        } else {
            report.kept_for_review.push(rel(store, &p));
        }
    }
    report.kept_for_review.sort();
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    paths.dedup_by(|a, b| a.0 == b.0);
    Ok(paths)
}

/// Carries out a plan made under the same lock; returns its report. Order: checkpoint records
/// (then a sync of their directory), objects, ephemeral and cache paths, a final sync.
///
/// # Errors
/// The first failing deletion; what was deleted before it stays deleted (a rerun finishes).
pub fn apply_gc(store: &Store, plan: GcPlan) -> Result<GcReport> {
    let total = plan.records.len() + plan.objects.len() + plan.paths.len();
    let progress = Progress::items("gc delete", "files", Some(total as u64));
    for p in &plan.records {
        atomic::remove_file(p)?;
        progress.add_items(1);
    }
    if !plan.records.is_empty() {
        atomic::sync_path(&store.checkpoints_dir())?;
    }
    for p in &plan.objects {
        atomic::remove_file(p)?;
        progress.add_items(1);
    }
    for (p, is_dir) in &plan.paths {
        if *is_dir {
            atomic::remove_dir_all(p)?;
        } else {
            atomic::remove_file(p)?;
        }
        progress.add_items(1);
    }
    progress.finish();
    if !plan.objects.is_empty() || !plan.paths.is_empty() {
        atomic::sync_filesystem(store.root())?;
    }
    Ok(plan.report)
}

/// Plans under the exclusive lock and prints nothing: the dry run.
///
/// # Errors
/// As [`plan_gc`], and taking the lock.
pub fn gc_dry_run(store: &Store, opts: &GcOptions) -> Result<GcReport> {
    let _lock = store.lock_exclusive()?;
    Ok(plan_gc(store, opts)?.report)
}

/// Plans and applies under one exclusive lock, with a RUNNING marker and an audit line.
///
/// # Errors
/// As [`plan_gc`] and [`apply_gc`], and taking the lock.
pub fn gc(store: &Store, opts: &GcOptions) -> Result<GcReport> {
    let args = serde_json::json!({"policy": opts.policy, "prune_displaced": opts.prune_displaced,
        "clear_cache": opts.clear_cache});
    store.mutate("gc", args, |_| {
        // Parked overlays go first: their uppers can then fold, and gc sees no mount of them.
        crate::workspace::evict_parked(store)?;
        let plan = plan_gc(store, opts)?;
        let report = apply_gc(store, plan)?;
        let summary = serde_json::json!({"pruned_checkpoints": report.pruned.len(),
            "objects_removed": report.objects_removed, "paths_removed": report.paths_removed.len(),
            "bytes_freed": report.bytes_freed});
        Ok((report, summary))
    })
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
mod tests;
