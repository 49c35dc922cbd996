//! Kernel overlayfs mounts for live workspaces.
//!
//! The upper layer is a plain directory in the store, so writes run at native speed and
//! survive a crash of any ckptfs process; the lower layer is the store's read-only view.
//! `redirect_dir=on` lets users rename lower directories (no EXDEV); `metacopy=on` makes
//! chmod/chown/utimes (and rename) of a lower file copy its metadata only, not its bytes (git
//! freshens every object it would have written with utime(2): without it, `git add` of a fresh
//! workspace copied the whole object store up); `xino=on` shows every entry on the overlay's
//! st_dev with a persistent number: the lower view's numbers (below 2^62) with bit 63 set,
//! directories included (with `xino=off` overlayfs numbers directories in lookup order, new
//! after every cache drop); `index=on` keeps the names of a lower hardlink joined across
//! copy-up (the copy lives in the work dir's `index/`, linked under each name copied up; the
//! merge records the group, see `merge::links`). Both rest on the lower view's file handles
//! (FUSE export support), which `introduce_copies` keeps decodable across a restart of the
//! view's daemon; see docs/inodes.md.
//!
//! With `index=on` overlayfs records the lower root's file handle on the upper root
//! (`trusted.overlay.origin`) and refuses to mount that upper over another lower root: an
//! upper layer kept while its branch's base moves to another checkpoint must lose that xattr
//! and its work dir's `index/` first.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::error::{Error, Result};
use crate::fs::safe::{Dir, Kind};

/// Escapes a path for an overlay mount option (`,` `:` `\` are special).
fn escape(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Looks up, in the lower layer, the lower entry of every entry the upper layer holds (same
/// path), so the lower view knows their node ids before overlayfs asks it to decode the file
/// handles it stored at copy-up (`trusted.overlay.origin`, and the names of `index/`): a view
/// daemon started after those copies were made answers ESTALE for a node id it never handed
/// out, and overlayfs would then show a copy with its upper inode number and drop the index
/// entry that keeps a copied-up hardlink's lower names joined (docs/inodes.md). The upper is
/// the agent's: walked through held fds, never following a symlink, in either layer. Best
/// effort: what cannot be looked up is skipped.
fn introduce_copies(lower: &Path, upper: &Path) {
    fn walk(lower: &Dir, upper: &Dir, budget: &mut usize, depth: usize) {
        let Ok(names) = upper.entries() else { return };
        for name in names {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Ok(Some(m)) = upper.stat(&name) else {
                continue;
            };
            if m.kind() == Kind::CharDevice {
                continue; // a whiteout
            }
            let Ok(Some(l)) = lower.stat(&name) else {
                continue;
            };
            if m.is_dir() && l.is_dir() && depth < crate::store::tree::MAX_TREE_DEPTH {
                if let (Ok(u), Ok(l)) = (upper.open_dir(&name), lower.open_dir(&name)) {
                    walk(&l, &u, budget, depth + 1);
                }
            }
        }
    }
    let (Ok(l), Ok(u)) = (Dir::open(lower), Dir::open(upper)) else {
        return;
    };
    let t = std::time::Instant::now();
    let mut budget = INTRODUCE_LIMIT;
    walk(&l, &u, &mut budget, 1);
    log::debug!(
        "{}: lower entries of {} upper entries looked up in {:?}",
        upper.display(),
        INTRODUCE_LIMIT - budget,
        t.elapsed()
    );
}

/// Whether overlays mount with `index=on`, which keeps a copied-up hardlink's names joined.
/// Overlayfs then refuses (EBUSY) an upper layer that another overlay still uses, which is
/// what keeps one upper layer from being mounted twice (see `mount::mount_roots`).
const INDEX: bool = true;

/// Most upper entries [`introduce_copies`] looks at (about 20 µs each).
const INTRODUCE_LIMIT: usize = 1 << 20;

/// The layers of a workspace root mounted nested (see [`mount_overlay`]): the overlay's lower
/// and upper directories, and the name of the root's directory in both. `None` for an upper
/// made by a build before 2026-12 (`upper/B/ROOT/`, the overlay's upper directory itself).
fn nested_layers<'a>(lower: &'a Path, upper: &'a Path) -> Option<(&'a Path, &'a Path, &'a OsStr)> {
    let name = upper.file_name()?;
    let nested = crate::store::Store::upper_is_nested(upper, &name.to_string_lossy());
    (nested && lower.file_name()? == name)
        .then(|| Some((lower.parent()?, upper.parent()?, name)))
        .flatten()
}

/// Mounts the overlay of one workspace root at `target`. `source` names it in mountinfo
/// (`ckptfs:<store>:<branch>`); `lower` is the root's directory in the lower view, `upper`
/// its upper layer ([`Store::upper_dir`](crate::store::Store::upper_dir)).
///
/// Nested (every upper made since 2026-12): the overlay is stacked on the lower view's
/// checkpoint directory, the parent of `lower`, with `upper`'s parent as its upper directory,
/// mounted for an instant in a directory under `stage`; its `ROOT` subdirectory is then
/// bind-mounted at `target` and the staged mount detached (the bind keeps the overlay alive,
/// and unmounting `target` ends it). The workspace root is then a lower directory like any
/// other: overlayfs shows it with the lower view's number for it (xino), the same after a
/// fold, a remount or a switch back, where an overlay's own root shows its upper directory's
/// inode number, new with every fresh upper.
///
/// # Errors
/// The mount fails; for a nested one, also the bind.
pub fn mount_overlay(
    source: &str,
    target: &Path,
    lower: &Path,
    upper: &Path,
    work: &Path,
    stage: &Path,
) -> Result<()> {
    mount_overlay_indexed(source, target, lower, upper, work, stage, INDEX)
}

/// [`mount_overlay`], with `index=on` or not. Without it overlayfs allows an upper layer
/// another overlay still uses: only for one that can never write it again (see
/// `mount::mount_over_held`).
pub(crate) fn mount_overlay_indexed(
    source: &str,
    target: &Path,
    lower: &Path,
    upper: &Path,
    work: &Path,
    stage: &Path,
    index: bool,
) -> Result<()> {
    let Some((lower_top, upper_top, name)) = nested_layers(lower, upper) else {
        return mount_layers(source, target, lower, upper, work, index);
    };
    crate::fs::atomic::create_private_dir_all(stage)?;
    reap_stage(stage);
    let staged = stage.join(format!(
        "{}-{}",
        std::process::id(),
        STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    fs::create_dir(&staged).map_err(|e| Error::io(&staged, e))?;
    let bound = mount_layers(source, &staged, lower_top, upper_top, work, index).and_then(|()| {
        // `name` in the overlay's root: a directory of the lower checkpoint (the root), or its
        // copy in the upper top, which only ckptfs writes; the agent never sees this level.
        let from = staged.join(name);
        let r = mount(
            Some(&from),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| {
            Error::io_op(
                format!("mounting {} at {}", from.display(), target.display()),
                io::Error::from(e),
            )
        });
        if let Err(e) = umount2(&staged, MntFlags::MNT_DETACH) {
            log::warn!("{}: {e}", staged.display());
        }
        r
    });
    if let Err(e) = fs::remove_dir(&staged) {
        log::warn!("{}: {e}", staged.display());
    }
    bound
}

/// Detaches what a ckptfs process that died while mounting left staged under `stage` (its
/// overlay would hold its upper directory in use, and overlayfs refuses a second mount of an
/// upper with `index=on`). A staged mount is named `<pid>-<n>` by the process that made it.
fn reap_stage(stage: &Path) {
    let Ok(mounts) = crate::fs::mountinfo::mounts() else {
        return;
    };
    for m in mounts {
        let Ok(rest) = m.mountpoint.strip_prefix(stage) else {
            continue;
        };
        let pid = rest
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        let alive = pid
            .is_some_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None).is_ok());
        if pid.is_some() && !alive {
            log::warn!(
                "detaching {}, staged by a process that died",
                m.mountpoint.display()
            );
            if let Err(e) = detach_if_mounted(&m.mountpoint) {
                log::warn!("{e}");
            }
            let _ignored = fs::remove_dir(&m.mountpoint);
        }
    }
}

/// Mounts for [`mount_overlay`] a unique staging directory's name.
static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One overlay mount of these layers at `target`.
fn mount_layers(
    source: &str,
    target: &Path,
    lower: &Path,
    upper: &Path,
    work: &Path,
    index: bool,
) -> Result<()> {
    introduce_copies(lower, upper);
    // In a user namespace (an ordinary account's workspaces, docs/rootless.md) overlayfs
    // keeps its xattrs as user.overlay.* (`userxattr`) and refuses redirect_dir=on and
    // metacopy=on with it: a renamed lower directory is copied (EXDEV to the renamer, which
    // `mv` and git handle), a chmod copies the file up whole.
    let features = if crate::fs::userns::in_child_userns() {
        "userxattr"
    } else {
        "redirect_dir=on,metacopy=on"
    };
    let with = |index: &str| {
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},{features},index={index},xino=on",
            escape(lower),
            escape(upper),
            escape(work)
        );
        mount(
            Some(source),
            target,
            Some("overlay"),
            MsFlags::empty(),
            Some(opts.as_str()),
        )
    };
    // With index=on overlayfs refuses (EBUSY) an upper layer another overlay still uses: one
    // a process holds after `switch` or `umount` (a copy in another mount namespace, a tree
    // detached while in use). No fallback to index=off: two overlays on one upper layer
    // corrupt it, and the other one may be writable. The caller names the holders.
    let mounted = with(if index { "on" } else { "off" });
    mounted.map_err(|e| {
        Error::io_op(
            format!(
                "mounting overlay at {} (lower {})",
                target.display(),
                lower.display()
            ),
            io::Error::from(e),
        )
    })
}

/// How an unmount went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    Clean,
    /// Something still used the mount (a shell's cwd, an open file): it was detached and the
    /// kernel frees it when the last user goes.
    Detached,
}

/// Unmounts `target`; when busy, detaches it lazily instead of failing.
pub fn unmount(target: &Path) -> Result<Unmounted> {
    match umount2(target, MntFlags::empty()) {
        Ok(()) => Ok(Unmounted::Clean),
        Err(nix::errno::Errno::EBUSY) => umount2(target, MntFlags::MNT_DETACH)
            .map(|()| Unmounted::Detached)
            .map_err(|e| Error::io(target, io::Error::from(e))),
        Err(e) => Err(Error::io(target, io::Error::from(e))),
    }
}

/// Detaches `target` at once (the old tree stays alive for whoever still uses it).
pub fn detach(target: &Path) -> Result<()> {
    umount2(target, MntFlags::MNT_DETACH).map_err(|e| Error::io(target, io::Error::from(e)))
}

/// [`detach`], where nothing mounted there is no error: `false` then (a background detach
/// got there first: EINVAL; its directory is gone: ENOENT).
pub fn detach_if_mounted(target: &Path) -> Result<bool> {
    match umount2(target, MntFlags::MNT_DETACH) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(Error::io(target, io::Error::from(e))),
    }
}

/// Detaches every mount below `dir` (deepest first) and removes their then empty
/// directories. Returns how many were detached.
///
/// # Errors
/// Reading the mount table; a detach.
pub fn detach_all_under(dir: &Path) -> Result<usize> {
    let mut found: Vec<std::path::PathBuf> = crate::fs::mountinfo::mounts()?
        .into_iter()
        .filter(|m| m.mountpoint.starts_with(dir) && m.mountpoint != dir)
        .map(|m| m.mountpoint)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    let mut n = 0;
    for p in found {
        if detach_if_mounted(&p)? {
            n += 1;
        }
        let _ignored = fs::remove_dir(&p);
    }
    Ok(n)
}

/// Moves the mount at `from` to `to` (MS_MOVE): processes using it keep using it.
pub fn move_mount(from: &Path, to: &Path) -> Result<()> {
    mount(Some(from), to, None::<&str>, MsFlags::MS_MOVE, None::<&str>).map_err(|e| {
        Error::io_op(
            format!("moving the mount {} to {}", from.display(), to.display()),
            io::Error::from(e),
        )
    })
}

/// Detaches the mount at `target` and removes its (then empty) directory, in a child process
/// that is not waited for: the caller returns at once, whatever the teardown costs.
pub fn detach_in_background(target: &Path) {
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let spawned = std::process::Command::new(exe)
        .current_dir("/")
        .arg("internal-detach")
        .arg(target)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        log::warn!("detaching {} now ({e})", target.display());
        if let Err(e) = detach(target) {
            log::warn!("could not detach {}: {e}", target.display());
        }
        let _ignored = std::fs::remove_dir(target);
    }
}

/// Makes sure `what` (a command that mounts a workspace) may mount: root may; an ordinary
/// account's command is re-executed in the store's user namespace (made first when none is
/// live, see `fs::userns`), where it may, and this does not return then.
///
/// # Errors
/// One line naming what the machine does not give an ordinary account (`/dev/fuse` open to
/// it, user namespaces) and how to give it; making or entering the namespace.
pub fn require_mount_rights(store: &crate::store::Store, what: &str) -> Result<()> {
    if !crate::fs::userns::is_ordinary() {
        return Ok(());
    }
    crate::daemon::check_fuse().map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    crate::fs::userns::ensure_namespace(&store.namespace_record_path(), what)
}
