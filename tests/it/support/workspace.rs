//! Live workspaces: `Workspace` (a store with one root `ws`, captured once and mounted as
//! branch `main`, unmounted on drop), on a temp dir or on a filesystem image of its own, or
//! with the room `nobody`'s (for an unprivileged agent); and
//! the processes the workspace tests run in them (a holder that says `ready`, `REWRITER`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::cli::{bin, cat, ok, ok_json, s};
use super::hostile::{open_tmp, NOBODY};
use super::mount::{eventually, mount_image, unmount_all_under};
use super::tree::chown_tree;

/// A store with one root `ws` at `<tmp>/room`, captured once on `main`, mounted writable.
/// Drop unmounts the workspace and everything else mounted below the temp dir.
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
        Workspace { tmp, store, room }.start(extra, &[], populate)
    }

    /// As `with_init_args`, for an agent that is not root: the temp dir is open to everyone
    /// (0755, so `nobody` reaches the room) and the room, once populated, is `nobody`'s (as an
    /// agent's room is), all of it, before the store is made and the room captured.
    pub fn for_nobody(extra: &[&str], populate: impl FnOnce(&Path)) -> Workspace {
        let tmp = open_tmp();
        let store = tmp.path().join("store");
        let room = tmp.path().join("room");
        Workspace { tmp, store, room }.start(extra, &[], |room| {
            populate(room);
            chown_tree(room, NOBODY);
        })
    }

    /// As `new`, with the store on a 512 MiB image made by `mkfs` (program and arguments) on
    /// a loop device in the temp dir, mounted with extra `mount` arguments. `None` (the test
    /// skipped, saying why) where the machine cannot mount a loop device.
    pub fn on_image(
        mkfs: &[&str],
        mount_args: &[&str],
        populate: impl FnOnce(&Path),
    ) -> Option<Workspace> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mnt = mount_image(tmp.path(), mkfs, 512 << 20)?;
        let store = mnt.join("store");
        let room = tmp.path().join("room");
        Some(Workspace { tmp, store, room }.start(&[], mount_args, populate))
    }

    /// Populates the room, inits the store, captures, mounts `main`.
    fn start(
        self,
        init_args: &[&str],
        mount_args: &[&str],
        populate: impl FnOnce(&Path),
    ) -> Workspace {
        fs::create_dir_all(&self.room).expect("mkdir room");
        populate(&self.room);
        let root = format!("ws={}", self.room());
        let mut args = vec!["init", self.store(), "--root", &root];
        args.extend_from_slice(init_args);
        ok(&args);
        ok(["capture", self.store(), "-m", "initial"]);
        let mut args = vec!["mount", self.store(), "--branch", "main"];
        args.extend_from_slice(mount_args);
        ok(&args);
        self
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
    /// The mountpoint of the image the store is on (with `on_image`).
    pub fn image(&self) -> PathBuf {
        self.store.parent().expect("store parent").to_path_buf()
    }

    /// `ckptfs checkpoint ROOM -m msg --json`: the report.
    pub fn checkpoint_json(&self, msg: &str) -> Value {
        ok_json(["checkpoint", self.room(), "-m", msg])
    }

    /// `ckptfs checkpoint ROOM -m msg`; returns the new checkpoint's full id.
    pub fn checkpoint(&self, msg: &str) -> String {
        self.checkpoint_json(msg)["id"]
            .as_str()
            .expect("id")
            .to_string()
    }

    /// The bytes of `ws/rel` in checkpoint `id` (`ckptfs cat`, which must succeed).
    pub fn cat(&self, id: &str, rel: &str) -> Vec<u8> {
        cat(&self.store, &format!("{id}:ws/{rel}"))
    }

    /// Mounts branch main again with `mount --fold-budget budget` (docs/workspaces.md).
    pub fn remount_with_fold_budget(&self, budget: &str) {
        ok(["umount", self.room()]);
        ok([
            "mount",
            self.store(),
            "--branch",
            "main",
            "--fold-budget",
            budget,
        ]);
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // Unmount whatever is still mounted under the temp dir, even after a failed assert.
        let _ = Command::new(bin()).args(["umount", s(&self.room)]).output();
        unmount_all_under(self.tmp.path());
    }
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

pub fn modified(p: &Path) -> SystemTime {
    fs::metadata(p).expect("stat").modified().expect("mtime")
}

/// Waits until a just-started `REWRITER` has rewritten `p` (Python can take a second to start
/// on a loaded machine; a checkpoint before that would see a file at rest).
pub fn wait_until_rewritten(p: &Path) {
    let before = modified(p);
    let t0 = Instant::now();
    while modified(p) == before {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the rewriter never wrote"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The checkpoint ids each live pin of `store` whose file name starts with `prefix` lists
/// (`lower-`: both lower views' pins; `lower-bare-`: the bare view's), in `run/pins/`. A pin
/// whose process is gone is left out.
pub fn live_pins(store: &Path, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for e in fs::read_dir(store.join("run/pins")).expect("run/pins") {
        let p = e.expect("pin entry").path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !name.starts_with(prefix) {
            continue;
        }
        let Ok(data) = fs::read(&p) else { continue };
        let v: Value = serde_json::from_slice(&data).expect("pin JSON");
        let pid = v["pid"].as_u64().expect("pid");
        if Path::new(&format!("/proc/{pid}")).exists() {
            out.push(
                v["checkpoints"]
                    .as_array()
                    .expect("checkpoints")
                    .iter()
                    .map(|i| i.as_str().expect("id").to_string())
                    .collect(),
            );
        }
    }
    out
}

/// Now, in ns since the epoch (to tell a warm-up that ended since).
pub fn now_ns() -> i64 {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    i64::try_from(d.as_nanos()).unwrap()
}

/// The record of the last overlay warm-up of `store` (`run/warm.json`), `Null` if none.
pub fn warm_record(store: &Path) -> Value {
    fs::read(store.join("run/warm.json"))
        .ok()
        .and_then(|d| serde_json::from_slice(&d).ok())
        .unwrap_or(Value::Null)
}

/// [`warm_record`] once one that ended after `since_ns` is there (waits up to 10 s).
pub fn warm_record_after(store: &Path, since_ns: i64) -> Value {
    let mut rec = Value::Null;
    eventually("an overlay warm-up ends", || {
        rec = warm_record(store);
        rec["finished_ns"].as_i64().is_some_and(|t| t > since_ns)
    });
    rec
}

/// The pids of the processes running now (zombies left out) whose arguments (`argv`,
/// without the program) satisfy `wanted`.
pub fn live_processes(wanted: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X");
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).skip(1).collect();
        if !zombie && wanted(&args) {
            out.push(pid);
        }
    }
    out
}

/// The pids of the overlay warm-ups (`ckptfs internal-warm`) of `store` running now.
pub fn warm_processes(store: &Path) -> Vec<u32> {
    let store = store.as_os_str().as_encoded_bytes();
    live_processes(|args| {
        args.first() == Some(&&b"internal-warm"[..]) && args.get(1) == Some(&store)
    })
}

/// Waits (up to 10 s) until the upper layers folds took out of their branches are removed:
/// `STORE/upper/.folded` is gone or empty. Its removal runs in a background process, so a
/// test that reads the whole store waits for it first.
pub fn wait_folded_removed(store: &Path) {
    eventually("the folded upper layers are removed", || {
        fs::read_dir(store.join("upper/.folded")).map_or(true, |mut d| d.next().is_none())
    });
}
