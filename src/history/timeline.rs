//! History as `log` shows it: the checkpoints to list (all, newest first, or one branch's line
//! of parents), and their rendering as text lines, JSON rows, or a lane graph like
//! `git log --graph`. A front end prints what these return.

use std::collections::{HashMap, HashSet};

pub use super::graph::{Edges, GraphRow};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::refs::{NamedId, Tombstone};
use crate::store::Store;
use crate::text::time::format_local;
use crate::text::time::format_rfc3339;

/// The checkpoints `log` lists, in order.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub items: Vec<(ObjectId, Checkpoint)>,
    /// Set when a branch's line of parents ends at a record gc pruned: the id of the missing
    /// parent (records are immutable, so a kept checkpoint may still name it).
    pub pruned_before: Option<ObjectId>,
    /// Checkpoints `forget` took out of a branch's line, stepped over by their tombstones.
    pub gaps: Vec<Gap>,
    /// Records (or refs) that could not be read: listed here and left out, so one bad file
    /// does not hide the rest of the history. A branch's line stops at an unreadable record.
    pub problems: Vec<String>,
}

/// A forgotten checkpoint in a branch's line of parents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Index into [`History::items`] of the checkpoint after the gap (the older one).
    pub before_item: usize,
    pub tombstone: Tombstone,
}

impl Gap {
    /// The line `log` prints for the gap.
    pub fn line(&self) -> String {
        format!(
            "{} (forgotten {}; recorded {} on {})",
            self.tombstone.id.short(),
            format_local(self.tombstone.forgotten_ns),
            format_local(self.tombstone.time_ns),
            self.tombstone.branch
        )
    }
}

/// Every checkpoint newest first (ties by id), or with `branch` that branch's history from its
/// head along first parents. A forgotten checkpoint on the way is a [`Gap`] (its tombstone
/// names its parents); a record that does not read is a problem, reported and left out.
///
/// # Errors
/// `NotFound` for an unknown branch or a missing head; I/O listing the records; `Corrupt`
/// for an unreadable branch file or head record.
pub fn history(store: &Store, branch: Option<&str>) -> Result<History> {
    let mut out = History::default();
    match branch {
        Some(b) => {
            let br = store
                .read_branch(b)?
                .ok_or_else(|| Error::NotFound(format!("branch {b}")))?;
            let mut cur = br.head;
            let mut seen = HashSet::new();
            while let Some(id) = cur {
                if !seen.insert(id) {
                    out.problems
                        .push(format!("checkpoint {id}: its parents loop back to it"));
                    break;
                }
                let c = match store.read_checkpoint(&id) {
                    Ok(c) => c,
                    Err(e) if Some(id) == br.head => return Err(e),
                    Err(Error::NotFound(_)) => match store.read_tombstone(&id) {
                        Ok(Some(t)) => {
                            cur = t.parents.first().copied();
                            out.gaps.push(Gap {
                                before_item: out.items.len(),
                                tombstone: t,
                            });
                            continue;
                        }
                        Ok(None) => {
                            out.pruned_before = Some(id);
                            break;
                        }
                        Err(e) => {
                            out.problems.push(e.to_string());
                            break;
                        }
                    },
                    Err(e) => {
                        out.problems
                            .push(format!("{e} (older history of {b} not shown)"));
                        break;
                    }
                };
                cur = c.parents.first().copied();
                out.items.push((id, c));
            }
        }
        None => {
            for id in store.list_checkpoints()? {
                match store.read_checkpoint(&id) {
                    Ok(c) => out.items.push((id, c)),
                    // Gone between the listing and the read (gc, forget): not a problem.
                    Err(Error::NotFound(_)) => {}
                    Err(e) => out.problems.push(e.to_string()),
                }
            }
            out.items
                .sort_by(|a, b| b.1.time_ns.cmp(&a.1.time_ns).then(a.0.cmp(&b.0)));
        }
    }
    Ok(out)
}

/// The names `log --graph` shows beside a checkpoint: its labels, and `branch:B` for each
/// branch B whose head it is.
///
/// # Errors
/// I/O and `Corrupt` reading refs.
pub fn graph_names(store: &Store) -> Result<Vec<(String, ObjectId)>> {
    let mut names = store.list_labels()?;
    for (n, b) in store.list_branches()? {
        if let Some(h) = b.head {
            names.push((format!("branch:{n}"), h));
        }
    }
    Ok(names)
}

/// As [`graph_names`] and the labels `log` shows, reading what reads: the names, and one
/// message per label or branch file that does not (for `log` to report and go on).
///
/// # Errors
/// I/O listing `refs/`.
pub fn names_lenient(store: &Store, with_branches: bool) -> Result<(Vec<NamedId>, Vec<String>)> {
    let (mut names, bad) = store.list_labels_lenient()?;
    let mut problems: Vec<String> = bad.iter().map(Error::to_string).collect();
    if with_branches {
        match store.list_branches() {
            Ok(branches) => {
                for (n, b) in branches {
                    if let Some(h) = b.head {
                        names.push((format!("branch:{n}"), h));
                    }
                }
            }
            Err(e) => problems.push(format!("{e} (branch names not shown)")),
        }
    }
    Ok((names, problems))
}

/// The names of the labels (`(name, checkpoint)` pairs, as `Store::list_labels` gives them)
/// that name `id`, in their order: what every listing shows as a checkpoint's `labels`.
pub fn labels_of(labels: &[(String, ObjectId)], id: &ObjectId) -> Vec<String> {
    labels
        .iter()
        .filter(|(_, l)| l == id)
        .map(|(n, _)| n.clone())
        .collect()
}

/// A checkpoint's metadata as `log` shows it after the message: `{k=v k2=v2}`, each value cut
/// at [`MAX_META_SHOWN`] characters, on one line; empty when it has none.
pub fn meta_summary(c: &Checkpoint) -> String {
    let meta: Vec<String> = c
        .annotations
        .meta
        .iter()
        .map(|(k, v)| {
            let v = crate::store::checkpoint::meta_text(v);
            match v.char_indices().nth(MAX_META_SHOWN) {
                Some((i, _)) => format!("{k}={}...", &v[..i]),
                None => format!("{k}={v}"),
            }
        })
        .collect();
    if meta.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", meta.join(" ").replace('\n', " "))
    }
}

/// Characters of a meta value a `log` line shows (`show` prints it whole).
const MAX_META_SHOWN: usize = 40;

/// One `log --json` row.
pub fn log_row(id: &ObjectId, c: &Checkpoint, labels: &[(String, ObjectId)]) -> serde_json::Value {
    // `time` is RFC 3339 in UTC, as every time in JSON (it had no zone before; see
    // docs/json.md, "changes"); `time_rfc3339` is kept for scripts that read it.
    let mut row = serde_json::json!({"id": id, "branch": c.branch, "time": format_rfc3339(c.time_ns),
        "time_rfc3339": format_rfc3339(c.time_ns), "time_ns": c.time_ns, "parents": c.parents, "labels": labels_of(labels, id),
        "message": c.message, "stats": c.stats});
    // Present only when recorded, as in the record.
    if !c.annotations.meta.is_empty() {
        row["meta"] = serde_json::json!(c.annotations.meta);
    }
    if let Some(t) = &c.annotations.turn {
        row["turn"] = serde_json::json!(t);
    }
    if let Some(r) = &c.annotations.runtime {
        row["runtime"] = serde_json::json!(r);
    }
    row
}

/// `log --graph`: checkpoints in the order given (newest first) with one lane per line of
/// descent, drawn as `git log --graph` draws them (see [`super::graph`]): forks join their
/// parent's lane (`|/`), merges fan out to their parents (`|\\`). With [`Edges::Line`] (one
/// branch's line) a single lane. `names` are shown beside the checkpoints they name (see
/// [`graph_names`]).
pub fn graph_lines(
    items: &[(ObjectId, Checkpoint)],
    names: &[(String, ObjectId)],
    edges: Edges,
) -> Vec<String> {
    let heads: HashMap<ObjectId, Vec<&str>> =
        names.iter().fold(HashMap::new(), |mut m, (n, id)| {
            m.entry(*id).or_default().push(n.as_str());
            m
        });
    let mut out = Vec::new();
    for ((id, c), row) in items.iter().zip(graph_rows(items, edges)) {
        out.extend(row.joins.iter().map(|l| l.trim_end().to_string()));
        let ls = heads
            .get(id)
            .map_or(String::new(), |v| format!(" [{}]", v.join(", ")));
        out.push(format!(
            "{}{} {} ({}){} {}",
            row.lanes,
            id.short(),
            format_local(c.time_ns),
            c.branch,
            ls,
            c.message
        ));
        out.extend(row.below.iter().map(|l| l.trim_end().to_string()));
    }
    out
}

/// The lanes of [`graph_lines`], one [`GraphRow`] per item (for `log --graph --json`).
pub fn graph_rows(items: &[(ObjectId, Checkpoint)], edges: Edges) -> Vec<GraphRow> {
    super::graph::graph_rows(
        items.iter().map(|(id, c)| (*id, c.parents.as_slice())),
        edges,
    )
}
