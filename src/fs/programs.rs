//! The system programs ckptfs runs itself (bash, fusermount3), found only in system directories.

/// The system directories ckptfs finds the programs it starts in (`bash`, `fusermount3`, a
/// declared runtime command's bare name), and the PATH it gives them: never the caller's PATH,
/// which may name a directory an agent writes.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The absolute path of the program `name` in [`SYSTEM_PATH`] (`/usr/bin/NAME` when none
/// holds it, so the error names that).
pub fn system_program(name: &str) -> std::path::PathBuf {
    SYSTEM_PATH
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| std::path::Path::new("/usr/bin").join(name))
}

/// Unmounts the FUSE mount at `mp` (lazily: detached now, gone once unused): `umount2`, or,
/// for a user who may not (not root, `EPERM`), `fusermount3 -u` as libfuse does, which
/// unmounts a FUSE mount that user made. `EBUSY` when it is in use (not lazy).
///
/// # Errors
/// The errno of the refusal; `EPERM` also when fusermount3 could not be run.
pub fn unmount_fuse(mp: &std::path::Path, lazy: bool) -> nix::Result<()> {
    use nix::errno::Errno;
    use nix::mount::{umount2, MntFlags};
    let flags = if lazy {
        MntFlags::MNT_DETACH
    } else {
        MntFlags::empty()
    };
    match umount2(mp, flags) {
        Err(Errno::EPERM) if !nix::unistd::geteuid().is_root() => {}
        other => return other,
    }
    let mut c = std::process::Command::new(system_program("fusermount3"));
    c.arg("-u").arg("-q");
    if lazy {
        c.arg("-z");
    }
    c.arg(mp)
        .env_clear()
        .env("PATH", SYSTEM_PATH)
        .stdin(std::process::Stdio::null());
    let out = c.output().map_err(|_| Errno::EPERM)?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(if said.contains("busy") {
        Errno::EBUSY
    } else {
        Errno::EPERM
    })
}
