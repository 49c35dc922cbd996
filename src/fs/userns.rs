//! The user namespace an ordinary account's workspaces live in (docs/rootless.md).
//!
//! Root mounts workspaces in the machine's own namespaces. An ordinary account cannot mount
//! kernel overlayfs there, but it can make a user + mount namespace of its own, where it is
//! root over what it owns, and mount overlayfs (with `userxattr`) and FUSE in it. ckptfs makes
//! one such namespace per store and keeps it with a small **holder** process
//! (`ckptfs internal-holder`, [`hold`]) that only waits; its pid and start time are recorded in
//! the store (`run/namespace.json`). Every later command on that store by the same account
//! enters it ([`enter_if_held`]: ckptfs re-executes itself, and the new process calls
//! `setns` on the holder's namespaces before it starts any thread, [`enter_from_env`]), so
//! the workspaces, their lower views and whatever `exec`, `turn` and `agent` start are all in
//! one place, at the rooms' own absolute paths.
//!
//! The namespace maps uid 0 to the account itself (so the store, the account's, is root's
//! there) and, when the account has a subordinate range in `/etc/subuid` and `/etc/subgid`
//! (as rootless podman uses, through the setuid `newuidmap`/`newgidmap`), ids 1 to N to that
//! range. An agent then runs as one of those ids: an id of the machine that owns nothing of
//! the operator's, so the store, `0700` and the operator's, is out of its reach. Without a
//! range only uid 0 is mapped, and an agent can only run as the operator.
//!
//! In a namespace ([`in_child_userns`]) ckptfs is root there but not on the machine: overlays
//! take `userxattr` and keep their xattrs as `user.overlay.*`; mounts live under
//! `/tmp/ckptfs-UID` (root's `/run` is not writable there); an owner the namespace does not
//! map shows as the overflow uid, which the trust rules take for root's above a store and for
//! programs, never for the store itself (`store::trust`).

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::sched::CloneFlags;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Set on the re-executed ckptfs: `PID:START` of the holder whose namespaces it enters.
pub const ENTER_ENV: &str = "CKPTFS_ENTER_NAMESPACE";

/// The name of the holder's subcommand.
pub const HOLDER_COMMAND: &str = "internal-holder";

/// Whether this process is in a user namespace other than the machine's (its uid map is not
/// the identity over every id).
pub fn in_child_userns() -> bool {
    match IN_CHILD.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let child = fs::read_to_string("/proc/self/uid_map")
                .map(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
                .unwrap_or(false);
            IN_CHILD.store(if child { 2 } else { 1 }, Ordering::Relaxed);
            child
        }
    }
}

/// [`in_child_userns`]'s answer once asked (0: not yet), asked again after `setns`.
static IN_CHILD: AtomicU8 = AtomicU8::new(0);

/// Whether this process is an ordinary account of the machine: not root, in no namespace of
/// its own.
pub fn is_ordinary() -> bool {
    !nix::unistd::geteuid().is_root() && !in_child_userns()
}

/// The machine's uid of this namespace's uid 0 (this process's own uid outside any).
pub fn outer_uid() -> u32 {
    let own = nix::unistd::geteuid().as_raw();
    if !in_child_userns() {
        return own;
    }
    fs::read_to_string("/proc/self/uid_map")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.first() == Some(&"0")).then(|| f.get(1)?.parse().ok())?
            })
        })
        .unwrap_or(own)
}

/// The uid an owner the namespace does not map shows as (`kernel.overflowuid`, 65534).
pub fn overflow_uid() -> u32 {
    fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

/// Whether `uid` is mapped in this process's user namespace.
pub fn is_mapped(uid: u32) -> bool {
    id_mapped("uid_map", uid)
}

/// Whether `gid` is mapped in this process's user namespace.
pub fn is_gid_mapped(gid: u32) -> bool {
    id_mapped("gid_map", gid)
}

fn id_mapped(file: &str, uid: u32) -> bool {
    let Ok(m) = fs::read_to_string(format!("/proc/self/{file}")) else {
        return true;
    };
    m.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        matches!(f.as_slice(), [inside, _, count] if u64::from(uid) >= *inside && u64::from(uid) < inside + count)
    })
}

/// Where ckptfs keeps its own mounts (`Store::mounts_dir`'s parent): `/run/ckptfs`, or in a
/// user namespace, where root's `/run` is not writable, `/tmp/ckptfs-UID` (UID: the
/// machine's uid of the namespace's root).
pub fn mounts_base() -> PathBuf {
    if in_child_userns() {
        PathBuf::from(format!("/tmp/ckptfs-{}", outer_uid()))
    } else {
        PathBuf::from(crate::store::MOUNTS_BASE)
    }
}

/// Overlayfs's own xattrs' prefix on upper layers: `trusted.overlay.`, or in a user
/// namespace (`userxattr`) `user.overlay.`.
pub fn overlay_xattr_prefix() -> &'static [u8] {
    if in_child_userns() {
        b"user.overlay."
    } else {
        b"trusted.overlay."
    }
}

/// A holder process, as recorded: its pid and its start time (clock ticks after boot,
/// `/proc/PID/stat` field 22), so a pid reused by another process is never taken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub start: u64,
}

/// The start time of process `pid`, unless it is gone (or a zombie, gone but not yet reaped).
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(rest.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

impl Holder {
    /// Whether the recorded process is still the holder: alive, started when recorded, the
    /// invoking account's, and in a user namespace other than this process's.
    fn is_live(&self) -> bool {
        if start_time(self.pid) != Some(self.start) {
            return false;
        }
        let me = nix::unistd::geteuid().as_raw();
        let owned = fs::metadata(format!("/proc/{}", self.pid)).is_ok_and(|m| m.uid() == me);
        let other_ns = match (
            fs::read_link(format!("/proc/{}/ns/user", self.pid)),
            fs::read_link("/proc/self/ns/user"),
        ) {
            (Ok(theirs), Ok(ours)) => theirs != ours,
            _ => false,
        };
        owned && other_ns
    }
}

/// The holder recorded at `record`, when it is still running.
pub fn live_holder(record: &Path) -> Option<Holder> {
    let recorded = fs::read(record)
        .ok()
        .and_then(|b| serde_json::from_slice::<Holder>(&b).ok());
    match recorded {
        Some(h) if h.is_live() => Some(h),
        // The holder was killed while workspaces were mounted: the namespace lives on in the
        // store's view daemons, through which it is entered (to unmount, mainly).
        Some(_) => orphaned(record),
        None => None,
    }
}

/// A process of this account still in the namespace of a store whose holder is gone: one of
/// its lower view daemons (`ckptfs browse STORE .../lower`), in a user namespace other than
/// this process's.
fn orphaned(record: &Path) -> Option<Holder> {
    let store = record.parent()?.parent()?;
    own_processes().into_iter().find_map(|(pid, _, argv)| {
        let ours = argv.get(1).is_some_and(|a| a == b"browse")
            && argv.get(2).is_some_and(|a| a == store.as_os_str().as_bytes());
        let h = Holder {
            pid,
            start: start_time(pid)?,
        };
        (ours && h.is_live()).then(|| {
            log::warn!(
                "the namespace holder of {} is gone: entering its namespace through view daemon {pid}",
                store.display()
            );
            h
        })
    })
}

/// This account's processes: pid, directory in `/proc`, and command line (its arguments).
fn own_processes() -> Vec<(u32, PathBuf, Vec<Vec<u8>>)> {
    let me = nix::unistd::geteuid().as_raw();
    super::processes()
        .into_iter()
        .filter(|(_, dir)| fs::metadata(dir).is_ok_and(|m| m.uid() == me))
        .filter_map(|(pid, dir)| {
            let cmd = fs::read(dir.join("cmdline")).ok()?;
            let argv = cmd.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
            Some((pid, dir, argv))
        })
        .collect()
}

/// Set by the commands that work where the account's shell is (the read-only views): no
/// later store opening enters a namespace.
static OUTSIDE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps this command outside the account's workspace namespaces (see [`enter_if_held`]).
pub fn stay_outside() {
    OUTSIDE.store(true, Ordering::Relaxed);
}

/// For an ordinary account: when the store whose holder record is `record` has a live
/// namespace, re-executes this command inside it (does not return then). Nothing for root, in
/// a namespace already, or with no live holder.
///
/// # Errors
/// The re-execution failing.
pub fn enter_if_held(record: &Path) -> Result<()> {
    if !is_ordinary() || OUTSIDE.load(Ordering::Relaxed) {
        return Ok(());
    }
    match live_holder(record) {
        Some(h) => Err(reexec_into(h)),
        None => Ok(()),
    }
}

/// For an ordinary account: makes the store's namespace (a holder recorded at `record`) unless
/// one is live, then re-executes this command inside it (does not return then). `what` names
/// the command for errors. Nothing for root or in a namespace already.
///
/// # Errors
/// What the namespace needs and this machine does not give (user namespaces, `/dev/fuse`),
/// each in one line saying how to give it; the holder failing to start; re-executing.
pub fn ensure_namespace(record: &Path, what: &str) -> Result<()> {
    if !is_ordinary() {
        return Ok(());
    }
    let h = match live_holder(record) {
        Some(h) => h,
        None => {
            check_userns(what)?;
            spawn_holder(record, what)?
        }
    };
    Err(reexec_into(h))
}

/// Refuses, in one line, a machine where an ordinary account may not make user namespaces.
///
/// # Errors
/// `Invalid` naming the setting that forbids them.
pub fn check_userns(what: &str) -> Result<()> {
    let read = |p: &str| {
        fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let refuse = |why: &str| {
        Err(Error::Invalid(format!(
            "{what}: user namespaces are not open to this account ({why}); a workspace without \
             root is mounted in one (see docs/rootless.md)"
        )))
    };
    if read("/proc/sys/user/max_user_namespaces") == Some(0) {
        return refuse("sysctl user.max_user_namespaces is 0: as root, `sysctl -w user.max_user_namespaces=15000`");
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return refuse("sysctl kernel.unprivileged_userns_clone is 0: as root, `sysctl -w kernel.unprivileged_userns_clone=1`");
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return refuse("AppArmor restricts them: as root, `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile allowing `userns` for ckptfs");
    }
    Ok(())
}

/// A subordinate range of `/etc/subuid` or `/etc/subgid` for `name` or `id`: its first id and
/// its length (the first line that names the account).
pub fn subordinate_range(file: &Path, name: Option<&str>, id: u32) -> Option<(u64, u64)> {
    let text = fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let who = f.next()?;
        let start: u64 = f.next()?.trim().parse().ok()?;
        let count: u64 = f.next()?.trim().parse().ok()?;
        let ours = Some(who) == name || who.parse::<u32>().ok() == Some(id);
        (ours && count > 0).then_some((start, count))
    })
}

/// This account's subordinate uid and gid ranges, when it has both and `newuidmap` and
/// `newgidmap` are installed (what the holder's namespace maps beyond the account itself).
/// The account's name picks the lines (newuidmap, setuid root, checks the ranges are the
/// caller's); where the user database is not readable to the account, its login's name.
pub fn subordinate_ids() -> Option<((u64, u64), (u64, u64))> {
    let uid = nix::unistd::geteuid().as_raw();
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok());
    let su = subordinate_range(Path::new("/etc/subuid"), name.as_deref(), uid)?;
    let sg = subordinate_range(Path::new("/etc/subgid"), name.as_deref(), uid)?;
    ID_MAP_TOOLS
        .iter()
        .all(|t| super::programs::system_program(t).is_file())
        .then_some((su, sg))
}

/// The setuid helpers that map a subordinate range (Debian's `uidmap`).
const ID_MAP_TOOLS: [&str; 2] = ["newuidmap", "newgidmap"];

fn write_maps(pid: u32) -> Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    if let Some((su, sg)) = subordinate_ids() {
        for (tool, own, (start, count)) in [(ID_MAP_TOOLS[0], uid, su), (ID_MAP_TOOLS[1], gid, sg)]
        {
            let tool = super::programs::system_program(tool);
            let out = Command::new(&tool)
                .arg(pid.to_string())
                .args([
                    "0",
                    &own.to_string(),
                    "1",
                    "1",
                    &start.to_string(),
                    &count.to_string(),
                ])
                .env_clear()
                .env("PATH", super::programs::SYSTEM_PATH)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| Error::io(&tool, e))?;
            if !out.status.success() {
                return Err(Error::Invalid(format!(
                    "{} refused the subordinate range {start}:{count}: {}",
                    tool.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        return Ok(());
    }
    log::info!(
        "no subordinate ids for this account (/etc/subuid, /etc/subgid, newuidmap): the \
         namespace maps only its own id"
    );
    for (file, text) in [
        ("setgroups", "deny".to_string()),
        ("uid_map", format!("0 {uid} 1\n")),
        ("gid_map", format!("0 {gid} 1\n")),
    ] {
        let p = PathBuf::from(format!("/proc/{pid}/{file}"));
        fs::write(&p, text).map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

/// Starts the holder, maps its ids and records it (never over another's live record: two
/// commands starting one at once keep the first recorded, and the other holder exits).
fn spawn_holder(record: &Path, what: &str) -> Result<Holder> {
    let exe = PathBuf::from("/proc/self/exe");
    // The store's path rides on the holder's command line, for `enter_early` to match.
    let store = record
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut child = Command::new(&exe)
        .arg(HOLDER_COMMAND)
        .arg(&store)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io_op("starting the namespace holder", e))?;
    let pid = child.id();
    let (Some(mut to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::Invalid("namespace holder: no pipes".into()));
    };
    let mut from = BufReader::new(from);
    let mut line = String::new();
    let mut said = |line: &mut String| -> String {
        line.clear();
        let _ignored = from.read_line(line);
        line.trim().to_string()
    };
    let fail = |child: &mut std::process::Child, why: String| {
        let _ignored = child.kill();
        let _ignored = child.wait();
        Error::Invalid(format!("{what}: making the workspace namespace: {why}"))
    };
    let first = said(&mut line);
    if first.starts_with("unshare(") {
        let _ignored = child.wait();
        return Err(Error::Invalid(format!(
            "{what}: user namespaces are not open to this account ({first}): a chroot, a \
             container that forbids them, or a setting (sysctl user.max_user_namespaces, \
             kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns) \
             keeps it from making the one its workspaces are mounted in (docs/rootless.md)"
        )));
    }
    if first != "unshared" {
        return Err(fail(&mut child, first));
    }
    if let Err(e) = write_maps(pid) {
        return Err(fail(&mut child, e.to_string()));
    }
    if let Err(e) = to.write_all(b"mapped\n") {
        return Err(fail(&mut child, e.to_string()));
    }
    let second = said(&mut line);
    if second != "ready" {
        return Err(fail(&mut child, second));
    }
    let Some(start) = start_time(pid) else {
        return Err(fail(&mut child, "it exited".into()));
    };
    let h = Holder { pid, start };
    let bytes = serde_json::to_vec(&h).map_err(|e| Error::Invalid(e.to_string()))?;
    if let Some(dir) = record.parent() {
        super::atomic::create_private_dir_all(dir)?;
    }
    // A record of a holder that is gone is removed first; a live one (another command's, just
    // started) wins.
    if let Some(other) = live_holder(record) {
        let _ignored = child.kill();
        let _ignored = child.wait();
        return Ok(other);
    }
    let _ignored = fs::remove_file(record);
    if !super::atomic::write_atomic_new(record, &bytes, 0o600)? {
        let _ignored = child.kill();
        let _ignored = child.wait();
        return live_holder(record).ok_or_else(|| {
            Error::Conflict(format!(
                "{}: another command is making the namespace; try again",
                record.display()
            ))
        });
    }
    drop(to);
    // Not waited for (dropping a Child neither waits nor kills): it outlives this command,
    // reparented when this process exits.
    drop(child);
    Ok(h)
}

/// Runs this command again, with the same arguments, in the holder's namespaces.
fn reexec_into(h: Holder) -> Error {
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("ckptfs"));
    let e = Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(ENTER_ENV, format!("{}:{}", h.pid, h.start))
        .exec();
    Error::io_op("re-running ckptfs in the workspace namespace", e)
}

/// In a process just re-executed by [`enter_if_held`] (before any thread starts: `setns` into a
/// user namespace needs a single-threaded process): enters the holder's user and mount
/// namespaces and goes back to the same working directory, now as the namespace shows it.
/// Nothing without [`ENTER_ENV`].
///
/// # Errors
/// The holder is gone or not this account's; `setns` fails.
pub fn enter_from_env() -> Result<()> {
    let Some(v) = std::env::var_os(ENTER_ENV) else {
        return Ok(());
    };
    std::env::remove_var(ENTER_ENV);
    // Only for an ordinary account outside: root, or a process in a namespace already (an
    // agent that set it), has nothing to enter.
    if !is_ordinary() {
        return Ok(());
    }
    let parsed = v.to_str().and_then(|s| {
        let (p, t) = s.split_once(':')?;
        Some(Holder {
            pid: p.parse().ok()?,
            start: t.parse().ok()?,
        })
    });
    let Some(h) = parsed.filter(Holder::is_live) else {
        return Err(Error::Invalid(format!(
            "{ENTER_ENV}={}: no such namespace holder of this account",
            v.to_string_lossy()
        )));
    };
    enter(h)
}

/// Enters `h`'s user and mount namespaces (single-threaded) and goes back to the same working
/// directory, as the namespace shows it.
fn enter(h: Holder) -> Result<()> {
    let cwd = std::env::current_dir().ok();
    for (ns, flag) in [
        ("user", CloneFlags::CLONE_NEWUSER),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let p = PathBuf::from(format!("/proc/{}/ns/{ns}", h.pid));
        let f = fs::File::open(&p).map_err(|e| Error::io(&p, e))?;
        nix::sched::setns(f, flag)
            .map_err(|e| Error::io_op(format!("entering {}", p.display()), e.into()))?;
    }
    IN_CHILD.store(0, Ordering::Relaxed);
    let back = cwd.as_deref().unwrap_or(Path::new("/"));
    if let Err(e) = std::env::set_current_dir(back) {
        log::warn!("{}: {e}; working in /", back.display());
        let _ignored = std::env::set_current_dir("/");
    }
    Ok(())
}

/// Before any thread starts, for an ordinary account: when one of its namespace holders
/// serves a store this command names (an argument or the working directory is the store, is
/// inside it, or is at or under one of that namespace's workspaces), enters that namespace at
/// once, saving the command the run again that [`enter_if_held`] would make it take once it
/// opened the store. Nothing for the read-only views (`mount` without `--branch`, `browse`),
/// which stay where the account's shell is, nor when nothing matches: [`enter_if_held`] then
/// decides as before. Errors are no error here: the later path reports them.
pub fn enter_early(args: &[std::ffi::OsString]) {
    if !is_ordinary() || ENTER_EARLY_SKIPS.iter().any(|s| skipped(args, s)) {
        return;
    }
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    // Compared as written: an argument with `..` is left to the slower way, which opens (and
    // checks) the store outside first.
    let named: Vec<PathBuf> = args
        .iter()
        .skip(1)
        .filter(|a| !a.as_encoded_bytes().starts_with(b"-"))
        .filter(|a| {
            !Path::new(a)
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        })
        .map(|a| cwd.join(a))
        .chain(std::iter::once(cwd.clone()))
        .collect();
    for (pid, dir, argv) in own_processes() {
        if argv.get(1).map(Vec::as_slice) != Some(HOLDER_COMMAND.as_bytes()) {
            continue;
        }
        let Some(store) = argv.get(2).filter(|s| !s.is_empty()) else {
            continue;
        };
        let store = Path::new(std::ffi::OsStr::from_bytes(store));
        let source = format!("ckptfs:{}:", store.display());
        let workspaces: Vec<PathBuf> = fs::read_to_string(dir.join("mountinfo"))
            .map(|t| super::mountinfo::parse_mountinfo(&t))
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.fstype == "overlay" && m.source.starts_with(&source))
            .map(|m| m.mountpoint)
            .collect();
        let ours = named
            .iter()
            .any(|p| p.starts_with(store) || workspaces.iter().any(|w| p.starts_with(w)));
        let Some(start) = start_time(pid) else {
            continue;
        };
        let h = Holder { pid, start };
        if ours && h.is_live() {
            if let Err(e) = enter(h) {
                log::debug!("entering the namespace of {}: {e}", store.display());
            }
            return;
        }
    }
}

/// The commands [`enter_early`] leaves where they are: (subcommand, unless this flag). Any
/// argument spelled as the subcommand counts (a global option's value may come first): a
/// command skipped wrongly only takes the slower way in.
const ENTER_EARLY_SKIPS: [(&str, &str); 2] = [("mount", "--branch"), ("browse", "")];

fn skipped(args: &[std::ffi::OsString], (cmd, unless): &(&str, &str)) -> bool {
    let flagged = |a: &std::ffi::OsString| {
        let a = a.as_encoded_bytes();
        a == unless.as_bytes()
            || a.strip_prefix(unless.as_bytes())
                .is_some_and(|r| r.starts_with(b"="))
            || a.starts_with(b"-b")
    };
    args.iter().skip(1).any(|a| a == *cmd) && (unless.is_empty() || !args.iter().any(flagged))
}

/// `ckptfs internal-holder`: makes a user + mount namespace and keeps it until SIGTERM. Talks
/// to the command that started it on stdin/stdout: says `unshared`, waits for `mapped` (the
/// ids are mapped from outside), makes its mounts slaves of the machine's (so nothing mounted
/// in it propagates out, and new mounts of the machine still show), says `ready`. Runs on the
/// main thread, before any other starts. Returns the exit code.
pub fn hold() -> i32 {
    let mut out = std::io::stdout();
    let mut say = |s: &str| {
        let _ignored = writeln!(out, "{s}").and_then(|()| out.flush());
    };
    if let Err(e) = nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS) {
        say(&format!("unshare(CLONE_NEWUSER|CLONE_NEWNS): {e}"));
        return 1;
    }
    say("unshared");
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() || line.trim() != "mapped" {
        return 1;
    }
    if let Err(e) = nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_SLAVE,
        None::<&str>,
    ) {
        say(&format!("making / a slave mount: {e}"));
        return 1;
    }
    // Its own session: a terminal's ^C or hangup is not for it.
    let _ignored = nix::unistd::setsid();
    say("ready");
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(s);
    }
    if set.thread_block().is_err() {
        return 1;
    }
    loop {
        if let Ok(Signal::SIGTERM) = set.wait() {
            return 0;
        }
    }
}

/// Ends the holder recorded at `record` (its namespace ends with the last process in it) and
/// removes the record. Nothing when none is live.
pub fn stop_holder(record: &Path) {
    if let Some(h) = live_holder(record).or_else(|| {
        // From inside the namespace the holder is in ours: is_live's namespace test fails.
        let h: Holder = serde_json::from_slice(&fs::read(record).ok()?).ok()?;
        (start_time(h.pid) == Some(h.start)).then_some(h)
    }) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(h.pid).unwrap_or(i32::MAX));
        let _ignored = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    let _ignored = fs::remove_file(record);
}

/// The mount tables of this account's namespace holders (their pids found in `/proc`: the
/// account's processes running `ckptfs internal-holder`), for an ordinary account outside
/// them: where its workspaces are mounted. Empty for root or in a namespace.
pub fn holder_mounts() -> Vec<super::mountinfo::MountEntry> {
    if !is_ordinary() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (_, dir, argv) in own_processes() {
        // A holder; or a view daemon in a namespace of the account's, whose holder is gone.
        let second = argv.get(1).map(Vec::as_slice);
        let daemon_elsewhere = second == Some(b"browse".as_slice())
            && fs::read_link(dir.join("ns/user")).ok() != fs::read_link("/proc/self/ns/user").ok();
        if second != Some(HOLDER_COMMAND.as_bytes()) && !daemon_elsewhere {
            continue;
        }
        if let Ok(text) = fs::read_to_string(dir.join("mountinfo")) {
            out.extend(super::mountinfo::parse_mountinfo(&text));
        }
    }
    out
}
