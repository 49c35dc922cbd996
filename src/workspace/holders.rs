//! Who is inside a tree: the processes whose working directory, root, an open file or a
//! mapping is under one of a set of directories (a workspace's mountpoints, or the old
//! overlays a switch or a fold set aside). A fold waits until nobody is inside; `status`
//! names who holds a workspace's upper layer unfolded, and who was left behind in a tree a
//! switch took away (see docs/workspaces.md).
//!
//! Read from `/proc/PID/{cwd,root,fd/*,maps}` as this process's mount namespace shows them:
//! a process in another mount namespace (a container) is seen by the paths of its own, and
//! so is not found that way. [`in_other_namespaces`] finds those: every namespace's mount
//! table, read once, for a mount of the workspace's overlay (by device), and each process
//! of a namespace that has one. [`seal`] makes a workspace read-only at its superblock
//! (every mount of it, in every namespace) before `switch` or `umount`, refusing, or ending
//! with `--kill`, the processes that would keep a writable view of the branch: a file open
//! for writing, a copy in another namespace. Processes that cannot be examined (gone
//! meanwhile, or without the rights) are skipped: root sees every process.

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
    let mut out = Vec::new();
    for (pid, dir) in crate::fs::processes() {
        if pid == own {
            continue;
        }
        if let Some((how, path)) = held_by(&dir, &inside, &prefixes) {
            let command = fs::read_to_string(dir.join("comm"))
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
/// it, and only in a namespace of this user namespace (a service's): one an ordinary user
/// made (`unshare -Urm`) writes through the copy from anywhere, so it always counts. Each
/// mount namespace is read once.
pub fn mounted_elsewhere(ours: &[PathBuf]) -> Option<(u32, PathBuf)> {
    let mine = crate::fs::mountinfo::mounts().ok()?;
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
    let own_user = fs::read_link("/proc/self/ns/user").ok();
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
            let Some(m) = crate::fs::mountinfo::parse_mountinfo(line).pop() else {
                continue;
            };
            if !devs.contains(&m.dev) {
                continue;
            }
            // Mounted at another path there: given to it (a container's bind mount); or
            // in a user namespace of its own.
            if !ours.contains(&m.mountpoint) || fs::read_link(dir.join("ns/user")).ok() != own_user
            {
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

/// The `major:minor` of the filesystems mounted at `mountpoints` in this mount namespace.
pub fn devices(mountpoints: &[PathBuf]) -> Vec<String> {
    let Ok(mine) = crate::fs::mountinfo::mounts() else {
        return Vec::new();
    };
    let mut devs: Vec<String> = mine
        .into_iter()
        .filter(|m| mountpoints.contains(&m.mountpoint))
        .map(|m| m.dev)
        .collect();
    devs.sort();
    devs.dedup();
    devs
}

/// Every process of every other mount namespace that has a mount `wanted` accepts: a copy
/// of a workspace's overlay that `unshare -m` (allowed to anyone with `-U`) or a container
/// made while it was mounted. Such a copy shares the overlay's superblock, so it writes the
/// branch's upper layer from wherever its processes' cwd is (nothing of theirs need be
/// inside), and it survives `switch` and `umount`: locked in a user namespace, not even
/// root can unmount it there. Only ending every process of the namespace frees it. `how` is
/// `mount namespace`, `path` the mount as that namespace shows it. Each namespace's mount
/// table is read once (from its first process), deduplicated by `/proc/PID/ns/mnt`.
pub fn in_other_namespaces(
    wanted: impl Fn(&crate::fs::mountinfo::MountEntry) -> bool,
) -> Vec<Holder> {
    in_namespaces(wanted, true)
}

/// [`in_other_namespaces`]; without `services`, a namespace of this user namespace (what
/// root made: a sandboxed service, `unshare -m` as root, a container) counts only by its
/// processes inside a mount of it (by cwd, root, open file or mapping), as [`holders`]
/// finds them. Its processes cannot have made it as the agent (an ordinary user makes a
/// mount namespace only in a user namespace of its own), and a copy nobody is in is made
/// read-only with the workspace ([`seal`]): refusing would stop every switch for each
/// service started while the room was mounted.
fn in_namespaces(
    wanted: impl Fn(&crate::fs::mountinfo::MountEntry) -> bool,
    services: bool,
) -> Vec<Holder> {
    let own_ns = fs::read_link("/proc/self/ns/mnt").ok();
    let own_user = fs::read_link("/proc/self/ns/user").ok();
    let mut spaces: std::collections::HashMap<PathBuf, Vec<u32>> = Default::default();
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(ns) = fs::read_link(e.path().join("ns/mnt")) else {
            continue;
        };
        if Some(&ns) != own_ns.as_ref() {
            spaces.entry(ns).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    for pids in spaces.values() {
        // A process may exit meanwhile: the first one whose table reads stands for all.
        let Some(table) = pids
            .iter()
            .find_map(|p| fs::read_to_string(format!("/proc/{p}/mountinfo")).ok())
        else {
            continue;
        };
        let Some(m) = table
            .lines()
            .filter_map(|l| crate::fs::mountinfo::parse_mountinfo(l).pop())
            .find(|m| wanted(m))
        else {
            continue;
        };
        let user_ns = pids
            .iter()
            .find_map(|p| fs::read_link(format!("/proc/{p}/ns/user")).ok());
        if !services && user_ns == own_user {
            let inside = |p: &Path| p.starts_with(&m.mountpoint);
            let prefix = [m.mountpoint.display().to_string()];
            for &pid in pids {
                if let Some((how, path)) =
                    held_by(Path::new(&format!("/proc/{pid}")), &inside, &prefix)
                {
                    out.push(Holder {
                        pid,
                        command: command_of(pid),
                        how,
                        path,
                    });
                }
            }
            continue;
        }
        for &pid in pids {
            out.push(Holder {
                pid,
                command: command_of(pid),
                how: "mount namespace",
                path: m.mountpoint.clone(),
            });
        }
    }
    out.sort_by_key(|h| h.pid);
    out
}

/// `/proc/PID/comm`, or empty.
fn command_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

/// The processes of other mount namespaces holding a mount of one of the filesystems
/// mounted here at `mountpoints` (see [`in_other_namespaces`]; in a namespace of this user
/// namespace, only those inside it), those of `cgroups` (the workspace's, where its agent
/// runs) first.
pub fn foreign(mountpoints: &[PathBuf], cgroups: &[PathBuf]) -> Vec<Holder> {
    let devs = devices(mountpoints);
    if devs.is_empty() {
        return Vec::new();
    }
    agent_first(in_namespaces(|m| devs.contains(&m.dev), false), cgroups)
}

/// `found` with the processes of `cgroups` (and their descendants) first, each part by pid.
pub fn agent_first(mut found: Vec<Holder>, cgroups: &[PathBuf]) -> Vec<Holder> {
    let mut agent = std::collections::HashSet::new();
    for c in cgroups {
        if let Err(e) = super::freeze::collect_pids(c, &mut agent) {
            log::debug!("{e}");
        }
    }
    found.sort_by_key(|h| (!agent.contains(&h.pid), h.pid));
    found
}

/// One line naming `holders` (the first few) for an error message.
pub fn describe(holders: &[Holder]) -> String {
    const SHOWN: usize = 5;
    let mut parts: Vec<String> = holders
        .iter()
        .take(SHOWN)
        .map(|h| {
            format!(
                "pid {} ({}, {} {})",
                h.pid,
                h.command,
                h.how,
                h.path.display()
            )
        })
        .collect();
    if holders.len() > SHOWN {
        parts.push(format!("and {} more", holders.len() - SHOWN));
    }
    parts.join(", ")
}

/// How long [`kill`] waits for the processes it ended to be gone.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Ends `holders` (`--kill`): SIGKILL to each, then waits until each is gone or a zombie
/// (an exited process has left its mount namespace and closed its files). A process gone
/// already is no error; nor is a pid whose command is not the holder's any more (gone, the
/// pid reused): it is not signalled.
///
/// # Errors
/// `Conflict` naming the processes still running after [`KILL_WAIT`], or one that could not
/// be signalled.
pub fn kill(holders: &[Holder]) -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let own = std::process::id();
    for h in holders.iter().filter(|h| h.pid != own) {
        let Ok(pid) = i32::try_from(h.pid) else {
            continue;
        };
        // Gone since it was found, its pid perhaps another process's now: not signalled.
        if command_of(h.pid) != h.command {
            continue;
        }
        log::info!(
            "killing pid {} ({}): {} {}",
            h.pid,
            h.command,
            h.how,
            h.path.display()
        );
        match kill(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => {
                return Err(Error::Conflict(format!(
                    "could not kill pid {} ({}): {e}",
                    h.pid, h.command
                )))
            }
        }
    }
    let deadline = std::time::Instant::now() + KILL_WAIT;
    loop {
        let alive: Vec<Holder> = holders
            .iter()
            .filter(|h| h.pid != own && running(h.pid) && command_of(h.pid) == h.command)
            .cloned()
            .collect();
        if alive.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Conflict(format!(
                "still running {}s after SIGKILL: {}",
                KILL_WAIT.as_secs(),
                describe(&alive)
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn running(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S ...`: the state follows the last `)` (comm may hold one).
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Makes the filesystem mounted at `target` read-only, or writable again: `MS_REMOUNT`
/// without `MS_BIND` reconfigures the superblock, so every mount of it in every mount
/// namespace follows (a copy in another user namespace cannot make it writable again: that
/// takes root of the namespace the filesystem was mounted in). The kernel refuses (EBUSY)
/// while any file of it is open for writing (or deleted while open) through any mount.
///
/// # Errors
/// The remount; [`is_busy`] tells a file open for writing.
pub fn set_superblock_readonly(target: &Path, readonly: bool) -> Result<()> {
    let mut flags = MsFlags::MS_REMOUNT;
    if readonly {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(None::<&str>, target, None::<&str>, flags, None::<&str>).map_err(|e| {
        Error::io_op(
            format!(
                "making the filesystem mounted at {} {}",
                target.display(),
                if readonly { "read-only" } else { "writable" }
            ),
            io::Error::from(e),
        )
    })
}

/// Makes the overlays mounted at `mountpoints` (a workspace's, before `switch` takes them
/// away or `umount` unmounts them) read-only in every mount namespace
/// ([`set_superblock_readonly`]), so that no process keeps a writable view of the branch:
/// a shell left inside, a copy of the mount another namespace holds, a file descriptor.
///
/// - A file open for writing makes the kernel refuse: its processes are named, or ended
///   with `kill` and the remount tried again.
/// - Then the processes of other mount namespaces holding a copy (see [`foreign`]) are
///   named, or ended with `kill`: their copy is read-only now, but it keeps the overlay (and
///   its upper layer) alive where nothing of ours can unmount it, and a later mount of the
///   branch, or its parked tree made writable again, would give them back a writable view.
///   The check runs after the remount, so a namespace made meanwhile holds a read-only copy.
///
/// `what` names the command for the messages (`switch`, `umount`). On refusal the overlays
/// are made writable again: nothing changed.
///
/// # Errors
/// `Conflict` naming the processes (and how to proceed); a remount that fails otherwise.
pub fn seal(mountpoints: &[PathBuf], cgroups: &[PathBuf], kill: bool, what: &str) -> Result<()> {
    let mut done: Vec<&PathBuf> = Vec::new();
    let undo = |done: &[&PathBuf]| {
        for mp in done {
            if let Err(e) = set_superblock_readonly(mp, false) {
                log::warn!("{e}");
            }
        }
    };
    for mp in mountpoints {
        let mut tried_kill = false;
        loop {
            match set_superblock_readonly(mp, true) {
                Ok(()) => break,
                Err(e) if is_busy(&e) => {
                    let inside = holders(mountpoints);
                    let mut writers: Vec<Holder> = inside
                        .iter()
                        .filter(|h| h.how == "open for writing")
                        .cloned()
                        .collect();
                    if writers.is_empty() {
                        // An unlinked file still open, or a writer in another namespace.
                        writers = inside;
                        writers.extend(foreign(mountpoints, cgroups));
                    }
                    let writers = agent_first(writers, cgroups);
                    if kill && !tried_kill && !writers.is_empty() {
                        tried_kill = true;
                        kill_or_undo(&writers, &done, &undo)?;
                        continue;
                    }
                    undo(&done);
                    return Err(written_through(what, mp, &writers));
                }
                Err(e) => {
                    undo(&done);
                    return Err(e);
                }
            }
        }
        done.push(mp);
    }
    let outside = foreign(mountpoints, cgroups);
    if outside.is_empty() {
        return Ok(());
    }
    if kill {
        kill_or_undo(&outside, &done, &undo)?;
        let left = foreign(mountpoints, cgroups);
        if left.is_empty() {
            return Ok(());
        }
        undo(&done);
        return Err(Error::Conflict(format!(
            "{what}: still held from another mount namespace after --kill: {}",
            describe(&left)
        )));
    }
    undo(&done);
    Err(held_outside(what, &outside))
}

/// The refusal of [`seal`] for a file open for writing through `mp` (by `writers`).
fn written_through(what: &str, mp: &Path, writers: &[Holder]) -> Error {
    Error::Conflict(format!(
        "{what}: {} is written through right now ({}); the branch must not stay writable once \
         the workspace leaves it: end {}, or use --kill",
        mp.display(),
        if writers.is_empty() {
            "no process found: a file open for writing, or deleted while open".to_string()
        } else {
            describe(writers)
        },
        if writers.len() == 1 { "it" } else { "them" }
    ))
}

/// The refusal of [`seal`] for a copy of the workspace in another mount namespace.
fn held_outside(what: &str, outside: &[Holder]) -> Error {
    Error::Conflict(format!(
        "{what}: the workspace is mounted in another mount namespace too, where it would stay \
         writable after the {what} and keep the branch's upper layer in use: {}; end {}, or use \
         --kill",
        describe(outside),
        if outside.len() == 1 { "it" } else { "them" }
    ))
}

/// What [`seal`] would refuse, asked without changing anything (a switch asks it before the
/// checkpoint `--checkpoint-first` records, so a refused switch records none): a file open
/// for writing through `mountpoints` (as this namespace's paths show it), a copy of the
/// workspace in another mount namespace. [`seal`] stays the authority (the kernel's answer).
///
/// # Errors
/// The `Conflict` [`seal`] would return.
pub fn check_sealable(mountpoints: &[PathBuf], cgroups: &[PathBuf], what: &str) -> Result<()> {
    let writers: Vec<Holder> = holders(mountpoints)
        .into_iter()
        .filter(|h| h.how == "open for writing")
        .collect();
    if let Some(w) = writers.first() {
        let mp = mountpoints
            .iter()
            .find(|m| w.path.starts_with(m))
            .map_or_else(|| w.path.clone(), PathBuf::clone);
        return Err(written_through(what, &mp, &agent_first(writers, cgroups)));
    }
    let outside = foreign(mountpoints, cgroups);
    if outside.is_empty() {
        Ok(())
    } else {
        Err(held_outside(what, &outside))
    }
}

/// [`kill`], undoing the remounts `done` when it fails.
fn kill_or_undo(holders: &[Holder], done: &[&PathBuf], undo: &impl Fn(&[&PathBuf])) -> Result<()> {
    kill(holders).inspect_err(|_| undo(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32) -> Holder {
        Holder {
            pid,
            command: "sh".into(),
            how: "cwd",
            path: PathBuf::from("/room"),
        }
    }

    #[test]
    fn a_zombie_is_not_running() {
        assert!(running(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        // Exited but not reaped yet: a zombie, which has left its namespaces.
        let mut exited = false;
        for _ in 0..2000 {
            if !running(pid) {
                exited = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(exited, "pid {pid} still running");
        c.wait().unwrap();
        assert!(!running(pid));
    }

    #[test]
    fn describe_names_the_first_few() {
        let all: Vec<Holder> = (1..=7).map(holder).collect();
        let d = describe(&all);
        assert!(d.starts_with("pid 1 (sh, cwd /room), pid 2 "), "{d}");
        assert!(d.ends_with("and 2 more"), "{d}");
        assert!(!d.contains("pid 6"), "{d}");
    }

    #[test]
    fn nothing_matches_nothing() {
        assert!(in_other_namespaces(|_| false).is_empty());
        assert!(foreign(&[PathBuf::from("/nowhere/mounted")], &[]).is_empty());
    }
}
