//! Workspaces without root (docs/rootless.md): a real ordinary account, made by the test with
//! a subordinate id range and a delegated cgroup, mounts, checkpoints, forks, switches, runs a
//! turn and unmounts its room at the room's own absolute path, in the user + mount namespace
//! ckptfs makes for it; the agent runs as a subordinate id and cannot touch the store, the
//! upper layers or the parked trees; a container made with `unshare` (no capability in the
//! machine's namespace) does the same; each missing piece is named in one line. In this
//! binary (one test at a time, after the `it` binary): a namespace copies every mount of the
//! machine, the other tests' workspaces too.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::serial;
use crate::support::operator::{holder_pids, Operator};
use crate::support::*;

/// A room (`room/notes.md`, `room/sub/b`) and a store with one root `ws` over it, captured
/// once and labelled `start`, all the user's. Returns the store's and the room's paths.
fn room_and_store(u: &Operator) -> (String, String) {
    let o = u.sh("mkdir -p room/sub && echo one > room/notes.md && echo x > room/sub/b");
    assert!(o.status.success(), "{}", describe_output("setup", &o));
    let (store, room) = (u.path("store"), u.path("room"));
    u.ok(&["init", &store, "--root", &format!("ws={room}")]);
    u.ok(&["capture", &store, "-q", "-m", "start", "--label", "start"]);
    (store, room)
}

/// `ckptfs exec ROOM -- sh -c LINE` as the user (the agent runs as the room's owner).
fn agent(u: &Operator, room: &str, line: &str) -> Output {
    u.run_delegated(&["exec", room, "--", "/bin/sh", "-c", line])
}

fn agent_ok(u: &Operator, room: &str, line: &str) -> String {
    let o = agent(u, room, line);
    assert!(o.status.success(), "{}", describe_output(line, &o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A recursive bind of `/` for a chroot, detached on drop. Never removed recursively: through
/// the bind that would be the machine's own files; only the then empty directory goes.
struct BoundRoot(PathBuf);

impl BoundRoot {
    fn new() -> BoundRoot {
        let dir = PathBuf::from(format!("/var/tmp/ckrl-chroot-{}", std::process::id()));
        fs::create_dir(&dir).expect("chroot directory");
        let guard = BoundRoot(dir);
        let o = Command::new("mount")
            .args(["--rbind", "/"])
            .arg(&guard.0)
            .output()
            .expect("mount --rbind");
        assert!(o.status.success(), "{}", describe_output("rbind", &o));
        guard
    }
}

impl Drop for BoundRoot {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(&self.0)
            .output();
        // rmdir alone: it fails, harmlessly, while anything is still mounted there.
        let _ = fs::remove_dir(&self.0);
    }
}

/// The files named `name` under `dir` (walked as root, symlinks not followed).
fn find_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().expect("type");
            if t.is_dir() {
                todo.push(e.path());
            } else if e.file_name() == name {
                out.push(e.path());
            }
        }
    }
    out
}

/// The mountpoints of `store`'s overlays in the mount table of process `pid`.
fn overlays_of(pid: u32, store: &str) -> Vec<String> {
    let source = format!(" - overlay ckptfs:{store}:");
    fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&source))
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

#[test]
fn an_ordinary_account_runs_workspaces_in_a_namespace_of_its_own() {
    let _s = serial();
    let u = Operator::new();
    let (store, room) = room_and_store(&u);
    let said = u.ok(&["mount", &store, "--branch", "main"]);
    assert!(said.contains(&room), "{said}");
    // Mounted in the account's namespace, at the room's own path; not in the machine's.
    assert!(!mounted(Path::new(&room)));
    let holders = holder_pids(u.uid);
    assert_eq!(holders.len(), 1, "one namespace holder: {holders:?}");
    assert_eq!(overlays_of(holders[0], &store), vec![room.clone()]);
    let ns = |p: u32| fs::read_link(format!("/proc/{p}/ns/mnt")).expect("ns");
    assert_ne!(ns(holders[0]), ns(std::process::id()));

    // The agent: the room's owner there (its uid, as recorded), a subordinate id on the
    // machine. Found by the room's path from outside the namespace.
    let id = agent_ok(
        &u,
        &room,
        &format!(
            "echo two >> {room}/notes.md && mkdir {room}/new && echo n > {room}/new/f && id -u"
        ),
    );
    assert_eq!(id.trim(), u.uid.to_string());
    let written = find_named(&Path::new(&store).join("upper"), "f");
    assert_eq!(written.len(), 1, "{written:?}");
    let machine_uid = u.subids.0 + u64::from(u.uid) - 1;
    assert_eq!(
        u64::from(fs::metadata(&written[0]).unwrap().uid()),
        machine_uid
    );

    // The agent cannot touch history: the store, its upper layers, the namespace's mounts
    // (the lower view, the parked trees); nor reach the store through a link of its own.
    let mounts = format!("/tmp/ckptfs-{}", u.uid);
    for line in [
        format!("touch {store}/x"),
        format!("rm -rf {store}/refs"),
        format!("chmod 0777 {store}"),
        format!("mv {store} {store}.moved"),
        format!("ls {store}/upper"),
        format!("echo x > {store}/upper/main/.top-ws/ws/notes.md"),
        format!("ls {mounts}"),
    ] {
        let o = agent(&u, &room, &line);
        assert!(!o.status.success(), "the agent could: {line}");
    }
    assert!(Path::new(&store).join("refs").is_dir());
    assert_eq!(
        fs::metadata(&store).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // A relative link out of the room is recorded as a link, never followed.
    agent_ok(&u, &room, &format!("ln -s ../store {room}/esc"));
    // A FIFO: the checkpoint refuses it in one line, at once (never opens it to block).
    agent_ok(&u, &room, &format!("mkfifo {room}/pipe"));
    let o = u.run_delegated(&["checkpoint", &room]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        describe_output("checkpoint with a FIFO", &o)
    );
    agent_ok(&u, &room, &format!("rm {room}/pipe"));
    // A directory swapped for a symlink to /etc, again and again, while checkpoints run:
    // none records anything of /etc.
    agent_ok(
        &u,
        &room,
        &format!("mkdir {room}/d && echo mine > {room}/d/own"),
    );
    let swapper = u
        .as_user(&u.bin, true)
        .args(["exec", &room, "--", "/bin/sh", "-c"])
        .arg(format!(
            "cd {room}; for i in $(seq 1 400); do mv d d.x; ln -s /etc d; rm d; mv d.x d; done"
        ))
        .spawn()
        .expect("swapper");
    let mut swapper = KillOnDrop(swapper);
    let mut recorded = Vec::new();
    for _ in 0..5 {
        let o = u.run_delegated(&["checkpoint", &room, "--json"]);
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
            recorded.extend(v["checkpoint"]["id"].as_str().map(str::to_string));
        }
    }
    let _ = swapper.0.wait();
    for id in &recorded {
        let o = u.run(&["cat", &store, &format!("{id}:ws/d/passwd")]);
        assert!(!o.status.success(), "checkpoint {id} recorded /etc/passwd");
    }

    let said = u.ok(&["checkpoint", &room, "-m", "turn 1"]);
    assert!(said.contains("checkpoint"), "{said}");
    assert_eq!(u.ok(&["cat", &store, "main:ws/notes.md"]), "one\ntwo\n");
    assert_eq!(u.ok(&["cat", &store, "main:ws/new/f"]), "n\n");
    let ls = u.ok(&["ls", &store, "main:ws", "--json"]);
    assert!(ls.contains("\"symlink\""), "{ls}");
    let status: serde_json::Value =
        serde_json::from_str(&u.ok(&["status", &room, "--json"])).expect("status --json");
    assert_eq!(status[0]["branch"], "main", "{status}");
    // From a shell of the account in the room's path (outside the namespace, where the path
    // is the directory under the mount), a command with no store argument finds it there.
    let o = u.sh(&format!("cd {room} && {} status --json", u.bin.display()));
    assert!(
        o.status.success(),
        "{}",
        describe_output("status in the room", &o)
    );
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).expect("status --json");
    assert_eq!(status[0]["branch"], "main", "{status}");

    // A fork, a switch to it and back, a turn on it: all at the same path.
    u.ok(&["fork", &store, "start", "retry"]);
    u.ok(&["switch", &room, "--to", "retry"]);
    assert_eq!(
        agent_ok(&u, &room, &format!("cat {room}/notes.md")),
        "one\n"
    );
    agent_ok(&u, &room, &format!("echo r > {room}/r"));
    let turn = u.ok(&[
        "turn",
        &store,
        "--branch",
        "retry",
        "--json",
        "--",
        "/bin/sh",
        "-c",
        &format!("echo t >> {room}/r"),
    ]);
    let turn: serde_json::Value = serde_json::from_str(&turn).expect("turn --json");
    assert_eq!(turn["outcome"], "ok", "{turn}");
    assert_eq!(turn["uid"], u.uid, "{turn}");
    assert_eq!(u.ok(&["cat", &store, "retry:ws/r"]), "r\nt\n");
    u.ok(&["switch", &room, "--to", "main"]);
    assert_eq!(
        agent_ok(&u, &room, &format!("cat {room}/notes.md")),
        "one\ntwo\n"
    );
    // The parked tree of retry is in the namespace, out of the agent's reach.
    let o = agent(&u, &room, &format!("find {mounts} -name r"));
    assert!(
        !o.status.success() || o.stdout.is_empty(),
        "{}",
        describe_output("find", &o)
    );

    u.ok(&["gc", &store]);
    let v = u.ok(&["verify", &store]);
    assert!(v.contains("0 findings"), "{v}");
    let said = u.ok(&["umount", &room]);
    assert!(said.contains("unmounted"), "{said}");
    // The namespace ends with the last workspace.
    eventually("the namespace holder exits", || {
        holder_pids(u.uid).is_empty()
    });
    assert!(!Path::new(&store).join("run/namespace.json").exists());
    // Everything recorded is there for the next mount.
    assert_eq!(u.ok(&["cat", &store, "retry:ws/r"]), "r\nt\n");
}

#[test]
fn a_container_made_with_unshare_runs_a_workspace_with_a_turn_and_a_switch() {
    let _s = serial();
    let u = Operator::new();
    let (store, room) = room_and_store(&u);
    u.ok(&["fork", &store, "start", "other"]);
    // The container: user, mount and pid namespaces made by the account itself, its
    // subordinate ids mapped (as podman or a rootless container runtime maps them); no
    // capability in the machine's namespace. ckptfs is its root and mounts there directly.
    let (start, count) = u.subids;
    let bin = u.bin.display().to_string();
    let script = format!(
        "set -e\n\
         {bin} mount {store} --branch main\n\
         {bin} exec {room} -- /bin/sh -c 'echo c >> {room}/notes.md; id -u'\n\
         {bin} turn {store} --branch main -- /bin/sh -c 'echo turned >> {room}/notes.md'\n\
         {bin} switch {room} --to other\n\
         {bin} exec {room} -- cat {room}/notes.md\n\
         {bin} switch {room} --to main\n\
         {bin} exec {room} -- cat {room}/notes.md\n\
         {bin} umount {room}\n"
    );
    let o = u
        .as_user("unshare", true)
        .arg("--map-root-user")
        .arg(format!("--map-users={start},1,{count}"))
        .arg(format!("--map-groups={start},1,{count}"))
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "/bin/sh",
            "-c",
            &script,
        ])
        .output()
        .expect("unshare");
    assert!(
        o.status.success(),
        "{}",
        describe_output("the container", &o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("{}\n", u.uid)),
        "the agent's id: {out}"
    );
    assert!(out.contains("one\nc\nturned\n"), "{out}");
    assert!(out.contains("one\n"), "{out}");
    // What the container recorded is the store's, read from outside it.
    assert_eq!(
        u.ok(&["cat", &store, "main:ws/notes.md"]),
        "one\nc\nturned\n"
    );
    // It made no namespace of its own (it is root of one already), and left no mount.
    assert!(holder_pids(u.uid).is_empty());
    // A store of another account of the machine shows there as the overflow uid's, like
    // root's: the store itself must be the container root's own, so it is refused.
    let other = PathBuf::from(format!("/var/tmp/ckrl-other-{}", std::process::id()));
    let _ = fs::remove_dir_all(&other);
    let o = Command::new(crate::support::cli::bin())
        .arg("init")
        .arg(&other)
        .args(["--root", "ws=/var/tmp/ckrl-other-room"])
        .output()
        .expect("init");
    assert!(o.status.success(), "{}", describe_output("init", &o));
    let o = Command::new("chown")
        .args(["-R", "daemon:daemon"])
        .arg(&other)
        .output()
        .expect("chown");
    assert!(o.status.success(), "{}", describe_output("chown", &o));
    let o = Command::new("chmod")
        .args(["-R", "go+rX"])
        .arg(&other)
        .output()
        .expect("chmod");
    assert!(o.status.success());
    let o = u
        .as_user("unshare", false)
        .args(["--map-root-user", "--mount", "--"])
        .arg(&u.bin)
        .arg("log")
        .arg(&other)
        .output()
        .expect("unshare");
    let _ = fs::remove_dir_all(&other);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        describe_output("log in the container", &o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not trusted"),
        "{}",
        describe_output("log", &o)
    );
}

#[test]
fn what_a_workspace_without_root_lacks_is_named_in_one_line() {
    let _s = serial();
    let u = Operator::new();
    let (store, room) = room_and_store(&u);
    let one_line_error = |o: &Output, what: &str, names: &str| {
        assert_eq!(o.status.code(), Some(1), "{}", describe_output(what, o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(names) && err.trim().lines().count() == 1,
            "{what}: {err}"
        );
    };
    // /dev/fuse closed to users.
    fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(0o600)).expect("chmod");
    let o = u.run(&["mount", &store, "--branch", "main"]);
    one_line_error(&o, "mount --branch without /dev/fuse", "/dev/fuse");
    let doctor = u.run(&["doctor", &store, "--json"]);
    let doctor: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("doctor --json");
    let rootless: Vec<&serde_json::Value> = doctor["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["check"] == "rootless")
        .collect();
    assert!(
        rootless
            .iter()
            .any(|f| f["subject"] == "/dev/fuse" && f["severity"] == "warning"),
        "{doctor}"
    );
    fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(holder_pids(u.uid).is_empty());

    // User namespaces closed to the account: in a chroot (here, of a recursive bind of /) the
    // kernel refuses them (EPERM), as a sysctl or a container's seccomp profile may.
    let chroot = BoundRoot::new();
    let o = Command::new("/usr/sbin/chroot")
        .arg(&chroot.0)
        .args(["/usr/sbin/runuser", "-u", &u.name, "--"])
        .arg(&u.bin)
        .args(["mount", &store, "--branch", "main"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&u.home)
        .output()
        .expect("chroot");
    drop(chroot);
    one_line_error(
        &o,
        "mount --branch in a chroot",
        "user namespaces are not open",
    );
    assert!(holder_pids(u.uid).is_empty());

    // No delegated cgroup: exec runs COMMAND and says its writes cannot be held; a turn
    // (which waits on its cgroup) refuses; a checkpoint works and says writers were not held.
    u.ok(&["mount", &store, "--branch", "main"]);
    let o = u.run(&[
        "exec",
        &room,
        "--",
        "/bin/sh",
        "-c",
        &format!("echo x >> {room}/notes.md"),
    ]);
    assert!(o.status.success(), "{}", describe_output("exec", &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no cgroup is delegated"));
    let o = u.run(&["turn", &store, "--branch", "main", "--", "/bin/true"]);
    one_line_error(
        &o,
        "turn without a delegated cgroup",
        "no cgroup is delegated",
    );
    let o = u.run(&["checkpoint", &room]);
    assert!(o.status.success(), "{}", describe_output("checkpoint", &o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("writers were not held"));
    u.ok(&["umount", &room]);

    // No subordinate ids: the namespace maps only the account; an agent as the room's owner
    // cannot run (exit 1, one line), as the account itself it can (--as-root there).
    let (start, count) = u.subids;
    let range = format!("{start}-{}", start + count - 1);
    let o = Command::new("usermod")
        .args(["--del-subuids", &range, "--del-subgids", &range, &u.name])
        .output()
        .expect("usermod");
    assert!(o.status.success(), "{}", describe_output("usermod", &o));
    u.ok(&["mount", &store, "--branch", "main"]);
    let o = agent(&u, &room, "true");
    one_line_error(&o, "exec without subordinate ids", "does not map");
    let o = u.run_delegated(&["exec", &room, "--as-root", "--", "/bin/sh", "-c", "id -u"]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "0",
        "{}",
        describe_output("exec --as-root", &o)
    );
    u.ok(&["umount", &room]);
    let doctor = u.run(&["doctor", &store, "--json"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("\"subordinate ids\""), "{doctor}");
}

/// examples/agent-room.sh as an ordinary account: the real agent CLI, three turns bound to
/// its native session, a native fork and a turn there, back on main, all in the account's
/// namespace; the agent runs as the account's recorded id, a subordinate one there.
fn the_agent_example_runs_without_root(agent: crate::support::agent::Agent) {
    let _s = serial();
    if !crate::support::agent::agent_installed(agent) {
        return;
    }
    let u = Operator::new();
    // The example and the scripted model server, where the account may read them.
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let open = open_tmp();
    for rel in ["examples/agent-room.sh", "tests/agents/model_server.py"] {
        let to = open.path().join(rel);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(src.join(rel), &to).unwrap();
        chmod(&to, 0o755);
        chmod(to.parent().unwrap(), 0o755);
    }
    let work = u.path("work");
    assert!(u.sh("mkdir work").status.success());
    let o = u
        .as_user("/bin/sh", true)
        .arg(open.path().join("examples/agent-room.sh"))
        .arg(&work)
        .env("CKPTFS", &u.bin)
        .env("AGENT", agent.name())
        .env("AGENT_USER", &u.name)
        .output()
        .expect("the example");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(out.matches(": ok, checkpoint").count(), 4, "{out}");
    assert!(out.contains("reply: Wrote README.md."), "{out}");
    assert!(out.contains("not found: ok"), "{out}");
}

#[test]
fn the_codex_example_runs_without_root() {
    the_agent_example_runs_without_root(crate::support::agent::Agent::Codex);
}

#[test]
fn the_claude_example_runs_without_root() {
    the_agent_example_runs_without_root(crate::support::agent::Agent::Claude);
}

#[test]
fn a_killed_namespace_holder_leaves_its_workspace_reachable_and_unmountable() {
    let _s = serial();
    let u = Operator::new();
    let (store, room) = room_and_store(&u);
    u.ok(&["mount", &store, "--branch", "main"]);
    agent_ok(&u, &room, &format!("echo after > {room}/after"));
    let holders = holder_pids(u.uid);
    assert_eq!(holders.len(), 1, "{holders:?}");
    let o = Command::new("kill")
        .args(["-KILL", &holders[0].to_string()])
        .output()
        .expect("kill");
    assert!(o.status.success());
    eventually("the holder is gone", || holder_pids(u.uid).is_empty());
    // The namespace lives on in the store's view daemons, and is entered through them.
    let status: serde_json::Value =
        serde_json::from_str(&u.ok(&["status", &room, "--json"])).expect("status --json");
    assert_eq!(status[0]["live"], true, "{status}");
    u.ok(&["checkpoint", &room, "-m", "after the holder"]);
    assert_eq!(u.ok(&["cat", &store, "main:ws/after"]), "after\n");
    u.ok(&["umount", &room]);
    assert!(!Path::new(&store).join("run/namespace.json").exists());
    // Mounted again: a new namespace.
    u.ok(&["mount", &store, "--branch", "main"]);
    assert_eq!(holder_pids(u.uid).len(), 1);
    assert_eq!(agent_ok(&u, &room, &format!("cat {room}/after")), "after\n");
    u.ok(&["umount", &room]);
}
