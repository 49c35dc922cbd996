//! Building trees (files, modes, mtimes, deterministic bytes, the sample trees the tests
//! capture) and comparing them: `assert_trees_equal` checks every byte and attribute;
//! `contents` maps a tree to its bytes alone, for states where metadata legitimately differs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::stat::{utimensat, UtimensatFlags};
use nix::sys::time::TimeSpec;

// ---- building -----------------------------------------------------------------------------

/// Writes a file (creating parent directories).
pub fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).expect("mkdir -p");
    }
    fs::write(path, data).expect("write file");
}

/// Sets mode bits (without following symlinks: call only on files and dirs).
pub fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Gives `path` and everything below it to `uid` (and group `uid`), without following
/// symlinks (`chown -R -P`).
pub fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("lchown");
    if fs::symlink_metadata(path).expect("lstat").is_dir() {
        for e in fs::read_dir(path).expect("readdir") {
            chown_tree(&e.expect("entry").path(), uid);
        }
    }
}

/// Makes a FIFO (mode 0644) at `path`.
pub fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
}

/// Sets atime and mtime to `ns` nanoseconds since the epoch, without following symlinks.
pub fn set_mtime(path: &Path, ns: i64) {
    let ts = TimeSpec::new(ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &ts,
        &ts,
        UtimensatFlags::NoFollowSymlink,
    )
    .expect("utimensat");
}

/// Deterministic pseudo-random bytes (xorshift), incompressible enough for chunking tests.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `cp -a src dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .status()
        .expect("cp");
    assert!(st.success(), "cp -a {} {}", src.display(), dst.display());
}

/// A small tree with a few files, a subdir and a symlink.
pub fn small_tree(root: &Path) {
    write(&root.join("a.txt"), b"alpha\n");
    write(&root.join("sub/b.txt"), b"beta\n");
    write(&root.join("sub/deeper/c.bin"), &random_bytes(3, 200_000));
    std::os::unix::fs::symlink("sub/b.txt", root.join("link")).expect("symlink");
}

/// A room of `n` files over four directories (a few larger than one chunk, the rest small
/// text of letters that depend on `seed`) and a symlink.
pub fn make_room(dir: &Path, n: usize, seed: u64) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let sub = dir.join(format!("d{}", i % 4));
        fs::create_dir_all(&sub).unwrap();
        let len = if i % 7 == 0 { 150_000 } else { 100 + i * 13 };
        let mut data = Vec::with_capacity(len);
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i as u64);
        for _ in 0..len {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            data.push(b'a' + ((x >> 33) % 26) as u8);
        }
        fs::write(sub.join(format!("f{i}.txt")), data).unwrap();
    }
    std::os::unix::fs::symlink("d0/f0.txt", dir.join("link")).ok();
}

/// The view tests' source tree: files of many sizes (0 B to 3 MB, several chunks), nested
/// dirs, symlinks (relative, absolute, dangling), modes, owners, nanosecond mtimes, xattrs,
/// odd names, duplicates, and `victim.txt` for corruption tests.
pub fn sample_tree(src: &Path) {
    fs::create_dir_all(src.join("dir/nested/deeper")).unwrap();
    fs::create_dir_all(src.join("empty-dir")).unwrap();
    fs::create_dir_all(src.join("name with spaces/é ü")).unwrap();
    for (i, size) in [0usize, 1, 4095, 4096, 65_536, 65_537, 300_000]
        .iter()
        .enumerate()
    {
        write(
            &src.join(format!("f{size}.bin")),
            &random_bytes(i as u64 + 1, *size),
        );
    }
    write(&src.join("big.bin"), &random_bytes(99, 3_000_000));
    write(
        &src.join("dir/needle.txt"),
        b"hay\nthe NEEDLE is here\nhay\n",
    );
    write(&src.join("dir/nested/deeper/leaf.txt"), b"leaf\n");
    write(&src.join("dir/same1.txt"), b"identical\n");
    write(&src.join("dir/same2.txt"), b"identical\n");
    write(&src.join("name with spaces/é ü/file"), b"unicode\n");
    write(
        &src.join("victim.txt"),
        b"this file's object will be corrupted\n",
    );
    write(&src.join("script.sh"), b"#!/bin/sh\necho hi\n");
    chmod(&src.join("script.sh"), 0o755);
    chmod(&src.join("f1.bin"), 0o600);
    chmod(&src.join("f0.bin"), 0o444);
    std::os::unix::fs::symlink("dir/needle.txt", src.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", src.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", src.join("dangling")).unwrap();
    std::os::unix::fs::chown(src.join("dir/needle.txt"), Some(1234), Some(5678)).unwrap();
    xattr::set(src.join("dir/needle.txt"), "user.color", b"blue").unwrap();
    xattr::set(src.join("dir"), "user.kind", b"folder").unwrap();
    set_mtime(&src.join("f4096.bin"), 1_600_000_000_123_456_789);
    set_mtime(
        &src.join("dir/nested/deeper/leaf.txt"),
        1_000_000_000_000_000_001,
    );
    chmod(&src.join("dir/nested"), 0o750);
}

// ---- comparing ----------------------------------------------------------------------------

/// What `assert_trees_equal` compares for one path.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Snap {
    /// `dir`, `file`, `symlink`, `fifo`, `socket`, `char-device` or `block-device`.
    pub kind: &'static str,
    /// Permission bits (with setuid, setgid, sticky); the type is `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    /// Link count of a directory (2 + its subdirectories on the filesystems tests use); `None`
    /// for other types, whose link count says nothing about the tree.
    pub dir_nlink: Option<u64>,
    /// File content, or symlink target.
    pub data: Vec<u8>,
    /// Every xattr (all namespaces the caller can read), sorted.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn xattrs_of(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    // xattr::list and get do not follow symlinks.
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = xattr::list(p)
        .expect("listxattr")
        .filter_map(|n| {
            xattr::get(p, &n)
                .expect("getxattr")
                .map(|val| (n.as_bytes().to_vec(), val))
        })
        .collect();
    v.sort();
    v
}

fn snap_one(p: &Path) -> Snap {
    let m = fs::symlink_metadata(p).expect("lstat");
    let ft = m.file_type();
    let (kind, data) = if ft.is_dir() {
        ("dir", Vec::new())
    } else if ft.is_symlink() {
        (
            "symlink",
            fs::read_link(p)
                .expect("readlink")
                .as_os_str()
                .as_bytes()
                .to_vec(),
        )
    } else if ft.is_file() {
        ("file", fs::read(p).expect("read"))
    } else if ft.is_fifo() {
        ("fifo", Vec::new())
    } else if ft.is_socket() {
        ("socket", Vec::new())
    } else if ft.is_char_device() {
        ("char-device", Vec::new())
    } else {
        ("block-device", Vec::new())
    };
    Snap {
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        dir_nlink: ft.is_dir().then(|| m.nlink()),
        data,
        xattrs: xattrs_of(p),
    }
}

/// Relative path (bytes) -> snapshot of every entry under `root`, including `root` itself ("").
pub fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, Snap> {
    let mut out = BTreeMap::new();
    out.insert(Vec::new(), snap_one(root));
    fn walk(dir: &Path, rel: &[u8], out: &mut BTreeMap<Vec<u8>, Snap>) {
        for e in fs::read_dir(dir).expect("readdir") {
            let e = e.expect("entry");
            let mut r = rel.to_vec();
            if !r.is_empty() {
                r.push(b'/');
            }
            r.extend_from_slice(e.file_name().as_bytes());
            let p = e.path();
            let s = snap_one(&p);
            let is_dir = s.kind == "dir";
            out.insert(r.clone(), s);
            if is_dir {
                walk(&p, &r, out);
            }
        }
    }
    walk(root, b"", &mut out);
    out
}

/// Asserts two directory trees are equal in names, types, content, sizes, modes, uid/gid,
/// mtimes (ns), directory link counts, symlink targets and xattrs (every namespace),
/// including the top directories' own metadata.
pub fn assert_trees_equal(a: &Path, b: &Path) {
    assert_snapshots_equal(&snapshot(a), &snapshot(b), &format!("{a:?} vs {b:?}"));
}

/// As `assert_trees_equal`, for snapshots taken earlier.
pub fn assert_snapshots_equal(
    a: &BTreeMap<Vec<u8>, Snap>,
    b: &BTreeMap<Vec<u8>, Snap>,
    what: &str,
) {
    let ka: Vec<String> = a.keys().map(|k| lossy(k)).collect();
    let kb: Vec<String> = b.keys().map(|k| lossy(k)).collect();
    assert_eq!(ka, kb, "{what}: different entries");
    for (k, sa) in a {
        let sb = &b[k];
        // Field by field for readable failures; content by length, then equality.
        let p = lossy(k);
        assert_eq!(sa.kind, sb.kind, "{what}: type of {p:?}");
        assert_eq!(sa.mode, sb.mode, "{what}: mode of {p:?}");
        assert_eq!((sa.uid, sa.gid), (sb.uid, sb.gid), "{what}: owner of {p:?}");
        assert_eq!(sa.mtime_ns, sb.mtime_ns, "{what}: mtime of {p:?}");
        assert_eq!(sa.dir_nlink, sb.dir_nlink, "{what}: nlink of {p:?}");
        assert_eq!(sa.xattrs, sb.xattrs, "{what}: xattrs of {p:?}");
        assert_eq!(sa.data.len(), sb.data.len(), "{what}: size of {p:?}");
        assert!(sa.data == sb.data, "{what}: content of {p:?} differs");
    }
}

/// Bytes as text, lossily.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Content of every entry below `dir`, and nothing else: relative path -> bytes for files,
/// `"-> target"` for symlinks, and `"path/"` -> empty for directories. For states that must
/// hold the same files while their metadata may differ (a crashed restore, a copy).
pub fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(base: &Path, d: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut ents: Vec<PathBuf> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        ents.sort();
        for p in ents {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if md.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, out);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
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

/// Allocated bytes of a file (st_blocks * 512).
pub fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}
