//! Reading `/proc/self/mountinfo`: which mounts exist, where, and from which store. The one
//! parser of the mount table; everything that looks for mounts uses it.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A line of /proc/self/mountinfo.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the mounted filesystem.
    pub dev: String,
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The filesystem's own options (e.g. a cgroup v1 hierarchy's controllers, an overlay's
    /// lowerdir and upperdir); empty when the line has none.
    pub options: String,
}

/// Undoes the kernel's octal escapes (`\040` for a space, `\011`, `\012`, `\134`). A backslash
/// not followed by three octal digits that fit a byte stays as it is.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let code = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .filter(|o| o.bytes().all(|c| (b'0'..=b'7').contains(&c)))
                .and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(v) = code {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text (fields: id parent maj:min root mountpoint opts [optional...] -
/// fstype source superopts). Lines without the `-` separator or its two fields are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < sep + 3 {
            continue;
        }
        out.push(MountEntry {
            dev: fields[2].to_string(),
            mountpoint: PathBuf::from(unescape_mountinfo(fields[4])),
            fstype: fields[sep + 1].to_string(),
            source: unescape_mountinfo(fields[sep + 2]),
            options: fields
                .get(sep + 3)
                .map(|s| unescape_mountinfo(s))
                .unwrap_or_default(),
        });
    }
    out
}

/// The mounts of this process's mount namespace.
///
/// # Errors
/// I/O reading `/proc/self/mountinfo`.
pub fn mounts() -> Result<Vec<MountEntry>> {
    let p = Path::new("/proc/self/mountinfo");
    let text = fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
    Ok(parse_mountinfo(&text))
}

/// The mount at exactly `path` (the last one, if stacked).
///
/// # Errors
/// I/O reading `/proc/self/mountinfo`.
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

    #[test]
    fn parses_several_lines_and_skips_broken_ones() {
        let t =
            "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse ckptfs:/s:main rw,user_id=0\n\
                 37 35 98:0 / /x rw - overlay overlay rw,upperdir=/s/upper/b\\040c/r\n\
                 38 35 0:5 / /y rw - tmpfs tmpfs\nbroken line\n39 35 0:6 / /z rw -\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mountpoint, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].source, "ckptfs:/s:main");
        assert_eq!(m[1].dev, "98:0");
        assert!(m[1].options.contains("upperdir=/s/upper/b c/r"));
        assert_eq!(m[2].options, "");
    }

    #[test]
    fn keeps_backslashes_that_are_no_escape() {
        assert_eq!(unescape_mountinfo("a\\b"), "a\\b");
        assert_eq!(unescape_mountinfo("a\\777"), "a\\777");
        assert_eq!(unescape_mountinfo("a\\134b"), "a\\b");
        assert_eq!(unescape_mountinfo("end\\04"), "end\\04");
    }
}
