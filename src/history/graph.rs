//! The lanes `log --graph` draws: git's `graph.c` (v2.47) state machine, without colours, so
//! a checkpoint history is drawn character for character as `git log --graph --date-order`
//! draws a git history of the same shape. Per checkpoint, in the order given (newest first):
//! the lines that widen the lanes around an octopus merge (three or more parents), the
//! checkpoint's own line (`*` in its column), then the lines below it: a merge's parents
//! fanning out (`|\`) and lanes converging on a lane further left (`|/`, `_` for a long way).
//!
//! A lane waits for one checkpoint: a parent not listed (pruned by gc, forgotten, or left out
//! by `-n`/`--since`) keeps its lane open to the bottom, as git keeps one for a commit outside
//! the range it shows.

use crate::id::ObjectId;

/// How one checkpoint is drawn.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GraphRow {
    /// Lines drawn just above it: the lanes moving aside for an octopus merge's parents.
    pub joins: Vec<String>,
    /// The start of its own line: `*` in its column and the other lanes, padded to the
    /// graph's width (the text follows).
    pub lanes: String,
    /// The checkpoint's column (0 = leftmost).
    pub column: usize,
    /// Lines drawn just below it: a merge's parents fanning out (`|\`), lanes converging on
    /// a lane to their left (`|/`).
    pub below: Vec<String>,
}

/// The phase of the drawing of one checkpoint (git's `enum graph_state`, without `SKIP`:
/// every checkpoint's lines are drawn to the end before the next one's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Padding,
    PreCommit,
    Commit,
    PostMerge,
    Collapsing,
}

/// A screen position of the mapping with no lane.
const EMPTY: isize = -1;

/// `merge_chars` of graph.c: a merge's parents are drawn from `merge_layout` on.
const MERGE_CHARS: [char; 3] = ['/', '|', '\\'];

/// git's `struct git_graph`. Indexes stay `isize` as in graph.c, where -1 means "none"; reads
/// out of range are [`EMPTY`] and writes out of range are dropped, so a crafted history can
/// draw oddly but not panic.
#[derive(Debug)]
struct Graph {
    commit: Option<ObjectId>,
    parents: Vec<ObjectId>,
    width: isize,
    expansion_row: isize,
    state: State,
    prev_state: State,
    commit_index: isize,
    prev_commit_index: isize,
    /// 0: the first parent is in a column left of the merge; 1: it is below the merge.
    merge_layout: isize,
    edges_added: isize,
    prev_edges_added: isize,
    columns: Vec<ObjectId>,
    new_columns: Vec<ObjectId>,
    /// For each screen position (two per column): the column its lane is heading for.
    mapping: Vec<isize>,
    mapping_size: isize,
    old_mapping: Vec<isize>,
}

fn get(v: &[isize], i: isize) -> isize {
    usize::try_from(i)
        .ok()
        .and_then(|i| v.get(i).copied())
        .unwrap_or(EMPTY)
}

fn set(v: &mut [isize], i: isize, x: isize) {
    if let Some(slot) = usize::try_from(i).ok().and_then(|i| v.get_mut(i)) {
        *slot = x;
    }
}

/// A graph line: characters, padded to the graph's width (git's `graph_pad_horizontally`).
fn padded(mut line: String, width: isize) -> String {
    let w = usize::try_from(width).unwrap_or(0);
    let n = line.chars().count();
    if n < w {
        line.extend(std::iter::repeat_n(' ', w - n));
    }
    line
}

impl Graph {
    fn new() -> Graph {
        Graph {
            commit: None,
            parents: Vec::new(),
            width: 0,
            expansion_row: 0,
            state: State::Padding,
            prev_state: State::Padding,
            commit_index: 0,
            prev_commit_index: 0,
            merge_layout: 0,
            edges_added: 0,
            prev_edges_added: 0,
            columns: Vec::new(),
            new_columns: Vec::new(),
            mapping: Vec::new(),
            mapping_size: 0,
            old_mapping: Vec::new(),
        }
    }

    fn num_parents(&self) -> isize {
        isize::try_from(self.parents.len()).unwrap_or(isize::MAX)
    }

    fn num_columns(&self) -> isize {
        isize::try_from(self.columns.len()).unwrap_or(isize::MAX)
    }

    fn set_state(&mut self, s: State) {
        self.prev_state = self.state;
        self.state = s;
    }

    /// The lines of `commit`, whose parents (first parent first, each once) are `parents`.
    fn row(&mut self, commit: ObjectId, parents: Vec<ObjectId>) -> GraphRow {
        self.update(commit, parents);
        let mut joins = Vec::new();
        while self.state == State::PreCommit {
            let l = self.pre_commit_line();
            joins.push(padded(l, self.width));
        }
        let lanes = padded(self.commit_line(), self.width);
        let mut below = Vec::new();
        // Each collapsing line moves every lane at least one position left: bounded.
        let mut budget = 2 * self.mapping.len() + 4;
        while self.state != State::Padding && budget > 0 {
            budget -= 1;
            let l = match self.state {
                State::PostMerge => self.post_merge_line(),
                _ => self.collapsing_line(),
            };
            below.push(padded(l, self.width));
        }
        GraphRow {
            joins,
            lanes,
            column: usize::try_from(self.commit_index).unwrap_or(0),
            below,
        }
    }

    /// `graph_update`.
    fn update(&mut self, commit: ObjectId, parents: Vec<ObjectId>) {
        self.commit = Some(commit);
        self.parents = parents;
        self.prev_commit_index = self.commit_index;
        self.update_columns();
        self.expansion_row = 0;
        // Not `set_state`: no line was drawn in this state.
        self.state = if self.needs_pre_commit_line() {
            State::PreCommit
        } else {
            State::Commit
        };
    }

    fn find_new_column(&self, c: &ObjectId) -> Option<usize> {
        self.new_columns.iter().position(|n| n == c)
    }

    /// `graph_insert_into_new_columns`.
    fn insert_into_new_columns(&mut self, c: ObjectId, idx: isize) {
        let i = match self.find_new_column(&c) {
            Some(i) => i,
            None => {
                self.new_columns.push(c);
                self.new_columns.len() - 1
            }
        };
        let i = isize::try_from(i).unwrap_or(isize::MAX);
        let mapping_idx;
        if self.num_parents() > 1 && idx > -1 && self.merge_layout == -1 {
            // The first parent of a merge: lay the merge out by whether that parent is in a
            // column left of the merge.
            let dist = idx - i;
            let shift = if dist > 1 { 2 * dist - 3 } else { 1 };
            self.merge_layout = if dist > 0 { 0 } else { 1 };
            self.edges_added = self.num_parents() + self.merge_layout - 2;
            mapping_idx = self.width + (self.merge_layout - 1) * shift;
            self.width += 2 * self.merge_layout;
        } else if self.edges_added > 0 && i == get(&self.mapping, self.width - 2) {
            // A merge added columns but this parent is in the last one: the edges join at
            // once (`|\|` rather than `|\ \`).
            mapping_idx = self.width - 2;
            self.edges_added = -1;
        } else {
            mapping_idx = self.width;
            self.width += 2;
        }
        set(&mut self.mapping, mapping_idx, i);
    }

    /// `graph_update_columns`.
    fn update_columns(&mut self) {
        std::mem::swap(&mut self.columns, &mut self.new_columns);
        self.new_columns.clear();
        let max_new_columns = self.columns.len() + self.parents.len();
        let size = 2 * max_new_columns;
        if self.mapping.len() < size {
            self.mapping.resize(size, EMPTY);
            self.old_mapping.resize(size, EMPTY);
        }
        self.mapping[..size].fill(EMPTY);
        self.mapping_size = isize::try_from(size).unwrap_or(isize::MAX);
        self.width = 0;
        self.prev_edges_added = self.edges_added;
        self.edges_added = 0;
        let Some(commit) = self.commit else { return };
        let mut seen_this = false;
        for i in 0..=self.columns.len() {
            let col_commit = if i == self.columns.len() {
                if seen_this {
                    break;
                }
                commit
            } else {
                self.columns[i]
            };
            if col_commit == commit {
                seen_this = true;
                self.commit_index = isize::try_from(i).unwrap_or(isize::MAX);
                self.merge_layout = -1;
                for p in self.parents.clone() {
                    self.insert_into_new_columns(p, self.commit_index);
                }
                // The checkpoint takes up two positions even with no parent.
                if self.parents.is_empty() {
                    self.width += 2;
                }
            } else {
                self.insert_into_new_columns(col_commit, -1);
            }
        }
        while self.mapping_size > 1 && get(&self.mapping, self.mapping_size - 1) < 0 {
            self.mapping_size -= 1;
        }
    }

    fn num_dashed_parents(&self) -> isize {
        self.num_parents() + self.merge_layout - 3
    }

    fn needs_pre_commit_line(&self) -> bool {
        self.num_parents() >= 3
            && self.commit_index < self.num_columns() - 1
            && self.expansion_row < self.num_dashed_parents() * 2
    }

    /// Every lane at its column, or one position right of it (drawn `/`, so right on the
    /// next line).
    fn is_mapping_correct(&self) -> bool {
        (0..self.mapping_size).all(|i| {
            let target = get(&self.mapping, i);
            target < 0 || target == i / 2
        })
    }

    fn pre_commit_line(&mut self) -> String {
        let mut line = String::new();
        let mut seen_this = false;
        for (i, c) in (0..).zip(&self.columns) {
            if Some(*c) == self.commit {
                seen_this = true;
                line.push('|');
                for _ in 0..self.expansion_row {
                    line.push(' ');
                }
            } else if seen_this && self.expansion_row == 0 {
                let after_merge = self.prev_state == State::PostMerge && self.prev_commit_index < i;
                line.push(if after_merge { '\\' } else { '|' });
            } else if seen_this && self.expansion_row > 0 {
                line.push('\\');
            } else {
                line.push('|');
            }
            line.push(' ');
        }
        self.expansion_row += 1;
        if !self.needs_pre_commit_line() {
            self.set_state(State::Commit);
        }
        line
    }

    fn commit_line(&mut self) -> String {
        let mut line = String::new();
        let mut seen_this = false;
        for i in 0..=self.num_columns() {
            let col_commit = if i == self.num_columns() {
                if seen_this {
                    break;
                }
                self.commit
            } else {
                self.columns.get(i as usize).copied()
            };
            if col_commit == self.commit {
                seen_this = true;
                line.push('*');
                if self.num_parents() > 2 {
                    // An octopus merge: a dash per parent beyond the drawn ones.
                    let dashed = self.num_dashed_parents();
                    for k in 0..dashed {
                        line.push('-');
                        line.push(if k == dashed - 1 { '.' } else { '-' });
                    }
                }
            } else if seen_this && self.edges_added > 1 {
                line.push('\\');
            } else if seen_this && self.edges_added == 1 {
                // A lane that came in as `\` below the previous merge stays `\`.
                let after_merge = self.prev_state == State::PostMerge
                    && self.prev_edges_added > 0
                    && self.prev_commit_index < i;
                line.push(if after_merge { '\\' } else { '|' });
            } else if self.prev_state == State::Collapsing
                && get(&self.old_mapping, 2 * i + 1) == i
                && get(&self.mapping, 2 * i) < i
            {
                line.push('/');
            } else {
                line.push('|');
            }
            line.push(' ');
        }
        if self.num_parents() > 1 {
            self.set_state(State::PostMerge);
        } else if self.is_mapping_correct() {
            self.set_state(State::Padding);
        } else {
            self.set_state(State::Collapsing);
        }
        line
    }

    fn post_merge_line(&mut self) -> String {
        let mut line = String::new();
        let first_parent = self.parents.first().copied();
        let mut parent_seen = false;
        let mut seen_this = false;
        for i in 0..=self.num_columns() {
            let col_commit = if i == self.num_columns() {
                if seen_this {
                    break;
                }
                self.commit
            } else {
                self.columns.get(i as usize).copied()
            };
            if col_commit == self.commit {
                seen_this = true;
                let mut idx = self.merge_layout;
                for j in 0..self.num_parents() {
                    let c = usize::try_from(idx)
                        .ok()
                        .and_then(|k| MERGE_CHARS.get(k))
                        .copied()
                        .unwrap_or('|');
                    line.push(c);
                    if idx == 2 {
                        if self.edges_added > 0 || j < self.num_parents() - 1 {
                            line.push(' ');
                        }
                    } else {
                        idx += 1;
                    }
                }
                if self.edges_added == 0 {
                    line.push(' ');
                }
            } else if seen_this {
                line.push(if self.edges_added > 0 { '\\' } else { '|' });
                line.push(' ');
            } else {
                line.push('|');
                if self.merge_layout != 0 || i != self.commit_index - 1 {
                    line.push(if parent_seen { '_' } else { ' ' });
                }
            }
            if col_commit.is_some() && col_commit == first_parent {
                parent_seen = true;
            }
        }
        if self.is_mapping_correct() {
            self.set_state(State::Padding);
        } else {
            self.set_state(State::Collapsing);
        }
        line
    }

    fn collapsing_line(&mut self) -> String {
        let mut used_horizontal = false;
        let mut horizontal_edge: isize = -1;
        let mut horizontal_edge_target: isize = -1;
        std::mem::swap(&mut self.mapping, &mut self.old_mapping);
        for i in 0..self.mapping_size {
            set(&mut self.mapping, i, EMPTY);
        }
        for i in 0..self.mapping_size {
            let target = get(&self.old_mapping, i);
            if target < 0 {
                continue;
            }
            // Lanes only ever move left: update_columns places the leftmost first.
            if target * 2 == i {
                set(&mut self.mapping, i, target);
            } else if get(&self.mapping, i - 1) < 0 {
                // Nothing to the left: one position left.
                set(&mut self.mapping, i - 1, target);
                if horizontal_edge == -1 {
                    horizontal_edge = i;
                    horizontal_edge_target = target;
                    let mut j = target * 2 + 3;
                    while j < i - 2 {
                        set(&mut self.mapping, j, target);
                        j += 2;
                    }
                }
            } else if get(&self.mapping, i - 1) == target {
                // The lane to the left goes to the same parent: they merge.
            } else {
                // Another lane to the left, going elsewhere: cross it.
                set(&mut self.mapping, i - 2, target);
                if horizontal_edge == -1 {
                    horizontal_edge_target = target;
                    horizontal_edge = i - 1;
                    let mut j = target * 2 + 3;
                    while j < i - 2 {
                        set(&mut self.mapping, j, target);
                        j += 2;
                    }
                }
            }
        }
        let size = usize::try_from(self.mapping_size).unwrap_or(0);
        self.old_mapping[..size].copy_from_slice(&self.mapping[..size]);
        if get(&self.mapping, self.mapping_size - 1) < 0 {
            self.mapping_size -= 1;
        }
        let mut line = String::new();
        for i in 0..self.mapping_size {
            let target = get(&self.mapping, i);
            if target < 0 {
                line.push(' ');
            } else if target * 2 == i {
                line.push('|');
            } else if target == horizontal_edge_target && i != horizontal_edge - 1 {
                // Only the first segment of a horizontal edge goes on to the next line.
                if i != target * 2 + 3 {
                    set(&mut self.mapping, i, EMPTY);
                }
                used_horizontal = true;
                line.push('_');
            } else {
                if used_horizontal && i < horizontal_edge {
                    set(&mut self.mapping, i, EMPTY);
                }
                line.push('/');
            }
        }
        if self.is_mapping_correct() {
            self.set_state(State::Padding);
        }
        line
    }
}

/// Where a checkpoint's lane leads: what `graph_rows` treats as its parents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edges {
    /// The parents its record names (every checkpoint of the store: merges fan out).
    Recorded,
    /// The next checkpoint listed (one branch's line of first parents, forgotten ones
    /// stepped over): a single lane.
    Line,
}

/// The rows of `log --graph` for `items` (id and parents, newest first), one per item.
pub fn graph_rows<'a>(
    items: impl IntoIterator<Item = (ObjectId, &'a [ObjectId])>,
    edges: Edges,
) -> Vec<GraphRow> {
    let items: Vec<(ObjectId, &[ObjectId])> = items.into_iter().collect();
    let mut g = Graph::new();
    let mut out = Vec::with_capacity(items.len());
    for (k, (id, parents)) in items.iter().enumerate() {
        let parents = match edges {
            Edges::Recorded => {
                let mut ps: Vec<ObjectId> = Vec::with_capacity(parents.len());
                for p in *parents {
                    // A parent named twice, or the checkpoint itself, is one edge or none.
                    if p != id && !ps.contains(p) {
                        ps.push(*p);
                    }
                }
                ps
            }
            Edges::Line => items.get(k + 1).map(|(n, _)| *n).into_iter().collect(),
        };
        out.push(g.row(*id, parents));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::of(&[n])
    }

    /// The lines drawn for `items` (`(n, parents)`), `*` lines ending in `n`, right-trimmed.
    fn draw(items: &[(u8, &[u8])]) -> Vec<String> {
        let parents: Vec<Vec<ObjectId>> = items
            .iter()
            .map(|(_, ps)| ps.iter().map(|p| id(*p)).collect())
            .collect();
        let rows = graph_rows(
            items
                .iter()
                .zip(&parents)
                .map(|((n, _), ps)| (id(*n), ps.as_slice())),
            Edges::Recorded,
        );
        let mut out = Vec::new();
        for ((n, _), r) in items.iter().zip(rows) {
            out.extend(r.joins.iter().map(|l| l.trim_end().to_string()));
            out.push(format!("{}{n}", r.lanes));
            out.extend(r.below.iter().map(|l| l.trim_end().to_string()));
        }
        out
    }

    #[test]
    fn a_fork_joins_as_git_draws_it() {
        // 3 and 2 are both children of 1.
        assert_eq!(
            draw(&[(3, &[1]), (2, &[1]), (1, &[])]),
            ["* 3", "| * 2", "|/", "* 1"]
        );
    }

    #[test]
    fn a_merge_fans_out_and_its_second_parent_takes_the_next_lane() {
        // 4 merges 2 (first parent) and 3; both forked from 1.
        assert_eq!(
            draw(&[(4, &[2, 3]), (3, &[1]), (2, &[1]), (1, &[])]),
            ["*   4", "|\\", "| * 3", "* | 2", "|/", "* 1"]
        );
    }

    #[test]
    fn an_octopus_merge_is_drawn_with_dashes() {
        assert_eq!(
            draw(&[(5, &[2, 3, 4]), (4, &[1]), (3, &[1]), (2, &[1]), (1, &[])]),
            ["*-.   5", "|\\ \\", "| | * 4", "| * | 3", "| |/", "* / 2", "|/", "* 1"]
        );
    }

    #[test]
    fn a_line_is_one_lane() {
        let rows = graph_rows([(id(2), &[][..]), (id(1), &[][..])], Edges::Line);
        assert_eq!(rows[0].lanes, "* ");
        assert!(rows.iter().all(|r| r.below.is_empty() && r.column == 0));
    }
}
