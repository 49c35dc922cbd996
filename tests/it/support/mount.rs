//! Mounts: what `/proc/self/mountinfo` lists, a `MountGuard` that unmounts on drop (also when
//! the test panicked), unmounting everything below a temp dir, filesystem images on loop
//! devices, and waiting for a condition.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::cli::bin;

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// (mountpoint, source, filesystem options) of every mount of this process, in mount order.
fn mountinfo() -> Vec<(PathBuf, String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((
                PathBuf::from(unescape(f.get(4)?)),
                unescape(f.get(sep + 2)?),
                unescape(f.get(sep + 3).copied().unwrap_or("")),
            ))
        })
        .collect()
}

/// (mountpoint, source) of every mount of this process, in mount order.
pub fn mounts() -> Vec<(PathBuf, String)> {
    mountinfo()
        .into_iter()
        .map(|(mp, src, _)| (mp, src))
        .collect()
}

/// The filesystem's options (mountinfo's super options, where FUSE lists `allow_other`) of
/// the topmost mount at exactly `path`, if any.
pub fn mount_options(path: &Path) -> Option<String> {
    mountinfo()
        .into_iter()
        .rev()
        .find_map(|(mp, _, opts)| (mp == path).then_some(opts))
}

/// The source of the topmost mount at exactly `path` (e.g. `ckptfs:STORE:...`), if any.
pub fn mount_source(path: &Path) -> Option<String> {
    mounts()
        .into_iter()
        .rev()
        .find_map(|(mp, src)| (mp == path).then_some(src))
}

/// Whether something is mounted at exactly `path`.
pub fn mounted(path: &Path) -> bool {
    mount_source(path).is_some()
}

/// Every mountpoint at or below `dir`, deepest first (the order to unmount them in).
/// Mounts of a ckptfs store below `dir` count too, wherever they are (the store's own mounts
/// are under /run/ckptfs).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let ours = format!("ckptfs:{}/", dir.display());
    let mut points: Vec<PathBuf> = mounts()
        .into_iter()
        .filter(|(mp, src)| mp.starts_with(dir) || src.starts_with(&ours))
        .map(|(mp, _)| mp)
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    points.dedup();
    points
}

/// Lazily unmounts everything at or below `dir` (errors ignored: this is clean-up).
pub fn unmount_all_under(dir: &Path) {
    for m in mounts_under(dir) {
        let _ = Command::new("umount").arg("-l").arg(&m).output();
    }
}

/// Unmounts `mp` on drop (via `ckptfs umount`, then lazily), even when the test panicked.
pub struct MountGuard {
    pub mp: PathBuf,
}

impl MountGuard {
    pub fn new(mp: &Path) -> MountGuard {
        MountGuard {
            mp: mp.to_path_buf(),
        }
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if mounted(&self.mp) {
            let _ = Command::new(bin()).arg("umount").arg(&self.mp).output();
        }
        if mounted(&self.mp) {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).output();
        }
    }
}

/// Makes a `size`-byte image in `dir` with `mkfs` (program and arguments; the image path
/// goes last) and mounts it on a loop device at `dir/fs` (a `Workspace`'s drop unmounts it
/// when `dir` is its temp dir). `None`, saying why, where the machine cannot mount a loop
/// device.
pub fn mount_image(dir: &Path, mkfs: &[&str], size: u64) -> Option<PathBuf> {
    let img = dir.join("fs.img");
    let mnt = dir.join("fs");
    fs::create_dir(&mnt).expect("mkdir fs");
    fs::File::create(&img)
        .expect("create image")
        .set_len(size)
        .expect("size image");
    let o = Command::new(mkfs[0])
        .args(&mkfs[1..])
        .arg(&img)
        .output()
        .expect("run mkfs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .output()
        .expect("run mount");
    if !m.status.success() {
        eprintln!(
            "SKIPPED: cannot mount a loop device here ({})",
            String::from_utf8_lossy(&m.stderr).trim()
        );
        return None;
    }
    Some(mnt)
}

/// Polls `f` every `every` until it holds or `timeout` passed; whether it held.
pub fn wait_every(timeout: Duration, every: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(every);
    }
    f()
}

/// Polls `f` every 20 ms for up to `timeout`; whether it held.
pub fn wait_for(timeout: Duration, f: impl FnMut() -> bool) -> bool {
    wait_every(timeout, Duration::from_millis(20), f)
}

/// Waits (up to 10 s, polling every 100 ms) until `cond` holds; panics naming `what` if not.
pub fn eventually(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_every(Duration::from_secs(10), Duration::from_millis(100), cond),
        "timed out waiting until {what}"
    );
}
