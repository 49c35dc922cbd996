//! Where branches come from and where they went, for `branch list --tree`: each branch under
//! the branch it was forked from, and the merges that brought its work into another branch.
//!
//! A branch's *line* is its head and the first parents below it (forgotten checkpoints
//! stepped over through their tombstones), as `log --branch` walks it. A fork point or a
//! merged parent lies on many lines (every branch forked later holds the older history
//! too), so the branch it belongs to is the one its record says it was taken on, when that
//! branch still holds it; otherwise the oldest branch whose line holds it.

use std::collections::{HashMap, HashSet};

use crate::error::Error;
use crate::id::ObjectId;
use crate::store::refs::Branch;
use crate::store::Store;

/// One merge that brought a branch's work into another: a checkpoint of `branch`'s line
/// with a second (or later) parent on this branch's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedInto {
    pub branch: String,
    /// The merge checkpoint.
    pub checkpoint: ObjectId,
    pub time_ns: i64,
}

/// One branch's place in the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchLineage {
    pub name: String,
    /// The branch it was forked from: the one holding its fork point (`None`: not forked,
    /// or no other branch holds that checkpoint any more).
    pub parent: Option<String>,
    pub forked_from: Option<ObjectId>,
    /// Merges into other branches, oldest first.
    pub merged_into: Vec<MergedInto>,
}

/// Every branch's lineage, in the order given; see [`Lineage::tree`].
#[derive(Clone, Debug, Default)]
pub struct Lineage {
    pub branches: Vec<BranchLineage>,
    /// Records that could not be read (a branch's line stops there): for the caller to warn.
    pub problems: Vec<String>,
}

/// What is known of one checkpoint on some line.
#[derive(Clone, Debug)]
struct Node {
    parents: Vec<ObjectId>,
    branch: String,
    time_ns: i64,
}

/// Records read once, however many lines they are on.
#[derive(Default)]
struct Records {
    nodes: HashMap<ObjectId, Option<Node>>,
    problems: Vec<String>,
}

impl Records {
    /// The record of `id` (a tombstone stands in for a forgotten one); `None` when gc
    /// pruned it or it does not read.
    fn node(&mut self, store: &Store, id: ObjectId) -> Option<Node> {
        if let Some(n) = self.nodes.get(&id) {
            return n.clone();
        }
        let n = match store.read_checkpoint(&id) {
            Ok(c) => Some(Node {
                parents: c.parents,
                branch: c.branch,
                time_ns: c.time_ns,
            }),
            Err(Error::NotFound(_)) => match store.read_tombstone(&id) {
                Ok(Some(t)) => Some(Node {
                    parents: t.parents,
                    branch: t.branch,
                    time_ns: t.time_ns,
                }),
                Ok(None) => None,
                Err(e) => {
                    self.problems.push(e.to_string());
                    None
                }
            },
            Err(e) => {
                self.problems.push(e.to_string());
                None
            }
        };
        self.nodes.insert(id, n.clone());
        n
    }

    /// The line from `head` along first parents, newest first.
    fn line(&mut self, store: &Store, head: Option<ObjectId>) -> Vec<ObjectId> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = head;
        while let Some(id) = cur {
            if !seen.insert(id) {
                break;
            }
            let Some(n) = self.node(store, id) else { break };
            out.push(id);
            cur = n.parents.first().copied();
        }
        out
    }
}

/// The lineage of `branches` (as `Store::list_branches` gives them). A record that does not
/// read ends the line it is on and is named in [`Lineage::problems`].
pub fn lineage(store: &Store, branches: &[(String, Branch)]) -> Lineage {
    let mut records = Records::default();
    let lines: Vec<Vec<ObjectId>> = branches
        .iter()
        .map(|(_, b)| records.line(store, b.head))
        .collect();
    let on_line: Vec<HashSet<ObjectId>> =
        lines.iter().map(|l| l.iter().copied().collect()).collect();
    // Branch indexes by age, for the fallback owner of a checkpoint.
    let mut by_age: Vec<usize> = (0..branches.len()).collect();
    by_age.sort_by(|&a, &b| {
        (branches[a].1.created_ns, &branches[a].0).cmp(&(branches[b].1.created_ns, &branches[b].0))
    });
    let index: HashMap<&str, usize> = branches
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    // The branch `id` belongs to, other than `not`. Every checkpoint on a line was read
    // walking it; one that was not is on no line.
    let nodes = &records.nodes;
    let owner = |id: ObjectId, not: usize| -> Option<usize> {
        let recorded = nodes
            .get(&id)
            .and_then(Option::as_ref)
            .and_then(|n| index.get(n.branch.as_str()).copied());
        if let Some(i) = recorded.filter(|&i| i != not && on_line[i].contains(&id)) {
            return Some(i);
        }
        by_age
            .iter()
            .copied()
            .find(|&i| i != not && on_line[i].contains(&id))
    };
    let mut parents: Vec<Option<usize>> = branches
        .iter()
        .enumerate()
        .map(|(i, (_, b))| b.forked_from.and_then(|f| owner(f, i)))
        .collect();
    break_cycles(&mut parents);
    let mut merged_into: Vec<Vec<MergedInto>> = vec![Vec::new(); branches.len()];
    for (x, line) in lines.iter().enumerate() {
        for m in line.iter().rev() {
            let Some(node) = nodes.get(m).and_then(Option::as_ref) else {
                continue;
            };
            for p in node.parents.iter().skip(1) {
                if let Some(s) = owner(*p, x) {
                    let entry = MergedInto {
                        branch: branches[x].0.clone(),
                        checkpoint: *m,
                        time_ns: node.time_ns,
                    };
                    if !merged_into[s].contains(&entry) {
                        merged_into[s].push(entry);
                    }
                }
            }
        }
    }
    for m in &mut merged_into {
        m.sort_by(|a, b| (a.time_ns, &a.branch).cmp(&(b.time_ns, &b.branch)));
    }
    let out = branches
        .iter()
        .zip(parents)
        .zip(merged_into)
        .map(|(((name, b), parent), merged_into)| BranchLineage {
            name: name.clone(),
            parent: parent.map(|p| branches[p].0.clone()),
            forked_from: b.forked_from,
            merged_into,
        })
        .collect();
    Lineage {
        branches: out,
        problems: records.problems,
    }
}

/// A branch whose chain of parents comes back to it (only crafted or odd refs do that) is
/// made a root, so the tree is a tree.
fn break_cycles(parents: &mut [Option<usize>]) {
    for start in 0..parents.len() {
        let mut seen = HashSet::from([start]);
        let mut cur = parents[start];
        while let Some(p) = cur {
            if !seen.insert(p) {
                parents[start] = None;
                break;
            }
            cur = parents[p];
        }
    }
}

impl Lineage {
    /// The branches `shown` keeps, depth first: each root (a branch with no parent, or whose
    /// parent is not shown) in the order given, each branch's children after it, oldest
    /// first (`created`: a branch's creation time, by name). Pairs of index into
    /// [`Lineage::branches`] and depth (0 for a root).
    pub fn tree(
        &self,
        shown: impl Fn(&str) -> bool,
        created: impl Fn(&str) -> i64,
    ) -> Vec<(usize, usize)> {
        let index: HashMap<&str, usize> = self
            .branches
            .iter()
            .enumerate()
            .map(|(i, b)| (b.name.as_str(), i))
            .collect();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.branches.len()];
        let mut roots = Vec::new();
        for (i, b) in self.branches.iter().enumerate() {
            if !shown(&b.name) {
                continue;
            }
            let parent = b
                .parent
                .as_deref()
                .filter(|p| shown(p))
                .and_then(|p| index.get(p).copied());
            match parent {
                Some(p) => children[p].push(i),
                None => roots.push(i),
            }
        }
        for c in &mut children {
            c.sort_by(|&a, &b| {
                let (na, nb) = (&self.branches[a].name, &self.branches[b].name);
                (created(na), na).cmp(&(created(nb), nb))
            });
        }
        let mut out = Vec::new();
        let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((i, depth)) = stack.pop() {
            out.push((i, depth));
            stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
        }
        out
    }
}
