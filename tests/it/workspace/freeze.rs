//! `checkpoint --freeze-cgroup`: a writer that rewrites a file in place without pause is
//! captured whole (one of its states, never a mix), it runs on afterwards, and a checkpoint
//! killed while the cgroup is frozen leaves it frozen only until `recover`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// A fresh cgroup (v2 if mounted, else v1's freezer) holding a writer process; the writer is
/// killed and the cgroup thawed and removed on drop, even after a failed assert.
struct Cgroup {
    dir: PathBuf,
    writer: Option<Child>,
}

impl Cgroup {
    /// `None` (the test is skipped, saying why) only where no cgroup can be made at all: no
    /// cgroup2 or v1 freezer mount, or a read-only one (an unprivileged container).
    fn new(name: &str) -> Option<Cgroup> {
        let mounts = ckptfs::fs::mountinfo::mounts().unwrap();
        let v2 = mounts.iter().find(|m| m.fstype == "cgroup2");
        let v1 = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "freezer"));
        let Some(base) = v2.or(v1).map(|m| m.mountpoint.clone()) else {
            eprintln!("SKIPPED: no cgroup2 mount and no v1 freezer mount on this machine");
            return None;
        };
        let dir = base.join(format!("ckptfs-test-{}-{name}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => Some(Cgroup { dir, writer: None }),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EROFS | libc::EACCES | libc::EPERM)
                ) =>
            {
                eprintln!(
                    "SKIPPED: cannot create a cgroup here ({}: {e})",
                    dir.display()
                );
                None
            }
            Err(e) => panic!("mkdir {}: {e}", dir.display()),
        }
    }

    /// Starts `python3 -c CODE ARGS...` inside the cgroup.
    fn spawn(&mut self, code: &str, args: &[&Path]) {
        let child = Command::new("python3")
            .arg("-c")
            .arg(code)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        fs::write(self.dir.join("cgroup.procs"), child.id().to_string()).unwrap();
        self.writer = Some(child);
    }

    fn frozen(&self) -> bool {
        match fs::read_to_string(self.dir.join("cgroup.events")) {
            Ok(ev) => ev.lines().any(|l| l == "frozen 1"),
            Err(_) => fs::read_to_string(self.dir.join("freezer.state"))
                .unwrap()
                .trim()
                .eq("FROZEN"),
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("cgroup.freeze"), "0");
        let _ = fs::write(self.dir.join("freezer.state"), "THAWED");
        if let Some(mut c) = self.writer.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Asserts that checkpoint `id` (the `i`th) holds one whole state of a `REWRITER`'s `db.bin`.
fn assert_one_state(w: &Workspace, id: &str, i: usize) {
    let data = w.cat(id, "db.bin");
    assert_eq!(data.len(), 13 * 80000);
    assert!(
        lines_all_equal(&data),
        "checkpoint {i} captured a mix of two states of the file"
    );
}

/// A workspace whose `db.bin` a `REWRITER` in a fresh cgroup rewrites without pause; `None`
/// where no cgroup can be made.
fn rewriting_workspace(name: &str) -> Option<(Workspace, PathBuf, Cgroup)> {
    let w = Workspace::new(|room| fs::write(room.join("db.bin"), vec![b'\n'; 4096]).unwrap());
    let path = w.path("db.bin");
    fs::write(&path, (b"000000000000\n").repeat(80000)).unwrap();
    let mut cg = Cgroup::new(name)?;
    cg.spawn(REWRITER, &[&path]);
    wait_until_rewritten(&path);
    Some((w, path, cg))
}

#[test]
fn a_frozen_cgroup_is_captured_at_one_instant_and_thawed() {
    let Some((w, path, cg)) = rewriting_workspace("instant") else {
        return;
    };
    let dir = cg.dir.to_str().unwrap().to_string();
    for i in 0..5 {
        let v = ok_json([
            "checkpoint",
            w.room(),
            "-m",
            &format!("frozen {i}"),
            "--freeze-cgroup",
            &dir,
        ]);
        assert_one_state(&w, v["id"].as_str().unwrap(), i);
        // Thawed: the writer goes on.
        assert!(
            !cg.frozen(),
            "the cgroup is still frozen after checkpoint {i}"
        );
        let before = modified(&path);
        let t0 = Instant::now();
        while modified(&path) == before {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the writer did not run on"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // A directory that is not a cgroup is refused with its name, and nothing is recorded.
    let heads = ok(["log", w.store(), "--branch", "main"]);
    let o = run(["checkpoint", w.room(), "--freeze-cgroup", "/tmp"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--freeze-cgroup /tmp"), "{err}");
    assert_eq!(ok(["log", w.store(), "--branch", "main"]), heads);
}

#[test]
fn recover_thaws_a_cgroup_left_frozen_by_a_killed_checkpoint() {
    let Some((w, _path, cg)) = rewriting_workspace("recover") else {
        return;
    };
    let dir = cg.dir.to_str().unwrap().to_string();
    // Abort the checkpoint at its Nth I/O step until one dies while the cgroup is frozen
    // (the rewritten file's new chunk is written while the writers stand still).
    let mut crashed_frozen = false;
    for n in 1..40 {
        let o = run_fault(
            ["checkpoint", w.room(), "--freeze-cgroup", &dir],
            "abort",
            n,
        );
        if o.status.success() {
            break;
        }
        let frozen = cg.frozen();
        let rec = ok(["recover", w.store()]);
        if frozen {
            assert!(rec.contains("thawed cgroup"), "{rec}");
            assert!(!cg.frozen(), "recover left the cgroup frozen: {rec}");
            crashed_frozen = true;
            break;
        }
    }
    assert!(crashed_frozen, "no injected crash happened while frozen");
    assert!(ok(["checkpoint", w.room(), "--freeze-cgroup", &dir]).contains("checkpoint"));
}

/// The writers are held only for a second pass: a big file changed before the checkpoint is
/// read by the first pass, while they run, and not again while they stand still.
#[test]
fn the_frozen_pass_reads_only_what_changed_after_the_first() {
    let w = Workspace::new(|room| fs::write(room.join("small.txt"), b"base\n").unwrap());
    let Some(mut cg) = Cgroup::new("short") else {
        return;
    };
    cg.spawn("import time\nwhile True: time.sleep(1)", &[]);
    let dir = cg.dir.to_str().unwrap().to_string();
    let big = random_bytes(7, 24 << 20);
    fs::write(w.path("big.bin"), &big).unwrap();
    fs::write(w.path("small.txt"), b"changed\n").unwrap();
    // Past the clock tick the files were stamped in, so the first pass's keys are settled.
    std::thread::sleep(Duration::from_millis(30));
    let v = ok_json(["checkpoint", w.room(), "--freeze-cgroup", &dir]);
    assert!(v["files_read"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(
        v["held"]["files_read"], 0,
        "the frozen pass read again: {v}"
    );
    assert_eq!(v["held"]["bytes_read"], 0, "{v}");
    let id = v["id"].as_str().unwrap();
    let got = ok(["cat", w.store(), &format!("{id}:ws/small.txt")]);
    assert_eq!(got, "changed\n");
    assert!(
        w.cat(id, "big.bin") == big,
        "big.bin differs in the checkpoint"
    );
    assert!(!cg.frozen());
}

/// A write begun before the first pass can still be copying its bytes while that pass reads
/// them, and ends without changing the file's stat key. So a changed file that a process of
/// the cgroup holds open for writing is read again while frozen, even when its key looks
/// settled; a changed file nobody holds open is not.
#[test]
fn a_file_held_open_for_writing_is_read_again_while_frozen() {
    let w = Workspace::new(|room| fs::write(room.join("log.txt"), b"base\n").unwrap());
    let Some(mut cg) = Cgroup::new("open") else {
        return;
    };
    let log = w.path("log.txt");
    // Writes once, then holds the file open for writing, idle.
    cg.spawn(
        "import os, sys, time\n\
         fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)\n\
         os.write(fd, b'written\\n')\n\
         open(sys.argv[2], 'w').close()\n\
         while True: time.sleep(1)",
        &[&log, &w.tmp.path().join("ready")],
    );
    eventually("the writer wrote", || w.tmp.path().join("ready").exists());
    fs::write(w.path("other.txt"), b"closed\n").unwrap();
    // Past the clock tick both were stamped in, so the first pass's keys are settled.
    std::thread::sleep(Duration::from_millis(30));
    let dir = cg.dir.to_str().unwrap().to_string();
    let v = ok_json(["checkpoint", w.room(), "--freeze-cgroup", &dir]);
    assert_eq!(v["held"]["files_read"], 1, "only log.txt again: {v}");
    assert_eq!(v["held"]["bytes_read"], 8, "{v}");
    let id = v["id"].as_str().unwrap();
    assert_eq!(w.cat(id, "log.txt"), b"written\n");
    assert_eq!(w.cat(id, "other.txt"), b"closed\n");
    assert!(!cg.frozen());
}

/// `mount --freeze-cgroup`: recorded with the workspace, frozen by every checkpoint without
/// the flag (also `switch --checkpoint-first`), kept across the switch; a directory that is
/// not a cgroup is refused at mount with nothing mounted.
#[test]
fn a_cgroup_given_at_mount_is_frozen_by_every_checkpoint() {
    let w = Workspace::new(|room| fs::write(room.join("db.bin"), vec![b'\n'; 4096]).unwrap());
    let Some(mut cg) = Cgroup::new("mount") else {
        return;
    };
    let dir = cg.dir.to_str().unwrap().to_string();
    ok(["umount", w.room()]);
    let o = run([
        "mount",
        w.store(),
        "--branch",
        "main",
        "--freeze-cgroup",
        "/tmp",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--freeze-cgroup /tmp"), "{err}");
    assert!(!mounted(&w.room), "mounted despite the bad cgroup");
    ok([
        "mount",
        w.store(),
        "--branch",
        "main",
        "--freeze-cgroup",
        &dir,
    ]);
    let status: serde_json::Value = ok_json(["status", w.store()]);
    assert_eq!(status[0]["freeze_cgroups"][0], dir.as_str(), "{status}");
    let path = w.path("db.bin");
    fs::write(&path, (b"000000000000\n").repeat(80000)).unwrap();
    cg.spawn(REWRITER, &[&path]);
    wait_until_rewritten(&path);
    let whole = |id: &str| {
        let data = w.cat(id, "db.bin");
        data.len() == 13 * 80000 && lines_all_equal(&data)
    };
    for i in 0..3 {
        let v = ok_json(["checkpoint", w.room(), "-m", &format!("c{i}")]);
        assert!(v["held"]["micros"].as_u64().is_some(), "not held: {v}");
        assert!(
            whole(v["id"].as_str().unwrap()),
            "checkpoint {i} mixed two states"
        );
        assert!(!cg.frozen());
    }
    // The writer keeps the workspace dirty: the checkpoint taken first is held too. Its file
    // open for writing would keep main writable after the switch, so the switch refuses
    // unless it may end the writer (`--kill`, after the checkpoint).
    ok(["fork", w.store(), "main", "--name", "other"]);
    ok([
        "switch",
        w.room(),
        "--to",
        "other",
        "--checkpoint-first",
        "--kill",
    ]);
    let log: serde_json::Value = ok_json(["log", w.store(), "--branch", "main"]);
    let first = log[0]["id"].as_str().unwrap().to_string();
    assert_eq!(log[0]["message"], "before switch", "{log}");
    assert!(
        whole(&first),
        "the checkpoint before the switch mixed two states"
    );
    let status: serde_json::Value = ok_json(["status", w.store()]);
    assert_eq!(status[0]["branch"], "other");
    assert_eq!(status[0]["freeze_cgroups"][0], dir.as_str(), "{status}");
}

/// `ckptfs exec` runs the agent in a cgroup of the workspace's own: plain checkpoints hold
/// its writes, and `umount` removes the cgroup once the agent is gone.
#[test]
fn exec_runs_the_agent_in_a_cgroup_that_checkpoints_freeze() {
    let w = Workspace::new(|room| fs::write(room.join("db.bin"), vec![b'\n'; 4096]).unwrap());
    let path = w.path("db.bin");
    fs::write(&path, (b"000000000000\n").repeat(80000)).unwrap();
    let mut agent = KillOnDrop(
        cmd([
            "exec",
            "--as-root",
            w.room(),
            "--",
            "python3",
            "-c",
            REWRITER,
        ])
        .arg(&path)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));
    if agent.0.try_wait().unwrap().is_some() {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut agent.0.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains("cgroup"), "exec failed: {err}");
        eprintln!("SKIPPED: no cgroup can be made here: {err}");
        return;
    }
    let status: serde_json::Value = ok_json(["status", w.store()]);
    let cg = PathBuf::from(status[0]["freeze_cgroups"][0].as_str().unwrap());
    let procs = fs::read_to_string(cg.join("cgroup.procs")).unwrap();
    let pid = agent.0.id().to_string();
    assert!(
        procs.lines().any(|l| l == pid),
        "the agent ({pid}) is not in {}: {procs}",
        cg.display()
    );
    for i in 0..3 {
        let v = ok_json(["checkpoint", w.room(), "-m", &format!("c{i}")]);
        assert!(v["held"]["micros"].as_u64().is_some(), "not held: {v}");
        let id = v["id"].as_str().unwrap();
        let data = w.cat(id, "db.bin");
        assert_eq!(data.len(), 13 * 80000);
        assert!(lines_all_equal(&data), "checkpoint {i} mixed two states");
    }
    drop(agent);
    ok(["umount", w.room()]);
    assert!(
        !cg.exists(),
        "umount left the empty cgroup {}",
        cg.display()
    );
    let own = cg.parent().unwrap();
    assert!(!own.exists(), "umount left {} behind", own.display());
}

/// Thaws a filesystem on drop, in case a failed assert left it frozen (before the workspace
/// next to it is unmounted).
struct ThawOnDrop(PathBuf);

impl Drop for ThawOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("fsfreeze").arg("-u").arg(&self.0).output();
    }
}

/// A process outside any cgroup of ours, killed on drop.
struct Writer(Child);

impl Writer {
    /// A `REWRITER` of `path` that has started writing.
    fn rewriting(path: &Path) -> Writer {
        let w = Writer(
            Command::new("python3")
                .arg("-c")
                .arg(REWRITER)
                .arg(path)
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_until_rewritten(path);
        w
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether the filesystem of `dir` is frozen, without waiting on it: freezing a frozen
/// filesystem fails with EBUSY at once (one that is not is frozen and thawed again).
fn fs_frozen(dir: &Path) -> bool {
    let o = Command::new("fsfreeze")
        .arg("-f")
        .arg(dir)
        .output()
        .unwrap();
    if o.status.success() {
        assert!(Command::new("fsfreeze")
            .arg("-u")
            .arg(dir)
            .status()
            .unwrap()
            .success());
        return false;
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("busy"), "fsfreeze -f {}: {err}", dir.display());
    true
}

/// A workspace whose store is on a filesystem of its own: an ext4 image on a loop device in
/// the temp dir (unmounted by `Workspace`'s drop), mounted with `mount_args`, with its thaw
/// guard. The room holds `db.bin` for a `REWRITER`. `None` (the test skipped, saying why)
/// where the machine cannot mount a loop device.
fn workspace_on_own_fs(mount_args: &[&str]) -> Option<(ThawOnDrop, Workspace)> {
    let w = Workspace::on_image(&["mkfs.ext4", "-q", "-F"], mount_args, |room| {
        fs::write(room.join("db.bin"), (b"000000000000\n").repeat(80000)).unwrap()
    })?;
    Some((ThawOnDrop(w.image()), w))
}

/// `checkpoint --freeze-fs` holds a writer that is in no cgroup at all: every checkpoint
/// captures one whole state of a file rewritten in place without pause, and the writer runs
/// on after each.
#[test]
fn freeze_fs_holds_a_writer_outside_any_cgroup() {
    let Some((_thaw, w)) = workspace_on_own_fs(&[]) else {
        return;
    };
    let path = w.path("db.bin");
    let _writer = Writer::rewriting(&path);
    for i in 0..5 {
        let v = ok_json([
            "checkpoint",
            w.room(),
            "-m",
            &format!("frozen fs {i}"),
            "--freeze-fs",
        ]);
        assert!(v["held"]["micros"].as_u64().is_some(), "not held: {v}");
        assert_one_state(&w, v["id"].as_str().unwrap(), i);
        // Thawed: the writer goes on.
        wait_until_rewritten(&path);
    }
}

/// `mount --freeze-fs` is recorded (status shows it) and every plain checkpoint then holds the
/// writers; a store on the root filesystem is refused, naming it, with nothing mounted.
#[test]
fn freeze_fs_at_mount_is_recorded_and_the_root_filesystem_refused() {
    let Some((_thaw, w)) = workspace_on_own_fs(&["--freeze-fs"]) else {
        return;
    };
    let status: serde_json::Value = ok_json(["status", w.room()]);
    assert!(
        status.to_string().contains("\"freeze_fs\":true"),
        "{status}"
    );
    fs::write(w.path("new.txt"), b"after mount\n").unwrap();
    let v = ok_json(["checkpoint", w.room()]);
    assert!(v["held"]["micros"].as_u64().is_some(), "not held: {v}");
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        ok(["cat", w.store(), &format!("{id}:ws/new.txt")]),
        "after mount\n"
    );

    // On the root filesystem (where /var/tmp usually is): refused before anything happens.
    let var_tmp = Path::new("/var/tmp");
    let dev = |p: &Path| std::os::unix::fs::MetadataExt::dev(&fs::metadata(p).unwrap());
    if dev(var_tmp) != dev(Path::new("/")) {
        eprintln!("SKIPPED (root filesystem part): /var/tmp is not on the root filesystem");
        return;
    }
    let tmp = tempfile::tempdir_in(var_tmp).unwrap();
    let store = tmp.path().join("store");
    let room = tmp.path().join("room");
    fs::create_dir(&room).unwrap();
    fs::write(room.join("a.txt"), b"a\n").unwrap();
    ok([
        "init",
        s(&store),
        "--root",
        &format!("ws={}", room.display()),
    ]);
    ok(["capture", s(&store), "-m", "initial"]);
    let o = run(["mount", s(&store), "--branch", "main", "--freeze-fs"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--freeze-fs") && err.contains(s(&store)),
        "{err}"
    );
    assert!(!mounted(&room), "mounted despite the refusal");
    let _ = run(["umount", s(&room)]);
}

/// The state letter of process `pid` in /proc (T: stopped; None once reaped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// A checkpoint with `--freeze-fs`, stopped in its frozen pass (`CKPTFS_FAULT=stop:N`): the
/// store's filesystem is frozen and a writer in no cgroup stands still. Killed there, its
/// watchdog thaws the filesystem and the writer runs on. Where the watchdog is gone too
/// (frozen again here by hand), `recover` thaws it before anything else, without waiting on it.
#[test]
fn a_checkpoint_killed_while_the_filesystem_is_frozen_leaves_it_thawed() {
    let Some((thaw, w)) = workspace_on_own_fs(&[]) else {
        return;
    };
    let mnt = thaw.0.clone();
    let path = w.path("db.bin");
    let _writer = Writer::rewriting(&path);
    let err_file = w.tmp.path().join("checkpoint.err");
    let mut stopped = None;
    for n in 1..60 {
        let mut c = cmd(["checkpoint", w.room(), "--freeze-fs"])
            .env(FAULT_ENV, format!("stop:{n}"))
            .stderr(fs::File::create(&err_file).unwrap())
            .spawn()
            .unwrap();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                panic!("checkpoint ended ({st}) without stopping at step {n}");
            }
            if proc_state(c.id()) == Some('T') {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if fs::read_to_string(&err_file).unwrap().contains("(frozen)") {
            stopped = Some(c);
            break;
        }
        // Stopped before the freeze: let it finish, then try the next step.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        )
        .unwrap();
        assert!(c.wait().unwrap().success());
    }
    let mut c = stopped.expect("no checkpoint stopped in its frozen pass");
    assert!(fs_frozen(&mnt), "the store's filesystem is not frozen");
    let before = modified(&path);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(modified(&path), before, "the writer was not held");
    c.kill().unwrap();
    c.wait().unwrap();
    let t0 = Instant::now();
    while fs_frozen(&mnt) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the watchdog did not thaw the filesystem"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until_rewritten(&path);

    // The watchdog gone as well: frozen, and only recover's marker knows.
    assert!(Command::new("fsfreeze")
        .arg("-f")
        .arg(&mnt)
        .status()
        .unwrap()
        .success());
    let mut rec = cmd(["recover", w.store()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while rec.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = Command::new("fsfreeze").arg("-u").arg(&mnt).status();
            let _ = rec.wait();
            panic!("recover waited on the frozen filesystem");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = rec.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("thawed the filesystem"), "{text}");
    assert!(!fs_frozen(&mnt), "recover left it frozen");
    wait_until_rewritten(&path);
    assert!(ok(["checkpoint", w.room(), "--freeze-fs"]).contains("checkpoint"));
}

/// Holds `path` open (mode `a`, `r`) or mapped shared and writable with no descriptor left
/// (mode `map`), says `ready`, then sleeps.
const HOLDER: &str = r#"
import ctypes, os, sys, time
path, mode = sys.argv[1], sys.argv[2]
if mode == "map":
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    assert libc.mmap(None, 8192, 3, 1, fd, 0) not in (None, ctypes.c_void_p(-1).value)
    os.close(fd)
else:
    f = open(path, mode)
print("ready", flush=True)
time.sleep(120)
"#;

fn unheld_pids(w: &Workspace) -> Vec<u32> {
    let status: serde_json::Value = ok_json(["status", w.store()]);
    let mut pids: Vec<u32> = status[0]["unheld_writers"]
        .as_array()
        .unwrap_or_else(|| panic!("no unheld_writers: {status}"))
        .iter()
        .map(|p| p["pid"].as_u64().unwrap() as u32)
        .collect();
    pids.sort_unstable();
    pids
}

/// `status` names the processes writing into a workspace that its checkpoints do not hold:
/// outside its cgroups, with a file open for writing or mapped shared and writable. Not
/// readers, and not the agent `exec` started in the workspace's cgroup.
#[test]
fn status_names_the_writers_checkpoints_do_not_hold() {
    let w = Workspace::new(|room| {
        for f in ["log.txt", "agent.txt", "read.txt"] {
            fs::write(room.join(f), b"line\n").unwrap();
        }
        fs::write(room.join("map.bin"), vec![0u8; 8192]).unwrap();
    });
    let p = |rel: &str| w.path(rel).to_str().unwrap().to_string();
    let agent_file = p("agent.txt");
    let Some(agent) = holder(&[
        bin(),
        "exec",
        "--as-root",
        w.room(),
        "--",
        "python3",
        "-c",
        HOLDER,
        &agent_file,
        "a",
    ]) else {
        eprintln!("SKIPPED: `ckptfs exec` could not make a cgroup here");
        return;
    };
    let (log, read, map) = (p("log.txt"), p("read.txt"), p("map.bin"));
    let appender = holder(&["python3", "-c", HOLDER, &log, "a"]).unwrap();
    let _reader = holder(&["python3", "-c", HOLDER, &read, "r"]).unwrap();
    let mapper = holder(&["python3", "-c", HOLDER, &map, "map"]).unwrap();
    let mut expected = vec![appender.0.id(), mapper.0.id()];
    expected.sort_unstable();
    assert_eq!(unheld_pids(&w), expected, "agent {}", agent.0.id());
    let text = ok(["status", w.room()]);
    assert!(
        text.contains(&format!(
            "not held by checkpoints: pid {} (python3) writing {log}",
            appender.0.id()
        )),
        "{text}"
    );
    drop(appender);
    assert_eq!(unheld_pids(&w), vec![mapper.0.id()]);
}
