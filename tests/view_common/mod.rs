//! Shared helpers of the view tests: a rich source tree, a store captured from it, running the
//! binary, a `MountGuard` that unmounts even when a test fails, and a tree comparison.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

pub const BIN: &str = env!("CARGO_BIN_EXE_ckptfs");

/// Runs ckptfs with `args`.
pub fn ck(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running ckptfs")
}

/// Runs ckptfs and asserts success; returns stdout.
pub fn ck_ok(args: &[&str]) -> String {
    let o = ck(args);
    assert!(
        o.status.success(),
        "ckptfs {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs a shell command; asserts success; returns stdout.
pub fn sh(cmd: &str) -> String {
    let o = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        o.status.success(),
        "{cmd} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The mount source at exactly `path`, if any.
pub fn mounted(path: &Path) -> Option<String> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.to_str().unwrap().replace(' ', "\\040");
    text.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        (f[4] == p).then(|| f[sep + 2].to_string())
    })
}

pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Unmounts on drop (via `ckptfs umount`, then lazily), even when the test panicked.
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
        if mounted(&self.mp).is_some() {
            let _ = Command::new(BIN).arg("umount").arg(&self.mp).output();
        }
        if mounted(&self.mp).is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).output();
        }
    }
}

/// A temp dir with a source tree `src/`, a store `store/` whose root `work` is recorded at
/// `room/` (which does not exist), and one checkpoint captured from `src/` (label `first`).
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub src: PathBuf,
    pub store: PathBuf,
    pub room: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("ckptfs-view-")
            .tempdir()
            .unwrap();
        let src = dir.path().join("src");
        let store = dir.path().join("store");
        let room = dir.path().join("room");
        build_tree(&src);
        ck_ok(&[
            "init",
            store.to_str().unwrap(),
            "--root",
            &format!("work={}", room.display()),
        ]);
        let f = Fixture {
            dir,
            src,
            store,
            room,
        };
        f.capture(Some("first"));
        f
    }

    pub fn store_str(&self) -> &str {
        self.store.to_str().unwrap()
    }

    pub fn capture(&self, label: Option<&str>) {
        let from = format!("work={}", self.src.display());
        let mut args = vec!["capture", self.store_str(), "--from", &from, "--json"];
        if let Some(l) = label {
            args.extend(["-l", l]);
        }
        ck_ok(&args);
    }

    /// A fresh empty directory under the fixture.
    pub fn dir(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::create_dir_all(&p).unwrap();
        p
    }

    /// Mounts `first:work` at a new directory `name`; returns the guard.
    pub fn mount(&self, name: &str) -> MountGuard {
        let mp = self.dir(name);
        let g = MountGuard::new(&mp);
        ck_ok(&[
            "mount",
            self.store_str(),
            "first:work",
            "--at",
            mp.to_str().unwrap(),
        ]);
        assert!(mounted(&mp).is_some());
        g
    }
}

fn pseudo_random(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 7) as u8
        })
        .collect()
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Files of many sizes (0 B to 3 MB, several chunks), nested dirs, symlinks (relative,
/// absolute, dangling), modes, owners, nanosecond mtimes, xattrs, odd names, duplicates.
pub fn build_tree(src: &Path) {
    fs::create_dir_all(src.join("dir/nested/deeper")).unwrap();
    fs::create_dir_all(src.join("empty-dir")).unwrap();
    fs::create_dir_all(src.join("name with spaces/é ü")).unwrap();
    for (i, size) in [0usize, 1, 4095, 4096, 65_536, 65_537, 300_000]
        .iter()
        .enumerate()
    {
        fs::write(
            src.join(format!("f{size}.bin")),
            pseudo_random(*size, i as u32 + 1),
        )
        .unwrap();
    }
    fs::write(src.join("big.bin"), pseudo_random(3_000_000, 99)).unwrap();
    fs::write(
        src.join("dir/needle.txt"),
        b"hay\nthe NEEDLE is here\nhay\n",
    )
    .unwrap();
    fs::write(src.join("dir/nested/deeper/leaf.txt"), b"leaf\n").unwrap();
    fs::write(src.join("dir/same1.txt"), b"identical\n").unwrap();
    fs::write(src.join("dir/same2.txt"), b"identical\n").unwrap();
    fs::write(src.join("name with spaces/é ü/file"), b"unicode\n").unwrap();
    fs::write(
        src.join("victim.txt"),
        b"this file's object will be corrupted\n",
    )
    .unwrap();
    fs::write(src.join("script.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(src.join("script.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(src.join("f1.bin"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(src.join("f0.bin"), fs::Permissions::from_mode(0o444)).unwrap();
    std::os::unix::fs::symlink("dir/needle.txt", src.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", src.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", src.join("dangling")).unwrap();
    std::os::unix::fs::chown(src.join("dir/needle.txt"), Some(1234), Some(5678)).unwrap();
    xattr::set(src.join("dir/needle.txt"), "user.color", b"blue").unwrap();
    xattr::set(src.join("dir"), "user.kind", b"folder").unwrap();
    set_mtime(&src.join("f4096.bin"), 1_600_000_000, 123_456_789);
    set_mtime(&src.join("dir/nested/deeper/leaf.txt"), 1_000_000_000, 1);
    fs::set_permissions(src.join("dir/nested"), fs::Permissions::from_mode(0o750)).unwrap();
}

fn xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = xattr::list(p)
        .unwrap()
        .filter(|n| n.to_string_lossy().starts_with("user."))
        .map(|n| {
            let val = xattr::get(p, &n).unwrap().unwrap_or_default();
            (n.to_string_lossy().into_owned(), val)
        })
        .collect();
    v.sort();
    v
}

fn same_attrs(a: &Path, b: &Path) {
    let ma = fs::symlink_metadata(a).unwrap();
    let mb = fs::symlink_metadata(b).unwrap();
    let what = b.display();
    assert_eq!(ma.file_type(), mb.file_type(), "type of {what}");
    if !ma.file_type().is_symlink() {
        assert_eq!(ma.mode(), mb.mode(), "mode of {what}");
    }
    assert_eq!(
        (ma.uid(), ma.gid()),
        (mb.uid(), mb.gid()),
        "owner of {what}"
    );
    assert_eq!(
        (ma.mtime(), ma.mtime_nsec()),
        (mb.mtime(), mb.mtime_nsec()),
        "mtime of {what}"
    );
    if ma.is_dir() {
        assert_eq!(ma.nlink(), mb.nlink(), "nlink of {what}");
    } else {
        assert_eq!(ma.len(), mb.len(), "size of {what}");
    }
    if !ma.file_type().is_symlink() {
        assert_eq!(xattrs(a), xattrs(b), "xattrs of {what}");
    }
}

/// Asserts that `b` is an exact copy of `a`: names, types, modes, owners, mtimes, sizes,
/// directory link counts, symlink targets, user xattrs and every byte.
pub fn assert_trees_equal(a: &Path, b: &Path) {
    same_attrs(a, b);
    let names = |p: &Path| {
        let mut v: Vec<_> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let na = names(a);
    assert_eq!(na, names(b), "entries of {}", b.display());
    for n in na {
        let (pa, pb) = (a.join(&n), b.join(&n));
        same_attrs(&pa, &pb);
        let m = fs::symlink_metadata(&pa).unwrap();
        if m.is_dir() {
            assert_trees_equal(&pa, &pb);
        } else if m.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap());
        } else {
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {}",
                pb.display()
            );
        }
    }
}

/// (relative path, inode) of every entry below `root`, sorted.
pub fn inodes(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            out.push((e.path().strip_prefix(root).unwrap().to_path_buf(), m.ino()));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}
