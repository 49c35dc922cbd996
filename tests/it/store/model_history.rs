//! Model-based test of the history operations (as redb's fuzzer checks its database against a
//! `BTreeMap`): seeded random sequences of capture (after random edits of a source tree),
//! label, fork, workspace checkpoint (after random edits inside the mounted workspace), switch,
//! gc with a retention policy, and archive + unarchive into a fresh store, run through the real
//! binary and checked against a small in-memory model of what each checkpoint holds (path ->
//! kind, bytes, mode), of the branch heads, the labels, and the workspace.
//!
//! After every step: the store lists exactly the checkpoints the model has, each with the
//! model's parent, branch and labels; every one of them restores to exactly its model tree;
//! branch heads are the model's; a mounted workspace shows the model's tree and base. gc
//! never removes a branch head, a labelled checkpoint, a workspace base or one its policy
//! keeps, and removes every other one unless a live pin (the workspaces' lower view) holds it.
//!
//! Each run draws a fresh base seed and prints it; a failing case names its own seed, which
//! replays it alone: `CKPTFS_MODEL_SEED=0x... cargo test --test it store::model_history`
//! (the same operations, as long as gc prunes the same checkpoints: what a live pin holds
//! depends on the kernel's caches). The failure's message comes last, after the operations,
//! so that the tail of a long log shows it.
//! `CKPTFS_MODEL_CASES=N` changes the number of cases; `CKPTFS_MODEL_VERBOSE=1` prints every
//! case's operations.
//!
//! Plain `capture` is only ever recorded on branches that no workspace has mounted: a capture
//! onto a branch with an upper layer moves the head away from the base that layer applies to,
//! which is outside what this model describes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::support::*;

/// Cases per run, and the range of operations per case.
const CASES: usize = 24;
const OPS: std::ops::RangeInclusive<usize> = 10..=15;

// ---- seeded randomness ------------------------------------------------------------------

/// splitmix64: tiny, and every seed gives a good stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    /// Mostly a few bytes of text; sometimes a file of several chunks.
    fn data(&mut self) -> Vec<u8> {
        if self.chance(1, 12) {
            let len = 70_000 + self.below(150_000);
            random_bytes(self.next(), len)
        } else {
            let len = self.below(40);
            (0..len).map(|_| b'a' + self.below(26) as u8).collect()
        }
    }
}

// ---- trees ------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir,
    Symlink(String),
}

/// One entry of a tree: what it is and its permission bits (0o777 for symlinks).
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    node: Node,
    mode: u32,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.node {
            Node::File(d) if d.len() > 48 => {
                let h = ckptfs::ObjectId::of(d).to_hex();
                write!(
                    f,
                    "file {:o} {} bytes sha256 {}",
                    self.mode,
                    d.len(),
                    &h[..12]
                )
            }
            Node::File(d) => write!(f, "file {:o} {:?}", self.mode, lossy(d)),
            Node::Dir => write!(f, "dir {:o}", self.mode),
            Node::Symlink(t) => write!(f, "symlink -> {t}"),
        }
    }
}

/// Relative path (`a`, `d/b`) -> entry, for everything below a root (not the root itself).
type Tree = BTreeMap<String, Entry>;

/// Reads a directory as a `Tree`, never following symlinks.
fn read_tree(root: &Path) -> Tree {
    fn walk(dir: &Path, rel: &str, out: &mut Tree) {
        for e in fs::read_dir(dir).expect("readdir") {
            let e = e.expect("entry");
            let name = e.file_name().into_string().expect("utf-8 name");
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let p = e.path();
            let m = fs::symlink_metadata(&p).expect("lstat");
            let mode = m.mode() & 0o7777;
            let node = if m.file_type().is_symlink() {
                Node::Symlink(fs::read_link(&p).unwrap().to_str().unwrap().to_string())
            } else if m.is_dir() {
                walk(&p, &r, out);
                Node::Dir
            } else if m.is_file() {
                Node::File(fs::read(&p).expect("read"))
            } else {
                panic!("{}: unexpected file type", p.display());
            };
            out.insert(r, Entry { node, mode });
        }
    }
    let mut out = Tree::new();
    walk(root, "", &mut out);
    out
}

/// Asserts that the directory `root` holds exactly `want`.
fn assert_tree(root: &Path, want: &Tree, what: &str) {
    let got = read_tree(root);
    if got == *want {
        return;
    }
    let mut diff = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => diff.push(format!("  missing {p}: {w:?}")),
            Some(g) if g != w => diff.push(format!("  {p}: got {g:?}, want {w:?}")),
            _ => {}
        }
    }
    for (p, g) in &got {
        if !want.contains_key(p) {
            diff.push(format!("  unexpected {p}: {g:?}"));
        }
    }
    panic!("{what} differs from the model:\n{}", diff.join("\n"));
}

/// A change to a tree, made on disk and in the model alike.
enum Edit {
    Write(String, Vec<u8>),
    Append(String, Vec<u8>),
    Delete(String),
    Mkdir(String),
    Symlink(String, String),
    Chmod(String, u32),
    /// New bytes of the same length, with the old mtime put back: only the ctime (and the
    /// content) tell this file changed, the trap for a stat cache.
    Rewrite(String, Vec<u8>),
    /// Moves an entry (a directory with everything below it) to a new name.
    Rename(String, String),
}

impl std::fmt::Debug for Edit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Edit::Write(p, d) => write!(f, "write {p} ({} bytes)", d.len()),
            Edit::Append(p, d) => write!(f, "append {p} ({} bytes)", d.len()),
            Edit::Delete(p) => write!(f, "delete {p}"),
            Edit::Mkdir(p) => write!(f, "mkdir {p}"),
            Edit::Symlink(p, t) => write!(f, "symlink {p} -> {t}"),
            Edit::Chmod(p, m) => write!(f, "chmod {m:o} {p}"),
            Edit::Rewrite(p, d) => write!(f, "rewrite {p} ({} bytes, same mtime)", d.len()),
            Edit::Rename(a, b) => write!(f, "rename {a} -> {b}"),
        }
    }
}

const NAMES: [&str; 5] = ["a", "b", "c.txt", "d", "e.bin"];
const TARGETS: [&str; 5] = ["a", "../b", "d/a", "nowhere", "/etc/hostname"];
const FILE_MODES: [u32; 5] = [0o644, 0o600, 0o755, 0o444, 0o640];
const DIR_MODES: [u32; 3] = [0o755, 0o700, 0o750];

/// A random edit that applies to `tree`.
fn random_edit(rng: &mut Rng, tree: &Tree) -> Edit {
    let of = |pred: fn(&Node) -> bool| -> Vec<String> {
        tree.iter()
            .filter(|(_, e)| pred(&e.node))
            .map(|(p, _)| p.clone())
            .collect()
    };
    let files = of(|n| matches!(n, Node::File(_)));
    let dirs = of(|n| matches!(n, Node::Dir));
    loop {
        // A new name below the root or a shallow directory.
        let mut parents: Vec<String> = dirs.iter().filter(|d| !d.contains('/')).cloned().collect();
        parents.push(String::new());
        let parent = rng.pick(&parents).clone();
        let name = *rng.pick(&NAMES);
        let fresh = if parent.is_empty() {
            name.to_string()
        } else {
            format!("{parent}/{name}")
        };
        let is_new = !tree.contains_key(&fresh);
        match rng.below(11) {
            0 | 1 if is_new => return Edit::Write(fresh, rng.data()),
            2 if !files.is_empty() => return Edit::Write(rng.pick(&files).clone(), rng.data()),
            3 if !files.is_empty() => return Edit::Append(rng.pick(&files).clone(), rng.data()),
            4 if !tree.is_empty() => {
                let all: Vec<String> = tree.keys().cloned().collect();
                return Edit::Delete(rng.pick(&all).clone());
            }
            5 if is_new => return Edit::Mkdir(fresh),
            6 if is_new => return Edit::Symlink(fresh, rng.pick(&TARGETS).to_string()),
            7 if !files.is_empty() => {
                return Edit::Chmod(rng.pick(&files).clone(), *rng.pick(&FILE_MODES))
            }
            8 if !dirs.is_empty() => {
                return Edit::Chmod(rng.pick(&dirs).clone(), *rng.pick(&DIR_MODES))
            }
            9 if !files.is_empty() => {
                let f = rng.pick(&files).clone();
                let Node::File(old) = &tree[&f].node else {
                    unreachable!()
                };
                let mut new = old.clone();
                match new.len() {
                    0 => continue,
                    n => {
                        let i = rng.below(n);
                        new[i] = new[i].wrapping_add(1 + rng.below(255) as u8);
                    }
                }
                return Edit::Rewrite(f, new);
            }
            10 if is_new && !tree.is_empty() => {
                let all: Vec<String> = tree.keys().cloned().collect();
                let from = rng.pick(&all).clone();
                // Not into itself.
                if fresh.starts_with(&format!("{from}/")) {
                    continue;
                }
                return Edit::Rename(from, fresh);
            }
            _ => {}
        }
    }
}

/// Makes `edit` below `root` and in `tree`.
fn apply(root: &Path, tree: &mut Tree, edit: &Edit) {
    let p = |rel: &str| root.join(rel);
    match edit {
        Edit::Write(rel, data) => {
            fs::write(p(rel), data).unwrap();
            let mode = match tree.get(rel) {
                Some(e) => e.mode,
                None => {
                    chmod(&p(rel), 0o644);
                    0o644
                }
            };
            tree.insert(
                rel.clone(),
                Entry {
                    node: Node::File(data.clone()),
                    mode,
                },
            );
        }
        Edit::Append(rel, data) => {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(p(rel)).unwrap();
            f.write_all(data).unwrap();
            let Some(Entry {
                node: Node::File(d),
                ..
            }) = tree.get_mut(rel)
            else {
                unreachable!("append to a file")
            };
            d.extend_from_slice(data);
        }
        Edit::Delete(rel) => {
            if tree[rel].node == Node::Dir {
                fs::remove_dir_all(p(rel)).unwrap();
            } else {
                fs::remove_file(p(rel)).unwrap();
            }
            let below = format!("{rel}/");
            tree.retain(|k, _| k != rel && !k.starts_with(&below));
        }
        Edit::Mkdir(rel) => {
            fs::create_dir(p(rel)).unwrap();
            chmod(&p(rel), 0o755);
            tree.insert(
                rel.clone(),
                Entry {
                    node: Node::Dir,
                    mode: 0o755,
                },
            );
        }
        Edit::Symlink(rel, target) => {
            std::os::unix::fs::symlink(target, p(rel)).unwrap();
            tree.insert(
                rel.clone(),
                Entry {
                    node: Node::Symlink(target.clone()),
                    mode: 0o777,
                },
            );
        }
        Edit::Chmod(rel, mode) => {
            fs::set_permissions(p(rel), fs::Permissions::from_mode(*mode)).unwrap();
            tree.get_mut(rel).unwrap().mode = *mode;
        }
        Edit::Rewrite(rel, data) => {
            let m = fs::symlink_metadata(p(rel)).unwrap();
            fs::OpenOptions::new()
                .write(true)
                .open(p(rel))
                .unwrap()
                .write_all_at(data, 0)
                .unwrap();
            set_mtime(&p(rel), m.mtime() * 1_000_000_000 + m.mtime_nsec());
            tree.get_mut(rel).unwrap().node = Node::File(data.clone());
        }
        Edit::Rename(from, to) => {
            fs::rename(p(from), p(to)).unwrap();
            let below = format!("{from}/");
            let moved: Vec<(String, Entry)> = tree
                .iter()
                .filter(|(k, _)| *k == from || k.starts_with(&below))
                .map(|(k, e)| (format!("{to}{}", &k[from.len()..]), e.clone()))
                .collect();
            tree.retain(|k, _| k != from && !k.starts_with(&below));
            tree.extend(moved);
        }
    }
}

// ---- the model --------------------------------------------------------------------------

struct Ckpt {
    tree: Tree,
    /// The branch it was recorded on (its record's `branch`, which gc's policy ranks by).
    branch: String,
    parent: Option<String>,
    /// Creation order: gc ranks a branch's checkpoints by time, newest first.
    seq: usize,
}

#[derive(Default)]
struct Model {
    ckpts: BTreeMap<String, Ckpt>,
    heads: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    /// Base checkpoint of every branch that has an upper layer (was mounted as a workspace).
    bases: BTreeMap<String, String>,
    /// The branch mounted at the room, and the tree it shows there.
    mounted: Option<(String, Tree)>,
    /// Branches a switch parked (their overlays kept mounted, their uppers and bases kept),
    /// oldest first; at most `MAX_PARKED`.
    parked: Vec<String>,
    /// The plain directory that `capture --from` records.
    src: Tree,
    /// Counter for fresh names (labels, branches, scratch directories).
    names: usize,
    /// Checkpoints made so far (their creation order).
    seq: usize,
}

/// The most branches parked at once (`workspace::MAX_PARKED`).
const MAX_PARKED: usize = 2;

impl Model {
    /// Every park evicted (umount of the room, gc): each upper, all in its head, is dropped.
    fn evict_parked(&mut self) {
        for b in std::mem::take(&mut self.parked) {
            self.bases.remove(&b);
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.names += 1;
        format!("{prefix}{}", self.names)
    }

    fn add(&mut self, id: &str, tree: Tree, branch: &str) {
        let parent = self.heads.get(branch).cloned();
        self.seq += 1;
        assert!(
            !self.ckpts.contains_key(id),
            "checkpoint {id} was reported twice"
        );
        self.ckpts.insert(
            id.to_string(),
            Ckpt {
                tree,
                branch: branch.to_string(),
                parent,
                seq: self.seq,
            },
        );
        self.heads.insert(branch.to_string(), id.to_string());
    }

    fn tree_of_head(&self, branch: &str) -> &Tree {
        &self.ckpts[&self.heads[branch]].tree
    }

    /// Every checkpoint id in creation order (not in id order: ids hash the time, so only
    /// this order makes a seed pick the same checkpoints again).
    fn ids(&self) -> Vec<String> {
        let mut v: Vec<(usize, &String)> = self.ckpts.iter().map(|(id, c)| (c.seq, id)).collect();
        v.sort();
        v.into_iter().map(|(_, id)| id.clone()).collect()
    }

    /// Checkpoints no head points at (candidates for `switch --to ID`), in creation order.
    fn non_heads(&self) -> Vec<String> {
        let heads: BTreeSet<&String> = self.heads.values().collect();
        self.ids()
            .into_iter()
            .filter(|id| !heads.contains(id))
            .collect()
    }

    /// What gc with `--keep-last n` must keep, each with why.
    fn must_keep(&self, n: usize) -> BTreeMap<String, &'static str> {
        let mut keep = BTreeMap::new();
        for id in self.heads.values() {
            keep.entry(id.clone()).or_insert("branch head");
        }
        for id in self.labels.values() {
            keep.entry(id.clone()).or_insert("label");
        }
        for id in self.bases.values() {
            keep.entry(id.clone()).or_insert("workspace base");
        }
        let mut by_branch: BTreeMap<&str, Vec<(usize, &String)>> = BTreeMap::new();
        for (id, c) in &self.ckpts {
            by_branch.entry(&c.branch).or_default().push((c.seq, id));
        }
        for list in by_branch.values_mut() {
            list.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
            for (_, id) in list.iter().take(n) {
                keep.entry((*id).clone()).or_insert("policy");
            }
        }
        keep
    }
}

// ---- the system under test --------------------------------------------------------------

/// A store with one root `ws` recorded at `room`, a source directory for `capture --from`,
/// and scratch space, all in a temp dir (on tmpfs when there is one); drop unmounts all.
struct Harness {
    tmp: tempfile::TempDir,
    store: PathBuf,
    room: PathBuf,
    src: PathBuf,
}

impl Harness {
    fn new() -> Harness {
        let tmp = tempdir();
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        let src = tmp.path().join("src");
        fs::create_dir(&room).unwrap();
        fs::create_dir(&src).unwrap();
        ok([
            "init",
            s(&store),
            "--root",
            &format!("ws={}", room.display()),
        ]);
        Harness {
            tmp,
            store,
            room,
            src,
        }
    }
    fn st(&self) -> &str {
        s(&self.store)
    }
    fn scratch(&self, m: &mut Model) -> PathBuf {
        let name = m.fresh("scratch-");
        self.tmp.path().join(name)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if mounted(&self.room) {
            let _ = run(["umount", s(&self.room)]);
        }
        unmount_all_under(self.tmp.path());
    }
}

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().expect("id").to_string()
}

/// A few random edits of `dir`, which shows `tree`.
fn edit(rng: &mut Rng, dir: &Path, tree: &mut Tree, log: &mut Vec<String>) {
    for _ in 0..1 + rng.below(4) {
        let e = random_edit(rng, tree);
        log.push(format!("    {e:?}"));
        apply(dir, tree, &e);
    }
}

/// `mount --branch b` at the room (unmounting what is there first).
fn mount(h: &Harness, m: &mut Model, b: &str, log: &mut Vec<String>) {
    if m.mounted.is_some() {
        ok(["umount", s(&h.room)]);
        m.mounted = None;
        m.evict_parked();
    }
    log.push(format!("  mount {b}"));
    let st = ok_json(["mount", h.st(), "--branch", b]);
    // Every workspace is checkpointed before it is left, so its upper layer is all in the
    // head: the mount drops it and stands on the head.
    assert_eq!(st["base"], m.heads[b].as_str(), "mount base: {st}");
    m.bases.insert(b.to_string(), m.heads[b].clone());
    m.mounted = Some((b.to_string(), m.tree_of_head(b).clone()));
}

/// One random operation. Over 150 lines on purpose: one match arm per operation of the
/// model, each applying the operation to the store and to the model side by side.
fn step(h: &Harness, m: &mut Model, rng: &mut Rng, log: &mut Vec<String>) {
    match rng.below(12) {
        // capture (after edits of the source tree), sometimes labelled, sometimes on a new
        // branch; only on branches no workspace stands on.
        0..=2 => {
            let mut src = std::mem::take(&mut m.src);
            log.push("capture".into());
            edit(rng, &h.src, &mut src, log);
            m.src = src;
            let free: Vec<String> = m
                .heads
                .keys()
                .filter(|b| !m.bases.contains_key(*b))
                .cloned()
                .collect();
            let branch = if free.is_empty() || rng.chance(1, 4) {
                m.fresh("c")
            } else {
                rng.pick(&free).clone()
            };
            let label = rng.chance(1, 5).then(|| m.fresh("l"));
            let from = format!("ws={}", h.src.display());
            let mut args = vec!["capture", h.st(), "-b", &branch, "--from", &from];
            if let Some(l) = &label {
                args.extend(["-l", l]);
            }
            let id = id_of(&ok_json(&args));
            log.push(format!("  -> {} on {branch} label {label:?}", &id[..12]));
            m.add(&id, m.src.clone(), &branch);
            if let Some(l) = label {
                m.labels.insert(l, id);
            }
        }
        // label a checkpoint, or fail to move an existing label
        3 => {
            let target = rng.pick(&m.ids()).clone();
            let existing: Vec<(String, String)> = m
                .labels
                .iter()
                .filter(|(_, id)| **id != target)
                .map(|(l, id)| (l.clone(), id.clone()))
                .collect();
            if !existing.is_empty() && rng.chance(1, 3) {
                let (l, _) = rng.pick(&existing).clone();
                log.push(format!("label {} {l} (refused: immutable)", &target[..12]));
                let err = fails(1, ["label", h.st(), &target, &l]);
                assert!(err.contains("immutable"), "{err}");
            } else {
                let l = m.fresh("l");
                log.push(format!("label {} {l}", &target[..12]));
                ok(["label", h.st(), &target, &l]);
                m.labels.insert(l, target);
            }
        }
        // fork a branch or a checkpoint
        4 => {
            let name = m.fresh("f");
            let spec = if rng.chance(1, 2) {
                let bs: Vec<String> = m.heads.keys().cloned().collect();
                rng.pick(&bs).clone()
            } else {
                rng.pick(&m.ids()).clone()
            };
            let id = m.heads.get(&spec).cloned().unwrap_or_else(|| spec.clone());
            log.push(format!("fork {spec} as {name} ({})", &id[..12]));
            ok(["fork", h.st(), &spec, "--name", &name]);
            m.heads.insert(name, id);
        }
        // checkpoint a workspace after edits inside it (mounting one first when none is, or
        // sometimes another one, or the same one again)
        5..=7 => {
            if m.mounted.is_none() || rng.chance(1, 4) {
                let bs: Vec<String> = m.heads.keys().cloned().collect();
                let b = rng.pick(&bs).clone();
                mount(h, m, &b, log);
            }
            let (b, mut tree) = m.mounted.take().unwrap();
            log.push(format!("checkpoint workspace of {b}"));
            edit(rng, &h.room, &mut tree, log);
            let r = ok_json(["checkpoint", s(&h.room), "-m", "turn"]);
            let id = id_of(&r);
            log.push(format!("  -> {}", &id[..12]));
            // A workspace as its head records it makes no checkpoint (docs/workspaces.md).
            if r["recorded"] == true {
                m.add(&id, tree.clone(), &b);
            } else {
                assert_eq!(id, m.heads[&b], "{r}");
                assert_eq!(
                    tree,
                    *m.tree_of_head(&b),
                    "nothing recorded, yet it differs: {r}"
                );
            }
            // Nobody is inside: the upper is folded, the base is the head.
            assert_eq!(r["fold"]["folded"] == true, m.bases[&b] != id, "fold: {r}");
            m.bases.insert(b.clone(), id.clone());
            m.mounted = Some((b, tree));
        }
        // switch the workspace to another branch or to a checkpoint no branch is at, after
        // edits (refused, then checkpointed first) or without
        8 | 9 => {
            if m.mounted.is_none() {
                let bs: Vec<String> = m.heads.keys().cloned().collect();
                let b = rng.pick(&bs).clone();
                mount(h, m, &b, log);
            }
            let (from, mut tree) = m.mounted.take().unwrap();
            let others: Vec<String> = m.heads.keys().filter(|b| **b != from).cloned().collect();
            let non_heads = m.non_heads();
            let to_checkpoint = others.is_empty() || (!non_heads.is_empty() && rng.chance(1, 3));
            let (target, name) = if to_checkpoint && !non_heads.is_empty() {
                (rng.pick(&non_heads).clone(), Some(m.fresh("s")))
            } else if !others.is_empty() {
                (rng.pick(&others).clone(), None)
            } else {
                // Nowhere else to go yet: a fork of this branch.
                let f = m.fresh("f");
                ok(["fork", h.st(), &from, "--name", &f]);
                m.heads.insert(f.clone(), m.heads[&from].clone());
                (f, None)
            };
            log.push(format!("switch {from} -> {target} (new branch {name:?})"));
            let mut args = vec!["switch", s(&h.room), "--to", &target];
            if let Some(n) = &name {
                args.extend(["--name", n]);
            }
            if rng.chance(1, 2) {
                edit(rng, &h.room, &mut tree, log);
                if tree != *m.tree_of_head(&from) {
                    // Un-checkpointed changes: refused, nothing moves.
                    let err = fails(1, &args);
                    assert!(err.contains("un-checkpointed"), "{err}");
                    assert_tree(&h.room, &tree, "the workspace after a refused switch");
                }
                args.push("--checkpoint-first");
            }
            let r = ok_json(&args);
            match r["checkpointed"].as_str() {
                Some(id) => {
                    log.push(format!("  checkpointed {from} first: {}", &id[..12]));
                    m.add(id, tree, &from);
                }
                None => assert_eq!(
                    tree,
                    *m.tree_of_head(&from),
                    "switch did not checkpoint first, though the workspace differs from \
                     {from}'s head"
                ),
            }
            let to = match name {
                Some(n) => {
                    assert_eq!(r["created_branch"], true, "{r}");
                    m.heads.insert(n.clone(), target.clone());
                    n
                }
                None => target,
            };
            assert_eq!(r["to_branch"], to.as_str(), "{r}");
            // Nobody is inside the tree of the branch left: it is parked, its upper (all in
            // its head) and base kept; a park beyond the bound goes, its upper dropped. A
            // parked target comes back as it was parked, on its old base.
            assert_eq!(r["folded_left"], false, "{r}");
            assert_eq!(r["parked_left"], true, "{r}");
            let was_parked = m.parked.contains(&to);
            assert_eq!(r["resumed"], was_parked, "{r}");
            m.parked.retain(|b| *b != to);
            m.parked.push(from.clone());
            while m.parked.len() > MAX_PARKED {
                let b = m.parked.remove(0);
                m.bases.remove(&b);
            }
            // A branch keeps the base its upper layer was made on; a new upper stands on the
            // head.
            if !m.bases.contains_key(&to) {
                m.bases.insert(to.clone(), m.heads[&to].clone());
            }
            m.mounted = Some((to.clone(), m.tree_of_head(&to).clone()));
        }
        // gc with a retention policy
        10 => {
            let n = 1 + rng.below(3);
            log.push(format!("gc --keep-last {n}"));
            // gc evicts the parks first.
            m.evict_parked();
            let must = m.must_keep(n);
            let r = ok_json(["gc", h.st(), "--keep-last", &n.to_string()]);
            let left: BTreeSet<String> = checkpoints(&h.store).into_iter().collect();
            let before: BTreeSet<String> = m.ckpts.keys().cloned().collect();
            assert!(left.is_subset(&before), "gc made checkpoints: {r}");
            for (id, why) in &must {
                assert!(left.contains(id), "gc removed {id}, a {why}: {r}");
            }
            let pruned: BTreeSet<String> = r["pruned"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_str().unwrap().to_string())
                .collect();
            let gone: BTreeSet<String> = before.difference(&left).cloned().collect();
            assert_eq!(pruned, gone, "gc's report against the store: {r}");
            // Everything else goes, except what a live pin holds (the lower view pins the
            // checkpoints whose directories the kernel holds).
            let pinned = r["kept"]["pinned"].as_u64().unwrap_or(0) as usize;
            let extra: Vec<&String> = left.iter().filter(|id| !must.contains_key(*id)).collect();
            assert!(
                extra.len() <= pinned && r["kept"].get("pin_keeps_all").is_none(),
                "gc kept {extra:?} beyond what it must ({pinned} pinned): {r}"
            );
            log.push(format!("  pruned {}, {pinned} pinned", gone.len()));
            for id in gone {
                m.ckpts.remove(&id);
            }
            ok(["verify", h.st()]);
        }
        // archive (everything, a branch or a labelled checkpoint) and unarchive into a fresh
        // store, which must hold exactly that
        _ => {
            let mut spec = vec!["--all".to_string()];
            if rng.chance(2, 3) {
                let mut choices: Vec<String> = m.heads.keys().cloned().collect();
                choices.extend(m.labels.keys().cloned());
                spec = vec![rng.pick(&choices).clone()];
            }
            log.push(format!("archive {spec:?} + unarchive"));
            let (want, branches) = archived(m, &spec[0]);
            let file = h.scratch(m).with_extension("ckar");
            let fresh = h.scratch(m);
            let mut args = vec!["archive".to_string(), h.st().to_string()];
            args.extend(spec.iter().cloned());
            args.extend(["--out".to_string(), s(&file).to_string()]);
            ok(&args);
            ok(["unarchive", s(&file), s(&fresh)]);
            let labels: BTreeMap<String, String> = m
                .labels
                .iter()
                .filter(|(_, id)| want.contains(*id))
                .map(|(l, id)| (l.clone(), id.clone()))
                .collect();
            check_store(
                &fresh,
                &m.ckpts,
                &want,
                &labels,
                &branches,
                "the unarchived store",
            );
            ok(["verify", s(&fresh)]);
            fs::remove_dir_all(&fresh).unwrap();
        }
    }
}

/// What archiving `spec` exports: (checkpoints, branch -> head).
fn archived(m: &Model, spec: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    if spec == "--all" {
        return (m.ckpts.keys().cloned().collect(), m.heads.clone());
    }
    if let Some(id) = m.labels.get(spec) {
        return ([id.clone()].into(), BTreeMap::new());
    }
    // A branch brings its history, back to the first pruned parent.
    let mut set = BTreeSet::new();
    let mut cur = Some(m.heads[spec].clone());
    while let Some(id) = cur {
        let Some(c) = m.ckpts.get(&id) else { break };
        set.insert(id);
        cur = c.parent.clone();
    }
    let head = m.heads[spec].clone();
    (set, [(spec.to_string(), head)].into())
}

fn labels_of(labels: &BTreeMap<String, String>, id: &str) -> Vec<String> {
    labels
        .iter()
        .filter(|(_, i)| *i == id)
        .map(|(l, _)| l.clone())
        .collect()
}

/// Asserts `store` holds exactly the checkpoints `ids` (as the model's `ckpts` describe them),
/// the `labels` and the branches `heads`, every checkpoint restoring to its model tree.
fn check_store(
    store: &Path,
    ckpts: &BTreeMap<String, Ckpt>,
    ids: &BTreeSet<String>,
    labels: &BTreeMap<String, String>,
    heads: &BTreeMap<String, String>,
    what: &str,
) {
    let log = ok_json(["log", s(store)]);
    let listed: BTreeMap<String, &serde_json::Value> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (id_of(e), e))
        .collect();
    let got: BTreeSet<String> = listed.keys().cloned().collect();
    assert_eq!(&got, ids, "{what}: the checkpoints");
    for (id, e) in &listed {
        let c = &ckpts[id];
        let mut got_labels: Vec<String> = e["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect();
        got_labels.sort();
        assert_eq!(got_labels, labels_of(labels, id), "{what}: labels of {id}");
        assert_eq!(e["branch"], c.branch.as_str(), "{what}: branch of {id}");
        let parents: Vec<&str> = c.parent.iter().map(String::as_str).collect();
        assert_eq!(
            e["parents"],
            serde_json::json!(parents),
            "{what}: parents of {id}"
        );
    }
    let br = ok_json(["branch", "list", s(store)]);
    let got_heads: BTreeMap<String, String> = br
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["head"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(&got_heads, heads, "{what}: branch heads");
    let scratch = store.with_extension("restored");
    for id in ids {
        ok(["restore", s(store), id, "--to", s(&scratch)]);
        assert_tree(
            &scratch,
            &ckpts[id].tree,
            &format!("{what}: checkpoint {id}"),
        );
        fs::remove_dir_all(&scratch).unwrap();
    }
}

/// Everything the model says, checked against the store and the workspace.
fn check(h: &Harness, m: &Model) {
    let ids: BTreeSet<String> = m.ckpts.keys().cloned().collect();
    check_store(&h.store, &m.ckpts, &ids, &m.labels, &m.heads, "the store");
    match &m.mounted {
        Some((b, tree)) => {
            assert_tree(&h.room, tree, &format!("the workspace of {b}"));
            let st = ok_json(["status", s(&h.room)]);
            let row = &st.as_array().unwrap()[0];
            assert_eq!(row["branch"], b.as_str(), "{st}");
            assert_eq!(row["base"], m.bases[b].as_str(), "workspace base: {st}");
        }
        None => assert!(!mounted(&h.room), "the room is still mounted"),
    }
}

/// One case: an initial capture, then `n_ops` random operations, each followed by `check`.
fn run_case(seed: u64, log: &mut Vec<String>) {
    let mut rng = Rng(seed);
    let n_ops = OPS.start() + rng.below(OPS.end() - OPS.start() + 1);
    let h = Harness::new();
    let mut m = Model::default();
    let mut src = Tree::new();
    log.push("capture (initial)".into());
    for _ in 0..3 {
        let e = random_edit(&mut rng, &src);
        apply(&h.src, &mut src, &e);
    }
    let from = format!("ws={}", h.src.display());
    let id = id_of(&ok_json(["capture", h.st(), "--from", &from]));
    m.add(&id, src.clone(), "main");
    m.src = src;
    check(&h, &m);
    for _ in 0..n_ops {
        step(&h, &mut m, &mut rng, log);
        check(&h, &m);
    }
    ok(["verify", h.st()]);
}

#[test]
fn history_operations_match_the_model() {
    let seeds: Vec<u64> = match std::env::var("CKPTFS_MODEL_SEED") {
        Ok(s) => {
            let s = s.trim_start_matches("0x");
            vec![u64::from_str_radix(s, 16).expect("CKPTFS_MODEL_SEED is hex")]
        }
        Err(_) => {
            let cases = std::env::var("CKPTFS_MODEL_CASES")
                .map(|n| n.parse().expect("CKPTFS_MODEL_CASES is a number"))
                .unwrap_or(CASES);
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let mut base = Rng(t.as_nanos() as u64 ^ u64::from(std::process::id()));
            (0..cases).map(|_| base.next()).collect()
        }
    };
    eprintln!("model_history: {} cases, seeds {:x?}", seeds.len(), seeds);
    let failures = Mutex::new(Vec::new());
    let t0 = std::time::Instant::now();
    par_for(&seeds, |&seed| {
        let mut log = Vec::new();
        let r = catch_unwind(AssertUnwindSafe(|| run_case(seed, &mut log)));
        if std::env::var_os("CKPTFS_MODEL_VERBOSE").is_some() {
            eprintln!("case seed {seed:#x}:\n{}", log.join("\n"));
        }
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.lock().unwrap().push(format!(
                "case seed {seed:#x}, operations:\n{}\ncase seed {seed:#x} failed: {msg}\n\
                 replay it alone: CKPTFS_MODEL_SEED={seed:#x} cargo test --test it \
                 store::model_history",
                log.join("\n")
            ));
        }
    });
    eprintln!("model_history: {:?}", t0.elapsed());
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
