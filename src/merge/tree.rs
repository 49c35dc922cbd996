//! The tree-level three-way merge: per path, a change on one side only takes that side, the
//! same change on both sides is taken once, directories changed on both sides are merged
//! entry by entry, and files whose content changed on both sides go to a driver
//! ([`super::content`]). Subtrees whose ids agree are never read, so the cost follows what
//! changed on either side, not the size of the tree.
//!
//! Renames (the diff's rename detection: same content, new path) are followed: a file one side
//! renamed and the other side modified ends up modified at its new path.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::content::{ContentMerger, Versions};
use super::{Conflict, Step, Take};
use crate::error::Result;
use crate::history::diff::{diff_sides_cached, DiffOptions, Side};
use crate::id::ObjectId;
use crate::store::object::ObjectBatch;
use crate::store::tree::{check_depth, names_in, Entry, EntryKind, Tree};
use crate::store::tree_cache::TreeCache;
use crate::store::Store;

pub use crate::ingest::upper::Totals;

type Triple = [Option<Entry>; 3];

/// The walk's state: what it found and what it must do at given paths.
pub struct TreeMerge<'a> {
    pub batch: &'a ObjectBatch<'a>,
    /// Every stored tree the merge reads (its diffs, its walk, its totals), decoded once.
    pub trees: Arc<TreeCache<'a>>,
    pub content: ContentMerger<'a>,
    pub take: Option<Take>,
    /// `ROOT/PATH`s `--take` applies to (every conflict when empty).
    pub take_paths: Vec<String>,
    /// Versions to merge at a path instead of what the trees hold (renames followed).
    overrides: HashMap<String, Triple>,
    /// Directories the walk must enter even when one side did not change them.
    descend: HashSet<String>,
    /// Renames theirs made (old path, new path): a step removing one and adding the other is
    /// reported as the rename.
    theirs_renames: Vec<(String, String)>,
    pub steps: Vec<Step>,
    pub conflicts: Vec<Conflict>,
    pub delta: Totals,
    /// For a workspace (`git merge` into a work tree): an open conflict leaves what helps
    /// resolve it, not ours: text with conflict markers, a database with every row that
    /// merged, a file deleted on one side and changed on the other.
    pub marked: bool,
}

fn path_of(prefix: &str, name: &[u8]) -> String {
    format!("{prefix}/{}", String::from_utf8_lossy(name))
}

pub(super) fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Equal but for times and inode number: a file touched, or copied back unchanged, is not a
/// change a merge weighs against the other side's.
fn same(a: Option<&Entry>, b: Option<&Entry>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            (
                &a.name, &a.kind, a.mode, a.uid, a.gid, a.size, &a.xattrs, a.nlink,
            ) == (
                &b.name, &b.kind, b.mode, b.uid, b.gid, b.size, &b.xattrs, b.nlink,
            )
        }
        (None, None) => true,
        _ => false,
    }
}

fn renamed(e: &Entry, name: &str) -> Entry {
    let mut e = e.clone();
    e.name = name.rsplit('/').next().unwrap_or(name).as_bytes().to_vec();
    e
}

impl<'a> TreeMerge<'a> {
    pub fn new(
        store: &'a Store,
        batch: &'a ObjectBatch<'a>,
        content: ContentMerger<'a>,
        take: Option<Take>,
        take_paths: Vec<String>,
    ) -> TreeMerge<'a> {
        TreeMerge {
            batch,
            trees: Arc::new(TreeCache::new(store)),
            content,
            take,
            take_paths,
            overrides: HashMap::new(),
            descend: HashSet::new(),
            theirs_renames: Vec::new(),
            steps: Vec::new(),
            conflicts: Vec::new(),
            delta: Totals::default(),
            marked: false,
        }
    }

    /// The side `--take` chooses at `path`, if it applies there.
    fn take_at(&self, path: &str) -> Option<Take> {
        let t = self.take?;
        (self.take_paths.is_empty() || self.take_paths.iter().any(|p| under(path, p))).then_some(t)
    }

    fn conflict(&mut self, path: &str, kind: &str, detail: String) -> Option<Take> {
        let resolved = self.take_at(path);
        self.conflicts.push(Conflict {
            path: path.to_string(),
            kind: kind.into(),
            detail,
            rows: Vec::new(),
            resolved,
            markers: false,
        });
        resolved
    }

    fn step(&mut self, path: &str, how: &str, driver: Option<&'static str>) {
        self.steps.push(Step {
            path: path.to_string(),
            how: how.into(),
            driver: driver.map(str::to_string),
            from: None,
        });
    }

    /// Finds renames on each side (base->ours, base->theirs) and arranges for the other
    /// side's change to follow them.
    pub fn follow_renames(&mut self, base: &Side, ours: &Side, theirs: &Side) -> Result<()> {
        let opts = DiffOptions {
            paths: Vec::new(),
            renames: true,
        };
        let of = |side: &Side| -> Result<Vec<(String, String, Entry, Entry)>> {
            Ok(diff_sides_cached(&self.trees, base, side, &opts)?
                .into_iter()
                .filter(|c| c.change == "renamed")
                .filter_map(|c| Some((c.from?, c.path, c.before?, c.after?)))
                .collect())
        };
        let (in_ours, in_theirs) = (of(ours)?, of(theirs)?);
        self.theirs_renames = in_theirs
            .iter()
            .map(|(f, t, _, _)| (f.clone(), t.clone()))
            .collect();
        let trees = Arc::clone(&self.trees);
        let lookup =
            |side: &Side, path: &str| -> Result<Option<Entry>> { entry_at(&trees, side, path) };
        let theirs_to: HashMap<&str, &str> = in_theirs
            .iter()
            .map(|(f, t, _, _)| (f.as_str(), t.as_str()))
            .collect();
        for (old, new, b, o_new) in &in_ours {
            if let Some(t_new) = theirs_to.get(old.as_str()) {
                if t_new != new {
                    self.both_renamed(old, new, t_new, b, theirs)?;
                }
                continue;
            }
            let t_old = lookup(theirs, old)?;
            if t_old.as_ref().is_some_and(|t| !same(Some(t), Some(b)))
                && lookup(theirs, new)?.is_none()
            {
                // Ours renamed, theirs modified: theirs' version goes to the new path.
                let t = t_old.map(|t| renamed(&t, new));
                self.set_override(old, [Some(b.clone()), None, Some(b.clone())]);
                self.set_override(new, [Some(o_new.clone()), Some(o_new.clone()), t]);
            }
        }
        let ours_to: HashSet<&str> = in_ours.iter().map(|(f, _, _, _)| f.as_str()).collect();
        for (old, new, b, t_new) in &in_theirs {
            if ours_to.contains(old.as_str()) {
                continue;
            }
            let o_old = lookup(ours, old)?;
            if o_old.as_ref().is_some_and(|o| !same(Some(o), Some(b)))
                && lookup(ours, new)?.is_none()
            {
                // Theirs renamed, ours modified: ours' version moves to the new path.
                let o = o_old.map(|o| renamed(&o, new));
                self.set_override(old, [Some(b.clone()), Some(b.clone()), None]);
                self.set_override(new, [Some(t_new.clone()), o, Some(t_new.clone())]);
            }
        }
        Ok(())
    }

    /// The same entry renamed to two names: a conflict at the old path; `--take` drops the
    /// other side's new name.
    fn both_renamed(
        &mut self,
        old: &str,
        ours_new: &str,
        theirs_new: &str,
        b: &Entry,
        theirs: &Side,
    ) -> Result<()> {
        let detail = format!("renamed to {ours_new} here and to {theirs_new} there");
        match self.conflict(old, "rename", detail) {
            Some(Take::Ours) => {
                let t = entry_at(&self.trees, theirs, theirs_new)?;
                self.set_override(theirs_new, [t.clone(), None, t]);
            }
            Some(Take::Theirs) => {
                let o = Some(renamed(b, ours_new));
                self.set_override(ours_new, [o.clone(), o, None]);
            }
            None => {}
        }
        Ok(())
    }

    fn set_override(&mut self, path: &str, t: Triple) {
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            self.descend.insert(parent.to_string());
            p = parent;
        }
        self.overrides.insert(path.to_string(), t);
    }

    /// The steps, with a removal and an addition that are one rename of theirs reported as
    /// that rename (`how: "renamed"`, `from` the old path).
    pub fn take_steps(&mut self) -> Vec<Step> {
        let mut steps = std::mem::take(&mut self.steps);
        for (old, new) in &self.theirs_renames {
            let Some(r) = steps
                .iter()
                .position(|s| s.how == "removed" && s.path == *old)
            else {
                continue;
            };
            if let Some(a) = steps
                .iter()
                .position(|s| s.path == *new && matches!(s.how.as_str(), "added" | "renamed"))
            {
                steps[a].how = "renamed".into();
                steps[a].from = Some(old.clone());
                steps.remove(r);
            } else if steps
                .iter()
                .any(|s| s.how == "added" && under(new, &s.path))
            {
                // Into a directory theirs added (one step): the rename is named beside it.
                steps[r] = Step {
                    path: new.clone(),
                    how: "renamed".into(),
                    driver: None,
                    from: Some(old.clone()),
                };
            }
        }
        steps
    }

    /// Merges one entry; `None` when the merged tree has nothing at `path`.
    pub fn entry(
        &mut self,
        path: &str,
        b: Option<&Entry>,
        o: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<Option<Entry>> {
        let actual_ours = o.cloned();
        let ov = self.overrides.remove(path);
        let (b, o, t) = match &ov {
            Some([b, o, t]) => (b.as_ref(), o.as_ref(), t.as_ref()),
            None => (b, o, t),
        };
        let forced = self.descend.contains(path);
        let both_dirs = matches!((o, t), (Some(x), Some(y)) if x.is_dir() && y.is_dir());
        let one_sided = o == t || same(b, o) || same(b, t);
        let dir_or_none = |e: Option<&Entry>| e.is_none_or(Entry::is_dir);
        // An override below a directory one side lacks: entered all the same.
        let partial = forced && !both_dirs && dir_or_none(o) && dir_or_none(t);
        if partial && (o.is_some() || t.is_some()) {
            let r = self.dirs(path, b, o, t)?;
            if actual_ours.is_none() {
                self.delta.dirs += 1;
                self.step(path, "added", None);
            }
            return Ok(r);
        }
        let result = if forced && both_dirs {
            self.dirs(path, b, o, t)?
        } else if o == t || (same(o, t) && o.is_some()) {
            o.cloned()
        } else if same(b, o) {
            t.cloned()
        } else if same(b, t) {
            o.cloned()
        } else if both_dirs {
            self.dirs(path, b, o, t)?
        } else {
            self.both_changed(path, b, o, t)?
        };
        if !(both_dirs && (forced || !one_sided)) {
            self.count(path, actual_ours.as_ref(), result.as_ref(), ov.is_some())?;
        }
        Ok(result)
    }

    /// Records a leaf's change to ours (a step) and its totals.
    fn count(
        &mut self,
        path: &str,
        before: Option<&Entry>,
        after: Option<&Entry>,
        renamed: bool,
    ) -> Result<()> {
        if before == after {
            return Ok(());
        }
        let how = match (before, after) {
            (None, Some(_)) if renamed => "renamed",
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            _ => "modified",
        };
        if self.steps.last().is_none_or(|s| s.path != path) {
            self.step(path, how, None);
        }
        self.delta.add(count_delta(&self.trees, before, after)?, 1);
        Ok(())
    }

    /// Both sides changed the entry, not both into directories.
    fn both_changed(
        &mut self,
        path: &str,
        b: Option<&Entry>,
        o: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<Option<Entry>> {
        let (Some(oe), Some(te)) = (o, t) else {
            let (here, there) = if o.is_none() {
                ("deleted here", "changed there")
            } else {
                ("changed here", "deleted there")
            };
            let take = self.conflict(path, "modify-delete", format!("{here}, {there}"));
            return Ok(match take {
                Some(Take::Theirs) => t,
                None if self.marked => o.or(t),
                _ => o,
            }
            .cloned());
        };
        let kind = |e: &Entry| e.kind_name();
        if kind(oe) != kind(te) {
            let detail = format!("a {} here, a {} there", kind(oe), kind(te));
            let take = self.conflict(path, "type", detail);
            return Ok(Some(
                if take == Some(Take::Theirs) { te } else { oe }.clone(),
            ));
        }
        match (&oe.kind, &te.kind) {
            (EntryKind::File { chunks: oc }, EntryKind::File { chunks: tc }) => {
                let bc = b.and_then(|e| match &e.kind {
                    EntryKind::File { chunks } => Some(chunks),
                    _ => None,
                });
                if oc == tc || bc == Some(tc) {
                    return Ok(Some(self.meta(path, b, oe, te, oe)));
                }
                if bc == Some(oc) {
                    return Ok(Some(self.meta(path, b, oe, te, te)));
                }
                self.file(path, b, oe, te, [None, None, None])
            }
            (EntryKind::Symlink { target: x }, EntryKind::Symlink { target: y }) if x != y => {
                let bt = b.map(|e| &e.kind);
                let from = if bt == Some(&oe.kind) {
                    te
                } else if bt == Some(&te.kind) {
                    oe
                } else {
                    let detail = format!(
                        "points to {} here, {} there",
                        String::from_utf8_lossy(x),
                        String::from_utf8_lossy(y)
                    );
                    let take = self.conflict(path, "symlink", detail);
                    if take == Some(Take::Theirs) {
                        te
                    } else {
                        oe
                    }
                };
                Ok(Some(self.meta(path, b, oe, te, from)))
            }
            _ => Ok(Some(self.meta(path, b, oe, te, oe))),
        }
    }

    /// Content changed on both sides: the driver decides. `wal` are the SQLite sidecars.
    pub fn file(
        &mut self,
        path: &str,
        b: Option<&Entry>,
        oe: &Entry,
        te: &Entry,
        wal: [Option<&Entry>; 3],
    ) -> Result<Option<Entry>> {
        let take = self.take_at(path);
        let m = self.content.merge(&Versions {
            path,
            base: b,
            ours: oe,
            theirs: te,
            wal,
            take,
        })?;
        let driver = m.driver.name();
        let linked = oe.nlink > 0 || te.nlink > 0;
        if let Some(why) = m.conflict.clone().or_else(|| {
            linked.then(|| "a file with several names (hardlinks) changed on both sides".into())
        }) {
            let kind = if b.is_none() { "add-add" } else { "content" };
            let resolved = self.conflict(path, kind, format!("{why} ({driver})"));
            if let Some(c) = self.conflicts.last_mut() {
                c.rows = m.rows;
            }
            let Some(take) = resolved else {
                let kept = match &m.content {
                    Some((chunks, size)) if self.marked && !linked => {
                        if let Some(c) = self.conflicts.last_mut() {
                            c.markers = m.driver == super::Driver::Text;
                        }
                        let mut e = self.meta(path, b, oe, te, oe);
                        e.kind = EntryKind::File {
                            chunks: chunks.clone(),
                        };
                        e.size = *size;
                        e
                    }
                    _ => oe.clone(),
                };
                return Ok(Some(kept));
            };
            if linked || m.content.is_none() {
                return Ok(Some(if take == Take::Theirs { te } else { oe }.clone()));
            }
        }
        let Some((chunks, size)) = m.content else {
            return Ok(Some(oe.clone()));
        };
        self.step(path, "merged", Some(driver));
        let mut e = self.meta(path, b, oe, te, oe);
        e.kind = EntryKind::File { chunks };
        e.size = size;
        e.mtime_ns = oe.mtime_ns.max(te.mtime_ns);
        Ok(Some(e))
    }

    /// `from`'s content with the metadata merged three ways: mode, owner and xattrs each take
    /// the side that changed them (a conflict when both did, differently); the newer mtime;
    /// ours' inode number and ctime.
    fn meta(&mut self, path: &str, b: Option<&Entry>, o: &Entry, t: &Entry, from: &Entry) -> Entry {
        let mut e = from.clone();
        let pick = |this: &mut Self, what: &str, bv: Option<String>, ov: String, tv: String| {
            if ov == tv || bv.as_ref() == Some(&tv) {
                return Take::Ours;
            }
            if bv.as_ref() == Some(&ov) {
                return Take::Theirs;
            }
            let detail = format!("{what} {ov} here, {tv} there");
            this.conflict(path, what, detail).unwrap_or(Take::Ours)
        };
        let mode = |e: &Entry| format!("{:o}", e.mode);
        let owner = |e: &Entry| format!("{}:{}", e.uid, e.gid);
        let xattrs = |e: &Entry| format!("{:?}", e.xattrs);
        if pick(self, "mode", b.map(mode), mode(o), mode(t)) == Take::Theirs {
            e.mode = t.mode;
        } else {
            e.mode = o.mode;
        }
        if pick(self, "owner", b.map(owner), owner(o), owner(t)) == Take::Theirs {
            (e.uid, e.gid) = (t.uid, t.gid);
        } else {
            (e.uid, e.gid) = (o.uid, o.gid);
        }
        if pick(self, "xattr", b.map(xattrs), xattrs(o), xattrs(t)) == Take::Theirs {
            e.xattrs.clone_from(&t.xattrs);
        } else {
            e.xattrs.clone_from(&o.xattrs);
        }
        e.mtime_ns = o.mtime_ns.max(t.mtime_ns);
        (e.ctime_ns, e.ino, e.nlink) = (o.ctime_ns, o.ino, o.nlink);
        e
    }

    /// Two directories (and the base's, if it was one): entry by entry.
    fn dirs(
        &mut self,
        path: &str,
        b: Option<&Entry>,
        o: Option<&Entry>,
        t: Option<&Entry>,
    ) -> Result<Option<Entry>> {
        let Some(either) = o.or(t) else {
            return Ok(None);
        };
        let tree_of = |e: Option<&Entry>| match e.map(|e| &e.kind) {
            Some(EntryKind::Dir { tree, .. }) => Some(*tree),
            _ => None,
        };
        let merged = self.tree(
            path,
            tree_of(b.filter(|e| e.is_dir())),
            tree_of(o),
            tree_of(t),
        )?;
        let subdirs = merged.entries.iter().filter(|e| e.is_dir()).count() as u32;
        let size = merged.entries.len() as u64;
        let id = self.batch.ensure_tree(&merged)?;
        let mut e = match (o, t) {
            (Some(oe), Some(te)) => self.meta(path, b, oe, te, oe),
            _ => either.clone(),
        };
        e.kind = EntryKind::Dir { tree: id, subdirs };
        e.size = size;
        Ok(Some(e))
    }

    /// Merges three directory trees by entry name.
    pub fn tree(
        &mut self,
        path: &str,
        b: Option<ObjectId>,
        o: Option<ObjectId>,
        t: Option<ObjectId>,
    ) -> Result<Tree> {
        // `path` is ROOT/PATH: its depth is the components below the root.
        check_depth(path.split('/').count() - 1, || path.to_string())?;
        let load = |id: Option<ObjectId>| match id {
            Some(id) => self.trees.read(&id),
            None => Ok(Arc::new(Tree::default())),
        };
        let (tb, to, tt) = (load(b)?, load(o)?, load(t)?);
        let names = names_in(&[&*tb, &*to, &*tt]);
        let dbs = super::wal::groups(self, path, [&*tb, &*to, &*tt])?;
        let mut out = Tree::default();
        for name in names {
            let p = path_of(path, name);
            let (eb, eo, et) = (tb.get(name), to.get(name), tt.get(name));
            let merged = match super::wal::role(&dbs, name) {
                super::wal::Role::Database(wal) => self.db(&p, eb, eo, et, wal)?,
                super::wal::Role::Sidecar => self.sidecar(&p, eo)?,
                super::wal::Role::None => self.entry(&p, eb, eo, et)?,
            };
            if let Some(e) = merged {
                out.entries.push(e);
            }
        }
        Ok(out)
    }

    /// Whether a file starts with SQLite's header.
    pub fn content_is_sqlite(&self, e: &Entry, _dir: &str) -> Result<bool> {
        self.content.is_sqlite(e)
    }

    /// A SQLite database whose file or `-wal` changed on both sides.
    fn db(
        &mut self,
        path: &str,
        b: Option<&Entry>,
        o: Option<&Entry>,
        t: Option<&Entry>,
        wal: [Option<&Entry>; 3],
    ) -> Result<Option<Entry>> {
        let (Some(oe), Some(te)) = (o, t) else {
            return self.entry(path, b, o, t);
        };
        let r = self.file(path, b, oe, te, wal)?;
        self.count(path, o, r.as_ref(), false)?;
        Ok(r)
    }

    /// A `-wal` or `-shm` of a database merged by rows: the merged file holds it all.
    fn sidecar(&mut self, path: &str, o: Option<&Entry>) -> Result<Option<Entry>> {
        self.count(path, o, None, false)?;
        Ok(None)
    }
}

/// The entry at `ROOT/PATH` of a side.
fn entry_at(trees: &TreeCache<'_>, side: &Side, path: &str) -> Result<Option<Entry>> {
    let mut parts = path.split('/');
    let Some(root) = parts.next() else {
        return Ok(None);
    };
    let Some(mut tree) = side.roots.get(root).copied() else {
        return Ok(None);
    };
    let mut names: Vec<&str> = parts.collect();
    let last = names.pop();
    for n in names {
        let t = trees.read(&tree)?;
        match t.get(n.as_bytes()).map(|e| &e.kind) {
            Some(EntryKind::Dir { tree: id, .. }) => tree = *id,
            _ => return Ok(None),
        }
    }
    let Some(last) = last else { return Ok(None) };
    Ok(trees.read(&tree)?.get(last.as_bytes()).cloned())
}

/// What replacing `before` with `after` changes in a root's totals; equal subtrees are not
/// read. Iterative: a stored tree can be deeper than any stack.
pub fn count_delta(
    trees: &TreeCache<'_>,
    before: Option<&Entry>,
    after: Option<&Entry>,
) -> Result<Totals> {
    let mut c = Count::default();
    c.pair(before, after);
    while let Some((a, b)) = c.pairs.pop() {
        let (ta, tb) = (trees.read(&a)?, trees.read(&b)?);
        // Both lists are sorted by name: one pass pairs them; equal entries change nothing.
        let (mut i, mut j) = (0, 0);
        while i < ta.entries.len() || j < tb.entries.len() {
            match (ta.entries.get(i), tb.entries.get(j)) {
                (Some(x), Some(y)) if x.name == y.name => {
                    if x != y {
                        c.pair(Some(x), Some(y));
                    }
                    (i, j) = (i + 1, j + 1);
                }
                (Some(x), y) if y.is_none_or(|y| x.name < y.name) => {
                    c.pair(Some(x), None);
                    i += 1;
                }
                (_, y) => {
                    c.pair(None, y);
                    j += 1;
                }
            }
        }
    }
    while let Some((id, sign)) = c.whole.pop() {
        for e in &trees.read(&id)?.entries {
            c.add(e, sign);
        }
    }
    Ok(c.d)
}

/// [`count_delta`]'s state: the totals so far, directory pairs still to compare, and whole
/// directories still to count (with the sign they count with).
#[derive(Default)]
struct Count {
    d: Totals,
    pairs: Vec<(ObjectId, ObjectId)>,
    whole: Vec<(ObjectId, i64)>,
}

impl Count {
    fn pair(&mut self, x: Option<&Entry>, y: Option<&Entry>) {
        match (x.map(|e| &e.kind), y.map(|e| &e.kind)) {
            (Some(EntryKind::Dir { tree: a, .. }), Some(EntryKind::Dir { tree: b, .. })) => {
                if a != b {
                    self.pairs.push((*a, *b));
                }
            }
            _ => {
                if let Some(x) = x {
                    self.add(x, -1);
                }
                if let Some(y) = y {
                    self.add(y, 1);
                }
            }
        }
    }

    fn add(&mut self, e: &Entry, sign: i64) {
        match &e.kind {
            EntryKind::File { .. } => {
                self.d.files += sign;
                self.d.bytes += sign * e.size as i64;
            }
            EntryKind::Symlink { .. } => self.d.symlinks += sign,
            EntryKind::Dir { tree, .. } => {
                self.d.dirs += sign;
                self.whole.push((*tree, sign));
            }
        }
    }
}
