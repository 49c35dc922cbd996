//! A branch's upper layers (`STORE/upper/BRANCH/`) as the commands share them: their usage,
//! setting them aside (`displaced/`), dropping them once their head records them
//! (`upper/.folded/`), and detaching the overlays a fold or a switch set aside. The layers are
//! the agent's trees: walked and removed through held directory fds (`crate::fs::safe`).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::fs::safe::Dir;
use crate::store::Store;
use crate::text::time::now_ns;

use super::checkpoint::{first_excluded, is_dirty};
use super::holders::set_aside_in_use;
use super::overlay;

/// Bytes and files held by a branch's upper layers (cheap: a walk of the upper only). The
/// layers are the agent's trees: walked through held directory fds (see `safe`), symlinks
/// never followed, so what it links in is not counted (nor listed). Best effort: what cannot
/// be read is not counted.
/// [`upper_usage`] over every branch with an upper layer: the files and bytes the store's
/// workspaces keep beside the store (their recorded part, under a fold budget or while held,
/// is in the store too).
pub fn upper_totals(store: &Store) -> (u64, u64) {
    let Ok(rd) = fs::read_dir(store.upper_base_dir()) else {
        return (0, 0);
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .map(|b| upper_usage(store, &b))
        .fold((0, 0), |a, u| (a.0 + u.0, a.1 + u.1))
}

pub fn upper_usage(store: &Store, branch: &str) -> (u64, u64) {
    fn walk(dir: &Dir, acc: &mut (u64, u64), depth: usize) {
        let Ok(names) = dir.entries() else { return };
        for name in names {
            let Ok(Some(m)) = dir.stat(&name) else {
                continue;
            };
            if m.is_dir() && depth < crate::store::tree::MAX_TREE_DEPTH {
                let sub = dir.open_dir(&name);
                if let Ok(sub) = sub.and_then(|d| Ok((d.stat_self()?, d))) {
                    if sub.0.same_object(&m) {
                        walk(&sub.1, acc, depth + 1);
                    }
                }
            } else if m.is_file() {
                acc.0 += 1;
                acc.1 += m.size;
            }
        }
    }
    let mut acc = (0, 0);
    // `upper/B` is the store's: `.top-ROOT/` per root (the overlay's upper directory, `ROOT/`
    // in it the root's changes; `ROOT/` itself in an upper made before 2026-12), and
    // ckptfs's own other dotted entries.
    let dir = store.upper_branch_dir(branch);
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && !name.starts_with(Store::UPPER_TOP_PREFIX) {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if let Ok(d) = Dir::open(&e.path()) {
                    walk(&d, &mut acc, 1);
                }
            }
        }
    }
    acc
}

/// Moves `branch`'s upper layers to `displaced/` (never deleted silently).
pub(super) fn displace_upper(store: &Store, branch: &str) -> Result<Option<PathBuf>> {
    let upper = store.upper_branch_dir(branch);
    if !upper.exists() {
        return Ok(None);
    }
    let dest = store.displaced_upper_path(branch, now_ns());
    fs::create_dir_all(store.displaced_dir()).map_err(|e| Error::io(store.displaced_dir(), e))?;
    atomic::rename(&upper, &dest)?;
    Ok(Some(dest))
}

/// Detaches (in the background) the trees set aside that nobody is inside any more.
pub(super) fn reap_unused_detached(store: &Store) -> Result<()> {
    let [_, legacy] = store.legacy_mount_dirs();
    let dirs = [store.detached_dir(), legacy];
    let unused: Vec<PathBuf> = crate::fs::mountinfo::mounts()?
        .into_iter()
        .filter(|m| m.fstype == "overlay" && dirs.iter().any(|d| m.mountpoint.starts_with(d)))
        .map(|m| m.mountpoint)
        .filter(|mp| !set_aside_in_use(mp))
        .collect();
    if !unused.is_empty() {
        detach_and_remove(&unused, None);
    }
    Ok(())
}

/// `upper/.folded/`: upper layers a fold (or a switch) took out of their branch, being
/// removed. Not a branch name (those never start with `.`).
pub(super) fn folded_dir(store: &Store) -> PathBuf {
    store.upper_base_dir().join(".folded")
}

/// Takes `branch`'s upper layers out of the branch (into `upper/.folded/`) when its head
/// records all of them and nothing can write them any more (its overlays are detached or
/// read-only): the branch's base becomes its head. Returns where they went.
pub(super) fn drop_recorded_upper(store: &Store, branch: &str) -> Result<Option<PathBuf>> {
    let upper = store.upper_branch_dir(branch);
    if !upper.exists()
        || super::pending::is_pending(store, branch)
        || first_excluded(store, branch)?.is_some()
        || is_dirty(store, branch)?
    {
        return Ok(None);
    }
    reap_folded(store);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folded_dir(store))
        .map_err(|e| Error::io(folded_dir(store), e))?;
    let trash = folded_dir(store).join(format!("{branch}-{}", now_ns()));
    atomic::rename(&upper, &trash)?;
    atomic::sync_path(&store.upper_base_dir())?;
    if let Some(head) = store.read_branch(branch)?.and_then(|b| b.head) {
        let roots: Vec<String> = store.config().roots.keys().cloned().collect();
        drop_head_caches(store, &head, &roots);
    }
    Ok(Some(trash))
}

/// Removes the stat and upper caches saved with `head` for `roots`: they describe the upper
/// layer a fold took away (its file and whiteout names too), and a checkpoint on a base that
/// is its head never reads them. Best effort: they are caches.
pub(super) fn drop_head_caches(store: &Store, head: &crate::id::ObjectId, roots: &[String]) {
    for name in roots {
        let p = store.statcache_path(head, name);
        let mut upper = p.clone().into_os_string();
        upper.push(".upper");
        for c in [p, PathBuf::from(upper)] {
            if let Err(e) = fs::remove_file(&c) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("{}: {e}", c.display());
                }
            }
        }
    }
}

/// Detaches the old overlays `asides` and then removes `trash` (a directory under
/// `upper/.folded/`), in a child process that is not waited for: the caller returns at once,
/// whatever the teardown costs (detaching syncs the upper's filesystem).
pub(super) fn detach_and_remove(asides: &[PathBuf], trash: Option<&Path>) {
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let mut cmd = std::process::Command::new(exe);
    cmd.current_dir("/").arg("internal-detach").args(asides);
    if let Some(t) = trash {
        cmd.arg("--remove").arg(t);
    }
    let spawned = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        log::warn!("detaching now ({e})");
        for a in asides {
            if let Err(e) = overlay::detach(a) {
                log::warn!("could not detach {}: {e}", a.display());
            }
            let _ignored = fs::remove_dir(a);
        }
        if let Some(t) = trash {
            if let Err(e) = remove_folded(t) {
                log::warn!("{e}");
            }
        }
    }
}

/// Removes `dir`, an upper layer a fold took out of its branch (`STORE/upper/.folded/X`):
/// anything else is refused. The layers are the agent's trees: removed through held fds,
/// never following what it linked in.
///
/// # Errors
/// `dir` is not under a `.folded` directory; removing it.
pub fn remove_folded(dir: &Path) -> Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(Error::Usage(format!("{}: no parent", dir.display())));
    };
    if parent.file_name().and_then(|n| n.to_str()) != Some(".folded") {
        return Err(Error::Usage(format!(
            "{} is not a folded upper layer",
            dir.display()
        )));
    }
    let parent = crate::fs::safe::Dir::open(parent)?;
    // Held while removing, so `reap_folded` tells a removal in progress from one a crash
    // left (a second remover waits, then finds it gone).
    let Some(lock) = lock_folded(&parent, name, true)? else {
        return Ok(());
    };
    let removed = parent.remove_all(name);
    drop(lock);
    removed
}

/// Removes (in the background) what a crash left in `upper/.folded/`: the entries no remover
/// holds. Under the store lock, so no fold is adding one.
pub(super) fn reap_folded(store: &Store) {
    let dir = folded_dir(store);
    let Ok(parent) = crate::fs::safe::Dir::open(&dir) else {
        return;
    };
    for name in parent.entries().unwrap_or_default() {
        if let Ok(Some(lock)) = lock_folded(&parent, &name, false) {
            drop(lock);
            detach_and_remove(&[], Some(&dir.join(&name)));
        }
    }
}

/// The flock of `.folded/NAME` (waiting for it, or `None` when `wait` is false and another
/// process holds it, or when it is gone).
fn lock_folded(
    parent: &crate::fs::safe::Dir,
    name: &std::ffi::OsStr,
    wait: bool,
) -> Result<Option<nix::fcntl::Flock<std::os::fd::OwnedFd>>> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::fd::AsFd;
    let Some(d) = parent.try_open_dir(name)? else {
        return Ok(None);
    };
    let d = d
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io(parent.display_path(name), e))?;
    let arg = if wait {
        FlockArg::LockExclusive
    } else {
        FlockArg::LockExclusiveNonblock
    };
    match Flock::lock(d, arg) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::io(
            parent.display_path(name),
            std::io::Error::from(e),
        )),
    }
}
