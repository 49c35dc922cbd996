//! Reading `/proc/self/mountinfo`: which mounts exist, where, and from which store.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// One line of mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undoes the kernel's octal escaping (`\040` for space, `\012` for newline...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount of this process's namespace.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let p = Path::new("/proc/self/mountinfo");
    let text = fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
    Ok(text.lines().filter_map(parse_line).collect())
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split(' ').nth(4)?;
    let mut r = right.split(' ');
    let fstype = r.next()?;
    let source = r.next()?;
    Some(MountEntry {
        mount_point: PathBuf::from(unescape(mount_point)),
        fstype: fstype.to_string(),
        source: unescape(source),
    })
}

/// The topmost mount at exactly `path`, if any.
pub fn mount_at(path: &Path) -> Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.mount_point == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_escaped_lines() {
        let l =
            "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - overlay ckptfs:/s:main rw,lowerdir=x";
        let m = parse_line(l).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(m.fstype, "overlay");
        assert_eq!(m.source, "ckptfs:/s:main");
    }
}
