//! Whether a store may be believed: the one place that decides (docs/design.md, "Trusting a
//! store"; docs/cli.md, "Finding the store").
//!
//! ckptfs runs as root and serves trees an untrusted agent writes. A store is configuration,
//! records and commands (a runtime declaration runs programs), so a store the agent could have
//! written would be a way to run code as root. [`check_store`] refuses a store unless all of
//! these hold, checked on the store's real path (symlinks resolved):
//!
//! - the store directory and its `STORE.json` are owned by the invoking user (euid) or root and
//!   are not writable by group or others ([`Purpose::Repair`] lets the directory's mode pass, so
//!   `doctor` can report it and `recover` put it back to 0700; neither runs a declared command);
//! - every ancestor directory is owned by root or the invoking user and is not writable by group
//!   or others unless sticky (as `/tmp`);
//! - it is not on a ckptfs mount ([`is_ckptfs_mount`]: an overlay or FUSE mount whose source is
//!   `ckptfs:...`, the FUSE type `fuse.ckptfs`, anything under `/run/ckptfs`), so a
//!   workspace, a view or a lower layer is never a store;
//! - it is not inside one of its own roots (a store there would be part of what an agent
//!   writes);
//! - it is not nested inside another store directory (an ancestor holding `STORE.json`), so a
//!   `STORE.json` planted inside `STORE/upper/...` is never a store.
//!
//! [`check_program`] applies the same rules to a program ckptfs runs on a store's behalf (a
//! declared runtime command): owned by root or the invoking user, not writable by others, in
//! directories others cannot write, not under a ckptfs mount and not inside any of the store's
//! roots.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::mountinfo::MountEntry;

use super::{Config, CONFIG_FILE, MOUNTS_BASE};

/// What a store is opened for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Every command: all checks.
    Use,
    /// `doctor` and `recover`: the store directory may be open to group or others (that is a
    /// finding they report and repair); every other check holds.
    Repair,
}

/// The FUSE type of ckptfs's own mounts (what the daemons mount as `FUSE_TYPE`).
pub const FUSE_TYPE: &str = "fuse.ckptfs";
const S_ISVTX: u32 = 0o1000;
const GROUP_OTHER_WRITE: u32 = 0o022;

/// Whether `m` is a mount ckptfs made (a workspace overlay, a view or lower daemon).
pub fn is_ckptfs_mount(m: &MountEntry) -> bool {
    m.source.starts_with("ckptfs:")
        || m.fstype == FUSE_TYPE
        || m.mountpoint.starts_with(MOUNTS_BASE)
        || m.mountpoint.starts_with(crate::fs::userns::mounts_base())
}

/// The deepest ckptfs mount `path` is at or under, if any (from the kernel's mount table).
///
/// # Errors
/// I/O reading the mount table.
pub fn ckptfs_mount_around(path: &Path) -> Result<Option<MountEntry>> {
    let mut best: Option<MountEntry> = None;
    for m in crate::fs::mountinfo::mounts()? {
        if path.starts_with(&m.mountpoint)
            && is_ckptfs_mount(&m)
            && best.as_ref().is_none_or(|b| {
                m.mountpoint.components().count() >= b.mountpoint.components().count()
            })
        {
            best = Some(m);
        }
    }
    Ok(best)
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// What every refusal of [`check_store`] says after the store's path.
const NOT_TRUSTED: &str = " is not trusted: ";

fn untrusted(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Untrusted(format!(
        "store {}{NOT_TRUSTED}{why}; ckptfs opens only stores that the invoking user or \
         root owns, that others cannot write, outside any workspace or root (docs/cli.md, \
         \"Finding the store\")",
        path.display()
    ))
}

/// Owner and mode rule for one path: owned by root or the invoking user; not writable by
/// group or others (unless `sticky_ok` and the sticky bit is set). With `unmapped_ok`, in a
/// user namespace, an owner it does not map (root's `/`, `/tmp`, `/usr/bin`) shows as the
/// overflow uid and is taken for root's: for the directories above a store and for programs,
/// never for the store itself, which must be the invoking user's own there.
fn owner_mode(
    md: &fs::Metadata,
    sticky_ok: bool,
    unmapped_ok: bool,
) -> std::result::Result<(), String> {
    let me = euid();
    let unmapped = unmapped_ok
        && crate::fs::userns::in_child_userns()
        && md.uid() == crate::fs::userns::overflow_uid();
    if md.uid() != 0 && md.uid() != me && !unmapped {
        return Err(format!("owned by uid {}", md.uid()));
    }
    let mode = md.mode();
    if mode & GROUP_OTHER_WRITE != 0 && !(sticky_ok && mode & S_ISVTX != 0) {
        return Err(format!(
            "writable by group or others (mode {:04o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// The ancestors of `real` (not itself), each owned by root or the invoking user and not
/// writable by others unless sticky.
fn check_ancestors(real: &Path, shown: &Path) -> Result<()> {
    for a in real.ancestors().skip(1) {
        let md = fs::metadata(a).map_err(|e| Error::io(a, e))?;
        if let Err(why) = owner_mode(&md, true, true) {
            return Err(untrusted(
                shown,
                format!("its ancestor {} is {why}", a.display()),
            ));
        }
        if a.join(CONFIG_FILE).symlink_metadata().is_ok() {
            return Err(untrusted(
                shown,
                format!("it is inside the store {}", a.display()),
            ));
        }
    }
    Ok(())
}

fn real_path(p: &Path) -> Result<PathBuf> {
    fs::canonicalize(p).map_err(|e| Error::io(p, e))
}

/// Refuses a store that is not trusted (see the module doc), naming the path and why.
///
/// # Errors
/// `Invalid` naming the store and the rule it breaks; I/O reading its metadata or the mount
/// table.
pub fn check_store(root: &Path, config: &Config, purpose: Purpose) -> Result<()> {
    let real = real_path(root)?;
    if let Some(m) = ckptfs_mount_around(&real)? {
        return Err(untrusted(
            root,
            format!(
                "it is on the ckptfs mount {} ({})",
                m.mountpoint.display(),
                m.source
            ),
        ));
    }
    let md = fs::metadata(&real).map_err(|e| Error::io(root, e))?;
    match owner_mode(&md, false, false) {
        Err(why) if why.starts_with("owned") || purpose == Purpose::Use => {
            return Err(untrusted(root, format!("the directory is {why}")));
        }
        _ => {}
    }
    let cfg = real.join(CONFIG_FILE);
    let cmd = fs::symlink_metadata(&cfg).map_err(|e| Error::io(&cfg, e))?;
    if let Err(why) = owner_mode(&cmd, false, false) {
        return Err(untrusted(root, format!("{CONFIG_FILE} is {why}")));
    }
    for (name, r) in &config.roots {
        let r = fs::canonicalize(&r.path).unwrap_or_else(|_| r.path.clone());
        if real.starts_with(&r) {
            return Err(untrusted(
                root,
                format!("it is inside its own root {name} ({})", r.display()),
            ));
        }
    }
    check_ancestors(&real, root)
}

/// Refuses a program a store declares (a runtime command) unless it is trusted as a store is:
/// a regular file owned by root or the invoking user, not writable by others, whose
/// directories others cannot write (sticky ones included: a program is never taken from
/// `/tmp`), not under a ckptfs mount and not inside any of `roots`.
///
/// # Errors
/// `Invalid` naming the program and why.
pub fn check_program(program: &Path, roots: &[PathBuf]) -> Result<PathBuf> {
    let refuse = |why: String| {
        Error::Invalid(format!(
            "program {} is not trusted: {why}; a declared command runs only a program that \
             root or the invoking user owns, in directories others cannot write, outside any \
             workspace or root",
            program.display()
        ))
    };
    if !program.is_absolute() {
        return Err(refuse("not an absolute path".into()));
    }
    let real = real_path(program)?;
    if let Some(m) = ckptfs_mount_around(&real)? {
        return Err(refuse(format!(
            "it is on the ckptfs mount {}",
            m.mountpoint.display()
        )));
    }
    for r in roots {
        let r = fs::canonicalize(r).unwrap_or_else(|_| r.clone());
        if real.starts_with(&r) {
            return Err(refuse(format!("it is inside the root {}", r.display())));
        }
    }
    let md = fs::metadata(&real).map_err(|e| Error::io(program, e))?;
    if !md.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    owner_mode(&md, false, true).map_err(|why| refuse(format!("it is {why}")))?;
    for a in real.ancestors().skip(1) {
        let md = fs::metadata(a).map_err(|e| Error::io(a, e))?;
        owner_mode(&md, false, true)
            .map_err(|why| refuse(format!("its directory {} is {why}", a.display())))?;
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ckptfs_mounts_are_told() {
        let m = |fstype: &str, source: &str, at: &str| MountEntry {
            fstype: fstype.into(),
            source: source.into(),
            mountpoint: at.into(),
            ..Default::default()
        };
        assert!(is_ckptfs_mount(&m("overlay", "ckptfs:/s:main", "/w")));
        assert!(is_ckptfs_mount(&m(FUSE_TYPE, "/s#x", "/v")));
        assert!(is_ckptfs_mount(&m("tmpfs", "x", "/run/ckptfs/ab/lower")));
        assert!(!is_ckptfs_mount(&m("overlay", "overlay", "/w")));
    }

    #[test]
    fn programs_must_be_absolute_and_system_owned() {
        assert!(check_program(Path::new("sh"), &[]).is_err());
        assert!(check_program(Path::new("/bin/sh"), &[]).is_ok());
        assert!(check_program(Path::new("/bin/sh"), &[PathBuf::from("/")]).is_err());
    }
}
