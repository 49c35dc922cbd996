//! A native session file, read from the agent's home through the safe module: the agent
//! writes the home, so the file may be a symlink, a FIFO or huge by the time it is read; it is
//! opened beneath the home with no symlink followed, regular files only, and read up to a
//! bound.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::safe::Dir;

/// The most of a session file read.
pub const MAX_SESSION: u64 = 256 << 20;

/// `file`, which must lie under `home`: its bytes (at most [`MAX_SESSION`]).
///
/// # Errors
/// `Untrusted` when it is not under the home; the safe module's refusals (a symlink on the
/// way, not a regular file); I/O.
pub fn read(home: &Path, file: &Path) -> Result<Vec<u8>> {
    let rel = file.strip_prefix(home).map_err(|_| {
        Error::Untrusted(format!(
            "session file {} is not under the agent's home {}",
            file.display(),
            home.display()
        ))
    })?;
    let dir = Dir::open(home)?;
    let (f, _) = dir.open_file(rel)?;
    let mut data = Vec::new();
    f.take(MAX_SESSION)
        .read_to_end(&mut data)
        .map_err(|e| Error::io(file, e))?;
    Ok(data)
}

/// The JSON lines of a session file (lines that do not parse are skipped).
pub fn lines(data: &[u8]) -> Vec<serde_json::Value> {
    data.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// The files under `dir` (relative to `home`) whose name contains `needle`, newest first by
/// mtime, walked through the safe module at most `depth` levels down.
pub fn find(home: &Path, dir: &Path, needle: &str, depth: usize) -> Vec<PathBuf> {
    let mut found: Vec<(PathBuf, i64)> = Vec::new();
    let Ok(top) = Dir::open(home) else {
        return Vec::new();
    };
    let Ok(start) = (if dir.as_os_str().is_empty() {
        top.try_clone()
    } else {
        top.open_dir(dir)
    }) else {
        return Vec::new();
    };
    walk(&start, dir, needle, depth, &mut found);
    found.sort_by_key(|f| std::cmp::Reverse(f.1));
    found.into_iter().map(|(p, _)| home.join(p)).collect()
}

fn walk(d: &Dir, rel: &Path, needle: &str, depth: usize, out: &mut Vec<(PathBuf, i64)>) {
    let Ok(names) = d.entries() else { return };
    for n in names {
        let Ok(Some(st)) = d.stat(&n) else { continue };
        let p = rel.join(&n);
        if st.is_dir() && depth > 0 {
            if let Ok(sub) = d.open_dir(&n) {
                walk(&sub, &p, needle, depth - 1, out);
            }
        } else if st.is_file() && n.to_string_lossy().contains(needle) {
            out.push((p, st.mtime.0 * 1_000_000_000 + st.mtime.1));
        }
    }
}

/// `Invalid` naming the session file and what it lacks.
pub fn lacks(file: &Path, what: &str) -> Error {
    Error::Invalid(format!("session file {}: {what}", file.display()))
}
