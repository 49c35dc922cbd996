//! History as `log` shows it: the checkpoints to list (all, newest first, or one branch's line
//! of parents), and their rendering as text lines, JSON rows, or a lane graph like
//! `git log --graph`. A front end prints what these return.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::Store;
use crate::util::{format_rfc3339, format_utc, human_bytes};

/// The checkpoints `log` lists, in order.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub items: Vec<(ObjectId, Checkpoint)>,
    /// Set when a branch's line of parents ends at a record gc pruned: the id of the missing
    /// parent (records are immutable, so a kept checkpoint may still name it).
    pub pruned_before: Option<ObjectId>,
}

/// Every checkpoint newest first (ties by id), or with `branch` that branch's history from its
/// head along first parents.
///
/// # Errors
/// `NotFound` for an unknown branch or a missing head; I/O and `Corrupt` reading records.
pub fn history(store: &Store, branch: Option<&str>) -> Result<History> {
    let mut out = History::default();
    match branch {
        Some(b) => {
            let br = store
                .read_branch(b)?
                .ok_or_else(|| Error::NotFound(format!("branch {b}")))?;
            let mut cur = br.head;
            while let Some(id) = cur {
                let c = match store.read_checkpoint(&id) {
                    Err(Error::NotFound(_)) if Some(id) != br.head => {
                        out.pruned_before = Some(id);
                        break;
                    }
                    other => other?,
                };
                cur = c.parents.first().copied();
                out.items.push((id, c));
            }
        }
        None => {
            for id in store.list_checkpoints()? {
                out.items.push((id, store.read_checkpoint(&id)?));
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

/// The labels (`(name, checkpoint)` pairs) naming `id`, in their order.
fn labels_of<'a>(labels: &'a [(String, ObjectId)], id: &ObjectId) -> Vec<&'a str> {
    labels
        .iter()
        .filter(|(_, l)| l == id)
        .map(|(n, _)| n.as_str())
        .collect()
}

/// One `log` line: short id, time (UTC, RFC 3339 with `Z`), branch, labels, size and message.
pub fn log_line(id: &ObjectId, c: &Checkpoint, labels: &[(String, ObjectId)]) -> String {
    let ls = labels_of(labels, id);
    let ls = if ls.is_empty() {
        String::new()
    } else {
        format!(" [{}]", ls.join(", "))
    };
    format!(
        "{} {} {:<12}{} {} files {}  {}",
        id.short(),
        format_rfc3339(c.time_ns),
        c.branch,
        ls,
        c.stats.files,
        human_bytes(c.stats.bytes),
        c.message
    )
}

/// One `log --json` row.
pub fn log_row(id: &ObjectId, c: &Checkpoint, labels: &[(String, ObjectId)]) -> serde_json::Value {
    // `time` has no zone (it is UTC) and scripts parse it as it is: `time_rfc3339` says so.
    serde_json::json!({"id": id, "branch": c.branch, "time": format_utc(c.time_ns),
        "time_rfc3339": format_rfc3339(c.time_ns), "time_ns": c.time_ns, "parents": c.parents, "labels": labels_of(labels, id),
        "message": c.message, "stats": c.stats})
}

/// `log --graph`: checkpoints in the order given (newest first) with one lane per line of
/// descent, like `git log --graph`. Forks show as lanes joining their parent. `names` are
/// shown beside the checkpoints they name (see [`graph_names`]).
pub fn graph_lines(items: &[(ObjectId, Checkpoint)], names: &[(String, ObjectId)]) -> Vec<String> {
    let heads: HashMap<ObjectId, Vec<&str>> =
        names.iter().fold(HashMap::new(), |mut m, (n, id)| {
            m.entry(*id).or_default().push(n.as_str());
            m
        });
    let mut lanes: Vec<Option<ObjectId>> = Vec::new();
    let mut out = Vec::new();
    for (id, c) in items {
        let col = match lanes.iter().position(|l| *l == Some(*id)) {
            Some(i) => i,
            None => match lanes.iter().position(Option::is_none) {
                Some(i) => {
                    lanes[i] = Some(*id);
                    i
                }
                None => {
                    lanes.push(Some(*id));
                    lanes.len() - 1
                }
            },
        };
        let mut line = String::new();
        for (i, l) in lanes.iter().enumerate() {
            line.push_str(if i == col {
                "* "
            } else if l.is_some() {
                "| "
            } else {
                "  "
            });
        }
        let ls = heads
            .get(id)
            .map_or(String::new(), |v| format!(" [{}]", v.join(", ")));
        out.push(format!(
            "{}{} {} ({}){} {}",
            line,
            id.short(),
            format_rfc3339(c.time_ns),
            c.branch,
            ls,
            c.message
        ));
        // Other lanes waiting for this checkpoint are forks of it: join them here.
        let joined: Vec<usize> = lanes
            .iter()
            .enumerate()
            .filter(|(i, l)| *i != col && **l == Some(*id))
            .map(|(i, _)| i)
            .collect();
        let parent = c.parents.first().copied();
        lanes[col] = parent;
        if !joined.is_empty() {
            let mut j = String::new();
            for (i, l) in lanes.iter().enumerate() {
                j.push_str(if joined.contains(&i) {
                    "/ "
                } else if l.is_some() || i == col {
                    "| "
                } else {
                    "  "
                });
            }
            out.push(j.trim_end().to_string());
            for i in joined {
                lanes[i] = None;
            }
        }
        while lanes.last().is_some_and(Option::is_none) {
            lanes.pop();
        }
    }
    out
}
