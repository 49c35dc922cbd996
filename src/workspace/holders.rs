//! Who is inside a tree: the processes whose working directory, root, an open file or a
//! mapping is under one of a set of directories (a workspace's mountpoints, or the old
//! overlays a switch or a fold set aside). A fold waits until nobody is inside; `status`
//! names who holds a workspace's upper layer unfolded, and who was left behind in a tree a
//! switch took away (see docs/workspaces.md).
//!
//! Read from `/proc/PID/{cwd,root,fd/*,maps}` as this process's mount namespace shows them:
//! a process in another mount namespace (a container) is seen by the paths of its own, and
//! so is not found. Processes that cannot be examined (gone meanwhile, or without the
//! rights) are skipped: root sees every process of its namespace.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use serde::Serialize;

use crate::error::{Error, Result};

/// A process inside a tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// What of it is inside: `cwd`, `root`, `open file`, `open for writing` or `mapping`.
    pub how: &'static str,
    /// The path inside (as this process sees it).
    pub path: PathBuf,
}

/// Every process (but this one) with its cwd, root, an open file or a mapping under one of
/// `dirs`, one entry per process: an open-for-writing file first, else the first found.
pub fn holders(dirs: &[PathBuf]) -> Vec<Holder> {
    if dirs.is_empty() {
        return Vec::new();
    }
    let inside = |p: &Path| dirs.iter().any(|d| p.starts_with(d));
    let prefixes: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let own = std::process::id();
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == own {
            continue;
        }
        if let Some((how, path)) = held_by(&e.path(), &inside, &prefixes) {
            let command = fs::read_to_string(e.path().join("comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_default();
            out.push(Holder {
                pid,
                command,
                how,
                path,
            });
        }
    }
    out.sort_by_key(|h| h.pid);
    out
}

/// What of process `/proc/PID` (`dir`) is inside.
fn held_by(
    dir: &Path,
    inside: &impl Fn(&Path) -> bool,
    prefixes: &[String],
) -> Option<(&'static str, PathBuf)> {
    let mut found = None;
    if let Ok(rd) = fs::read_dir(dir.join("fd")) {
        for fd in rd.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else {
                continue;
            };
            if !inside(&target) {
                continue;
            }
            let flags = fs::read_to_string(dir.join("fdinfo").join(fd.file_name()))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("flags:"))
                        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                });
            // O_WRONLY or O_RDWR.
            if flags.is_some_and(|f| f & 3 != 0) {
                return Some(("open for writing", target));
            }
            found.get_or_insert(("open file", target));
        }
    }
    if found.is_some() {
        return found;
    }
    for (link, how) in [("cwd", "cwd"), ("root", "root")] {
        if let Ok(target) = fs::read_link(dir.join(link)) {
            if inside(&target) {
                return Some((how, target));
            }
        }
    }
    let maps = fs::read_to_string(dir.join("maps")).ok()?;
    // Most processes map nothing of ours: one substring search each before parsing lines.
    if !prefixes.iter().any(|p| maps.contains(p.as_str())) {
        return None;
    }
    maps.lines().find_map(|l| {
        let path = Path::new(l.splitn(6, ' ').nth(5)?.trim_start());
        inside(path).then(|| ("mapping", path.to_path_buf()))
    })
}

/// Makes the mount at `target` read-only, or writable again (`MS_REMOUNT | MS_BIND`: this
/// mount only; the filesystem and other mounts of it keep their mode). Making it read-only
/// fails with `EBUSY` while a file is open for writing through it.
pub fn set_mount_readonly(target: &Path, readonly: bool) -> Result<()> {
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
    if readonly {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(|e| {
        Error::io_op(
            format!(
                "making the mount at {} {}",
                target.display(),
                if readonly { "read-only" } else { "writable" }
            ),
            io::Error::from(e),
        )
    })
}

/// Whether making a mount read-only failed because a file is open for writing through it.
pub fn is_busy(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
}

/// Whether anything uses the mount at `target` (a cwd, a root, an open file, a mapping: any
/// reference to it), asked of the kernel: `umount2(MNT_EXPIRE)` answers EBUSY for a mount in
/// use and EAGAIN for one not in use, which it marks expired; a second call with no use in
/// between would unmount it. Any use clears the mark (the kernel's `mntput`), so after an
/// EAGAIN this stats the mountpoint, leaving the mount as it was. `Ok(false)` also when it is
/// not mounted any more.
///
/// # Errors
/// `Conflict` when the call unmounted it (something else had marked it expired and nothing
/// used it since).
pub fn mount_in_use(target: &Path) -> Result<bool> {
    use nix::mount::{umount2, MntFlags};
    match umount2(target, MntFlags::MNT_EXPIRE) {
        Err(nix::errno::Errno::EBUSY) => Ok(true),
        Err(nix::errno::Errno::EAGAIN) => {
            // Clears the expiry mark (a lookup through the mount puts a reference to it).
            let _ignored = fs::metadata(target);
            Ok(false)
        }
        Err(nix::errno::Errno::EINVAL) => Ok(false),
        Ok(()) => Err(Error::Conflict(format!(
            "{} was unmounted (it was marked expired and unused); mount it again",
            target.display()
        ))),
        Err(e) => {
            log::debug!("asking whether {} is in use: {e}", target.display());
            Ok(true)
        }
    }
}

/// [`mount_in_use`] for a mount set aside, which is to go anyway: unmounted is not in use.
pub fn set_aside_in_use(target: &Path) -> bool {
    mount_in_use(target).unwrap_or(false)
}

/// Another mount of the filesystem mounted at one of `ours` that a fold or a switch cannot
/// reach (its processes are not found by our paths, and the kernel counts its users apart):
/// a bind mount of a workspace here, or one at another path in another mount namespace (a
/// container given the room). `(pid, mountpoint as that process sees it)`. A copy at the
/// same path in another namespace (what `unshare -m` or a sandboxed service copies, or the
/// kernel propagates, of every mount) counts only while a process of that namespace is inside
/// it. Each mount namespace is read once.
pub fn mounted_elsewhere(ours: &[PathBuf]) -> Option<(u32, PathBuf)> {
    let mine = crate::mountinfo::mounts().ok()?;
    let devs: Vec<String> = mine
        .iter()
        .filter(|m| ours.contains(&m.mountpoint))
        .map(|m| m.dev.clone())
        .collect();
    if devs.is_empty() {
        return None;
    }
    if let Some(m) = mine
        .iter()
        .find(|m| devs.contains(&m.dev) && !ours.contains(&m.mountpoint))
    {
        return Some((std::process::id(), m.mountpoint.clone()));
    }
    let own_ns = fs::read_link("/proc/self/ns/mnt").ok();
    // Namespace -> its processes; the first one's mountinfo stands for all.
    let mut spaces: std::collections::HashMap<PathBuf, Vec<(u32, PathBuf)>> =
        std::collections::HashMap::new();
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(ns) = fs::read_link(e.path().join("ns/mnt")) else {
            continue;
        };
        if Some(&ns) != own_ns.as_ref() {
            spaces.entry(ns).or_default().push((pid, e.path()));
        }
    }
    for procs in spaces.values() {
        let Some((pid, dir)) = procs.first() else {
            continue;
        };
        let Ok(text) = fs::read_to_string(dir.join("mountinfo")) else {
            continue;
        };
        for line in text.lines() {
            let Some(m) = crate::mountinfo::parse_mountinfo(line).pop() else {
                continue;
            };
            if !devs.contains(&m.dev) {
                continue;
            }
            // Mounted at another path there: given to it (a container's bind mount).
            if !ours.contains(&m.mountpoint) {
                return Some((*pid, m.mountpoint));
            }
            let inside = |p: &Path| p.starts_with(&m.mountpoint);
            let prefix = [m.mountpoint.display().to_string()];
            if let Some((pid, _)) = procs
                .iter()
                .find(|(_, d)| held_by(d, &inside, &prefix).is_some())
            {
                return Some((*pid, m.mountpoint));
            }
        }
    }
    None
}
