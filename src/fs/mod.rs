//! The ground floor: how ckptfs touches a filesystem.
//!
//! - [`safe`]: every path operation on a tree an agent can write (directory fds, `*at` calls,
//!   no symlink followed, non-blocking opens).
//! - [`atomic`]: the durable write path (temp name, sync, rename, directory sync) with its
//!   fault injection for crash tests.
//! - [`mountinfo`]: the mount table; [`programs`]: the system programs ckptfs starts.
//! - [`userns`]: the user namespace an ordinary account's workspaces are mounted in.
//! - [`sys`]: the few libc calls without a safe wrapper; the only module allowed `unsafe`.

pub mod atomic;
pub mod mountinfo;
pub mod programs;
pub mod safe;
pub mod sys;
pub mod userns;

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Entries of `dir` (empty when it does not exist), sorted.
///
/// # Errors
/// I/O reading the directory.
pub fn list_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        out.push(ent.map_err(|e| Error::io(dir, e))?.path());
    }
    out.sort();
    Ok(out)
}

/// Every process in `/proc`: its pid and its directory there (none when `/proc` cannot be
/// read; a process gone meanwhile is skipped by whoever reads its files).
pub fn processes() -> Vec<(u32, PathBuf)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, e.path()))
        })
        .collect()
}

/// The last component of `p`, lossily as text ("" for none).
pub fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `NAME.json` records in `dir` (pins, tombstones, daemon and workspace states, park
/// records): their paths and `NAME`s, sorted by name; none when `dir` does not exist. Names
/// that are not UTF-8 are no record. Reading each is its caller's: what a bad one means
/// differs.
///
/// # Errors
/// I/O listing the directory.
pub fn json_records(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out: Vec<(PathBuf, String)> = list_dir(dir)?
        .into_iter()
        .filter_map(|p| {
            let stem = p.file_name()?.to_str()?.strip_suffix(".json")?;
            let stem = (!stem.is_empty()).then(|| stem.to_string())?;
            Some((p, stem))
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}
