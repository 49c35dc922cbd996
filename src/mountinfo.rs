//! Reading `/proc/self/mountinfo`: which mounts exist, where, and from which store.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A line of /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the mounted filesystem.
    pub dev: String,
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The filesystem's own options (e.g. a cgroup v1 hierarchy's controllers).
    pub options: String,
}

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < sep + 4 || fields.len() < 5 {
            continue;
        }
        out.push(MountEntry {
            dev: fields[2].to_string(),
            mountpoint: PathBuf::from(unescape_mountinfo(fields[4])),
            fstype: fields[sep + 1].to_string(),
            source: unescape_mountinfo(fields[sep + 2]),
            options: fields[sep + 3].to_string(),
        });
    }
    out
}

/// The mounts of this process's mount namespace.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let p = Path::new("/proc/self/mountinfo");
    let text = fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
    Ok(parse_mountinfo(&text))
}

/// The mount at exactly `path` (the last one, if stacked).
pub fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.mountpoint == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escaped_lines() {
        let l =
            "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - overlay ckptfs:/s:main rw,lowerdir=x";
        let m = parse_mountinfo(l).remove(0);
        assert_eq!(m.mountpoint, PathBuf::from("/mnt/a b"));
        assert_eq!(m.fstype, "overlay");
        assert_eq!(m.source, "ckptfs:/s:main");
        assert_eq!(m.options, "rw,lowerdir=x");
    }
}
