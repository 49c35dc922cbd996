//! Holding a workload's writes for the instant of a checkpoint: `checkpoint --freeze-cgroup
//! DIR` freezes the cgroup the agent runs in (`docker pause` does the same) for a short second
//! pass over the upper layers, then thaws it before the new objects are synced.
//!
//! The hold is short because a first pass, with the writers running, reads everything that
//! changed since the last checkpoint. The frozen pass starts from that pass's caches, so it
//! costs one `lstat` per upper entry plus a read of only the files changed after the first
//! pass saw them (or in the clock tick it started in), and of the changed files a process held
//! open for writing when the first pass read them: a write begun before that pass can still be
//! copying its bytes while they are read, and it ends without changing the file's stat key
//! (`ingest::reader`). After one agent turn that is a few milliseconds on a small room
//! (figures in README).
//!
//! Kernel overlayfs has no hook to pause writers, so this is how a checkpoint of a workspace
//! gets one instant across every root and every writer, in-place writers (SQLite pages, mmap)
//! included: a frozen task stops between system calls, so no write is half done, and nothing
//! changes while the changed files are read. The processes do not see it (no signal, unlike
//! SIGSTOP); they only lose the time the hold lasts.
//!
//! Both cgroup interfaces work: v2 (`cgroup.freeze`, `cgroup.events`) and v1's freezer
//! controller (`freezer.state`). Freezing is hierarchical in both. A cgroup that holds the
//! checkpointing process itself is refused (it would freeze itself). If the process dies while
//! the cgroup is frozen, the RUNNING marker names the cgroups and `ckptfs recover` thaws them.
//!
//! `--freeze-fs` holds every process instead, in a cgroup or not: it freezes the filesystem the
//! store is on (FIFREEZE, as `fsfreeze -f` does), where the upper layers live, so every write
//! into the workspace waits, shared-mmap page faults included. That needs the store on a
//! filesystem of its own: the root filesystem is refused, and everything else on the store's
//! filesystem is held too. Freezing syncs the filesystem first with the writers already held,
//! so the checkpoint syncs it just before. While frozen, the checkpoint itself writes nothing
//! there (its new objects wait in memory, see `ObjectBatch::defer_writes`). The kernel keeps a
//! filesystem frozen until someone thaws it, even after the process that froze it died, so a
//! watchdog process (`bash`, `fsfreeze` from util-linux) thaws it when the checkpoint dies or
//! holds it longer than [`FREEZE_TIMEOUT`] from the freeze; the checkpoint then fails rather
//! than record a state that was not one instant.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long tasks get to reach a freezable point (a task in uninterruptible sleep, e.g. on a
/// hung NFS mount, can delay it); also the longest a frozen filesystem stays frozen.
pub const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interface {
    /// cgroup v2: `cgroup.freeze` is 0/1, `cgroup.events` says `frozen 1` once done.
    V2,
    /// cgroup v1 freezer: `freezer.state` is THAWED / FREEZING / FROZEN.
    V1,
}

fn interface(dir: &Path) -> Result<Interface> {
    if dir.join("cgroup.freeze").is_file() {
        Ok(Interface::V2)
    } else if dir.join("freezer.state").is_file() {
        Ok(Interface::V1)
    } else {
        Err(Error::Usage(format!(
            "--freeze-cgroup {}: not a cgroup directory that can be frozen (no cgroup.freeze, \
             no freezer.state); give a non-root cgroup v2 directory or a v1 freezer cgroup",
            dir.display()
        )))
    }
}

/// Checks that every directory in `dirs` is a cgroup that can be frozen and does not hold this
/// process (`checkpoint` calls it before any work, so bad input costs nothing).
///
/// # Errors
/// `Usage`, naming the directory at fault.
pub fn check(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Interface)>> {
    let me = std::process::id();
    let mut out = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let kind = interface(dir)?;
        if holds_pid(dir, me)? {
            return Err(Error::Usage(format!(
                "--freeze-cgroup {}: this ckptfs process runs inside that cgroup and would \
                 freeze itself; run the checkpoint from outside it",
                dir.display()
            )));
        }
        out.push((dir.clone(), kind));
    }
    Ok(out)
}

/// The directory under a cgroup hierarchy's root that holds the cgroups `ckptfs exec` makes.
const OWN_DIR: &str = "ckptfs";

/// Makes (or finds) the cgroup `name` in ckptfs's own directory of the cgroup v2 hierarchy,
/// or of v1's freezer hierarchy where no v2 one is mounted.
///
/// # Errors
/// `Usage` when no freezable hierarchy is mounted; `Io` when the directory cannot be made
/// (a read-only cgroupfs in a container), saying what to do instead.
pub fn make_cgroup(name: &str) -> Result<PathBuf> {
    if crate::fs::userns::in_child_userns() {
        return make_delegated_cgroup(name);
    }
    let mounts = crate::fs::mountinfo::mounts()?;
    let v2 = mounts.iter().find(|m| m.fstype == "cgroup2");
    let v1 = mounts
        .iter()
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "freezer"));
    let base = v2.or(v1).map(|m| m.mountpoint.clone()).ok_or_else(|| {
        Error::Usage(
            "no cgroup v2 hierarchy and no v1 freezer hierarchy is mounted, so there is no \
             cgroup to run the command in"
                .into(),
        )
    })?;
    let dir = base.join(OWN_DIR).join(name);
    fs::create_dir_all(&dir).map_err(|e| {
        Error::io_op(
            format!(
                "creating cgroup {} (where that is not allowed, run the agent in a cgroup of \
                 your own and give `mount --freeze-cgroup DIR`)",
                dir.display()
            ),
            e,
        )
    })?;
    interface(&dir)?;
    Ok(dir)
}

/// What an ordinary account needs for `exec` and `turn` to run the agent in a cgroup of its
/// own, which checkpoints freeze (docs/rootless.md, "Holding writers").
pub const NO_DELEGATION: &str = "no cgroup is delegated to this account (the cgroup v2 \
     directory ckptfs runs in, or one above it, owned by the account); run ckptfs in one, \
     e.g. under `systemd-run --user --scope -p Delegate=yes`";

/// The cgroup v2 directory this process runs in, or the nearest one above it, that this
/// account owns and may move processes in (a subtree systemd delegates with `Delegate=yes`):
/// a cgroup made under it takes this process's children without crossing a cgroup of root's.
pub fn delegated_base() -> Option<PathBuf> {
    let mounts = crate::fs::mountinfo::mounts().ok()?;
    let v2 = mounts.iter().find(|m| m.fstype == "cgroup2")?;
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let me = nix::unistd::geteuid().as_raw();
    let mut dir = v2.mountpoint.join(rel.trim_start_matches('/'));
    loop {
        let procs = dir.join("cgroup.procs");
        let owned = fs::metadata(&dir).is_ok_and(|m| m.uid() == me)
            && nix::unistd::access(&procs, nix::unistd::AccessFlags::W_OK).is_ok();
        if owned {
            return Some(dir);
        }
        if dir == v2.mountpoint || !dir.pop() {
            return None;
        }
    }
}

/// [`make_cgroup`] for an ordinary account (in its user namespace): under [`delegated_base`].
fn make_delegated_cgroup(name: &str) -> Result<PathBuf> {
    let base = delegated_base().ok_or_else(|| Error::Invalid(NO_DELEGATION.to_string()))?;
    let dir = base.join(OWN_DIR).join(name);
    fs::create_dir_all(&dir)
        .map_err(|e| Error::io_op(format!("creating cgroup {}", dir.display()), e))?;
    interface(&dir)?;
    Ok(dir)
}

/// Whether `dir` is a cgroup `make_cgroup` made.
pub fn is_own(dir: &Path) -> bool {
    dir.parent().and_then(Path::file_name) == Some(std::ffi::OsStr::new(OWN_DIR))
}

/// Moves this process into the cgroup `dir` (the processes it starts are born there).
///
/// # Errors
/// `Io` when `cgroup.procs` cannot be written.
pub fn join(dir: &Path) -> Result<()> {
    let p = dir.join("cgroup.procs");
    fs::write(&p, std::process::id().to_string()).map_err(|e| Error::io(&p, e))
}

/// Removes a cgroup `make_cgroup` made once no process is left in it (`umount`). A cgroup
/// still in use, or one the operator named, is left alone.
pub fn remove_if_own_and_empty(dir: &Path) {
    if !is_own(dir) {
        return;
    }
    for _ in 0..20 {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if !procs.trim().is_empty() {
            return;
        }
        if fs::remove_dir(dir).is_ok() || !dir.exists() {
            // ckptfs's own directory too, once no workspace has a cgroup in it.
            if let Some(own) = dir.parent() {
                let _in_use = fs::remove_dir(own);
            }
            return;
        }
        // An exited task can linger for a moment after its parent reaped it.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Cgroups frozen by this process; thawed by `thaw`, or on drop after an error.
pub struct Frozen {
    cgroups: Vec<(PathBuf, Interface)>,
}

impl Frozen {
    /// Freezes every cgroup in `dirs` and waits until each is frozen. Nothing stays frozen
    /// when it fails.
    ///
    /// # Errors
    /// `Usage` for a directory that is not a freezable cgroup or that holds this process;
    /// `Io` when a control file cannot be written; `Invalid` on timeout.
    pub fn freeze(dirs: &[PathBuf]) -> Result<Frozen> {
        let mut frozen = Frozen {
            cgroups: Vec::new(),
        };
        for (dir, kind) in check(dirs)? {
            set(&dir, kind, true)?;
            frozen.cgroups.push((dir, kind));
        }
        let deadline = Instant::now() + FREEZE_TIMEOUT;
        for (dir, kind) in &frozen.cgroups {
            while !is_frozen(dir, *kind)? {
                if Instant::now() > deadline {
                    return Err(Error::Invalid(format!(
                        "cgroup {} did not freeze within {} s (a task in uninterruptible \
                         sleep?); it was thawed and nothing was checkpointed",
                        dir.display(),
                        FREEZE_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(frozen)
    }

    /// Thaws every cgroup; the first error wins, the others are still thawed.
    ///
    /// # Errors
    /// `Io` when a control file cannot be written.
    pub fn thaw(mut self) -> Result<()> {
        let mut first = None;
        for (dir, kind) in std::mem::take(&mut self.cgroups) {
            if let Err(e) = set(&dir, kind, false) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for (dir, kind) in std::mem::take(&mut self.cgroups) {
            if let Err(e) = set(&dir, kind, false) {
                log::error!("could not thaw cgroup {}: {e}", dir.display());
            }
        }
    }
}

/// Thaws cgroups named in an interrupted checkpoint's marker (`ckptfs recover`). A directory
/// that is gone or not a cgroup any more is skipped.
pub fn thaw_after_crash(dirs: &[PathBuf]) -> Vec<String> {
    let mut actions = Vec::new();
    for dir in dirs {
        let Ok(kind) = interface(dir) else { continue };
        match set(dir, kind, false) {
            Ok(()) => actions.push(format!(
                "thawed cgroup {} that the interrupted checkpoint had frozen",
                dir.display()
            )),
            Err(e) => actions.push(format!("could not thaw cgroup {}: {e}", dir.display())),
        }
    }
    actions
}

fn set(dir: &Path, kind: Interface, freeze: bool) -> Result<()> {
    let (file, value) = match (kind, freeze) {
        (Interface::V2, true) => ("cgroup.freeze", "1"),
        (Interface::V2, false) => ("cgroup.freeze", "0"),
        (Interface::V1, true) => ("freezer.state", "FROZEN"),
        (Interface::V1, false) => ("freezer.state", "THAWED"),
    };
    let p = dir.join(file);
    fs::write(&p, value).map_err(|e| Error::io(&p, e))
}

fn is_frozen(dir: &Path, kind: Interface) -> Result<bool> {
    let file = match kind {
        Interface::V2 => "cgroup.events",
        Interface::V1 => "freezer.state",
    };
    let p = dir.join(file);
    let text = fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
    Ok(match kind {
        Interface::V2 => text.lines().any(|l| l.trim() == "frozen 1"),
        Interface::V1 => text.trim() == "FROZEN",
    })
}

/// Whether `pid` is in the cgroup `dir` or one of its descendants.
fn holds_pid(dir: &Path, pid: u32) -> Result<bool> {
    let mut pids = std::collections::HashSet::new();
    collect_pids(dir, &mut pids)?;
    Ok(pids.contains(&pid))
}

/// Adds the pids in cgroup `dir` and its descendants to `pids` (a cgroup whose process list
/// cannot be read adds none; a directory that cannot be listed is an error).
pub(super) fn collect_pids(dir: &Path, pids: &mut std::collections::HashSet<u32>) -> Result<()> {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    for ent in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        if ent.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&ent.path(), pids)?;
        }
    }
    Ok(())
}

/// Checks that the filesystem holding the store `dir` may be frozen by `--freeze-fs`: it must
/// not be the root filesystem, which would stop the whole system.
///
/// # Errors
/// `Usage`, naming the store; `Io` when it cannot be examined.
pub fn check_fs(dir: &Path) -> Result<()> {
    let dev = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.dev())
            .map_err(|e| Error::io(p, e))
    };
    if dev(dir)? == dev(Path::new("/"))? {
        return Err(Error::Usage(format!(
            "--freeze-fs: the store {} is on the root filesystem, and freezing that would stop \
             the whole system; put the store on a filesystem of its own, or hold the agent's \
             writes with --freeze-cgroup",
            dir.display()
        )));
    }
    Ok(())
}

/// The store's filesystem, to be frozen by this process: [`FrozenFs::prepare`] starts the
/// watchdog (before the writers are held: starting a process takes milliseconds), `freeze`
/// arms it and freezes, `thaw` thaws, and drop thaws after an error and lets the watchdog go.
/// The watchdog thaws it when this process dies or holds it [`FREEZE_TIMEOUT`] after `freeze`
/// (see the module doc).
pub struct FrozenFs {
    dir: PathBuf,
    file: fs::File,
    /// Whether this process froze it and has not thawed it yet.
    frozen: bool,
    /// Whether the watchdog was told "go" (its time limit runs from there).
    armed: bool,
    watchdog: Option<Child>,
}

impl FrozenFs {
    /// Checks the filesystem holding `dir` ([`check_fs`]) and starts the watchdog.
    ///
    /// # Errors
    /// `Usage` for the root filesystem; `Io` when the watchdog cannot start.
    pub fn prepare(dir: &Path) -> Result<FrozenFs> {
        check_fs(dir)?;
        let file = fs::File::open(dir).map_err(|e| Error::io(dir, e))?;
        // It waits for "go" (sent just before the freeze; end of input without it: nothing
        // was frozen), then for "ok" within the time limit, else thaws. Its own process
        // group: a Ctrl-C that stops the checkpoint must not stop it too.
        let watchdog = Command::new(crate::fs::programs::system_program("bash"))
            .arg("-c")
            .arg(format!(
                "read -r go || exit 0; read -r -t {} ok || fsfreeze -u -- \"$1\"",
                FREEZE_TIMEOUT.as_secs()
            ))
            .arg("ckptfs-thaw-watchdog")
            .arg(dir)
            .current_dir("/")
            .env_clear()
            .env("PATH", crate::fs::programs::SYSTEM_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                Error::io_op(
                    "--freeze-fs: starting the thaw watchdog (needs bash and fsfreeze from \
                     util-linux)",
                    e,
                )
            })?;
        Ok(FrozenFs {
            dir: dir.to_path_buf(),
            file,
            frozen: false,
            armed: false,
            watchdog: Some(watchdog),
        })
    }

    /// Freezes the filesystem: from here every write to it waits.
    ///
    /// # Errors
    /// `Io` when it cannot be frozen (already frozen: EBUSY; not supported, e.g. tmpfs:
    /// EOPNOTSUPP).
    pub fn freeze(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let go = self
            .watchdog
            .as_mut()
            .and_then(|c| c.stdin.as_mut())
            .map(|stdin| stdin.write_all(b"go\n"));
        match go {
            Some(Ok(())) => self.armed = true,
            Some(Err(e)) => {
                return Err(Error::io_op(
                    "--freeze-fs: the thaw watchdog is gone; nothing was frozen",
                    e,
                ))
            }
            None => {
                return Err(Error::Invalid(
                    "--freeze-fs: freeze without a watchdog".into(),
                ))
            }
        }
        crate::fs::sys::freeze_filesystem(&self.file).map_err(|e| {
            Error::io_op(
                format!(
                    "--freeze-fs: freezing the filesystem of {}",
                    self.dir.display()
                ),
                e,
            )
        })?;
        self.frozen = true;
        log::debug!(
            "froze the filesystem of {} in {:?}",
            self.dir.display(),
            t0.elapsed()
        );
        Ok(())
    }

    /// Thaws the filesystem.
    ///
    /// # Errors
    /// `Invalid` when it was thawed meanwhile (the watchdog after [`FREEZE_TIMEOUT`], or an
    /// operator): what was read is then not one instant. `Io` when thawing fails.
    pub fn thaw(&mut self) -> Result<()> {
        self.frozen = false;
        match crate::fs::sys::thaw_filesystem(&self.file) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(Error::Invalid(format!(
                "the filesystem of {} was thawed before the frozen pass ended (held over {} s, \
                 or thawed by someone else); nothing was checkpointed",
                self.dir.display(),
                FREEZE_TIMEOUT.as_secs()
            ))),
            Err(e) => Err(Error::io_op(
                format!("thawing the filesystem of {}", self.dir.display()),
                e,
            )),
        }
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        if self.frozen {
            self.frozen = false;
            if let Err(e) = crate::fs::sys::thaw_filesystem(&self.file) {
                log::warn!("thawing the filesystem of {}: {e}", self.dir.display());
            }
        }
        // All is well: the watchdog exits without thawing ("ok" once armed, else the end
        // of its input).
        if let Some(mut child) = self.watchdog.take() {
            if let Some(mut stdin) = child.stdin.take() {
                if self.armed {
                    let _gone_already = stdin.write_all(b"ok\n");
                }
            }
            let _reaped = child.wait();
        }
    }
}

/// `recover`: thaws the store's filesystem if a checkpoint with `--freeze-fs` died with it
/// frozen (and its watchdog too); says what it did.
pub fn thaw_fs_after_crash(dir: &Path) -> Option<String> {
    let f = fs::File::open(dir).ok()?;
    match crate::fs::sys::thaw_filesystem(&f) {
        Ok(()) => Some(format!(
            "thawed the filesystem of {} that the interrupted checkpoint had frozen",
            dir.display()
        )),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        Err(e) => Some(format!(
            "could not thaw the filesystem of {}: {e}",
            dir.display()
        )),
    }
}

/// A process that can write into a workspace and that its checkpoints do not hold.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Writer {
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// A file in the workspace it has open for writing or mapped shared and writable.
    pub path: PathBuf,
}

/// The processes with a file open for writing (or mapped shared and writable) under one of
/// `mountpoints` that are in none of the cgroups `held` (nor their descendants): writers a
/// checkpoint of that workspace does not hold, so a file one of them rewrites in place may be
/// captured mid-rewrite. One entry per process (its first such file). Processes that cannot
/// be examined (gone meanwhile, or another user's without the rights) are skipped.
pub fn unheld_writers(mountpoints: &[PathBuf], held: &[PathBuf]) -> Vec<Writer> {
    let mut held_pids = std::collections::HashSet::new();
    for dir in held {
        // Best effort: a cgroup gone meanwhile holds nobody.
        let _ = collect_pids(dir, &mut held_pids);
    }
    let inside = |p: &Path| mountpoints.iter().any(|m| p.starts_with(m));
    let own = std::process::id();
    let mut out = Vec::new();
    for (pid, dir) in crate::fs::processes() {
        if pid == own || held_pids.contains(&pid) {
            continue;
        }
        if let Some(path) = open_for_writing(&dir, &inside).or_else(|| mapped_shared(&dir, &inside))
        {
            let command = fs::read_to_string(dir.join("comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_default();
            out.push(Writer { pid, command, path });
        }
    }
    out.sort_by_key(|w| w.pid);
    out
}

/// A file under `inside` that process `/proc/PID` (`dir`) has open write-only or read-write.
fn open_for_writing(dir: &Path, inside: &impl Fn(&Path) -> bool) -> Option<PathBuf> {
    for fd in fs::read_dir(dir.join("fd")).ok()?.flatten() {
        let Ok(target) = fs::read_link(fd.path()) else {
            continue;
        };
        if !inside(&target) {
            continue;
        }
        let info = dir.join("fdinfo").join(fd.file_name());
        let flags = fs::read_to_string(info).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        });
        // O_WRONLY or O_RDWR.
        if flags.is_some_and(|f| f & 3 != 0) {
            return Some(target);
        }
    }
    None
}

/// A file under `inside` that process `/proc/PID` (`dir`) maps shared and writable (its
/// stores reach the file without a system call).
fn mapped_shared(dir: &Path, inside: &impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let maps = fs::read_to_string(dir.join("maps")).ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.splitn(6, ' ');
        let perms = f.nth(1)?;
        let path = Path::new(f.nth(3)?.trim_start());
        (perms.starts_with("rw") && perms.ends_with('s') && inside(path)).then(|| path.into())
    })
}
