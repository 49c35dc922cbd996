//! `gc --remote`: collect a remote, repacking packs that are mostly garbage (restic's
//! `prune`), planned by [`plan`], carried out by [`apply`]; both give the same
//! [`RemoteGcPlan`], so `--dry-run` prints what the real run then does.
//!
//! **Plan** (under the remote lock, from the remote's own refs, records, tombstones and
//! index): the store's forgets the remote lacks are counted as published (see
//! [`crate::remote::forgotten`]); the history is walked (forgotten checkpoints stepped over)
//! and every reached tree and chunk marked; then, per pack, its *live* bytes (the sealed
//! blobs of reached objects the index places there) and its *unused* bytes (the rest:
//! unreached or duplicate blobs, the trailer). Records no ref reaches go; packs with no live
//! byte (and packs no index names: a dead push's) go; of the packs holding both, the most
//! unused for their live bytes are **repacked** until what unused space is left is at most
//! `--max-unused` (default 5%, as restic: of the remote's pack bytes after gc; or a size, or
//! `unlimited` for no repacking). The live objects of repacked packs are planned into new
//! packs (trees and data apart, in their old order, closed at the pack target), so the plan
//! knows the new packs' count and bytes before anything is written.
//!
//! **Apply**, in an order that leaves the remote complete (every index entry pointing at a
//! blob that is there) if it stops anywhere:
//! 1. the pending tombstones are uploaded;
//! 2. the live blobs of each repacked pack are downloaded and each checked (tag, length,
//!    SHA-256) before it is copied, still sealed, into a new pack; the new packs are uploaded
//!    (a stop here leaves packs no index names: the next gc removes them);
//! 3. one new index of every kept object (reached objects at their new places; unreached
//!    data blobs of packs kept whole; never an unreached tree, whose index entry would promise
//!    a subtree gc may have removed) is uploaded; then the old index files are deleted (any
//!    mix of old and new index files names only blobs that are still there);
//! 4. last, the packs that go (unused and repacked) and the records no ref reaches.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::remote::forgotten::{self, Forgotten};
use crate::remote::health::{remote_history, walk_remote, History, RemoteFinding};
use crate::remote::pack::{self, Index, Kind, Loc, PackWriter};
use crate::remote::{crypto, lock, Remote};
use crate::store::refs::Tombstone;
use crate::store::Store;

/// New packs a repack keeps in flight to the server at once (as push).
const PACKS_IN_FLIGHT: usize = 4;

/// How much unused space gc leaves in packs it keeps (restic's `--max-unused`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaxUnused {
    /// Percent of the remote's pack bytes after gc (0 repacks every pack with unused bytes).
    Percent(f64),
    Bytes(u64),
    /// Never repack.
    Unlimited,
}

impl Default for MaxUnused {
    fn default() -> Self {
        MaxUnused::Percent(5.0)
    }
}

impl FromStr for MaxUnused {
    type Err = Error;

    fn from_str(s: &str) -> Result<MaxUnused> {
        let bad = || {
            Error::Usage(format!(
                "--max-unused {s:?}: expected a percent below 100 (5%), a size (100M) or unlimited"
            ))
        };
        if s == "unlimited" {
            return Ok(MaxUnused::Unlimited);
        }
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(0.0..100.0).contains(&p) {
                return Err(bad());
            }
            return Ok(MaxUnused::Percent(p));
        }
        crate::units::parse_size(s)
            .map(MaxUnused::Bytes)
            .map_err(|_| bad())
    }
}

impl fmt::Display for MaxUnused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnused::Percent(p) => write!(f, "{p}%"),
            MaxUnused::Bytes(b) => write!(f, "{b}"),
            MaxUnused::Unlimited => write!(f, "unlimited"),
        }
    }
}

impl MaxUnused {
    /// The unused bytes allowed when `live` bytes stay (`None`: no limit).
    fn allowed(&self, live: u64) -> Option<u64> {
        match self {
            MaxUnused::Percent(p) => Some((live as f64 * p / (100.0 - p)) as u64),
            MaxUnused::Bytes(b) => Some(*b),
            MaxUnused::Unlimited => None,
        }
    }
}

/// One pack a repack rewrites.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RepackedPack {
    pub pack: String,
    /// `unused` (over the --max-unused limit) or `small` (--repack-small).
    pub reason: String,
    pub bytes: u64,
    pub live_bytes: u64,
    pub live_objects: u64,
}

/// One pack of the remote as the plan sees it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PackUsage {
    pub pack: String,
    pub bytes: u64,
    /// Sealed bytes of the reached objects the index places there.
    pub live_bytes: u64,
    /// What repacking it would free (its size less what its live objects need).
    pub unused_bytes: u64,
    /// `keep`, `repack` or `remove`.
    pub action: String,
}

/// What `gc --remote` does (`--dry-run`: would do) to a remote: the same value for both.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RemoteGcPlan {
    pub remote: String,
    /// Keys of the records no ref reaches (forgotten checkpoints' among them).
    pub records: Vec<String>,
    /// Checkpoints forgotten on the remote whose records this gc removes.
    pub forgotten: Vec<ObjectId>,
    /// Of those, forgotten in this store and published to the remote by this gc.
    pub forgets_published: u64,
    /// Keys of the packs that hold no reached object (removed whole).
    pub packs: Vec<String>,
    pub pack_bytes: u64,
    /// Packs rewritten: their live objects copied into new packs, then removed.
    pub repacked: Vec<RepackedPack>,
    pub repacked_pack_bytes: u64,
    /// Live bytes copied into new packs (trailers aside).
    pub repacked_live_bytes: u64,
    pub repacked_objects: u64,
    pub new_packs: u64,
    /// The limit: `5%`, a byte count, or `unlimited`.
    pub max_unused: String,
    /// The unused bytes it allows after gc (`None`: unlimited).
    pub max_unused_bytes: Option<u64>,
    /// --max-repack-size: at most these bytes of packs repacked (`None`: no bound).
    pub max_repack_bytes: Option<u64>,
    pub pack_bytes_before: u64,
    pub pack_bytes_after: u64,
    pub bytes_freed: u64,
    pub unused_bytes_before: u64,
    pub unused_bytes_after: u64,
    /// Unreached objects left in packs kept whole.
    pub kept_unreached: u64,
    /// Every pack on the remote before gc, by key, with its live and unused bytes and what
    /// gc does to it.
    pub pack_usage: Vec<PackUsage>,
    pub index_files_replaced: u64,
    pub reached_objects: u64,
    pub applied: bool,
}

/// Options of `gc --remote`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RemoteGcOptions {
    pub dry_run: bool,
    pub max_unused: MaxUnused,
    /// Also merge packs under half the pack target (restic's `--repack-small`).
    pub repack_small: bool,
    /// Repack at most this many bytes of packs (restic's `--max-repack-size`).
    pub max_repack_bytes: Option<u64>,
}

/// A pack that holds live objects.
struct Candidate {
    key: String,
    number: u32,
    size: u64,
    live: u64,
    objects: u64,
    /// Bytes repacking it would free: its size less what its live objects need.
    unused: u64,
}

/// A plan and what applying it needs.
pub struct Planned {
    pub report: RemoteGcPlan,
    idx: Index,
    reached: HashSet<ObjectId>,
    pending: Vec<Tombstone>,
    /// Numbers (in `idx`) of the packs that go whole or are repacked.
    gone_packs: HashSet<u32>,
    /// The new packs: each a list of objects with their old places.
    groups: Vec<Vec<(ObjectId, Loc)>>,
    old_indexes: Vec<String>,
}

/// Plans a remote gc (the remote lock must be held).
///
/// # Errors
/// Server errors; a finding in the reached history, or a reached object in a pack that is not
/// there (gc refuses to collect a remote that is missing something: run verify --remote).
pub fn plan(store: &Store, remote: &Remote, opts: &RemoteGcOptions) -> Result<Planned> {
    let idx = remote.sync_index(store)?;
    let on_remote = forgotten::list(remote)?;
    let records: Vec<String> = remote
        .backend
        .list("records/")?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let record_set: HashSet<String> = records.iter().cloned().collect();
    let heads = forgotten::ref_heads(remote)?;
    let pending = forgotten::pending(store, remote, &on_remote, &record_set, &heads)?;
    let all_forgotten: Forgotten = forgotten::with(on_remote, remote, &pending);
    let mut findings = Vec::new();
    let history = remote_history(remote, &all_forgotten, &mut findings)?;
    let reached = reached_objects(store, remote, &idx, &history, findings)?;
    // The forgotten checkpoints whose records this gc removes (older ones are long gone).
    let forgotten_now: Vec<ObjectId> = history
        .forgotten
        .iter()
        .filter(|id| record_set.contains(&remote.record_key(id)))
        .copied()
        .collect();
    let mut report = RemoteGcPlan {
        remote: remote.name.clone(),
        reached_objects: reached.len() as u64,
        forgotten: forgotten_now,
        forgets_published: pending.len() as u64,
        max_unused: opts.max_unused.to_string(),
        ..Default::default()
    };
    let keep_records: HashSet<String> = history
        .checkpoints
        .iter()
        .map(|(i, _)| remote.record_key(i))
        .collect();
    report.records = records
        .into_iter()
        .filter(|k| !keep_records.contains(k))
        .collect();
    report.records.sort();

    // Live bytes per pack: the reached objects the index places there.
    let mut live: HashMap<u32, (u64, u64)> = HashMap::new();
    for (id, loc) in &idx.objects {
        if reached.contains(id) {
            let e = live.entry(loc.pack).or_default();
            e.0 += u64::from(loc.len);
            e.1 += 1;
        }
    }
    let number: HashMap<String, u32> = (0..idx.packs.len() as u32)
        .map(|n| (idx.pack_key(n), n))
        .collect();
    let mut listed: Vec<(String, u64)> = remote.backend.list("packs/")?;
    listed.sort();
    let listed_numbers: HashSet<u32> = listed
        .iter()
        .filter_map(|(k, _)| number.get(k).copied())
        .collect();
    if let Some(n) = live.keys().find(|n| !listed_numbers.contains(n)) {
        return Err(Error::Corrupt(format!(
            "remote {}: {} holds reached objects and is not there (run verify --remote); \
             nothing collected",
            remote.name,
            idx.pack_key(*n)
        )));
    }
    // What a pack's live objects need in a pack of their own: their blobs and trailer.
    let need =
        |live_bytes: u64, objects: u64| live_bytes + pack::trailer_len(&remote.keys, objects);
    let mut gone_packs = HashSet::new();
    let (kept, total_needed) =
        classify_packs(&listed, &number, &live, need, &mut report, &mut gone_packs);
    report.unused_bytes_before = report.pack_bytes_before.saturating_sub(total_needed);
    let allowed = opts.max_unused.allowed(total_needed);
    report.max_unused_bytes = allowed;
    report.max_repack_bytes = opts.max_repack_bytes;
    let target = pack::pack_target() as u64;
    let mut repack = choose_repacks(&kept, allowed, opts, target, &mut report, &mut gone_packs);
    report.repacked.sort_by(|a, b| a.pack.cmp(&b.pack));
    report.pack_usage = pack_usage(&listed, &kept, &report.repacked);

    let groups = new_pack_groups(&idx, &mut repack, &reached, target);
    report.new_packs = groups.len() as u64;
    let new_trailers: u64 = groups
        .iter()
        .map(|g| pack::trailer_len(&remote.keys, g.len() as u64))
        .sum();
    report.pack_bytes_after =
        report.pack_bytes_before - report.pack_bytes - report.repacked_pack_bytes
            + report.repacked_live_bytes
            + new_trailers;
    report.bytes_freed = report
        .pack_bytes_before
        .saturating_sub(report.pack_bytes_after);

    for (id, loc) in &idx.objects {
        if !reached.contains(id) && !gone_packs.contains(&loc.pack) {
            report.kept_unreached += 1;
        }
    }
    let mut old_indexes: Vec<String> = remote
        .backend
        .list("index/")?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    old_indexes.sort();
    report.index_files_replaced = old_indexes.len() as u64;
    Ok(Planned {
        report,
        idx,
        reached,
        pending,
        gone_packs,
        groups,
        old_indexes,
    })
}

/// The packs to repack: with `--repack-small` the small ones, then the most unused first
/// until what is left unused is within `allowed`, never past `--max-repack-size`. Each is
/// recorded in `report` and `gone_packs`; returns their keys and numbers.
fn choose_repacks(
    kept: &[Candidate],
    allowed: Option<u64>,
    opts: &RemoteGcOptions,
    target: u64,
    report: &mut RemoteGcPlan,
    gone_packs: &mut HashSet<u32>,
) -> Vec<(String, u32)> {
    let unused_left = std::cell::Cell::new(kept.iter().map(|c| c.unused).sum::<u64>());
    let mut repack: Vec<(String, u32)> = Vec::new();
    let mut choose = |c: &Candidate, reason: &str, report: &mut RemoteGcPlan| -> bool {
        if opts
            .max_repack_bytes
            .is_some_and(|m| report.repacked_pack_bytes + c.size > m)
        {
            return false;
        }
        unused_left.set(unused_left.get() - c.unused);
        report.repacked.push(RepackedPack {
            pack: c.key.clone(),
            reason: reason.to_string(),
            bytes: c.size,
            live_bytes: c.live,
            live_objects: c.objects,
        });
        report.repacked_pack_bytes += c.size;
        report.repacked_live_bytes += c.live;
        report.repacked_objects += c.objects;
        gone_packs.insert(c.number);
        repack.push((c.key.clone(), c.number));
        true
    };
    let mut chosen: HashSet<u32> = HashSet::new();
    // With --repack-small: packs under half the target merged into full ones (two at least:
    // one alone would come out as small).
    let small: Vec<&Candidate> = kept.iter().filter(|c| c.size < target / 2).collect();
    if opts.repack_small && small.len() >= 2 {
        for c in small {
            if choose(c, "small", report) {
                chosen.insert(c.number);
            }
        }
    }
    // Then the most unused for their live bytes first (restic's order; ties by key), until
    // what is left unused is within the limit.
    let mut by_unused: Vec<&Candidate> = kept
        .iter()
        .filter(|c| c.unused > 0 && !chosen.contains(&c.number))
        .collect();
    by_unused.sort_by(|a, b| {
        (u128::from(b.unused) * u128::from(a.live))
            .cmp(&(u128::from(a.unused) * u128::from(b.live)))
            .then_with(|| a.key.cmp(&b.key))
    });
    for c in by_unused {
        match allowed {
            Some(a) if unused_left.get() > a => {}
            _ => break,
        }
        choose(c, "unused", report);
    }
    report.unused_bytes_after = unused_left.get();
    repack
}

/// Every object the remote's history reaches, checked to be indexed: a finding of the walk
/// (or of the history) refuses the gc, as does a reached object no index names.
fn reached_objects(
    store: &Store,
    remote: &Remote,
    idx: &Index,
    history: &History,
    mut findings: Vec<RemoteFinding>,
) -> Result<HashSet<ObjectId>> {
    let reached_map = walk_remote(
        store,
        remote,
        idx,
        &history.checkpoints,
        &mut findings,
        None,
    )?;
    if let Some(f) = findings.first() {
        return Err(Error::Corrupt(format!(
            "remote {}: {} {} (run verify --remote); nothing collected",
            remote.name, f.object, f.problem
        )));
    }
    let reached: HashSet<ObjectId> = reached_map.keys().copied().collect();
    if let Some(id) = reached.iter().find(|id| !idx.contains(id)) {
        return Err(Error::Corrupt(format!(
            "remote {}: object {id} is reached and no index names it (run verify --remote); \
             nothing collected",
            remote.name
        )));
    }
    Ok(reached)
}

/// Sorts the listed packs into those with nothing reached (to remove: into `report` and
/// `gone_packs`) and candidates for repacking. Returns the candidates and the bytes their
/// live objects need.
fn classify_packs(
    listed: &[(String, u64)],
    number: &HashMap<String, u32>,
    live: &HashMap<u32, (u64, u64)>,
    need: impl Fn(u64, u64) -> u64,
    report: &mut RemoteGcPlan,
    gone_packs: &mut HashSet<u32>,
) -> (Vec<Candidate>, u64) {
    let mut kept: Vec<Candidate> = Vec::new();
    let mut total_needed = 0u64;
    for (key, size) in listed {
        report.pack_bytes_before += size;
        match number.get(key).and_then(|n| live.get(n).map(|l| (*n, *l))) {
            None => {
                report.packs.push(key.clone());
                report.pack_bytes += size;
                if let Some(n) = number.get(key) {
                    gone_packs.insert(*n);
                }
            }
            Some((n, (lb, lo))) => {
                let needed = need(lb, lo);
                total_needed += needed;
                kept.push(Candidate {
                    key: key.clone(),
                    number: n,
                    size: *size,
                    live: lb,
                    objects: lo,
                    unused: size.saturating_sub(needed),
                });
            }
        }
    }
    (kept, total_needed)
}

/// Every pack with what gc does to it (`listed` is sorted by key): remove, repack or keep.
fn pack_usage(
    listed: &[(String, u64)],
    kept: &[Candidate],
    repacked: &[RepackedPack],
) -> Vec<PackUsage> {
    let repacked_keys: HashSet<&String> = repacked.iter().map(|r| &r.pack).collect();
    let by_key: HashMap<&String, &Candidate> = kept.iter().map(|c| (&c.key, c)).collect();
    listed
        .iter()
        .map(|(key, size)| {
            let (live_bytes, unused_bytes) =
                by_key.get(key).map_or((0, *size), |c| (c.live, c.unused));
            let action = match by_key.get(key) {
                None => "remove",
                Some(_) if repacked_keys.contains(key) => "repack",
                Some(_) => "keep",
            };
            PackUsage {
                pack: key.clone(),
                bytes: *size,
                live_bytes,
                unused_bytes,
                action: action.into(),
            }
        })
        .collect()
}

/// The new packs: live objects of each repacked pack in their old order, trees and data
/// apart, each closed once it reaches the pack target (as a push fills them).
fn new_pack_groups(
    idx: &Index,
    repack: &mut [(String, u32)],
    reached: &HashSet<ObjectId>,
    target: u64,
) -> Vec<Vec<(ObjectId, Loc)>> {
    repack.sort();
    let repack_numbers: HashSet<u32> = repack.iter().map(|r| r.1).collect();
    let mut moved: Vec<(ObjectId, Loc)> = idx
        .objects
        .iter()
        .filter(|(id, l)| repack_numbers.contains(&l.pack) && reached.contains(id))
        .map(|(id, l)| (*id, *l))
        .collect();
    let order: HashMap<u32, usize> = repack.iter().enumerate().map(|(i, r)| (r.1, i)).collect();
    moved.sort_by_key(|(id, l)| (order[&l.pack], l.offset, id.0));
    let mut groups = Vec::new();
    let mut open: [(Vec<(ObjectId, Loc)>, u64); 2] = [(Vec::new(), 0), (Vec::new(), 0)];
    for (id, l) in moved {
        let slot = &mut open[l.kind as usize];
        slot.0.push((id, l));
        slot.1 += u64::from(l.len);
        if slot.1 >= target {
            groups.push(std::mem::take(&mut slot.0));
            slot.1 = 0;
        }
    }
    for (g, _) in open {
        if !g.is_empty() {
            groups.push(g);
        }
    }
    groups
}

/// Downloads the sealed blobs `objs` (adjacent ones of a pack in one ranged GET) and checks
/// each opens as its object; returns them sealed, in order.
fn download_checked(
    remote: &Remote,
    idx: &Index,
    objs: &[(ObjectId, Loc)],
    progress: &Progress,
) -> Result<Vec<Vec<u8>>> {
    let mut reqs: Vec<(String, std::ops::Range<u64>)> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, (_, l)) in objs.iter().enumerate() {
        let key = idx.pack_key(l.pack);
        let r = u64::from(l.offset)..u64::from(l.offset) + u64::from(l.len);
        match reqs.last_mut() {
            Some((k, range)) if *k == key && range.end == r.start => {
                range.end = r.end;
                if let Some(m) = members.last_mut() {
                    m.push(i);
                }
            }
            _ => {
                reqs.push((key, r));
                members.push(vec![i]);
            }
        }
    }
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); objs.len()];
    for ((req, got), m) in reqs
        .iter()
        .zip(remote.backend.get_ranges(&reqs))
        .zip(members)
    {
        let bytes = got?;
        for i in m {
            let (id, l) = &objs[i];
            let a = (u64::from(l.offset) - req.1.start) as usize;
            let sealed = bytes[a..a + l.len as usize].to_vec();
            pack::open_blob(&remote.keys, id, l, &sealed).map_err(|e| {
                Error::Corrupt(format!(
                    "{e}; nothing collected (run verify --remote to see which paths use it)"
                ))
            })?;
            progress.add_items(1);
            progress.add_bytes(u64::from(l.len));
            out[i] = sealed;
        }
    }
    Ok(out)
}

/// Applies a plan (see the module doc for the order); returns its report, `applied`.
///
/// # Errors
/// Server errors (the remote stays complete; a rerun finishes); a live object that fails
/// its check (before anything is deleted).
pub fn apply(store: &Store, remote: &Remote, p: Planned) -> Result<RemoteGcPlan> {
    let Planned {
        mut report,
        idx,
        reached,
        pending,
        gone_packs,
        groups,
        old_indexes,
    } = p;
    // The test knob of push: a wait before each change to the remote, so a test can kill
    // the server or this process between any two.
    let pace = std::env::var(crate::remote::sync::PACE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(std::time::Duration::from_millis);
    let step = move || {
        if let Some(d) = pace {
            std::thread::sleep(d);
        }
    };
    if !pending.is_empty() {
        step();
        forgotten::publish(remote, &pending)?;
    }

    let progress = Progress::bytes("repack", "objects", Some(report.repacked_live_bytes));
    let mut new_loc: HashMap<ObjectId, pack::IndexEntry> = HashMap::new();
    // New packs are built (downloads) on this thread and uploaded from a second one, up to
    // PACKS_IN_FLIGHT at a time (one at a time when paced, for the tests), as push does.
    let batch_len = if pace.is_some() { 1 } else { PACKS_IN_FLIGHT };
    let (tx, rx) = std::sync::mpsc::sync_channel::<(String, Vec<u8>)>(PACKS_IN_FLIGHT);
    let moved: Result<()> = std::thread::scope(|scope| {
        let uploader = scope.spawn(move || -> Result<()> {
            let mut batch = Vec::new();
            for item in rx.iter() {
                batch.push(item);
                while batch.len() < batch_len {
                    match rx.try_recv() {
                        Ok(i) => batch.push(i),
                        Err(_) => break,
                    }
                }
                step();
                remote.backend.put_many(std::mem::take(&mut batch))?;
            }
            Ok(())
        });
        let mut build = || -> Result<()> {
            for g in &groups {
                let sealed = download_checked(remote, &idx, g, &progress)?;
                let mut w = PackWriter::default();
                for ((id, l), s) in g.iter().zip(&sealed) {
                    w.add_sealed(*id, l.kind, s, l.raw_len);
                }
                let (bytes, hash, list) = w.finish(&remote.keys)?;
                for (id, kind, off, len, raw) in list {
                    new_loc.insert(id, (id, hash, kind, off, len, raw));
                }
                tx.send((format!("packs/{}", crypto::hex(&hash)), bytes))
                    .map_err(|_| Error::Invalid("the upload stopped".into()))?;
            }
            Ok(())
        };
        let built = build();
        drop(tx);
        let uploaded = uploader
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("the upload thread panicked".into())));
        // The server's error names the cause; the builder's names the object.
        uploaded.and(built)
    });
    moved?;
    progress.finish();

    let mut entries: Vec<pack::IndexEntry> = Vec::new();
    for (id, loc) in &idx.objects {
        if let Some(e) = new_loc.get(id) {
            entries.push(*e);
        } else if !gone_packs.contains(&loc.pack)
            && (reached.contains(id) || loc.kind == Kind::Data)
        {
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
        step();
        remote.backend.put(&new_key, sealed)?;
    }
    for k in &old_indexes {
        if *k != new_key {
            step();
            remote.backend.delete(k)?;
        }
    }
    let repacked: Vec<&String> = report.repacked.iter().map(|r| &r.pack).collect();
    for k in report
        .packs
        .iter()
        .chain(repacked)
        .chain(report.records.iter())
    {
        step();
        remote.backend.delete(k)?;
    }
    remote.sync_index(store)?;
    report.applied = true;
    Ok(report)
}

/// Plans and, unless `dry_run`, applies a remote gc, under the remote lock (never while a
/// push from any machine is in flight).
///
/// # Errors
/// The remote locked (naming its holder); those of [`plan`] and [`apply`].
pub fn gc(store: &Store, remote: &Remote, opts: &RemoteGcOptions) -> Result<RemoteGcPlan> {
    let lock = lock::acquire(remote, "gc")?;
    let planned = plan(store, remote, opts)?;
    let report = if opts.dry_run {
        planned.report
    } else {
        apply(store, remote, planned)?
    };
    lock.release()?;
    Ok(report)
}
