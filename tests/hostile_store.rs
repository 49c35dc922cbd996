//! Hostile stores: a store copied or received from elsewhere is untrusted input. Objects that
//! are huge sparse files, symlinks to FIFOs, symlinked fan-out directories, and trees whose
//! chunk lengths lie must each make `cat`, `restore` and `verify` fail with one clear line
//! naming the object, without a panic, an abort or a hang.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ckptfs::store::tree::{Chunk, Entry, EntryKind, Tree};
use ckptfs::ObjectId;
use serde_json::Value;

/// Every command must be done within this.
const TIMEOUT: Duration = Duration::from_secs(20);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// Runs the binary with a timeout; `None` when it had to be killed. Output is drained by
/// threads, so a command that writes much is not mistaken for one that hangs.
fn run_for<S: AsRef<OsStr>>(args: &[S]) -> Option<Output> {
    let mut child = Command::new(bin())
        .args(args)
        .env_remove("CKPTFS_FAULT")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ckptfs");
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for ckptfs") {
            break status;
        }
        if t0.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Some(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

fn describe<S: AsRef<OsStr>>(args: &[S], o: &Output) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    format!(
        "ckptfs {}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        args.join(" "),
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok<S: AsRef<OsStr>>(args: &[S]) -> String {
    let o = run_for(args).expect("command timed out");
    assert!(
        o.status.success(),
        "expected success: {}",
        describe(args, &o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts a clean failure within the timeout: exit 1, no panic, one line on stderr that
/// contains every word of `words`. Returns the line.
fn refused<S: AsRef<OsStr>>(args: &[S], words: &[&str]) -> String {
    let o = run_for(args).unwrap_or_else(|| {
        let a: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        panic!("ckptfs {} hung (killed after {TIMEOUT:?})", a.join(" "))
    });
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", describe(args, &o));
    assert!(!err.contains("panicked"), "panic: {}", describe(args, &o));
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "expected one error line: {}",
        describe(args, &o)
    );
    for w in words {
        assert!(err.contains(w), "{err:?} lacks {w:?}");
    }
    err.trim_end().to_string()
}

/// Asserts `verify` finishes within the timeout with exit 1 (findings), no panic, nothing on
/// stderr, and a finding on stdout that contains every word of `words`.
fn verify_finds<S: AsRef<OsStr>>(args: &[S], words: &[&str]) {
    let o = run_for(args).expect("verify hung");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", describe(args, &o));
    assert!(o.stderr.is_empty(), "{}", describe(args, &o));
    assert!(
        out.lines().any(|l| words.iter().all(|w| l.contains(w))),
        "no finding with {words:?}: {}",
        describe(args, &o)
    );
}

/// A store with root `ws` holding one file `f` (124 bytes), captured once.
struct Fixture {
    tmp: tempfile::TempDir,
    store: PathBuf,
    checkpoint: String,
    /// The chunk object of `f`.
    chunk: ObjectId,
    content: Vec<u8>,
}

impl Fixture {
    fn new(compression: &str) -> Fixture {
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-hostile-")
            .tempdir()
            .expect("tempdir");
        let store = tmp.path().join("store");
        let ws = tmp.path().join("ws");
        fs::create_dir(&ws).unwrap();
        let content: Vec<u8> = (0..124u8).map(|i| b'a' + i % 26).collect();
        fs::write(ws.join("f"), &content).unwrap();
        ok(&[
            "init".to_string(),
            s(&store),
            "--root".into(),
            format!("ws={}", ws.display()),
            "--compression".into(),
            compression.into(),
        ]);
        let out = ok(&["capture".to_string(), s(&store), "--json".into()]);
        let v: Value = serde_json::from_str(&out).unwrap();
        let checkpoint = v["id"].as_str().unwrap().to_string();
        let chunk = ObjectId::of(&content);
        Fixture {
            tmp,
            store,
            checkpoint,
            chunk,
            content,
        }
    }

    fn s(&self) -> String {
        s(&self.store)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// The file of object `id` (raw or `.zst`, whichever exists).
    fn object_file(&self, id: &ObjectId) -> PathBuf {
        let hex = id.to_hex();
        let dir = self.store.join("objects").join(&hex[..2]);
        let raw = dir.join(&hex[2..]);
        if fs::symlink_metadata(&raw).is_ok() {
            raw
        } else {
            dir.join(format!("{}.zst", &hex[2..]))
        }
    }

    /// Replaces object `id`'s file with whatever `make` puts at the path.
    fn replace_object(&self, id: &ObjectId, make: impl FnOnce(&Path)) {
        let p = self.object_file(id);
        let dir = p.parent().unwrap();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
        fs::remove_file(&p).unwrap();
        make(&p);
    }

    /// Writes `data` as a raw object (whatever the store's compression) and returns its id.
    fn put_object(&self, data: &[u8]) -> ObjectId {
        let id = ObjectId::of(data);
        let hex = id.to_hex();
        fs::write(
            self.store.join("objects").join(&hex[..2]).join(&hex[2..]),
            data,
        )
        .unwrap();
        id
    }

    /// A new checkpoint record like the fixture's, whose root `ws` is `tree`.
    fn put_checkpoint(&self, tree: &ObjectId) -> String {
        let dir = self.store.join("checkpoints");
        let mut v: Value =
            serde_json::from_slice(&fs::read(dir.join(&self.checkpoint)).unwrap()).unwrap();
        v["roots"]["ws"]["tree"] = Value::String(tree.to_hex());
        v["message"] = "crafted".into();
        let bytes = serde_json::to_vec(&v).unwrap();
        let id = ObjectId::of(&bytes).to_hex();
        fs::write(dir.join(&id), &bytes).unwrap();
        id
    }

    /// A checkpoint whose root holds one file `f` of `size` bytes made of `chunks`.
    fn crafted_file(&self, size: u64, chunks: Vec<Chunk>) -> (String, ObjectId) {
        let tree = Tree {
            entries: vec![Entry {
                name: b"f".to_vec(),
                kind: EntryKind::File { chunks },
                mode: 0o644,
                uid: 0,
                gid: 0,
                mtime_ns: 1,
                size,
                xattrs: vec![],
                ctime_ns: 0,
                ino: 0,
            }],
        };
        let id = self.put_object(&tree.encode());
        (self.put_checkpoint(&id), id)
    }

    /// `cat`, `restore` and `verify` of `checkpoint` each refused with a line holding `words`.
    fn all_refuse(&self, checkpoint: &str, words: &[&str]) {
        let cat = format!("{checkpoint}:ws/f");
        refused(&["cat", &self.s(), &cat], words);
        let to = self.path(&format!("restored-{}", &checkpoint[..8]));
        refused(&["restore", &self.s(), checkpoint, "--to", &s(&to)], words);
        verify_finds(&["verify", &self.s(), checkpoint], words);
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn a_huge_sparse_object_is_refused_before_anything_is_allocated() {
    for compression in ["none", "zstd"] {
        let fx = Fixture::new(compression);
        fx.replace_object(&fx.chunk, |p| {
            let f = fs::File::create(p).unwrap();
            f.set_len(100 << 30).unwrap();
        });
        let hex = fx.chunk.to_hex();
        fx.all_refuse(&fx.checkpoint, &[&hex, "107374182400"]);
    }
}

#[test]
fn an_object_that_is_a_symlink_to_a_fifo_is_refused_without_blocking() {
    let fx = Fixture::new("none");
    let fifo = fx.path("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    fx.replace_object(&fx.chunk, |p| std::os::unix::fs::symlink(&fifo, p).unwrap());
    let hex = fx.chunk.to_hex();
    fx.all_refuse(&fx.checkpoint, &[&hex, "not a regular file"]);
    // A FIFO itself, in place of the object.
    fx.replace_object(&fx.chunk, |p| {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
    });
    fx.all_refuse(&fx.checkpoint, &[&hex, "not a regular file"]);
}

#[test]
fn a_symlinked_object_directory_is_a_verify_finding_and_is_not_followed() {
    let fx = Fixture::new("none");
    let hex = fx.chunk.to_hex();
    let fan = fx.store.join("objects").join(&hex[..2]);
    let elsewhere = fx.path("elsewhere");
    fs::rename(&fan, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &fan).unwrap();
    let fan_name = format!("objects/{}", &hex[..2]);
    verify_finds(&["verify", &fx.s()], &[&fan_name, "symlink"]);
    let cat = format!("{}:ws/f", fx.checkpoint);
    refused(&["cat", &fx.s(), &cat], &[&hex]);
    // Stray things where objects belong are findings too.
    fs::remove_file(&fan).unwrap();
    fs::rename(&elsewhere, &fan).unwrap();
    ok(&["verify", &fx.s()]);
    let fifo = fx.store.join("objects").join("ab").join("stray-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    verify_finds(&["verify", &fx.s()], &["objects/ab/stray-fifo", "FIFO"]);
}

#[test]
fn a_chunk_length_that_lies_is_refused() {
    let fx = Fixture::new("none");
    let hex = fx.chunk.to_hex();
    // The tree says 200 bytes, the object holds 124.
    let (cp, _) = fx.crafted_file(
        200,
        vec![Chunk {
            id: fx.chunk,
            len: 200,
        }],
    );
    fx.all_refuse(&cp, &[&hex, "124", "200"]);
    // The tree says 4 GiB: no chunk is that long, the tree is corrupt.
    let (cp, tree) = fx.crafted_file(
        u64::from(u32::MAX),
        vec![Chunk {
            id: fx.chunk,
            len: u32::MAX,
        }],
    );
    fx.all_refuse(&cp, &[&tree.to_hex()]);
}

#[test]
fn zero_length_chunk_refs_are_refused() {
    let fx = Fixture::new("none");
    let data = b"thirty-six bytes of file content....";
    assert_eq!(data.len(), 36);
    let id = fx.put_object(data);
    let mut chunks = vec![Chunk { id, len: 36 }];
    chunks.extend(std::iter::repeat(Chunk { id, len: 0 }).take(2000));
    let (cp, tree) = fx.crafted_file(36, chunks);
    fx.all_refuse(&cp, &[&tree.to_hex(), "length 0"]);
    assert_eq!(fx.content.len(), 124);
}
