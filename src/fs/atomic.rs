//! The store's single write path: atomic file creation, syncs, and fault injection.
//!
//! Every durable write in the store goes through here, so crash tests can make the Nth
//! write/sync/rename fail (or abort the process) by setting `CKPTFS_FAULT=fail:N` or
//! `CKPTFS_FAULT=abort:N` in the environment; `CKPTFS_FAULT=stop:N` stops the process there
//! (SIGSTOP) for a test to look at what it holds. `CKPTFS_FAULT=count` makes the binary print
//! `ckptfs: io steps: N` on stderr at exit, so tests know how many steps an operation takes.
//! `CKPTFS_FAULT=skip-sync:replace` leaves out the file fsync of [`write_atomic_replace`]: the
//! bug the power-loss tests must catch (tests/powerloss), kept breakable on purpose so they
//! show they do.
//! Without the variable the hook is one relaxed atomic increment.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::error::{Error, Result};

static FAULT_COUNTER: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy)]
enum FaultMode {
    Fail,
    Abort,
    Stop,
    Count,
    /// Leave out the temp file's fsync in `replace` (the step number is unused).
    SkipReplaceSync,
}

fn fault_config() -> Option<(FaultMode, u64)> {
    static CONFIG: OnceLock<Option<(FaultMode, u64)>> = OnceLock::new();
    *CONFIG.get_or_init(|| {
        let v = std::env::var("CKPTFS_FAULT").ok()?;
        if v == "count" {
            return Some((FaultMode::Count, 0));
        }
        if v == "skip-sync:replace" {
            return Some((FaultMode::SkipReplaceSync, 0));
        }
        let (mode, n) = v.split_once(':')?;
        let n: u64 = n.parse().ok()?;
        match mode {
            "fail" => Some((FaultMode::Fail, n)),
            "abort" => Some((FaultMode::Abort, n)),
            "stop" => Some((FaultMode::Stop, n)),
            _ => None,
        }
    })
}

/// Counts one durable I/O step; fails or aborts it when fault injection selects it.
pub fn fault_point(what: &str) -> io::Result<()> {
    let n = FAULT_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some((mode, at)) = fault_config() {
        if n == at {
            match mode {
                FaultMode::Fail => {
                    return Err(io::Error::other(format!(
                        "injected fault at I/O step {n} ({what})"
                    )))
                }
                FaultMode::Abort => {
                    eprintln!("ckptfs: injected abort at I/O step {n} ({what})");
                    std::process::abort();
                }
                FaultMode::Stop => {
                    eprintln!("ckptfs: injected stop at I/O step {n} ({what})");
                    nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP)
                        .map_err(io::Error::from)?;
                }
                FaultMode::Count | FaultMode::SkipReplaceSync => {}
            }
        }
    }
    Ok(())
}

/// Number of durable I/O steps taken so far by this process (for crash tests).
pub fn io_steps() -> u64 {
    FAULT_COUNTER.load(Ordering::Relaxed)
}

/// Prints the step count on stderr when `CKPTFS_FAULT=count` (called by `main` at exit).
pub fn report_io_steps() {
    if matches!(fault_config(), Some((FaultMode::Count, _))) {
        eprintln!("ckptfs: io steps: {}", io_steps());
    }
}

/// unlink(2) through the fault hook; a missing file is success (deletion is idempotent).
pub fn remove_file(path: &Path) -> Result<()> {
    fault_point("unlink").map_err(|e| Error::io(path, e))?;
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Removes a directory tree through the fault hook (one step); missing is success. The tree
/// may be one an agent wrote (the upper layer of a deleted branch, a displaced one): it is
/// removed through held directory fds, never following a symlink in it (see `safe`).
pub fn remove_dir_all(path: &Path) -> Result<()> {
    fault_point("rmtree").map_err(|e| Error::io(path, e))?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::Invalid(format!(
            "{}: not a directory to remove",
            path.display()
        )));
    };
    match crate::fs::safe::Dir::open(parent) {
        Ok(dir) => dir.remove_all(name),
        Err(Error::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The pid embedded in a temp name made by [`temp_path`] (`.tmp-STEM-PID.SEQ`), if any.
pub fn temp_owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".tmp-")?;
    let (_, tail) = rest.rsplit_once('-')?;
    let (pid, seq) = tail.split_once('.')?;
    seq.parse::<u64>().ok()?;
    pid.parse().ok()
}

fn unique_suffix() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh temp-file path inside `dir` (same filesystem as the final name).
pub fn temp_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!(".tmp-{stem}-{}", unique_suffix()))
}

/// Writes `data` to a new file at `path` (must not exist), with `mode`, without syncing.
pub fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    create_with(path, data, mode).map(drop)
}

/// As `write_new`, and starts writing the data back to disk now (without waiting), so the
/// fsync that later makes a batch durable finds it mostly written: the disk works while the
/// caller goes on hashing. Only worth it for large files.
pub fn write_new_early(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let f = create_with(path, data, mode)?;
    // Advisory (a failure only loses the head start; the fsync still comes later): on Linux,
    // DONTNEED starts writeback of the dirty pages without waiting for it, and drops the
    // pages once clean, which an object just written does not need.
    let _ignored = nix::fcntl::posix_fadvise(
        &f,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    );
    Ok(())
}

/// Creates `path` and writes `data`. A write that fails (ENOSPC, EIO; or the injected fault,
/// which strikes after the file exists, as a full disk does) removes the file again, so a
/// failed operation leaves no partial temp file behind.
fn create_with(path: &Path, data: &[u8], mode: u32) -> Result<File> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let written = fault_point("write").and_then(|()| f.write_all(data));
    if let Err(e) = written {
        drop(f);
        let _ignored_cleanup = fs::remove_file(path);
        return Err(Error::io(path, e));
    }
    Ok(f)
}

/// Creates `path` and its missing parents, mode 0700 (the store's own directories, and ours
/// under /run/ckptfs).
pub fn create_private_dir_all(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| Error::io(path, e))
}

/// fsync of a file or directory by path.
pub fn sync_path(path: &Path) -> Result<()> {
    fault_point("fsync").map_err(|e| Error::io(path, e))?;
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

/// syncfs(2) of the filesystem holding `path`: one call makes every earlier write durable.
pub fn sync_filesystem(path: &Path) -> Result<()> {
    fault_point("syncfs").map_err(|e| Error::io(path, e))?;
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    nix::unistd::syncfs(&f).map_err(|e| Error::io(path, io::Error::from(e)))
}

/// rename(2) through the fault hook.
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    fault_point("rename").map_err(|e| Error::io(to, e))?;
    fs::rename(from, to).map_err(|e| Error::io(to, e))
}

/// Publishes `data` at `path` atomically: temp -> fsync -> rename -> fsync dir.
/// Replaces an existing file (use for movable refs and config only).
pub fn write_atomic_replace(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace(path, data, mode, true)
}

/// Publishes `data` at `path` atomically (temp -> rename) without syncing anything: for state
/// that only describes live mounts (`run/`), which a reboot makes moot anyway, while a crashed
/// process leaves it in the page cache, old or new, never torn.
pub fn write_atomic_replace_volatile(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace(path, data, mode, false)
}

/// temp -> (fsync) -> rename -> (fsync dir).
fn replace(path: &Path, data: &[u8], mode: u32, sync: bool) -> Result<()> {
    let dir = parent_of(path)?;
    let tmp = temp_path(dir, "w");
    let result = (|| {
        write_new(&tmp, data, mode)?;
        if sync && !matches!(fault_config(), Some((FaultMode::SkipReplaceSync, _))) {
            sync_path(&tmp)?;
        }
        rename(&tmp, path)?;
        if sync {
            sync_path(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ignored_cleanup = fs::remove_file(&tmp);
    }
    result
}

/// Publishes `data` at `path` atomically and never overwrites: temp -> fsync -> `publish_new`
/// -> fsync dir. Returns `Ok(false)` when `path` already exists (the caller decides if that is
/// an error).
pub fn write_atomic_new(path: &Path, data: &[u8], mode: u32) -> Result<bool> {
    let dir = parent_of(path)?;
    let tmp = temp_path(dir, "n");
    let result = (|| {
        write_new(&tmp, data, mode)?;
        sync_path(&tmp)?;
        fault_point("link").map_err(|e| Error::io(path, e))?;
        if !publish_new(&tmp, path)? {
            return Ok(false);
        }
        sync_path(dir)?;
        Ok(true)
    })();
    let _ignored_cleanup = fs::remove_file(&tmp);
    result
}

/// Moves the file `tmp` to `dest` unless `dest` exists, in which case `tmp` is removed and
/// the answer is `Ok(false)`. Never replaces `dest`: one `renameat2(RENAME_NOREPLACE)`, or
/// `link` + `unlink` on filesystems without it.
pub fn publish_new(tmp: &Path, dest: &Path) -> Result<bool> {
    use nix::errno::Errno;
    let renamed = nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        tmp,
        nix::fcntl::AT_FDCWD,
        dest,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    );
    let published = match renamed {
        Ok(()) => return Ok(true),
        Err(Errno::EEXIST) => false,
        Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => match fs::hard_link(tmp, dest) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(Error::io(dest, e)),
        },
        Err(e) => return Err(Error::io(dest, io::Error::from(e))),
    };
    fs::remove_file(tmp).map_err(|e| Error::io(tmp, e))?;
    Ok(published)
}

/// Appends one line to `path` (created if missing) and syncs it: the audit log's write-through.
pub fn append_line(path: &Path, line: &str) -> Result<()> {
    append_line_with(path, line, true)
}

/// As [`append_line`]; `sync` false leaves the line to the kernel's writeback (the audit line
/// of an operation on live mounts only, which a reboot would make moot).
pub fn append_line_with(path: &Path, line: &str, sync: bool) -> Result<()> {
    fault_point("append").map_err(|e| Error::io(path, e))?;
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    f.write_all(&buf).map_err(|e| Error::io(path, e))?;
    if sync {
        f.sync_data().map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

fn parent_of(path: &Path) -> Result<&Path> {
    path.parent()
        .ok_or_else(|| Error::Invalid(format!("{} has no parent directory", path.display())))
}

#[cfg(test)]
mod tests;
