//! Helpers for workspace tests: a temp store with one root, the binary, and a guard that
//! unmounts the workspace even when the test fails.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ckptfs")
}

/// Runs ckptfs; returns the output (does not check the status).
pub fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run ckptfs")
}

/// Runs ckptfs and asserts success; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "ckptfs {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs a shell command and asserts success; returns stdout.
pub fn sh(cmd: &str) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("run sh");
    assert!(
        o.status.success(),
        "`{cmd}` failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A store with one root `ws` at `<tmp>/room`, captured once on `main`, mounted writable.
pub struct Workspace {
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
    pub room: PathBuf,
}

impl Workspace {
    /// Creates the room with `populate`, captures it, and mounts branch main over it.
    pub fn new(populate: impl FnOnce(&Path)) -> Workspace {
        Workspace::with_init_args(&[], populate)
    }

    /// As `new`, with extra `init` arguments (e.g. exclude rules).
    pub fn with_init_args(extra: &[&str], populate: impl FnOnce(&Path)) -> Workspace {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        fs::create_dir_all(&room).expect("mkdir room");
        populate(&room);
        let root = format!("ws={}", room.display());
        let mut args = vec!["init", s(&store), "--root", &root];
        args.extend_from_slice(extra);
        ok(&args);
        ok(&["capture", s(&store), "-m", "initial"]);
        let w = Workspace { tmp, store, room };
        ok(&["mount", s(&w.store), "--branch", "main"]);
        w
    }

    pub fn store(&self) -> &str {
        s(&self.store)
    }
    pub fn room(&self) -> &str {
        s(&self.room)
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.room.join(rel)
    }
    /// `ckptfs checkpoint ROOM -m msg`; returns the new checkpoint's full id.
    pub fn checkpoint(&self, msg: &str) -> String {
        let out = ok(&["checkpoint", self.room(), "-m", msg, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        v["id"].as_str().expect("id").to_string()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Unmount whatever is still mounted under the temp dir, even after a failed assert.
        let _ = Command::new(bin()).args(["umount", s(&self.room)]).output();
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let prefix = self.tmp.path().to_string_lossy().to_string();
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for m in points {
            let _ = Command::new("umount").arg("-l").arg(&m).output();
        }
    }
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// True if `path` has a mount of ours in mountinfo.
pub fn mounted(path: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(s(path)))
}

/// Makes a `size`-byte image in `dir` with `mkfs` (program and arguments; the image path
/// goes last) and mounts it on a loop device at `dir/fs` (`Workspace`'s drop unmounts it when
/// `dir` is its temp dir). `None`, saying why, where the machine cannot mount a loop device.
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

/// Kills a process on drop, even after a failed assert.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `argv`, a process that prints `ready` once set up, and waits for that line; `None`
/// if it ended without.
pub fn holder(argv: &[&str]) -> Option<KillOnDrop> {
    let mut c = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let c = KillOnDrop(c);
    (line.trim() == "ready").then_some(c)
}

/// Rewrites the file named by its argument in place, without pause, in one pwrite of its
/// whole length (as many 13-byte lines as it held at the start), with a counter on every
/// line: each state of the file is one number repeated, and every state is new content.
pub const REWRITER: &str = "import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
n = os.path.getsize(sys.argv[1]) // 13
i = 0
while True:
    os.pwrite(fd, (b'%012d\\n' % i) * n, 0)
    i += 1";

/// Whether every non-empty line of `data` is the same (one state of a `REWRITER`'s file).
pub fn lines_all_equal(data: &[u8]) -> bool {
    let mut lines = data.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let first = lines.next();
    first.is_some() && lines.all(|l| Some(l) == first)
}

pub fn modified(p: &Path) -> std::time::SystemTime {
    fs::metadata(p).expect("stat").modified().expect("mtime")
}

/// Waits until a just-started `REWRITER` has rewritten `p` (Python can take a second to start
/// on a loaded machine; a checkpoint before that would see a file at rest).
pub fn wait_until_rewritten(p: &Path) {
    let before = modified(p);
    let t0 = std::time::Instant::now();
    while modified(p) == before {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the rewriter never wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
