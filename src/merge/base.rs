//! The merge base: the nearest common ancestor of two checkpoints in the checkpoint graph
//! (every parent counts, so fork points and earlier merges are found), as `git merge-base`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// The most records a base search reads before giving up (a history that long is not a room's).
const MAX_WALK: usize = 1_000_000;

/// What the base search found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Base {
    /// The chosen base, `None` when the two histories share nothing (recorded or pruned).
    pub id: Option<ObjectId>,
    /// Other best common ancestors (a criss-cross history): the newest is chosen.
    pub others: Vec<ObjectId>,
}

/// The parents of `id`: from its record, or from its tombstone when it was forgotten. `None`
/// when gc pruned it (the walk stops there).
fn parents(store: &Store, id: &ObjectId) -> Result<Option<(Vec<ObjectId>, i64)>> {
    match store.read_checkpoint(id) {
        Ok(c) => Ok(Some((c.parents, c.time_ns))),
        Err(Error::NotFound(_)) => Ok(store.read_tombstone(id)?.map(|t| (t.parents, t.time_ns))),
        Err(e) => Err(e),
    }
}

/// Every ancestor of `start` (itself included) with its time, breadth first.
fn ancestors(store: &Store, start: ObjectId) -> Result<HashMap<ObjectId, i64>> {
    let mut seen = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(id) = queue.pop_front() {
        if seen.contains_key(&id) {
            continue;
        }
        if seen.len() >= MAX_WALK {
            return Err(Error::Invalid(format!(
                "the history above {} has more than {MAX_WALK} checkpoints",
                start.short()
            )));
        }
        let Some((ps, time)) = parents(store, &id)? else {
            continue;
        };
        seen.insert(id, time);
        queue.extend(ps);
    }
    Ok(seen)
}

/// The nearest common ancestor of `ours` and `theirs`: a common ancestor no other common
/// ancestor descends from; of several (criss-cross merges), the newest, ties by id.
///
/// # Errors
/// A record that does not read.
pub fn merge_base(store: &Store, ours: ObjectId, theirs: ObjectId) -> Result<Base> {
    let mine = ancestors(store, ours)?;
    // From theirs, stop at the first common ancestor on each path: what is below it is older.
    let mut candidates = BTreeSet::new();
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([theirs]);
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id) {
            continue;
        }
        if mine.contains_key(&id) {
            candidates.insert(id);
            continue;
        }
        if seen.len() >= MAX_WALK {
            return Err(Error::Invalid(format!(
                "the history above {} has more than {MAX_WALK} checkpoints",
                theirs.short()
            )));
        }
        if let Some((ps, _)) = parents(store, &id)? {
            queue.extend(ps);
        }
    }
    // A candidate another candidate descends from is not nearest.
    let mut below = HashSet::new();
    for c in &candidates {
        if below.contains(c) {
            continue;
        }
        for (a, _) in ancestors(store, *c)? {
            if a != *c {
                below.insert(a);
            }
        }
    }
    let mut best: Vec<ObjectId> = candidates
        .into_iter()
        .filter(|c| !below.contains(c))
        .collect();
    best.sort_by(|a, b| {
        let (ta, tb) = (mine.get(a), mine.get(b));
        tb.cmp(&ta).then(a.cmp(b))
    });
    let mut it = best.into_iter();
    Ok(Base {
        id: it.next(),
        others: it.collect(),
    })
}
