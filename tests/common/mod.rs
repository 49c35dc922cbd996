//! Shared helpers for the integration tests: temp stores, tree builders, running the real
//! binary, and `assert_trees_equal` (content, modes, mtimes in ns, symlink targets, xattrs,
//! uid/gid). Each test file uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix::sys::stat::{utimensat, UtimensatFlags};
use nix::sys::time::TimeSpec;
use serde_json::Value;
use tempfile::TempDir;

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// A command for the binary with a clean environment for the things we control.
pub fn cmd<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(bin());
    c.args(args);
    c.env_remove("CKPTFS_FAULT");
    c.env_remove("RUST_LOG");
    c
}

/// Runs the binary and returns its output (whatever the exit status).
pub fn run<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    cmd(args).output().expect("spawning ckptfs")
}

fn describe(args: &[String], o: &Output) -> String {
    format!(
        "ckptfs {}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        args.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn strings<I, S>(args: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    args.into_iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect()
}

/// Runs the binary, asserts exit 0, returns stdout.
pub fn ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = run(&args);
    assert!(
        o.status.success(),
        "expected success: {}",
        describe(&args, &o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the binary with `--json` appended, asserts exit 0, parses stdout.
pub fn ok_json<I, S>(args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut args = strings(args);
    args.push("--json".into());
    let out = ok(&args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON from {args:?}: {e}\n{out}"))
}

/// Runs the binary, asserts the exit code and a one-line error on stderr without a panic;
/// returns that line.
pub fn fails<I, S>(code: i32, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args = strings(args);
    let o = run(&args);
    assert_error_output(&args, &o, code)
}

/// Asserts `o` is a clean failure with `code`: no panic, one line on stderr. Returns it.
pub fn assert_error_output(args: &[String], o: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{}", describe(args, o));
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "panic: {}",
        describe(args, o)
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "expected exactly one error line: {}",
        describe(args, o)
    );
    err.trim_end().to_string()
}

/// A temp directory holding a store and one or more roots.
pub struct Env {
    pub tmp: TempDir,
    pub store: PathBuf,
    pub roots: BTreeMap<String, PathBuf>,
}

impl Env {
    /// A store with one root named `ws` (an empty directory).
    pub fn new() -> Env {
        Env::with_roots(&["ws"], &[])
    }

    /// A store with the given root names, each an empty directory, plus extra init args.
    pub fn with_roots(names: &[&str], extra: &[&str]) -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-test-")
            .tempdir()
            .expect("tempdir");
        let store = tmp.path().join("store");
        let mut roots = BTreeMap::new();
        let mut args: Vec<String> = vec!["init".into(), store.display().to_string()];
        for n in names {
            let p = tmp.path().join(format!("root-{n}"));
            fs::create_dir(&p).expect("mkdir root");
            args.push("--root".into());
            args.push(format!("{n}={}", p.display()));
            roots.insert(n.to_string(), p);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        ok(&args);
        Env { tmp, store, roots }
    }

    pub fn s(&self) -> String {
        self.store.display().to_string()
    }

    /// The path of root `name`.
    pub fn root(&self, name: &str) -> &Path {
        &self.roots[name]
    }

    /// The single root `ws`.
    pub fn ws(&self) -> &Path {
        self.root("ws")
    }

    /// A fresh path in the temp dir (not created).
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// `capture STORE ARGS... --json`; returns the parsed report.
    pub fn capture(&self, extra: &[&str]) -> Value {
        let mut args = vec!["capture".to_string(), self.s()];
        args.extend(extra.iter().map(|s| s.to_string()));
        ok_json(&args)
    }

    /// Captures and returns the new checkpoint id.
    pub fn capture_id(&self, extra: &[&str]) -> String {
        let v = self.capture(extra);
        v["id"].as_str().expect("id").to_string()
    }

    /// `restore STORE SPEC --to DIR`.
    pub fn restore(&self, spec: &str, to: &Path) -> Value {
        ok_json([
            "restore",
            &self.s(),
            spec,
            "--to",
            &to.display().to_string(),
        ])
    }

    /// Every object file under objects/ (name -> size).
    pub fn objects(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for fan in fs::read_dir(self.store.join("objects")).expect("objects dir") {
            let fan = fan.expect("entry").path();
            for o in fs::read_dir(&fan).expect("fan dir") {
                let o = o.expect("entry");
                let name = format!(
                    "{}/{}",
                    fan.file_name().unwrap().to_string_lossy(),
                    o.file_name().to_string_lossy()
                );
                out.insert(name, o.metadata().expect("stat").len());
            }
        }
        out
    }

    /// Path of the first object file whose id starts with `hex` (any suffix).
    pub fn object_file(&self, hex: &str) -> PathBuf {
        let dir = self.store.join("objects").join(&hex[..2]);
        for e in fs::read_dir(&dir).expect("fan dir") {
            let e = e.expect("entry");
            if e.file_name().to_string_lossy().starts_with(&hex[2..]) {
                return e.path();
            }
        }
        panic!("object {hex} not found")
    }

    /// Checkpoint record ids present in the store.
    pub fn checkpoints(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.store.join("checkpoints"))
            .expect("checkpoints dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// Everything durable in the store except the audit log and caches: objects, checkpoint
    /// records, refs, tmp and run contents (path -> bytes). Used to prove "store unchanged".
    pub fn durable_state(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        for sub in ["objects", "checkpoints", "refs", "tmp", "run"] {
            collect_files(&self.store.join(sub), &self.store, &mut out);
        }
        out
    }
}

fn collect_files(dir: &Path, base: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let p = e.expect("entry").path();
        let m = fs::symlink_metadata(&p).expect("lstat");
        if m.is_dir() {
            collect_files(&p, base, out);
        } else {
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            out.insert(rel, fs::read(&p).unwrap_or_default());
        }
    }
}

// ---- tree builders ----------------------------------------------------------------------

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

/// A small tree with a few files, a subdir and a symlink.
pub fn small_tree(root: &Path) {
    write(&root.join("a.txt"), b"alpha\n");
    write(&root.join("sub/b.txt"), b"beta\n");
    write(&root.join("sub/deeper/c.bin"), &random_bytes(3, 200_000));
    std::os::unix::fs::symlink("sub/b.txt", root.join("link")).expect("symlink");
}

// ---- tree comparison --------------------------------------------------------------------

/// What `assert_trees_equal` compares for one path.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Snap {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    /// File content, or symlink target.
    pub data: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn xattrs_of(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
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
    } else {
        ("special", Vec::new())
    };
    Snap {
        kind,
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
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

/// Asserts two directory trees are equal in names, types, content, modes, uid/gid, mtimes
/// (ns), symlink targets and xattrs, including the top directories' own metadata.
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
        // Compare field by field for readable failures; content by length + equality.
        let p = lossy(k);
        assert_eq!(sa.kind, sb.kind, "{what}: type of {p:?}");
        assert_eq!(sa.mode, sb.mode, "{what}: mode of {p:?}");
        assert_eq!((sa.uid, sa.gid), (sb.uid, sb.gid), "{what}: owner of {p:?}");
        assert_eq!(sa.mtime_ns, sb.mtime_ns, "{what}: mtime of {p:?}");
        assert_eq!(sa.xattrs, sb.xattrs, "{what}: xattrs of {p:?}");
        assert_eq!(sa.data.len(), sb.data.len(), "{what}: size of {p:?}");
        assert!(sa.data == sb.data, "{what}: content of {p:?} differs");
    }
}

pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Allocated bytes of a file (st_blocks * 512).
pub fn allocated(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

// ---- raw store manipulation (for corruption and traversal tests) --------------------------

/// Writes raw bytes as an object into the store (uncompressed), returning its hex id.
pub fn put_raw_object(store: &Path, data: &[u8]) -> String {
    let id = ckptfs::ObjectId::of(data).to_hex();
    let p = store.join("objects").join(&id[..2]).join(&id[2..]);
    if !p.exists() {
        fs::write(&p, data).expect("write raw object");
    }
    id
}

/// Writes a checkpoint record whose root `root` points at `tree` (hex), copying the other
/// fields from an existing checkpoint `template`; returns the new record's id.
pub fn put_checkpoint_with_tree(store: &Path, template: &str, root: &str, tree: &str) -> String {
    let path = store.join("checkpoints").join(template);
    let mut v: Value = serde_json::from_slice(&fs::read(path).expect("read record")).expect("json");
    v["roots"][root]["tree"] = Value::String(tree.to_string());
    v["message"] = Value::String("crafted".into());
    let bytes = serde_json::to_vec(&v).expect("encode");
    let id = ckptfs::ObjectId::of(&bytes).to_hex();
    fs::write(store.join("checkpoints").join(&id), &bytes).expect("write record");
    id
}

/// Reads a checkpoint record as JSON.
pub fn record(store: &Path, id: &str) -> Value {
    serde_json::from_slice(&fs::read(store.join("checkpoints").join(id)).expect("read record"))
        .expect("json")
}
