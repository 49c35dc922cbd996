//! The hot set a fold keeps (docs/workspaces.md, "The fold budget"): past its fold budget a
//! workspace's upper layer is folded into the new head, except the files written last, up to
//! half the budget, which stay in the fresh upper layer. The next turn then appends to its
//! transcript or writes pages of its database in place, with no copy-up of the whole file.
//!
//! Which files, in this order, each tier newest first (mtime), while they fit:
//! 1. files the last turn (since the checkpoint before the head) wrote and that existed before
//!    it: copied up from the lower layer (a transcript, a database, git's index), or born in
//!    the upper layer before that checkpoint (`statx` birth time) — what agents write every
//!    turn;
//! 2. files born in the last turn (written once so far: a download, a build's output);
//! 3. the others (not written in the last turn).
//!
//! A file is kept only when keeping it saves a copy-up worth the carry ([`MIN_KEPT_BYTES`]
//! and up), and when the fold can make the new overlay show it exactly as the head records
//! it, which the head's `is_dirty` check has already established for the old one:
//! - a regular file with a single link and no metadata-only copy (`metacopy`): hard links
//!   and metacopies are folded;
//! - moved by a rename within the store's filesystem (no byte copied), after the commit point,
//!   from the upper the fold took (`upper/.folded/B-<ns>`) into the branch's fresh one, at the
//!   same path; the directories above it are made plain (no `opaque`, no `redirect`: the
//!   lower layer now holds everything else they held) with the mode, owner, times and user
//!   xattrs the old ones had;
//! - a copy of a lower file keeps the inode number it showed: its `origin` is rewritten to
//!   the file handle of the same path in the new head's lower view (the same recorded number);
//!   a file made in the workspace has no origin and keeps its own upper inode number;
//! - the entries of the head's stat cache for the kept files (their ctime, which the rename
//!   changed, updated) are saved as the head's kept-files cache, which the next checkpoint
//!   over this base reads (`Store::load_kept_statcache`): it reads none of them again unless
//!   the agent wrote them.
//!
//! Nothing here is needed for correctness after the commit point: a file that cannot be
//! carried over (its handle, a rename) stays in the folded upper and is removed with it; the
//! lower view shows its recorded bytes. A crash leaves each file in one of the two places.
//! The upper layers are the agent's trees: walked and changed through held directory fds
//! (`crate::fs::safe`), never following a symlink.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::fs::safe::{Dir, Stat};
use crate::id::ObjectId;
use crate::store::tree::MAX_TREE_DEPTH;
use crate::store::Store;

use super::state::MountedRoot;

/// Files smaller than this are folded, not kept: a copy-up costs what carrying them does (a
/// rename, their directories, an xattr), and a fold that carries thousands of them (a
/// `node_modules` unpacked by the last turn) took 1.4 s longer, and left the next turn's
/// `rm -rf` to remove them from the upper layer too (docs/benchmarks.md).
pub(super) const MIN_KEPT_BYTES: u64 = 256 << 10;

/// A file of the upper layer the fold keeps.
#[derive(Clone, Debug)]
pub(super) struct Hot {
    root: String,
    /// Its path below the root, one name per component.
    rel: Vec<OsString>,
    bytes: u64,
    mtime: (i64, i64),
    /// Its tier (see the module doc), 1 first.
    tier: u8,
}

/// What a fold kept in the upper layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Kept {
    pub files: u64,
    pub bytes: u64,
}

/// The files of `branch`'s upper layers (its `roots`) to keep, by tier and newest first (see
/// the module doc) while they fit in `budget` bytes; `turn_start_ns` is the time of the
/// checkpoint before the head (0 for none). Only upper layers nested in their overlay's
/// upper directory (every one made since 2026-12) keep files.
pub(super) fn pick(
    store: &Store,
    branch: &str,
    roots: &[String],
    budget: u64,
    turn_start_ns: i64,
) -> Vec<Hot> {
    let mut all = Vec::new();
    if budget == 0 {
        return all;
    }
    let since = (
        turn_start_ns.div_euclid(1_000_000_000),
        turn_start_ns.rem_euclid(1_000_000_000),
    );
    for root in roots {
        let upper = store.upper_dir(branch, root);
        if !Store::upper_is_nested(&upper, root) {
            continue;
        }
        if let Ok(dir) = Dir::open(&upper) {
            walk(&dir, root, since, &mut Vec::new(), &mut all);
        }
    }
    all.sort_by(|a, b| {
        (a.tier, b.mtime)
            .cmp(&(b.tier, a.mtime))
            .then_with(|| a.rel.cmp(&b.rel))
    });
    let mut used = 0u64;
    all.retain(|h| {
        let fits = used.saturating_add(h.bytes) <= budget;
        if fits {
            used += h.bytes;
        }
        fits
    });
    all
}

fn walk(dir: &Dir, root: &str, since: (i64, i64), rel: &mut Vec<OsString>, out: &mut Vec<Hot>) {
    let Ok(names) = dir.entries() else { return };
    let prefix = crate::fs::userns::overlay_xattr_prefix();
    for name in names {
        let Ok(Some(m)) = dir.stat(&name) else {
            continue;
        };
        if m.is_dir() {
            if rel.len() + 1 >= MAX_TREE_DEPTH {
                continue;
            }
            let Ok(sub) = dir.open_dir(&name) else {
                continue;
            };
            if !sub.stat_self().is_ok_and(|s| s.same_object(&m)) {
                continue;
            }
            rel.push(name);
            walk(&sub, root, since, rel, out);
            rel.pop();
        } else if m.is_file() && m.nlink == 1 && m.size >= MIN_KEPT_BYTES {
            // A metadata-only copy holds no bytes: its data is the lower file's.
            let (mut meta, mut origin) = (false, false);
            let listed = dir.xattrs_of_where(&name, &mut |n| {
                match n.strip_prefix(prefix) {
                    Some(b"metacopy") => meta = true,
                    Some(b"origin") => origin = true,
                    _ => {}
                }
                false
            });
            if listed.is_err() || meta {
                continue;
            }
            let born_before = || {
                dir.birth_time(&name)
                    .ok()
                    .flatten()
                    .is_some_and(|b| b < since)
            };
            let tier = if m.mtime < since {
                3
            } else if origin || born_before() {
                1
            } else {
                2
            };
            let mut path = rel.clone();
            path.push(name);
            out.push(Hot {
                root: root.to_string(),
                rel: path,
                bytes: m.size,
                mtime: m.mtime,
                tier,
            });
        }
    }
}

/// A directory pair being carried: the old upper's and the new one's.
struct Pair {
    from: Dir,
    to: Dir,
    /// The old directory's stat, to give the new one its times once the files are in.
    stat: Stat,
    /// Made here (its times are then set from `stat`).
    made: bool,
}

/// Moves the `hot` files from `folded` (the upper the fold took: `upper/.folded/B-<ns>`) into
/// the branch's fresh upper layers `roots` (made by the fold's `plan_roots`, over `head`),
/// rewrites their origin for the new lower layer, and keeps their stat cache entries (see
/// the module doc). Best effort: what cannot be carried is folded, and logged.
pub(super) fn carry(
    store: &Store,
    folded: &Path,
    roots: &BTreeMap<String, MountedRoot>,
    head: &ObjectId,
    hot: &[Hot],
) -> Kept {
    let mut kept = Kept::default();
    let mut by_root: BTreeMap<&str, Vec<&Hot>> = BTreeMap::new();
    for h in hot {
        by_root.entry(h.root.as_str()).or_default().push(h);
    }
    for (root, files) in by_root {
        let Some(r) = roots.get(root) else { continue };
        let from = folded
            .join(format!("{}{root}", Store::UPPER_TOP_PREFIX))
            .join(root);
        match carry_root(store, &from, r, head, root, &files) {
            Ok(k) => {
                kept.files += k.files;
                kept.bytes += k.bytes;
            }
            Err(e) => log::warn!("keeping the hot files of root {root}: {e}"),
        }
    }
    kept
}

fn carry_root(
    store: &Store,
    from: &Path,
    r: &MountedRoot,
    head: &ObjectId,
    root: &str,
    files: &[&Hot],
) -> crate::error::Result<Kept> {
    let top = r.upper.parent().ok_or_else(|| {
        crate::error::Error::Invalid(format!("{} has no parent", r.upper.display()))
    })?;
    let top = Dir::open(top)?;
    let from_root = Dir::open(from)?;
    // Opened before anything is made: a failure here leaves the fresh upper untouched.
    let lower = Dir::open(&r.lower)?;
    let root_name = OsStr::new(root);
    let root_stat = from_root.stat_self()?;
    let made = top.stat(root_name)?.is_none();
    if made {
        make_like(&top, root_name, &from_root, &root_stat)?;
    }
    let prefix = crate::fs::userns::overlay_xattr_prefix();
    let origin_key = [prefix, b"origin".as_slice()].concat();
    // Directory pairs by their path below the root; the root's is the empty path.
    let mut pairs: BTreeMap<Vec<OsString>, Pair> = BTreeMap::new();
    pairs.insert(
        Vec::new(),
        Pair {
            to: top.open_dir(root_name)?,
            from: from_root,
            stat: root_stat,
            made,
        },
    );
    let mut cache = store.load_statcache(head, root);
    let mut new_cache = crate::store::statcache::StatCache::new();
    let mut kept = Kept::default();
    for h in files {
        let Some((name, parents)) = h.rel.split_last() else {
            continue;
        };
        let moved = (|| -> crate::error::Result<Option<Stat>> {
            open_pairs(&mut pairs, parents)?;
            let Some(p) = pairs.get(parents) else {
                return Ok(None);
            };
            // Still the file picked (nothing can write this upper since the fold's
            // read-only remount, but it is the agent's tree: check, never assume).
            let Some(st) = p.from.stat(name)? else {
                return Ok(None);
            };
            if !st.is_file() || st.nlink != 1 {
                return Ok(None);
            }
            let has_origin = p
                .from
                .xattrs_of_where(name, &mut |n| n == origin_key.as_slice())?
                .into_iter()
                .find(|(k, _)| *k == origin_key)
                .map(|(_, v)| v);
            if let Some(old) = has_origin {
                let handle = lower_handle(&lower, parents, name)?;
                let Some(new) = rewrite_origin(&old, handle) else {
                    return Ok(None);
                };
                p.from.set_xattr(name, &origin_key, &new)?;
            }
            p.from.rename(name, &p.to, name, false)?;
            p.to.stat(name)
        })();
        match moved {
            Ok(Some(st)) => {
                kept.files += 1;
                kept.bytes += st.size;
                let rel = rel_bytes(&h.rel);
                if let Some(mut c) = cache.remove(&rel) {
                    if c.key.ino == st.ino && c.key.size == st.size {
                        c.key.ctime_ns = crate::meta::stat_key(&st).ctime_ns;
                        c.snapshot = None;
                        new_cache.insert(rel, c);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => log::debug!("not kept: {e}"),
        }
    }
    // The directories made take the old ones' times, deepest first (a name added below
    // changes its parent's mtime).
    let ns = |t: (i64, i64)| t.0 * 1_000_000_000 + t.1;
    for (key, p) in pairs.iter().rev() {
        if !p.made {
            continue;
        }
        let (parent, name) = match key.split_last() {
            Some((name, up)) => match pairs.get(up) {
                Some(up) => (&up.to, name.as_os_str()),
                None => continue,
            },
            None => (&top, root_name),
        };
        if let Err(e) = parent.set_times(name, ns(p.stat.atime), ns(p.stat.mtime)) {
            log::debug!("{e}");
        }
    }
    store.save_kept_statcache(head, root, &new_cache);
    Ok(kept)
}

/// Opens (making them in the new upper where missing) the directory pairs down to `parents`.
fn open_pairs(
    pairs: &mut BTreeMap<Vec<OsString>, Pair>,
    parents: &[OsString],
) -> crate::error::Result<()> {
    for depth in 1..=parents.len() {
        let key = &parents[..depth];
        if pairs.contains_key(key) {
            continue;
        }
        let name = &parents[depth - 1];
        let Some(up) = pairs.get(&parents[..depth - 1]) else {
            return Ok(());
        };
        let from = up.from.open_dir(name)?;
        let stat = from.stat_self()?;
        let made = match up.to.stat(name)? {
            None => {
                make_like(&up.to, name, &from, &stat)?;
                true
            }
            Some(s) if s.is_dir() => false,
            Some(_) => return Ok(()),
        };
        let to = up.to.open_dir(name)?;
        pairs.insert(
            key.to_vec(),
            Pair {
                from,
                to,
                stat,
                made,
            },
        );
    }
    Ok(())
}

/// Makes `name` in `parent` a plain directory like `like` (mode, owner, user xattrs; its
/// times are set once the files are in). One that cannot be made so is removed again: the
/// workspace would show it with the wrong owner or mode (the lower layer's shows through).
fn make_like(parent: &Dir, name: &OsStr, like: &Dir, st: &Stat) -> crate::error::Result<()> {
    parent.create_dir(name, 0o700)?;
    let made = (|| {
        parent.set_owner(name, st.uid, st.gid)?;
        parent.set_mode(name, st.mode & 0o7777)?;
        let prefix = crate::fs::userns::overlay_xattr_prefix();
        for (k, v) in like.xattrs_self()? {
            if !k.starts_with(prefix) {
                parent.set_xattr(name, &k, &v)?;
            }
        }
        Ok(())
    })();
    if made.is_err() {
        if let Err(e) = parent.remove_dir(name) {
            log::warn!("{e}");
        }
    }
    made
}

/// The file handle of `parents/name` below the new lower root.
fn lower_handle(
    lower: &Dir,
    parents: &[OsString],
    name: &OsStr,
) -> crate::error::Result<(i32, Vec<u8>)> {
    let mut d = lower.try_clone()?;
    for p in parents {
        d = d.open_dir(p)?;
    }
    d.file_handle(name)
}

/// Overlayfs's origin record (`struct ovl_fb`: version, magic 0xfb, length, flags, handle
/// type, the lower filesystem's uuid, then the handle) with `handle` in place of the old
/// one; `None` when `old` is not such a record.
fn rewrite_origin(old: &[u8], (kind, handle): (i32, Vec<u8>)) -> Option<Vec<u8>> {
    const HEADER: usize = 21;
    const MAGIC: u8 = 0xfb;
    const FLAG_PATH_UPPER: u8 = 1 << 2;
    let ok = old.len() >= HEADER
        && old[1] == MAGIC
        && usize::from(old[2]) == old.len()
        && old[3] & FLAG_PATH_UPPER == 0;
    let len = u8::try_from(HEADER + handle.len()).ok()?;
    let kind = u8::try_from(kind).ok()?;
    if !ok || handle.is_empty() || handle.len() % 4 != 0 {
        return None;
    }
    let mut new = old[..HEADER].to_vec();
    new[2] = len;
    new[4] = kind;
    new.extend_from_slice(&handle);
    Some(new)
}

fn rel_bytes(rel: &[OsString]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, c) in rel.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(c.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_takes_the_new_handle_and_keeps_its_header() {
        let mut old = vec![0, 0xfb, 33, 1, 0x81];
        old.extend_from_slice(&[7; 16]);
        old.extend_from_slice(&[1; 12]);
        let new = rewrite_origin(&old, (0x82, vec![2; 16])).expect("rewritten");
        assert_eq!(new.len(), 37);
        assert_eq!(&new[..2], &[0, 0xfb]);
        assert_eq!(new[2], 37);
        assert_eq!(new[3], 1);
        assert_eq!(new[4], 0x82);
        assert_eq!(&new[5..21], &[7; 16]);
        assert_eq!(&new[21..], &[2; 16]);
    }

    #[test]
    fn what_is_not_a_lower_origin_is_not_rewritten() {
        let mut old = vec![0, 0xfb, 33, 1, 0x81];
        old.extend_from_slice(&[7; 28]);
        let h = || (0x81, vec![1; 12]);
        assert!(rewrite_origin(&old[..20], h()).is_none(), "short");
        let mut bad = old.clone();
        bad[1] = 0xfa;
        assert!(rewrite_origin(&bad, h()).is_none(), "magic");
        let mut bad = old.clone();
        bad[2] = 32;
        assert!(rewrite_origin(&bad, h()).is_none(), "length");
        let mut bad = old.clone();
        bad[3] |= 4;
        assert!(rewrite_origin(&bad, h()).is_none(), "an upper origin");
        assert!(
            rewrite_origin(&old, (0x81, vec![1; 10])).is_none(),
            "odd handle"
        );
        assert!(rewrite_origin(&old, (0x81, vec![1; 12])).is_some());
    }

    #[test]
    fn paths_join_with_slashes() {
        let rel = vec![OsString::from("a"), OsString::from("b c")];
        assert_eq!(rel_bytes(&rel), b"a/b c");
    }
}
