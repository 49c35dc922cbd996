//! Hostile namespaces: the agent (`nobody`) keeps a view of its branch that `switch` and
//! `umount` do not show. `unshare -Urm` (allowed to ordinary users) gives it a mount
//! namespace holding a copy of every mount, the workspace's overlay included, through which
//! it writes the branch's upper layer from anywhere (its cwd need not be in the room), and
//! which not even root can unmount. A switch or umount that would leave such a view refuses,
//! naming the process, or ends it with `--kill`; an upper layer another overlay still uses
//! is never mounted again (no `index=off` fallback). Nothing the agent writes once the
//! workspace left the branch lands in it.

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::*;

/// One test at a time: a namespace an agent makes copies every mount of the machine, the
/// workspaces of the other tests too, and holds them (as it should) against their switches.
use crate::serial;

fn populate(room: &Path) {
    fs::create_dir(room.join("sub")).unwrap();
    fs::write(room.join("sub/a.txt"), b"a\n").unwrap();
    fs::write(room.join("notes.md"), b"notes\n").unwrap();
}

/// A `nobody` process that waits for the file `go` to exist, then creates `after-<n>` in
/// `dir` (`cwd_inside`: its cwd, by a relative name) every 10 ms (errors ignored: a read-only tree refuses them). `unshare_first`: it
/// runs in a user and mount namespace of its own (`unshare -Urm`), holding a copy of every
/// mount, and `dir` is reached through that copy. Killed (and reaped) on drop, so it is gone
/// before the workspace is unmounted, even after a failed assert.
struct Agent {
    child: Child,
    pid: u32,
}

impl Agent {
    /// Spawns `cmd` (stdout piped) and waits for its first line, `ready`.
    fn spawn_ready(cmd: &mut std::process::Command) -> Agent {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the agent");
        let pid = child.id();
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("agent's ready line");
        let agent = Agent { child, pid };
        assert_eq!(line.trim(), "ready", "the agent did not start");
        agent
    }

    fn start(dir: &Path, go: &Path, unshare_first: bool, cwd_inside: bool) -> Agent {
        let script = format!(
            "import os, time\n\
             {chdir}\n\
             base = {base}\n\
             print('ready', flush=True)\n\
             n = 0\n\
             while True:\n\
             \x20   if os.path.exists({go:?}):\n\
             \x20       try:\n\
             \x20           with open(os.path.join(base, 'after-%d' % n), 'w') as f:\n\
             \x20               f.write('written after\\n')\n\
             \x20           n += 1\n\
             \x20       except OSError:\n\
             \x20           pass\n\
             \x20   time.sleep(0.01)\n",
            base = if cwd_inside {
                "'.'".to_string()
            } else {
                format!("{dir:?}")
            },
            chdir = if cwd_inside {
                format!("os.chdir({dir:?})")
            } else {
                "os.chdir('/')".to_string()
            },
        );
        let mut argv = vec![];
        if unshare_first {
            argv.extend(["unshare", "-Urm"]);
        }
        argv.extend([PYTHON, "-c", &script]);
        let agent = Agent::spawn_ready(&mut nobody_command(&argv));
        let pid = agent.pid;
        if unshare_first {
            let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/mnt")).unwrap();
            assert_ne!(
                ns(&pid.to_string()),
                ns("self"),
                "not in a namespace of its own"
            );
            let table = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
            assert!(
                table.contains(" overlay ckptfs:"),
                "its namespace holds no copy of the workspace:\n{table}"
            );
        }
        agent
    }

    /// Whether it ended (waits, bounded, for the kill to land).
    fn ended(&mut self) -> bool {
        wait_for(Duration::from_secs(20), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every `after-*` file under `dir` (the room, or an upper layer).
fn written_after(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p);
            } else if e.file_name().to_string_lossy().starts_with("after-") {
                out.push(p);
            }
        }
    }
    out
}

/// The branch the workspace at `room` shows (from its mount's `ckptfs:STORE:BRANCH` source).
fn shown_branch(room: &Path) -> String {
    let src = mount_source(room).expect("the room is mounted");
    src.rsplit(':').next().unwrap_or_default().to_string()
}

/// Gives a surviving agent time to write: the `go` file, then 50 of its 10 ms rounds (the
/// assertions that follow hold whatever the timing: nothing may be written at all).
fn let_it_write(go: &Path) {
    fs::write(go, b"").unwrap();
    std::thread::sleep(Duration::from_millis(500));
}

#[test]
fn switch_refuses_a_namespace_holder_and_kill_ends_it() {
    let _one = serial();
    let w = Workspace::for_nobody(&[], populate);
    ok(["fork", w.store(), "main", "alt"]);
    let go = w.tmp.path().join("go");
    let mut agent = Agent::start(&w.room, &go, true, false);
    let pid = format!("pid {}", agent.pid);
    refused(
        1,
        ["switch", w.room(), "--to", "alt"],
        &["another mount namespace", &pid, "--kill"],
    );
    // Refused with nothing changed: still main, writable.
    assert_eq!(shown_branch(&w.room), "main");
    fs::write(w.path("sub/root.txt"), b"root\n").unwrap();
    fs::remove_file(w.path("sub/root.txt")).unwrap();
    let r = ok_json(["switch", w.room(), "--to", "alt", "--kill", "--json"]);
    assert_eq!(r["to_branch"], "alt", "{r}");
    assert!(agent.ended(), "switch --kill left the agent running");
    let_it_write(&go);
    ok(["switch", w.room(), "--to", "main"]);
    assert_eq!(shown_branch(&w.room), "main");
    assert_eq!(written_after(&w.room), Vec::<PathBuf>::new());
    assert_eq!(written_after(&w.store.join("upper")), Vec::<PathBuf>::new());
}

#[test]
fn umount_refuses_a_namespace_holder_and_kill_ends_it() {
    let _one = serial();
    let w = Workspace::for_nobody(&[], populate);
    let go = w.tmp.path().join("go");
    let mut agent = Agent::start(&w.room, &go, true, false);
    let pid = format!("pid {}", agent.pid);
    refused(
        1,
        ["umount", w.room()],
        &["another mount namespace", &pid, "--kill"],
    );
    assert_eq!(shown_branch(&w.room), "main");
    ok(["umount", w.room(), "--kill"]);
    assert!(agent.ended(), "umount --kill left the agent running");
    assert!(!mounted(&w.room));
    let_it_write(&go);
    let upper = w.store.join("upper").join("main");
    assert_eq!(written_after(&upper), Vec::<PathBuf>::new());
    // The next mount is an ordinary one: with the index, nothing written after.
    let o = run(["mount", w.store(), "--branch", "main"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("index"), "{}", stderr(&o));
    let opts = mount_options(&w.room).expect("mounted");
    assert!(opts.contains("index=on"), "{opts}");
    assert_eq!(written_after(&w.room), Vec::<PathBuf>::new());
}

/// The agent is left behind in main's tree by its cwd (a switch allows that: the tree turns
/// read-only), then makes a namespace of its own there, holding a copy of main's old overlay
/// and of the workspace now shown. Switching back to main, which mounts main's upper layer
/// again, is refused naming it (today's code mounted that upper a second time, with
/// `index=off`); with `--kill` it is ended and main mounted with the index. Nothing it
/// wrote lands in main.
#[test]
fn a_held_upper_layer_is_never_mounted_again() {
    let _one = serial();
    let w = Workspace::for_nobody(&[], populate);
    ok(["fork", w.store(), "main", "alt"]);
    let go = w.tmp.path().join("go");
    let lp = "import os, time\nn = 0\nwhile True:\n    try:\n        with open('after-%d' % n, 'w') as f:\n            f.write('x')\n        n += 1\n    except OSError:\n        pass\n    time.sleep(0.01)\n";
    let script = format!(
        "cd {dir:?} && echo ready && while [ ! -e {go:?} ]; do sleep 0.05; done; exec unshare -Urm {PYTHON} -c \"$LOOP\"",
        dir = w.path("sub"),
    );
    let mut agent = Agent::spawn_ready(nobody_command(&[SH, "-c", &script]).env("LOOP", lp));
    let pid = format!("pid {}", agent.pid);
    let r = ok_json(["switch", w.room(), "--to", "alt", "--json"]);
    assert!(
        r["left_behind"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["pid"] == agent.pid),
        "{r}"
    );
    assert_eq!(r["left_behind_writable"], false, "{r}");
    let_it_write(&go);
    let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    assert!(
        wait_for(Duration::from_secs(20), || ns(&agent.pid.to_string())
            != ns("self")),
        "the agent made no namespace"
    );
    refused(
        1,
        ["switch", w.room(), "--to", "main"],
        &["another mount namespace", &pid, "--kill"],
    );
    assert_eq!(shown_branch(&w.room), "alt");
    ok(["switch", w.room(), "--to", "main", "--kill"]);
    assert!(agent.ended(), "switch --kill left the holder running");
    assert_eq!(shown_branch(&w.room), "main");
    let opts = mount_options(&w.room).expect("mounted");
    assert!(opts.contains("index=on"), "{opts}");
    assert_eq!(written_after(&w.room), Vec::<PathBuf>::new());
    assert_eq!(written_after(&w.store.join("upper")), Vec::<PathBuf>::new());
}

#[test]
fn a_file_open_for_writing_refuses_the_switch_and_kill_ends_it() {
    let _one = serial();
    let w = Workspace::for_nobody(&[], populate);
    ok(["fork", w.store(), "main", "alt"]);
    let path = w.path("notes.md");
    // nobody holds main's notes.md open for appending (and has appended: dirty), from a
    // namespace of its own.
    let script = format!(
        "import time; f = open({:?}, 'a'); f.write('more\\n'); f.flush(); print('ready', flush=True); time.sleep(600)",
        path.display().to_string()
    );
    let mut agent = Agent::spawn_ready(&mut nobody_command(&[
        "unshare", "-Urm", PYTHON, "-c", &script,
    ]));
    let pid = format!("pid {}", agent.pid);
    let log = || ok_json(["log", w.store(), "--branch", "main"]);
    let before = log();
    refused(
        1,
        ["switch", w.room(), "--to", "alt", "--checkpoint-first"],
        &[&pid, "--kill"],
    );
    // Refused before the checkpoint it asked for: nothing recorded.
    assert_eq!(log(), before);
    refused(1, ["umount", w.room()], &[&pid, "--kill"]);
    assert_eq!(shown_branch(&w.room), "main");
    ok([
        "switch",
        w.room(),
        "--to",
        "alt",
        "--checkpoint-first",
        "--kill",
    ]);
    assert!(agent.ended());
    assert_eq!(shown_branch(&w.room), "alt");
    assert_eq!(
        log().as_array().unwrap().len(),
        before.as_array().unwrap().len() + 1
    );
}

/// A mount namespace root made while the workspace was mounted (what a sandboxed service
/// started then holds: a copy of every mount), with nobody in the room: `switch` and
/// `umount` go on (the copy turns read-only with the workspace). But it keeps main's old
/// overlay, and so its upper layer, in use: the next `mount --branch main` is refused naming
/// its process (today's code mounted that upper a second time, with `index=off`), and with
/// `--kill` the process is ended and main mounted with the index.
#[test]
fn a_new_mount_of_an_upper_a_namespace_holds_is_refused() {
    let _one = serial();
    let w = Workspace::for_nobody(&[], populate);
    let mut service = Agent::spawn_ready(
        std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("echo ready; exec sleep 600")
            .current_dir("/"),
    );
    ok(["umount", w.room()]);
    assert!(!mounted(&w.room));
    let pid = format!("pid {}", service.pid);
    refused(
        1,
        ["mount", w.store(), "--branch", "main"],
        &["upper layer", "still used", &pid, "--kill"],
    );
    assert!(!mounted(&w.room), "mounted over a held upper layer");
    ok(["mount", w.store(), "--branch", "main", "--kill"]);
    assert!(service.ended(), "mount --kill left the holder running");
    let opts = mount_options(&w.room).expect("mounted");
    assert!(opts.contains("index=on"), "{opts}");
}
