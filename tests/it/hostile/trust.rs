//! Trust: nothing an agent writes is taken as a store, a record or a command. The agent
//! (`nobody`) plants a store in its mounted room (`STORE.json` with a runtime command, `lock`,
//! `run/mounts/main.json`); every documented command root runs on the room, from outside and
//! from inside it, works on the real store and never runs the planted command. A declared
//! fingerprint command never imports the agent's modules from root's working directory. And
//! `Store::open` refuses a store others own or can write, one on a mounted workspace and one
//! nested in another store, each with a one-line error naming why.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::support::*;

/// Generous bound on one command (they take well under a second here).
const LIMIT: Duration = Duration::from_secs(120);

/// A room `nobody` owns and has mounted, with a store planted in it whose runtime command
/// would create `marker` (in the temp dir, which `nobody` cannot write: only root running the
/// command could create it).
struct Planted {
    w: Workspace,
    marker: PathBuf,
}

impl Planted {
    fn new() -> Planted {
        let w = Workspace::for_nobody(&[], |room| {
            fs::create_dir(room.join("src")).unwrap();
            fs::write(room.join("src/a.txt"), b"one\n").unwrap();
        });
        let marker = w.tmp.path().join("planted-command-ran");
        let mut cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(w.store.join("STORE.json")).unwrap()).unwrap();
        cfg["runtime"] = serde_json::json!({
            "commands": [format!("touch {}", marker.display())]
        });
        let mounts = fs::read_to_string(w.store.join("run/mounts/main.json")).unwrap();
        // The agent writes them, through its mount, as itself.
        let room = w.room();
        nobody_ok(&format!(
            "set -e; cd {room}; mkdir -p run/mounts; : > lock\n\
             cat > STORE.json <<'CKPTFS_EOF'\n{cfg}\nCKPTFS_EOF\n\
             cat > run/mounts/main.json <<'CKPTFS_EOF'\n{mounts}\nCKPTFS_EOF\n"
        ));
        Planted { w, marker }
    }

    /// Runs `args` as root with working directory `cwd`, bounded.
    fn run_in(&self, cwd: &Path, args: &[&str]) -> Output {
        let mut c = cmd(args);
        c.current_dir(cwd);
        let child = c
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::sync::mpsc::channel();
        let tx = out.0;
        std::thread::spawn(move || {
            let _sent = tx.send(child.wait_with_output());
        });
        out.1
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("{args:?} hung"))
            .unwrap()
    }

    /// What `what` did that it must not: the planted command ran (the marker is removed, so
    /// the next command is judged on its own), root wrote in the room, a mount serves the
    /// planted store.
    fn misdeeds(&self, what: &str) -> Vec<String> {
        let mut bad = Vec::new();
        if self.marker.exists() {
            bad.push(format!("{what}: the planted runtime command ran as root"));
            let _ = fs::remove_file(&self.marker);
        }
        for e in walk(&self.w.room) {
            if fs::symlink_metadata(&e).is_ok_and(|m| m.uid() != NOBODY) {
                bad.push(format!("{what}: root wrote {} in the room", e.display()));
            }
        }
        for (mp, _) in self.planted_mounts() {
            bad.push(format!("{what}: {} serves the planted store", mp.display()));
        }
        bad
    }

    /// Mounts whose source names the room as their store.
    fn planted_mounts(&self) -> Vec<(PathBuf, String)> {
        let room = self.w.room();
        mounts()
            .into_iter()
            .filter(|(_, source)| {
                source.starts_with(&format!("ckptfs:{room}:"))
                    || source.starts_with(&format!("{room}#"))
            })
            .collect()
    }

    fn head(&self) -> Option<String> {
        head(&self.w.store, "main")
    }

    /// The agent changes a file, so a checkpoint has something to record.
    fn change(&self, name: &str) {
        nobody_ok(&format!("echo {name} > {}/src/{name}", self.w.room()));
    }
}

impl Drop for Planted {
    /// Detaches whatever serves the planted store (its daemons end with their mounts), even
    /// after a failed assert: those mounts are under /run/ckptfs, not the temp dir.
    fn drop(&mut self) {
        for (mp, _) in self.planted_mounts().into_iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&mp)
                .status();
        }
    }
}

/// Every path under `dir` (not `dir` itself), not following symlinks.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

/// `o` succeeded, else a line saying `what` failed.
fn succeeded(what: &str, o: &Output) -> Vec<String> {
    if o.status.success() {
        Vec::new()
    } else {
        vec![describe_output(what, o)]
    }
}

#[test]
fn a_planted_store_is_never_used_from_outside_the_room() {
    let p = Planted::new();
    let room = p.w.room();
    let outside = p.w.tmp.path().to_path_buf();
    let mounts_before = mounts_under(p.w.tmp.path());
    let mut bad = Vec::new();

    let o = p.run_in(&outside, &["exec", room, "--", "true"]);
    bad.extend(succeeded("exec ROOM", &o));
    bad.extend(p.misdeeds("exec ROOM"));

    let before = p.head();
    let o = p.run_in(&outside, &["turn", room, "--", "true"]);
    bad.extend(succeeded("turn ROOM", &o));
    bad.extend(p.misdeeds("turn ROOM"));
    if p.head() == before {
        bad.push("turn ROOM did not checkpoint the real store".into());
    }

    let o = p.run_in(&outside, &["fingerprint", room]);
    bad.extend(p.misdeeds("fingerprint ROOM"));
    if o.status.success() || !stderr(&o).contains("not trusted") {
        bad.push(describe_output("fingerprint ROOM was not refused", &o));
    }

    let mid = p.head();
    p.change("b.txt");
    let o = p.run_in(&outside, &["checkpoint", room, "-m", "real"]);
    bad.extend(succeeded("checkpoint ROOM", &o));
    bad.extend(p.misdeeds("checkpoint ROOM"));
    if p.head() == mid {
        bad.push("checkpoint ROOM did not checkpoint the real store".into());
    }

    let o = p.run_in(&outside, &["status", room, "--json"]);
    bad.extend(succeeded("status ROOM", &o));
    bad.extend(p.misdeeds("status ROOM"));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let row = &rows[0];
    if row.get("error").is_some() || row["branch"] != "main" {
        bad.push(format!(
            "status ROOM did not report the real workspace: {rows}"
        ));
    }

    if mounts_under(p.w.tmp.path()) != mounts_before {
        bad.push("mounts left behind under the temp dir".into());
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn a_planted_store_is_never_used_from_inside_the_room() {
    let p = Planted::new();
    let room = p.w.room();
    let src = p.w.room.join("src");
    let mounts_before = mounts_under(p.w.tmp.path());
    let mut bad = Vec::new();

    // Discovery from a directory in the room finds the real store through the mount table.
    let o = p.run_in(&src, &["exec", "--", "true"]);
    bad.extend(succeeded("cd ROOM/src && exec", &o));
    bad.extend(p.misdeeds("cd ROOM/src && exec"));

    let o = p.run_in(&p.w.room, &["exec", room, "--", "true"]);
    bad.extend(succeeded("cd ROOM && exec ROOM", &o));
    bad.extend(p.misdeeds("cd ROOM && exec ROOM"));

    let before = p.head();
    let o = p.run_in(&p.w.room, &["turn", room, "--", "true"]);
    bad.extend(succeeded("cd ROOM && turn ROOM", &o));
    bad.extend(p.misdeeds("cd ROOM && turn ROOM"));
    if p.head() == before {
        bad.push("cd ROOM && turn ROOM did not checkpoint the real store".into());
    }

    let o = p.run_in(&src, &["fingerprint"]);
    bad.extend(succeeded("cd ROOM/src && fingerprint", &o));
    bad.extend(p.misdeeds("cd ROOM/src && fingerprint"));
    if stdout(&o).contains("planted-command-ran") {
        bad.push(format!(
            "fingerprint showed the planted declaration: {}",
            stdout(&o)
        ));
    }

    let mid = p.head();
    p.change("b.txt");
    let o = p.run_in(&src, &["checkpoint", "-m", "real"]);
    bad.extend(succeeded("cd ROOM/src && checkpoint", &o));
    bad.extend(p.misdeeds("cd ROOM/src && checkpoint"));
    if p.head() == mid {
        bad.push("cd ROOM/src && checkpoint did not checkpoint the real store".into());
    }

    let o = p.run_in(&src, &["status", "--json"]);
    bad.extend(succeeded("cd ROOM/src && status", &o));
    bad.extend(p.misdeeds("cd ROOM/src && status"));

    if mounts_under(p.w.tmp.path()) != mounts_before {
        bad.push("mounts left behind under the temp dir".into());
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn a_fingerprint_command_never_imports_the_agents_module_from_the_cwd() {
    let w = Workspace::for_nobody(&[], |room| {
        fs::write(room.join("a.txt"), b"one\n").unwrap();
    });
    let marker = w.tmp.path().join("agent-module-ran");
    ok([
        "fingerprint",
        w.store(),
        "--command",
        &format!("{PYTHON} -m platform"),
    ]);
    nobody_ok(&format!(
        "cat > {}/platform.py <<'EOF'\nopen({:?}, 'w').write('x')\nprint('forged')\nEOF\n",
        w.room(),
        marker.display().to_string()
    ));
    let mut c = cmd(["fingerprint", w.store(), "--json"]);
    let o = c.current_dir(&w.room).output().unwrap();
    assert!(o.status.success(), "{}", describe_output("fingerprint", &o));
    assert!(!marker.exists(), "root ran the agent's platform.py");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let value = v["fingerprint"]["commands"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .to_string();
    assert!(value.contains("Linux"), "{value}");
    if !turns_can_run(&w) {
        return;
    }
    let mut c = cmd(["turn", w.room(), "--", "true"]);
    let o = c.current_dir(&w.room).output().unwrap();
    assert!(o.status.success(), "{}", describe_output("turn", &o));
    assert!(!marker.exists(), "the turn ran the agent's platform.py");
}

#[test]
fn a_program_others_can_write_is_never_declared() {
    let e = Env::new();
    let dir = open_tmp();
    let prog = dir.path().join("tool");
    fs::write(&prog, b"#!/bin/sh\necho hi\n").unwrap();
    chmod(&prog, 0o777);
    let line = refused(
        1,
        ["fingerprint", &e.s(), "--command", s(&prog)],
        &["not trusted", "writable by group or others"],
    );
    assert!(line.contains(s(&prog)), "{line}");
    // A program in a root of the store is the agent's.
    let in_root = e.roots["ws"].join("tool");
    fs::write(&in_root, b"#!/bin/sh\necho hi\n").unwrap();
    chmod(&in_root, 0o755);
    refused(
        1,
        ["fingerprint", &e.s(), "--command", s(&in_root)],
        &["inside the root"],
    );
}

/// `log STORE` refused with a line naming the store and every word of `why`.
fn refused_store(store: &Path, why: &[&str]) {
    let mut words = vec!["not trusted"];
    words.extend_from_slice(why);
    let line = refused(1, ["log", s(store)], &words);
    assert!(line.contains(s(store)), "{line}");
}

#[test]
fn open_refuses_a_store_nobody_owns() {
    let e = Env::new();
    chmod(e.tmp.path(), 0o755);
    chown_tree(&e.store, NOBODY);
    refused_store(&e.store, &["owned by uid 65534"]);
    // doctor says why, as a security finding, and runs nothing.
    let r = run(["doctor", &e.s(), "--json"]);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        describe_output("doctor", &r)
    );
    assert!(stdout(&r).contains("\"security\""), "{}", stdout(&r));
    // nobody itself may use it (its own store).
    let o = as_nobody(&[bin(), "log", &e.s()]);
    assert!(
        o.status.success(),
        "{}",
        describe_output("log as nobody", &o)
    );
}

#[test]
fn open_refuses_a_group_writable_store_and_doctor_still_repairs_it() {
    let e = Env::new();
    chmod(&e.store, 0o770);
    refused_store(&e.store, &["writable by group or others"]);
    let r = run(["doctor", &e.s(), "--json"]);
    assert!(stdout(&r).contains("permissions"), "{}", stdout(&r));
    ok(["recover", &e.s()]);
    ok(["log", &e.s()]);
}

#[test]
fn open_refuses_a_store_inside_a_mounted_workspace() {
    let w = Workspace::new(|room| fs::write(room.join("a.txt"), b"one\n").unwrap());
    let other = Env::new();
    let copy = w.room.join("copy");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&other.store)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    refused_store(&copy, &["ckptfs mount"]);
}

#[test]
fn open_refuses_a_store_nested_in_another_stores_upper_layer() {
    let e = Env::new();
    let nested = e.store.join("upper/main/x");
    fs::create_dir_all(nested.parent().unwrap()).unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&e.store)
        .arg(e.tmp.path().join("copy"))
        .status()
        .unwrap();
    assert!(st.success());
    fs::rename(e.tmp.path().join("copy"), &nested).unwrap();
    refused_store(&nested, &["inside the store", s(&e.store)]);
}

#[test]
fn a_declared_file_that_is_a_fifo_is_not_waited_for() {
    let e = Env::new();
    let fifo = e.tmp.path().join("agent");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    // Declaring prints the fingerprint too: neither may wait for a writer.
    let bound = Duration::from_secs(30);
    let (o, done) = run_bounded(["fingerprint", &e.s(), "--file", s(&fifo)], bound);
    assert!(done, "declaring blocked on a FIFO");
    assert!(o.status.success(), "{}", describe_output("declare", &o));
    let (o, done) = run_bounded(["fingerprint", &e.s(), "--json"], bound);
    assert!(done, "fingerprint blocked on a FIFO");
    assert!(o.status.success(), "{}", describe_output("fingerprint", &o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let field = v["fingerprint"]["files"][s(&fifo)].as_str().unwrap();
    assert!(field.starts_with("unreadable"), "{field}");
}
