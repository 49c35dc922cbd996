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
